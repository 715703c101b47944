/*
 * vmem-bench: measures a real vmemd on a temporary git repository against
 * baselines measured in the same run on the same machine: a raw Unix-socket
 * echo server (the floor for a round trip), one fdatasync of a log append
 * (the floor for a durable write) and, when installed, redis-server with
 * appendfsync always (the peer for durable writes). It prints figures and
 * ratios; it never fails on time (these machines are noisy).
 *
 * usage: vmem-bench [--vmemd PATH] [--seconds S] [--clients N]
 *                   [--content-bytes B]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

struct opts {
	const char *vmemd;
	double seconds;
	int clients;
	int content_bytes;
};

static char workdir[] = "/tmp/vmem-bench-XXXXXX";
static char vmem_sock[256], echo_sock[256];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "vmem-bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket");
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int wait_connect(const char *path)
{
	for (int i = 0; i < 500; i++) {
		int fd = connect_to(path);

		if (fd >= 0)
			return fd;
		usleep(10000);
	}
	fprintf(stderr, "vmem-bench: nothing answers on %s\n", path);
	exit(1);
}

/* One request line out, one response line back. The response is left
 * in buf (NUL-terminated) for callers that look at it. */
static void round_trip(int fd, const char *req, size_t len, char *buf,
		       size_t cap)
{
	size_t got = 0;

	if (write(fd, req, len) != (ssize_t)len)
		die("write");
	for (;;) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);

		if (n <= 0)
			die("read");
		got += (size_t)n;
		if (buf[got - 1] == '\n')
			break;
		if (got == cap - 1) {
			errno = EMSGSIZE;
			die("response too large");
		}
	}
	buf[got] = '\0';
}

/* ---- the echo baseline: a libuv server that writes back what it reads */

static void echo_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
	(void)h;
	b->base = malloc(s);
	b->len = b->base ? s : 0;
}

static void echo_written(uv_write_t *w, int status)
{
	(void)status;
	free(w->data);
	free(w);
}

static void echo_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	if (n > 0) {
		uv_buf_t out = uv_buf_init(b->base, (unsigned)n);
		int w = uv_try_write(s, &out, 1);

		if (w == n) {
			free(b->base);
			return;
		}
		uv_write_t *req = malloc(sizeof(*req));

		out = uv_buf_init(b->base + (w > 0 ? w : 0),
				  (unsigned)(n - (w > 0 ? w : 0)));
		req->data = b->base;
		uv_write(req, s, &out, 1, echo_written);
		return;
	}
	free(b->base);
	if (n < 0)
		uv_close((uv_handle_t *)s, (uv_close_cb)free);
}

static void echo_conn(uv_stream_t *server, int status)
{
	uv_pipe_t *c = malloc(sizeof(*c));

	(void)status;
	uv_pipe_init(server->loop, c, 0);
	if (uv_accept(server, (uv_stream_t *)c) == 0)
		uv_read_start((uv_stream_t *)c, echo_alloc, echo_read);
}

static pid_t start_echo(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		uv_loop_t *loop = uv_default_loop();
		uv_pipe_t srv;

		uv_pipe_init(loop, &srv, 0);
		if (uv_pipe_bind(&srv, echo_sock) < 0 ||
		    uv_listen((uv_stream_t *)&srv, 128, echo_conn) < 0)
			_exit(1);
		uv_run(loop, UV_RUN_DEFAULT);
		_exit(0);
	}
	return pid;
}

static pid_t start_vmemd(const struct opts *o)
{
	char log_path[300];
	pid_t pid;

	snprintf(log_path, sizeof(log_path), "%s/vmemd.log", workdir);
	pid = fork();
	if (pid == 0) {
		int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		execl(o->vmemd, o->vmemd, "--repo", workdir, "--socket",
		      vmem_sock, "--foreground", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void pin(pid_t pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(pid, sizeof(set), &set);
}

static void unpin(pid_t pid)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int i = 0; i < CPU_SETSIZE && i < 64; i++)
		CPU_SET(i, &set);
	sched_setaffinity(pid, sizeof(set), &set);
}

/* ---- measurement ---- */

struct sample {
	double *lat; /* seconds */
	size_t n, cap;
	double elapsed;
};

static void sample_add(struct sample *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->lat = realloc(s->lat, s->cap * sizeof(*s->lat));
		if (!s->lat)
			die("realloc");
	}
	s->lat[s->n++] = v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(struct sample *s, double p)
{
	size_t i;

	if (s->n == 0)
		return 0;
	qsort(s->lat, s->n, sizeof(*s->lat), cmp_double);
	i = (size_t)(p * (double)(s->n - 1));
	return s->lat[i] * 1e6;
}

typedef void (*request_fn)(int fd, unsigned long i, char *buf, size_t cap);

struct worker {
	const char *sock;
	request_fn fn;
	double seconds;
	unsigned long seed;
	struct sample s;
	pthread_t thread;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int fd = wait_connect(w->sock);
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	double start = now_s(), end = start + w->seconds;
	unsigned long i = w->seed;

	if (!buf)
		die("malloc");
	while (now_s() < end) {
		double t = now_s();

		w->fn(fd, i++, buf, cap);
		sample_add(&w->s, now_s() - t);
	}
	w->s.elapsed = now_s() - start;
	free(buf);
	close(fd);
	return NULL;
}

/* Run n clients for the given time; returns total ops/s and merges
 * latencies into *all. */
static double run_clients(const char *sock, request_fn fn, int n,
			  double seconds, struct sample *all)
{
	struct worker *w = calloc((size_t)n, sizeof(*w));
	double ops = 0;

	if (!w)
		die("calloc");
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){.sock = sock,
				       .fn = fn,
				       .seconds = seconds,
				       .seed = (unsigned long)i * 100003UL};
		pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		ops += (double)w[i].s.n / w[i].s.elapsed;
		for (size_t k = 0; k < w[i].s.n; k++)
			sample_add(all, w[i].s.lat[k]);
		free(w[i].s.lat);
	}
	free(w);
	return ops;
}

static const char get_req[] =
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.get\","
	"\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":2}}}\n";
static char *content; /* JSON-safe filler of content_bytes */

static void echo_fn(int fd, unsigned long i, char *buf, size_t cap)
{
	(void)i;
	round_trip(fd, get_req, sizeof(get_req) - 1, buf, cap);
}

static void get_fn(int fd, unsigned long i, char *buf, size_t cap)
{
	(void)i;
	round_trip(fd, get_req, sizeof(get_req) - 1, buf, cap);
	if (!strstr(buf, "\"result\":{")) {
		fprintf(stderr, "vmem-bench: bad get response: %.200s\n", buf);
		exit(1);
	}
}

/* Overwrites rotate over the z=2..4 coordinates of the whole space. */
static void store_fn(int fd, unsigned long i, char *buf, size_t cap)
{
	unsigned long k = i % (1000UL * 5 * 3);
	char *req;
	int len = asprintf(
		&req,
		"{\"jsonrpc\":\"2.0\",\"id\":%lu,\"method\":\"decision.store\","
		"\"params\":{\"coordinate\":{\"x\":%lu,\"y\":%lu,\"z\":%lu},"
		"\"content\":\"%s\",\"agent_id\":\"bench\",\"overwrite\":true}}"
		"\n",
		i, k / 15 + 1, k / 3 % 5 + 1, k % 3 + 2, content);

	if (len < 0)
		die("asprintf");
	round_trip(fd, req, (size_t)len, buf, cap);
	free(req);
	if (!strstr(buf, "\"result\":{")) {
		fprintf(stderr, "vmem-bench: store failed: %.300s\n", buf);
		exit(1);
	}
}

/* The floor of a durable write: append a record-sized block, fdatasync. */
static void fdatasync_floor(int n, size_t bytes, struct sample *s)
{
	char path[300];
	char *block = malloc(bytes);
	int fd;

	snprintf(path, sizeof(path), "%s/.git/fsync-floor", workdir);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0600);
	if (fd < 0 || !block)
		die("fsync floor");
	memset(block, 'x', bytes);
	for (int i = 0; i < n; i++) {
		double t = now_s();

		if (write(fd, block, bytes) != (ssize_t)bytes ||
		    fdatasync(fd) < 0)
			die("fsync floor write");
		sample_add(s, now_s() - t);
	}
	close(fd);
	unlink(path);
	free(block);
}

/* redis-server with appendfsync always, driven by redis-benchmark. */
static double redis_set_rate(int clients, int bytes)
{
	char cmd[1024];
	char line[512];
	double rate = -1;
	FILE *p;

	if (system("command -v redis-server >/dev/null 2>&1 && "
		   "command -v redis-benchmark >/dev/null 2>&1") != 0)
		return -1;
	snprintf(cmd, sizeof(cmd),
		 "cd %s && redis-server --port 0 --unixsocket %s/redis.sock "
		 "--save '' --appendonly yes --appendfsync always --dir %s "
		 "--daemonize yes --pidfile %s/redis.pid >/dev/null && "
		 "sleep 0.5 && redis-benchmark -s %s/redis.sock -t set "
		 "-n 40000 -c %d -d %d --csv 2>/dev/null; "
		 "kill $(cat %s/redis.pid) 2>/dev/null",
		 workdir, workdir, workdir, workdir, workdir, clients, bytes,
		 workdir);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char *q = strstr(line, "\"SET\",\"");

		if (q)
			rate = strtod(q + 7, NULL);
	}
	pclose(p);
	return rate;
}

static void usage(void)
{
	fprintf(stderr, "usage: vmem-bench [--vmemd PATH] [--seconds S] "
			"[--clients N] [--content-bytes B]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"vmemd", required_argument, NULL, 'd'},
		{"seconds", required_argument, NULL, 's'},
		{"clients", required_argument, NULL, 'c'},
		{"content-bytes", required_argument, NULL, 'b'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {.vmemd = getenv("VMEMD"),
			 .seconds = 3,
			 .clients = 16,
			 .content_bytes = 256};
	struct sample echo1 = {0}, get1 = {0}, echo1u = {0}, get1u = {0};
	struct sample echoN = {0}, getN = {0}, fsync1 = {0}, store1 = {0},
		      storeN = {0};
	double echo_rate, get_rate, store1_rate, storeN_rate, redis;
	pid_t vmemd, echo;
	char cmd[400], buf[4096];
	int ch, fd;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd':
			o.vmemd = optarg;
			break;
		case 's':
			o.seconds = atof(optarg);
			break;
		case 'c':
			o.clients = atoi(optarg);
			break;
		case 'b':
			o.content_bytes = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (!o.vmemd || o.seconds <= 0 || o.clients < 1 || o.content_bytes < 1)
		usage();
	signal(SIGPIPE, SIG_IGN);
	content = malloc((size_t)o.content_bytes + 1);
	memset(content, 'a', (size_t)o.content_bytes);
	content[o.content_bytes] = '\0';

	if (!mkdtemp(workdir))
		die("mkdtemp");
	snprintf(cmd, sizeof(cmd), "git init -q %s", workdir);
	if (system(cmd) != 0)
		die("git init");
	snprintf(vmem_sock, sizeof(vmem_sock), "%s/vmem.sock", workdir);
	snprintf(echo_sock, sizeof(echo_sock), "%s/echo.sock", workdir);
	vmemd = start_vmemd(&o);
	echo = start_echo();
	fd = wait_connect(vmem_sock);
	close(wait_connect(echo_sock));
	store_fn(fd, 5, buf, sizeof(buf)); /* ensure something to read */
	snprintf(cmd, sizeof(cmd),
		 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"decision.store\","
		 "\"params\":{\"coordinate\":{\"x\":1,\"y\":1,\"z\":2},"
		 "\"content\":\"bench\",\"agent_id\":\"bench\","
		 "\"overwrite\":true}}\n");
	round_trip(fd, cmd, strlen(cmd), buf, sizeof(buf));
	close(fd);

	printf("vmem-bench: %.1f s per run, %d clients, content %d bytes, "
	       "%ld CPUs\n\n",
	       o.seconds, o.clients, o.content_bytes,
	       sysconf(_SC_NPROCESSORS_ONLN));

	/* Round trips with server and client on the same vCPU (the stable
	 * placement), then unpinned (the scheduler decides). */
	pin(0, 0);
	pin(vmemd, 0);
	pin(echo, 0);
	run_clients(echo_sock, echo_fn, 1, o.seconds, &echo1);
	run_clients(vmem_sock, get_fn, 1, o.seconds, &get1);
	unpin(0);
	unpin(vmemd);
	unpin(echo);
	run_clients(echo_sock, echo_fn, 1, o.seconds, &echo1u);
	run_clients(vmem_sock, get_fn, 1, o.seconds, &get1u);
	echo_rate =
		run_clients(echo_sock, echo_fn, o.clients, o.seconds, &echoN);
	get_rate = run_clients(vmem_sock, get_fn, o.clients, o.seconds, &getN);

	fdatasync_floor(2000, (size_t)o.content_bytes + 200, &fsync1);
	store1_rate = run_clients(vmem_sock, store_fn, 1, o.seconds, &store1);
	storeN_rate =
		run_clients(vmem_sock, store_fn, o.clients, o.seconds, &storeN);
	redis = redis_set_rate(o.clients, o.content_bytes);

	printf("decision.get round trip, 1 client (us)        p50      p99\n");
	printf("  same vCPU   echo                        %8.1f %8.1f\n",
	       pct(&echo1, .5), pct(&echo1, .99));
	printf("  same vCPU   decision.get                %8.1f %8.1f   "
	       "ratio p50 %.2f (target <= 1.5)\n",
	       pct(&get1, .5), pct(&get1, .99),
	       pct(&get1, .5) / pct(&echo1, .5));
	printf("  unpinned    echo                        %8.1f %8.1f\n",
	       pct(&echo1u, .5), pct(&echo1u, .99));
	printf("  unpinned    decision.get                %8.1f %8.1f   "
	       "ratio p50 %.2f\n",
	       pct(&get1u, .5), pct(&get1u, .99),
	       pct(&get1u, .5) / pct(&echo1u, .5));
	printf("\nthroughput, %d clients (req/s)\n", o.clients);
	printf("  echo                     %10.0f\n", echo_rate);
	printf("  decision.get             %10.0f   ratio %.2f (target >= "
	       "0.8)\n",
	       get_rate, get_rate / echo_rate);
	printf("\ndurable decision.store\n");
	printf("  fdatasync of a log append, p50  %8.1f us\n",
	       pct(&fsync1, .5));
	printf("  1 client   %8.0f/s   p50 %8.1f us  p99 %8.1f us   ratio "
	       "p50/fdatasync %.2f (target <= 1.2)\n",
	       store1_rate, pct(&store1, .5), pct(&store1, .99),
	       pct(&store1, .5) / pct(&fsync1, .5));
	printf("  %d clients %8.0f/s   p50 %8.1f us  p99 %8.1f us\n", o.clients,
	       storeN_rate, pct(&storeN, .5), pct(&storeN, .99));
	if (redis > 0)
		printf("  redis-server appendfsync always SET, %d clients: "
		       "%.0f/s   ratio %.2f (target >= 1.0)\n",
		       o.clients, redis, storeN_rate / redis);
	else
		printf("  redis-server/redis-benchmark not installed: no peer "
		       "figure\n");

	fd = wait_connect(vmem_sock);
	snprintf(cmd, sizeof(cmd),
		 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.shutdown\"}"
		 "\n");
	round_trip(fd, cmd, strlen(cmd), buf, sizeof(buf));
	close(fd);
	waitpid(vmemd, NULL, 0);
	kill(echo, SIGTERM);
	waitpid(echo, NULL, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", workdir);
	if (system(cmd) != 0)
		fprintf(stderr, "vmem-bench: could not remove %s\n", workdir);
	free(content);
	return 0;
}

/*
 * vmemd: serves the decisions of one git working tree over a Unix socket.
 *
 * Start-up: find the tree, (daemonise), take the tree's lock, load and
 * replay the store, listen, report readiness. Stop: on SIGTERM, SIGINT or
 * server.shutdown, stop accepting, answer what is buffered, write every
 * acknowledged decision to its file and empty the log, then exit 0. A
 * second signal exits at once: the log still holds every acknowledged
 * write and the next start replays it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <git2.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "daemon.h"
#include "log.h"
#include "methods.h"
#include "protocol/decision.h"
#include "protocol/sockpath.h"

#define EXIT_USAGE	  2
#define EXIT_RUNNING	  3
#define DRAIN_DEADLINE_MS 10000

struct options {
	const char *repo;
	const char *socket;
	bool foreground;
	struct limits limits;
};

/* Where start-up failures go: stderr, or the daemonising parent. */
static int ready_fd = -1;

static void __attribute__((format(printf, 2, 3), noreturn))
fail_startup(int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg + 1, sizeof(msg) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(msg) - 2)
		n = (int)sizeof(msg) - 2;
	if (ready_fd >= 0) {
		msg[0] = (char)('0' + code);
		if (write(ready_fd, msg, (size_t)n + 1) < 0) {
			/* The parent is gone; nobody to tell. */
		}
	} else {
		fprintf(stderr, "vmemd: %s\n", msg + 1);
	}
	exit(code);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vmemd --repo PATH [--socket PATH] [--foreground]\n"
		"             [--max-x N] [--max-line BYTES] [--max-batch N]\n"
		"             [--max-connections N] [--output-backlog BYTES]\n"
		"             [--commit-delay-ms MS] [--commit-max-batch N]\n"
		"             [--line-deadline-ms MS]\n"
		"Serves the vmem decisions of the git working tree at PATH.\n");
}

static size_t parse_size(const char *opt, const char *s, size_t min, size_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "vmemd: %s must be an integer in %zu..%zu\n",
			opt, min, max);
		exit(EXIT_USAGE);
	}
	return (size_t)v;
}

static void parse_args(int argc, char **argv, struct options *o)
{
	enum {
		O_MAX_X = 256,
		O_MAX_LINE,
		O_MAX_BATCH,
		O_MAX_CONN,
		O_BACKLOG,
		O_COMMIT_DELAY,
		O_COMMIT_BATCH,
		O_LINE_DEADLINE,
	};
	static const struct option longopts[] = {
		{"repo", required_argument, NULL, 'r'},
		{"socket", required_argument, NULL, 's'},
		{"foreground", no_argument, NULL, 'f'},
		{"max-x", required_argument, NULL, O_MAX_X},
		{"max-line", required_argument, NULL, O_MAX_LINE},
		{"max-batch", required_argument, NULL, O_MAX_BATCH},
		{"max-connections", required_argument, NULL, O_MAX_CONN},
		{"output-backlog", required_argument, NULL, O_BACKLOG},
		{"commit-delay-ms", required_argument, NULL, O_COMMIT_DELAY},
		{"commit-max-batch", required_argument, NULL, O_COMMIT_BATCH},
		{"line-deadline-ms", required_argument, NULL, O_LINE_DEADLINE},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int ch;

	o->limits = (struct limits){
		.max_line = 1 << 20,
		.max_batch = 1000,
		.max_connections = 256,
		.output_backlog = 4 << 20,
		.max_depth = 64,
		.line_deadline_ms = 30000,
		.max_x = VMEM_MAX_X_DEFAULT,
		.commit_delay_ms = 1000,
		.commit_max_batch = 512,
	};
	while ((ch = getopt_long(argc, argv, "r:s:fhV", longopts, NULL)) !=
	       -1) {
		switch (ch) {
		case 'r':
			o->repo = optarg;
			break;
		case 's':
			o->socket = optarg;
			break;
		case 'f':
			o->foreground = true;
			break;
		case O_MAX_X:
			o->limits.max_x =
				(int)parse_size("--max-x", optarg, 1, 1000000);
			break;
		case O_MAX_LINE:
			o->limits.max_line = parse_size("--max-line", optarg,
							1024, (size_t)1 << 30);
			break;
		case O_MAX_BATCH:
			o->limits.max_batch =
				parse_size("--max-batch", optarg, 1, 100000);
			break;
		case O_MAX_CONN:
			o->limits.max_connections = parse_size(
				"--max-connections", optarg, 1, 65536);
			break;
		case O_BACKLOG:
			o->limits.output_backlog =
				parse_size("--output-backlog", optarg, 4096,
					   (size_t)1 << 30);
			break;
		case O_COMMIT_DELAY:
			o->limits.commit_delay_ms = (unsigned)parse_size(
				"--commit-delay-ms", optarg, 0, 3600000);
			break;
		case O_COMMIT_BATCH:
			o->limits.commit_max_batch = (unsigned)parse_size(
				"--commit-max-batch", optarg, 1, 1000000);
			break;
		case O_LINE_DEADLINE:
			o->limits.line_deadline_ms = (unsigned)parse_size(
				"--line-deadline-ms", optarg, 100, 3600000);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("vmemd %s\n", VMEMD_VERSION);
			exit(0);
		default:
			usage(stderr);
			exit(EXIT_USAGE);
		}
	}
	if (optind < argc) {
		usage(stderr);
		exit(EXIT_USAGE);
	}
	if (!o->repo)
		o->repo = getenv("VMEM_REPO");
	if (!o->repo || !*o->repo)
		o->repo = ".";
}

/*
 * Fork into the background. The parent waits for the child's report: an
 * empty close (or "0") is ready, else an exit code and a message.
 */
static void daemonize(void)
{
	int pfd[2];
	pid_t pid;
	char buf[1024];
	ssize_t n;
	size_t got = 0;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		fail_startup(1, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		fail_startup(1, "fork: %s", strerror(errno));
	if (pid > 0) {
		close(pfd[1]);
		while ((n = read(pfd[0], buf + got, sizeof(buf) - 1 - got)) >
			       0 ||
		       (n < 0 && errno == EINTR))
			if (n > 0)
				got += (size_t)n;
		if (got == 0) {
			fprintf(stderr,
				"vmemd: the daemon exited during start-up\n");
			_exit(1);
		}
		buf[got] = '\0';
		if (buf[0] == '0')
			_exit(0);
		fprintf(stderr, "vmemd: %s\n", buf + 1);
		_exit(buf[0] - '0');
	}
	close(pfd[0]);
	ready_fd = pfd[1];
	if (setsid() < 0)
		fail_startup(1, "setsid: %s", strerror(errno));
}

/* Point stdin/stdout at /dev/null and stderr at path (daemon mode). */
static void redirect_stdio(const char *log_path)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	int log = open(log_path,
		       O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
		       0600);

	if (null < 0 || log < 0)
		fail_startup(1, "cannot open %s: %s", log_path,
			     strerror(errno));
	dup2(null, STDIN_FILENO);
	dup2(null, STDOUT_FILENO);
	dup2(log, STDERR_FILENO);
	close(null);
	close(log);
}

static void report_ready(void)
{
	if (ready_fd < 0)
		return;
	if (write(ready_fd, "0", 1) < 0) {
		/* The parent is gone; keep serving. */
	}
	close(ready_fd);
	ready_fd = -1;
}

/* ---- stopping ---- */

static struct daemon the_daemon;
static uv_signal_t sig_term, sig_int, sig_hup;
static uv_timer_t stop_timer;

static void git_idle_cb(void *arg)
{
	struct daemon *d = arg;

	log_info("all decisions written and committed; stopping");
	uv_stop(d->loop);
}

static void store_idle_cb(struct store *s, void *arg)
{
	struct daemon *d = arg;

	(void)s;
	gitq_flush(&d->gitq, git_idle_cb, d);
}

/* HEAD, the branch or the index changed under us: look at the files. */
static void repo_changed_cb(void *ctx)
{
	struct daemon *d = ctx;

	log_debug("the repository changed; checking the decision files");
	store_check_files(&d->store);
}

/* Our own commit moved the branch and the index: not a change to react
 * to. */
static void committed_cb(void *ctx)
{
	watch_settle(ctx);
}

/* A change is in the index: commit it, and tell the subscribers. */
static void applied_cb(void *ctx, size_t slot, bool reloaded)
{
	struct daemon *d = ctx;
	const struct record *rec = d->store.index.slots[slot];
	struct coord c = index_coord(&d->store.index, slot);

	gitq_mark(&d->gitq, slot);
	subs_notify(&d->subs, &c,
		    reloaded ? SUBS_RELOADED
			     : (rec ? SUBS_STORED : SUBS_DELETED),
		    rec);
}

/* Hand the store's writes to the commit queue, starting with whatever
 * may differ from HEAD: every decision and every coordinate the log
 * replay changed (the commit keeps only real differences). */
static void start_commits(struct daemon *d)
{
	struct store *s = &d->store;

	for (size_t i = 0; i < s->index.n_slots; i++)
		if (s->index.slots[i])
			gitq_mark(&d->gitq, i);
	for (size_t i = 0; i < s->n_replayed; i++)
		gitq_mark(&d->gitq, s->replayed[i]);
	/* What differs is known only once the first job compared: run it
	 * now, so health's pending soon counts only real differences. */
	gitq_commit_soon(&d->gitq);
	s->on_applied = applied_cb;
	s->on_applied_ctx = d;
}

/* Wait for the connections to drain, then for the store to go idle. */
static void stop_timer_cb(uv_timer_t *t)
{
	struct daemon *d = t->data;
	bool late = uv_now(d->loop) - d->stop_started_ms > DRAIN_DEADLINE_MS;

	if (server_connections(&d->server) > 0 && !late)
		return;
	if (late) {
		log_warn("closing %zu connections that did not drain in %d ms",
			 server_connections(&d->server), DRAIN_DEADLINE_MS);
		for (struct conn *c = d->server.conns; c; c = c->next)
			conn_close(c);
	}
	uv_timer_stop(t);
	store_flush(&d->store, store_idle_cb, d);
}

void daemon_stop(struct daemon *d)
{
	if (d->stopping)
		return;
	d->stopping = true;
	d->stop_started_ms = uv_now(d->loop);
	log_info("stopping: answering buffered requests");
	server_stop(&d->server);
	uv_timer_start(&stop_timer, stop_timer_cb, 0, 10);
}

static void signal_cb(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	if (signum == SIGHUP) {
		log_info("SIGHUP: nothing to reload in this version");
		return;
	}
	if (d->stopping) {
		log_warn("second signal: exiting now; the write-ahead log "
			 "keeps every acknowledged write");
		_exit(1);
	}
	log_info("received %s", strsignal(signum));
	daemon_stop(d);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

static void log_quarantine(const struct vmdir_load_report *rep)
{
	for (size_t i = 0; i < rep->n_quarantined; i++)
		log_warn("quarantined %s -> %s: %s", rep->quarantined[i].path,
			 rep->quarantined[i].moved_to,
			 rep->quarantined[i].reason);
}

int main(int argc, char **argv)
{
	struct options o = {0};
	struct daemon *d = &the_daemon;
	char errmsg[1024];
	char sock[SOCKPATH_MAX + 1];
	char *log_path = NULL;
	int rc;

	parse_args(argc, argv, &o);
	signal(SIGPIPE, SIG_IGN);
	git_libgit2_init();
	json_object_seed(0);
	log_init(LOGL_INFO);

	d->limits = o.limits;
	rc = repo_open(&d->repo, o.repo, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "%s", errmsg);
	if (o.socket) {
		if (strlen(o.socket) > SOCKPATH_MAX)
			fail_startup(1, "socket path too long: %s", o.socket);
		snprintf(sock, sizeof(sock), "%s", o.socket);
	} else {
		rc = sockpath_resolve(d->repo.root, getenv("VMEM_SOCKET"),
				      getenv("XDG_RUNTIME_DIR"), getuid(), sock,
				      sizeof(sock));
		if (rc < 0)
			fail_startup(1, "socket path for %s: %s", d->repo.root,
				     strerror(-rc));
	}
	if (!o.foreground)
		daemonize();
	rc = repo_lock(&d->repo, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(rc == -EBUSY ? EXIT_RUNNING : 1, "%s", errmsg);
	if (!o.foreground) {
		if (asprintf(&log_path, "%s/vmemd.log", d->repo.statedir) < 0)
			fail_startup(1, "out of memory");
		redirect_stdio(log_path);
		free(log_path);
	}

	d->loop = uv_default_loop();
	if (stats_init(&d->stats, method_count()) < 0)
		fail_startup(1, "out of memory");
	d->started_ms = uv_now(d->loop);
	rc = store_open(&d->store, d->loop, &d->repo, o.limits.max_x,
			&d->loaded, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "cannot load the store: %s", errmsg);
	log_quarantine(&d->loaded);
	subs_init(&d->subs);
	if (leases_init(&d->leases, d->loop, &d->store.locks) < 0)
		fail_startup(1, "cannot set up leases");
	rc = gitq_init(&d->gitq, d->loop, &d->store, d->repo.root,
		       o.limits.commit_delay_ms, o.limits.commit_max_batch,
		       errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "cannot open the repository for commits: %s",
			     errmsg);
	start_commits(d);
	rc = watch_start(&d->watch, d->loop, d->repo.gitdir, d->repo.commondir,
			 repo_changed_cb, d);
	if (rc < 0)
		log_warn("cannot watch %s for changes (%s): use git.reload "
			 "after a checkout or a pull",
			 d->repo.gitdir, uv_strerror(rc));
	d->gitq.committed = committed_cb;
	d->gitq.committed_ctx = &d->watch;
	rc = server_listen(&d->server, d, sock, errmsg, sizeof(errmsg));
	if (rc < 0)
		fail_startup(1, "%s", errmsg);

	uv_signal_init(d->loop, &sig_term);
	uv_signal_init(d->loop, &sig_int);
	uv_signal_init(d->loop, &sig_hup);
	sig_term.data = sig_int.data = sig_hup.data = d;
	uv_signal_start(&sig_term, signal_cb, SIGTERM);
	uv_signal_start(&sig_int, signal_cb, SIGINT);
	uv_signal_start(&sig_hup, signal_cb, SIGHUP);
	uv_timer_init(d->loop, &stop_timer);
	stop_timer.data = d;

	log_info("serving %s on %s (%zu decisions)", d->repo.root, sock,
		 d->store.index.count);
	report_ready();
	uv_run(d->loop, UV_RUN_DEFAULT);

	watch_stop(&d->watch);
	gitq_close(&d->gitq);
	leases_close(&d->leases);
	store_close(&d->store);
	server_done(&d->server);
	uv_walk(d->loop, close_walk_cb, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	uv_loop_close(d->loop);
	subs_done(&d->subs);
	vmdir_load_report_done(&d->loaded);
	repo_done(&d->repo);
	stats_done(&d->stats);
	git_libgit2_shutdown();
	log_info("stopped");
	return d->exit_code;
}

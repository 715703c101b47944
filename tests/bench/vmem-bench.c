/*
 * vmem-bench: closed-loop load on a real vmemd over its real protocol
 * (newline-delimited JSON-RPC 2.0 on a Unix socket), started on a temporary
 * `git init` repository and stopped with SIGTERM at the end.
 *
 * Each row of the one output table is an operation (or a mix of them) run
 * by C connections that each keep D requests in flight for S seconds: a
 * response is matched to its request (in order, by id), its round trip
 * recorded, and the next request sent at once. One thread drives every
 * connection with epoll, so the load generator costs as little CPU as it
 * can on these 2-vCPU machines.
 *
 * With --compare the same harness, on the same connections and depths,
 * also measures the floors and a peer, in the same run: a libuv Unix-socket
 * server answering each request line with a line of a get response's size
 * (the echo floor), one write + fdatasync of a log append (the floor of a
 * durable write) and redis-server with appendfsync always (SET and GET of
 * the same value size, through our own minimal RESP client). Ratios against
 * them are printed last. Only ratios travel between machines.
 *
 * Experiences (issue 14): --exp-preload N first stores N experiences of
 * about 600 bytes of text from 20 agents; the mixes xstore, xretrieve
 * (limit 10, one tag), xsimilar and xstats load the experience methods;
 * their latencies inside the daemon (server.stats) are printed after the
 * rows, with xstore's ratios to decision.store (store) of the same run.
 * --restart then stops the daemon, times its next start-up (the log
 * replayed, every shard and decision file loaded) and prints its
 * resident memory against the content it holds.
 *
 * It never fails on time. It exits non-zero only on real errors: a server
 * that does not start, a broken connection, or an error response to one of
 * its requests.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define MAX_CLIENTS   1024
#define MAX_DEPTH     1024
#define MAX_ROWS      256
#define MAX_MIX_OPS   8
#define MAX_MIXES     16
#define MAX_IN	      (64u << 20)
#define PRELOAD_CONNS 4
#define PRELOAD_DEPTH 32
#define SEARCH_TAGS   50
#define BEFORE_ISSUES 10
#define SESSIONS      10000
#define NS	      1000000000ull
#define EXP_AGENTS    20
#define EXP_TAGS      40
#define EXP_VOCAB     4000

enum proto { P_JSON, P_LINE, P_RESP };

enum op {
	OP_GET,
	OP_EXISTS,
	OP_STORE,
	OP_STORE_NEW,
	OP_SEARCH,
	OP_RANGE,
	OP_BEFORE,
	OP_XSTORE,
	OP_XRETRIEVE,
	OP_XSIMILAR,
	OP_XSTATS,
	OP_MESSAGE, /* message.store into one of SESSIONS sessions */
	N_MIX_OPS,
	OP_ECHO = N_MIX_OPS,
	OP_PRELOAD,
	OP_RSET,
	OP_RGET,
	OP_RPRELOAD,
};

static const char *const op_names[] = {
	"get",	  "exists",  "store",	  "store_new", "search",  "range",
	"before", "xstore",  "xretrieve", "xsimilar",  "xstats",  "message",
	"echo",	  "preload", "redis SET", "redis GET", "preload",
};

struct mix {
	char label[128];
	int n;
	enum op op[MAX_MIX_OPS];
	unsigned weight[MAX_MIX_OPS];
	unsigned total;
};

struct opts {
	const char *vmemd;
	double seconds;
	int clients[64];
	int n_clients;
	int depth;
	int value_bytes;
	int preload;
	int max_x;
	struct mix mixes[MAX_MIXES];
	int n_mixes;
	bool compare;
	bool pin;
	int exp_preload; /* experiences stored before the rows */
	bool restart;	 /* time a restart, then the memory */
};

struct row {
	char label[128];
	int clients, depth;
	bool pinned;
	double tput, p50, p99, p999; /* ops/s, us */
	double cpu_us; /* the server's CPU time per answer; < 0: none */
};

struct buf {
	char *p;
	size_t len, off, cap;
};

/* One in-flight request, oldest first: responses come back in order. */
struct pend {
	uint64_t t; /* ns, when the request was queued to the socket */
	uint64_t id;
	enum op op;
};

struct conn {
	int fd;
	struct buf out, in;
	size_t scan; /* bytes of in already searched for a line end */
	struct pend *ring;
	unsigned head, count;
	uint64_t next_id;
	bool want_out;
};

struct result {
	uint64_t *lat; /* ns */
	size_t n, cap;
	uint64_t answered; /* every response of the run, warm-up included */
};

struct load {
	enum proto proto;
	const struct mix *mix;
	int clients, depth;
	uint64_t count; /* 0: timed */
	uint64_t issued, done, in_window;
	uint64_t warm_end, end;
	struct conn *conns;
	int ep;
	struct result *res;
	uint64_t rng;
};

/* Everything cleanup needs, reachable from main's single exit. */
static struct {
	char dir[64];
	char vmem_sock[128], echo_sock[128], redis_sock[128];
	pid_t vmemd, echo, redis;
	int max_x;
	int preload;
	int value_bytes;
	int preload_xs;		 /* issues touched by the preload */
	uint64_t next_fresh;	 /* next unused coordinate for store_new */
	size_t get_resp_len;	 /* for the echo server's replies */
	char *filler;		 /* value_bytes of words, no JSON escapes */
	char *vocab[EXP_VOCAB];	 /* the experiences' words */
	uint64_t exp_text_bytes; /* context + action + outcome stored */
	uint64_t exp_stored;
	cpu_set_t all_cpus;
	struct row rows[MAX_ROWS];
	int n_rows;
	int label_w; /* width of the table's first column */
} g = {.vmemd = -1, .echo = -1, .redis = -1};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static int buf_reserve(struct buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 4096;
	char *p;

	if (b->len + more <= b->cap)
		return 0;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int result_add(struct result *r, uint64_t v)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 65536;
		uint64_t *p = realloc(r->lat, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		r->lat = p;
		r->cap = cap;
	}
	r->lat[r->n++] = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile in microseconds; r->lat must be sorted. */
static double pct_us(const struct result *r, double p)
{
	size_t i;

	if (r->n == 0)
		return 0;
	i = (size_t)(p * (double)r->n + 0.999999);
	if (i > 0)
		i--;
	if (i >= r->n)
		i = r->n - 1;
	return (double)r->lat[i] / 1e3;
}

/* ---- coordinates and request lines ---- */

/* Preloaded decision k lives at z=2..4 (overwritable), 15 per issue. */
static void coord_of(uint64_t k, int *x, int *y, int *z)
{
	*x = (int)(k / 15) + 1;
	*y = (int)(k / 3 % 5) + 1;
	*z = (int)(k % 3) + 2;
}

/* Fresh coordinates for store_new: every cell of the issues after the
 * preloaded ones, in order, never reused within a run. */
static int fresh_coord(int *x, int *y, int *z)
{
	uint64_t f = g.next_fresh++;
	uint64_t xi = (uint64_t)g.preload_xs + 1 + f / 20;

	if (xi > (uint64_t)g.max_x)
		return -ENOSPC;
	*x = (int)xi;
	*y = (int)(f / 4 % 5) + 1;
	*z = (int)(f % 4) + 1;
	return 0;
}

static const char jhead[] = "{\"jsonrpc\":\"2.0\",\"id\":";

static int emit_store(struct buf *o, uint64_t id, uint64_t k, int x, int y,
		      int z, bool overwrite)
{
	int vb = g.value_bytes, n;
	size_t room = (size_t)vb + 256;

	if (buf_reserve(o, room) < 0)
		return -ENOMEM;
	n = snprintf(
		o->p + o->len, room,
		"%s%" PRIu64 ",\"method\":\"decision.store\",\"params\":"
		"{\"coordinate\":{\"x\":%d,\"y\":%d,\"z\":%d},"
		"\"content\":\"tag%02u %.*s\",\"agent_id\":\"bench\"%s}}\n",
		jhead, id, x, y, z, (unsigned)(k % SEARCH_TAGS), vb - 6,
		g.filler, overwrite ? ",\"overwrite\":true" : "");
	if (n < 0 || (size_t)n >= room)
		return -EOVERFLOW;
	o->len += (size_t)n;
	return 0;
}

/* A message of the decisions' value size, in session k % SESSIONS: a
 * durable write of the same size through the conversation kind. */
static int emit_message(struct buf *o, uint64_t id, uint64_t k)
{
	int vb = g.value_bytes, n;
	size_t room = (size_t)vb + 256;

	if (buf_reserve(o, room) < 0)
		return -ENOMEM;
	n = snprintf(o->p + o->len, room,
		     "%s%" PRIu64 ",\"method\":\"message.store\",\"params\":"
		     "{\"session_id\":\"00000000-0000-4000-8000-%012" PRIu64
		     "\",\"role\":\"user\",\"content\":\"tag%02u %.*s\","
		     "\"user_id\":\"bench\"}}\n",
		     jhead, id, k % SESSIONS, (unsigned)(k % SEARCH_TAGS),
		     vb - 6, g.filler);
	if (n < 0 || (size_t)n >= room)
		return -EOVERFLOW;
	o->len += (size_t)n;
	return 0;
}

static int emit_resp_set(struct buf *o, uint64_t k)
{
	int vb = g.value_bytes, n;
	size_t room = (size_t)vb + 128;
	char key[32];
	int kl = snprintf(key, sizeof(key), "k%" PRIu64, k);

	if (buf_reserve(o, room) < 0)
		return -ENOMEM;
	n = snprintf(o->p + o->len, room,
		     "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\ntag%02u %.*s\r\n",
		     kl, key, vb, (unsigned)(k % SEARCH_TAGS), vb - 6,
		     g.filler);
	if (n < 0 || (size_t)n >= room)
		return -EOVERFLOW;
	o->len += (size_t)n;
	return 0;
}

/* ---- experiences ---- */

/* A word of the vocabulary, skewed to the first ones (the product of two
 * uniform draws), as words of a language are. */
static const char *exp_word(uint64_t *rng)
{
	uint64_t a = rnd(rng) % EXP_VOCAB, b = rnd(rng) % EXP_VOCAB;

	return g.vocab[a * b / EXP_VOCAB];
}

/* Pronounceable made-up words (no stop word, no JSON escape). */
static int make_vocab(void)
{
	static const char *const syl[] = {
		"ka",  "ri", "to", "mu",  "sel", "vo", "dan", "pe",
		"lin", "go", "zu", "mar", "te",	 "fi", "ro",  "bex"};

	for (int i = 0; i < EXP_VOCAB; i++) {
		char w[32] = "";
		int v = i, n = 2 + i % 3;

		for (int k = 0; k < n; k++) {
			strcat(w, syl[v % 16]);
			v /= 16;
		}
		g.vocab[i] = strdup(w);
		if (!g.vocab[i])
			return -ENOMEM;
	}
	return 0;
}

/* Words up to about bytes bytes into o. */
static void exp_words(struct buf *o, uint64_t *rng, size_t bytes)
{
	size_t start = o->len;

	while (o->len - start < bytes) {
		const char *w = exp_word(rng);
		size_t n = strlen(w);

		if (o->len > start)
			o->p[o->len++] = ' ';
		memcpy(o->p + o->len, w, n);
		o->len += n;
	}
	g.exp_text_bytes += o->len - start;
}

static int emit_xstore(struct buf *o, uint64_t id, uint64_t *rng)
{
	static const size_t sizes[3] = {300, 150, 150};
	static const char *const names[3] = {"context", "action", "outcome"};
	unsigned tag = (unsigned)(rnd(rng) % EXP_TAGS * (rnd(rng) % EXP_TAGS) /
				  EXP_TAGS);
	int n;

	if (buf_reserve(o, 1024) < 0)
		return -ENOMEM;
	n = snprintf(o->p + o->len, 256,
		     "%s%" PRIu64 ",\"method\":\"experience.store\","
		     "\"params\":{\"agent_id\":\"agent-%02u\"",
		     jhead, id, (unsigned)(rnd(rng) % EXP_AGENTS));
	o->len += (size_t)n;
	for (int f = 0; f < 3; f++) {
		o->len +=
			(size_t)sprintf(o->p + o->len, ",\"%s\":\"", names[f]);
		exp_words(o, rng, sizes[f]);
		o->p[o->len++] = '"';
	}
	o->len += (size_t)sprintf(o->p + o->len,
				  ",\"tags\":[\"tag%02u\"%s],\"importance\":"
				  "%u}}\n",
				  tag, tag % 3 ? "" : ",\"common\"",
				  (unsigned)(rnd(rng) % 10) + 1);
	g.exp_stored++;
	return 0;
}

static int emit_xquery(struct buf *o, enum op op, uint64_t id, uint64_t *rng)
{
	unsigned agent = (unsigned)(rnd(rng) % EXP_AGENTS);
	int n = 0;

	if (buf_reserve(o, 512) < 0)
		return -ENOMEM;
	if (op == OP_XRETRIEVE) {
		n = snprintf(o->p + o->len, 512,
			     "%s%" PRIu64 ",\"method\":\"experience.retrieve\","
			     "\"params\":{\"agent_id\":\"agent-%02u\","
			     "\"tags\":[\"tag%02u\"],\"limit\":10}}\n",
			     jhead, id, agent, (unsigned)(rnd(rng) % EXP_TAGS));
	} else if (op == OP_XSTATS) {
		if (rnd(rng) % 2)
			n = snprintf(o->p + o->len, 512,
				     "%s%" PRIu64
				     ",\"method\":\"experience.stats\","
				     "\"params\":{\"agent_id\":\"agent-%02u\"}"
				     "}\n",
				     jhead, id, agent);
		else
			n = snprintf(o->p + o->len, 512,
				     "%s%" PRIu64
				     ",\"method\":\"experience.stats\"}\n",
				     jhead, id);
	} else {
		int words = 3 + (int)(rnd(rng) % 6);

		n = snprintf(o->p + o->len, 512,
			     "%s%" PRIu64 ",\"method\":\"experience."
			     "find_similar\",\"params\":{\"context\":\"",
			     jhead, id);
		for (int i = 0; i < words; i++)
			n += snprintf(o->p + o->len + n, 512 - (size_t)n,
				      "%s%s", i ? " " : "", exp_word(rng));
		n += snprintf(o->p + o->len + n, 512 - (size_t)n, "\"}}\n");
	}
	if (n < 0 || n >= 512)
		return -EOVERFLOW;
	o->len += (size_t)n;
	return 0;
}

/* Append one request for op to o. seq numbers the preload. */
static int emit(struct buf *o, enum op op, uint64_t id, uint64_t *rng,
		uint64_t seq)
{
	uint64_t k = rnd(rng) % (uint64_t)g.preload;
	int x, y, z, n = 0;
	char line[512];

	coord_of(k, &x, &y, &z);
	switch (op) {
	case OP_GET:
	case OP_ECHO:
	case OP_EXISTS:
		n = snprintf(line, sizeof(line),
			     "%s%" PRIu64 ",\"method\":\"decision.%s\","
			     "\"params\":{\"coordinate\":{\"x\":%d,\"y\":%d,"
			     "\"z\":%d}}}\n",
			     jhead, id, op == OP_EXISTS ? "exists" : "get", x,
			     y, z);
		break;
	case OP_STORE:
		return emit_store(o, id, k, x, y, z, true);
	case OP_PRELOAD:
		coord_of(seq, &x, &y, &z);
		return emit_store(o, id, seq, x, y, z, true);
	case OP_STORE_NEW:
		if (fresh_coord(&x, &y, &z) < 0)
			return -ENOSPC;
		return emit_store(o, id, g.next_fresh, x, y, z, false);
	case OP_SEARCH:
		n = snprintf(line, sizeof(line),
			     "%s%" PRIu64 ",\"method\":\"decision.search\","
			     "\"params\":{\"terms\":[\"tag%02u\"]}}\n",
			     jhead, id, (unsigned)(k % SEARCH_TAGS));
		break;
	case OP_RANGE:
		n = snprintf(line, sizeof(line),
			     "%s%" PRIu64
			     ",\"method\":\"decision.query_range\","
			     "\"params\":{\"x_range\":[%d,%d]}}\n",
			     jhead, id, x, x);
		break;
	case OP_BEFORE: {
		int xs = g.preload_xs < BEFORE_ISSUES ? g.preload_xs
						      : BEFORE_ISSUES;

		n = snprintf(line, sizeof(line),
			     "%s%" PRIu64
			     ",\"method\":\"decision.query_partial_order\","
			     "\"params\":{\"x_threshold\":%d,"
			     "\"y_threshold\":%d}}\n",
			     jhead, id, (int)(rnd(rng) % (uint64_t)xs) + 1,
			     (int)(rnd(rng) % 6) + 1);
		break;
	}
	case OP_XSTORE:
		return emit_xstore(o, id, rng);
	case OP_XRETRIEVE:
	case OP_XSIMILAR:
	case OP_XSTATS:
		return emit_xquery(o, op, id, rng);
	case OP_MESSAGE:
		return emit_message(o, id, rnd(rng));
	case OP_RSET:
		return emit_resp_set(o, k);
	case OP_RPRELOAD:
		return emit_resp_set(o, seq);
	case OP_RGET: {
		char key[32];
		int kl = snprintf(key, sizeof(key), "k%" PRIu64, k);

		n = snprintf(line, sizeof(line),
			     "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", kl, key);
		break;
	}
	default:
		return -EINVAL;
	}
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EOVERFLOW;
	if (buf_reserve(o, (size_t)n) < 0)
		return -ENOMEM;
	memcpy(o->p + o->len, line, (size_t)n);
	o->len += (size_t)n;
	return 0;
}

/* ---- response framing and checking ---- */

/* Length of the first complete response in c->in, 0 if incomplete,
 * -EPROTO if it cannot be a response. */
static long frame_len(enum proto proto, struct conn *c)
{
	const char *p = c->in.p + c->in.off, *e;
	size_t len = c->in.len - c->in.off;
	long hl;

	if (proto != P_RESP) {
		e = memchr(p + c->scan, '\n', len - c->scan);
		if (!e) {
			c->scan = len;
			return 0;
		}
		c->scan = 0;
		return (long)(e - p) + 1;
	}
	e = memchr(p, '\n', len);
	if (!e)
		return 0;
	hl = (long)(e - p) + 1;
	if (p[0] == '+' || p[0] == '-' || p[0] == ':')
		return hl;
	if (p[0] == '$') {
		long n = strtol(p + 1, NULL, 10);

		if (n < 0)
			return hl;
		if ((size_t)(hl + n + 2) > len)
			return 0;
		return hl + n + 2;
	}
	return -EPROTO;
}

static int bad_response(const struct pend *pd, const char *p, long n,
			const char *why)
{
	fprintf(stderr, "vmem-bench: %s request (id %" PRIu64 "): %s: %.*s\n",
		op_names[pd->op], pd->id, why, n > 400 ? 400 : (int)n, p);
	return -EPROTO;
}

static int check_response(enum proto proto, const struct pend *pd,
			  const char *p, long n)
{
	const char *q;
	uint64_t id = 0;

	if (!p || n <= 0)
		return -EPROTO;
	if (proto == P_LINE)
		return (size_t)n == g.get_resp_len
			       ? 0
			       : bad_response(pd, p, n, "wrong echo length");
	if (proto == P_RESP) {
		if (p[0] == '-')
			return bad_response(pd, p, n, "error response");
		if (pd->op == OP_RGET &&
		    (p[0] != '$' || p[1] == '-' ||
		     strtol(p + 1, NULL, 10) != g.value_bytes))
			return bad_response(pd, p, n, "unexpected GET reply");
		if (pd->op != OP_RGET && p[0] != '+')
			return bad_response(pd, p, n, "unexpected SET reply");
		return 0;
	}
	/* Our contents hold letters and spaces only, so these keys can only
	 * be the envelope's. */
	if ((size_t)n > sizeof(jhead) - 1 &&
	    memcmp(p, jhead, sizeof(jhead) - 1) == 0)
		q = p + sizeof(jhead) - 1;
	else if ((q = memmem(p, (size_t)n, "\"id\":", 5)) != NULL)
		q += 5;
	else
		return bad_response(pd, p, n, "no id");
	while (q < p + n && *q >= '0' && *q <= '9')
		id = id * 10 + (uint64_t)(*q++ - '0');
	if (id != pd->id)
		return bad_response(pd, p, n, "response out of order");
	if (memmem(p, (size_t)n, "\"error\":", 8))
		return bad_response(pd, p, n, "error response");
	if (!memmem(p, (size_t)n, "\"result\":", 9))
		return bad_response(pd, p, n, "no result");
	if (pd->op == OP_GET && memmem(p, (size_t)n, "\"result\":null", 13))
		return bad_response(pd, p, n, "preloaded decision missing");
	return 0;
}

/* ---- the closed-loop harness ---- */

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, i;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	for (i = 0; i < 1000; i++) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		close(fd);
		if (errno != EAGAIN)
			return -errno;
		usleep(1000);
	}
	return -EAGAIN;
}

static void conn_done(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out.p);
	free(c->in.p);
	free(c->ring);
	c->fd = -1;
}

static int conn_flush(struct load *ld, struct conn *c)
{
	struct epoll_event ev = {.data.ptr = c};
	ssize_t n;
	bool want;

	while (c->out.off < c->out.len) {
		n = write(c->fd, c->out.p + c->out.off,
			  c->out.len - c->out.off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		if (n < 0)
			break;
		c->out.off += (size_t)n;
	}
	if (c->out.off == c->out.len)
		c->out.off = c->out.len = 0;
	want = c->out.len > 0;
	if (want != c->want_out) {
		ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
		if (epoll_ctl(ld->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
			return -errno;
		c->want_out = want;
	}
	return 0;
}

static enum op pick_op(struct load *ld)
{
	const struct mix *m = ld->mix;
	unsigned r;
	int i;

	if (m->n == 1)
		return m->op[0];
	r = (unsigned)(rnd(&ld->rng) % m->total);
	for (i = 0; i < m->n - 1; i++) {
		if (r < m->weight[i])
			break;
		r -= m->weight[i];
	}
	return m->op[i];
}

static int issue(struct load *ld, struct conn *c, uint64_t t)
{
	struct pend *pd;
	enum op op = pick_op(ld);
	int rc;

	rc = emit(&c->out, op, c->next_id, &ld->rng, ld->issued);
	if (rc == -ENOSPC)
		fprintf(stderr, "vmem-bench: store_new ran out of fresh "
				"coordinates: raise --max-x\n");
	if (rc < 0)
		return rc;
	pd = &c->ring[(c->head + c->count) % (unsigned)ld->depth];
	*pd = (struct pend){.t = t, .id = c->next_id++, .op = op};
	c->count++;
	ld->issued++;
	return 0;
}

static bool issuing(const struct load *ld, uint64_t t)
{
	if (interrupted)
		return false;
	return ld->count ? ld->issued < ld->count : t < ld->end;
}

static int conn_read(struct load *ld, struct conn *c)
{
	ssize_t n;
	long fl;
	uint64_t t;
	int rc;

	if (buf_reserve(&c->in, 65536) < 0)
		return -ENOMEM;
	n = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0) {
		fprintf(stderr, "vmem-bench: server closed a connection\n");
		return -ECONNRESET;
	}
	c->in.len += (size_t)n;
	t = now_ns();
	while ((fl = frame_len(ld->proto, c)) > 0) {
		struct pend pd = c->ring[c->head];
		const char *p = c->in.p + c->in.off;

		if (c->count == 0) {
			fprintf(stderr,
				"vmem-bench: unsolicited response: "
				"%.*s\n",
				fl > 200 ? 200 : (int)fl, p);
			return -EPROTO;
		}
		rc = check_response(ld->proto, &pd, p, fl);
		if (rc < 0)
			return rc;
		c->in.off += (size_t)fl;
		c->head = (c->head + 1) % (unsigned)ld->depth;
		c->count--;
		ld->done++;
		/* Throughput counts every response inside the window; the
		 * latency only of requests also sent inside it. */
		if (t >= ld->warm_end && t < ld->end)
			ld->in_window++;
		if (ld->res && pd.t >= ld->warm_end && t < ld->end &&
		    result_add(ld->res, t - pd.t) < 0)
			return -ENOMEM;
		if (issuing(ld, t) && (rc = issue(ld, c, t)) < 0)
			return rc;
	}
	if (fl < 0) {
		struct pend pd = c->ring[c->head];

		return bad_response(&pd, c->in.p + c->in.off,
				    (long)(c->in.len - c->in.off),
				    "not a RESP reply");
	}
	if (c->in.off == c->in.len) {
		c->in.off = c->in.len = 0;
	} else if (c->in.off > 0) {
		memmove(c->in.p, c->in.p + c->in.off, c->in.len - c->in.off);
		c->in.len -= c->in.off;
		c->in.off = 0;
	}
	if (c->in.len > MAX_IN) {
		fprintf(stderr, "vmem-bench: response over %u bytes\n", MAX_IN);
		return -EMSGSIZE;
	}
	return conn_flush(ld, c);
}

/*
 * Run one closed loop: clients connections to sock, depth requests in
 * flight on each, for the timed window (after a short unrecorded warm-up)
 * or until count requests are answered. Latencies of requests sent and
 * answered inside the window go to res. Returns the number of responses
 * received inside the window (all of them with count).
 */
static int64_t run_load(const char *sock, enum proto proto,
			const struct mix *mix, int clients, int depth,
			double seconds, uint64_t count, struct result *res)
{
	struct load ld = {.proto = proto,
			  .mix = mix,
			  .clients = clients,
			  .depth = depth,
			  .count = count,
			  .res = res,
			  .ep = -1,
			  .rng = 0x9e3779b97f4a7c15ull ^ now_ns()};
	struct epoll_event evs[64];
	uint64_t t, warm, stop_wait = 60 * NS;
	int64_t rc = 0;
	int i, k;

	ld.conns = calloc((size_t)clients, sizeof(*ld.conns));
	if (!ld.conns)
		return -ENOMEM;
	for (i = 0; i < clients; i++)
		ld.conns[i].fd = -1;
	ld.ep = epoll_create1(EPOLL_CLOEXEC);
	if (ld.ep < 0) {
		rc = -errno;
		goto out;
	}
	for (i = 0; i < clients; i++) {
		struct conn *c = &ld.conns[i];
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

		c->ring = calloc((size_t)depth, sizeof(*c->ring));
		if (!c->ring) {
			rc = -ENOMEM;
			goto out;
		}
		c->next_id = 1;
		c->fd = connect_unix(sock);
		if (c->fd < 0) {
			rc = c->fd;
			fprintf(stderr, "vmem-bench: connect %s: %s\n", sock,
				strerror((int)-rc));
			goto out;
		}
		if (fcntl(c->fd, F_SETFL, O_NONBLOCK) < 0 ||
		    epoll_ctl(ld.ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
			rc = -errno;
			goto out;
		}
	}
	warm = count ? 0 : (uint64_t)(seconds * 0.1 * 1e9);
	if (warm > NS / 2)
		warm = NS / 2;
	t = now_ns();
	ld.warm_end = t + warm;
	ld.end = count ? UINT64_MAX : ld.warm_end + (uint64_t)(seconds * 1e9);
	for (k = 0; k < depth; k++)
		for (i = 0; i < clients && issuing(&ld, t); i++)
			if ((rc = issue(&ld, &ld.conns[i], t)) < 0)
				goto out;
	for (i = 0; i < clients; i++)
		if ((rc = conn_flush(&ld, &ld.conns[i])) < 0)
			goto out;
	for (;;) {
		int n;

		t = now_ns();
		if (ld.done == ld.issued && !issuing(&ld, t))
			break;
		if (interrupted) {
			rc = -EINTR;
			goto out;
		}
		if (!count && t > ld.end + stop_wait) {
			fprintf(stderr,
				"vmem-bench: %" PRIu64 " responses "
				"still missing 60 s after the run\n",
				ld.issued - ld.done);
			break;
		}
		n = epoll_wait(ld.ep, evs, 64, 50);
		if (n < 0 && errno != EINTR) {
			rc = -errno;
			goto out;
		}
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				rc = conn_read(&ld, c);
			else
				rc = conn_flush(&ld, c);
			if (rc < 0)
				goto out;
		}
	}
	rc = (int64_t)(count ? ld.done : ld.in_window);
	if (res)
		res->answered = ld.done;
out:
	for (i = 0; i < clients; i++)
		conn_done(&ld.conns[i]);
	free(ld.conns);
	if (ld.ep >= 0)
		close(ld.ep);
	return rc;
}

/* ---- servers ---- */

/* Echo floor: each request line is answered with one canned line the size
 * of a decision.get response. Runs in a child process. */
static char *echo_reply;

static void echo_alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *b)
{
	(void)h;
	b->base = malloc(s);
	b->len = b->base ? s : 0;
}

static void echo_written_cb(uv_write_t *w, int status)
{
	(void)status;
	free(w->data);
	free(w);
}

static void echo_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	size_t lines = 0, len = g.get_resp_len, i;
	uv_write_t *req = NULL;
	char *out = NULL;
	uv_buf_t ob;
	int w;

	if (n <= 0) {
		free(b->base);
		if (n < 0)
			uv_close((uv_handle_t *)s, (uv_close_cb)free);
		return;
	}
	for (i = 0; i < (size_t)n; i++)
		lines += b->base[i] == '\n';
	free(b->base);
	if (!lines)
		return;
	out = malloc(lines * len);
	if (!out)
		goto fail;
	for (i = 0; i < lines; i++)
		memcpy(out + i * len, echo_reply, len);
	ob = uv_buf_init(out, (unsigned)(lines * len));
	w = uv_try_write(s, &ob, 1);
	if (w == (int)ob.len) {
		free(out);
		return;
	}
	if (w < 0 && w != UV_EAGAIN)
		goto fail;
	if (w > 0)
		ob = uv_buf_init(out + w, ob.len - (unsigned)w);
	req = malloc(sizeof(*req));
	if (!req)
		goto fail;
	req->data = out;
	if (uv_write(req, s, &ob, 1, echo_written_cb) == 0)
		return;
	free(req);
fail:
	free(out);
	if (!uv_is_closing((uv_handle_t *)s))
		uv_close((uv_handle_t *)s, (uv_close_cb)free);
}

static void echo_conn_cb(uv_stream_t *server, int status)
{
	uv_pipe_t *c;

	if (status < 0)
		return;
	c = malloc(sizeof(*c));
	if (!c)
		return;
	uv_pipe_init(server->loop, c, 0);
	if (uv_accept(server, (uv_stream_t *)c) == 0)
		uv_read_start((uv_stream_t *)c, echo_alloc_cb, echo_read_cb);
	else
		uv_close((uv_handle_t *)c, (uv_close_cb)free);
}

static void child_defaults(void)
{
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
}

static int start_echo(void)
{
	pid_t pid;

	echo_reply = malloc(g.get_resp_len);
	if (!echo_reply)
		return -ENOMEM;
	memset(echo_reply, 'e', g.get_resp_len);
	echo_reply[0] = '{';
	echo_reply[g.get_resp_len - 2] = '}';
	echo_reply[g.get_resp_len - 1] = '\n';
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		uv_loop_t loop;
		uv_pipe_t srv;

		child_defaults();
		signal(SIGPIPE, SIG_IGN);
		if (uv_loop_init(&loop) < 0 ||
		    uv_pipe_init(&loop, &srv, 0) < 0 ||
		    uv_pipe_bind(&srv, g.echo_sock) < 0 ||
		    uv_listen((uv_stream_t *)&srv, 1024, echo_conn_cb) < 0)
			_exit(1);
		uv_run(&loop, UV_RUN_DEFAULT);
		_exit(0);
	}
	g.echo = pid;
	return 0;
}

/* Copy the end of a server's log to stderr: the directory holding it is
 * removed on exit. */
static void show_log(const char *log)
{
	char path[160], tail[2048];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", g.dir, log);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fseek(f, -(long)sizeof(tail) + 1, SEEK_END) < 0)
		rewind(f);
	n = fread(tail, 1, sizeof(tail) - 1, f);
	tail[n] = '\0';
	fclose(f);
	fprintf(stderr, "--- end of %s ---\n%s\n---\n", log, tail);
}

/* Wait until something answers on path, or the child died (then *pid is
 * reaped and set to -1). log names its log file in the work directory. */
static int wait_server(const char *what, pid_t *pid, const char *path,
		       const char *log, double seconds)
{
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	int fd, st;

	while (!interrupted && now_ns() < end) {
		fd = connect_unix(path);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if (waitpid(*pid, &st, WNOHANG) == *pid) {
			*pid = -1;
			fprintf(stderr,
				"vmem-bench: %s exited at start-up (%s %d)\n",
				what, WIFEXITED(st) ? "exit" : "signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			if (log)
				show_log(log);
			return -ECHILD;
		}
		usleep(10000);
	}
	if (interrupted)
		return -EINTR;
	fprintf(stderr, "vmem-bench: %s did not answer on %s\n", what, path);
	if (log)
		show_log(log);
	return -ETIMEDOUT;
}

static pid_t spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			      0600);

		child_defaults();
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static int start_vmemd(const char *path)
{
	char log[128], maxx[16];
	char *argv[] = {(char *)path, "--repo",	   g.dir,
			"--socket",   g.vmem_sock, "--foreground",
			"--max-x",    maxx,	   NULL};

	snprintf(log, sizeof(log), "%s/vmemd.log", g.dir);
	snprintf(maxx, sizeof(maxx), "%d", g.max_x);
	g.vmemd = spawn(argv, log);
	if (g.vmemd < 0)
		return -errno;
	return wait_server("vmemd", &g.vmemd, g.vmem_sock, "vmemd.log", 30);
}

static bool in_path(const char *prog)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	while (path && *path) {
		size_t n = strcspn(path, ":");

		snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, prog);
		if (access(buf, X_OK) == 0)
			return true;
		path += n + (path[n] == ':');
	}
	return false;
}

static int start_redis(void)
{
	char dir[128], log[128];
	char *argv[] = {"redis-server", "--port",     "0",
			"--unixsocket", g.redis_sock, "--unixsocketperm",
			"700",		"--dir",      dir,
			"--appendonly", "yes",	      "--appendfsync",
			"always",	"--save",     "",
			"--daemonize",	"no",	      NULL};

	snprintf(dir, sizeof(dir), "%s/redis", g.dir);
	snprintf(log, sizeof(log), "%s/redis.log", g.dir);
	if (mkdir(dir, 0700) < 0)
		return -errno;
	g.redis = spawn(argv, log);
	if (g.redis < 0)
		return -errno;
	return wait_server("redis-server", &g.redis, g.redis_sock, "redis.log",
			   30);
}

/* Stop a child: sig, then SIGKILL after grace seconds. Returns its wait
 * status, or -1 if it had to be killed. */
static int stop_child(pid_t *pid, int sig, double grace)
{
	uint64_t end = now_ns() + (uint64_t)(grace * 1e9);
	int st = 0;

	if (*pid <= 0)
		return 0;
	kill(*pid, sig);
	while (waitpid(*pid, &st, WNOHANG) == 0) {
		if (now_ns() > end) {
			kill(*pid, SIGKILL);
			waitpid(*pid, &st, 0);
			*pid = -1;
			return -1;
		}
		usleep(10000);
	}
	*pid = -1;
	return st;
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* ---- CPU placement for --pin ---- */

static void set_all_tasks(pid_t pid, const cpu_set_t *set)
{
	char path[64];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d) {
		sched_setaffinity(pid, sizeof(*set), set);
		return;
	}
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			sched_setaffinity((pid_t)atoi(de->d_name), sizeof(*set),
					  set);
	closedir(d);
}

static void place(pid_t server, bool pinned)
{
	cpu_set_t one;
	int cpu = 0;

	if (!pinned) {
		sched_setaffinity(0, sizeof(g.all_cpus), &g.all_cpus);
		if (server > 0)
			set_all_tasks(server, &g.all_cpus);
		return;
	}
	while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &g.all_cpus))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	sched_setaffinity(0, sizeof(one), &one);
	if (server > 0)
		set_all_tasks(server, &one);
}

/* ---- rows ---- */

static void print_header(void)
{
	printf("%-*s %7s %5s %11s %9s %9s %9s %10s\n", g.label_w, "op/mix",
	       "clients", "depth", "ops/s", "p50 us", "p99 us", "p999 us",
	       "cpu us/op");
}

/* CPU seconds (user + system, every thread) a process used so far (-1
 * if unknown): on a shared machine the wall time of a start-up or a row
 * says more about the others than about us. */
static double cpu_seconds(pid_t pid)
{
	struct timespec ts;
	clockid_t clk;

	if (pid <= 0 || clock_getcpuclockid(pid, &clk) != 0 ||
	    clock_gettime(clk, &ts) < 0)
		return -1;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void add_row(const char *label, int clients, int depth, bool pinned,
		    double tput, struct result *r, double cpu_us)
{
	struct row *w;

	qsort(r->lat, r->n, sizeof(*r->lat), cmp_u64);
	if (g.n_rows == MAX_ROWS)
		return;
	w = &g.rows[g.n_rows++];
	snprintf(w->label, sizeof(w->label), "%s", label);
	w->clients = clients;
	w->depth = depth;
	w->pinned = pinned;
	w->tput = tput;
	w->p50 = pct_us(r, .5);
	w->p99 = pct_us(r, .99);
	w->p999 = pct_us(r, .999);
	w->cpu_us = cpu_us;
	printf("%-*s %6d%s %5d %11.0f %9.1f %9.1f %9.1f ", g.label_w, w->label,
	       clients, pinned ? "*" : " ", depth, tput, w->p50, w->p99,
	       w->p999);
	if (cpu_us >= 0)
		printf("%10.1f\n", cpu_us);
	else
		printf("%10s\n", "-");
	fflush(stdout);
}

static const struct row *find_row(const char *label, int clients)
{
	for (int i = 0; i < g.n_rows; i++)
		if (strcmp(g.rows[i].label, label) == 0 &&
		    g.rows[i].clients == clients)
			return &g.rows[i];
	return NULL;
}

/* Measure one row and print it. */
static int measure(const char *label, const char *sock, pid_t server,
		   enum proto proto, const struct mix *mix, int clients,
		   const struct opts *o)
{
	struct result r = {0};
	bool pinned = o->pin && clients == 1;
	double cpu0, cpu1, cpu_us = -1;
	int64_t n;

	place(server, pinned);
	cpu0 = cpu_seconds(server);
	n = run_load(sock, proto, mix, clients, o->depth, o->seconds, 0, &r);
	cpu1 = cpu_seconds(server);
	place(server, false);
	if (cpu0 >= 0 && cpu1 >= cpu0 && r.answered)
		cpu_us = (cpu1 - cpu0) * 1e6 / (double)r.answered;
	if (n >= 0)
		add_row(label, clients, o->depth, pinned,
			(double)n / o->seconds, &r, cpu_us);
	free(r.lat);
	return n < 0 ? (int)n : 0;
}

/* One request on a fresh connection, blocking; the response line is
 * returned in *resp (caller frees). */
static int rpc_once(const char *line, char **resp, size_t *resp_len,
		    int timeout_s)
{
	struct timeval tv = {.tv_sec = timeout_s};
	struct buf b = {0};
	size_t len = strlen(line);
	int fd, rc = 0;
	char *nl = NULL;

	fd = connect_unix(g.vmem_sock);
	if (fd < 0)
		return fd;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (write(fd, line, len) != (ssize_t)len) {
		rc = -EIO;
		goto out;
	}
	while (!nl) {
		ssize_t n;

		if ((rc = buf_reserve(&b, 65536)) < 0)
			goto out;
		n = read(fd, b.p + b.len, b.cap - b.len - 1);
		if (n <= 0) {
			rc = n < 0 ? -errno : -ECONNRESET;
			goto out;
		}
		nl = memchr(b.p + b.len, '\n', (size_t)n);
		b.len += (size_t)n;
	}
	b.p[b.len] = '\0';
	if (strstr(b.p, "\"error\":")) {
		fprintf(stderr, "vmem-bench: error response: %.400s\n", b.p);
		rc = -EPROTO;
		goto out;
	}
	*resp_len = (size_t)(nl - b.p) + 1;
	*resp = b.p;
	b.p = NULL;
out:
	free(b.p);
	close(fd);
	return rc;
}

/* Commit what the last row wrote, outside any measurement, so that the
 * background git job does not run into the next row. */
static int vmem_sync(void)
{
	char *resp = NULL;
	size_t len;
	int rc = rpc_once("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
			  "\"git.sync\"}\n",
			  &resp, &len, 600);

	free(resp);
	return rc;
}

/* The floor of a durable write: append a WAL-record-sized block to a file
 * in the repository's git directory and fdatasync it, over and over. */
static int fsync_floor(const struct opts *o)
{
	char path[128];
	size_t bytes = (size_t)o->value_bytes + 200;
	struct result r = {0};
	uint64_t t, end;
	char *block = malloc(bytes);
	int fd = -1, rc = 0;

	snprintf(path, sizeof(path), "%s/.git/fsync-floor", g.dir);
	if (!block) {
		rc = -ENOMEM;
		goto out;
	}
	memset(block, 'x', bytes);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC,
		  0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	place(0, o->pin);
	end = now_ns() + (uint64_t)(o->seconds * 1e9);
	while ((t = now_ns()) < end && !interrupted) {
		if (write(fd, block, bytes) != (ssize_t)bytes ||
		    fdatasync(fd) < 0) {
			rc = -EIO;
			break;
		}
		if ((rc = result_add(&r, now_ns() - t)) < 0)
			break;
	}
	place(0, false);
	if (rc == 0)
		add_row("fdatasync (log append)", 1, 1, o->pin,
			(double)r.n / o->seconds, &r, -1);
out:
	if (fd >= 0)
		close(fd);
	unlink(path);
	free(block);
	free(r.lat);
	return rc;
}

/* ---- ratios ---- */

static void ratio(const char *what, int clients, double ours, double base,
		  const char *unit, const char *target)
{
	int prec = strcmp(unit, "us") == 0 ? 1 : 0;

	printf("  %-30s %7d %10.*f %10.*f %-4s %6.2f%s%s\n", what, clients,
	       prec, ours, prec, base, unit, base > 0 ? ours / base : 0.0,
	       *target ? "  " : "", target);
}

/* experience.store against decision.store of the same run: the
 * throughput ratio (target >= 0.9) and the latency ratio (the inverse
 * of a speed, so <= 1 / 0.9). */
static void print_exp_ratios(const struct opts *o)
{
	bool head = false;

	for (int i = 0; i < o->n_clients; i++) {
		int c = o->clients[i];
		const struct row *st = find_row("store", c);
		const struct row *xs = find_row("xstore", c);

		if (!st || !xs)
			continue;
		if (!head)
			printf("\n%-32s %7s %10s %10s %-4s %6s  %s\n",
			       "experiences (same run)", "clients", "xstore",
			       "store", "", "ratio", "target");
		head = true;
		ratio("xstore ops/s / store ops/s", c, xs->tput, st->tput, "/s",
		      ">= 0.9");
		ratio("xstore p50 / store p50", c, xs->p50, st->p50, "us",
		      "<= 1.11");
	}
}

static void print_ratios(const struct opts *o, bool redis)
{
	const struct row *fs = find_row("fdatasync (log append)", 1);

	printf("\n%-32s %7s %10s %10s %-4s %6s  %s\n", "ratios (same run)",
	       "clients", "ours", "baseline", "", "ratio", "target");
	for (int i = 0; i < o->n_clients; i++) {
		int c = o->clients[i];
		const struct row *get = find_row("get", c);
		const struct row *st = find_row("store", c);
		const struct row *echo = find_row("echo", c);
		const struct row *rset = find_row("redis SET", c);
		const struct row *rget = find_row("redis GET", c);

		if (get && echo) {
			ratio("get p50 / echo p50", c, get->p50, echo->p50,
			      "us", c == 1 ? "<= 1.5" : "");
			ratio("get ops/s / echo ops/s", c, get->tput,
			      echo->tput, "/s", c == 16 ? ">= 0.8" : "");
		}
		if (redis && get && rget)
			ratio("get ops/s / redis GET ops/s", c, get->tput,
			      rget->tput, "/s", "");
		if (redis && st && rset)
			ratio("store ops/s / redis SET ops/s", c, st->tput,
			      rset->tput, "/s", c == 16 ? ">= 1.0" : "");
		if (redis && st && rset && st->cpu_us > 0 && rset->cpu_us > 0)
			ratio("store cpu / redis SET cpu", c, st->cpu_us,
			      rset->cpu_us, "us", "");
		if (st && fs && c == 1)
			ratio("store p50 / fdatasync p50", c, st->p50, fs->p50,
			      "us", "<= 1.2");
	}
	print_exp_ratios(o);
}

/* ---- inside the daemon ---- */

/* The latencies server.stats measured inside the daemon for the methods
 * the experience rows used (and decision.store's, for reference). */
/* The daemon's server.stats answer (malloc'd) into *resp; 0 or -errno. */
static int server_stats(char **resp)
{
	size_t len;

	return rpc_once("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
			"\"server.stats\"}\n",
			resp, &len, 60);
}

static int print_daemon_latencies(void)
{
	static const char *const methods[] = {
		"experience.store",	   "experience.retrieve",
		"experience.find_similar", "experience.stats",
		"decision.store",	   "decision.get"};
	static const char *const targets[] = {
		"", "p99 <= 100", "p99 <= 2000", "p99 <= 1000", "", ""};
	char *resp = NULL, key[64];
	int rc = server_stats(&resp);

	if (rc < 0)
		return rc;
	printf("\n%-26s %9s %9s %9s %9s  %s\n", "inside the daemon", "calls",
	       "p50 us", "p99 us", "max us", "target");
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		const char *p;
		unsigned long long count, errors;
		double p50, p99, max;

		snprintf(key, sizeof(key), "\"%s\":{", methods[i]);
		p = strstr(resp, key);
		if (!p || sscanf(p + strlen(key),
				 "\"count\":%llu,\"errors\":%llu,\"p50_us\":"
				 "%lf,\"p99_us\":%lf,\"max_us\":%lf",
				 &count, &errors, &p50, &p99, &max) != 5)
			continue;
		printf("%-26s %9llu %9.1f %9.1f %9.1f  %s\n", methods[i], count,
		       p50, p99, max, targets[i]);
	}
	free(resp);
	return 0;
}

/* VmRSS of a process, in bytes (-1 if unknown). */
static long long rss_bytes(pid_t pid)
{
	char path[64], line[256];
	long long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

/* Bytes of the files below dir (the shards, the decision files). */
static long long tree_bytes;

static int sum_cb(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (flag == FTW_F)
		tree_bytes += sb->st_size;
	return 0;
}

/* A whole number member of the server.stats answer, after the member
 * `within` (-1 if absent). */
static long long stats_number(const char *resp, const char *within,
			      const char *name)
{
	char key[64];
	const char *p = strstr(resp, within);
	long long v;

	snprintf(key, sizeof(key), "\"%s\":", name);
	p = p ? strstr(p, key) : NULL;
	return p && sscanf(p + strlen(key), "%lld", &v) == 1 ? v : -1;
}

/* Where the memory goes, as the daemon counts it (its indexes, not the
 * allocator's overhead nor the libraries' pages). */
static int print_memory_parts(long long rss)
{
	char *resp = NULL;
	int rc = server_stats(&resp);
	long long rec, search, exps;

	if (rc < 0)
		return rc;
	rec = stats_number(resp, "\"memory\"", "record_bytes");
	search = stats_number(resp, "\"memory\"", "search_bytes");
	exps = stats_number(resp, "\"experiences\"", "index_bytes");
	printf("of it, as vmemd counts: decisions %.1f MB (records) + %.1f MB "
	       "(search index), experiences %.1f MB (records and indexes); "
	       "the rest (%.1f MB) is libraries, allocator and buffers\n",
	       (double)rec / 1e6, (double)search / 1e6, (double)exps / 1e6,
	       (double)(rss - rec - search - exps) / 1e6);
	free(resp);
	return 0;
}

/*
 * Stop the daemon (which writes and commits everything), start it again
 * and time its start until it listens (every shard and decision file
 * loaded); then its resident memory against the content it holds.
 */
static int measure_restart(const struct opts *o)
{
	long long before = rss_bytes(g.vmemd), after, dec, exps;
	double cpu;
	char vm[128];
	uint64_t t;
	int st, rc;

	st = stop_child(&g.vmemd, SIGTERM, 600);
	if (st != 0) {
		fprintf(stderr, "vmem-bench: vmemd did not stop cleanly\n");
		return -ECHILD;
	}
	t = now_ns();
	if ((rc = start_vmemd(o->vmemd)) < 0)
		return rc;
	t = now_ns() - t;
	cpu = cpu_seconds(g.vmemd);
	/* The start's transient buffers go back first. */
	usleep(500000);
	after = rss_bytes(g.vmemd);
	snprintf(vm, sizeof(vm), "%s/.vector-memory/experiences", g.dir);
	tree_bytes = 0;
	nftw(vm, sum_cb, 16, FTW_PHYS);
	exps = tree_bytes;
	dec = (long long)o->preload * o->value_bytes;
	printf("\nrestart: %d decisions and %llu experiences loaded, "
	       "listening after %.3f s (target <= 2 s), %.2f s of CPU\n",
	       o->preload, (unsigned long long)g.exp_stored, (double)t / 1e9,
	       cpu);
	printf("content: %.1f MB of experience text (context, action, "
	       "outcome), %.1f MB of shards, %.1f MB of decision content\n",
	       (double)g.exp_text_bytes / 1e6, (double)exps / 1e6,
	       (double)dec / 1e6);
	printf("vmemd resident: %.1f MB before the restart, %.1f MB after it: "
	       "%.2fx the text, %.2fx the shards' bytes (target <= 2)\n",
	       (double)before / 1e6, (double)after / 1e6,
	       (double)after / (double)(g.exp_text_bytes + (uint64_t)dec),
	       (double)after / (double)(exps + dec));
	return print_memory_parts(after);
}

/* ---- options ---- */

static void usage(FILE *f)
{
	fprintf(f, "usage: vmem-bench --vmemd PATH [--seconds S] [--clients "
		   "LIST]\n"
		   "                  [--depth N] [--value-bytes B] [--mix "
		   "SPEC]...\n"
		   "                  [--preload N] [--max-x N] [--compare] "
		   "[--pin]\n"
		   "                  [--exp-preload N] [--restart]\n"
		   "  --mix SPEC   op[=weight],... with op one of get, exists, "
		   "store,\n"
		   "               store_new, search, range, before, xstore, "
		   "xretrieve,\n"
		   "               xsimilar, xstats, message (repeatable; "
		   "default: "
		   "get,\n"
		   "               then store, each its own row)\n"
		   "  --exp-preload N  store N experiences (20 agents) first\n"
		   "  --restart    then time a restart and show the memory\n");
}

static int parse_mix(const char *spec, struct mix *m)
{
	char tmp[256], *save = NULL, *tok;

	memset(m, 0, sizeof(*m));
	if (strlen(spec) >= sizeof(m->label))
		return -EINVAL;
	snprintf(m->label, sizeof(m->label), "%s", spec);
	snprintf(tmp, sizeof(tmp), "%s", spec);
	for (tok = strtok_r(tmp, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		long w = 1;
		int op;

		if (eq) {
			*eq = '\0';
			w = strtol(eq + 1, NULL, 10);
		}
		for (op = 0; op < N_MIX_OPS; op++)
			if (strcmp(tok, op_names[op]) == 0)
				break;
		if (op == N_MIX_OPS || w < 1 || w > 1000000 ||
		    m->n == MAX_MIX_OPS)
			return -EINVAL;
		m->op[m->n] = (enum op)op;
		m->weight[m->n++] = (unsigned)w;
		m->total += (unsigned)w;
	}
	return m->n ? 0 : -EINVAL;
}

static int parse_clients(const char *s, struct opts *o)
{
	char *end;

	o->n_clients = 0;
	while (*s) {
		long v = strtol(s, &end, 10);

		if (end == s || v < 1 || v > MAX_CLIENTS || o->n_clients == 64)
			return -EINVAL;
		o->clients[o->n_clients++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -EINVAL;
	}
	return o->n_clients ? 0 : -EINVAL;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{"vmemd", required_argument, NULL, 'd'},
		{"seconds", required_argument, NULL, 's'},
		{"clients", required_argument, NULL, 'c'},
		{"depth", required_argument, NULL, 'D'},
		{"value-bytes", required_argument, NULL, 'b'},
		{"mix", required_argument, NULL, 'm'},
		{"preload", required_argument, NULL, 'p'},
		{"max-x", required_argument, NULL, 'x'},
		{"compare", no_argument, NULL, 'C'},
		{"pin", no_argument, NULL, 'P'},
		{"exp-preload", required_argument, NULL, 'E'},
		{"restart", no_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int ch;

	*o = (struct opts){.vmemd = getenv("VMEMD"),
			   .seconds = 3,
			   .depth = 1,
			   .value_bytes = 256,
			   .preload = 1000};
	parse_clients("1,4,16,64", o);
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd':
			o->vmemd = optarg;
			break;
		case 's':
			o->seconds = strtod(optarg, NULL);
			break;
		case 'c':
			if (parse_clients(optarg, o) < 0)
				return -EINVAL;
			break;
		case 'D':
			o->depth = atoi(optarg);
			break;
		case 'b':
			o->value_bytes = atoi(optarg);
			break;
		case 'm':
			if (o->n_mixes == MAX_MIXES ||
			    parse_mix(optarg, &o->mixes[o->n_mixes++]) < 0)
				return -EINVAL;
			break;
		case 'p':
			o->preload = atoi(optarg);
			break;
		case 'x':
			o->max_x = atoi(optarg);
			break;
		case 'C':
			o->compare = true;
			break;
		case 'P':
			o->pin = true;
			break;
		case 'E':
			o->exp_preload = atoi(optarg);
			break;
		case 'R':
			o->restart = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	if (optind < argc || !o->vmemd || !(o->seconds > 0) ||
	    o->seconds > 3600 || o->depth < 1 || o->depth > MAX_DEPTH ||
	    o->value_bytes < 16 || o->value_bytes > 102400 || o->preload < 1 ||
	    o->max_x < 0 || o->max_x > 1000000 || o->exp_preload < 0)
		return -EINVAL;
	if (o->n_mixes == 0) {
		parse_mix("get", &o->mixes[0]);
		parse_mix("store", &o->mixes[1]);
		o->n_mixes = 2;
	}
	if (!o->max_x) {
		/* store_new needs room: only then widen the space. */
		bool fresh = o->preload > 15000;

		for (int i = 0; i < o->n_mixes; i++)
			for (int j = 0; j < o->mixes[i].n; j++)
				fresh |= o->mixes[i].op[j] == OP_STORE_NEW;
		o->max_x = fresh ? 100000 : 1000;
		if (o->preload > 15000 && fresh)
			o->max_x = 100000;
	}
	if ((int64_t)o->preload > (int64_t)o->max_x * 15) {
		fprintf(stderr, "vmem-bench: --preload is at most 15 x "
				"--max-x (z=2..4 of every issue)\n");
		return -EINVAL;
	}
	return 0;
}

static void print_context(const struct opts *o)
{
	struct utsname u;
	char line[256], model[200] = "?";
	FILE *f = fopen("/proc/cpuinfo", "r");
	time_t now = time(NULL);
	char date[32];

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "model name", 10) == 0) {
			char *c = strchr(line, ':');

			if (c) {
				snprintf(model, sizeof(model), "%s", c + 2);
				model[strcspn(model, "\n")] = '\0';
			}
			break;
		}
	if (f)
		fclose(f);
	uname(&u);
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime(&now));
	printf("vmem-bench %s\n", date);
	printf("machine: %ld CPUs online (%s), %s %s %s\n",
	       sysconf(_SC_NPROCESSORS_ONLN), model, u.sysname, u.release,
	       u.machine);
	printf("vmemd: %s --max-x %d, repo %s\n", o->vmemd, o->max_x, g.dir);
	printf("runs: %.1f s each (after a %.2f s warm-up), depth %d, value "
	       "%d bytes, %d decisions preloaded%s\n\n",
	       o->seconds, o->seconds * 0.1 > 0.5 ? 0.5 : o->seconds * 0.1,
	       o->depth, o->value_bytes, o->preload,
	       o->pin ? ", 1-client rows pinned to one CPU (*)" : "");
}

static int preload_vmem(const struct opts *o)
{
	struct mix m = {.label = "preload", .n = 1, .op = {OP_PRELOAD}};
	char get[256], *resp = NULL;
	int64_t n;
	int rc, x, y, z;

	m.weight[0] = m.total = 1;
	n = run_load(g.vmem_sock, P_JSON, &m, PRELOAD_CONNS, PRELOAD_DEPTH, 0,
		     (uint64_t)o->preload, NULL);
	if (n < 0)
		return (int)n;
	if ((rc = vmem_sync()) < 0)
		return rc;
	/* The echo server answers with lines of a get response's size. */
	coord_of(0, &x, &y, &z);
	snprintf(get, sizeof(get),
		 "%s1,\"method\":\"decision.get\",\"params\":{\"coordinate\":"
		 "{\"x\":%d,\"y\":%d,\"z\":%d}}}\n",
		 jhead, x, y, z);
	rc = rpc_once(get, &resp, &g.get_resp_len, 10);
	free(resp);
	return rc;
}

static int bench_redis(const struct opts *o)
{
	struct mix set = {.label = "redis SET", .n = 1, .op = {OP_RSET}};
	struct mix rget = {.label = "redis GET", .n = 1, .op = {OP_RGET}};
	struct mix pre = {.label = "preload", .n = 1, .op = {OP_RPRELOAD}};
	int64_t n;
	int rc, i;

	set.weight[0] = set.total = rget.weight[0] = rget.total = 1;
	pre.weight[0] = pre.total = 1;
	if ((rc = start_redis()) < 0)
		return rc;
	n = run_load(g.redis_sock, P_RESP, &pre, PRELOAD_CONNS, PRELOAD_DEPTH,
		     0, (uint64_t)o->preload, NULL);
	if (n < 0)
		return (int)n;
	for (i = 0; i < o->n_clients; i++)
		if ((rc = measure("redis SET", g.redis_sock, g.redis, P_RESP,
				  &set, o->clients[i], o)) < 0)
			return rc;
	for (i = 0; i < o->n_clients; i++)
		if ((rc = measure("redis GET", g.redis_sock, g.redis, P_RESP,
				  &rget, o->clients[i], o)) < 0)
			return rc;
	return 0;
}

static bool writes(const struct mix *m)
{
	for (int i = 0; i < m->n; i++)
		if (m->op[i] == OP_STORE || m->op[i] == OP_STORE_NEW ||
		    m->op[i] == OP_XSTORE)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	static const char words[] = "lorem ipsum dolor sit amet consectetur "
				    "adipiscing elit sed do eiusmod tempor ";
	struct sigaction sa = {.sa_handler = on_signal};
	struct opts o;
	bool redis = false;
	char cmd[256];
	int rc = 0, i, j, st;

	if (parse_opts(argc, argv, &o) < 0) {
		usage(stderr);
		return 2;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sched_getaffinity(0, sizeof(g.all_cpus), &g.all_cpus);
	g.max_x = o.max_x;
	g.preload = o.preload;
	g.preload_xs = (o.preload + 14) / 15;
	g.value_bytes = o.value_bytes;
	g.filler = malloc((size_t)o.value_bytes + 1);
	if (!g.filler) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < o.value_bytes; i++)
		g.filler[i] = words[(size_t)i % (sizeof(words) - 1)];
	g.filler[o.value_bytes] = '\0';

	snprintf(g.dir, sizeof(g.dir), "/tmp/vmem-bench-XXXXXX");
	if (!mkdtemp(g.dir)) {
		g.dir[0] = '\0';
		rc = -errno;
		goto out;
	}
	snprintf(g.vmem_sock, sizeof(g.vmem_sock), "%s/vmem.sock", g.dir);
	snprintf(g.echo_sock, sizeof(g.echo_sock), "%s/echo.sock", g.dir);
	snprintf(g.redis_sock, sizeof(g.redis_sock), "%s/redis.sock", g.dir);
	snprintf(cmd, sizeof(cmd), "git init -q '%s'", g.dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "vmem-bench: git init failed\n");
		rc = -EIO;
		goto out;
	}
	print_context(&o);
	if ((rc = start_vmemd(o.vmemd)) < 0)
		goto out;
	if ((rc = preload_vmem(&o)) < 0)
		goto out;
	if ((rc = make_vocab()) < 0)
		goto out;
	if (o.exp_preload > 0) {
		struct mix m = {.label = "preload", .n = 1, .op = {OP_XSTORE}};
		uint64_t t = now_ns();
		int64_t n;

		m.weight[0] = m.total = 1;
		n = run_load(g.vmem_sock, P_JSON, &m, PRELOAD_CONNS,
			     PRELOAD_DEPTH, 0, (uint64_t)o.exp_preload, NULL);
		if (n < 0) {
			rc = (int)n;
			goto out;
		}
		t = now_ns() - t;
		if ((rc = vmem_sync()) < 0)
			goto out;
		printf("preloaded %d experiences in %.1f s (%.0f/s), "
		       "committed\n\n",
		       o.exp_preload, (double)t / 1e9,
		       o.exp_preload / ((double)t / 1e9));
	}
	g.label_w = 22;
	for (j = 0; j < o.n_mixes; j++)
		if ((int)strlen(o.mixes[j].label) > g.label_w)
			g.label_w = (int)strlen(o.mixes[j].label);
	print_header();
	if (o.compare) {
		if ((rc = start_echo()) < 0 ||
		    (rc = wait_server("echo server", &g.echo, g.echo_sock, NULL,
				      10)) < 0)
			goto out;
		for (i = 0; i < o.n_clients; i++) {
			struct mix m = {
				.label = "echo", .n = 1, .op = {OP_ECHO}};

			m.weight[0] = m.total = 1;
			if ((rc = measure("echo", g.echo_sock, g.echo, P_LINE,
					  &m, o.clients[i], &o)) < 0)
				goto out;
		}
		stop_child(&g.echo, SIGTERM, 5);
		if ((rc = fsync_floor(&o)) < 0)
			goto out;
	}
	for (j = 0; j < o.n_mixes; j++)
		for (i = 0; i < o.n_clients; i++) {
			const struct mix *m = &o.mixes[j];

			if ((rc = measure(m->label, g.vmem_sock, g.vmemd,
					  P_JSON, m, o.clients[i], &o)) < 0)
				goto out;
			if (writes(m) && (rc = vmem_sync()) < 0)
				goto out;
		}
	if (o.compare) {
		if (in_path("redis-server")) {
			if ((rc = bench_redis(&o)) < 0)
				goto out;
			redis = true;
		} else {
			printf("redis-server not found in PATH: no redis rows "
			       "(Debian package redis-server)\n");
		}
		print_ratios(&o, redis);
	}
	if (o.exp_preload > 0 || g.exp_stored > 0) {
		if (!o.compare)
			print_exp_ratios(&o);
		if ((rc = print_daemon_latencies()) < 0)
			goto out;
	}
	if (o.restart && (rc = measure_restart(&o)) < 0)
		goto out;
	if (o.pin)
		printf("\n* pinned: the client and every thread of the server "
		       "on one CPU\n");
out:
	if (rc < 0 && rc != -EPROTO)
		fprintf(stderr, "vmem-bench: stopped on error (%s)\n",
			strerror(-rc));
	stop_child(&g.echo, SIGKILL, 5);
	stop_child(&g.redis, SIGTERM, 10);
	if (g.vmemd > 0) {
		st = stop_child(&g.vmemd, SIGTERM, 60);
		if (st != 0) {
			fprintf(stderr,
				"vmem-bench: vmemd did not exit "
				"cleanly on SIGTERM (status %d)\n",
				st);
			if (rc == 0)
				rc = -ECHILD;
		}
	}
	if (g.dir[0])
		nftw(g.dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(g.filler);
	free(echo_reply);
	for (i = 0; i < EXP_VOCAB; i++)
		free(g.vocab[i]);
	return rc < 0 ? 1 : 0;
}

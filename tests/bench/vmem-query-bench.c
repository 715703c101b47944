/*
 * vmem-query-bench: the read side with 20,000 decisions (every coordinate
 * of the default space, ~1 KB of English-like text each).
 *
 * In-process, on the daemon's own index and search modules: the time of
 * query_range (one layer of 10 issues; everything), query_before
 * (threshold in the middle) and search (1 rare term; 2 common terms with
 * match_all; a phrase; a prefix), next to a naive full scan of the same
 * decisions measured in the same run; and the memory of the search index
 * against the content bytes. Through a real vmemd started on the same
 * decisions: its start-up time and round-trip p50/p99 of the same queries.
 * Prints figures; never fails on time.
 *
 * usage: vmem-query-bench [--vmemd PATH] [--reps N]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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

#include "index.h"
#include "query.h"
#include "search.h"
#include "tokenize.h"
#include "vmdir.h"

#define N_X 1000

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "vmem-query-bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* ---- synthetic text: Zipf-distributed words, a few fixed phrases ---- */

static char words[6000][16];
static size_t n_words;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void make_words(void)
{
	static const char *const syl[] = {"ka", "to", "re", "mi", "sa", "lo",
					  "ne", "di", "po", "va", "ri", "gu",
					  "te", "ba", "no", "fe", "zu", "qi"};
	static const char *const fixed[] = {
		"the",	 "a",	 "of",	   "and",	"to",	 "in",
		"use",	 "api",	 "rest",   "database",	"cache", "layer",
		"index", "test", "schema", "postgresql"};
	size_t nf = sizeof(fixed) / sizeof(fixed[0]);

	for (size_t i = 0; i < nf; i++)
		snprintf(words[n_words++], sizeof(words[0]), "%s", fixed[i]);
	while (n_words < sizeof(words) / sizeof(words[0])) {
		char *w = words[n_words++];
		int n = 2 + (int)(next_rand() % 3);

		w[0] = '\0';
		for (int k = 0; k < n; k++)
			strcat(w, syl[next_rand() % 18]);
	}
}

/* A word index with a Zipf-like skew: small indexes are common. */
static size_t zipf_word(void)
{
	double u = (double)(next_rand() % 1000000) / 1e6;

	return (size_t)((double)n_words * u * u * u * u) % n_words;
}

static char *make_text(size_t target)
{
	char *t = malloc(target + 64);
	size_t len = 0;

	if (!t)
		die("malloc");
	while (len < target) {
		const char *w = words[zipf_word()];
		size_t wl = strlen(w);

		if (len && next_rand() % 12 == 0)
			t[len++] = '.';
		if (len)
			t[len++] = ' ';
		memcpy(t + len, w, wl);
		if (len == 0 || t[len - 2] == '.')
			t[len] = (char)(t[len] - 'a' + 'A');
		len += wl;
	}
	t[len] = '\0';
	return t;
}

/* ---- measurement helpers ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct stat2 {
	double p50, p99;
};

static struct stat2 summarize(double *v, int n)
{
	struct stat2 s;

	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	s.p50 = v[n / 2] * 1e6;
	s.p99 = v[(int)((double)(n - 1) * 0.99)] * 1e6;
	return s;
}

/* ---- naive baseline: scan every decision's text ---- */

struct naive_ctx {
	const char *const *terms;
	size_t n_terms;
	size_t term_tokens[4][8];
	char term_tok[4][8][64];
	size_t n_tok[4];
	bool prefix[4];
	size_t matched_in_doc;
	/* the document's tokens */
	char (*toks)[64];
	size_t n_toks, cap;
};

static int collect_tok(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct naive_ctx *c = ctx;

	(void)pos;
	if (c->n_toks == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 256;
		c->toks = realloc(c->toks, c->cap * sizeof(*c->toks));
		if (!c->toks)
			die("realloc");
	}
	snprintf(c->toks[c->n_toks++], 64, "%.*s", (int)len, tok);
	return 0;
}

static int term_tok(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct naive_ctx *c = ctx;
	size_t t = c->matched_in_doc; /* the term being parsed */

	(void)pos;
	snprintf(c->term_tok[t][c->n_tok[t]++], 64, "%.*s", (int)len, tok);
	return 0;
}

static bool doc_has_term(struct naive_ctx *c, size_t t)
{
	for (size_t i = 0; i + c->n_tok[t] <= c->n_toks; i++) {
		size_t k;

		for (k = 0; k < c->n_tok[t]; k++) {
			const char *want = c->term_tok[t][k];
			bool last = k + 1 == c->n_tok[t];

			if (last && c->prefix[t]
				    ? strncmp(c->toks[i + k], want,
					      strlen(want)) != 0
				    : strcmp(c->toks[i + k], want) != 0)
				break;
		}
		if (k == c->n_tok[t])
			return true;
	}
	return false;
}

/* Tokenize every decision and test every term: the full-scan baseline. */
static size_t naive_search(struct index *ix, const char *const *terms, size_t n,
			   bool match_all)
{
	struct naive_ctx c = {.terms = terms, .n_terms = n};
	size_t hits = 0;

	for (size_t t = 0; t < n; t++) {
		size_t len = strlen(terms[t]);

		c.prefix[t] = len && terms[t][len - 1] == '*';
		c.matched_in_doc = t;
		tokenize(terms[t], len - c.prefix[t], term_tok, &c);
	}
	for (size_t s = 0; s < ix->n_slots; s++) {
		const char *text;
		size_t len, score = 0;

		if (index_text(ix, s, &text, &len) != 0)
			continue;
		c.n_toks = 0;
		tokenize(text, len, collect_tok, &c);
		for (size_t t = 0; t < n; t++)
			score += doc_has_term(&c, t);
		if (match_all ? score == n : score > 0)
			hits++;
	}
	free(c.toks);
	return hits;
}

/* Where naive results go, so the compiler cannot drop the scans. */
static volatile size_t sink;

static size_t naive_range(struct index *ix, int x0, int x1, int z0, int z1)
{
	size_t hits = 0;

	for (size_t s = 0; s < ix->n_slots; s++) {
		const struct record *r = ix->slots[s];

		hits += r && r->coord.x >= x0 && r->coord.x <= x1 &&
			r->coord.z >= z0 && r->coord.z <= z1;
	}
	return hits;
}

/* ---- the daemon ---- */

static char workdir[] = "/tmp/vmem-qbench-XXXXXX";
static char sock_path[100];

static int connect_to(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Send one request and read the whole response line. */
static size_t round_trip(int fd, const char *req, char **buf, size_t *cap)
{
	size_t got = 0, len = strlen(req);

	if (write(fd, req, len) != (ssize_t)len)
		die("write");
	for (;;) {
		ssize_t n;

		if (*cap - got < 65536) {
			*cap = *cap * 2 + 65536;
			*buf = realloc(*buf, *cap);
			if (!*buf)
				die("realloc");
		}
		n = read(fd, *buf + got, *cap - got - 1);
		if (n <= 0)
			die("read");
		got += (size_t)n;
		if ((*buf)[got - 1] == '\n')
			break;
	}
	(*buf)[got] = '\0';
	return got;
}

struct query {
	const char *name;
	const char *request; /* JSON-RPC line */
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"vmemd", required_argument, NULL, 'd'},
		{"reps", required_argument, NULL, 'r'},
		{NULL, 0, NULL, 0},
	};
	const char *vmemd = getenv("VMEMD");
	int reps = 200, ch;
	struct index ix;
	struct vmdir dir;
	struct vmdir_op *ops;
	size_t content_bytes = 0;
	char errmsg[512], cmd[600], *buf = NULL;
	size_t cap = 0;
	double t0, *lat;
	pid_t pid;
	int fd;
	const char *rare[1], *common[2], *phrase[1], *prefix[1];
	const char *phrase2[1];
	char rare_term[32], phrase_term[64], phrase2_term[64], prefix_term[32];

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch == 'd')
			vmemd = optarg;
		else if (ch == 'r')
			reps = atoi(optarg);
		else {
			fprintf(stderr,
				"usage: vmem-query-bench [--vmemd PATH] "
				"[--reps N]\n");
			return 2;
		}
	}
	if (reps < 10)
		reps = 10;
	lat = calloc((size_t)reps, sizeof(*lat));
	signal(SIGPIPE, SIG_IGN);
	make_words();

	/* Build the decisions and write them as files of a temp repo. */
	if (!mkdtemp(workdir))
		die("mkdtemp");
	snprintf(cmd, sizeof(cmd), "git init -q %s", workdir);
	if (system(cmd) != 0)
		die("git init");
	if (index_init(&ix, N_X) < 0)
		die("index_init");
	ops = calloc(ix.n_slots, sizeof(*ops));
	t0 = now_s();
	for (size_t s = 0; s < ix.n_slots; s++) {
		struct decision d = {0};
		struct record *r;

		d.coord.z = (int)(s % 4) + 1;
		d.coord.y = (int)(s / 4 % 5) + 1;
		d.coord.x = (int)(s / 20) + 1;
		d.content = make_text(900 + next_rand() % 250);
		d.content_len = strlen(d.content);
		d.agent_id = strdup("bench-agent");
		d.version = 1;
		timestamp_format(1763700000000000LL + (int64_t)s, d.timestamp);
		content_bytes += d.content_len;
		r = record_new(&d);
		if (!r || index_put(&ix, r) < 0)
			die("index_put");
		ops[s].coord = d.coord;
		ops[s].text = decision_dump_file(&d, &ops[s].len);
		decision_done(&d);
	}
	index_catch_up(&ix, UINT64_MAX);
	printf("vmem-query-bench: %zu decisions, %.1f MB of content\n",
	       ix.count, (double)content_bytes / 1e6);
	printf("  in-process index build (records + search): %.0f ms\n",
	       (now_s() - t0) * 1e3);
	printf("  search index memory: %.1f MB = %.2f x the content bytes "
	       "(target <= 1)\n\n",
	       (double)search_memory(ix.search) / 1e6,
	       (double)search_memory(ix.search) / (double)content_bytes);
	vmdir_init(&dir, workdir, NULL, N_X); /* writes only */
	if (vmdir_apply(&dir, ops, ix.n_slots, true, errmsg, sizeof(errmsg)) <
	    0) {
		fprintf(stderr, "vmem-query-bench: %s\n", errmsg);
		return 1;
	}
	vmdir_done(&dir);
	for (size_t s = 0; s < ix.n_slots; s++)
		free((char *)ops[s].text);
	free(ops);

	/* Terms: a rare word, two of the most common, two phrases (of very
	 * common words: the worst case, every candidate is checked; of
	 * middling ones), a prefix. */
	snprintf(rare_term, sizeof(rare_term), "%s", words[n_words - 7]);
	rare[0] = rare_term;
	common[0] = words[0];
	common[1] = words[4];
	snprintf(phrase_term, sizeof(phrase_term), "%s %s", words[9],
		 words[10]);
	phrase[0] = phrase_term;
	snprintf(phrase2_term, sizeof(phrase2_term), "%s %s", words[60],
		 words[61]);
	phrase2[0] = phrase2_term;
	snprintf(prefix_term, sizeof(prefix_term), "%.3s*", words[200]);
	prefix[0] = prefix_term;

	struct {
		const char *name;
		const char *const *terms;
		size_t n;
		bool all;
	} searches[] = {
		{"search 1 rare term", rare, 1, false},
		{"search 2 common terms, match_all", common, 2, true},
		{"search a phrase of common words", phrase, 1, false},
		{"search a phrase of middling words", phrase2, 1, false},
		{"search a prefix", prefix, 1, false},
	};
	size_t n_searches = sizeof(searches) / sizeof(searches[0]);

	printf("in-daemon time (us)                          p50      p99   "
	       "naive scan p50\n");
	/* Ranges. */
	for (int k = 0; k < 3; k++) {
		static const char *const names[] = {
			"query_range one layer, 10 issues",
			"query_range everything",
			"query_partial_order (500, 3)"};
		struct axis_range xr = {491, 500}, all = {1, N_X};
		struct axis_range yr = {1, 5}, zr = {2, 2}, zall = {1, 4};
		struct stat2 st, nv;
		const struct record **recs;
		size_t n = 0;

		for (int i = 0; i < reps; i++) {
			double t = now_s();

			if (k == 0)
				query_range(&ix, &xr, &yr, &zr, NULL, 0, &recs,
					    &n);
			else if (k == 1)
				query_range(&ix, &all, &yr, &zall, NULL, 0,
					    &recs, &n);
			else
				query_before(&ix, 500, 3, 0, &recs, &n);
			lat[i] = now_s() - t;
			free(recs);
		}
		st = summarize(lat, reps);
		for (int i = 0; i < reps; i++) {
			double t = now_s();

			sink = naive_range(&ix, k == 0 ? 491 : 1,
					   k == 0 ? 500 : (k == 1 ? N_X : 499),
					   k == 0 ? 2 : 1, k == 0 ? 2 : 4);
			lat[i] = now_s() - t;
		}
		nv = summarize(lat, reps);
		printf("  %-38s %8.1f %8.1f   %8.1f   (%zu results)\n",
		       names[k], st.p50, st.p99, nv.p50, n);
	}
	for (size_t k = 0; k < n_searches; k++) {
		struct search_query *q;
		struct search_hit *hits;
		size_t n = 0, lens[2];
		struct stat2 st, nv;
		int nreps = reps;

		for (size_t t = 0; t < searches[k].n; t++)
			lens[t] = strlen(searches[k].terms[t]);
		if (search_query_parse(searches[k].terms, lens, searches[k].n,
				       &q, errmsg, sizeof(errmsg)) < 0) {
			fprintf(stderr, "vmem-query-bench: %s\n", errmsg);
			return 1;
		}
		for (int i = 0; i < reps; i++) {
			double t = now_s();

			search_run(ix.search, q, searches[k].all, 0, index_text,
				   &ix, &hits, &n);
			lat[i] = now_s() - t;
			free(hits);
		}
		st = summarize(lat, reps);
		if (nreps > 10)
			nreps = 10; /* the naive scan is slow */
		for (int i = 0; i < nreps; i++) {
			double t = now_s();

			sink = naive_search(&ix, searches[k].terms,
					    searches[k].n, searches[k].all);
			lat[i] = now_s() - t;
		}
		nv = summarize(lat, nreps);
		printf("  %-38s %8.1f %8.1f   %8.1f   (%zu results)\n",
		       searches[k].name, st.p50, st.p99, nv.p50, n);
		search_query_free(q);
	}

	if (!vmemd) {
		printf("\n(no --vmemd: round trips not measured)\n");
		goto out;
	}
	/* The daemon on the same decisions: start-up, then round trips. */
	snprintf(sock_path, sizeof(sock_path), "%s/v.sock", workdir);
	t0 = now_s();
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDERR_FILENO);
		execl(vmemd, vmemd, "--repo", workdir, "--socket", sock_path,
		      "--foreground", (char *)NULL);
		_exit(127);
	}
	while ((fd = connect_to(sock_path)) < 0) {
		if (now_s() - t0 > 30)
			die("vmemd did not start");
		usleep(1000);
	}
	printf("\nvmemd start-up with %zu decisions: %.0f ms (target <= "
	       "1000)\n",
	       ix.count, (now_s() - t0) * 1e3);
	{
		static const char *const range_reqs[] = {
			"\"decision.query_range\",\"params\":{\"x_range\":"
			"[491,500],\"z_range\":[2,2]}",
			"\"decision.query_range\",\"params\":{}",
			"\"decision.query_partial_order\",\"params\":{"
			"\"x_threshold\":500,\"y_threshold\":3}",
		};
		static const char *const range_names[] = {
			"query_range one layer, 10 issues",
			"query_range everything",
			"query_partial_order (500, 3)"};
		size_t n_reqs = 3 + n_searches;

		printf("round trip (us)                              p50      "
		       "p99   response bytes\n");
		for (size_t k = 0; k < n_reqs; k++) {
			const char *name =
				k < 3 ? range_names[k] : searches[k - 3].name;
			char req[600];
			size_t bytes = 0;
			int n = reps;
			struct stat2 st;

			if (k < 3) {
				snprintf(req, sizeof(req),
					 "{\"jsonrpc\":\"2.0\",\"id\":1,"
					 "\"method\":%s}\n",
					 range_reqs[k]);
			} else {
				const char *const *t = searches[k - 3].terms;
				bool two = searches[k - 3].n == 2;

				snprintf(req, sizeof(req),
					 "{\"jsonrpc\":\"2.0\",\"id\":1,"
					 "\"method\":\"decision.search\","
					 "\"params\":{\"terms\":[\"%s\"%s%s%s],"
					 "\"match_all\":%s}}\n",
					 t[0], two ? ",\"" : "",
					 two ? t[1] : "", two ? "\"" : "",
					 searches[k - 3].all ? "true"
							     : "false");
			}
			for (int i = 0; i < n; i++) {
				double t = now_s();

				bytes = round_trip(fd, req, &buf, &cap);
				lat[i] = now_s() - t;
				/* Multi-megabyte answers: fewer rounds. */
				if (bytes > 1000000 && i >= reps / 10 + 4) {
					n = i + 1;
					break;
				}
			}
			if (!strstr(buf, "\"result\":[")) {
				fprintf(stderr, "vmem-query-bench: %.300s\n",
					buf);
				return 1;
			}
			st = summarize(lat, n);
			printf("  %-38s %8.1f %8.1f   %zu\n", name, st.p50,
			       st.p99, bytes);
		}
	}
	round_trip(fd,
		   "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
		   "\"server.shutdown\"}\n",
		   &buf, &cap);
	close(fd);
	waitpid(pid, NULL, 0);
out:
	snprintf(cmd, sizeof(cmd), "rm -rf %s", workdir);
	if (system(cmd) != 0)
		fprintf(stderr, "vmem-query-bench: could not remove %s\n",
			workdir);
	index_done(&ix);
	free(buf);
	free(lat);
	return 0;
}

/*
 * vmem-fts5-bench: the search index against SQLite FTS5, in process, on
 * the same corpus.
 *
 * The corpus: N documents of ~480 bytes (380-580) of sentences drawn from
 * a Zipf vocabulary (s = 1, 100,000 words, common words short), the same
 * for the same --seed. Each is indexed by the daemon's own search module
 * (daemon/find/search.c, slot i = document i) and by an FTS5 table in an
 * in-memory SQLite database (Debian's libsqlite3, rowid i = document i,
 * the unicode61 tokenizer, which splits this ASCII text as ours does).
 *
 * Then, for each query shape, the same queries (--queries of each, each
 * run --reps times) with limit 100 on both sides, p50/p99 in microseconds
 * (parsing the terms included on both sides):
 *   rare      one word of rank 10,000-100,000
 *   common    one word of rank 1-20
 *   and       two words of rank 1-200, match_all    FTS5: "a" AND "b"
 *   or        the same, any                         FTS5: "a" OR "b"
 *   phrase    two words of rank 1-20, adjacent      FTS5: "a b"
 *   prefix    3 letters of a word of rank 20-500    FTS5: abc*
 * FTS5 returns rowids in rowid order (its cheapest order); ours are in
 * score order, which for every shape but `or` is slot order, so the hits
 * of those shapes are compared and any difference is reported. For `or`,
 * FTS5 is also timed with ORDER BY rank (best first, as ours are: our
 * score counts the terms matched, FTS5's rank is bm25).
 *
 * Also prints the build time and memory of both, and can write the corpus
 * (one document per line) and the queries (one JSON term list per line
 * with the shape) for vmem-scale-bench.py. Prints figures; never fails on
 * time.
 *
 * usage: vmem-fts5-bench [--docs N] [--seed S] [--queries Q] [--reps R]
 *                          [--no-fts5] [--write-corpus FILE]
 *                          [--write-queries FILE] [--only-write]
 *                          [--shape NAME] [--wall]
 *
 * Query times are the CPU time of the thread (other processes on a shared
 * machine do not count); --wall measures elapsed time instead.
 */
#include <errno.h>
#include <getopt.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "search.h"

#define VOCAB	 100000
#define LIMIT	 100
#define N_SHAPES 6

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double uniform(void)
{
	return (double)(next_rand() >> 11) / 9007199254740992.0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Query times: this thread's CPU time, so that other processes on a
 * shared machine do not count (--wall: elapsed time). */
static clockid_t query_clock = CLOCK_THREAD_CPUTIME_ID;

static double qnow_s(void)
{
	struct timespec ts;

	clock_gettime(query_clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "vmem-fts5-bench: %s\n", what);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p)
		die("out of memory");
	return p;
}

/* ---- vocabulary: rank -> word, common words short ---- */

static char *words[VOCAB];
static double cdf[VOCAB];

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

static void make_vocab(void)
{
	static const char *const syl[] = {
		"ka", "to", "re", "mi", "sa", "lo", "ne", "di", "po", "va",
		"ri", "gu", "te", "ba", "no", "fe", "zu", "qi", "an", "el",
		"or", "us", "im", "ex", "st", "th", "ch", "pl", "tr", "gr"};
	size_t cap = 1 << 19, i;
	uint64_t *set = calloc(cap, sizeof(*set));
	double sum = 0;

	if (!set)
		die("out of memory");
	for (i = 0; i < VOCAB; i++) {
		char w[32];
		int n_syl = 1 + (i >= 30) + (i >= 600) + (i >= 12000) +
			    (int)(next_rand() % 2);
		uint64_t h;
		size_t at;

		for (;;) {
			w[0] = '\0';
			for (int k = 0; k < n_syl; k++)
				strcat(w, syl[next_rand() % 30]);
			if (i < 30 && strlen(w) > 2)
				w[2] = '\0';
			h = hash_str(w) | 1;
			for (at = h & (cap - 1); set[at] && set[at] != h;
			     at = (at + 1) & (cap - 1))
				;
			if (!set[at])
				break;
			n_syl += next_rand() % 4 == 0; /* crowded: longer */
		}
		set[at] = h;
		words[i] = strdup(w);
		if (!words[i])
			die("out of memory");
		sum += 1.0 / (double)(i + 1);
		cdf[i] = sum;
	}
	for (i = 0; i < VOCAB; i++)
		cdf[i] /= sum;
	free(set);
}

static size_t zipf_rank(void)
{
	double u = uniform();
	size_t lo = 0, hi = VOCAB - 1;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static char *make_doc(size_t *len_out)
{
	size_t target = 380 + next_rand() % 201, len = 0, in_sentence = 0;
	size_t sentence = 8 + next_rand() % 8;
	char *t = xmalloc(target + 64);

	while (len < target) {
		const char *w = words[zipf_rank()];
		size_t wl = strlen(w);

		if (len)
			t[len++] = ' ';
		memcpy(t + len, w, wl);
		if (in_sentence == 0 && t[len] >= 'a' && t[len] <= 'z')
			t[len] = (char)(t[len] - 'a' + 'A');
		len += wl;
		if (++in_sentence == sentence) {
			t[len++] = '.';
			in_sentence = 0;
			sentence = 8 + next_rand() % 8;
		} else if (next_rand() % 16 == 0) {
			t[len++] = ',';
		}
	}
	t[len] = '\0';
	*len_out = len;
	return t;
}

/* ---- queries ---- */

static const char *const shape_names[N_SHAPES] = {"rare", "common", "and",
						  "or",	  "phrase", "prefix"};

struct query {
	int shape;
	char terms[2][64]; /* ours */
	size_t n_terms;
	bool all;
	char fts[160]; /* FTS5 MATCH */
};

static size_t rank_in(size_t lo, size_t hi)
{
	return lo + next_rand() % (hi - lo);
}

static void make_query(struct query *q, int shape)
{
	const char *a = NULL, *b = NULL;

	memset(q, 0, sizeof(*q));
	q->shape = shape;
	switch (shape) {
	case 0:
	case 1:
		a = words[shape == 0 ? rank_in(10000, VOCAB) : rank_in(0, 20)];
		snprintf(q->terms[0], 64, "%s", a);
		q->n_terms = 1;
		snprintf(q->fts, sizeof(q->fts), "\"%s\"", a);
		break;
	case 2:
	case 3:
		a = words[rank_in(0, 200)];
		do
			b = words[rank_in(0, 200)];
		while (b == a);
		snprintf(q->terms[0], 64, "%s", a);
		snprintf(q->terms[1], 64, "%s", b);
		q->n_terms = 2;
		q->all = shape == 2;
		snprintf(q->fts, sizeof(q->fts), "\"%s\" %s \"%s\"", a,
			 shape == 2 ? "AND" : "OR", b);
		break;
	case 4:
		a = words[rank_in(0, 20)];
		b = words[rank_in(0, 20)];
		snprintf(q->terms[0], 64, "%s %s", a, b);
		q->n_terms = 1;
		snprintf(q->fts, sizeof(q->fts), "\"%s %s\"", a, b);
		break;
	default:
		a = words[rank_in(20, 500)];
		snprintf(q->terms[0], 64, "%.3s*", a);
		q->n_terms = 1;
		snprintf(q->fts, sizeof(q->fts), "%.3s*", a);
		break;
	}
}

/* ---- timing ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct pct {
	double p50, p99;
};

static struct pct pcts(double *v, size_t n)
{
	struct pct p;

	qsort(v, n, sizeof(*v), cmp_double);
	p.p50 = v[n / 2] * 1e6;
	p.p99 = v[(size_t)((double)(n - 1) * 0.99)] * 1e6;
	return p;
}

static char **docs;
static size_t *doc_len;

static int text_of(void *ctx, size_t slot, const char **text, size_t *len)
{
	(void)ctx;
	*text = docs[slot];
	*len = doc_len[slot];
	return 0;
}

/* Time one FTS5 query; *diff set when its rowids are not hits[] (in
 * order, for every shape but `or`, whose count alone is compared). */
static double fts_run(sqlite3_stmt *st, const struct query *q,
		      const struct search_hit *hits, size_t n_hits, bool *diff)
{
	double t0 = qnow_s(), t;
	size_t nf = 0;

	sqlite3_bind_text(st, 1, q->fts, -1, SQLITE_STATIC);
	while (sqlite3_step(st) == SQLITE_ROW) {
		size_t row = (size_t)sqlite3_column_int64(st, 0);

		if (q->shape != 3 && (nf >= n_hits || hits[nf].slot != row))
			*diff = true;
		nf++;
	}
	sqlite3_reset(st);
	t = qnow_s() - t0;
	if (nf != n_hits)
		*diff = true;
	return t;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"docs", required_argument, NULL, 'n'},
		{"seed", required_argument, NULL, 's'},
		{"queries", required_argument, NULL, 'q'},
		{"reps", required_argument, NULL, 'r'},
		{"no-fts5", no_argument, NULL, 'F'},
		{"write-corpus", required_argument, NULL, 'c'},
		{"write-queries", required_argument, NULL, 'w'},
		{"only-write", no_argument, NULL, 'o'},
		{"shape", required_argument, NULL, 'S'},
		{"wall", no_argument, NULL, 'W'},
		{NULL, 0, NULL, 0},
	};
	size_t n_docs = 100000, n_queries = 100, reps = 3, content = 0;
	const char *corpus_path = NULL, *queries_path = NULL;
	bool fts5 = true, only_write = false;
	const char *only_shape = NULL;
	struct search_index *si;
	sqlite3 *db = NULL;
	sqlite3_stmt *ins = NULL, *sel = NULL, *sel_rank = NULL;
	struct query *qs;
	double t0, t_ours, t_fts = 0, *lat_ours, *lat_fts, *lat_rank;
	long rss0, rss1;
	int ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			n_docs = strtoul(optarg, NULL, 10);
			break;
		case 's':
			rng = strtoull(optarg, NULL, 0) | 1;
			break;
		case 'q':
			n_queries = strtoul(optarg, NULL, 10);
			break;
		case 'r':
			reps = strtoul(optarg, NULL, 10);
			break;
		case 'F':
			fts5 = false;
			break;
		case 'c':
			corpus_path = optarg;
			break;
		case 'w':
			queries_path = optarg;
			break;
		case 'o':
			only_write = true;
			break;
		case 'S':
			only_shape = optarg;
			break;
		case 'W':
			query_clock = CLOCK_MONOTONIC;
			break;
		default:
			fprintf(stderr,
				"usage: vmem-fts5-bench [--docs N] [--seed S] "
				"[--queries Q] [--reps R] [--no-fts5] "
				"[--write-corpus FILE] [--write-queries FILE] "
				"[--only-write] [--shape NAME] [--wall]\n");
			return 2;
		}
	}
	if (n_docs < 1 || n_queries < 1 || reps < 1)
		die("--docs, --queries and --reps must be positive");
	make_vocab();
	docs = xmalloc(n_docs * sizeof(*docs));
	doc_len = xmalloc(n_docs * sizeof(*doc_len));
	for (size_t i = 0; i < n_docs; i++) {
		docs[i] = make_doc(&doc_len[i]);
		content += doc_len[i];
	}
	qs = xmalloc(N_SHAPES * n_queries * sizeof(*qs));
	for (int s = 0; s < N_SHAPES; s++)
		for (size_t i = 0; i < n_queries; i++)
			make_query(&qs[s * n_queries + i], s);
	if (corpus_path) {
		FILE *f = fopen(corpus_path, "w");

		if (!f)
			die("cannot write the corpus");
		for (size_t i = 0; i < n_docs; i++)
			fprintf(f, "%s\n", docs[i]);
		if (fclose(f) != 0)
			die("cannot write the corpus");
	}
	if (queries_path) {
		FILE *f = fopen(queries_path, "w");

		if (!f)
			die("cannot write the queries");
		for (size_t i = 0; i < N_SHAPES * n_queries; i++) {
			const struct query *q = &qs[i];

			fprintf(f,
				"{\"shape\":\"%s\",\"match_all\":%s,"
				"\"terms\":[\"%s\"%s%s%s],\"fts5\":\"",
				shape_names[q->shape],
				q->all ? "true" : "false", q->terms[0],
				q->n_terms > 1 ? ",\"" : "",
				q->n_terms > 1 ? q->terms[1] : "",
				q->n_terms > 1 ? "\"" : "");
			for (const char *p = q->fts; *p; p++)
				fprintf(f, "%s%c", *p == '"' ? "\\" : "", *p);
			fprintf(f, "\"}\n");
		}
		if (fclose(f) != 0)
			die("cannot write the queries");
	}
	printf("vmem-fts5-bench: %zu documents, %.1f MB of content, "
	       "%zu queries x %zu runs per shape, limit %d\n",
	       n_docs, (double)content / 1e6, n_queries, reps, LIMIT);
	if (only_write)
		return 0;

	rss0 = rss_kb();
	si = search_new(n_docs);
	if (!si)
		die("search_new");
	t0 = now_s();
	for (size_t i = 0; i < n_docs; i++)
		if (search_add(si, i, docs[i], doc_len[i]) < 0)
			die("search_add");
	t_ours = now_s() - t0;
	rss1 = rss_kb();
	printf("  vmem search index: built in %.2f s (%.1f us/doc), %.1f MB "
	       "= %.3f x content (RSS grew %.1f MB)\n",
	       t_ours, t_ours * 1e6 / (double)n_docs,
	       (double)search_memory(si) / 1e6,
	       (double)search_memory(si) / (double)content,
	       (double)(rss1 - rss0) / 1e3);
	if (fts5) {
		sqlite3_int64 pages = 0, page_size = 0;

		if (sqlite3_open(":memory:", &db) != SQLITE_OK ||
		    sqlite3_exec(db,
				 "CREATE VIRTUAL TABLE d USING fts5(content);"
				 "BEGIN",
				 NULL, NULL, NULL) != SQLITE_OK ||
		    sqlite3_prepare_v2(db,
				       "INSERT INTO d(rowid, content) "
				       "VALUES(?1, ?2)",
				       -1, &ins, NULL) != SQLITE_OK)
			die(db ? sqlite3_errmsg(db) : "sqlite3_open");
		t0 = now_s();
		for (size_t i = 0; i < n_docs; i++) {
			sqlite3_bind_int64(ins, 1, (sqlite3_int64)i);
			sqlite3_bind_text(ins, 2, docs[i], (int)doc_len[i],
					  SQLITE_STATIC);
			if (sqlite3_step(ins) != SQLITE_DONE)
				die(sqlite3_errmsg(db));
			sqlite3_reset(ins);
		}
		if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
			die(sqlite3_errmsg(db));
		t_fts = now_s() - t0;
		sqlite3_finalize(ins);
		if (sqlite3_prepare_v2(db, "PRAGMA page_count", -1, &sel,
				       NULL) == SQLITE_OK &&
		    sqlite3_step(sel) == SQLITE_ROW)
			pages = sqlite3_column_int64(sel, 0);
		sqlite3_finalize(sel);
		if (sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &sel,
				       NULL) == SQLITE_OK &&
		    sqlite3_step(sel) == SQLITE_ROW)
			page_size = sqlite3_column_int64(sel, 0);
		sqlite3_finalize(sel);
		printf("  FTS5 (SQLite %s, in memory): built in %.2f s "
		       "(%.1f us/doc), database %.1f MB with the content "
		       "= %.3f x content\n",
		       sqlite3_libversion(), t_fts,
		       t_fts * 1e6 / (double)n_docs,
		       (double)(pages * page_size) / 1e6,
		       (double)(pages * page_size) / (double)content);
		if (sqlite3_prepare_v2(db,
				       "SELECT rowid FROM d WHERE d MATCH ?1 "
				       "LIMIT 100",
				       -1, &sel, NULL) != SQLITE_OK ||
		    sqlite3_prepare_v2(db,
				       "SELECT rowid FROM d WHERE d MATCH ?1 "
				       "ORDER BY rank LIMIT 100",
				       -1, &sel_rank, NULL) != SQLITE_OK)
			die(sqlite3_errmsg(db));
	}

	lat_ours = xmalloc(n_queries * reps * sizeof(*lat_ours));
	lat_fts = xmalloc(n_queries * reps * sizeof(*lat_fts));
	lat_rank = xmalloc(n_queries * reps * sizeof(*lat_rank));
	printf("\n  query %s in us:\n", query_clock == CLOCK_MONOTONIC
						? "elapsed time"
						: "CPU time of this thread");
	printf("  shape      vmem p50    p99   FTS5 p50    p99   ratio "
	       "p50  p99   hits/query  differ\n");
	for (int s = 0; s < N_SHAPES; s++) {
		size_t n = 0, hits_total = 0, differ = 0;
		struct pct po, pf = {0, 0};
		struct search_hit **hits_of;
		size_t *n_hits_of;
		bool *diff;

		if (only_shape && strcmp(only_shape, shape_names[s]) != 0)
			continue;
		hits_of = calloc(n_queries, sizeof(*hits_of));
		n_hits_of = calloc(n_queries, sizeof(*n_hits_of));
		diff = calloc(n_queries, sizeof(*diff));
		if (!hits_of || !n_hits_of || !diff)
			die("out of memory");
		/* Each engine runs all the queries of the shape in turn, so
		 * that neither finds its caches emptied by the other. */
		for (size_t r = 0; r < reps; r++) {
			for (size_t i = 0; i < n_queries; i++) {
				const struct query *q = &qs[s * n_queries + i];
				const char *tp[2] = {q->terms[0], q->terms[1]};
				size_t lens[2] = {strlen(q->terms[0]),
						  strlen(q->terms[1])};
				struct search_query *sq;
				struct search_hit *hits = NULL;
				size_t n_hits = 0;
				char msg[128];

				t0 = qnow_s();
				if (search_query_parse(tp, lens, q->n_terms,
						       &sq, msg,
						       sizeof(msg)) < 0)
					die(msg);
				if (search_run(si, sq, q->all, LIMIT, text_of,
					       NULL, &hits, &n_hits) < 0)
					die("search_run");
				lat_ours[n++] = qnow_s() - t0;
				search_query_free(sq);
				if (r == 0) {
					hits_of[i] = hits;
					n_hits_of[i] = n_hits;
					hits_total += n_hits;
				} else {
					free(hits);
				}
			}
		}
		for (int k = 0; db && k < (s == 3 ? 2 : 1); k++) {
			size_t m = 0;

			for (size_t r = 0; r < reps; r++)
				for (size_t i = 0; i < n_queries; i++)
					(k ? lat_rank : lat_fts)[m++] =
						fts_run(k ? sel_rank : sel,
							&qs[s * n_queries + i],
							hits_of[i],
							n_hits_of[i], &diff[i]);
		}
		for (size_t i = 0; i < n_queries; i++) {
			differ += diff[i];
			free(hits_of[i]);
		}
		free(hits_of);
		free(n_hits_of);
		free(diff);
		po = pcts(lat_ours, n);
		if (db)
			pf = pcts(lat_fts, n);
		printf("  %-8s %8.1f %8.1f   %8.1f %8.1f   %5.2f %5.2f   "
		       "%8.1f   %5zu\n",
		       shape_names[s], po.p50, po.p99, pf.p50, pf.p99,
		       db ? po.p50 / pf.p50 : 0, db ? po.p99 / pf.p99 : 0,
		       (double)hits_total / (double)n_queries, differ);
		if (db && s == 3) {
			pf = pcts(lat_rank, n);
			printf("  %-8s %8.1f %8.1f   %8.1f %8.1f   %5.2f "
			       "%5.2f\n",
			       "or/rank", po.p50, po.p99, pf.p50, pf.p99,
			       po.p50 / pf.p50, po.p99 / pf.p99);
		}
	}
	printf("  (ratio: vmem / FTS5, below 1 is faster; differ: queries "
	       "whose hits are not FTS5's, `or` by count only.\n"
	       "   `or`: FTS5 in rowid order, its cheapest; `or/rank`: FTS5 "
	       "ORDER BY rank, best first as ours)\n");
	/* Index upkeep of a write: a document replaced at a random slot. */
	{
		enum { REPL = 2000 };
		char **nd = xmalloc(REPL * sizeof(*nd));
		size_t *nl = xmalloc(REPL * sizeof(*nl)), *at;
		sqlite3_stmt *upd = NULL;
		double ours, fts = 0;

		at = xmalloc(REPL * sizeof(*at));
		for (size_t i = 0; i < REPL; i++) {
			nd[i] = make_doc(&nl[i]);
			at[i] = (size_t)(next_rand() % n_docs);
		}
		t0 = qnow_s();
		for (size_t i = 0; i < REPL; i++) {
			size_t k = at[i];

			search_remove(si, k, docs[k], doc_len[k]);
			if (search_add(si, k, nd[i], nl[i]) < 0)
				die("search_add");
			free(docs[k]);
			docs[k] = nd[i];
			doc_len[k] = nl[i];
			nd[i] = NULL;
		}
		ours = qnow_s() - t0;
		if (db) {
			if (sqlite3_prepare_v2(db,
					       "UPDATE d SET content = ?2 "
					       "WHERE rowid = ?1",
					       -1, &upd, NULL) != SQLITE_OK)
				die(sqlite3_errmsg(db));
			sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
			t0 = qnow_s();
			for (size_t i = 0; i < REPL; i++) {
				sqlite3_bind_int64(upd, 1,
						   (sqlite3_int64)at[i]);
				sqlite3_bind_text(upd, 2, docs[at[i]],
						  (int)doc_len[at[i]],
						  SQLITE_STATIC);
				if (sqlite3_step(upd) != SQLITE_DONE)
					die(sqlite3_errmsg(db));
				sqlite3_reset(upd);
			}
			fts = qnow_s() - t0;
			sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
			sqlite3_finalize(upd);
		}
		printf("\n  a document replaced at a random slot (index upkeep "
		       "of an overwrite), %d of them: vmem %.1f us each, "
		       "FTS5 %.1f us each (one transaction)\n",
		       REPL, ours * 1e6 / REPL, fts * 1e6 / REPL);
		free(nd);
		free(nl);
		free(at);
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(sel_rank);
	sqlite3_close(db);
	search_free(si);
	for (size_t i = 0; i < n_docs; i++)
		free(docs[i]);
	free(docs);
	free(doc_len);
	free(qs);
	free(lat_ours);
	free(lat_fts);
	free(lat_rank);
	for (size_t i = 0; i < VOCAB; i++)
		free(words[i]);
	return 0;
}

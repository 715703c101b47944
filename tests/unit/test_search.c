/*
 * Unit tests of daemon/find/search.c: the design's examples, query errors, and
 * a randomized consistency check against a brute-force model
 * (VMEM_SEARCH_SEED repeats a seed). Timing is a benchmark's
 * (tests/bench/vmem-search-bench.c), not a test's.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "search.h"
#include "tokenize.h"

/* ---- a tiny document store ---- */

struct docs {
	size_t n;
	char **text; /* NULL: slot empty */
};

static void docs_init(struct docs *d, size_t n)
{
	d->n = n;
	d->text = calloc(n, sizeof(*d->text));
	ck_assert_ptr_nonnull(d->text);
}

static void docs_done(struct docs *d)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		free(d->text[i]);
	free(d->text);
}

static int text_of(void *ctx, size_t slot, const char **text, size_t *len)
{
	struct docs *d = ctx;

	ck_assert_uint_lt(slot, d->n);
	ck_assert_ptr_nonnull(d->text[slot]);
	*text = d->text[slot];
	*len = strlen(d->text[slot]);
	return 0;
}

static void put(struct search_index *si, struct docs *d, size_t slot,
		const char *text)
{
	if (d->text[slot]) {
		search_remove(si, slot, d->text[slot], strlen(d->text[slot]));
		free(d->text[slot]);
		d->text[slot] = NULL;
	}
	if (!text)
		return;
	d->text[slot] = strdup(text);
	ck_assert_ptr_nonnull(d->text[slot]);
	ck_assert_int_eq(search_add(si, slot, text, strlen(text)), 0);
}

static struct search_query *parse(const char *const *terms, size_t n)
{
	size_t lens[SEARCH_TERMS_MAX + 1], i;
	struct search_query *q = NULL;
	char msg[128] = "";

	for (i = 0; i < n; i++)
		lens[i] = strlen(terms[i]);
	ck_assert_msg(
		search_query_parse(terms, lens, n, &q, msg, sizeof(msg)) == 0,
		"parse: %s", msg);
	ck_assert_ptr_nonnull(q);
	return q;
}

/* Run terms and return hits as "slot:score:matched " text. */
static void run_str(struct search_index *si, struct docs *d,
		    const char *const *terms, size_t n, bool all, size_t limit,
		    char *out, size_t outn)
{
	struct search_query *q = parse(terms, n);
	struct search_hit *hits = NULL;
	size_t n_hits = 0, i, w = 0;

	ck_assert_int_eq(
		search_run(si, q, all, limit, text_of, d, &hits, &n_hits), 0);
	out[0] = '\0';
	for (i = 0; i < n_hits; i++)
		w += (size_t)snprintf(out + w, outn - w, "%zu:%u:%" PRIx64 " ",
				      hits[i].slot, hits[i].score,
				      hits[i].matched);
	free(hits);
	search_query_free(q);
}

#define CHECK_RUN(exp, all, limit, ...)                                        \
	do {                                                                   \
		const char *terms_[] = {__VA_ARGS__};                          \
		char got_[1024];                                               \
		run_str(si, &d, terms_, sizeof(terms_) / sizeof(terms_[0]),    \
			all, limit, got_, sizeof(got_));                       \
		ck_assert_str_eq(got_, exp);                                   \
	} while (0)

static struct search_index *setup(struct docs *d)
{
	struct search_index *si = search_new(16);

	ck_assert_ptr_nonnull(si);
	docs_init(d, 16);
	put(si, d, 0, "We use PostgreSQL as the main database.");
	put(si, d, 1, "Post the REST API spec; rest_api is the module.");
	put(si, d, 2, "Die DATENBANK ist über alles. Postgres later?");
	put(si, d, 3, "データベース、設計: ÜBER rest-api clients");
	put(si, d, 4,
	    "postgresql database migration, post-processing; postgres 16");
	return si;
}

START_TEST(design_examples)
{
	struct docs d;
	struct search_index *si = setup(&d);

	CHECK_RUN("1:1:1 4:1:1 ", false, 0, "post");
	CHECK_RUN("0:1:1 1:1:1 2:1:1 4:1:1 ", false, 0, "post*");
	CHECK_RUN("0:1:1 2:1:1 4:1:1 ", false, 0, "postgres*");
	CHECK_RUN("2:1:1 4:1:1 ", false, 0, "postgres");
	/* "rest-api" is a phrase; rest_api is one other token. */
	CHECK_RUN("1:1:1 3:1:1 ", false, 0, "rest-api");
	CHECK_RUN("1:1:1 3:1:1 ", false, 0, "REST API");
	CHECK_RUN("1:1:1 ", false, 0, "rest_api");
	CHECK_RUN("4:1:1 ", false, 0, "PostgreSQL database");
	CHECK_RUN("4:1:1 ", false, 0, "postgresql data*");
	CHECK_RUN("", false, 0, "database postgresql");
	CHECK_RUN("0:1:1 ", false, 0, "the main");
	/* Unicode */
	CHECK_RUN("2:1:1 3:1:1 ", false, 0, "Über");
	CHECK_RUN("2:1:1 3:1:1 ", false, 0,
		  "U\xcc\x88"
		  "BER");
	CHECK_RUN("2:1:1 ", false, 0, "datenbank");
	CHECK_RUN("3:1:1 ", false, 0, "データベース");
	CHECK_RUN("", false, 0, "データ");
	CHECK_RUN("3:1:1 ", false, 0, "データ*");
	CHECK_RUN("", false, 0, "nothing");
	CHECK_RUN("", false, 0, "nothing*");
	CHECK_RUN("", false, 0, "nothing here");
	search_free(si);
	docs_done(&d);
}
END_TEST

START_TEST(scores_and_order)
{
	struct docs d;
	struct search_index *si = setup(&d);

	/* score desc, then slot asc; matched bit i = term i */
	CHECK_RUN("4:3:7 0:2:3 2:1:4 ", false, 0, "database", "postgresql",
		  "postgres", "xyz");
	CHECK_RUN("4:3:7 0:2:3 2:1:4 ", false, 0, "database", "postgresql",
		  "postgres");
	CHECK_RUN("0:2:3 4:2:3 ", true, 0, "database", "postgresql");
	/* "xyz" never matches: nothing matches all */
	CHECK_RUN("", true, 0, "database", "postgresql", "xyz");
	CHECK_RUN("4:3:7 0:2:3 ", false, 2, "database", "postgresql",
		  "postgres");
	CHECK_RUN("4:3:7 ", false, 1, "database", "postgresql", "postgres");
	CHECK_RUN("0:2:3 ", true, 1, "database", "postgresql");
	search_free(si);
	docs_done(&d);
}
END_TEST

START_TEST(duplicate_terms)
{
	struct docs d;
	struct search_index *si = setup(&d);

	/* Identical terms (after folding) count once; all their bits set. */
	CHECK_RUN("2:1:3 3:1:3 ", false, 0, "über", "ÜBER");
	CHECK_RUN("2:1:3 3:1:3 ", true, 0, "über", "ÜBER");
	CHECK_RUN("3:2:7 1:1:4 2:1:3 ", false, 0, "über", "ÜBER", "rest api");
	CHECK_RUN("3:2:7 ", true, 0, "über", "ÜBER", "rest api");
	/* A prefix and an exact term are different terms. */
	CHECK_RUN("2:2:3 4:2:3 0:1:2 ", false, 0, "postgres", "postgres*");
	search_free(si);
	docs_done(&d);
}
END_TEST

START_TEST(overwrite_and_delete)
{
	struct docs d;
	struct search_index *si = setup(&d);

	CHECK_RUN("0:1:1 4:1:1 ", false, 0, "database");
	put(si, &d, 0, "Now we use SQLite.");
	CHECK_RUN("4:1:1 ", false, 0, "database");
	CHECK_RUN("0:1:1 ", false, 0, "sqlite");
	put(si, &d, 4, NULL);
	CHECK_RUN("", false, 0, "database");
	CHECK_RUN("", false, 0, "postgresql database");
	put(si, &d, 4, "database again");
	CHECK_RUN("4:1:1 ", false, 0, "database");
	/* Slot out of range */
	ck_assert_int_eq(search_add(si, 16, "x", 1), -EINVAL);
	search_free(si);
	docs_done(&d);
}
END_TEST

static int parse_err(const char *const *terms, const size_t *lens, size_t n,
		     const char *want)
{
	struct search_query *q = (struct search_query *)1;
	char msg[128] = "";
	int rc = search_query_parse(terms, lens, n, &q, msg, sizeof(msg));

	ck_assert_ptr_null(q);
	ck_assert_msg(strstr(msg, want), "message '%s' lacks '%s'", msg, want);
	return rc;
}

START_TEST(parse_errors)
{
	const char *terms[SEARCH_TERMS_MAX + 1];
	size_t lens[SEARCH_TERMS_MAX + 1], i;
	char *big = malloc(SEARCH_TERM_BYTES_MAX + 2);
	struct search_query *q = NULL;
	char msg[128];

	ck_assert_ptr_nonnull(big);
	ck_assert_int_eq(parse_err(terms, lens, 0, "no search terms"), -EINVAL);
	terms[0] = "ok";
	lens[0] = 2;
	terms[1] = "";
	lens[1] = 0;
	ck_assert_int_eq(parse_err(terms, lens, 2, "term 1 is empty"), -EINVAL);
	terms[1] = " -- ";
	lens[1] = 4;
	ck_assert_int_eq(parse_err(terms, lens, 2, "term 1 has no words"),
			 -EINVAL);
	terms[1] = "*";
	lens[1] = 1;
	ck_assert_int_eq(parse_err(terms, lens, 2, "term 1 has no words"),
			 -EINVAL);
	memset(big, 'a', SEARCH_TERM_BYTES_MAX + 1);
	terms[1] = big;
	lens[1] = SEARCH_TERM_BYTES_MAX + 1;
	ck_assert_int_eq(parse_err(terms, lens, 2, "longer than"), -EINVAL);
	lens[1] = SEARCH_TERM_BYTES_MAX; /* at the limit: fine */
	ck_assert_int_eq(
		search_query_parse(terms, lens, 2, &q, msg, sizeof(msg)), 0);
	search_query_free(q);
	for (i = 0; i <= SEARCH_TERMS_MAX; i++) {
		terms[i] = "w";
		lens[i] = 1;
	}
	ck_assert_int_eq(
		parse_err(terms, lens, SEARCH_TERMS_MAX + 1, "too many"),
		-EINVAL);
	ck_assert_int_eq(search_query_parse(terms, lens, SEARCH_TERMS_MAX, &q,
					    msg, sizeof(msg)),
			 0);
	search_query_free(q);
	free(big);
}
END_TEST

START_TEST(many_terms_bits)
{
	struct docs d;
	struct search_index *si = search_new(4);
	const char *terms[SEARCH_TERMS_MAX];
	size_t lens[SEARCH_TERMS_MAX], i, n_hits;
	char words[SEARCH_TERMS_MAX][8], text[SEARCH_TERMS_MAX * 8];
	struct search_query *q;
	struct search_hit *hits;
	char msg[64];

	ck_assert_ptr_nonnull(si);
	docs_init(&d, 4);
	text[0] = '\0';
	for (i = 0; i < SEARCH_TERMS_MAX; i++) {
		snprintf(words[i], sizeof(words[i]), "w%zu", i);
		terms[i] = words[i];
		lens[i] = strlen(words[i]);
		if (i % 2) { /* odd terms only */
			strcat(text, words[i]);
			strcat(text, " ");
		}
	}
	put(si, &d, 2, text);
	ck_assert_int_eq(search_query_parse(terms, lens, SEARCH_TERMS_MAX, &q,
					    msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(
		search_run(si, q, false, 0, text_of, &d, &hits, &n_hits), 0);
	ck_assert_uint_eq(n_hits, 1);
	ck_assert_uint_eq(hits[0].score, SEARCH_TERMS_MAX / 2);
	ck_assert(hits[0].matched == UINT64_C(0xaaaaaaaaaaaaaaaa));
	free(hits);
	ck_assert_int_eq(
		search_run(si, q, true, 0, text_of, &d, &hits, &n_hits), 0);
	ck_assert_uint_eq(n_hits, 0);
	free(hits);
	search_query_free(q);
	search_free(si);
	docs_done(&d);
}
END_TEST

/* ---- randomized consistency against a brute-force model ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * UINT64_C(2685821657736338717);
}

static size_t rnd_n(size_t n)
{
	return (size_t)(rnd() % n);
}

static uint64_t seed_from_env(void)
{
	const char *s = getenv("VMEM_SEARCH_SEED");

	if (s && *s)
		return strtoull(s, NULL, 0);
	return (uint64_t)time(NULL) * 2654435761u + 1;
}

static const char *const vocab[] = {
	"post",
	"Post",
	"postgres",
	"PostgreSQL",
	"postgresql",
	"post_it",
	"database",
	"DATABASE",
	"data",
	"datenbank",
	"DATENBANK",
	"Über",
	"über",
	"U\xcc\x88"
	"BER",
	"ubER",
	"データベース",
	"データ",
	"設計",
	"rest",
	"REST",
	"api",
	"rest_api",
	"ß",
	"ss",
	"SS",
	"a",
	"ab",
	"abc",
	"x86_64",
	"σίσυφος",
	"ΣΊΣΥΦΟΣ",
	"cache",
	"caching",
	"café",
	"cafe\xcc\x81",
};
#define N_VOCAB (sizeof(vocab) / sizeof(vocab[0]))

static const char *const seps[] = {" ", "  ",	", ", "-",  ". ", "\n",
				   "/", "\xff", "、", " (", ") "};
#define N_SEPS (sizeof(seps) / sizeof(seps[0]))

static char *random_text(void)
{
	size_t n = rnd_n(12), i, cap = 512, w = 0;
	char *s = malloc(cap);

	ck_assert_ptr_nonnull(s);
	for (i = 0; i < n; i++) {
		const char *sep = i ? seps[rnd_n(N_SEPS)] : "";
		const char *word = vocab[rnd_n(N_VOCAB)];

		w += (size_t)snprintf(s + w, cap - w, "%s%s", sep, word);
	}
	s[w] = '\0';
	return s;
}

/* A document or term as folded tokens. */
struct tokv {
	size_t n;
	char *tok[64];
	size_t len[64];
};

static int tokv_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct tokv *v = ctx;

	(void)pos;
	ck_assert_uint_lt(v->n, 64);
	v->tok[v->n] = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(v->tok[v->n]);
	memcpy(v->tok[v->n], p, len);
	v->len[v->n++] = len;
	return 0;
}

static void tokv_of(struct tokv *v, const char *s, size_t len)
{
	v->n = 0;
	ck_assert_int_eq(tokenize(s, len, tokv_cb, v), 0);
}

static void tokv_done(struct tokv *v)
{
	size_t i;

	for (i = 0; i < v->n; i++)
		free(v->tok[i]);
	v->n = 0;
}

struct mterm {
	struct tokv v;
	bool prefix;
};

static bool model_match(const struct tokv *doc, const struct mterm *t)
{
	size_t i, k;

	for (i = 0; i + t->v.n <= doc->n; i++) {
		for (k = 0; k < t->v.n; k++) {
			size_t dl = doc->len[i + k], tl = t->v.len[k];
			bool pre = t->prefix && k == t->v.n - 1;

			if (pre ? dl < tl : dl != tl)
				break;
			if (memcmp(doc->tok[i + k], t->v.tok[k], tl))
				break;
		}
		if (k == t->v.n)
			return true;
	}
	return false;
}

static bool mterm_eq(const struct mterm *a, const struct mterm *b)
{
	size_t k;

	if (a->v.n != b->v.n || a->prefix != b->prefix)
		return false;
	for (k = 0; k < a->v.n; k++)
		if (a->v.len[k] != b->v.len[k] ||
		    memcmp(a->v.tok[k], b->v.tok[k], a->v.len[k]))
			return false;
	return true;
}

static void random_term(char *buf, size_t n)
{
	const char *w = vocab[rnd_n(N_VOCAB)];
	size_t len;

	switch (rnd_n(4)) {
	case 0: /* word */
		snprintf(buf, n, "%s", w);
		break;
	case 1: /* prefix: cut anywhere, even inside a UTF-8 sequence */
		len = strlen(w);
		len = 1 + rnd_n(len);
		snprintf(buf, n, "%.*s*", (int)len, w);
		break;
	default: /* phrase of two, maybe a prefix */
		snprintf(buf, n, "%s%s%s%s", w, seps[rnd_n(N_SEPS)],
			 vocab[rnd_n(N_VOCAB)], rnd_n(3) ? "" : "*");
		break;
	}
}

struct mhit {
	size_t slot;
	unsigned score;
	uint64_t matched;
};

static int mhit_cmp(const void *a, const void *b)
{
	const struct mhit *x = a, *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static void check_random_query(struct search_index *si, struct docs *d,
			       struct tokv *docv)
{
	char bufs[3][128];
	const char *terms[3];
	size_t lens[3], n = 1 + rnd_n(3), i, k, n_hits, n_model = 0;
	struct mterm mt[3];
	struct mhit *model = calloc(d->n, sizeof(*model));
	bool all = rnd_n(2), ok;
	/* small limits stop inside a block, 100 (the benchmarks') often after
	 * several */
	size_t limit = rnd_n(3) ? 0 : 1 + rnd_n(rnd_n(2) ? 5 : 100);
	struct search_query *q = NULL;
	struct search_hit *hits = NULL;
	unsigned n_unique = 0;
	char msg[128];
	int rc;

	ck_assert_ptr_nonnull(model);
	for (i = 0; i < n; i++) {
		random_term(bufs[i], sizeof(bufs[i]));
		terms[i] = bufs[i];
		lens[i] = strlen(bufs[i]);
		mt[i].prefix = bufs[i][lens[i] - 1] == '*';
		tokv_of(&mt[i].v, bufs[i], lens[i] - mt[i].prefix);
	}
	ok = true;
	for (i = 0; i < n; i++)
		ok = ok && mt[i].v.n > 0;
	rc = search_query_parse(terms, lens, n, &q, msg, sizeof(msg));
	if (!ok) {
		ck_assert_int_eq(rc, -EINVAL);
		goto out;
	}
	ck_assert_msg(rc == 0, "parse: %s", msg);
	for (i = 0; i < n; i++) {
		for (k = 0; k < i; k++)
			if (mterm_eq(&mt[i], &mt[k]))
				break;
		n_unique += k == i;
	}
	for (i = 0; i < d->n; i++) {
		struct mhit h = {i, 0, 0};
		size_t j;

		if (!d->text[i])
			continue;
		for (k = 0; k < n; k++) {
			if (!model_match(&docv[i], &mt[k]))
				continue;
			h.matched |= (uint64_t)1 << k;
			for (j = 0; j < k; j++)
				if (mterm_eq(&mt[k], &mt[j]))
					break;
			h.score += j == k;
		}
		if (!h.matched || (all && h.score != n_unique))
			continue;
		model[n_model++] = h;
	}
	qsort(model, n_model, sizeof(model[0]), mhit_cmp);
	if (limit && n_model > limit)
		n_model = limit;
	ck_assert_int_eq(
		search_run(si, q, all, limit, text_of, d, &hits, &n_hits), 0);
	ck_assert_msg(n_hits == n_model, "%zu hits, model %zu; first term '%s'",
		      n_hits, n_model, terms[0]);
	for (i = 0; i < n_hits; i++) {
		ck_assert_uint_eq(hits[i].slot, model[i].slot);
		ck_assert_uint_eq(hits[i].score, model[i].score);
		ck_assert(hits[i].matched == model[i].matched);
	}
out:
	free(model);
	free(hits);
	search_query_free(q);
	for (i = 0; i < n; i++)
		tokv_done(&mt[i].v);
}

START_TEST(random_consistency)
{
	enum { SLOTS = 48, OPS = 3000 };
	uint64_t seed = seed_from_env();
	struct search_index *si = search_new(SLOTS);
	struct tokv docv[SLOTS];
	struct docs d;
	size_t op, i;

	printf("# random_consistency seed %" PRIu64
	       " (VMEM_SEARCH_SEED to repeat)\n",
	       seed);
	fflush(stdout);
	rng_state = seed ? seed : 1;
	ck_assert_ptr_nonnull(si);
	docs_init(&d, SLOTS);
	memset(docv, 0, sizeof(docv));
	for (op = 0; op < OPS; op++) {
		size_t slot = rnd_n(SLOTS);
		char *text = rnd_n(4) ? random_text() : NULL;

		/* add, replace (= remove + add) or remove */
		put(si, &d, slot, text);
		tokv_done(&docv[slot]);
		if (text)
			tokv_of(&docv[slot], text, strlen(text));
		free(text);
		for (i = 0; i < 3; i++)
			check_random_query(si, &d, docv);
	}
	/* Empty everything: no hits, no heap postings left. */
	for (i = 0; i < SLOTS; i++) {
		put(si, &d, i, NULL);
		tokv_done(&docv[i]);
	}
	for (i = 0; i < 50; i++)
		check_random_query(si, &d, docv);
	search_free(si);
	docs_done(&d);
}
END_TEST

/* The same model with thousands of documents over the same small
 * vocabulary: every token's postings span several compressed blocks (128
 * documents each), so block tables, skips between blocks and a limit met
 * in a later block are exercised, and removals empty blocks in the middle
 * of a list. */
START_TEST(random_consistency_many_blocks)
{
	enum { SLOTS = 3000, OPS = 1500 };
	uint64_t seed = seed_from_env();
	struct search_index *si = search_new(SLOTS);
	struct tokv *docv = calloc(SLOTS, sizeof(*docv));
	struct docs d;
	size_t op, i;

	printf("# random_consistency_many_blocks seed %" PRIu64
	       " (VMEM_SEARCH_SEED to repeat)\n",
	       seed);
	fflush(stdout);
	rng_state = seed ? seed : 1;
	ck_assert_ptr_nonnull(si);
	ck_assert_ptr_nonnull(docv);
	docs_init(&d, SLOTS);
	for (i = 0; i < SLOTS; i++) {
		char *text = random_text();

		put(si, &d, i, text);
		tokv_of(&docv[i], text, strlen(text));
		free(text);
	}
	for (i = 0; i < 100; i++)
		check_random_query(si, &d, docv);
	/* Remove a run of slots whole (blocks emptied mid-list), then
	 * random replaces and removes. */
	for (i = SLOTS / 3; i < SLOTS / 3 + 400; i++) {
		put(si, &d, i, NULL);
		tokv_done(&docv[i]);
	}
	for (op = 0; op < OPS; op++) {
		size_t slot = rnd_n(SLOTS);
		char *text = rnd_n(4) ? random_text() : NULL;

		put(si, &d, slot, text);
		tokv_done(&docv[slot]);
		if (text)
			tokv_of(&docv[slot], text, strlen(text));
		free(text);
		if (op % 10 == 0)
			check_random_query(si, &d, docv);
	}
	for (i = 0; i < 100; i++)
		check_random_query(si, &d, docv);
	for (i = 0; i < SLOTS; i++)
		tokv_done(&docv[i]);
	free(docv);
	search_free(si);
	docs_done(&d);
}
END_TEST

enum { SNAP_SLOTS = 40, SNAP_SLOTS_PAGES = 64 };

/* ---- pages: a query after a hit seen ---- */

/* A page after hit k of the whole list (its score and slot) holds exactly
 * the hits that follow k in the whole list, at most limit of them. */
START_TEST(pages_follow_the_whole_list)
{
	uint64_t seed = seed_from_env();
	struct search_index *si = search_new(SNAP_SLOTS_PAGES);
	struct docs d;
	size_t round, i;

	printf("# pages_follow_the_whole_list seed %" PRIu64 "\n", seed);
	fflush(stdout);
	rng_state = seed ? seed : 1;
	ck_assert_ptr_nonnull(si);
	docs_init(&d, SNAP_SLOTS_PAGES);
	for (i = 0; i < SNAP_SLOTS_PAGES; i++) {
		char *text = random_text();

		put(si, &d, i, text);
		free(text);
	}
	for (round = 0; round < 2000; round++) {
		char bufs[3][128];
		const char *terms[3];
		size_t lens[3], n = 1 + rnd_n(3), n_all, n_page, k;
		size_t limit = rnd_n(3) ? 1 + rnd_n(6) : 0;
		bool all = rnd_n(3) == 0;
		struct search_query *q = NULL;
		struct search_hit *whole = NULL, *page = NULL;
		struct search_exec *e;
		char msg[128];

		for (i = 0; i < n; i++) {
			random_term(bufs[i], sizeof(bufs[i]));
			terms[i] = bufs[i];
			lens[i] = strlen(bufs[i]);
		}
		if (search_query_parse(terms, lens, n, &q, msg, sizeof(msg)))
			continue; /* a term without words */
		ck_assert_int_eq(
			search_run(si, q, all, 0, text_of, &d, &whole, &n_all),
			0);
		if (n_all == 0) {
			search_query_free(q);
			continue;
		}
		k = rnd_n(n_all);
		ck_assert_int_eq(
			search_exec_new(si, q, all, limit, text_of, &d, &e), 0);
		search_exec_after(e, whole[k].score, whole[k].slot);
		while ((i = (size_t)search_exec_step(e, NULL, 1 + rnd_n(20))) ==
		       0)
			;
		ck_assert_uint_eq(i, 1);
		ck_assert_int_eq(search_exec_take(e, &page, &n_page), 0);
		search_exec_free(e);
		ck_assert_uint_eq(n_page, limit && n_all - k - 1 > limit
						  ? limit
						  : n_all - k - 1);
		for (i = 0; i < n_page; i++) {
			ck_assert_uint_eq(page[i].slot, whole[k + 1 + i].slot);
			ck_assert_uint_eq(page[i].score,
					  whole[k + 1 + i].score);
			ck_assert(page[i].matched == whole[k + 1 + i].matched);
		}
		free(whole);
		free(page);
		search_query_free(q);
	}
	search_free(si);
	docs_done(&d);
}
END_TEST

/* ---- a query in steps, with writes between the steps ---- */

/* What the slots held when a stepped query began: the changed ones. */
struct snap {
	bool changed[SNAP_SLOTS];
	char *old[SNAP_SLOTS]; /* NULL: the slot was empty */
};

static size_t snap_next(void *ctx, size_t from)
{
	struct snap *sn = ctx;

	for (; from < SNAP_SLOTS; from++)
		if (sn->changed[from])
			return from;
	return SIZE_MAX;
}

static int snap_old_text(void *ctx, size_t slot, const char **text, size_t *len)
{
	struct snap *sn = ctx;

	ck_assert(sn->changed[slot]);
	if (!sn->old[slot])
		return -ENOENT;
	*text = sn->old[slot];
	*len = strlen(sn->old[slot]);
	return 0;
}

/* Hits of terms over the documents of docv (present ones), as the design
 * says: by score, then slot; at most limit (0: all). */
static size_t model_hits(const struct tokv *docv, const bool *present,
			 size_t n_slots, const struct mterm *mt, size_t n,
			 bool all, size_t limit, struct mhit *out)
{
	size_t i, k, j, n_model = 0;
	unsigned n_unique = 0;

	for (i = 0; i < n; i++) {
		for (k = 0; k < i; k++)
			if (mterm_eq(&mt[i], &mt[k]))
				break;
		n_unique += k == i;
	}
	for (i = 0; i < n_slots; i++) {
		struct mhit h = {i, 0, 0};

		if (!present[i])
			continue;
		for (k = 0; k < n; k++) {
			if (!model_match(&docv[i], &mt[k]))
				continue;
			h.matched |= (uint64_t)1 << k;
			for (j = 0; j < k; j++)
				if (mterm_eq(&mt[k], &mt[j]))
					break;
			h.score += j == k;
		}
		if (!h.matched || (all && h.score != n_unique))
			continue;
		out[n_model++] = h;
	}
	qsort(out, n_model, sizeof(out[0]), mhit_cmp);
	return limit && n_model > limit ? limit : n_model;
}

/* A stepped query answers from the index as it was when it began, the
 * changed slots judged on their old text, whatever is written between
 * its steps. */
START_TEST(steps_see_the_beginning)
{
	uint64_t seed = seed_from_env();
	struct search_index *si = search_new(SNAP_SLOTS);
	struct tokv docv[SNAP_SLOTS];
	bool present[SNAP_SLOTS];
	struct docs d;
	size_t round, i;

	printf("# steps_see_the_beginning seed %" PRIu64 "\n", seed);
	fflush(stdout);
	rng_state = seed ? seed : 1;
	ck_assert_ptr_nonnull(si);
	docs_init(&d, SNAP_SLOTS);
	for (round = 0; round < 400; round++) {
		struct search_changes ch;
		struct snap sn = {0};
		struct search_exec *e = NULL;
		struct search_query *q = NULL;
		struct search_hit *hits = NULL;
		struct mhit model[SNAP_SLOTS];
		struct mterm mt[3];
		char bufs[3][128];
		const char *terms[3];
		size_t lens[3], n = 1 + rnd_n(3), n_hits, n_model, steps = 0;
		bool all = rnd_n(2), ok = true;
		size_t limit = rnd_n(2) ? 0 : 1 + rnd_n(6);
		char msg[128];
		int rc;

		for (i = 0; i < 6; i++) {
			char *text = rnd_n(4) ? random_text() : NULL;

			put(si, &d, rnd_n(SNAP_SLOTS), text);
			free(text);
		}
		/* The model's view: the documents now. */
		for (i = 0; i < SNAP_SLOTS; i++) {
			present[i] = d.text[i] != NULL;
			docv[i].n = 0;
			if (present[i])
				tokv_of(&docv[i], d.text[i], strlen(d.text[i]));
		}
		for (i = 0; i < n; i++) {
			random_term(bufs[i], sizeof(bufs[i]));
			terms[i] = bufs[i];
			lens[i] = strlen(bufs[i]);
			mt[i].prefix = bufs[i][lens[i] - 1] == '*';
			tokv_of(&mt[i].v, bufs[i], lens[i] - mt[i].prefix);
			ok = ok && mt[i].v.n > 0;
		}
		rc = search_query_parse(terms, lens, n, &q, msg, sizeof(msg));
		ck_assert_int_eq(rc, ok ? 0 : -EINVAL);
		if (ok) {
			ch = (struct search_changes){&sn, snap_next,
						     snap_old_text};
			ck_assert_int_eq(search_exec_new(si, q, all, limit,
							 text_of, &d, &e),
					 0);
			for (;;) {
				size_t slot;
				char *text;

				rc = search_exec_step(e, &ch, 1 + rnd_n(30));
				ck_assert_int_ge(rc, 0);
				steps++;
				if (rc == 1)
					break;
				/* Writes between steps, the old text kept. */
				slot = rnd_n(SNAP_SLOTS);
				text = rnd_n(3) ? random_text() : NULL;
				if (!sn.changed[slot]) {
					sn.changed[slot] = true;
					sn.old[slot] =
						d.text[slot]
							? strdup(d.text[slot])
							: NULL;
				}
				put(si, &d, slot, text);
				free(text);
			}
			ck_assert_int_eq(search_exec_take(e, &hits, &n_hits),
					 0);
			n_model = model_hits(docv, present, SNAP_SLOTS, mt, n,
					     all, limit, model);
			ck_assert_msg(n_hits == n_model,
				      "%zu hits, model %zu, %zu steps; first "
				      "term '%s'",
				      n_hits, n_model, steps, terms[0]);
			for (i = 0; i < n_hits; i++) {
				ck_assert_uint_eq(hits[i].slot, model[i].slot);
				ck_assert_uint_eq(hits[i].score,
						  model[i].score);
				ck_assert(hits[i].matched == model[i].matched);
			}
		}
		free(hits);
		search_exec_free(e);
		search_query_free(q);
		for (i = 0; i < n; i++)
			tokv_done(&mt[i].v);
		for (i = 0; i < SNAP_SLOTS; i++) {
			free(sn.old[i]);
			tokv_done(&docv[i]);
		}
	}
	search_free(si);
	docs_done(&d);
}
END_TEST

static Suite *search_suite(void)
{
	Suite *s = suite_create("search");
	TCase *tc = tcase_create("core");
	TCase *tr = tcase_create("random");

	tcase_add_test(tc, design_examples);
	tcase_add_test(tc, scores_and_order);
	tcase_add_test(tc, duplicate_terms);
	tcase_add_test(tc, overwrite_and_delete);
	tcase_add_test(tc, parse_errors);
	tcase_add_test(tc, many_terms_bits);
	suite_add_tcase(s, tc);
	tcase_set_timeout(tr, 60);
	tcase_add_test(tr, random_consistency);
	tcase_add_test(tr, random_consistency_many_blocks);
	tcase_add_test(tr, steps_see_the_beginning);
	tcase_add_test(tr, pages_follow_the_whole_list);
	suite_add_tcase(s, tr);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(search_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

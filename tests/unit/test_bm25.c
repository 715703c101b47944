/*
 * Unit tests of daemon/find/bm25.c: BM25 over weighted fields, whole
 * words and prefixes, stop words, removal, filters and ties, and the
 * choice of the terms scored.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bm25.h"
#include "run_suite.h"

/* Add a document of context, action and outcome (weights 3, 1, 1). */
static void add(struct bm25 *ix, uint32_t doc, const char *ctx,
		const char *action, const char *outcome)
{
	struct bm25_field f[3] = {{ctx, strlen(ctx), 3},
				  {action, strlen(action), 1},
				  {outcome, strlen(outcome), 1}};

	ck_assert_int_eq(bm25_add(ix, doc, f, 3), 0);
}

static void del(struct bm25 *ix, uint32_t doc, const char *ctx,
		const char *action, const char *outcome)
{
	struct bm25_field f[3] = {{ctx, strlen(ctx), 3},
				  {action, strlen(action), 1},
				  {outcome, strlen(outcome), 1}};

	bm25_remove(ix, doc, f, 3);
}

/* The documents a query finds, best first, as "d1 d2 ...". */
static void search(struct bm25 *ix, const char *text, bm25_accept_fn accept,
		   void *ctx, size_t limit, char *out, size_t n)
{
	struct bm25_query *q;
	struct bm25_hit *hits;
	size_t n_hits, scored[BM25_TERMS_MAX], n_scored, o = 0;
	char msg[200];

	ck_assert_int_eq(
		bm25_query_parse(text, strlen(text), &q, msg, sizeof(msg)), 0);
	ck_assert_int_eq(bm25_search(ix, q, limit, accept, ctx, &hits, &n_hits,
				     scored, &n_scored),
			 0);
	out[0] = '\0';
	for (size_t i = 0; i < n_hits; i++)
		o += (size_t)snprintf(out + o, n - o, "%sd%u", i ? " " : "",
				      hits[i].doc);
	free(hits);
	bm25_query_free(q);
}

START_TEST(test_whole_words_and_prefixes)
{
	struct bm25 *ix = bm25_new();
	char got[256];

	add(ix, 0, "Use PostgreSQL for persistence", "chose it", "fine");
	add(ix, 1, "Write a blog post", "drafted", "published the post");
	add(ix, 2, "Post-mortem of the outage", "wrote it", "shared");
	search(ix, "post", NULL, NULL, 10, got, sizeof(got));
	/* Not PostgreSQL; doc 1 has "post" in context and outcome. */
	ck_assert_str_eq(got, "d1 d2");
	search(ix, "post*", NULL, NULL, 10, got, sizeof(got));
	ck_assert_ptr_nonnull(strstr(got, "d0"));
	ck_assert_ptr_nonnull(strstr(got, "d1"));
	ck_assert_ptr_nonnull(strstr(got, "d2"));
	search(ix, "POSTGRESQL", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "d0");
	search(ix, "postgres", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "");
	bm25_free(ix);
}
END_TEST

/* A word in the context counts more than in the action or outcome, and
 * a rare word more than a common one. */
START_TEST(test_weights_and_idf)
{
	struct bm25 *ix = bm25_new();
	char got[256];

	add(ix, 0, "deploy service", "restart", "cache cold");
	add(ix, 1, "restart service", "deploy", "cache warm");
	search(ix, "deploy", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "d0 d1");
	search(ix, "restart", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "d1 d0");
	add(ix, 2, "database migration", "ran migration", "ok");
	add(ix, 3, "database backup", "ran backup", "ok");
	add(ix, 4, "database index", "created index", "ok");
	/* "migration" is in one document, "database" in three. */
	search(ix, "database migration", NULL, NULL, 1, got, sizeof(got));
	ck_assert_str_eq(got, "d2");
	bm25_free(ix);
}
END_TEST

START_TEST(test_stopwords_and_queries)
{
	struct bm25_query *q;
	char msg[200];

	ck_assert(bm25_stopword("the", 3));
	ck_assert(bm25_stopword("and", 3));
	ck_assert(!bm25_stopword("postgresql", 10));
	ck_assert_int_eq(bm25_query_parse("", 0, &q, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(bm25_query_parse("  \t ", 4, &q, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(
		bm25_query_parse("the and of it", 13, &q, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "stop words"));
	ck_assert_int_eq(bm25_query_parse("!!! ---", 7, &q, msg, sizeof(msg)),
			 -EINVAL);
	/* A stop word asked as a prefix stays. */
	ck_assert_int_eq(bm25_query_parse("the*", 4, &q, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(bm25_query_terms(q), 1);
	ck_assert_str_eq(bm25_query_term(q, 0), "the*");
	bm25_query_free(q);
	/* Terms are folded, repeated ones counted once, a prefix differs
	 * from the word. */
	ck_assert_int_eq(bm25_query_parse("Über über post* post the rest-api",
					  strlen("Über über post* post the "
						 "rest-api"),
					  &q, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(bm25_query_terms(q), 5);
	ck_assert_str_eq(bm25_query_term(q, 0), "über");
	ck_assert_str_eq(bm25_query_term(q, 1), "post*");
	ck_assert_str_eq(bm25_query_term(q, 2), "post");
	ck_assert_str_eq(bm25_query_term(q, 3), "rest");
	ck_assert_str_eq(bm25_query_term(q, 4), "api");
	bm25_query_free(q);
}
END_TEST

/* Equal scores: the tie key (higher first), then the newer document. */
static bool tie_cb(void *ctx, uint32_t doc, uint64_t *tie)
{
	const uint64_t *ties = ctx;

	*tie = ties[doc];
	return ties[doc] != 99; /* 99: filtered out */
}

START_TEST(test_ties_and_filter)
{
	struct bm25 *ix = bm25_new();
	uint64_t ties[5] = {5, 7, 5, 99, 7};
	char got[256];

	for (uint32_t d = 0; d < 5; d++)
		add(ix, d, "same words here", "same", "same");
	search(ix, "words", tie_cb, ties, 10, got, sizeof(got));
	ck_assert_str_eq(got, "d4 d1 d2 d0");
	search(ix, "words", tie_cb, ties, 2, got, sizeof(got));
	ck_assert_str_eq(got, "d4 d1");
	bm25_free(ix);
}
END_TEST

/* The pruned search (a few results: terms that cannot lift a new
 * document into them only update the ones touched) against the whole
 * ranking (every match kept, nothing pruned): the same hits, scores and
 * matched terms, on a corpus of skewed word frequencies with removed
 * documents and a filter. */
struct counted {
	unsigned long calls;
};

static bool counted_cb(void *ctx, uint32_t doc, uint64_t *tie)
{
	((struct counted *)ctx)->calls++;
	*tie = doc % 7;
	return doc % 5 != 3;
}

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* Word k of a skewed vocabulary of 300 (low k much more frequent). */
static void word(char *w, uint64_t *s)
{
	uint64_t a = lcg(s) % 300, b = lcg(s) % 300;

	snprintf(w, 16, "w%llu", (unsigned long long)(a * b / 300));
}

static void text(char *out, size_t words, uint64_t *s)
{
	size_t o = 0;

	for (size_t i = 0; i < words; i++) {
		char w[16];

		word(w, s);
		o += (size_t)sprintf(out + o, "%s%s", i ? " " : "", w);
	}
}

START_TEST(test_pruned_equals_whole)
{
	enum { DOCS = 4000 };
	struct bm25 *ix = bm25_new();
	uint64_t seed = 42;
	unsigned long pruned_calls = 0, whole_calls = 0;
	int differs = 0;

	for (uint32_t d = 0; d < DOCS; d++) {
		char c[600], a[300], o[300];

		text(c, 20 + lcg(&seed) % 40, &seed);
		text(a, 5 + lcg(&seed) % 20, &seed);
		text(o, 5 + lcg(&seed) % 20, &seed);
		add(ix, d, c, a, o);
		if (d % 11 == 4)
			del(ix, d, c, a, o);
	}
	for (int n = 0; n < 300; n++) {
		char qt[200];
		struct bm25_query *q;
		struct bm25_hit *few, *all;
		size_t n_few, n_all, sc[BM25_TERMS_MAX], n_sc, limit;
		struct counted cf = {0}, ca = {0};
		char msg[200];

		text(qt, 2 + lcg(&seed) % 7, &seed);
		if (n % 10 == 0)
			strcat(qt, " w1*");
		limit = 1 + lcg(&seed) % 10;
		ck_assert_int_eq(
			bm25_query_parse(qt, strlen(qt), &q, msg, sizeof(msg)),
			0);
		ck_assert_int_eq(bm25_search(ix, q, limit, counted_cb, &cf,
					     &few, &n_few, sc, &n_sc),
				 0);
		ck_assert_int_eq(bm25_search(ix, q, DOCS, counted_cb, &ca, &all,
					     &n_all, sc, &n_sc),
				 0);
		ck_assert_uint_eq(n_few, n_all < limit ? n_all : limit);
		for (size_t i = 0; i < n_few; i++) {
			ck_assert_msg(few[i].doc == all[i].doc &&
					      few[i].score == all[i].score &&
					      few[i].matched ==
						      all[i].matched &&
					      few[i].tie == all[i].tie,
				      "query '%s' limit %zu: hit %zu is d%u "
				      "(%g), not d%u (%g)",
				      qt, limit, i, few[i].doc, few[i].score,
				      all[i].doc, all[i].score);
		}
		pruned_calls += cf.calls;
		whole_calls += ca.calls;
		differs += cf.calls < ca.calls;
		free(few);
		free(all);
		bm25_query_free(q);
	}
	/* The few results ask the filter about far fewer documents. */
	ck_assert_msg(pruned_calls * 4 < whole_calls, "%lu vs %lu calls",
		      pruned_calls, whole_calls);
	ck_assert_int_gt(differs, 200);
	bm25_free(ix);
}
END_TEST

/* Postings cut to their length by bm25_trim (a term of one document
 * holds 2 bytes) grow again for the next documents, with gaps of several
 * varint bytes (AddressSanitizer saw the old doubling write past them). */
START_TEST(test_trim_then_add)
{
	struct bm25 *ix = bm25_new();
	char got[512], want[512];
	size_t o = 0;

	add(ix, 0, "alpha", "beta", "gamma");
	add(ix, 1, "delta", "beta", "gamma");
	bm25_trim(ix);
	for (uint32_t d = 2; d < 12; d++) {
		add(ix, d * 1000003u, "alpha", "epsilon", "gamma");
		bm25_trim(ix);
	}
	search(ix, "alpha", NULL, NULL, 20, got, sizeof(got));
	for (uint32_t d = 11; d >= 2; d--)
		o += (size_t)snprintf(want + o, sizeof(want) - o, "d%u ",
				      d * 1000003u);
	snprintf(want + o, sizeof(want) - o, "d0");
	ck_assert_str_eq(got, want);
	bm25_free(ix);
}
END_TEST

START_TEST(test_remove)
{
	struct bm25 *ix = bm25_new();
	struct bm25_field f = {"x", 1, 1};
	char got[256];

	add(ix, 0, "alpha beta", "a", "b");
	add(ix, 1, "alpha gamma", "a", "b");
	add(ix, 5, "alpha delta", "a", "b");
	ck_assert_uint_eq(bm25_count(ix), 3);
	/* Numbers only grow. */
	ck_assert_int_eq(bm25_add(ix, 5, &f, 1), -EINVAL);
	ck_assert_int_eq(bm25_add(ix, 4, &f, 1), -EINVAL);
	del(ix, 1, "alpha gamma", "a", "b");
	del(ix, 1, "alpha gamma", "a", "b"); /* twice: nothing */
	ck_assert_uint_eq(bm25_count(ix), 2);
	search(ix, "gamma", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "");
	search(ix, "alpha", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "d5 d0");
	add(ix, 9, "gamma ray", "a", "b");
	search(ix, "gamma", NULL, NULL, 10, got, sizeof(got));
	ck_assert_str_eq(got, "d9");
	bm25_free(ix);
}
END_TEST

/* Of a long query, the 64 rarest terms are scored, and matched bits name
 * them. */
START_TEST(test_scored_terms)
{
	struct bm25 *ix = bm25_new();
	struct bm25_query *q;
	struct bm25_hit *hits;
	size_t n_hits, scored[BM25_TERMS_MAX], n_scored;
	char text[4096], msg[200];
	size_t o = 0;

	/* w0..w99 in every document; "rare" in document 3 only. */
	for (int i = 0; i < 100; i++)
		o += (size_t)snprintf(text + o, sizeof(text) - o, "w%d ", i);
	for (uint32_t d = 0; d < 8; d++)
		add(ix, d, text, d == 3 ? "rare" : "x", "y");
	snprintf(text + o, sizeof(text) - o, "rare");
	ck_assert_int_eq(
		bm25_query_parse(text, strlen(text), &q, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(bm25_query_terms(q), 101);
	ck_assert_int_eq(bm25_search(ix, q, 3, NULL, NULL, &hits, &n_hits,
				     scored, &n_scored),
			 0);
	ck_assert_uint_eq(n_scored, BM25_TERMS_MAX);
	/* In query order: "rare" came last. */
	ck_assert_str_eq(bm25_query_term(q, scored[63]), "rare");
	ck_assert_uint_lt(scored[0], scored[1]);
	ck_assert_uint_eq(n_hits, 3);
	ck_assert_uint_eq(hits[0].doc, 3);
	ck_assert(hits[0].matched >> 63);    /* rare */
	ck_assert(!(hits[1].matched >> 63)); /* others: no */
	ck_assert_uint_eq(__builtin_popcountll(hits[0].matched), 64);
	ck_assert(hits[0].score > hits[1].score);
	free(hits);
	bm25_query_free(q);
	bm25_free(ix);
}
END_TEST

/* Prefixes over a vocabulary that grows past the sorted part. */
START_TEST(test_prefix_vocabulary)
{
	struct bm25 *ix = bm25_new();
	char word[64], got[256];

	for (uint32_t d = 0; d < 3000; d++) {
		snprintf(word, sizeof(word), "term%05u", d);
		add(ix, d, word, "x", "y");
	}
	search(ix, "term0299*", NULL, NULL, 20, got, sizeof(got));
	ck_assert_str_eq(got, "d2999 d2998 d2997 d2996 d2995 d2994 d2993 "
			      "d2992 d2991 d2990");
	add(ix, 3000, "term02995zz", "x", "y");
	search(ix, "term02995*", NULL, NULL, 20, got, sizeof(got));
	ck_assert_ptr_nonnull(strstr(got, "d3000"));
	ck_assert_ptr_nonnull(strstr(got, "d2995"));
	ck_assert(bm25_memory(ix) > 3000 * 10);
	bm25_free(ix);
}
END_TEST

static Suite *bm25_suite(void)
{
	Suite *s = suite_create("bm25");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_whole_words_and_prefixes);
	tcase_add_test(tc, test_weights_and_idf);
	tcase_add_test(tc, test_stopwords_and_queries);
	tcase_add_test(tc, test_ties_and_filter);
	tcase_add_test(tc, test_remove);
	tcase_add_test(tc, test_scored_terms);
	tcase_add_test(tc, test_prefix_vocabulary);
	tcase_add_test(tc, test_pruned_equals_whole);
	tcase_add_test(tc, test_trim_then_add);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(bm25_suite());
}

/* Unit tests of daemon/find/tokenize.c: token boundaries, folding, positions. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize.h"

#define MAX_TOKS 32

struct toks {
	size_t n;
	char tok[MAX_TOKS][128];
	size_t pos[MAX_TOKS];
	size_t stop_after; /* 0: never stop */
};

static int collect_cb(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct toks *t = ctx;

	ck_assert_uint_lt(t->n, MAX_TOKS);
	ck_assert_uint_lt(len, sizeof(t->tok[0]));
	memcpy(t->tok[t->n], tok, len);
	t->tok[t->n][len] = '\0';
	t->pos[t->n] = pos;
	t->n++;
	if (t->stop_after && t->n == t->stop_after)
		return 42;
	return 0;
}

static struct toks run(const char *s)
{
	struct toks t;

	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(tokenize(s, strlen(s), collect_cb, &t), 0);
	return t;
}

/* The single token of s (asserts there is exactly one). */
static const char *one(const char *s)
{
	static struct toks t;

	t = run(s);
	ck_assert_msg(t.n == 1, "'%s' gave %zu tokens", s, t.n);
	return t.tok[0];
}

START_TEST(ascii_words)
{
	struct toks t = run("  Hello, World! rest-api snake_case x86_64 42");

	ck_assert_uint_eq(t.n, 7);
	ck_assert_str_eq(t.tok[0], "hello");
	ck_assert_str_eq(t.tok[1], "world");
	ck_assert_str_eq(t.tok[2], "rest");
	ck_assert_str_eq(t.tok[3], "api");
	ck_assert_str_eq(t.tok[4], "snake_case");
	ck_assert_str_eq(t.tok[5], "x86_64");
	ck_assert_str_eq(t.tok[6], "42");
	ck_assert_uint_eq(t.pos[0], 0);
	ck_assert_uint_eq(t.pos[6], 6);
}
END_TEST

START_TEST(punctuation_only)
{
	struct toks t = run(" -- ,.;:!?()[]{}<>'\"/\\|@#$%^&*+=~` \t\n");

	ck_assert_uint_eq(t.n, 0);
	t = run("");
	ck_assert_uint_eq(t.n, 0);
}
END_TEST

START_TEST(unicode_folding)
{
	ck_assert_str_eq(one("Über"), "über");
	ck_assert_str_eq(one("über"), "über");
	ck_assert_str_eq(one("ÜBER"), "über");
	ck_assert_str_eq(one("U\xcc\x88"
			     "ber"),
			 "über"); /* NFD input */
	ck_assert_str_eq(one("u\xcc\x88"
			     "BER"),
			 "über");
	ck_assert_str_eq(one("DATENBANK"), "datenbank");
	ck_assert_str_eq(one("ß"), "ss");
	ck_assert_str_eq(one("STRASSE"), one("Straße"));
	ck_assert_str_eq(one("データベース"), "データベース");
	ck_assert_str_eq(one("ΣΊΣΥΦΟΣ"), one("σίσυφος"));
	ck_assert_str_eq(one("\xe2\x84\xaa"), "k"); /* KELVIN SIGN */
	ck_assert_str_eq(one("Ünïcödé_42"), "ünïcödé_42");
}
END_TEST

START_TEST(unicode_boundaries)
{
	/* CJK with ideographic punctuation, Cyrillic, Arabic digits. */
	struct toks t = run("データベース、設計。Привет–мир ٣٤ café’s");

	ck_assert_uint_eq(t.n, 7);
	ck_assert_str_eq(t.tok[0], "データベース");
	ck_assert_str_eq(t.tok[1], "設計");
	ck_assert_str_eq(t.tok[2], "привет");
	ck_assert_str_eq(t.tok[3], "мир");
	ck_assert_str_eq(t.tok[4], "٣٤");
	ck_assert_str_eq(t.tok[5], "café");
	ck_assert_str_eq(t.tok[6], "s");
	/* A combining mark not following a word character separates. */
	t = run("\xcc\x88"
		"abc \xcc\x88");
	ck_assert_uint_eq(t.n, 1);
	ck_assert_str_eq(t.tok[0], "abc");
	/* Emoji and symbols separate; letter-like numbers (Nl, No) too. */
	t = run("a\xf0\x9f\x98\x80"
		"b\xe2\x85\xa0"
		"c\xc2\xb2"
		"d");
	ck_assert_uint_eq(t.n, 4);
	ck_assert_str_eq(t.tok[3], "d");
}
END_TEST

START_TEST(invalid_utf8)
{
	/* Stray continuation, truncated sequence, overlong, 0xff, surrogate. */
	struct toks t = run("ab\x80"
			    "cd\xc3"
			    "ef\xc0\xaf"
			    "gh\xff"
			    "ij\xed\xa0\x80"
			    "kl\xe3\x83");

	ck_assert_uint_eq(t.n, 6);
	ck_assert_str_eq(t.tok[0], "ab");
	ck_assert_str_eq(t.tok[1], "cd");
	ck_assert_str_eq(t.tok[2], "ef");
	ck_assert_str_eq(t.tok[3], "gh");
	ck_assert_str_eq(t.tok[4], "ij");
	ck_assert_str_eq(t.tok[5], "kl");
	ck_assert_uint_eq(t.pos[5], 5);
	/* An invalid byte after a non-ASCII letter also separates. */
	t = run("\xc3\x9c\xff\xc3\x9c");
	ck_assert_uint_eq(t.n, 2);
	ck_assert_str_eq(t.tok[0], "ü");
	ck_assert_str_eq(t.tok[1], "ü");
}
END_TEST

START_TEST(embedded_nul)
{
	struct toks t;
	static const char s[] = "ab\0cd";

	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(tokenize(s, sizeof(s) - 1, collect_cb, &t), 0);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_str_eq(t.tok[1], "cd");
	/* Length is honoured: no read past len. */
	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(tokenize("abcdef", 3, collect_cb, &t), 0);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_str_eq(t.tok[0], "abc");
}
END_TEST

START_TEST(callback_stops)
{
	struct toks t;
	const char *s = "one two three four";

	memset(&t, 0, sizeof(t));
	t.stop_after = 2;
	ck_assert_int_eq(tokenize(s, strlen(s), collect_cb, &t), 42);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_str_eq(t.tok[1], "two");
	ck_assert_uint_eq(t.pos[1], 1);
}
END_TEST

struct long_ctx {
	size_t n, len;
	char first;
};

static int long_cb(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct long_ctx *lc = ctx;

	(void)pos;
	lc->n++;
	lc->len = len;
	lc->first = tok[0];
	return 0;
}

START_TEST(long_tokens)
{
	/* Longer than the stack scratch: ASCII and non-ASCII. */
	size_t n = 5000, i;
	char *s = malloc(n * 2 + 1);
	struct long_ctx lc = {0, 0, 0};

	ck_assert_ptr_nonnull(s);
	memset(s, 'Q', n);
	ck_assert_int_eq(tokenize(s, n, long_cb, &lc), 0);
	ck_assert_uint_eq(lc.n, 1);
	ck_assert_uint_eq(lc.len, n);
	ck_assert_int_eq(lc.first, 'q');
	for (i = 0; i < n; i++)
		memcpy(s + 2 * i, "\xc3\x9c", 2); /* Ü */
	lc.n = 0;
	ck_assert_int_eq(tokenize(s, 2 * n, long_cb, &lc), 0);
	ck_assert_uint_eq(lc.n, 1);
	ck_assert_uint_eq(lc.len, 2 * n);
	ck_assert_int_eq((unsigned char)lc.first, 0xc3);
	free(s);
}
END_TEST

/* Reference: tokenize text and compare token lists by brute force. */
static int ref_phrase(const char *text, const struct tok_span *p, size_t n,
		      bool last_prefix)
{
	struct toks t;
	size_t i, k;

	memset(&t, 0, sizeof(t));
	ck_assert_int_eq(tokenize(text, strlen(text), collect_cb, &t), 0);
	for (i = 0; i + n <= t.n; i++) {
		for (k = 0; k < n; k++) {
			size_t l = strlen(t.tok[i + k]);
			bool pre = last_prefix && k == n - 1;

			if (pre ? l < p[k].len : l != p[k].len)
				break;
			if (memcmp(t.tok[i + k], p[k].p, p[k].len))
				break;
		}
		if (k == n)
			return 1;
	}
	return 0;
}

static int has(const char *text, const char *a, const char *b, bool pre)
{
	struct tok_span p[2] = {{a, strlen(a)}, {b, b ? strlen(b) : 0}};
	size_t n = b ? 2 : 1;
	int rc = tokenize_has_phrase(text, strlen(text), p, n, pre);

	ck_assert_int_eq(rc, ref_phrase(text, p, n, pre));
	return rc;
}

START_TEST(phrases)
{
	ck_assert_int_eq(has("The REST API spec", "rest", "api", false), 1);
	ck_assert_int_eq(has("rest-api", "rest", "api", false), 1);
	ck_assert_int_eq(has("rest_api", "rest", "api", false), 0);
	ck_assert_int_eq(has("rest apis", "rest", "api", false), 0);
	ck_assert_int_eq(has("rest apis", "rest", "api", true), 1);
	ck_assert_int_eq(has("prest api", "rest", "api", false), 0);
	ck_assert_int_eq(has("rest, then api", "rest", "api", false), 0);
	ck_assert_int_eq(has("a rest ... api", "rest", "api", false), 1);
	ck_assert_int_eq(has("rest", "rest", "api", false), 0);
	ck_assert_int_eq(has("x rest rest api", "rest", "api", false), 1);
	ck_assert_int_eq(has("_rest api", "rest", "api", false), 0);
	ck_assert_int_eq(has("PostgreSQL database", "postgresql", "data", true),
			 1);
	ck_assert_int_eq(has("9lives x", "9lives", NULL, false), 1);
	/* Non-ASCII text takes the tokenizer path. */
	ck_assert_int_eq(has("Die DATENBANK über", "datenbank", "über", false),
			 1);
	ck_assert_int_eq(has("Die DATENBANK über", "datenbank", "u", true), 0);
	ck_assert_int_eq(has("STRAẞE ok", "strasse", "ok", false), 1);
	ck_assert_int_eq(has("\xe2\x84\xaa"
			     "elvin x",
			     "kelvin", "x", false),
			 1);
	ck_assert_int_eq(has("caféx rest api", "rest", "api", false), 1);
	ck_assert_int_eq(has("éapi rest api", "api", "rest", false), 0);
	/* Non-ASCII phrase tokens never match ASCII text. */
	ck_assert_int_eq(has("uber", "über", NULL, false), 0);
}
END_TEST

START_TEST(phrases_random)
{
	static const char *const w[] = {"a",   "ab", "abc", "B", "AB",
					"b_c", "c9", "9",   "_", "Ab"};
	static const char *const sep[] = {" ",	"-", "__",	   ", ",  "",
					  "\n", "!", " \xc3\xa9 ", "\xff"};
	const char *const f[] = {"a", "ab", "abc", "b", "b_c", "c9", "9", "_"};
	unsigned seed = 7;
	char text[256];
	size_t it, i, w_at;

	for (it = 0; it < 20000; it++) {
		size_t n = (size_t)rand_r(&seed) % 8;

		w_at = 0;
		for (i = 0; i < n; i++)
			w_at += (size_t)snprintf(
				text + w_at, sizeof(text) - w_at, "%s%s",
				i ? sep[(size_t)rand_r(&seed) % 9] : "",
				w[(size_t)rand_r(&seed) % 10]);
		text[w_at] = '\0';
		has(text, f[(size_t)rand_r(&seed) % 8],
		    rand_r(&seed) % 3 ? f[(size_t)rand_r(&seed) % 8] : NULL,
		    rand_r(&seed) % 2);
	}
}
END_TEST

static Suite *tokenize_suite(void)
{
	Suite *s = suite_create("tokenize");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, ascii_words);
	tcase_add_test(tc, punctuation_only);
	tcase_add_test(tc, unicode_folding);
	tcase_add_test(tc, unicode_boundaries);
	tcase_add_test(tc, invalid_utf8);
	tcase_add_test(tc, embedded_nul);
	tcase_add_test(tc, callback_stops);
	tcase_add_test(tc, long_tokens);
	tcase_add_test(tc, phrases);
	tcase_add_test(tc, phrases_random);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tokenize_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

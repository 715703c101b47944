/*
 * Unit tests of protocol/framer.c: byte-at-a-time input, many lines in one
 * feed, the max_line boundary, CRLF, empty lines, partial tails, and lines
 * that span reserve/compaction boundaries.
 */
#include "protocol/framer.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append the next line to out (NUL-terminated); returns framer_next(). */
static int next_str(struct framer *f, char *out, size_t outsz)
{
	const char *line;
	size_t len;
	int r = framer_next(f, &line, &len);

	if (r == 1) {
		ck_assert_uint_lt(len, outsz);
		memcpy(out, line, len);
		out[len] = '\0';
	}
	return r;
}

START_TEST(test_byte_at_a_time)
{
	const char *in = "{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\npart";
	const char *want[] = {"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"};
	struct framer f;
	char out[64];
	size_t i, got = 0;
	int r;

	framer_init(&f, 64);
	for (i = 0; i < strlen(in); i++) {
		ck_assert_int_eq(framer_feed(&f, in + i, 1), 0);
		while ((r = next_str(&f, out, sizeof(out))) == 1) {
			ck_assert_uint_lt(got, 3);
			ck_assert_str_eq(out, want[got]);
			got++;
		}
		ck_assert_int_eq(r, 0);
	}
	ck_assert_uint_eq(got, 3);
	ck_assert_uint_eq(framer_pending(&f), 4);
	framer_done(&f);
}
END_TEST

START_TEST(test_thousand_in_one_feed)
{
	struct framer f;
	char *big, out[128], want[128];
	size_t n = 0, cap = 1000 * 64;
	int i, r;

	big = malloc(cap);
	ck_assert_ptr_nonnull(big);
	for (i = 0; i < 1000; i++)
		n += (size_t)snprintf(big + n, cap - n,
				      "{\"jsonrpc\":\"2.0\",\"id\":%d}\n", i);
	framer_init(&f, 1 << 20);
	ck_assert_int_eq(framer_feed(&f, big, n), 0);
	for (i = 0; i < 1000; i++) {
		snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"id\":%d}",
			 i);
		ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
		ck_assert_str_eq(out, want);
	}
	r = next_str(&f, out, sizeof(out));
	ck_assert_int_eq(r, 0);
	ck_assert_uint_eq(framer_pending(&f), 0);
	framer_done(&f);
	free(big);
}
END_TEST

START_TEST(test_exact_max_line)
{
	struct framer f;
	char line[18], out[32];

	memset(line, 'x', 16);
	line[16] = '\n';
	framer_init(&f, 16);
	ck_assert_int_eq(framer_feed(&f, line, 17), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_uint_eq(strlen(out), 16);
	/* Same with CRLF: the CR does not count. */
	line[16] = '\r';
	line[17] = '\n';
	ck_assert_int_eq(framer_feed(&f, line, 16), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_int_eq(framer_feed(&f, line + 16, 1), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_int_eq(framer_feed(&f, line + 17, 1), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_uint_eq(strlen(out), 16);
	framer_done(&f);
}
END_TEST

START_TEST(test_oversized_complete)
{
	struct framer f;
	char line[19], out[32];

	memset(line, 'x', 17);
	line[17] = '\n';
	framer_init(&f, 16);
	ck_assert_int_eq(framer_feed(&f, "ok\n", 3), 0);
	ck_assert_int_eq(framer_feed(&f, line, 18), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "ok");
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), -EMSGSIZE);
	/* Sticky: the framer stays unusable. */
	ck_assert_int_eq(framer_feed(&f, "ok\n", 3), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), -EMSGSIZE);
	framer_done(&f);

	/* 16 bytes + CR + CR + LF is 17 bytes of line. */
	framer_init(&f, 16);
	memset(line, 'x', 16);
	memcpy(line + 16, "\r\r\n", 3);
	ck_assert_int_eq(framer_feed(&f, line, 19), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), -EMSGSIZE);
	framer_done(&f);
}
END_TEST

START_TEST(test_oversized_unterminated)
{
	struct framer f;
	char line[32], out[32];

	framer_init(&f, 16);
	memset(line, 'x', sizeof(line));
	/* max_line bytes and a CR: may still end in LF. */
	ck_assert_int_eq(framer_feed(&f, line, 16), 0);
	ck_assert_int_eq(framer_feed(&f, "\r", 1), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	framer_done(&f);

	framer_init(&f, 16);
	ck_assert_int_eq(framer_feed(&f, line, 16), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_int_eq(framer_feed(&f, line, 1), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), -EMSGSIZE);
	framer_done(&f);

	framer_init(&f, 16);
	ck_assert_int_eq(framer_feed(&f, line, 32), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), -EMSGSIZE);
	framer_done(&f);
}
END_TEST

START_TEST(test_crlf_and_empty)
{
	struct framer f;
	const char *in = "\n\r\n\n a \r\n\r\n\r\nb\n\n";
	char out[32];

	framer_init(&f, 64);
	ck_assert_int_eq(framer_feed(&f, in, strlen(in)), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_str_eq(out, " a ");
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "b");
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_uint_eq(framer_pending(&f), 0);
	/* A CR inside a line is kept; only the one before LF goes. */
	ck_assert_int_eq(framer_feed(&f, "a\rb\r\n", 5), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "a\rb");
	framer_done(&f);
}
END_TEST

START_TEST(test_partial_at_eof)
{
	struct framer f;
	char out[32];

	framer_init(&f, 64);
	ck_assert_int_eq(framer_feed(&f, "{\"id\":1}\n{\"id\":", 15), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_uint_eq(framer_pending(&f), 6);
	/* A trailing CR alone does not complete a line either. */
	ck_assert_int_eq(framer_feed(&f, "2}\r", 3), 0);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 0);
	ck_assert_uint_eq(framer_pending(&f), 9);
	framer_done(&f);
	framer_done(&f); /* idempotent */
}
END_TEST

/*
 * Read through framer_reserve/commit in chunks of every size from 1 to 37
 * with a small max_line, so lines straddle compactions and growth.
 */
START_TEST(test_reserve_boundaries)
{
	char in[4096], want[64], out[64];
	size_t n = 0, pos, chunk, avail, k;
	struct framer f;
	char *ptr;
	int lines, got, r;

	for (lines = 0; n < sizeof(in) - 64; lines++)
		n += (size_t)snprintf(in + n, sizeof(in) - n, "line-%d-%.*s\n",
				      lines, lines % 23,
				      "abcdefghijklmnopqrstuvw");
	for (chunk = 1; chunk <= 37; chunk++) {
		framer_init(&f, 40);
		got = 0;
		for (pos = 0; pos < n;) {
			ck_assert_int_eq(
				framer_reserve(&f, chunk, &ptr, &avail), 0);
			ck_assert_uint_ge(avail, 1);
			/* Never beyond the line limit plus slack. */
			ck_assert_uint_le(f.cap, 40 + 2 + 40);
			k = chunk < avail ? chunk : avail;
			if (k > n - pos)
				k = n - pos;
			memcpy(ptr, in + pos, k);
			framer_commit(&f, k);
			pos += k;
			while ((r = next_str(&f, out, sizeof(out))) == 1) {
				snprintf(want, sizeof(want), "line-%d-%.*s",
					 got, got % 23,
					 "abcdefghijklmnopqrstuvw");
				ck_assert_str_eq(out, want);
				got++;
			}
			ck_assert_int_eq(r, 0);
		}
		ck_assert_int_eq(got, lines);
		ck_assert_uint_eq(framer_pending(&f), 0);
		framer_done(&f);
	}
}
END_TEST

START_TEST(test_reserve_large_tail)
{
	struct framer f;
	char *ptr;
	size_t avail;

	framer_init(&f, 1 << 20);
	ck_assert_int_eq(framer_reserve(&f, 1, &ptr, &avail), 0);
	ck_assert_uint_ge(avail, 65536);
	framer_commit(&f, 3);
	memcpy(ptr, "a\nb", 3);
	ck_assert_int_eq(framer_reserve(&f, 1 << 20, &ptr, &avail), 0);
	ck_assert_uint_ge(avail, 1 << 20);
	ck_assert_uint_le(f.cap, (1 << 20) + 2 + 65536);
	framer_done(&f);
}
END_TEST

/* A caller that never drains framer_next() gets -ENOBUFS, not growth. */
START_TEST(test_reserve_undrained)
{
	struct framer f;
	char *ptr, out[8];
	size_t avail, i;

	framer_init(&f, 16);
	ck_assert_int_eq(framer_reserve(&f, 1, &ptr, &avail), 0);
	ck_assert_uint_eq(avail, 16 + 2 + 16);
	for (i = 0; i < avail; i += 2)
		memcpy(ptr + i, "a\n", 2);
	framer_commit(&f, avail);
	ck_assert_int_eq(framer_reserve(&f, 1, &ptr, &avail), -ENOBUFS);
	ck_assert_int_eq(next_str(&f, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "a");
	ck_assert_int_eq(framer_reserve(&f, 1, &ptr, &avail), 0);
	ck_assert_uint_eq(avail, 2);
	framer_done(&f);
}
END_TEST

static Suite *framer_suite(void)
{
	Suite *s = suite_create("framer");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_byte_at_a_time);
	tcase_add_test(tc, test_thousand_in_one_feed);
	tcase_add_test(tc, test_exact_max_line);
	tcase_add_test(tc, test_oversized_complete);
	tcase_add_test(tc, test_oversized_unterminated);
	tcase_add_test(tc, test_crlf_and_empty);
	tcase_add_test(tc, test_partial_at_eof);
	tcase_add_test(tc, test_reserve_boundaries);
	tcase_add_test(tc, test_reserve_large_tail);
	tcase_add_test(tc, test_reserve_undrained);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(framer_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

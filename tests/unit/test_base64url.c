/*
 * Unit tests of protocol/base64url.c: RFC 4648's test vectors in the url
 * alphabet, every length and byte through a round trip, padding taken or
 * not, and every malformed text refused (wrong characters, impossible
 * lengths, misplaced padding, leftover bits).
 */
#include <check.h>
#include <string.h>

#include "protocol/base64url.h"
#include "run_suite.h"
#include "test_rng.h"

static bool decodes_to(const char *text, const char *want)
{
	unsigned char out[64];
	long n = base64url_decoded_len(text, strlen(text));

	return n == (long)strlen(want) &&
	       base64url_decode(text, strlen(text), out) &&
	       !memcmp(out, want, (size_t)n);
}

/* RFC 4648 section 10, and the two characters of the url alphabet. */
START_TEST(test_vectors)
{
	static const char *const plain[] = {"",	    "f",     "fo",    "foo",
					    "foob", "fooba", "foobar"};
	static const char *const coded[] = {
		"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
	char out[16];

	for (size_t i = 0; i < sizeof(plain) / sizeof(*plain); i++) {
		ck_assert_uint_eq(
			base64url_encode(plain[i], strlen(plain[i]), out),
			strlen(coded[i]));
		ck_assert_str_eq(out, coded[i]);
		ck_assert_uint_eq(base64url_len(strlen(plain[i])),
				  strlen(coded[i]));
		ck_assert(decodes_to(coded[i], plain[i]));
	}
	ck_assert(decodes_to("Zg==", "f"));
	ck_assert(decodes_to("Zm8=", "fo"));
	ck_assert_uint_eq(base64url_encode("\xfb\xff", 2, out), 3);
	ck_assert_str_eq(out, "-_8");
	ck_assert(decodes_to("-_8", "\xfb\xff"));
}
END_TEST

START_TEST(test_round_trip)
{
	unsigned char in[300] = {0}, back[300];
	char text[400 + 1]; /* base64url_len(300) */

	for (size_t n = 0; n <= sizeof(in); n++) {
		for (size_t i = 0; i < n; i++)
			in[i] = (unsigned char)rnd();
		ck_assert_uint_eq(base64url_encode(in, n, text),
				  base64url_len(n));
		ck_assert_int_eq(base64url_decoded_len(text, strlen(text)),
				 (long)n);
		ck_assert(base64url_decode(text, strlen(text), back));
		ck_assert(!memcmp(in, back, n));
	}
}
END_TEST

START_TEST(test_refused)
{
	/* Lengths no encoding has, padding out of place or too long. */
	static const char *const bad_len[] = {
		"Z", "Zm9vY", "Zg=", "Z===", "Zm9=v", "=", "Zg==="};
	/* Right lengths, wrong text: other alphabets, spaces, NUL, bits
	 * left over in the last character. */
	static const char *const bad_text[] = {"Zm+v", "Zm/v", "Zm9 ", "Zh",
					       "Zm8\x80"};
	unsigned char out[16];

	for (size_t i = 0; i < sizeof(bad_len) / sizeof(*bad_len); i++) {
		ck_assert_msg(base64url_decoded_len(bad_len[i],
						    strlen(bad_len[i])) < 0,
			      "%s", bad_len[i]);
		ck_assert(
			!base64url_decode(bad_len[i], strlen(bad_len[i]), out));
	}
	for (size_t i = 0; i < sizeof(bad_text) / sizeof(*bad_text); i++) {
		size_t n = strlen(bad_text[i]);

		ck_assert_int_ge(base64url_decoded_len(bad_text[i], n), 0);
		ck_assert_msg(!base64url_decode(bad_text[i], n, out), "%s",
			      bad_text[i]);
	}
	ck_assert(!base64url_decode("Zm\0v", 4, out));
}
END_TEST

/* Every byte outside the alphabet, at every place of a whole group and of
 * the two short last groups, is refused, and every byte inside it taken
 * ('=' is padding, tested above). */
START_TEST(test_every_byte)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"
				       "klmnopqrstuvwxyz0123456789-_";
	unsigned char out[16];
	char text[12];

	for (int c = 1; c < 256; c++) {
		bool in = strchr(alphabet, c) != NULL;

		if (c == '=')
			continue;
		for (size_t len = 6; len <= 8; len++) {
			for (size_t at = 0; at < len; at++) {
				/* The last character of a short group may
				 * leave bits over: its refusal only. */
				bool last = at == len - 1 && len % 4 != 0;

				memset(text, 'A', len);
				text[at] = (char)c;
				if (!in)
					ck_assert_msg(!base64url_decode(
							      text, len, out),
						      "byte %d at %zu of %zu",
						      c, at, len);
				else if (!last)
					ck_assert_msg(base64url_decode(
							      text, len, out),
						      "byte %d at %zu of %zu",
						      c, at, len);
			}
		}
	}
	/* NUL, which strchr would find. */
	ck_assert(!base64url_decode("AAAA\0AAA", 8, out));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("base64url");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_vectors);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_every_byte);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

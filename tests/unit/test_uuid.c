/*
 * Unit tests of daemon/base/uuid.c: the canonical form written (lowercase,
 * dashes at 8, 13, 18 and 23) and read back in either case, malformed
 * texts refused, new ids of version 4 and the RFC 9562 variant.
 */
#include <check.h>
#include <ctype.h>
#include <string.h>

#include "run_suite.h"
#include "test_rng.h"
#include "uuid.h"

START_TEST(test_format)
{
	static const uint8_t seq[UUID_LEN] = {
		0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
		0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
	uint8_t ff[UUID_LEN];
	char out[UUID_TEXT_LEN + 1];

	uuid_format(seq, out);
	ck_assert_str_eq(out, "00010203-0405-0607-0809-0a0b0c0d0e0f");
	memset(ff, 0xff, sizeof(ff));
	uuid_format(ff, out);
	ck_assert_str_eq(out, "ffffffff-ffff-ffff-ffff-ffffffffffff");
}
END_TEST

/* Random ids through the text and back; the upper-case text reads the
 * same. */
START_TEST(test_round_trip)
{
	uint8_t id[UUID_LEN], back[UUID_LEN];
	char out[UUID_TEXT_LEN + 1];

	for (int n = 0; n < 10000; n++) {
		for (size_t i = 0; i < UUID_LEN; i++)
			id[i] = (uint8_t)rnd();
		uuid_format(id, out);
		ck_assert_uint_eq(strlen(out), UUID_TEXT_LEN);
		for (size_t i = 0; i < UUID_TEXT_LEN; i++)
			ck_assert(i == 8 || i == 13 || i == 18 || i == 23
					  ? out[i] == '-'
					  : isxdigit((unsigned char)out[i]) &&
						    !isupper((unsigned char)
								     out[i]));
		ck_assert_int_eq(uuid_parse(out, UUID_TEXT_LEN, back), 0);
		ck_assert(!memcmp(id, back, UUID_LEN));
		for (size_t i = 0; i < UUID_TEXT_LEN; i++)
			out[i] = (char)toupper((unsigned char)out[i]);
		ck_assert_int_eq(uuid_parse(out, UUID_TEXT_LEN, back), 0);
		ck_assert(!memcmp(id, back, UUID_LEN));
	}
}
END_TEST

START_TEST(test_refused)
{
	static const char good[] = "00010203-0405-0607-0809-0a0b0c0d0e0f";
	char t[UUID_TEXT_LEN + 2];
	uint8_t id[UUID_LEN];

	ck_assert_int_eq(uuid_parse(good, UUID_TEXT_LEN - 1, id), -1);
	ck_assert_int_eq(uuid_parse("00010203-0405-0607-0809-0a0b0c0d0e0f0",
				    UUID_TEXT_LEN + 1, id),
			 -1);
	ck_assert_int_eq(uuid_parse("000102030405060708090a0b0c0d0e0f", 32, id),
			 -1);
	/* Every place: a dash where a digit goes, a digit where a dash
	 * goes, a letter beyond f, a NUL. */
	for (size_t i = 0; i < UUID_TEXT_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		static const char wrong[] = {'g', 'G', ' ', '\0', '{'};

		memcpy(t, good, sizeof(good));
		t[i] = dash ? '0' : '-';
		ck_assert_msg(uuid_parse(t, UUID_TEXT_LEN, id) == -1, "%zu", i);
		for (size_t w = 0; w < sizeof(wrong); w++) {
			t[i] = wrong[w];
			ck_assert_msg(uuid_parse(t, UUID_TEXT_LEN, id) == -1,
				      "%zu %d", i, wrong[w]);
		}
	}
}
END_TEST

START_TEST(test_new)
{
	uint8_t a[UUID_LEN], b[UUID_LEN];

	for (int n = 0; n < 1000; n++) {
		uuid_new(a);
		uuid_new(b);
		ck_assert_uint_eq(a[6] >> 4, 4);
		ck_assert_uint_eq(a[8] >> 6, 2);
		ck_assert(memcmp(a, b, UUID_LEN) != 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("uuid");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_new);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

/*
 * Unit tests of protocol/expid.c: UUIDv7 experience ids made from the
 * server's timestamp.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/expid.h"
#include "run_suite.h"

static const uint8_t zero[EXPID_RANDOM_BYTES];
static const uint8_t ones[EXPID_RANDOM_BYTES] = {0xff, 0xff, 0xff, 0xff,
						 0xff, 0xff, 0xff, 0xff};

/* The text form: lowercase 8-4-4-4-12, version 7, variant 10. */
START_TEST(test_format)
{
	/* 2025-01-06T15:30:00.123456Z */
	int64_t usec = 1736177400123456;
	struct expid id = expid_make(usec, ones);
	char text[EXPID_LEN + 1];

	expid_format(&id, text);
	ck_assert_uint_eq(strlen(text), EXPID_LEN);
	/* 1736177400123 ms = 0x01943c3cb93b; 456 us: 1867 = 0x74b */
	ck_assert_str_eq(text, "01943c3c-b93b-774b-bfff-ffffffffffff");
	id = expid_make(usec, zero);
	expid_format(&id, text);
	ck_assert_str_eq(text, "01943c3c-b93b-774b-8000-000000000000");
}
END_TEST

/* The microseconds come back exactly, for every value within a ms. */
START_TEST(test_usec_round_trip)
{
	for (int64_t us = 0; us < 1000; us++) {
		int64_t usec = 1736177400123000 + us;
		struct expid id = expid_make(usec, ones);

		ck_assert_int_eq(expid_usec(&id), usec);
	}
	ck_assert_int_eq(expid_usec(&(struct expid){{0, 0, 0, 0, 0, 0, 0x70}}),
			 0);
}
END_TEST

/* Ids made at increasing times sort in that order (text and bytes),
 * whatever their random bits. */
START_TEST(test_order)
{
	unsigned seed = 7;
	struct expid prev = expid_make(1736177400000000, ones);
	char a[EXPID_LEN + 1], b[EXPID_LEN + 1];

	for (int64_t t = 1736177400000001; t < 1736177400050000; t += 7) {
		uint8_t rnd[EXPID_RANDOM_BYTES];
		struct expid id;

		for (size_t i = 0; i < sizeof(rnd); i++)
			rnd[i] = (uint8_t)rand_r(&seed);
		id = expid_make(t, rnd);
		ck_assert_int_lt(expid_cmp(&prev, &id), 0);
		expid_format(&prev, a);
		expid_format(&id, b);
		ck_assert_int_lt(strcmp(a, b), 0);
		prev = id;
	}
}
END_TEST

START_TEST(test_parse)
{
	struct expid id, back;
	char text[EXPID_LEN + 1];
	const char *upper = "01943C3C-B93B-774B-BFFF-FFFFFFFFFFFF";

	id = expid_make(1736177400123456, ones);
	expid_format(&id, text);
	ck_assert_int_eq(expid_parse(text, strlen(text), &back), 0);
	ck_assert_int_eq(expid_cmp(&id, &back), 0);
	/* Either case reads; the text form is lowercase. */
	ck_assert_int_eq(expid_parse(upper, strlen(upper), &back), 0);
	ck_assert_int_eq(expid_cmp(&id, &back), 0);
	/* Not a UUIDv7: other versions, variants, shapes. */
	ck_assert_int_eq(
		expid_parse("01943c5b-1e3b-41d3-bfff-ffffffffffff", 36, &back),
		-1);
	ck_assert_int_eq(
		expid_parse("01943c5b-1e3b-71d3-cfff-ffffffffffff", 36, &back),
		-1);
	ck_assert_int_eq(
		expid_parse("01943c5b1e3b71d3bfffffffffffffff", 32, &back), -1);
	ck_assert_int_eq(
		expid_parse("01943c5b-1e3b-71d3-bfff-fffffffffffg", 36, &back),
		-1);
	ck_assert_int_eq(
		expid_parse("01943c5b-1e3b-71d3-bfff_ffffffffffff", 36, &back),
		-1);
	ck_assert_int_eq(expid_parse(text, 35, &back), -1);
	ck_assert_int_eq(expid_parse("", 0, &back), -1);
}
END_TEST

/* 62 random bits: only the variant's two bits of the ninth byte are
 * fixed. */
START_TEST(test_random_bits)
{
	struct expid a = expid_make(1, zero), b = expid_make(1, ones);

	ck_assert_uint_eq(a.b[8], 0x80);
	ck_assert_uint_eq(b.b[8], 0xbf);
	for (int i = 9; i < 16; i++) {
		ck_assert_uint_eq(a.b[i], 0);
		ck_assert_uint_eq(b.b[i], 0xff);
	}
}
END_TEST

static Suite *expid_suite(void)
{
	Suite *s = suite_create("expid");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_usec_round_trip);
	tcase_add_test(tc, test_order);
	tcase_add_test(tc, test_parse);
	tcase_add_test(tc, test_random_bits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(expid_suite());
}

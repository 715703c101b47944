/* Unit tests of daemon/service/stats.c: counters and log-linear percentiles. */
#include <check.h>
#include <stdlib.h>

#include "run_suite.h"
#include "stats.h"

START_TEST(counts_and_percentiles)
{
	struct stats st;
	const struct method_stats *ms;
	uint64_t p50, p99;

	ck_assert_int_eq(stats_init(&st, 3), 0);
	/* 1..1000 µs, one each */
	for (uint64_t us = 1; us <= 1000; us++)
		stats_record(&st, 1, us * 1000, us % 100 == 0);
	stats_record(&st, 7, 5, false); /* out of range: ignored */
	ms = &st.methods[1];
	ck_assert_uint_eq(ms->count, 1000);
	ck_assert_uint_eq(ms->errors, 10);
	ck_assert_uint_eq(ms->max_ns, 1000000);
	p50 = stats_percentile(ms, 0.5);
	p99 = stats_percentile(ms, 0.99);
	/* exact to within a quarter */
	ck_assert_uint_ge(p50, 500000);
	ck_assert_uint_le(p50, 500000 * 5 / 4);
	ck_assert_uint_ge(p99, 990000);
	ck_assert_uint_le(p99, 1000000);
	ck_assert_uint_eq(stats_percentile(ms, 1.0), 1000000);
	ck_assert_uint_eq(stats_percentile(&st.methods[0], 0.5), 0);
	stats_done(&st);
}
END_TEST

START_TEST(tiny_and_huge_values)
{
	struct stats st;

	ck_assert_int_eq(stats_init(&st, 1), 0);
	stats_record(&st, 0, 0, false);
	stats_record(&st, 0, 3, false);
	stats_record(&st, 0, UINT64_MAX, false);
	ck_assert_uint_eq(st.methods[0].count, 3);
	ck_assert_uint_le(stats_percentile(&st.methods[0], 0.5), 3);
	ck_assert_uint_eq(stats_percentile(&st.methods[0], 0.99), UINT64_MAX);
	stats_done(&st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stats");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, counts_and_percentiles);
	tcase_add_test(tc, tiny_and_huge_values);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

/* Unit tests of daemon/find/query.c: range and partial-order walks. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "run_suite.h"

static void put(struct index *ix, int x, int y, int z)
{
	struct decision d = {.coord = {x, y, z}, .version = 1};

	d.content = strdup("text");
	d.content_len = 4;
	d.agent_id = strdup("a");
	timestamp_format(0, d.timestamp);
	ck_assert_int_eq(index_put(ix, record_new(&d)), 0);
	decision_done(&d);
}

/* The coordinates of a result as "x,y,z;x,y,z;..." */
static char *coords(const struct record **recs, size_t n)
{
	static char s[4096];
	size_t len = 0;

	s[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(s + len, sizeof(s) - len, "%d,%d,%d;",
					recs[i]->coord.x, recs[i]->coord.y,
					recs[i]->coord.z);
	return s;
}

static struct index ix;

static void setup(void)
{
	ck_assert_int_eq(index_init(&ix, 10), 0);
	/* The design's example, stored out of order. */
	put(&ix, 5, 3, 2);
	put(&ix, 1, 2, 1);
	put(&ix, 5, 2, 1);
	put(&ix, 3, 4, 2);
	put(&ix, 3, 2, 1);
}

static void teardown(void)
{
	index_done(&ix);
}

static const char *range(int x0, int x1, int y0, int y1, int z0, int z1,
			 const struct coord *after, size_t limit)
{
	struct axis_range x = {x0, x1}, y = {y0, y1}, z = {z0, z1};
	const struct record **recs;
	size_t n;
	const char *s;

	ck_assert_int_eq(query_range(&ix, &x, &y, &z, after, limit, &recs, &n),
			 0);
	s = coords(recs, n);
	free(recs);
	return s;
}

static const char *before(int xt, int yt, int zf)
{
	const struct record **recs;
	size_t n;
	const char *s;

	ck_assert_int_eq(query_before(&ix, xt, yt, zf, &recs, &n), 0);
	s = coords(recs, n);
	free(recs);
	return s;
}

static const char *before_page(int xt, int yt, int zf,
			       const struct coord *after, size_t limit)
{
	const struct record **recs;
	size_t n;
	const char *s;

	ck_assert_int_eq(
		query_before_page(&ix, xt, yt, zf, after, limit, &recs, &n), 0);
	s = coords(recs, n);
	free(recs);
	return s;
}

START_TEST(before_pages_without_gaps)
{
	struct coord after = {1, 2, 1};

	ck_assert_str_eq(before_page(6, 1, 0, NULL, 0), before(6, 1, 0));
	ck_assert_str_eq(before_page(6, 1, 0, NULL, 2), "1,2,1;3,2,1;");
	ck_assert_str_eq(before_page(6, 1, 0, &after, 2), "3,2,1;3,4,2;");
	after = (struct coord){3, 4, 2};
	ck_assert_str_eq(before_page(6, 1, 0, &after, 2), "5,2,1;5,3,2;");
	after = (struct coord){5, 3, 2};
	ck_assert_str_eq(before_page(6, 1, 0, &after, 2), "");
	/* The threshold and the layer filter still hold past after. */
	after = (struct coord){2, 5, 4};
	ck_assert_str_eq(before_page(5, 3, 1, &after, 0), "3,2,1;5,2,1;");
}
END_TEST

START_TEST(range_sorted_and_filtered)
{
	ck_assert_str_eq(range(1, 10, 1, 5, 1, 4, NULL, 0),
			 "1,2,1;3,2,1;3,4,2;5,2,1;5,3,2;");
	ck_assert_str_eq(range(3, 5, 1, 5, 1, 1, NULL, 0), "3,2,1;5,2,1;");
	ck_assert_str_eq(range(1, 10, 4, 5, 1, 4, NULL, 0), "3,4,2;");
	/* Bounds outside the domain match nothing there. */
	ck_assert_str_eq(range(-5, 3, 1, 5, 1, 4, NULL, 0),
			 "1,2,1;3,2,1;3,4,2;");
	ck_assert_str_eq(range(0, 0, 1, 5, 1, 4, NULL, 0), "");
	ck_assert_str_eq(range(5, 2000, 1, 5, 2, 9, NULL, 0), "5,3,2;");
	ck_assert_str_eq(range(11, 20, 1, 5, 1, 4, NULL, 0), "");
}
END_TEST

START_TEST(range_pages_without_gaps)
{
	struct coord after = {3, 2, 1};

	ck_assert_str_eq(range(1, 10, 1, 5, 1, 4, NULL, 2), "1,2,1;3,2,1;");
	ck_assert_str_eq(range(1, 10, 1, 5, 1, 4, &after, 2), "3,4,2;5,2,1;");
	after = (struct coord){5, 2, 1};
	ck_assert_str_eq(range(1, 10, 1, 5, 1, 4, &after, 2), "5,3,2;");
	after = (struct coord){5, 3, 2};
	ck_assert_str_eq(range(1, 10, 1, 5, 1, 4, &after, 2), "");
	/* after need not be stored itself */
	after = (struct coord){2, 5, 4};
	ck_assert_str_eq(range(1, 10, 1, 5, 1, 4, &after, 0),
			 "3,2,1;3,4,2;5,2,1;5,3,2;");
}
END_TEST

START_TEST(partial_order_example)
{
	/* threshold (5, 3): everything but (5, 3, 2) */
	ck_assert_str_eq(before(5, 3, 0), "1,2,1;3,2,1;3,4,2;5,2,1;");
	/* incomparable (3, 4) and (5, 2) are both below (7, 4) */
	ck_assert_str_eq(before(7, 4, 0), "1,2,1;3,2,1;3,4,2;5,2,1;5,3,2;");
	ck_assert_str_eq(before(5, 3, 1), "1,2,1;3,2,1;5,2,1;");
	ck_assert_str_eq(before(1, 6, 0), "1,2,1;");
	ck_assert_str_eq(before(1, 1, 0), "");
	ck_assert_str_eq(before(3, 1, 0), "1,2,1;");
	/* max_x + 1 takes every issue */
	ck_assert_str_eq(before(11, 1, 2), "3,4,2;5,3,2;");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("query");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, range_sorted_and_filtered);
	tcase_add_test(tc, range_pages_without_gaps);
	tcase_add_test(tc, before_pages_without_gaps);
	tcase_add_test(tc, partial_order_example);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

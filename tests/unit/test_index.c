/* Unit tests of daemon/find/index.c: the coordinate-addressed record table. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "run_suite.h"

static struct record *make(int x, int y, int z, int64_t version,
			   const char *content)
{
	struct decision d = {.coord = {x, y, z}, .version = version};
	struct record *r;

	d.content = strdup(content);
	d.content_len = strlen(content);
	d.agent_id = strdup("agent-1");
	timestamp_format(1736177400123456LL, d.timestamp);
	r = record_new(&d);
	decision_done(&d);
	ck_assert_ptr_nonnull(r);
	return r;
}

START_TEST(put_get_remove)
{
	struct index ix;
	struct coord c = {5, 2, 1};
	struct record *r;

	ck_assert_int_eq(index_init(&ix, 1000), 0);
	ck_assert_ptr_null(index_get(&ix, &c));
	index_put(&ix, make(5, 2, 1, 1, "Use PostgreSQL"));
	ck_assert_uint_eq(ix.count, 1);
	r = index_get(&ix, &c);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->version, 1);
	ck_assert_str_eq(r->json,
			 "{\"coordinate\":{\"x\":5,\"y\":2,\"z\":1},"
			 "\"content\":\"Use PostgreSQL\","
			 "\"timestamp\":\"2025-01-06T15:30:00.123456Z\","
			 "\"agent_id\":\"agent-1\",\"issue_context\":null,"
			 "\"version\":1}");
	ck_assert_uint_eq(r->json_len, strlen(r->json));

	/* Replacing keeps the count and frees the old record (ASan). */
	index_put(&ix, make(5, 2, 1, 2, "Use SQLite"));
	ck_assert_uint_eq(ix.count, 1);
	ck_assert_int_eq(index_get(&ix, &c)->version, 2);

	ck_assert_int_eq(index_remove(&ix, &c), 1);
	ck_assert_int_eq(index_remove(&ix, &c), 0);
	ck_assert_uint_eq(ix.count, 0);
	ck_assert_ptr_null(index_get(&ix, &c));
	index_done(&ix);
}
END_TEST

START_TEST(slots_are_distinct_and_ordered)
{
	struct index ix;
	size_t prev = 0;
	bool first = true;

	ck_assert_int_eq(index_init(&ix, 7), 0);
	ck_assert_uint_eq(ix.n_slots, 7 * 5 * 4);
	for (int x = 1; x <= 7; x++)
		for (int y = 1; y <= 5; y++)
			for (int z = 1; z <= 4; z++) {
				struct coord c = {x, y, z};
				size_t s = index_slot(&ix, &c);

				ck_assert_uint_lt(s, ix.n_slots);
				if (!first)
					ck_assert_uint_eq(s, prev + 1);
				prev = s;
				first = false;
			}
	index_done(&ix);
}
END_TEST

START_TEST(corners_of_the_space)
{
	struct index ix;
	struct coord lo = {1, 1, 1}, hi = {1000, 5, 4};

	ck_assert_int_eq(index_init(&ix, 1000), 0);
	index_put(&ix, make(1, 1, 1, 1, "first"));
	index_put(&ix, make(1000, 5, 4, 3, "last"));
	ck_assert_uint_eq(ix.count, 2);
	ck_assert_int_eq(index_get(&ix, &lo)->coord.x, 1);
	ck_assert_int_eq(index_get(&ix, &hi)->version, 3);
	index_done(&ix);
}
END_TEST

static size_t slot_of(const struct index *ix, int x, int y, int z)
{
	struct coord c = {x, y, z};

	return index_slot(ix, &c);
}

/* A scan sees every slot as it was when it began, whatever changes after,
 * until it passes the slot. */
START_TEST(scan_sees_its_beginning)
{
	struct index ix;
	struct index_scan sc, sc2;
	struct coord c2 = {2, 1, 1}, c3 = {3, 1, 1};
	const struct record *r;
	const char *text;
	size_t len;

	ck_assert_int_eq(index_init(&ix, 10), 0);
	index_put(&ix, make(1, 1, 1, 1, "one"));
	index_put(&ix, make(2, 1, 1, 1, "two"));
	index_scan_begin(&ix, &sc);
	/* After the scan began: an overwrite, a delete, a new one. */
	index_put(&ix, make(1, 1, 1, 2, "one again"));
	index_put(&ix, make(1, 1, 1, 3, "one thrice"));
	ck_assert_int_eq(index_remove(&ix, &c2), 1);
	index_put(&ix, make(3, 1, 1, 1, "three"));
	ck_assert_int_eq(sc.n_kept, 3);
	r = index_scan_get(&sc, slot_of(&ix, 1, 1, 1));
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->version, 1);
	ck_assert_int_eq(index_get(&ix, &(struct coord){1, 1, 1})->version, 3);
	r = index_scan_get(&sc, slot_of(&ix, 2, 1, 1));
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(index_get(&ix, &c2));
	ck_assert_ptr_null(index_scan_get(&sc, slot_of(&ix, 3, 1, 1)));
	ck_assert_ptr_nonnull(index_get(&ix, &c3));
	/* Unchanged slots are read from the index. */
	ck_assert_ptr_null(index_scan_get(&sc, slot_of(&ix, 4, 1, 1)));
	/* The changed slots in order, and their old texts. */
	ck_assert_uint_eq(index_scan_next_changed(&sc, 0),
			  slot_of(&ix, 1, 1, 1));
	ck_assert_uint_eq(
		index_scan_next_changed(&sc, slot_of(&ix, 1, 1, 1) + 1),
		slot_of(&ix, 2, 1, 1));
	ck_assert_uint_eq(
		index_scan_next_changed(&sc, slot_of(&ix, 3, 1, 1) + 1),
		SIZE_MAX);
	ck_assert_int_eq(
		index_scan_old_text(&sc, slot_of(&ix, 2, 1, 1), &text, &len),
		0);
	ck_assert_str_eq(text, "two");
	ck_assert_int_eq(
		index_scan_old_text(&sc, slot_of(&ix, 3, 1, 1), &text, &len),
		-ENOENT);
	/* Once past a slot, its changes are not kept any more. */
	index_scan_pass(&sc, slot_of(&ix, 2, 1, 1) + 1);
	ck_assert_uint_eq(sc.n_kept, 1);
	index_put(&ix, make(1, 1, 1, 4, "one, four"));
	ck_assert_uint_eq(sc.n_kept, 1);
	/* Two scans keep their own beginnings. */
	index_scan_begin(&ix, &sc2);
	index_put(&ix, make(3, 1, 1, 2, "three again"));
	ck_assert_int_eq(index_scan_get(&sc2, slot_of(&ix, 3, 1, 1))->version,
			 1);
	ck_assert_ptr_null(index_scan_get(&sc, slot_of(&ix, 3, 1, 1)));
	index_scan_end(&sc);
	index_scan_end(&sc); /* idempotent */
	ck_assert_ptr_eq(ix.scans, &sc2);
	/* A scan left open is ended with the index (ASan: nothing leaks). */
	index_done(&ix);
	ck_assert_ptr_null(sc2.ix);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("index");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, put_get_remove);
	tcase_add_test(tc, slots_are_distinct_and_ordered);
	tcase_add_test(tc, corners_of_the_space);
	tcase_add_test(tc, scan_sees_its_beginning);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

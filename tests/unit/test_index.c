/* Unit tests of daemon/find/index.c: the coordinate-addressed record table. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
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

static void count_wakeups(void *ctx)
{
	(*(int *)ctx)++;
}

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
	ck_assert_int_eq(sc.kept.n, 3);
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
	ck_assert_uint_eq(sc.kept.n, 1);
	index_put(&ix, make(1, 1, 1, 4, "one, four"));
	ck_assert_uint_eq(sc.kept.n, 1);
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

/* Slots of a search through a scan (pending slots judged on their
 * text), as "x,y,z;" text. */
static const char *search_through(struct index *ix, const char *term)
{
	static char out[512];
	struct index_scan sc;
	struct search_changes ch;
	struct search_query *q = NULL;
	struct search_exec *e = NULL;
	struct search_hit *hits = NULL;
	size_t n = 0, len = strlen(term), w = 0;
	char msg[128];

	index_scan_begin(ix, &sc);
	ch = (struct search_changes){&sc, index_scan_changes_next,
				     index_scan_changes_text};
	ck_assert_int_eq(
		search_query_parse(&term, &len, 1, &q, msg, sizeof(msg)), 0);
	ck_assert_int_eq(
		search_exec_new(ix->search, q, false, 0, index_text, ix, &e),
		0);
	ck_assert_int_eq(search_exec_step(e, &ch, SIZE_MAX), 1);
	ck_assert_int_eq(search_exec_take(e, &hits, &n), 0);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		struct coord c = index_coord(ix, hits[i].slot);

		w += (size_t)snprintf(out + w, sizeof(out) - w, "%d,%d,%d;",
				      c.x, c.y, c.z);
	}
	free(hits);
	search_exec_free(e);
	search_query_free(q);
	index_scan_end(&sc);
	return out;
}

/* The search index follows the records at the next catch-up; meanwhile
 * a search through a scan judges the pending slots on their text. */
START_TEST(search_catches_up)
{
	struct index ix;
	struct coord c2 = {2, 1, 1};
	int woken = 0;

	ck_assert_int_eq(index_init(&ix, 10), 0);
	ix.on_pending = count_wakeups;
	ix.on_pending_ctx = &woken;
	index_put(&ix, make(1, 1, 1, 1, "alpha beta"));
	index_put(&ix, make(2, 1, 1, 1, "beta gamma"));
	index_put(&ix, make(3, 1, 2, 1, "gamma"));
	ck_assert_int_eq(woken, 1); /* once, when the first became pending */
	ck_assert_uint_eq(ix.pending.n, 3);
	ck_assert_uint_eq(index_pending_next(&ix, 0), slot_of(&ix, 1, 1, 1));
	ck_assert_str_eq(search_through(&ix, "beta"), "1,1,1;2,1,1;");
	ck_assert_uint_eq(index_catch_up(&ix, UINT64_MAX), 0);
	ck_assert_uint_eq(index_pending_next(&ix, 0), SIZE_MAX);
	ck_assert_str_eq(search_through(&ix, "beta"), "1,1,1;2,1,1;");
	/* Changed twice, then removed: the postings of the first text go. */
	index_put(&ix, make(1, 1, 1, 2, "delta"));
	index_put(&ix, make(1, 1, 1, 3, "epsilon"));
	ck_assert_int_eq(index_remove(&ix, &c2), 1);
	ck_assert_int_eq(woken, 2);
	ck_assert_str_eq(search_through(&ix, "beta"), "");
	ck_assert_str_eq(search_through(&ix, "epsilon"), "1,1,1;");
	ck_assert_str_eq(search_through(&ix, "gamma"), "3,1,2;");
	ck_assert_uint_eq(index_catch_up(&ix, UINT64_MAX), 0);
	ck_assert_str_eq(search_through(&ix, "beta"), "");
	ck_assert_str_eq(search_through(&ix, "delta"), "");
	ck_assert_str_eq(search_through(&ix, "epsilon"), "1,1,1;");
	ck_assert_str_eq(search_through(&ix, "gamma"), "3,1,2;");
	/* Left pending at the end: released with the index (ASan). */
	index_put(&ix, make(4, 1, 1, 1, "zeta"));
	index_done(&ix);
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
	tcase_add_test(tc, search_catches_up);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

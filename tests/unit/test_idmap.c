/*
 * Unit tests of daemon/base/idmap.c: the map from 16-byte ids to records,
 * against a model (an array saying which record each id has now), under
 * random puts, replacements and deletions. Ids are chosen so that many
 * share their home slot and the low bits of their hash, runs wrap around
 * the table's end, and the table grows while full of them; every id is
 * then looked up, present or not.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idmap.h"
#include "run_suite.h"
#include "test_rng.h"

#define NIDS 4000

struct rec {
	uint8_t id[IDMAP_KEY];
	int n; /* which id */
	int version;
};

/* Ids that differ in one byte only, in a few bytes, or at random. */
static void id_of(int n, uint8_t id[IDMAP_KEY])
{
	memset(id, 0x5a, IDMAP_KEY);
	switch (n % 3) {
	case 0:
		id[n % 16] = (uint8_t)(n / 3);
		id[(n + 7) % 16] ^= (uint8_t)(n / 768);
		break;
	case 1:
		memcpy(id + 4, &n, sizeof(n));
		break;
	default: {
		uint64_t a = (uint64_t)n * 0x9e3779b97f4a7c15ull, b = ~a;

		memcpy(id, &a, 8);
		memcpy(id + 8, &b, 8);
	}
	}
}

static struct rec *model[NIDS];

static void check_all(const struct idmap *m)
{
	size_t live = 0;

	for (int n = 0; n < NIDS; n++) {
		uint8_t id[IDMAP_KEY];

		id_of(n, id);
		ck_assert_msg(idmap_get(m, id) == model[n], "id %d", n);
		live += model[n] != NULL;
	}
	ck_assert_uint_eq(m->n, live);
}

START_TEST(against_a_model)
{
	struct idmap m;
	int version = 0;

	rng_state = 0x1234567 + (uint64_t)_i;
	memset(model, 0, sizeof(model));
	idmap_init(&m);
	ck_assert_ptr_null(idmap_get(&m, (const uint8_t *)"0123456789abcdef"));
	ck_assert_ptr_null(idmap_del(&m, (const uint8_t *)"0123456789abcdef"));
	for (int step = 0; step < 60000; step++) {
		/* A small working set first (deletions in full runs), then
		 * all of them (growth). */
		int span = step < 20000 ? 200 : NIDS, n = (int)(rnd() % span);
		struct rec *r, *old;

		if (rnd() % 3 == 0) {
			uint8_t id[IDMAP_KEY];

			id_of(n, id);
			r = idmap_del(&m, id);
			ck_assert_ptr_eq(r, model[n]);
			free(r);
			model[n] = NULL;
		} else {
			r = malloc(sizeof(*r));
			ck_assert_ptr_nonnull(r);
			id_of(n, r->id);
			r->n = n;
			r->version = ++version;
			ck_assert_int_eq(idmap_put(&m, r, (void **)&old), 0);
			ck_assert_ptr_eq(old, model[n]);
			free(old);
			model[n] = r;
		}
		if (step % 5000 == 0)
			check_all(&m);
	}
	check_all(&m);
	/* Room made ahead, then every record out again. */
	ck_assert_int_eq(idmap_reserve(&m, 3 * NIDS), 0);
	ck_assert_uint_ge(m.cap, 6 * NIDS);
	check_all(&m);
	for (int n = NIDS - 1; n >= 0; n--) {
		uint8_t id[IDMAP_KEY];

		id_of(n, id);
		free(idmap_del(&m, id));
		model[n] = NULL;
		if (n % 997 == 0)
			check_all(&m);
	}
	ck_assert_uint_eq(m.n, 0);
	ck_assert_uint_eq(idmap_memory(&m),
			  m.cap * (sizeof(void *) + sizeof(uint32_t)));
	idmap_done(&m);
}
END_TEST

/* A full run that wraps the table's end: deletions inside it keep every
 * later member reachable (the backward shift across the wrap). */
START_TEST(runs_that_wrap)
{
	struct idmap m;
	struct rec r[40];
	int n = 0;

	idmap_init(&m);
	ck_assert_int_eq(idmap_reserve(&m, 32), 0);
	ck_assert_uint_eq(m.cap, 64);
	/* Ids whose home is one of the last four slots: each put, and
	 * taken out again unless its tag says so. */
	for (int k = 0; n < 24; k++) {
		struct rec *x = &r[n];
		bool keep = false;

		id_of(k, x->id);
		x->n = k;
		ck_assert_int_eq(idmap_put(&m, x, NULL), 0);
		for (size_t i = 0; i < m.cap; i++)
			if (m.tab[i] == x)
				keep = (m.tags[i] & 63) >= 60;
		if (keep)
			n++;
		else
			ck_assert_ptr_eq(idmap_del(&m, x->id), x);
	}
	ck_assert_uint_eq(m.cap, 64);
	ck_assert_ptr_nonnull(m.tab[0]); /* the run wrapped */
	for (int i = 0; i < n; i += 2)
		ck_assert_ptr_eq(idmap_del(&m, r[i].id), &r[i]);
	for (int i = 0; i < n; i++)
		ck_assert_ptr_eq(idmap_get(&m, r[i].id), i % 2 ? &r[i] : NULL);
	ck_assert_uint_eq(m.n, (size_t)n / 2);
	idmap_done(&m);
}
END_TEST

static Suite *idmap_suite(void)
{
	Suite *s = suite_create("idmap");
	TCase *tc = tcase_create("idmap");

	tcase_add_loop_test(tc, against_a_model, 0, 3);
	tcase_add_test(tc, runs_that_wrap);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(idmap_suite());
}

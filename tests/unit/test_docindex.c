/*
 * Unit tests of daemon/find/docindex.c: documents in memory. Puts,
 * replacements (same slot, vector kept) and deletes (slot reused, vector
 * and postings gone); the creation order across holes and its squeezing;
 * temporal queries by both strategies (matches sorted, or the window
 * walked through a bitmap) against a brute-force answer; semantic search
 * with and without filters returning min(k, eligible) against a
 * brute-force ranking; the wire form and the vector read back.
 */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "docindex.h"
#include "run_suite.h"

#define DIM 8
#define N   300

static struct docindex ix;
static float V[N][DIM];
static bool has_v[N];
static int64_t at_of[N];
static int cat_of[N];
static bool alive[N];
static char msg[256];

static void setup(void)
{
	struct vindex_opts o;

	vindex_opts_default(&o, DIM);
	ck_assert_int_eq(docindex_init(&ix, &o), 0);
	memset(alive, 0, sizeof(alive));
	memset(has_v, 0, sizeof(has_v));
}

static void teardown(void)
{
	docindex_done(&ix);
}

static void id_of(unsigned n, uint8_t id[REC_KEY])
{
	memset(id, 0x33, REC_KEY);
	memcpy(id, &n, sizeof(n));
}

static unsigned num_of(const struct doc *d)
{
	unsigned n;

	memcpy(&n, d->id, sizeof(n));
	return n;
}

static void put(unsigned n, int64_t at, int cat, const char *content)
{
	uint8_t id[REC_KEY];
	char meta[64];
	struct rec_document r;

	snprintf(meta, sizeof(meta), "{\"cat\":%d,\"tags\":[\"t%d\"]}", cat,
		 cat % 3);
	r = (struct rec_document){at,	at,	     content, strlen(content),
				  meta, strlen(meta)};
	id_of(n, id);
	ck_assert_int_eq(docindex_put(&ix, id, &r), 0);
	at_of[n] = at;
	cat_of[n] = cat;
	alive[n] = true;
}

static void set_vector(unsigned n, uint64_t *x)
{
	uint8_t id[REC_KEY];

	for (int i = 0; i < DIM; i++) {
		*x ^= *x << 13;
		*x ^= *x >> 7;
		*x ^= *x << 17;
		V[n][i] = (float)((double)(*x % 2001) / 1000.0 - 1.0);
	}
	id_of(n, id);
	ck_assert_int_eq(docindex_set_vector(&ix, id, V[n], msg, sizeof(msg)),
			 0);
	has_v[n] = true;
}

static void del(unsigned n)
{
	uint8_t id[REC_KEY];

	id_of(n, id);
	ck_assert(docindex_del(&ix, id));
	alive[n] = false;
	has_v[n] = false;
}

START_TEST(put_replace_delete)
{
	uint8_t id[REC_KEY];
	uint64_t x = 9;
	struct rec_document r = {5, 7, "new", 3, "{\"cat\":9}", 9};
	const struct doc *d;
	uint32_t slot;

	put(1, 5, 1, "one");
	put(2, 6, 2, "two");
	set_vector(1, &x);
	id_of(1, id);
	slot = docindex_get(&ix, id)->slot;
	ck_assert_int_eq(docindex_put(&ix, id, &r), 0);
	d = docindex_get(&ix, id);
	ck_assert_uint_eq(d->slot, slot);
	ck_assert(memcmp(d->data, "new", 3) == 0);
	ck_assert(docindex_has_vector(&ix, d));
	ck_assert_uint_eq(ix.n_docs, 2);
	/* Metadata that is no object is refused, nothing changed. */
	r.meta = "[1]";
	r.meta_len = 3;
	ck_assert_int_eq(docindex_put(&ix, id, &r), -EINVAL);
	ck_assert(memcmp(docindex_get(&ix, id)->data, "new", 3) == 0);
	del(1);
	ck_assert_ptr_null(docindex_get(&ix, id));
	ck_assert(!docindex_del(&ix, id));
	ck_assert_uint_eq(docindex_vectors(&ix), 0);
	/* The slot comes back for the next document. */
	put(3, 8, 3, "three");
	id_of(3, id);
	ck_assert_uint_eq(docindex_get(&ix, id)->slot, slot);
	ck_assert(!docindex_has_vector(&ix, docindex_get(&ix, id)));
	id_of(77, id);
	ck_assert_int_eq(docindex_set_vector(&ix, id, V[1], msg, sizeof(msg)),
			 -ENOENT);
}
END_TEST

struct got {
	unsigned n[N];
	int count;
};

static bool got_cb(void *ctx, const struct doc *d)
{
	struct got *g = ctx;

	g->n[g->count++] = num_of(d);
	return true;
}

/* docindex_between against the brute-force answer. */
static void check_between(int64_t start, int64_t end, int cat, size_t limit)
{
	struct got g = {{0}, 0};
	json_t *f = cat >= 0 ? json_pack("{s:i}", "cat", cat) : NULL;
	unsigned want[N];
	int nw = 0;

	ck_assert_int_eq(
		docindex_between(&ix, start, end, f, limit, got_cb, &g), 0);
	/* Newest first; equal times by slot is the index's business, so
	 * times here are distinct. */
	for (int64_t t = end; t >= start && (size_t)nw < limit; t--)
		for (unsigned n = 0; n < N; n++)
			if (alive[n] && at_of[n] == t &&
			    (cat < 0 || cat_of[n] == cat) && (size_t)nw < limit)
				want[nw++] = n;
	ck_assert_int_eq(g.count, nw);
	for (int i = 0; i < nw; i++)
		ck_assert_uint_eq(g.n[i], want[i]);
	json_decref(f);
}

START_TEST(temporal)
{
	/* Out of order times too (a replay ahead of the segments). */
	for (unsigned n = 0; n < N; n++)
		put(n, (int64_t)((n * 37) % N) * 10, (int)(n % 50), "d");
	check_between(0, 10 * N, -1, N);
	check_between(500, 800, -1, N);
	check_between(500, 800, -1, 7);
	check_between(505, 505, -1, 10); /* no document at that time */
	check_between(510, 510, -1, 10); /* exactly one */
	check_between(0, 10 * N, 7, N);	 /* few matches: sorted */
	check_between(100, 130, 7, N);	 /* a window smaller than them */
	check_between(0, 10 * N, 7, 2);
	for (unsigned n = 0; n < N; n += 2)
		del(n); /* half the order is holes: kept */
	ck_assert_uint_eq(ix.t_holes, N / 2);
	check_between(0, 10 * N, -1, N);
	del(1); /* more than half: squeezed out */
	ck_assert_uint_eq(ix.t_holes, 0);
	ck_assert_uint_eq(ix.t_n, N / 2 - 1);
	check_between(0, 10 * N, -1, N);
	check_between(0, 10 * N, 7, N);
	check_between(700, 300, -1, N); /* empty window */
	/* A filter beyond the limits. */
	{
		json_t *deep = json_integer(1);
		struct got g = {{0}, 0};

		for (int i = 0; i < 40; i++)
			deep = json_pack("{s:o}", "k", deep);
		ck_assert_int_eq(
			docindex_between(&ix, 0, 10000, deep, 10, got_cb, &g),
			-EINVAL);
		json_decref(deep);
	}
}
END_TEST

static double cosine(const float *a, const float *b)
{
	double ab = 0, aa = 0, bb = 0;

	for (int i = 0; i < DIM; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb);
}

static void check_search(const float *q, size_t k, int cat, bool exact)
{
	struct doc_hit hits[N];
	json_t *f = cat >= 0 ? json_pack("{s:i}", "cat", cat) : NULL;
	unsigned elig[N];
	double score[N];
	size_t n = 0, ne = 0;

	ck_assert_int_eq(docindex_search(&ix, q, k, f, exact, hits, &n, NULL,
					 msg, sizeof(msg)),
			 0);
	for (unsigned d = 0; d < N; d++)
		if (alive[d] && has_v[d] && (cat < 0 || cat_of[d] == cat)) {
			score[d] = cosine(q, V[d]);
			elig[ne++] = d;
		}
	ck_assert_uint_eq(n, ne < k ? ne : k);
	for (size_t i = 0; i < n; i++) {
		unsigned d = num_of(hits[i].doc);
		size_t better = 0;

		ck_assert(alive[d] && has_v[d]);
		ck_assert(cat < 0 || cat_of[d] == cat);
		ck_assert(fabs(hits[i].score - score[d]) < 1e-5);
		/* Its rank is its place among the eligible. */
		for (size_t j = 0; j < ne; j++)
			if (score[elig[j]] > score[d] + 1e-6)
				better++;
		ck_assert_uint_le(better, i);
	}
	json_decref(f);
}

START_TEST(semantic)
{
	uint64_t x = 77;
	float q[DIM];

	for (unsigned n = 0; n < N; n++) {
		put(n, n, (int)(n % 10), "d");
		if (n % 4)
			set_vector(n, &x);
	}
	for (int i = 0; i < DIM; i++)
		q[i] = (float)(i % 3) - 1.0f;
	check_search(q, 10, -1, false);
	check_search(q, 10, -1, true);
	check_search(q, 1000, -1, false);
	check_search(q, 5, 3, false);
	check_search(q, 1000, 3, false);
	check_search(q, 10, 99, false); /* matches none */
	for (unsigned n = 0; n < N; n += 3)
		del(n);
	check_search(q, 1000, 3, false);
	check_search(q, 10, -1, false);
	{
		struct doc_hit hits[2];
		size_t n;
		float zero[DIM] = {0};

		ck_assert_int_eq(docindex_search(&ix, zero, 2, NULL, false,
						 hits, &n, NULL, msg,
						 sizeof(msg)),
				 -EINVAL);
		ck_assert_int_eq(docindex_search(&ix, q, 0, NULL, false, hits,
						 &n, NULL, msg, sizeof(msg)),
				 -EINVAL);
	}
}
END_TEST

START_TEST(wire_form)
{
	uint64_t x = 5;
	struct buf b = {0};
	uint8_t id[REC_KEY];
	float back[DIM];
	json_t *j, *e;
	size_t i;

	put(4, 1767225600123456, 2, "text \"quoted\"");
	set_vector(4, &x);
	id_of(4, id);
	ck_assert(doc_json(&b, &ix, docindex_get(&ix, id), true, 0.5f, true));
	ck_assert_uint_le(b.len,
			  doc_json_max(&ix, docindex_get(&ix, id), true));
	j = json_loads(b.data, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "content")),
			 "text \"quoted\"");
	ck_assert_str_eq(json_string_value(json_object_get(j, "created_at")),
			 "2026-01-01T00:00:00.123456Z");
	ck_assert(json_is_true(json_object_get(j, "has_embedding")));
	ck_assert(json_real_value(json_object_get(j, "score")) == 0.5);
	ck_assert_int_eq(json_integer_value(json_object_get(
				 json_object_get(j, "metadata"), "cat")),
			 2);
	e = json_object_get(j, "embedding");
	ck_assert_uint_eq(json_array_size(e), DIM);
	ck_assert(docindex_vector(&ix, docindex_get(&ix, id), back));
	for (i = 0; i < DIM; i++) {
		/* The printed number reads back as the float32. */
		ck_assert((float)json_number_value(json_array_get(e, i)) ==
			  back[i]);
		ck_assert(fabsf(back[i] - V[4][i]) <=
			  fabsf(V[4][i]) * 4e-7f + 1e-7f);
	}
	json_decref(j);
	b.len = 0;
	ck_assert(doc_json(&b, &ix, docindex_get(&ix, id), false, 0, false));
	ck_assert_ptr_null(strstr(b.data, "embedding\":["));
	ck_assert_ptr_null(strstr(b.data, "score"));
	buf_done(&b);
}
END_TEST

static Suite *docindex_suite(void)
{
	Suite *s = suite_create("docindex");
	TCase *tc = tcase_create("documents");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, put_replace_delete);
	tcase_add_test(tc, temporal);
	tcase_add_test(tc, semantic);
	tcase_add_test(tc, wire_form);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(docindex_suite());
}

/*
 * Unit tests of daemon/find/vector.c: checks on vectors, the two kernels
 * (AVX2+FMA and the portable one, forced through vector_force_portable)
 * giving bit-identical scores and the same ranking, top-k against a
 * brute-force model, candidates, dead rows and ties.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vector.h"
#include "test_rng.h"

static float rndf(void)
{
	return (float)((double)(rnd() >> 11) / (double)(1ull << 53)) * 2 - 1;
}

static void fill(float *v, uint32_t dim)
{
	for (uint32_t i = 0; i < dim; i++)
		v[i] = rndf();
}

START_TEST(normalise_checks)
{
	float v[4] = {3, 4, 0, 0}, out[4], norm;
	char msg[128];

	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 0);
	ck_assert_float_eq_tol(norm, 5, 1e-6);
	ck_assert_float_eq_tol(out[0], 0.6f, 1e-6);
	ck_assert_float_eq_tol(out[1], 0.8f, 1e-6);

	v[2] = NAN;
	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_str_eq(msg, "element 2 is not a finite number");
	v[2] = INFINITY;
	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 -EINVAL);
	memset(v, 0, sizeof(v));
	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_str_eq(msg, "zero vector");
	ck_assert_int_eq(vector_normalise(v, 0, out, &norm, msg, sizeof(msg)),
			 -EINVAL);
	/* Huge but finite numbers still normalise (the sum is in double)... */
	v[0] = 1e38f;
	v[1] = 1e38f;
	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 0);
	ck_assert_float_eq_tol(out[0], (float)M_SQRT1_2, 1e-6);
	/* ...unless the norm itself is beyond a float. */
	v[0] = 3e38f;
	v[1] = 3e38f;
	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_str_eq(msg, "vector norm overflows");
	/* Subnormal only: not zero, normalises to a unit vector. */
	memset(v, 0, sizeof(v));
	v[3] = 1e-45f;
	ck_assert_int_eq(vector_normalise(v, 4, out, &norm, msg, sizeof(msg)),
			 0);
	ck_assert_float_eq_tol(out[3], 1, 1e-6);
}
END_TEST

START_TEST(vecset_refuses)
{
	struct vecset *vs = vecset_new(8);
	float v[8] = {0};
	uint32_t row = 99;
	char msg[128];

	ck_assert_ptr_null(vecset_new(0));
	ck_assert_ptr_null(vecset_new(VECTOR_DIM_MAX + 1));
	ck_assert_ptr_nonnull(vs);
	ck_assert_int_eq(vecset_add(vs, v, &row, msg, sizeof(msg)), -EINVAL);
	ck_assert_uint_eq(row, 99);
	ck_assert_uint_eq(vecset_rows(vs), 0);
	v[7] = 1;
	ck_assert_int_eq(vecset_add(vs, v, &row, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(row, 0);
	ck_assert_int_eq(vecset_kill(vs, 0), 0);
	ck_assert_int_eq(vecset_kill(vs, 0), -ENOENT);
	ck_assert_int_eq(vecset_kill(vs, 5), -ENOENT);
	ck_assert_uint_eq(vecset_live(vs), 0);
	vecset_free(vs);
}
END_TEST

/* The two kernels agree to the bit on every dimension shape. */
START_TEST(kernels_identical)
{
	static const uint32_t dims[] = {1, 7, 31, 32, 33, 100, 768, 1536};
	float *a, *b, fa, fp;
	size_t stride;

	rng_state = 0x1234567;
	for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
		stride = vector_stride(dims[d]);
		ck_assert_uint_eq(stride % 32, 0);
		a = calloc(stride, sizeof(float));
		b = calloc(stride, sizeof(float));
		for (int rep = 0; rep < 50; rep++) {
			fill(a, dims[d]);
			fill(b, dims[d]);
			vector_force_portable(false);
			fa = vector_dot(a, b, stride);
			vector_force_portable(true);
			ck_assert_str_eq(vector_kernel(), "portable");
			fp = vector_dot(a, b, stride);
			ck_assert_msg(memcmp(&fa, &fp, sizeof(fa)) == 0,
				      "dim %u: %.9g vs %.9g", dims[d], fa, fp);
			/* And both are the dot product. */
			double ref = 0;
			for (uint32_t i = 0; i < dims[d]; i++)
				ref += (double)a[i] * b[i];
			ck_assert(fabs(ref - fp) < 1e-4 * (1 + fabs(ref)));
		}
		free(a);
		free(b);
	}
	vector_force_portable(false);
}
END_TEST

static int cmp_model(const void *x, const void *y)
{
	const struct vec_hit *a = x, *b = y;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	return a->row < b->row ? -1 : a->row > b->row;
}

/* Top-k equals sorting every live row's score, on both kernels. */
START_TEST(topk_matches_model)
{
	const uint32_t dim = 100, n = 3000;
	struct vecset *vs = vecset_new(dim);
	size_t stride = vector_stride(dim), got, got2, m, k;
	struct vec_hit *model = calloc(n, sizeof(*model));
	struct vec_hit out[VECTOR_TOPK_MAX], out2[VECTOR_TOPK_MAX];
	float v[100], *q = calloc(stride, sizeof(float));
	uint32_t row, r;
	char msg[128];

	rng_state = 42;
	for (r = 0; r < n; r++) {
		fill(v, dim);
		ck_assert_int_eq(vecset_add(vs, v, &row, msg, sizeof(msg)), 0);
		ck_assert_uint_eq(row, r);
	}
	for (r = 0; r < n; r += 3)
		ck_assert_int_eq(vecset_kill(vs, r), 0);
	ck_assert_uint_eq(vecset_live(vs), n - n / 3);
	for (int rep = 0; rep < 20; rep++) {
		fill(v, dim);
		ck_assert_int_eq(vector_normalise(v, dim, q, NULL, NULL, 0), 0);
		vector_force_portable(false);
		m = 0;
		for (r = 0; r < n; r++)
			if (vecset_is_live(vs, r))
				model[m++] = (struct vec_hit){
					r, vector_dot(vecset_row(vs, r), q,
						      stride)};
		qsort(model, m, sizeof(*model), cmp_model);
		k = rep % 2 ? 10 : 1 + rnd() % 200;
		ck_assert_int_eq(vecset_search(vs, q, k, NULL, 0, out, &got),
				 0);
		ck_assert_uint_eq(got, k);
		vector_force_portable(true);
		ck_assert_int_eq(vecset_search(vs, q, k, NULL, 0, out2, &got2),
				 0);
		vector_force_portable(false);
		ck_assert_uint_eq(got2, k);
		for (size_t i = 0; i < k; i++) {
			ck_assert_uint_eq(out[i].row, model[i].row);
			ck_assert(out[i].score == model[i].score);
			ck_assert_uint_eq(out2[i].row, out[i].row);
			ck_assert(out2[i].score == out[i].score);
			ck_assert(vecset_is_live(vs, out[i].row));
		}
	}
	free(model);
	free(q);
	vecset_free(vs);
}
END_TEST

START_TEST(candidates_and_bounds)
{
	const uint32_t dim = 16;
	struct vecset *vs = vecset_new(dim);
	struct vec_hit out[VECTOR_TOPK_MAX];
	float v[16], q[32] = {0};
	uint32_t cands[] = {3, 5, 7, 9, 2000}, row;
	size_t got;
	char msg[64];

	rng_state = 7;
	for (int i = 0; i < 20; i++) {
		fill(v, dim);
		ck_assert_int_eq(vecset_add(vs, v, &row, msg, sizeof(msg)), 0);
	}
	fill(v, dim);
	vector_normalise(v, dim, q, NULL, NULL, 0);
	ck_assert_int_eq(vecset_kill(vs, 5), 0);
	/* Only candidates, dead and out-of-range ones skipped. */
	ck_assert_int_eq(vecset_search(vs, q, 10, cands, 5, out, &got), 0);
	ck_assert_uint_eq(got, 3);
	for (size_t i = 0; i < got; i++)
		ck_assert(out[i].row == 3 || out[i].row == 7 ||
			  out[i].row == 9);
	ck_assert(out[0].score >= out[1].score && out[1].score >= out[2].score);
	/* k beyond the live rows: all of them. */
	ck_assert_int_eq(vecset_search(vs, q, 100, NULL, 0, out, &got), 0);
	ck_assert_uint_eq(got, 19);
	ck_assert_int_eq(vecset_search(vs, q, 0, NULL, 0, out, &got), -EINVAL);
	ck_assert_int_eq(
		vecset_search(vs, q, VECTOR_TOPK_MAX + 1, NULL, 0, out, &got),
		-EINVAL);
	vecset_free(vs);
}
END_TEST

/* Equal scores rank the lower row first, whatever order they come in. */
START_TEST(ties_by_row)
{
	struct vecset *vs = vecset_new(4);
	float v[4] = {1, 2, 3, 4}, q[32] = {0};
	struct vec_hit out[8];
	uint32_t cands[] = {4, 2, 0, 3, 1}, row;
	size_t got;

	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(vecset_add(vs, v, &row, NULL, 0), 0);
	vector_normalise(v, 4, q, NULL, NULL, 0);
	ck_assert_int_eq(vecset_search(vs, q, 3, cands, 5, out, &got), 0);
	ck_assert_uint_eq(got, 3);
	ck_assert_uint_eq(out[0].row, 0);
	ck_assert_uint_eq(out[1].row, 1);
	ck_assert_uint_eq(out[2].row, 2);
	vecset_free(vs);
}
END_TEST

/* Many chunks: rows keep their numbers and the memory is accounted. */
START_TEST(many_chunks)
{
	const uint32_t dim = 8, n = 3 * VECSET_CHUNK_ROWS + 5;
	struct vecset *vs = vecset_new(dim);
	float v[8];
	uint32_t row;

	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t j = 0; j < dim; j++)
			v[j] = (float)(i + 1) * (j == i % dim ? 2.0f : 1.0f);
		ck_assert_int_eq(vecset_add(vs, v, &row, NULL, 0), 0);
	}
	ck_assert_uint_eq(vecset_rows(vs), n);
	ck_assert_float_eq_tol(vecset_norm(vs, n - 1), (float)n * sqrtf(11),
			       1e-2);
	ck_assert_uint_ge(vecset_memory(vs),
			  (size_t)n * vector_stride(dim) * sizeof(float));
	vecset_free(vs);
}
END_TEST

static Suite *vector_suite(void)
{
	Suite *s = suite_create("vector");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, normalise_checks);
	tcase_add_test(tc, vecset_refuses);
	tcase_add_test(tc, kernels_identical);
	tcase_add_test(tc, topk_matches_model);
	tcase_add_test(tc, candidates_and_bounds);
	tcase_add_test(tc, ties_by_row);
	tcase_add_test(tc, many_chunks);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(vector_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

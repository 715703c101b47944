/* See vector.h. */
#include "vector.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "errmsg.h"

#define LANES	32u
#define CHUNK	VECSET_CHUNK_ROWS
#define NCHUNKS (VECSET_ROWS_MAX / VECSET_CHUNK_ROWS)

/*
 * A chunk: CHUNK rows of stride floats, then their norms, then the live
 * bits. Allocated 64-byte aligned.
 */
struct vecset {
	uint32_t dim;
	size_t stride;
	size_t chunk_bytes;
	uint32_t rows, live;
	float **chunks; /* NCHUNKS pointers, allocated at creation */
};

/* ---- kernels ---- */

/*
 * The portable kernel: the same fused multiply-adds as the AVX2 one, lane
 * by lane, and the same reduction tree, so the result is bit-identical.
 */
static float dot_portable(const float *a, const float *b, size_t stride)
{
	float acc[LANES] = {0}, v[8], w[4];
	size_t i, l;

	for (i = 0; i < stride; i += LANES)
		for (l = 0; l < LANES; l++)
			acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
	for (l = 0; l < 8; l++)
		v[l] = (acc[l] + acc[8 + l]) + (acc[16 + l] + acc[24 + l]);
	for (l = 0; l < 4; l++)
		w[l] = v[l] + v[l + 4];
	return (w[0] + w[2]) + (w[1] + w[3]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float
dot_avx2(const float *a, const float *b, size_t stride)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s;
	__m128 lo, hi, w, u, r;
	size_t i;

	for (i = 0; i < stride; i += LANES) {
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
				     _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
				     _mm256_loadu_ps(b + i + 8), s1);
		s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16),
				     _mm256_loadu_ps(b + i + 16), s2);
		s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24),
				     _mm256_loadu_ps(b + i + 24), s3);
	}
	s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
	lo = _mm256_castps256_ps128(s);
	hi = _mm256_extractf128_ps(s, 1);
	w = _mm_add_ps(lo, hi);
	u = _mm_add_ps(w, _mm_movehl_ps(w, w));
	r = _mm_add_ss(u, _mm_shuffle_ps(u, u, 1));
	return _mm_cvtss_f32(r);
}
#endif

typedef float (*dot_kernel)(const float *, const float *, size_t);

/* Picked at the first use, on whichever thread (the loop, a graph build
 * on the pool): each picks the same one, and the pointer is atomic so
 * that those first uses do not race. Relaxed loads are plain loads. */
static _Atomic(dot_kernel) dot_fn;
static _Atomic bool forced_portable;

static dot_kernel pick_kernel(void)
{
	dot_kernel k = dot_portable;

#if defined(__x86_64__)
	__builtin_cpu_init();
	if (!atomic_load_explicit(&forced_portable, memory_order_relaxed) &&
	    __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		k = dot_avx2;
#endif
	atomic_store_explicit(&dot_fn, k, memory_order_relaxed);
	return k;
}

static dot_kernel kernel(void)
{
	dot_kernel k = atomic_load_explicit(&dot_fn, memory_order_relaxed);

	return __builtin_expect(k != NULL, 1) ? k : pick_kernel();
}

void vector_force_portable(bool on)
{
	atomic_store_explicit(&forced_portable, on, memory_order_relaxed);
	pick_kernel();
}

static inline float dot(const float *a, const float *b, size_t stride)
{
	return kernel()(a, b, stride);
}

float vector_dot(const float *a, const float *b, size_t stride)
{
	return dot(a, b, stride);
}

const char *vector_kernel(void)
{
	return kernel() == dot_portable ? "portable" : "avx2-fma";
}

size_t vector_stride(uint32_t dim)
{
	return ((size_t)dim + LANES - 1) / LANES * LANES;
}

int vector_normalise(const float *in, uint32_t dim, float *out, float *norm,
		     char *msg, size_t msglen)
{
	double sum = 0;
	float n;
	uint32_t i;

	if (dim == 0 || dim > VECTOR_DIM_MAX) {
		errmsg_set(msg, msglen, "dimension %u is out of 1..%u", dim,
			   VECTOR_DIM_MAX);
		return -EINVAL;
	}
	for (i = 0; i < dim; i++) {
		if (!isfinite(in[i])) {
			errmsg_set(msg, msglen,
				   "element %u is not a finite number", i);
			return -EINVAL;
		}
		sum += (double)in[i] * (double)in[i];
	}
	n = (float)sqrt(sum);
	if (!(sum > 0) || !isfinite(n) || n == 0) {
		errmsg_set(msg, msglen, "%s",
			   sum > 0 ? "vector norm overflows" : "zero vector");
		return -EINVAL;
	}
	for (i = 0; i < dim; i++)
		out[i] = (float)((double)in[i] / (double)n);
	if (norm)
		*norm = n;
	return 0;
}

/* ---- top-k ---- */

static inline bool better(const struct vec_hit *a, const struct vec_hit *b)
{
	return a->score > b->score || (a->score == b->score && a->row < b->row);
}

void topk_init(struct topk *t, struct vec_hit *buf, size_t k)
{
	t->h = buf;
	t->n = 0;
	t->k = k;
}

/* The heap's root is its worst hit. */
static void sift_down(struct topk *t, size_t i)
{
	struct vec_hit x = t->h[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= t->n)
			break;
		if (c + 1 < t->n && better(&t->h[c], &t->h[c + 1]))
			c++;
		if (!better(&x, &t->h[c]))
			break;
		t->h[i] = t->h[c];
		i = c;
	}
	t->h[i] = x;
}

void topk_push(struct topk *t, uint32_t row, float score)
{
	struct vec_hit x = {row, score};
	size_t i, p;

	if (t->n == t->k) {
		if (t->k == 0 || !better(&x, &t->h[0]))
			return;
		t->h[0] = x;
		sift_down(t, 0);
		return;
	}
	i = t->n++;
	while (i > 0) {
		p = (i - 1) / 2;
		if (!better(&t->h[p], &x))
			break;
		t->h[i] = t->h[p];
		i = p;
	}
	t->h[i] = x;
}

static int cmp_hit(const void *a, const void *b)
{
	const struct vec_hit *x = a, *y = b;

	return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

size_t topk_finish(struct topk *t)
{
	qsort(t->h, t->n, sizeof(*t->h), cmp_hit);
	return t->n;
}

/* ---- the vecset ---- */

static inline float *chunk_norms(const struct vecset *vs, float *c)
{
	return c + CHUNK * vs->stride;
}

static inline uint8_t *chunk_bits(const struct vecset *vs, float *c)
{
	return (uint8_t *)(c + CHUNK * vs->stride + CHUNK);
}

struct vecset *vecset_new(uint32_t dim)
{
	struct vecset *vs;

	if (dim == 0 || dim > VECTOR_DIM_MAX)
		return NULL;
	vs = calloc(1, sizeof(*vs));
	if (!vs)
		return NULL;
	vs->dim = dim;
	vs->stride = vector_stride(dim);
	vs->chunk_bytes =
		(CHUNK * vs->stride + CHUNK) * sizeof(float) + CHUNK / 8;
	vs->chunk_bytes = (vs->chunk_bytes + 63) / 64 * 64;
	vs->chunks = calloc(NCHUNKS, sizeof(*vs->chunks));
	if (!vs->chunks) {
		free(vs);
		return NULL;
	}
	return vs;
}

void vecset_free(struct vecset *vs)
{
	uint32_t i;

	if (!vs)
		return;
	for (i = 0; i < NCHUNKS && vs->chunks[i]; i++)
		free(vs->chunks[i]);
	free(vs->chunks);
	free(vs);
}

uint32_t vecset_dim(const struct vecset *vs)
{
	return vs->dim;
}

uint32_t vecset_rows(const struct vecset *vs)
{
	return vs->rows;
}

uint32_t vecset_live(const struct vecset *vs)
{
	return vs->live;
}

size_t vecset_memory(const struct vecset *vs)
{
	size_t chunks = (vs->rows + CHUNK - 1) / CHUNK;

	return sizeof(*vs) + NCHUNKS * sizeof(*vs->chunks) +
	       chunks * vs->chunk_bytes;
}

/* Room for one more row: the chunk it goes to, allocated if new. */
static float *row_slot(struct vecset *vs, uint32_t row)
{
	float **c = &vs->chunks[row / CHUNK];

	if (!*c) {
		*c = aligned_alloc(64, vs->chunk_bytes);
		if (!*c)
			return NULL;
		memset(*c, 0, vs->chunk_bytes);
	}
	return *c + (size_t)(row % CHUNK) * vs->stride;
}

int vecset_add_normalised(struct vecset *vs, const float *unit, float norm,
			  uint32_t *row)
{
	uint32_t r = vs->rows;
	float *dst, *c;

	if (r >= VECSET_ROWS_MAX)
		return -ENOSPC;
	dst = row_slot(vs, r);
	if (!dst)
		return -ENOMEM;
	c = vs->chunks[r / CHUNK];
	if (dst != unit)
		memcpy(dst, unit, vs->dim * sizeof(float));
	/* Padding stays zero: chunks are zeroed and rows never rewritten. */
	chunk_norms(vs, c)[r % CHUNK] = norm;
	chunk_bits(vs, c)[(r % CHUNK) / 8] |= (uint8_t)(1u << (r % 8));
	vs->rows++;
	vs->live++;
	if (row)
		*row = r;
	return 0;
}

int vecset_add(struct vecset *vs, const float *v, uint32_t *row, char *msg,
	       size_t msglen)
{
	float *dst, norm;
	uint32_t r = vs->rows;
	int ret;

	if (r >= VECSET_ROWS_MAX) {
		errmsg_set(msg, msglen, "at most %u vectors", VECSET_ROWS_MAX);
		return -ENOSPC;
	}
	dst = row_slot(vs, r);
	if (!dst) {
		errmsg_set(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	/* Normalised in place: a refused vector leaves the row unused. */
	ret = vector_normalise(v, vs->dim, dst, &norm, msg, msglen);
	if (ret < 0) {
		memset(dst, 0, vs->dim * sizeof(float));
		return ret;
	}
	return vecset_add_normalised(vs, dst, norm, row);
}

bool vecset_is_live(const struct vecset *vs, uint32_t row)
{
	float *c;

	if (row >= vs->rows)
		return false;
	c = vs->chunks[row / CHUNK];
	return chunk_bits(vs, c)[(row % CHUNK) / 8] & (1u << (row % 8));
}

int vecset_kill(struct vecset *vs, uint32_t row)
{
	float *c;

	if (!vecset_is_live(vs, row))
		return -ENOENT;
	c = vs->chunks[row / CHUNK];
	chunk_bits(vs, c)[(row % CHUNK) / 8] &= (uint8_t) ~(1u << (row % 8));
	vs->live--;
	return 0;
}

const float *vecset_row(const struct vecset *vs, uint32_t row)
{
	return vs->chunks[row / CHUNK] + (size_t)(row % CHUNK) * vs->stride;
}

float vecset_norm(const struct vecset *vs, uint32_t row)
{
	return chunk_norms(vs, vs->chunks[row / CHUNK])[row % CHUNK];
}

int vecset_search(const struct vecset *vs, const float *query, size_t k,
		  const uint32_t *cands, size_t n_cands, struct vec_hit *out,
		  size_t *n_out)
{
	struct topk t;
	uint32_t r, base, end, i;
	const uint8_t *bits;
	const float *c;
	dot_kernel dotk;
	size_t j;

	if (k == 0 || k > VECTOR_TOPK_MAX)
		return -EINVAL;
	dotk = kernel();
	topk_init(&t, out, k);
	if (cands) {
		for (j = 0; j < n_cands; j++) {
			r = cands[j];
			if (!vecset_is_live(vs, r))
				continue;
			topk_push(&t, r,
				  dotk(vecset_row(vs, r), query, vs->stride));
		}
	} else {
		for (base = 0; base < vs->rows; base += CHUNK) {
			c = vs->chunks[base / CHUNK];
			bits = chunk_bits(vs, (float *)c);
			end = vs->rows - base < CHUNK ? vs->rows - base : CHUNK;
			for (i = 0; i < end; i++) {
				if (!(bits[i / 8] & (1u << (i % 8))))
					continue;
				topk_push(&t, base + i,
					  dotk(c + (size_t)i * vs->stride,
					       query, vs->stride));
			}
		}
	}
	*n_out = topk_finish(&t);
	return 0;
}

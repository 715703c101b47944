/*
 * Exact cosine search over float32 vectors of one dimension.
 *
 * A vecset holds rows: each row is a vector normalised to unit length
 * (with its norm kept), numbered from 0 in the order they were added, and
 * either live or dead. Rows never move and are never written again once
 * added: an update is a new row plus the old one killed, and a vecset
 * with too many dead rows is replaced by a compacted copy (its owner's
 * decision). That is what lets a background job read rows below a count
 * it was handed while the owner goes on adding rows after them: rows live
 * in fixed chunks reached through a directory allocated whole at
 * creation, so nothing a reader holds is ever moved.
 *
 * Scores are dot products of unit vectors, i.e. cosine similarities,
 * computed by one kernel: AVX2 + FMA when the processor has them (chosen
 * at run time), else a portable version that performs the very same
 * operations in the same order (fused multiply-adds in 32 lanes, the same
 * reduction tree), so both give bit-identical scores and therefore the
 * same ranking. Rows are zero-padded to a multiple of 32 floats, which
 * leaves every sum unchanged. Ties rank the lower row first.
 *
 * Not thread-safe: the owner serialises its calls; a reader of rows below
 * vecset_rows() taken earlier may run concurrently with vecset_add/kill.
 */
#ifndef VMEM_DAEMON_VECTOR_H
#define VMEM_DAEMON_VECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Dimensions accepted (embedding_dim). */
#define VECTOR_DIM_MAX 16384u
/* Results of one search. */
#define VECTOR_TOPK_MAX 1000u
/* Rows per chunk, and the most rows a vecset can hold. */
#define VECSET_CHUNK_ROWS 1024u
#define VECSET_ROWS_MAX	  (1u << 26)

struct vecset;

struct vec_hit {
	uint32_t row;
	float score;
};

/*
 * Check a vector of dim numbers (every one finite, not all zero) and
 * write it normalised into out (dim floats; may be in) and its norm into
 * *norm (may be NULL). -EINVAL with the reason in msg otherwise.
 */
int vector_normalise(const float *in, uint32_t dim, float *out, float *norm,
		     char *msg, size_t msglen);

/* The padded length of a row of dim floats (a multiple of 32). */
size_t vector_stride(uint32_t dim);

/*
 * Dot product of two vectors of stride floats (vector_stride), each
 * 32-byte aligned or not. The kernel chosen at run time.
 */
float vector_dot(const float *a, const float *b, size_t stride);

/*
 * Force the portable kernel (true) or let the run-time choice stand
 * (false). For tests and benchmarks; not to be flipped while searching.
 */
void vector_force_portable(bool on);

/* The kernel in use: "avx2-fma" or "portable". */
const char *vector_kernel(void);

/* A new empty vecset of dimension dim (1..VECTOR_DIM_MAX); NULL on error. */
struct vecset *vecset_new(uint32_t dim);
void vecset_free(struct vecset *vs);

uint32_t vecset_dim(const struct vecset *vs);
/* Rows added so far (live and dead). */
uint32_t vecset_rows(const struct vecset *vs);
/* Live rows. */
uint32_t vecset_live(const struct vecset *vs);
/* Bytes held (rows, norms, directory, bitmap). */
size_t vecset_memory(const struct vecset *vs);

/*
 * Add a vector (dim numbers, not normalised) as a new live row; its
 * number in *row. -EINVAL (with msg) for a non-finite or zero vector,
 * -ENOSPC when VECSET_ROWS_MAX rows exist, -ENOMEM.
 */
int vecset_add(struct vecset *vs, const float *v, uint32_t *row, char *msg,
	       size_t msglen);

/* Add a row already normalised, with its norm (compaction, loading). */
int vecset_add_normalised(struct vecset *vs, const float *unit, float norm,
			  uint32_t *row);

/* Mark a row dead. -ENOENT if it is not a live row. */
int vecset_kill(struct vecset *vs, uint32_t row);

bool vecset_is_live(const struct vecset *vs, uint32_t row);

/* The normalised row (stride floats, borrowed) and its norm. */
const float *vecset_row(const struct vecset *vs, uint32_t row);
float vecset_norm(const struct vecset *vs, uint32_t row);

/*
 * The k best live rows for a query that is already normalised and padded
 * to vector_stride(dim) floats, best first: over every live row when
 * cands is NULL, else over the rows listed in cands (n_cands of them; dead
 * rows, rows out of range and repeats are skipped). out has room for k
 * hits (1..VECTOR_TOPK_MAX); *n_out gets min(k, rows considered).
 * Returns 0 or -EINVAL.
 */
int vecset_search(const struct vecset *vs, const float *query, size_t k,
		  const uint32_t *cands, size_t n_cands, struct vec_hit *out,
		  size_t *n_out);

/*
 * Top-k selection shared with the approximate index: a bounded heap that
 * keeps the k best (score, row) pairs, higher score first, then lower
 * row. topk_init with room for k hits in buf; topk_push offers one;
 * topk_finish sorts them best first and returns their count.
 */
struct topk {
	struct vec_hit *h;
	size_t n, k;
};
void topk_init(struct topk *t, struct vec_hit *buf, size_t k);
void topk_push(struct topk *t, uint32_t row, float score);
size_t topk_finish(struct topk *t);

#ifdef __cplusplus
}
#endif

#endif

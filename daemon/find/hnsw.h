/*
 * An HNSW graph over the rows of a vecset: FAISS's IndexHNSW (libfaiss-dev)
 * behind a C header, never HNSW written by hand. The graph does not copy
 * the vectors: its storage reads each row through a callback (the rows of
 * a vecset never move) and scores with vector_dot, so there is one copy of
 * every vector in the daemon and the same kernel ranks exact and
 * approximate results. Labels are vecset rows: the graph holds rows
 * 0..hnsw_count()-1, added in order.
 *
 * Vectors are unit length and padded to vector_stride(dim); scores are
 * inner products (cosine similarity). A search takes a predicate over rows
 * (FAISS's IDSelector): rows it refuses are walked through but never
 * returned, which is how deleted and replaced rows never come back and how
 * metadata filters are applied inside the index.
 *
 * The graph is saved as bytes (hnsw_serialise) and checked field by field
 * when read back (hnsw_deserialise); files are the caller's business. One
 * OpenMP thread: the daemon's CPUs belong to its loop and pool.
 *
 * Not thread-safe: one caller at a time per graph (hnsw_search sets the
 * index's efSearch, which FAISS 1.7.3 reads from the index only);
 * different graphs are independent.
 * Every function catches the library's exceptions: negative errno and a
 * message, never an unwinding C++ exception.
 */
#ifndef VMEM_DAEMON_HNSW_H
#define VMEM_DAEMON_HNSW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vector.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hnsw;

/* Row r of the vecset: vector_stride(dim) floats, borrowed, stable. */
typedef const float *(*hnsw_row_fn)(void *ctx, uint32_t row);
/* Whether row r may be returned by a search. */
typedef bool (*hnsw_allow_fn)(void *ctx, uint32_t row);

struct hnsw_opts {
	uint32_t dim;
	unsigned m;		  /* links per node (2m on the base layer) */
	unsigned ef_construction; /* candidate list while building */
};

/* An empty graph. 0, or negative errno with msg. */
int hnsw_new(const struct hnsw_opts *o, hnsw_row_fn row, void *row_ctx,
	     struct hnsw **out, char *msg, size_t msglen);
void hnsw_free(struct hnsw *h);

/* Rows in the graph. */
uint32_t hnsw_count(const struct hnsw *h);

/* Bytes held by the graph (links and levels; vectors are the vecset's). */
size_t hnsw_memory(const struct hnsw *h);

/*
 * Add rows hnsw_count() .. hnsw_count()+n-1 (read through the row
 * callback). Blocking and CPU-bound (about a millisecond a row at 1536
 * dimensions): for the thread pool, except a few rows at a time.
 */
int hnsw_add(struct hnsw *h, uint32_t n, char *msg, size_t msglen);

/*
 * The best k (1..VECTOR_TOPK_MAX) rows allowed by allow (NULL: all) for
 * a unit query padded to vector_stride(dim), exploring ef candidates
 * (at least k), best first, into out; *n_out may be below k when the graph
 * found fewer allowed rows.
 */
int hnsw_search(struct hnsw *h, const float *query, size_t k, unsigned ef,
		hnsw_allow_fn allow, void *allow_ctx, struct vec_hit *out,
		size_t *n_out, char *msg, size_t msglen);

/* The graph as bytes (malloc'd, the caller frees *buf). */
int hnsw_serialise(const struct hnsw *h, uint8_t **buf, size_t *len, char *msg,
		   size_t msglen);

/*
 * A graph read back from hnsw_serialise's bytes, for the given options
 * (dimension and m must match what was saved) over the given rows. Any
 * inconsistency (sizes, offsets, links out of range) is -EINVAL with msg.
 */
int hnsw_deserialise(const uint8_t *buf, size_t len, const struct hnsw_opts *o,
		     hnsw_row_fn row, void *row_ctx, struct hnsw **out,
		     char *msg, size_t msglen);

/* The library serving the graph, e.g. "faiss 1.7.3". */
const char *hnsw_library(void);

#ifdef __cplusplus
}
#endif

#endif

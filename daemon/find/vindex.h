/*
 * The vector index of one record kind (documents): the caller's slots
 * (small integers naming its records, each with a 16-byte key that
 * survives restarts) mapped to vecset rows, exact search over the rows,
 * and an HNSW graph (hnsw.h) over them once the collection is large.
 *
 * Exact wherever it matters: a replaced or removed vector's row is dead at
 * once and never returned (the graph walks through it, its predicate
 * refuses it); rows added since the graph was built (the tail) are
 * searched exactly and merged; a filtered search is exact over the
 * candidates when they are few (or the collection small), and goes
 * through the graph with the filter otherwise; any search through the
 * graph that finds fewer than min(k, eligible rows) is redone exactly. So
 * a search always returns min(k, eligible rows) results.
 *
 * Building the graph is a background job (plan on the owner, run on the
 * thread pool, finish on the owner), meanwhile exact search serves. A job
 * reads only rows below the count it was handed (rows never move) and
 * writes only its own new graph (and, when it compacts, its own new
 * vecset). Rows added while it ran are caught up by further runs of the
 * same job before it is published, so finishing never stalls the owner.
 * A build compacts when dead rows are over a third of all rows.
 *
 * Persistence: vindex_save_prepare snapshots everything needed (row keys
 * and vector hashes, the vectors of dead rows, the graph) as bytes with a
 * checksum; vindex_load accepts a file only if it is whole, of this
 * dimension and graph shape, and every row matches the records the
 * caller has now (same key, same vector; records added since are the
 * caller's to add); anything else is refused with the reason (the caller
 * then rebuilds in the background while exact search serves), never half
 * trusted.
 *
 * Not thread-safe: every function but vindex_job_run is the owner's.
 */
#ifndef VMEM_DAEMON_VINDEX_H
#define VMEM_DAEMON_VINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "statedir.h"
#include "vector.h"

#define VINDEX_KEY 16

struct vindex;
struct vindex_job;

struct vindex_opts {
	uint32_t dim;		  /* embedding_dim */
	uint32_t hnsw_min;	  /* live rows from which a graph is built */
	uint32_t exact_cands_max; /* filtered: exact up to this many */
	uint32_t tail_max;	  /* rows outside the graph before a rebuild */
	unsigned m, ef_construction, ef_search;
};

/*
 * The defaults for dim: hnsw_min 4096, exact_cands_max 8192, tail_max 256,
 * m 16, ef_construction 100, ef_search 128 (recall@10 0.99 on the
 * benchmark's 100,000 clustered vectors of 1536 dimensions; 64 gave 0.96).
 */
void vindex_opts_default(struct vindex_opts *o, uint32_t dim);

struct vindex_hit {
	uint32_t slot;
	float score;
};

/* How a search was answered. */
enum vindex_path {
	VINDEX_EXACT,	     /* exact over every live row */
	VINDEX_EXACT_CANDS,  /* exact over the candidates */
	VINDEX_GRAPH,	     /* the graph (+ tail) */
	VINDEX_GRAPH_FILTER, /* the graph with the filter (+ tail) */
	VINDEX_FALLBACK,     /* the graph came short; redone exactly */
};

struct vindex_stats {
	uint32_t live, rows, graph_rows, tail_rows;
	size_t vector_bytes, graph_bytes, map_bytes;
	bool building;
};

int vindex_new(const struct vindex_opts *o, struct vindex **out);
void vindex_free(struct vindex *vi);

/*
 * A vector made ready for the index away from it: its unit form (as
 * vector_normalise makes it), its norm, and vindex_unit_hash of the unit
 * form. A start-up makes these where it reads the vectors (on a thread
 * of its own), so that vindex_load and vindex_put_unit only copy them.
 */
struct vindex_unit {
	const float *unit; /* dim numbers, borrowed */
	float norm;
	uint64_t hash;
};

/* unit (room for dim numbers; may be v itself), *norm and *hash from the
 * raw vector v. 0, or -EINVAL with msg (not finite, zero, too long). */
int vindex_unit_make(uint32_t dim, const float *v, float *unit, float *norm,
		     uint64_t *hash, char *msg, size_t msglen);

/* The hash of a unit vector the index file keeps for each row (64 bits,
 * FNV-1a over the numbers' bits): a changed vector is a stale file. */
uint64_t vindex_unit_hash(const float *unit, uint32_t dim);

/*
 * Store slot's vector (dim numbers, raw) with its key: a new row, and the
 * slot's previous row, if any, dead. -EINVAL with msg for a bad vector
 * (the slot keeps its old one), -ENOMEM, -ENOSPC.
 */
int vindex_put(struct vindex *vi, uint32_t slot, const uint8_t key[VINDEX_KEY],
	       const float *v, char *msg, size_t msglen);

/*
 * slot's vector into v (dim floats): its unit vector times its norm, in
 * float32 (what was put, to within a unit or two in the last place);
 * false when it has none.
 */
bool vindex_vector(const struct vindex *vi, uint32_t slot, float *v);

/* Forget slot's vector. -ENOENT if it has none. */
int vindex_remove(struct vindex *vi, uint32_t slot);

/* Change ef_search (1..4096) for the searches that follow. */
void vindex_set_ef(struct vindex *vi, unsigned ef);

bool vindex_has(const struct vindex *vi, uint32_t slot);
uint32_t vindex_count(const struct vindex *vi);
void vindex_stats(const struct vindex *vi, struct vindex_stats *st);

/*
 * The k (1..VECTOR_TOPK_MAX) slots most similar to query (dim numbers,
 * raw), best first, among every slot with a vector (cands NULL) or among
 * the n_cands slots listed (distinct; slots without a vector skipped);
 * exact forces exact search. out has room for k; *n_out gets min(k,
 * eligible slots); *path (may be NULL) how it was answered. -EINVAL with
 * msg for a bad query or k.
 */
int vindex_search(const struct vindex *vi, const float *query, size_t k,
		  const uint32_t *cands, size_t n_cands, bool exact,
		  struct vindex_hit *out, size_t *n_out, enum vindex_path *path,
		  char *msg, size_t msglen);

/*
 * Owner: whether a job is due (no graph and enough rows, too many rows
 * outside the graph, or over a third of the rows dead, at any size:
 * dead rows hold memory until compacted) and, if so, a job in *out (1
 * returned). 0 when none is due or one is running already. To be asked
 * after writes; a compaction below hnsw_min leaves no graph.
 */
int vindex_job_plan(struct vindex *vi, struct vindex_job **out);

/* Thread pool: do the job's work. Blocking, CPU-bound. */
void vindex_job_run(struct vindex_job *job);

/*
 * Owner: take the job's result. 1 when it must run again (rows added
 * while it ran are to be caught up; run it again, then finish again), 0
 * when published (or dropped after a failure, see msg), and the job is
 * freed.
 */
int vindex_job_finish(struct vindex *vi, struct vindex_job *job, char *msg,
		      size_t msglen);

/* Drop a job without publishing it (at shutdown). */
void vindex_job_free(struct vindex *vi, struct vindex_job *job);

/*
 * Owner: the index as the bytes of its file (malloc'd, caller frees),
 * to be written by a pool job. Cost: the graph's size plus the vectors of
 * dead rows.
 */
int vindex_save_prepare(const struct vindex *vi, uint8_t **buf, size_t *len,
			char *msg, size_t msglen);

/*
 * Blocking (thread pool): write the file's bytes as name in the state
 * directory sd (name.tmp written, synced, renamed over name, directory
 * synced; through statedir: O_NOFOLLOW, 0600). 0 or negative errno.
 */
int vindex_write_file(const struct statedir *sd, const char *name,
		      const uint8_t *buf, size_t len, char *msg, size_t msglen);

/*
 * Blocking (thread pool): read name in sd whole into *buf (malloc'd),
 * at most max bytes, after statedir_open's checks (a regular file of ours
 * that no one else may write; never a symlink followed or a FIFO waited
 * on). -ENOENT when absent, -EFBIG over max.
 */
int vindex_read_file(const struct statedir *sd, const char *name, size_t max,
		     uint8_t **buf, size_t *len, char *msg, size_t msglen);

/* The same, for a vector already made ready (vindex_unit_make). */
int vindex_put_unit(struct vindex *vi, uint32_t slot,
		    const uint8_t key[VINDEX_KEY], const struct vindex_unit *u,
		    char *msg, size_t msglen);

/*
 * The caller's record for a key: its slot and vector, made ready
 * (vindex_unit_make; the numbers borrowed). 0, or -ENOENT when the
 * caller has no such record with a vector.
 */
typedef int (*vindex_lookup_fn)(void *ctx, const uint8_t key[VINDEX_KEY],
				uint32_t *slot, struct vindex_unit *u);

/*
 * A vindex from a file's bytes (blocking: copies every vector), checked
 * against the caller's records: n_records is how many of them have a
 * vector. Every row must name a record with the very vector it was saved
 * with; records added since the save (a crash before the next save) are
 * not in the file, and the caller adds them (vindex_put: rows past the
 * graph, searched exactly until a job takes them in). 0, or -EINVAL with
 * the reason in msg (torn, other dimension or options, stale: a row's
 * record gone or changed) and *out NULL.
 */
int vindex_load(const struct vindex_opts *o, const uint8_t *buf, size_t len,
		size_t n_records, vindex_lookup_fn lookup, void *ctx,
		struct vindex **out, char *msg, size_t msglen);

#endif

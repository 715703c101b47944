/*
 * Documents in memory: the authoritative state of the document kind
 * (kinds/document) and its queries.
 *
 * Each document has a slot (a small integer, reused after a delete) that
 * names it in the metadata filter index (find/jsonfilter: PostgreSQL
 * jsonb @> containment) and in the vector index (find/vindex: exact
 * SIMD cosine and the FAISS HNSW graph), and a place in the creation
 * order (created_at, oldest first; holes left by deletes are squeezed
 * out once they are half of it) that temporal queries walk newest first.
 * A document is one allocation holding its content and metadata text;
 * its embedding lives only in the vector index (normalised, with its
 * norm).
 *
 * Semantic search: the filter, if any, gives the candidate slots (exactly
 * the matching documents), the vector index the best min(k, candidates
 * with a vector), exact or through the graph. Temporal query: the window
 * by binary search on created_at, then newest first, filtered by the
 * matching set (a bitmap) when the filter selects fewer documents than
 * the window holds, or the matches sorted when those are fewer.
 *
 * Loop thread only (and start-up); the vector index's background jobs
 * are the kind's (vindex.h).
 */
#ifndef VMEM_DAEMON_DOCINDEX_H
#define VMEM_DAEMON_DOCINDEX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "idmap.h"
#include "jsonfilter.h"
#include "localrec.h"
#include "vindex.h"

struct doc {
	uint8_t id[REC_KEY]; /* first: the idmap's key */
	uint32_t slot;
	uint32_t content_len, meta_len;
	int64_t created_at, updated_at;
	char data[]; /* content, then metadata */
};

struct docindex {
	uint32_t dim;
	struct idmap byid;
	struct doc **slots; /* slot -> document, NULL when free */
	uint32_t n_slots, cap_slots;
	uint32_t *free_slots;
	uint32_t n_free, cap_free;
	/* Creation order: slots and their created_at; UINT32_MAX: a hole. */
	uint32_t *t_slot;
	int64_t *t_at;
	size_t t_n, t_cap, t_holes;
	struct jfindex *jf;
	struct vindex *vi;
	size_t n_docs, bytes;
};

/* An empty index of dimension dim with vector options o. 0 or -ENOMEM. */
int docindex_init(struct docindex *ix, const struct vindex_opts *o);
void docindex_done(struct docindex *ix);

struct doc *docindex_get(const struct docindex *ix, const uint8_t *id);

/*
 * Put a document's record (copied): new, or replacing the one with that
 * id (same slot; its vector stays). 0, -ENOMEM, or -EINVAL when its
 * metadata is not the JSON text of an object (nothing changed).
 */
int docindex_put(struct docindex *ix, const uint8_t *id,
		 const struct rec_document *r);

/* Remove a document and its vector. false if none. */
bool docindex_del(struct docindex *ix, const uint8_t *id);

/* Set or remove (v NULL) the vector of the document with that id. 0,
 * -ENOENT (no such document), or vindex_put's errors with msg. */
int docindex_set_vector(struct docindex *ix, const uint8_t *id, const float *v,
			char *msg, size_t n);

bool docindex_has_vector(const struct docindex *ix, const struct doc *d);

/* Documents with a vector. */
uint32_t docindex_vectors(const struct docindex *ix);

/* The document's vector as float32 numbers (the normalised vector times
 * its norm) into v (dim floats); false when it has none. */
bool docindex_vector(const struct docindex *ix, const struct doc *d, float *v);

/*
 * The slots of the documents whose metadata contains filter (ascending,
 * malloc'd in *out, caller frees; NULL when none). 0, -EINVAL (filter
 * beyond jsonfilter's limits), -ENOMEM.
 */
int docindex_match(const struct docindex *ix, const json_t *filter,
		   uint32_t **out, size_t *n);

struct doc_hit {
	const struct doc *doc;
	float score;
};

/*
 * The k (1..1000) documents most similar to query (dim numbers) by
 * cosine, best first, among all with a vector or those matching filter
 * (non-NULL); exact forces exact search. out has room for k; *n gets
 * min(k, eligible documents); *path (may be NULL) says how. 0, or -EINVAL
 * with msg (a bad query or filter), -ENOMEM.
 */
int docindex_search(const struct docindex *ix, const float *query, size_t k,
		    const json_t *filter, bool exact, struct doc_hit *out,
		    size_t *n, enum vindex_path *path, char *msg, size_t msgn);

/*
 * The documents created in [start, end] matching filter (NULL: all),
 * newest first, at most limit of them, each handed to fn (which may stop
 * the walk by returning false). 0, -EINVAL (filter), -ENOMEM.
 */
int docindex_between(const struct docindex *ix, int64_t start, int64_t end,
		     const json_t *filter, size_t limit,
		     bool (*fn)(void *ctx, const struct doc *d), void *ctx);

/*
 * The wire form of a document: {id, content, metadata, created_at,
 * updated_at, has_embedding[, score][, embedding]}; score when
 * with_score, the embedding (its float32 numbers) when with_embedding
 * and it has one. false on allocation failure.
 */
bool doc_json(struct buf *b, const struct docindex *ix, const struct doc *d,
	      bool with_score, float score, bool with_embedding);

/* An upper bound of doc_json's bytes for d. */
size_t doc_json_max(const struct docindex *ix, const struct doc *d,
		    bool with_embedding);

/* Vectors, graph, metadata postings and records, in bytes. */
size_t docindex_memory(const struct docindex *ix);

#endif

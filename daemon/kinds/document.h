/*
 * Documents as a record kind (kind.h): local, never committed. A write
 * locks its document's id (a new document's is fresh and needs none), is
 * validated against the index (find/docindex), logged as absolute
 * operations (localrec.h: the document record, and its embedding as a
 * record of its own so that a change of content or metadata never
 * rewrites the vector), applied, and materialised into two segment
 * stores under <gitdir>/vmem/documents: docs/ and vectors/.
 *
 * The vector index is persisted in documents/vindex (vindex.h's file)
 * after each graph build and at a stop, and whenever it is due (a build
 * published, rows removed or replaced since the last save) as part of a
 * writer pass. At start-up it is loaded and checked against the
 * documents; rows added since its save are added as the tail, and a file
 * that is missing, torn or stale is reported (health, log) and the index
 * rebuilt in the background while exact search serves.
 *
 * The dimension of embeddings is the tree's (embedding_dim), recorded in
 * documents/settings: a start with another dimension on a tree holding
 * documents is refused, never mixed.
 *
 * Start-up: documents_open reads the segments (keeping the raw vectors
 * aside until load), the log replays over them, load builds the vector
 * index. Loop thread only, but for the writer functions the store runs
 * on its pool and the graph builds (vindex_job_run).
 */
#ifndef VMEM_DAEMON_KIND_DOCUMENT_H
#define VMEM_DAEMON_KIND_DOCUMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "docindex.h"
#include "idmap.h"
#include "kind.h"
#include "localseg.h"
#include "store.h"

#define DOCUMENT_LOG_TAG 'D'
#define DOCUMENT_DIR	 "documents"
#define DOCUMENT_INDEX	 "vindex"

extern const struct kind document_kind;

/* The raw vectors read at start-up, until load hands them to the index. */
struct docboot {
	struct idmap map; /* id -> struct bootvec */
	float *v;	  /* rows of dim floats: each vector made ready for
			     the index (vindex_unit_make) as it is read */
	float *norm;	  /* per row */
	uint64_t *hash;	  /* per row */
	size_t rows, cap;
};

struct documents {
	struct store_kind sk; /* its place in the store */
	struct docindex ix;   /* the authoritative state (read it freely) */
	struct localseg seg;
	struct vindex_opts vopts;
	bool booting; /* before load: vectors go to boot */
	struct docboot boot;
	uint64_t load_records;

	/* The graph build running (one at a time). */
	struct vindex_job *job;
	uv_work_t job_req;
	bool stopping; /* no new builds; save what changed */

	/* Persistence of the vector index. */
	uint64_t changes;	 /* rows added or removed, builds published */
	uint64_t saved_changes;	 /* changes as of the last save */
	bool removed_since_save; /* a row removed or replaced */
	bool published_since_save;
	bool saving; /* a writer pass carries a save */
	uint64_t saves;
	uint64_t last_save_ms; /* uv_now of the last save's end */
	uv_timer_t save_timer; /* a save due later (at most every 30 s) */
	bool save_timer_open;
	/* What the last start found of the index file, and the last save
	 * or build error. */
	char index_state[64];
	char index_note[256];
	char last_error[256];
	size_t n_orphans; /* embeddings without a document, dropped */
};

enum doc_op {
	DOC_STORE,
	DOC_UPDATE,
	DOC_DELETE,
};

/*
 * A document write, owned by the caller, zeroed, then filled: w.kind,
 * w's request fields, op; id (update, delete; a store's is assigned) and
 * key (its text, uuid_format: the lock's key); for a store or an update,
 * content and meta (has_* for an update: which are given), embedding (dim
 * floats) or, for an update, clear_embedding. Everything borrowed is the
 * caller's until done.
 */
struct doc_write {
	struct store_write w;

	/* Request. */
	enum doc_op op;
	uint8_t id[REC_KEY];
	char key[40];
	bool has_content, has_meta;
	const char *content;
	size_t content_len;
	const char *meta;
	size_t meta_len;
	const float *embedding;
	bool clear_embedding;

	/* Result, valid during done(). */
	const struct doc *d; /* stored or updated; NULL: none */
	bool existed;	     /* an update or a delete found it */

	/* Private to the kind. */
	struct buf payload;
};

enum doc_change_what {
	DOC_STORED,
	DOC_UPDATED,
	DOC_DELETED,
};

/* The detail of a document's kind_change, valid during the call. */
struct doc_change {
	enum doc_change_what what;
	const uint8_t *id;
	const struct doc *d; /* NULL for a deletion */
};

/*
 * Read documents/ of state (blocking, at start-up, before store_open),
 * for embeddings of dim numbers; refuses (-EINVAL, msg) a dimension
 * other than the one the tree's documents were stored with. 0 or -errno
 * with msg; documents_done cleans up either way.
 */
int documents_open(struct documents *ds, uv_loop_t *loop,
		   const struct statedir *state, uint32_t dim, char *msg,
		   size_t msglen);

/* A stop begins: no new graph builds; the next writer pass saves the
 * index if it changed since its last save. */
void documents_stop(struct documents *ds);

/* Release everything, after store_close and the loop's last run. */
void documents_done(struct documents *ds);

#endif

/*
 * The authoritative in-memory index: coordinate -> record. The coordinate
 * space is small and dense (max_x * 5 * 4 slots), so the index is a flat
 * array addressed by coordinate, which also iterates in (x, y, z) order.
 * A record keeps the decision's compact JSON, exactly what `get` returns,
 * so reads never serialise. Loop thread only.
 */
#ifndef VMEM_DAEMON_INDEX_H
#define VMEM_DAEMON_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "protocol/decision.h"
#include "search.h"

struct record {
	struct coord coord;
	int64_t version;
	size_t content_off; /* the escaped content string inside json */
	size_t content_esc_len;
	size_t json_len;
	char json[]; /* compact decision JSON, NUL-terminated */
};

struct index {
	struct record **slots;
	size_t n_slots;
	size_t count;
	int max_x;
	size_t content_bytes;	     /* of every decision held */
	struct search_index *search; /* kept in step with slots */
	struct buf scratch;	     /* unescaped content for search_add */
	struct buf text;	     /* unescaped content for index_text */
};

/* A new record holding d's compact JSON, or NULL on allocation failure. */
struct record *record_new(const struct decision *d);

/* A new record holding json (len bytes, a compact decision as
 * decision_dump_compact writes it, copied) for coordinate c at version,
 * or NULL when it has no content member, holds a NUL, or memory runs
 * out. The JSON is not checked: only for text this daemon wrote. */
struct record *record_from_compact(const struct coord *c, int64_t version,
				   const char *json, size_t len);
void record_free(struct record *r);

/* 0 or -ENOMEM. */
int index_init(struct index *ix, int max_x);
void index_done(struct index *ix);

/* Slot number of a valid coordinate (for per-coordinate side tables). */
size_t index_slot(const struct index *ix, const struct coord *c);

/* The coordinate of a slot (the inverse of index_slot). */
struct coord index_coord(const struct index *ix, size_t slot);

/* The record at c, borrowed, or NULL. c must be valid. */
struct record *index_get(const struct index *ix, const struct coord *c);

/*
 * Store rec at its coordinate (taking ownership), freeing any old one, and
 * index its content for search. Returns 0, or -ENOMEM when the search
 * index could not take it (the record is stored all the same).
 */
int index_put(struct index *ix, struct record *rec);

/* Remove and free the record at c. Returns 1 if there was one, else 0. */
int index_remove(struct index *ix, const struct coord *c);

/* The content of a record, unescaped into b (reset first). 0 or -errno. */
int record_content(const struct record *r, struct buf *b);

/* search_text_fn over an index (ctx is the index): the slot's content. */
int index_text(void *ctx, size_t slot, const char **text, size_t *len);

#endif

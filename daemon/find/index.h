/*
 * The authoritative in-memory index: coordinate -> record. The coordinate
 * space is small and dense (max_x * 5 * 4 slots), so the index is a flat
 * array addressed by coordinate, which also iterates in (x, y, z) order.
 * A record keeps the decision's compact JSON, exactly what `get` returns,
 * so reads never serialise. Records are immutable and counted: a scan (a
 * read served in slices while writes go on) keeps the records its slots
 * held when it began.
 *
 * The search index follows the records a little later: a put or a remove
 * changes the record at once and lists the slot as pending; index_catch_up
 * brings the postings up to date, a slice at a time, so a big write (a
 * store_many of a megabyte) never holds the loop for its indexing. A
 * search judges the pending slots on their text (index_pending_next).
 * Loop thread only.
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
	uint32_t refs; /* the index's, or its creator's, and the scans' */
	int64_t version;
	uint32_t content_off; /* the escaped content string inside json */
	uint32_t content_esc_len;
	size_t json_len;
	char json[]; /* compact decision JSON, NUL-terminated */
};

struct index_scan;

/* Slots with a record each (or NULL), ascending by slot: a scan's kept
 * records, the slots waiting for the search index. The records are
 * referenced. */
struct slotmap {
	uint32_t *slot;
	struct record **rec;
	size_t n, cap;
};

struct index {
	struct record **slots;
	size_t n_slots;
	size_t count;
	int max_x;
	size_t content_bytes;	     /* of every decision held */
	size_t record_bytes;	     /* their records, headers included */
	size_t by_layer[VMEM_MAX_Z]; /* decisions held on each z */
	struct search_index *search; /* follows slots (pending aside) */
	struct buf scratch;	     /* unescaped content for search_add */
	struct buf text;	     /* unescaped content for index_text */
	struct index_scan *scans;    /* open scans */
	/* Slots whose postings are not their record's yet, with the record
	 * whose text the postings hold (NULL: none). */
	struct slotmap pending;
	/* Told when a slot becomes pending while none was (to run
	 * index_catch_up soon). */
	void (*on_pending)(void *ctx);
	void *on_pending_ctx;
};

/*
 * A reader that sees the index as it was when the scan began, for a read
 * served in slices while writes go on: before a slot >= from changes, the
 * record it held then (or its absence) is kept here, once. Embedded in its
 * owner; index_scan_end before the index goes.
 */
struct index_scan {
	struct index *ix;
	size_t from;	     /* slots below it are not asked for any more */
	struct slotmap kept; /* changed slots: what they held */
	bool failed;	     /* out of memory keeping one: the scan is wrong */
	struct buf text;     /* unescaped content for index_scan_old_text */
	struct index_scan *prev, *next;
};

/* A new record holding d's compact JSON (one reference, the caller's), or
 * NULL on allocation failure. */
struct record *record_new(const struct decision *d);

/* Drop a reference (the creator's, or taken with record_ref); the record
 * goes with the last one. NULL-safe. */
void record_free(struct record *r);
void record_ref(struct record *r);

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
 * Store rec at its coordinate (taking the caller's reference), dropping
 * the old one; its content goes to the search index at the next catch-up.
 * Returns 0.
 */
int index_put(struct index *ix, struct record *rec);

/* Remove and free the record at c. Returns 1 if there was one, else 0. */
int index_remove(struct index *ix, const struct coord *c);

/* The content of a record, unescaped into b (reset first). 0 or -errno. */
int record_content(const struct record *r, struct buf *b);

/* search_text_fn over an index (ctx is the index): the slot's content. */
int index_text(void *ctx, size_t slot, const char **text, size_t *len);

/* Bring the postings of pending slots up to date, in slot order, until
 * none is left or budget_ns has passed; the number still pending. A slot
 * the search index cannot take (out of memory) stays pending: searched on
 * its text. */
size_t index_catch_up(struct index *ix, uint64_t budget_ns);

/* The smallest pending slot >= from, or SIZE_MAX. */
size_t index_pending_next(const struct index *ix, size_t from);

/* Begin a scan of ix from slot 0 (sc is the caller's, embedded). */
void index_scan_begin(struct index *ix, struct index_scan *sc);

/* End it, dropping what it kept. Idempotent. */
void index_scan_end(struct index_scan *sc);

/* The record slot held when the scan began (borrowed: valid until the
 * scan ends or passes the slot), or NULL. slot >= sc->from. */
const struct record *index_scan_get(const struct index_scan *sc, size_t slot);

/* Slots below slot will not be asked for again: keep nothing for them. */
void index_scan_pass(struct index_scan *sc, size_t slot);

/* The smallest slot >= from changed since the scan began, or SIZE_MAX. */
size_t index_scan_next_changed(const struct index_scan *sc, size_t from);

/* The text a slot held when the scan began, unescaped (borrowed, valid
 * until the next call): 0, -ENOENT when it held none, or -errno. */
int index_scan_old_text(struct index_scan *sc, size_t slot, const char **text,
			size_t *len);

/* search_changes over a scan (ctx is the scan): the slots to judge on
 * their text, those changed since it began and those whose postings are
 * pending, with the text they had when it began. */
size_t index_scan_changes_next(void *ctx, size_t from);
int index_scan_changes_text(void *ctx, size_t slot, const char **text,
			    size_t *len);

#endif

/*
 * Metadata filters with PostgreSQL's jsonb containment (`@>`) semantics,
 * and an index that finds the records a filter can match without looking
 * at the others.
 *
 * Containment, as PostgreSQL documents it (section 8.14.3) and implements
 * it (JsonbDeepContains): an object contains another when every key of the
 * other is present with a value that contains the other's value; an array
 * contains another when every element of the other is contained in some
 * element of it (order and duplicates do not matter; a scalar element
 * matches an equal scalar element, a container element a container element
 * that contains it); scalars contain equal scalars of the same type
 * (numbers by value, so 1 and 1.0 are equal, but 1, "1" and true are all
 * different). Structure must match: {"foo": {"bar": "baz"}} does not
 * contain {"bar": "baz"}, and a scalar nested in an object never matches
 * an array there. The one exception, at the top level only: an array
 * contains a scalar equal to one of its elements.
 *
 * The index keeps postings: for every scalar in a record, the key (path,
 * value) with the path a sequence of object keys and "array element"
 * steps, and for every container the key (path, its type); each posting
 * is the sorted list of the record slots holding it. A filter's leaves
 * are the postings a match must have, so the candidates are their
 * intersection (shortest list first, others searched by galloping), and
 * for filters without container elements inside arrays the candidates
 * are exactly the matches; other filters are confirmed with
 * jsonb_contains on each candidate.
 *
 * Not thread-safe; the owner serialises calls.
 */
#ifndef VMEM_DAEMON_JSONFILTER_H
#define VMEM_DAEMON_JSONFILTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on a filter and on an indexed record. */
#define JSONFILTER_DEPTH_MAX	   32
#define JSONFILTER_FILTER_NODES	   1024
#define JSONFILTER_RECORD_POSTINGS 8192

/* Whether doc @> filter (borrowed; neither is changed). */
bool jsonb_contains(const json_t *doc, const json_t *filter);

/*
 * Whether filter is within the limits (depth, nodes). 0, or -EINVAL
 * with the reason in msg.
 */
int jsonfilter_check(const json_t *filter, char *msg, size_t msglen);

struct jfindex;

struct jfindex *jfindex_new(void);
void jfindex_free(struct jfindex *ix);

/*
 * Index a record's value (usually its metadata object) under slot. A
 * slot is indexed at most once at a time (remove it before adding it
 * again). -E2BIG when the value is deeper or has more postings than the
 * limits (nothing indexed), -ENOMEM (nothing indexed).
 */
int jfindex_add(struct jfindex *ix, uint32_t slot, const json_t *value);

/* Unindex: the same value that was added under slot. */
void jfindex_remove(struct jfindex *ix, uint32_t slot, const json_t *value);

/* The record value of a slot, borrowed (for confirming candidates). */
typedef const json_t *(*jfindex_value_fn)(void *ctx, uint32_t slot);

/*
 * The slots whose value contains filter, ascending, in *out (malloc'd,
 * caller frees; NULL when none) and their number in *n. value_fn is
 * called only for candidates that need confirming. -EINVAL for a filter
 * beyond the limits, -ENOMEM.
 */
int jfindex_match(const struct jfindex *ix, const json_t *filter,
		  jfindex_value_fn value_fn, void *ctx, uint32_t **out,
		  size_t *n);

/*
 * The candidates only: a superset of the matches, ascending, and in
 * *exact whether it is exactly the matches.
 */
int jfindex_candidates(const struct jfindex *ix, const json_t *filter,
		       uint32_t **out, size_t *n, bool *exact);

/* Distinct postings, and bytes held. */
size_t jfindex_postings(const struct jfindex *ix);
size_t jfindex_memory(const struct jfindex *ix);

#endif

/*
 * Structured reads over the index: axis ranges and the partial order of
 * (issue, stage). Both walk the flat index in slot order, which is
 * (x, y, z) order, touching only the slots inside the query's bounds. A
 * walk keeps only where it stands, so a big read can be served a slice at
 * a time (through an index scan, which keeps what it must read as it was
 * when the read began). Loop thread only.
 */
#ifndef VMEM_DAEMON_QUERY_H
#define VMEM_DAEMON_QUERY_H

#include <stdbool.h>
#include <stddef.h>

#include "index.h"

/* An inclusive range of one axis. */
struct axis_range {
	int min, max;
};

/* Where a walk stands: slots [slot, end) are left, filtered on y and z,
 * until limit records (0: no limit) were found. */
struct query_walk {
	size_t slot, end;
	int y0, y1, z0, z1;
	size_t limit, n;
};

/*
 * A walk of the records with x, y, z inside the ranges (bounds outside an
 * axis domain simply match nothing there), strictly after `after` in
 * (x, y, z) order when it is not NULL, at most limit of them (0: no
 * limit).
 */
void query_walk_range(struct query_walk *w, const struct index *ix,
		      const struct axis_range *x, const struct axis_range *y,
		      const struct axis_range *z, const struct coord *after,
		      size_t limit);

/* A walk of the records with x < x_threshold, or x == x_threshold and
 * y < y_threshold, on layer z_filter (0: every layer), strictly after
 * `after` in (x, y, z) order when it is not NULL, at most limit of them
 * (0: no limit). */
void query_walk_before(struct query_walk *w, const struct index *ix,
		       int x_threshold, int y_threshold, int z_filter,
		       const struct coord *after, size_t limit);

/*
 * The walk's next record, read through sc (NULL: the index as it is now),
 * borrowed; NULL when the walk is over, or when *budget slots were looked
 * at first (then *budget is 0 and the walk goes on from there).
 */
const struct record *query_walk_next(struct query_walk *w,
				     const struct index *ix,
				     const struct index_scan *sc,
				     size_t *budget);

/* Whether the walk is over. */
bool query_walk_done(const struct query_walk *w);

/*
 * The records of a whole walk, from the index as it is: *out is a
 * malloc'd array (caller frees) of *n borrowed records, valid until the
 * index next changes. 0 or -ENOMEM.
 */
int query_range(const struct index *ix, const struct axis_range *x,
		const struct axis_range *y, const struct axis_range *z,
		const struct coord *after, size_t limit,
		const struct record ***out, size_t *n);
int query_before(const struct index *ix, int x_threshold, int y_threshold,
		 int z_filter, const struct record ***out, size_t *n);
int query_before_page(const struct index *ix, int x_threshold, int y_threshold,
		      int z_filter, const struct coord *after, size_t limit,
		      const struct record ***out, size_t *n);

#endif

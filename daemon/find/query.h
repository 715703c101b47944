/*
 * Structured reads over the index: axis ranges and the partial order of
 * (issue, stage). Both walk the flat index in slot order, which is
 * (x, y, z) order, touching only the slots inside the query's box. Results
 * are borrowed records, valid until the index next changes. Loop thread
 * only.
 */
#ifndef VMEM_DAEMON_QUERY_H
#define VMEM_DAEMON_QUERY_H

#include <stddef.h>

#include "index.h"

/* An inclusive range of one axis. */
struct axis_range {
	int min, max;
};

/*
 * Records with x, y, z inside the ranges (bounds outside an axis domain
 * simply match nothing there), strictly after `after` in (x, y, z) order
 * when it is not NULL, at most limit of them (0: no limit). *out is a
 * malloc'd array (caller frees) of *n borrowed records. 0 or -ENOMEM.
 */
int query_range(const struct index *ix, const struct axis_range *x,
		const struct axis_range *y, const struct axis_range *z,
		const struct coord *after, size_t limit,
		const struct record ***out, size_t *n);

/*
 * Records with x < x_threshold, or x == x_threshold and y < y_threshold,
 * on layer z_filter (0: every layer), in (x, y, z) order.
 */
int query_before(const struct index *ix, int x_threshold, int y_threshold,
		 int z_filter, const struct record ***out, size_t *n);

/* query_before, strictly after `after` in (x, y, z) order when it is not
 * NULL, at most limit records (0: no limit). */
int query_before_page(const struct index *ix, int x_threshold, int y_threshold,
		      int z_filter, const struct coord *after, size_t limit,
		      const struct record ***out, size_t *n);

#endif

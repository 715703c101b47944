/* Range and partial-order walks over the coordinate-addressed index. */
#include "query.h"

#include <errno.h>
#include <stdlib.h>

/* Clamp a range to [1, hi]; false when nothing is left. */
static bool clamp(const struct axis_range *r, int hi, int *lo_out, int *hi_out)
{
	*lo_out = r->min < 1 ? 1 : r->min;
	*hi_out = r->max > hi ? hi : r->max;
	return *lo_out <= *hi_out;
}

static size_t slot_of(const struct index *ix, int x, int y, int z)
{
	struct coord c = {x, y, z};

	return index_slot(ix, &c);
}

void query_walk_range(struct query_walk *w, const struct index *ix,
		      const struct axis_range *x, const struct axis_range *y,
		      const struct axis_range *z, const struct coord *after,
		      size_t limit)
{
	int x0, x1;

	w->slot = w->end = 0;
	w->limit = limit;
	w->n = 0;
	if (!clamp(x, ix->max_x, &x0, &x1) ||
	    !clamp(y, VMEM_MAX_Y, &w->y0, &w->y1) ||
	    !clamp(z, VMEM_MAX_Z, &w->z0, &w->z1))
		return;
	/* Slot order is (x, y, z) order: x bounds the slots. */
	w->slot = slot_of(ix, x0, 1, 1);
	w->end = slot_of(ix, x1, VMEM_MAX_Y, VMEM_MAX_Z) + 1;
	if (after && coord_cmp(after, &(struct coord){x0, 1, 1}) >= 0) {
		if (after->x > x1)
			w->slot = w->end;
		else
			w->slot = index_slot(ix, after) + 1;
	}
}

void query_walk_before(struct query_walk *w, const struct index *ix,
		       int x_threshold, int y_threshold, int z_filter,
		       const struct coord *after, size_t limit)
{
	w->limit = limit;
	w->n = 0;
	w->y0 = 1;
	w->y1 = VMEM_MAX_Y;
	w->z0 = z_filter ? z_filter : 1;
	w->z1 = z_filter ? z_filter : VMEM_MAX_Z;
	/* x < xt, or x == xt and y < yt: exactly the slots before
	 * (xt, yt, 1). */
	w->slot = 0;
	if (x_threshold > ix->max_x)
		w->end = ix->n_slots;
	else
		w->end = ((size_t)(x_threshold - 1) * VMEM_MAX_Y +
			  (size_t)(y_threshold - 1)) *
			 VMEM_MAX_Z;
	if (w->end > ix->n_slots)
		w->end = ix->n_slots;
	if (after)
		w->slot = index_slot(ix, after) + 1;
}

bool query_walk_done(const struct query_walk *w)
{
	return w->slot >= w->end || (w->limit && w->n >= w->limit);
}

const struct record *query_walk_next(struct query_walk *w,
				     const struct index *ix,
				     const struct index_scan *sc,
				     size_t *budget)
{
	while (!query_walk_done(w)) {
		size_t s = w->slot;
		int z = (int)(s % VMEM_MAX_Z) + 1;
		int y = (int)(s / VMEM_MAX_Z % VMEM_MAX_Y) + 1;
		const struct record *r = NULL;

		if (*budget == 0)
			return NULL;
		(*budget)--;
		w->slot++;
		if (y < w->y0 || y > w->y1 || z < w->z0 || z > w->z1)
			continue;
		r = sc ? index_scan_get(sc, s) : ix->slots[s];
		if (r) {
			w->n++;
			return r;
		}
	}
	return NULL;
}

/* Every record of a walk, from the index as it is. */
static int collect(const struct index *ix, struct query_walk *w,
		   const struct record ***out, size_t *n)
{
	const struct record **v = NULL, *r;
	size_t cap = 0, budget = SIZE_MAX;

	*out = NULL;
	*n = 0;
	while ((r = query_walk_next(w, ix, NULL, &budget))) {
		if (*n == cap) {
			const struct record **nv;

			cap = cap ? cap * 2 : 64;
			nv = realloc(v, cap * sizeof(*nv));
			if (!nv) {
				free(v);
				*n = 0;
				return -ENOMEM;
			}
			v = nv;
		}
		v[(*n)++] = r;
	}
	*out = v;
	return 0;
}

int query_range(const struct index *ix, const struct axis_range *x,
		const struct axis_range *y, const struct axis_range *z,
		const struct coord *after, size_t limit,
		const struct record ***out, size_t *n)
{
	struct query_walk w;

	query_walk_range(&w, ix, x, y, z, after, limit);
	return collect(ix, &w, out, n);
}

int query_before(const struct index *ix, int x_threshold, int y_threshold,
		 int z_filter, const struct record ***out, size_t *n)
{
	return query_before_page(ix, x_threshold, y_threshold, z_filter, NULL,
				 0, out, n);
}

int query_before_page(const struct index *ix, int x_threshold, int y_threshold,
		      int z_filter, const struct coord *after, size_t limit,
		      const struct record ***out, size_t *n)
{
	struct query_walk w;

	query_walk_before(&w, ix, x_threshold, y_threshold, z_filter, after,
			  limit);
	return collect(ix, &w, out, n);
}

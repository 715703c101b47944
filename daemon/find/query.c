/* Range and partial-order walks over the coordinate-addressed index. */
#include "query.h"

#include <errno.h>
#include <stdlib.h>

struct results {
	const struct record **v;
	size_t n, cap;
};

static int push(struct results *r, const struct record *rec)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		const struct record **v = realloc(r->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n++] = rec;
	return 0;
}

/* Clamp a range to [1, hi]; false when nothing is left. */
static bool clamp(const struct axis_range *r, int hi, int *lo_out, int *hi_out)
{
	*lo_out = r->min < 1 ? 1 : r->min;
	*hi_out = r->max > hi ? hi : r->max;
	return *lo_out <= *hi_out;
}

int query_range(const struct index *ix, const struct axis_range *x,
		const struct axis_range *y, const struct axis_range *z,
		const struct coord *after, size_t limit,
		const struct record ***out, size_t *n)
{
	struct results r = {0};
	int x0, x1, y0, y1, z0, z1;

	*out = NULL;
	*n = 0;
	if (!clamp(x, ix->max_x, &x0, &x1) || !clamp(y, VMEM_MAX_Y, &y0, &y1) ||
	    !clamp(z, VMEM_MAX_Z, &z0, &z1))
		return 0;
	for (int cx = x0; cx <= x1; cx++) {
		if (after && cx < after->x)
			continue;
		for (int cy = y0; cy <= y1; cy++) {
			for (int cz = z0; cz <= z1; cz++) {
				struct coord c = {cx, cy, cz};
				const struct record *rec;

				if (after && coord_cmp(&c, after) <= 0)
					continue;
				rec = index_get(ix, &c);
				if (!rec)
					continue;
				if (push(&r, rec) < 0) {
					free(r.v);
					return -ENOMEM;
				}
				if (limit && r.n == limit)
					goto done;
			}
		}
	}
done:
	*out = r.v;
	*n = r.n;
	return 0;
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
	struct results r = {0};
	int xmax = x_threshold > ix->max_x ? ix->max_x : x_threshold;

	*out = NULL;
	*n = 0;
	for (int cx = after ? after->x : 1; cx <= xmax; cx++) {
		int ymax = cx < x_threshold ? VMEM_MAX_Y : y_threshold - 1;

		for (int cy = 1; cy <= ymax && cy <= VMEM_MAX_Y; cy++) {
			for (int cz = 1; cz <= VMEM_MAX_Z; cz++) {
				struct coord c = {cx, cy, cz};
				const struct record *rec;

				if (z_filter && cz != z_filter)
					continue;
				if (after && coord_cmp(&c, after) <= 0)
					continue;
				if (limit && r.n == limit)
					goto done;
				rec = index_get(ix, &c);
				if (rec && push(&r, rec) < 0) {
					free(r.v);
					return -ENOMEM;
				}
			}
		}
	}
done:
	*out = r.v;
	*n = r.n;
	return 0;
}

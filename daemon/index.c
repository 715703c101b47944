/*
 * Flat coordinate-addressed index. Slot of (x, y, z) is
 * ((x - 1) * VMEM_MAX_Y + (y - 1)) * VMEM_MAX_Z + (z - 1).
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct record *record_new(const struct decision *d)
{
	struct record *r;
	size_t len;
	char *json = decision_dump_compact(d, &len);

	if (!json)
		return NULL;
	r = malloc(sizeof(*r) + len + 1);
	if (r) {
		r->coord = d->coord;
		r->version = d->version;
		r->json_len = len;
		memcpy(r->json, json, len + 1);
	}
	free(json);
	return r;
}

void record_free(struct record *r)
{
	free(r);
}

int index_init(struct index *ix, int max_x)
{
	ix->max_x = max_x;
	ix->count = 0;
	ix->n_slots = (size_t)max_x * VMEM_MAX_Y * VMEM_MAX_Z;
	ix->slots = calloc(ix->n_slots, sizeof(*ix->slots));
	return ix->slots ? 0 : -ENOMEM;
}

void index_done(struct index *ix)
{
	if (!ix->slots)
		return;
	for (size_t i = 0; i < ix->n_slots; i++)
		record_free(ix->slots[i]);
	free(ix->slots);
	ix->slots = NULL;
	ix->count = 0;
}

size_t index_slot(const struct index *ix, const struct coord *c)
{
	(void)ix;
	return ((size_t)(c->x - 1) * VMEM_MAX_Y + (size_t)(c->y - 1)) *
		       VMEM_MAX_Z +
	       (size_t)(c->z - 1);
}

struct record *index_get(const struct index *ix, const struct coord *c)
{
	return ix->slots[index_slot(ix, c)];
}

void index_put(struct index *ix, struct record *rec)
{
	struct record **slot = &ix->slots[index_slot(ix, &rec->coord)];

	if (*slot)
		record_free(*slot);
	else
		ix->count++;
	*slot = rec;
}

int index_remove(struct index *ix, const struct coord *c)
{
	struct record **slot = &ix->slots[index_slot(ix, c)];

	if (!*slot)
		return 0;
	record_free(*slot);
	*slot = NULL;
	ix->count--;
	return 1;
}

/* See idmap.h. */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t hash(const uint8_t *k)
{
	uint64_t a, b;

	memcpy(&a, k, 8);
	memcpy(&b, k + 8, 8);
	a ^= b * 0x9e3779b97f4a7c15ull;
	a = (a ^ (a >> 33)) * 0xff51afd7ed558ccdull;
	a = (a ^ (a >> 33)) * 0xc4ceb9fe1a85ec53ull;
	return (size_t)(a ^ (a >> 33));
}

void idmap_init(struct idmap *m)
{
	m->tab = NULL;
	m->cap = m->n = 0;
}

void idmap_done(struct idmap *m)
{
	free(m->tab);
	idmap_init(m);
}

/* The slot holding id, or the empty slot where it would go. */
static size_t find(const struct idmap *m, const uint8_t *id)
{
	size_t i = hash(id) & (m->cap - 1);

	while (m->tab[i] && memcmp(m->tab[i], id, IDMAP_KEY) != 0)
		i = (i + 1) & (m->cap - 1);
	return i;
}

void *idmap_get(const struct idmap *m, const uint8_t *id)
{
	if (!m->n)
		return NULL;
	return m->tab[find(m, id)];
}

static int resize(struct idmap *m, size_t cap)
{
	void **old = m->tab;
	size_t oldcap = m->cap;

	m->tab = calloc(cap, sizeof(*m->tab));
	if (!m->tab) {
		m->tab = old;
		return -ENOMEM;
	}
	m->cap = cap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i])
			m->tab[find(m, old[i])] = old[i];
	free(old);
	return 0;
}

int idmap_reserve(struct idmap *m, size_t n)
{
	size_t cap = m->cap ? m->cap : 64;

	while (n * 2 > cap) {
		if (cap > ((size_t)-1) / (4 * sizeof(void *)))
			return -ENOMEM;
		cap *= 2;
	}
	return cap == m->cap ? 0 : resize(m, cap);
}

int idmap_put(struct idmap *m, void *rec, void **old)
{
	size_t i;
	int ret = idmap_reserve(m, m->n + 1);

	if (old)
		*old = NULL;
	if (ret < 0)
		return ret;
	i = find(m, rec);
	if (m->tab[i]) {
		if (old)
			*old = m->tab[i];
	} else {
		m->n++;
	}
	m->tab[i] = rec;
	return 0;
}

void *idmap_del(struct idmap *m, const uint8_t *id)
{
	size_t i, j, home;
	void *rec;

	if (!m->n)
		return NULL;
	i = find(m, id);
	rec = m->tab[i];
	if (!rec)
		return NULL;
	/* Backward shift: move later members of the run into the hole
	 * unless their home lies cyclically in (i, j]. */
	for (j = i;;) {
		j = (j + 1) & (m->cap - 1);
		if (!m->tab[j])
			break;
		home = hash(m->tab[j]) & (m->cap - 1);
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && home <= i && home > j)) {
			m->tab[i] = m->tab[j];
			i = j;
		}
	}
	m->tab[i] = NULL;
	m->n--;
	return rec;
}

size_t idmap_memory(const struct idmap *m)
{
	return m->cap * sizeof(*m->tab);
}

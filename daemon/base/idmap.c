/* See idmap.h. */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

static uint64_t hash(const uint8_t *k)
{
	uint64_t a, b;

	memcpy(&a, k, 8);
	memcpy(&b, k + 8, 8);
	a ^= b * 0x9e3779b97f4a7c15ull;
	a = (a ^ (a >> 33)) * 0xff51afd7ed558ccdull;
	a = (a ^ (a >> 33)) * 0xc4ceb9fe1a85ec53ull;
	return a ^ (a >> 33);
}

/* The tag of an id: its home slot is tag & (cap - 1) at every capacity
 * up to 2^31 (the top bit only marks the slot used). */
static uint32_t tag_of(const uint8_t *id)
{
	return (uint32_t)hash(id) | 0x80000000u;
}

void idmap_init(struct idmap *m)
{
	m->tab = NULL;
	m->tags = NULL;
	m->cap = m->n = 0;
}

void idmap_done(struct idmap *m)
{
	free(m->tab);
	free(m->tags);
	idmap_init(m);
}

/* The slot holding id (tagged tag), or the empty slot where it would go. */
static size_t find(const struct idmap *m, const uint8_t *id, uint32_t tag)
{
	size_t i = tag & (m->cap - 1);

	while (m->tags[i] &&
	       (m->tags[i] != tag || memcmp(m->tab[i], id, IDMAP_KEY) != 0))
		i = (i + 1) & (m->cap - 1);
	return i;
}

void *idmap_get(const struct idmap *m, const uint8_t *id)
{
	if (!m->n)
		return NULL;
	return m->tab[find(m, id, tag_of(id))];
}

static int resize(struct idmap *m, size_t cap)
{
	void **tab = table_alloc(cap, sizeof(*tab));
	uint32_t *tags = table_alloc(cap, sizeof(*tags));
	size_t i, j;

	if (!tab || !tags) {
		free(tab);
		free(tags);
		return -ENOMEM;
	}
	/* Placed by their tags alone: no record is read. */
	for (i = 0; i < m->cap; i++) {
		if (!m->tags[i])
			continue;
		for (j = m->tags[i] & (cap - 1); tags[j];
		     j = (j + 1) & (cap - 1))
			;
		tags[j] = m->tags[i];
		tab[j] = m->tab[i];
	}
	free(m->tab);
	free(m->tags);
	m->tab = tab;
	m->tags = tags;
	m->cap = cap;
	return 0;
}

int idmap_reserve(struct idmap *m, size_t n)
{
	size_t cap = m->cap ? m->cap : 64;

	while (n * 2 > cap) {
		if (cap >= ((size_t)1 << 31) ||
		    cap > ((size_t)-1) / (4 * sizeof(void *)))
			return -ENOMEM;
		cap *= 2;
	}
	return cap == m->cap ? 0 : resize(m, cap);
}

int idmap_put(struct idmap *m, void *rec, void **old)
{
	uint32_t tag = tag_of(rec);
	size_t i;
	int ret = idmap_reserve(m, m->n + 1);

	if (old)
		*old = NULL;
	if (ret < 0)
		return ret;
	i = find(m, rec, tag);
	if (m->tags[i]) {
		if (old)
			*old = m->tab[i];
	} else {
		m->n++;
	}
	m->tab[i] = rec;
	m->tags[i] = tag;
	return 0;
}

void *idmap_del(struct idmap *m, const uint8_t *id)
{
	size_t i, j, home;
	void *rec;

	if (!m->n)
		return NULL;
	i = find(m, id, tag_of(id));
	rec = m->tab[i];
	if (!rec)
		return NULL;
	/* Backward shift: move later members of the run into the hole
	 * unless their home lies cyclically in (i, j]. */
	for (j = i;;) {
		j = (j + 1) & (m->cap - 1);
		if (!m->tags[j])
			break;
		home = m->tags[j] & (m->cap - 1);
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && home <= i && home > j)) {
			m->tab[i] = m->tab[j];
			m->tags[i] = m->tags[j];
			i = j;
		}
	}
	m->tab[i] = NULL;
	m->tags[i] = 0;
	m->n--;
	return rec;
}

size_t idmap_memory(const struct idmap *m)
{
	return m->cap * (sizeof(*m->tab) + sizeof(*m->tags));
}

/*
 * Flat coordinate-addressed index. Slot of (x, y, z) is
 * ((x - 1) * VMEM_MAX_Y + (y - 1)) * VMEM_MAX_Z + (z - 1). The search
 * index follows every put and remove, so it is never stale. Each open
 * scan keeps, in a sorted array, the old record of every slot changed
 * since it began at or after its `from`: a change costs one binary search
 * per open scan, and a scan's memory grows only with the writes made
 * while it is open.
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char content_key[] = ",\"content\":\"";

/* Length of the escaped JSON string body starting at s (up to the
 * closing quote). */
static size_t escaped_len(const char *s)
{
	size_t i = 0;

	while (s[i] && s[i] != '"')
		i += s[i] == '\\' && s[i + 1] ? 2 : 1;
	return i;
}

struct record *record_new(const struct decision *d)
{
	struct record *r;
	size_t len;
	char *json = decision_dump_compact(d, &len);
	const char *key;

	if (!json)
		return NULL;
	/* The coordinate object holds only integers, so the first match is
	 * the content member. */
	key = strstr(json, content_key);
	if (!key) {
		free(json);
		return NULL;
	}
	r = len < UINT32_MAX ? malloc(sizeof(*r) + len + 1) : NULL;
	if (r) {
		r->coord = d->coord;
		r->refs = 1;
		r->version = d->version;
		r->json_len = len;
		memcpy(r->json, json, len + 1);
		r->content_off =
			(uint32_t)(key - json) + sizeof(content_key) - 1;
		r->content_esc_len =
			(uint32_t)escaped_len(r->json + r->content_off);
	}
	free(json);
	return r;
}

void record_free(struct record *r)
{
	if (r && --r->refs == 0)
		free(r);
}

void record_ref(struct record *r)
{
	r->refs++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static long hex4(const char *s)
{
	long v = 0;

	for (int i = 0; i < 4; i++) {
		int h = hexval(s[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static bool put_utf8(struct buf *b, long cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	return buf_append(b, u, n);
}

int record_content(const struct record *r, struct buf *b)
{
	const char *s = r->json + r->content_off;
	const char *end = s + r->content_esc_len;

	b->len = 0;
	while (s < end) {
		const char *run = s;
		bool ok = true;

		while (s < end && *s != '\\')
			s++;
		if (s > run && !buf_append(b, run, (size_t)(s - run)))
			return -ENOMEM;
		if (s >= end)
			break;
		/* An escape written by jansson: \" \\ \/ \b \f \n \r \t \uXXXX
		 */
		switch (s[1]) {
		case 'u': {
			long cp = hex4(s + 2);

			s += 6;
			if (cp >= 0xD800 && cp < 0xDC00 && s + 6 <= end &&
			    s[0] == '\\' && s[1] == 'u') {
				long lo = hex4(s + 2);

				if (lo >= 0xDC00 && lo < 0xE000) {
					cp = 0x10000 + ((cp - 0xD800) << 10) +
					     (lo - 0xDC00);
					s += 6;
				}
			}
			ok = cp >= 0 && put_utf8(b, cp);
			break;
		}
		default: {
			static const char from[] = "\"\\/bfnrt";
			static const char to[] = "\"\\/\b\f\n\r\t";
			const char *p = strchr(from, s[1]);

			ok = p && s[1] && buf_append(b, &to[p - from], 1);
			s += 2;
		}
		}
		if (!ok)
			return -EINVAL;
	}
	if (!b->data && !buf_append(b, "", 0))
		return -ENOMEM;
	return 0;
}

int index_text(void *ctx, size_t slot, const char **text, size_t *len)
{
	struct index *ix = ctx;
	const struct record *r = slot < ix->n_slots ? ix->slots[slot] : NULL;
	int rc;

	if (!r)
		return -ENOENT;
	rc = record_content(r, &ix->text);
	if (rc == 0) {
		*text = ix->text.data;
		*len = ix->text.len;
	}
	return rc;
}

int index_init(struct index *ix, int max_x)
{
	memset(ix, 0, sizeof(*ix));
	ix->max_x = max_x;
	ix->n_slots = (size_t)max_x * VMEM_MAX_Y * VMEM_MAX_Z;
	ix->slots = calloc(ix->n_slots, sizeof(*ix->slots));
	ix->search = search_new(ix->n_slots);
	if (!ix->slots || !ix->search) {
		index_done(ix);
		return -ENOMEM;
	}
	return 0;
}

void index_done(struct index *ix)
{
	while (ix->scans)
		index_scan_end(ix->scans);
	if (ix->slots)
		for (size_t i = 0; i < ix->n_slots; i++)
			record_free(ix->slots[i]);
	free(ix->slots);
	search_free(ix->search);
	buf_done(&ix->scratch);
	buf_done(&ix->text);
	ix->slots = NULL;
	ix->search = NULL;
	ix->count = 0;
}

size_t index_slot(const struct index *ix, const struct coord *c)
{
	(void)ix;
	return ((size_t)(c->x - 1) * VMEM_MAX_Y + (size_t)(c->y - 1)) *
		       VMEM_MAX_Z +
	       (size_t)(c->z - 1);
}

struct coord index_coord(const struct index *ix, size_t slot)
{
	struct coord c;

	(void)ix;
	c.z = (int)(slot % VMEM_MAX_Z) + 1;
	slot /= VMEM_MAX_Z;
	c.y = (int)(slot % VMEM_MAX_Y) + 1;
	c.x = (int)(slot / VMEM_MAX_Y) + 1;
	return c;
}

struct record *index_get(const struct index *ix, const struct coord *c)
{
	return ix->slots[index_slot(ix, c)];
}

/* Forget a record's search postings and content bytes. */
static void unindex(struct index *ix, size_t slot, const struct record *r)
{
	ix->record_bytes -= sizeof(*r) + r->json_len + 1;
	if (record_content(r, &ix->scratch) == 0) {
		search_remove(ix->search, slot, ix->scratch.data,
			      ix->scratch.len);
		ix->content_bytes -= ix->scratch.len;
	}
}

/* Binary search in a scan's kept slots: the index of the first >= slot. */
static size_t kept_lower(const struct index_scan *sc, size_t slot)
{
	size_t lo = 0, hi = sc->n_kept;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (sc->kept[mid] < slot)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Before slot changes: every scan that may still read it keeps what it
 * holds now, unless it kept the slot already. */
static void keep_for_scans(struct index *ix, size_t slot)
{
	struct record *old = ix->slots[slot];
	struct index_scan *sc;

	for (sc = ix->scans; sc; sc = sc->next) {
		size_t at;

		if (slot < sc->from)
			continue;
		at = kept_lower(sc, slot);
		if (at < sc->n_kept && sc->kept[at] == slot)
			continue;
		if (sc->n_kept == sc->cap_kept) {
			size_t ncap = sc->cap_kept ? sc->cap_kept * 2 : 16;
			uint32_t *k = realloc(sc->kept, ncap * sizeof(*k));
			struct record **r;

			if (k)
				sc->kept = k;
			r = k ? realloc(sc->kept_rec, ncap * sizeof(*r)) : NULL;
			if (!r) {
				sc->failed = true;
				continue;
			}
			sc->kept_rec = r;
			sc->cap_kept = ncap;
		}
		memmove(sc->kept + at + 1, sc->kept + at,
			(sc->n_kept - at) * sizeof(*sc->kept));
		memmove(sc->kept_rec + at + 1, sc->kept_rec + at,
			(sc->n_kept - at) * sizeof(*sc->kept_rec));
		sc->kept[at] = (uint32_t)slot;
		sc->kept_rec[at] = old;
		if (old)
			record_ref(old);
		sc->n_kept++;
	}
}

int index_put(struct index *ix, struct record *rec)
{
	size_t slot = index_slot(ix, &rec->coord);
	struct record **p = &ix->slots[slot];
	int rc;

	if (ix->scans)
		keep_for_scans(ix, slot);
	if (*p) {
		unindex(ix, slot, *p);
		record_free(*p);
	} else {
		ix->count++;
		ix->by_layer[rec->coord.z - 1]++;
	}
	*p = rec;
	ix->record_bytes += sizeof(*rec) + rec->json_len + 1;
	rc = record_content(rec, &ix->scratch);
	if (rc == 0) {
		ix->content_bytes += ix->scratch.len;
		rc = search_add(ix->search, slot, ix->scratch.data,
				ix->scratch.len);
	}
	return rc;
}

int index_remove(struct index *ix, const struct coord *c)
{
	size_t slot = index_slot(ix, c);
	struct record **p = &ix->slots[slot];

	if (!*p)
		return 0;
	if (ix->scans)
		keep_for_scans(ix, slot);
	unindex(ix, slot, *p);
	ix->by_layer[(*p)->coord.z - 1]--;
	record_free(*p);
	*p = NULL;
	ix->count--;
	return 1;
}

void index_scan_begin(struct index *ix, struct index_scan *sc)
{
	memset(sc, 0, sizeof(*sc));
	sc->ix = ix;
	sc->next = ix->scans;
	if (ix->scans)
		ix->scans->prev = sc;
	ix->scans = sc;
}

void index_scan_end(struct index_scan *sc)
{
	if (!sc->ix)
		return;
	for (size_t i = 0; i < sc->n_kept; i++)
		record_free(sc->kept_rec[i]);
	if (sc->prev)
		sc->prev->next = sc->next;
	else
		sc->ix->scans = sc->next;
	if (sc->next)
		sc->next->prev = sc->prev;
	free(sc->kept);
	free(sc->kept_rec);
	buf_done(&sc->text);
	memset(sc, 0, sizeof(*sc));
}

const struct record *index_scan_get(const struct index_scan *sc, size_t slot)
{
	size_t at = kept_lower(sc, slot);

	if (at < sc->n_kept && sc->kept[at] == slot)
		return sc->kept_rec[at];
	return sc->ix->slots[slot];
}

void index_scan_pass(struct index_scan *sc, size_t slot)
{
	size_t n;

	if (slot <= sc->from)
		return;
	sc->from = slot;
	n = kept_lower(sc, slot);
	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		record_free(sc->kept_rec[i]);
	memmove(sc->kept, sc->kept + n, (sc->n_kept - n) * sizeof(*sc->kept));
	memmove(sc->kept_rec, sc->kept_rec + n,
		(sc->n_kept - n) * sizeof(*sc->kept_rec));
	sc->n_kept -= n;
}

size_t index_scan_next_changed(const struct index_scan *sc, size_t from)
{
	size_t at = kept_lower(sc, from);

	return at < sc->n_kept ? sc->kept[at] : SIZE_MAX;
}

int index_scan_old_text(struct index_scan *sc, size_t slot, const char **text,
			size_t *len)
{
	const struct record *r = index_scan_get(sc, slot);
	int rc;

	if (!r)
		return -ENOENT;
	rc = record_content(r, &sc->text);
	if (rc == 0) {
		*text = sc->text.data;
		*len = sc->text.len;
	}
	return rc;
}

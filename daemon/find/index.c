/*
 * Flat coordinate-addressed index. Slot of (x, y, z) is
 * ((x - 1) * VMEM_MAX_Y + (y - 1)) * VMEM_MAX_Z + (z - 1). The search
 * index follows every put and remove through the pending slots: a slot
 * changed since the last catch-up keeps the record whose text its
 * postings hold, so the catch-up can take them out. Each open scan keeps
 * the old record of every slot changed since it began at or after its
 * `from`. Both are sorted slot maps: a change costs one binary search per
 * open scan, and their memory grows only with the writes not yet caught
 * up with, or made while the scan is open.
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/hex.h"

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

/* Fill in r's header from its JSON (len bytes, NUL after): false when
 * it has no content member. */
static bool record_init(struct record *r, const struct coord *c,
			int64_t version, size_t len)
{
	/* The coordinate object holds only integers, so the first match is
	 * the content member. */
	const char *key = strstr(r->json, content_key);

	if (!key)
		return false;
	r->coord = *c;
	r->refs = 1;
	r->version = version;
	r->json_len = len;
	r->content_off = (uint32_t)(key - r->json) + sizeof(content_key) - 1;
	r->content_esc_len = (uint32_t)escaped_len(r->json + r->content_off);
	return true;
}

struct record *record_new(const struct decision *d)
{
	/* Written in place: no buffer freed beside each record. */
	size_t len = decision_compact_len(d);
	struct record *r;

	if (len >= UINT32_MAX)
		return NULL;
	r = malloc(sizeof(*r) + len + 1);
	if (!r)
		return NULL;
	decision_write_compact(d, r->json); /* escaped: no NUL inside */
	if (!record_init(r, &d->coord, d->version, len)) {
		free(r);
		return NULL;
	}
	return r;
}

struct record *record_from_compact(const struct coord *c, int64_t version,
				   const char *json, size_t len)
{
	struct record *r;

	if (len >= UINT32_MAX || memchr(json, '\0', len))
		return NULL;
	r = malloc(sizeof(*r) + len + 1);
	if (!r)
		return NULL;
	memcpy(r->json, json, len);
	r->json[len] = '\0';
	if (!record_init(r, c, version, len)) {
		free(r);
		return NULL;
	}
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

static long hex4(const char *s)
{
	long v = 0;

	for (int i = 0; i < 4; i++) {
		int h = hex_value(s[i]);

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

static void slotmap_done(struct slotmap *m);

void index_done(struct index *ix)
{
	while (ix->scans)
		index_scan_end(ix->scans);
	slotmap_done(&ix->pending);
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

/* ---- sorted slot maps ---- */

/* The index of the first entry of m with a slot >= slot. */
static size_t slotmap_lower(const struct slotmap *m, size_t slot)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->slot[mid] < slot)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether m holds slot; *at is where it is, or would go. */
static bool slotmap_find(const struct slotmap *m, size_t slot, size_t *at)
{
	*at = slotmap_lower(m, slot);
	return *at < m->n && m->slot[*at] == slot;
}

/* Add (slot, rec) at index at (from slotmap_find), taking a reference on
 * rec. 0 or -ENOMEM. */
static int slotmap_insert(struct slotmap *m, size_t at, size_t slot,
			  struct record *rec)
{
	if (m->n == m->cap) {
		size_t ncap = m->cap ? m->cap * 2 : 16;
		uint32_t *sl = realloc(m->slot, ncap * sizeof(*sl));
		struct record **r;

		if (!sl)
			return -ENOMEM;
		m->slot = sl;
		r = realloc(m->rec, ncap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		m->rec = r;
		m->cap = ncap;
	}
	memmove(m->slot + at + 1, m->slot + at, (m->n - at) * sizeof(*m->slot));
	memmove(m->rec + at + 1, m->rec + at, (m->n - at) * sizeof(*m->rec));
	m->slot[at] = (uint32_t)slot;
	m->rec[at] = rec;
	if (rec)
		record_ref(rec);
	m->n++;
	return 0;
}

/* Drop the first n entries and their references. */
static void slotmap_drop_front(struct slotmap *m, size_t n)
{
	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		record_free(m->rec[i]);
	memmove(m->slot, m->slot + n, (m->n - n) * sizeof(*m->slot));
	memmove(m->rec, m->rec + n, (m->n - n) * sizeof(*m->rec));
	m->n -= n;
}

static void slotmap_done(struct slotmap *m)
{
	slotmap_drop_front(m, m->n);
	free(m->slot);
	free(m->rec);
	memset(m, 0, sizeof(*m));
}

/* ---- changes ---- */

/* Before slot changes: every scan that may still read it keeps what it
 * holds now, unless it kept the slot already. */
static void keep_for_scans(struct index *ix, size_t slot)
{
	struct index_scan *sc;
	size_t at;

	for (sc = ix->scans; sc; sc = sc->next)
		if (slot >= sc->from && !slotmap_find(&sc->kept, slot, &at) &&
		    slotmap_insert(&sc->kept, at, slot, ix->slots[slot]) < 0)
			sc->failed = true;
}

/* The text of r into ix->scratch; its length, or -errno. */
static int64_t content_of(struct index *ix, const struct record *r)
{
	int rc = record_content(r, &ix->scratch);

	return rc < 0 ? rc : (int64_t)ix->scratch.len;
}

/* Take what old's text put in the postings of slot out, and put new's
 * in; -ENOMEM when the search index could not take new's. */
static int reindex(struct index *ix, size_t slot, const struct record *old,
		   const struct record *now)
{
	if (old && content_of(ix, old) >= 0)
		search_remove(ix->search, slot, ix->scratch.data,
			      ix->scratch.len);
	if (!now)
		return 0;
	if (content_of(ix, now) < 0)
		return -ENOMEM;
	return search_add(ix->search, slot, ix->scratch.data, ix->scratch.len);
}

/* Before slot's record changes from old: list the slot as pending with
 * the record whose text its postings hold, unless it is pending already
 * (then they hold an older one's). Without room for that, the postings
 * are changed at once: from old to now. */
static void pend(struct index *ix, size_t slot, struct record *old,
		 const struct record *now)
{
	size_t at;

	if (slotmap_find(&ix->pending, slot, &at))
		return;
	if (slotmap_insert(&ix->pending, at, slot, old) < 0) {
		reindex(ix, slot, old, now);
		return;
	}
	if (ix->pending.n == 1 && ix->on_pending)
		ix->on_pending(ix->on_pending_ctx);
}

/* Count a record in or out of the totals. */
static void tally(struct index *ix, const struct record *r, int sign)
{
	int64_t n = content_of(ix, r);

	if (sign > 0) {
		ix->record_bytes += sizeof(*r) + r->json_len + 1;
		ix->content_bytes += n > 0 ? (size_t)n : 0;
	} else {
		ix->record_bytes -= sizeof(*r) + r->json_len + 1;
		ix->content_bytes -= n > 0 ? (size_t)n : 0;
	}
}

int index_put(struct index *ix, struct record *rec)
{
	size_t slot = index_slot(ix, &rec->coord);
	struct record **p = &ix->slots[slot];

	if (ix->scans)
		keep_for_scans(ix, slot);
	pend(ix, slot, *p, rec);
	if (*p) {
		tally(ix, *p, -1);
		record_free(*p);
	} else {
		ix->count++;
		ix->by_layer[rec->coord.z - 1]++;
	}
	*p = rec;
	tally(ix, rec, +1);
	return 0;
}

int index_remove(struct index *ix, const struct coord *c)
{
	size_t slot = index_slot(ix, c);
	struct record **p = &ix->slots[slot];

	if (!*p)
		return 0;
	if (ix->scans)
		keep_for_scans(ix, slot);
	pend(ix, slot, *p, NULL);
	tally(ix, *p, -1);
	ix->by_layer[(*p)->coord.z - 1]--;
	record_free(*p);
	*p = NULL;
	ix->count--;
	return 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t index_catch_up(struct index *ix, uint64_t budget_ns)
{
	struct slotmap *m = &ix->pending;
	uint64_t t0 = now_ns();
	size_t done = 0;

	while (done < m->n) {
		size_t slot = m->slot[done];

		if (reindex(ix, slot, m->rec[done], ix->slots[slot]) < 0) {
			/* Out of memory: its old postings are gone; judged
			 * on its text until a later catch-up takes it. */
			record_free(m->rec[done]);
			m->rec[done] = NULL;
			break;
		}
		done++;
		if ((done & 15) == 0 && now_ns() - t0 >= budget_ns)
			break;
	}
	slotmap_drop_front(m, done);
	return m->n;
}

size_t index_pending_next(const struct index *ix, size_t from)
{
	size_t at = slotmap_lower(&ix->pending, from);

	return at < ix->pending.n ? ix->pending.slot[at] : SIZE_MAX;
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
	if (sc->prev)
		sc->prev->next = sc->next;
	else
		sc->ix->scans = sc->next;
	if (sc->next)
		sc->next->prev = sc->prev;
	slotmap_done(&sc->kept);
	buf_done(&sc->text);
	memset(sc, 0, sizeof(*sc));
}

const struct record *index_scan_get(const struct index_scan *sc, size_t slot)
{
	size_t at;

	if (slotmap_find(&sc->kept, slot, &at))
		return sc->kept.rec[at];
	return sc->ix->slots[slot];
}

void index_scan_pass(struct index_scan *sc, size_t slot)
{
	if (slot <= sc->from)
		return;
	sc->from = slot;
	slotmap_drop_front(&sc->kept, slotmap_lower(&sc->kept, slot));
}

size_t index_scan_next_changed(const struct index_scan *sc, size_t from)
{
	size_t at = slotmap_lower(&sc->kept, from);

	return at < sc->kept.n ? sc->kept.slot[at] : SIZE_MAX;
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

size_t index_scan_changes_next(void *ctx, size_t from)
{
	const struct index_scan *sc = ctx;
	size_t a = index_scan_next_changed(sc, from);
	size_t b = index_pending_next(sc->ix, from);

	return a < b ? a : b;
}

int index_scan_changes_text(void *ctx, size_t slot, const char **text,
			    size_t *len)
{
	return index_scan_old_text(ctx, slot, text, len);
}

/*
 * See docindex.h. Invariants: slots[d->slot] == d for every document; the
 * creation order holds each document's slot once, sorted by created_at;
 * the filter index holds each document's metadata under its slot; the
 * vector index holds a vector under a slot only while that slot's
 * document has one.
 */
#include "docindex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/decision.h"
#include "uuid.h"

#define NO_SLOT UINT32_MAX

int docindex_init(struct docindex *ix, const struct vindex_opts *o)
{
	memset(ix, 0, sizeof(*ix));
	idmap_init(&ix->byid);
	ix->dim = o->dim;
	ix->jf = jfindex_new();
	if (!ix->jf || vindex_new(o, &ix->vi) < 0)
		return -ENOMEM;
	return 0;
}

void docindex_done(struct docindex *ix)
{
	for (uint32_t i = 0; i < ix->n_slots; i++)
		free(ix->slots[i]);
	free(ix->slots);
	free(ix->free_slots);
	free(ix->t_slot);
	free(ix->t_at);
	jfindex_free(ix->jf);
	vindex_free(ix->vi);
	idmap_done(&ix->byid);
	memset(ix, 0, sizeof(*ix));
}

struct doc *docindex_get(const struct docindex *ix, const uint8_t *id)
{
	return idmap_get(&ix->byid, id);
}

static const char *meta_of(const struct doc *d)
{
	return d->data + d->content_len;
}

static json_t *meta_parse(const char *text, size_t len)
{
	json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);

	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

/* ---- slots and the creation order ---- */

static int slot_take(struct docindex *ix, uint32_t *slot)
{
	if (ix->n_free) {
		*slot = ix->free_slots[--ix->n_free];
		return 0;
	}
	if (ix->n_slots == ix->cap_slots) {
		uint32_t cap = ix->cap_slots ? ix->cap_slots * 2 : 1024;
		struct doc **p = realloc(ix->slots, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		ix->slots = p;
		ix->cap_slots = cap;
	}
	ix->slots[ix->n_slots] = NULL;
	*slot = ix->n_slots++;
	return 0;
}

static int slot_give(struct docindex *ix, uint32_t slot)
{
	if (ix->n_free == ix->cap_free) {
		uint32_t cap = ix->cap_free ? ix->cap_free * 2 : 256;
		uint32_t *p = realloc(ix->free_slots, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		ix->free_slots = p;
		ix->cap_free = cap;
	}
	ix->slots[slot] = NULL;
	ix->free_slots[ix->n_free++] = slot;
	return 0;
}

/* Room for one more entry in the creation order. */
static int time_reserve(struct docindex *ix)
{
	size_t cap;
	uint32_t *s;
	int64_t *a;

	if (ix->t_n < ix->t_cap)
		return 0;
	cap = ix->t_cap ? ix->t_cap * 2 : 1024;
	s = realloc(ix->t_slot, cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	ix->t_slot = s;
	a = realloc(ix->t_at, cap * sizeof(*a));
	if (!a)
		return -ENOMEM;
	ix->t_at = a;
	ix->t_cap = cap;
	return 0;
}

/* The first position whose created_at is > at (or >= when strict is
 * false). */
static size_t time_bound(const struct docindex *ix, int64_t at, bool upper)
{
	size_t lo = 0, hi = ix->t_n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (upper ? ix->t_at[mid] <= at : ix->t_at[mid] < at)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void time_insert(struct docindex *ix, uint32_t slot, int64_t at)
{
	size_t pos = ix->t_n;

	/* Almost always the newest: the end. */
	if (pos && ix->t_at[pos - 1] > at)
		pos = time_bound(ix, at, true);
	memmove(ix->t_slot + pos + 1, ix->t_slot + pos,
		(ix->t_n - pos) * sizeof(*ix->t_slot));
	memmove(ix->t_at + pos + 1, ix->t_at + pos,
		(ix->t_n - pos) * sizeof(*ix->t_at));
	ix->t_slot[pos] = slot;
	ix->t_at[pos] = at;
	ix->t_n++;
}

/* Squeeze the holes out of the creation order. */
static void time_compact(struct docindex *ix)
{
	size_t k = 0;

	for (size_t i = 0; i < ix->t_n; i++) {
		if (ix->t_slot[i] == NO_SLOT)
			continue;
		ix->t_slot[k] = ix->t_slot[i];
		ix->t_at[k] = ix->t_at[i];
		k++;
	}
	ix->t_n = k;
	ix->t_holes = 0;
}

static void time_remove(struct docindex *ix, uint32_t slot, int64_t at)
{
	for (size_t i = time_bound(ix, at, false); i < ix->t_n; i++) {
		if (ix->t_slot[i] != slot)
			continue;
		ix->t_slot[i] = NO_SLOT;
		ix->t_holes++;
		break;
	}
	if (ix->t_holes * 2 > ix->t_n)
		time_compact(ix);
}

/* ---- documents ---- */

int docindex_put(struct docindex *ix, const uint8_t *id,
		 const struct rec_document *r)
{
	struct doc *old = idmap_get(&ix->byid, id), *d;
	json_t *meta = meta_parse(r->meta, r->meta_len), *old_meta = NULL;
	uint32_t slot;
	int ret = -ENOMEM;

	if (!meta)
		return -EINVAL;
	if (old) {
		old_meta = meta_parse(meta_of(old), old->meta_len);
		if (!old_meta)
			goto out;
	}
	d = malloc(sizeof(*d) + r->content_len + r->meta_len);
	if (!d)
		goto out;
	memcpy(d->id, id, REC_KEY);
	d->content_len = (uint32_t)r->content_len;
	d->meta_len = (uint32_t)r->meta_len;
	d->created_at = r->created_at;
	d->updated_at = r->updated_at;
	memcpy(d->data, r->content, r->content_len);
	memcpy(d->data + r->content_len, r->meta, r->meta_len);
	if (old) {
		slot = old->slot;
	} else if (slot_take(ix, &slot) < 0 || time_reserve(ix) < 0 ||
		   idmap_reserve(&ix->byid, ix->byid.n + 1) < 0) {
		free(d);
		goto out;
	}
	d->slot = slot;
	if (old)
		jfindex_remove(ix->jf, slot, old_meta);
	ret = jfindex_add(ix->jf, slot, meta);
	if (ret < 0) {
		/* Metadata was checked to fit; put the old one back. */
		if (old && jfindex_add(ix->jf, slot, old_meta) < 0)
			ret = -ENOMEM;
		if (!old)
			slot_give(ix, slot);
		free(d);
		goto out;
	}
	idmap_put(&ix->byid, d, NULL); /* room reserved, or replacing */
	ix->slots[slot] = d;
	if (old) {
		if (old->created_at != d->created_at) {
			time_remove(ix, slot, old->created_at);
			if (time_reserve(ix) == 0)
				time_insert(ix, slot, d->created_at);
		}
		ix->bytes -= sizeof(*old) + old->content_len + old->meta_len;
		free(old);
	} else {
		time_insert(ix, slot, d->created_at);
		ix->n_docs++;
	}
	ix->bytes += sizeof(*d) + d->content_len + d->meta_len;
	ret = 0;
out:
	json_decref(meta);
	json_decref(old_meta);
	return ret;
}

bool docindex_del(struct docindex *ix, const uint8_t *id)
{
	struct doc *d = idmap_del(&ix->byid, id);
	json_t *meta;

	if (!d)
		return false;
	meta = meta_parse(meta_of(d), d->meta_len);
	if (meta)
		jfindex_remove(ix->jf, d->slot, meta);
	json_decref(meta);
	if (vindex_has(ix->vi, d->slot))
		vindex_remove(ix->vi, d->slot);
	time_remove(ix, d->slot, d->created_at);
	if (slot_give(ix, d->slot) < 0)
		ix->slots[d->slot] = NULL; /* the slot is lost, not reused */
	ix->n_docs--;
	ix->bytes -= sizeof(*d) + d->content_len + d->meta_len;
	free(d);
	return true;
}

int docindex_set_vector(struct docindex *ix, const uint8_t *id, const float *v,
			char *msg, size_t n)
{
	struct doc *d = idmap_get(&ix->byid, id);

	if (!d)
		return -ENOENT;
	if (!v) {
		if (vindex_has(ix->vi, d->slot))
			vindex_remove(ix->vi, d->slot);
		return 0;
	}
	return vindex_put(ix->vi, d->slot, d->id, v, msg, n);
}

bool docindex_has_vector(const struct docindex *ix, const struct doc *d)
{
	return vindex_has(ix->vi, d->slot);
}

uint32_t docindex_vectors(const struct docindex *ix)
{
	return vindex_count(ix->vi);
}

bool docindex_vector(const struct docindex *ix, const struct doc *d, float *v)
{
	return vindex_vector(ix->vi, d->slot, v);
}

/* ---- queries ---- */

/* The metadata of a candidate, for jfindex_match's confirmation: parsed
 * on demand, the last one kept until the next call. */
struct confirm {
	const struct docindex *ix;
	json_t *last;
};

static const json_t *value_cb(void *ctx, uint32_t slot)
{
	struct confirm *c = ctx;
	const struct doc *d = slot < c->ix->n_slots ? c->ix->slots[slot] : NULL;

	json_decref(c->last);
	c->last = d ? meta_parse(meta_of(d), d->meta_len) : NULL;
	return c->last;
}

int docindex_match(const struct docindex *ix, const json_t *filter,
		   uint32_t **out, size_t *n)
{
	struct confirm c = {ix, NULL};
	int ret;

	*out = NULL;
	*n = 0;
	ret = jfindex_match(ix->jf, filter, value_cb, &c, out, n);
	json_decref(c.last);
	return ret;
}

int docindex_search(const struct docindex *ix, const float *query, size_t k,
		    const json_t *filter, bool exact, struct doc_hit *out,
		    size_t *n, enum vindex_path *path, char *msg, size_t msgn)
{
	struct vindex_hit *hits = NULL;
	uint32_t *cands = NULL;
	size_t n_cands = 0, got = 0;
	int ret;

	*n = 0;
	if (filter) {
		ret = docindex_match(ix, filter, &cands, &n_cands);
		if (ret == -EINVAL)
			snprintf(msg, msgn,
				 "metadata_filters is beyond the "
				 "limits of a filter");
		if (ret < 0)
			return ret;
		if (n_cands == 0)
			return 0;
	}
	hits = malloc((k ? k : 1) * sizeof(*hits));
	if (!hits) {
		free(cands);
		return -ENOMEM;
	}
	ret = vindex_search(ix->vi, query, k, cands, n_cands, exact, hits, &got,
			    path, msg, msgn);
	for (size_t i = 0; ret == 0 && i < got; i++) {
		out[i].doc = ix->slots[hits[i].slot];
		out[i].score = hits[i].score;
	}
	if (ret == 0)
		*n = got;
	free(hits);
	free(cands);
	return ret;
}

static int cmp_slot_time(const void *a, const void *b, void *arg)
{
	const struct docindex *ix = arg;
	const struct doc *x = ix->slots[*(const uint32_t *)a];
	const struct doc *y = ix->slots[*(const uint32_t *)b];

	/* Newest first; equal times by slot, for a stable answer. */
	if (x->created_at != y->created_at)
		return x->created_at < y->created_at ? 1 : -1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

int docindex_between(const struct docindex *ix, int64_t start, int64_t end,
		     const json_t *filter, size_t limit,
		     bool (*fn)(void *ctx, const struct doc *d), void *ctx)
{
	size_t lo = time_bound(ix, start, false),
	       hi = time_bound(ix, end, true);
	uint32_t *match = NULL;
	uint8_t *bits = NULL;
	size_t n_match = 0, sent = 0, i;
	int ret = 0;

	if (start > end || lo >= hi || limit == 0)
		return 0;
	if (filter) {
		ret = docindex_match(ix, filter, &match, &n_match);
		if (ret < 0 || n_match == 0)
			goto out;
	}
	if (filter && n_match < hi - lo) {
		/* Fewer matches than documents in the window: sort them. */
		size_t k = 0;

		for (i = 0; i < n_match; i++) {
			const struct doc *d = ix->slots[match[i]];

			if (d && d->created_at >= start && d->created_at <= end)
				match[k++] = match[i];
		}
		qsort_r(match, k, sizeof(*match), cmp_slot_time, (void *)ix);
		for (i = 0; i < k && sent < limit; i++, sent++)
			if (!fn(ctx, ix->slots[match[i]]))
				break;
		goto out;
	}
	if (filter) {
		bits = calloc(ix->n_slots / 8 + 1, 1);
		if (!bits) {
			ret = -ENOMEM;
			goto out;
		}
		for (i = 0; i < n_match; i++)
			bits[match[i] / 8] |= (uint8_t)(1u << (match[i] % 8));
	}
	for (i = hi; i-- > lo && sent < limit;) {
		uint32_t s = ix->t_slot[i];

		if (s == NO_SLOT || (bits && !(bits[s / 8] & (1u << (s % 8)))))
			continue;
		sent++;
		if (!fn(ctx, ix->slots[s]))
			break;
	}
out:
	free(match);
	free(bits);
	return ret;
}

/* ---- wire forms ---- */

/* The shortest decimal form that reads back as the same float32. */
static int fmt_float(float f, char *out, size_t n)
{
	int len = 0;

	for (int prec = 6; prec <= 9; prec++) {
		len = snprintf(out, n, "%.*g", prec, (double)f);
		if (strtof(out, NULL) == f)
			break;
	}
	return len;
}

bool doc_json(struct buf *b, const struct docindex *ix, const struct doc *d,
	      bool with_score, float score, bool with_embedding)
{
	char id[UUID_TEXT_LEN + 1], c[VMEM_TIMESTAMP_LEN + 1],
		u[VMEM_TIMESTAMP_LEN + 1], num[64];
	bool has = vindex_has(ix->vi, d->slot), ok;
	float *v = NULL;

	uuid_format(d->id, id);
	timestamp_format(d->created_at, c);
	timestamp_format(d->updated_at, u);
	ok = buf_puts(b, "{\"id\":\"") && buf_append(b, id, UUID_TEXT_LEN) &&
	     buf_puts(b, "\",\"content\":") &&
	     buf_json_str(b, d->data, d->content_len) &&
	     buf_puts(b, ",\"metadata\":") &&
	     buf_append(b, meta_of(d), d->meta_len) &&
	     buf_puts(b, ",\"created_at\":\"") &&
	     buf_append(b, c, VMEM_TIMESTAMP_LEN) &&
	     buf_puts(b, "\",\"updated_at\":\"") &&
	     buf_append(b, u, VMEM_TIMESTAMP_LEN) &&
	     buf_puts(b, has ? "\",\"has_embedding\":true"
			     : "\",\"has_embedding\":false");
	if (ok && with_score) {
		snprintf(num, sizeof(num), ",\"score\":%.9g", (double)score);
		ok = buf_puts(b, num);
	}
	if (ok && with_embedding && has) {
		v = malloc(ix->dim * sizeof(*v));
		ok = v && vindex_vector(ix->vi, d->slot, v) &&
		     buf_reserve(b, (size_t)ix->dim * 16 + 16) &&
		     buf_puts(b, ",\"embedding\":[");
		for (uint32_t i = 0; ok && i < ix->dim; i++) {
			int len = fmt_float(v[i], num, sizeof(num));

			ok = (i == 0 || buf_append(b, ",", 1)) &&
			     buf_append(b, num, (size_t)len);
		}
		ok = ok && buf_append(b, "]", 1);
		free(v);
	}
	return ok && buf_append(b, "}", 1);
}

size_t doc_json_max(const struct docindex *ix, const struct doc *d,
		    bool with_embedding)
{
	return 256 + 6 * (size_t)d->content_len + d->meta_len +
	       (with_embedding ? (size_t)ix->dim * 16 + 16 : 0);
}

size_t docindex_memory(const struct docindex *ix)
{
	struct vindex_stats st;

	vindex_stats(ix->vi, &st);
	return ix->bytes + idmap_memory(&ix->byid) +
	       ix->cap_slots * sizeof(*ix->slots) +
	       ix->t_cap * (sizeof(*ix->t_slot) + sizeof(*ix->t_at)) +
	       jfindex_memory(ix->jf) + st.vector_bytes + st.graph_bytes +
	       st.map_bytes;
}

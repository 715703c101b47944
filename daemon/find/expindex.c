/*
 * The experiences' index (see expindex.h).
 *
 * Invariants: a doc is in its agent's list, in one (agent, tag) list per
 * tag it holds, counted in the aggregates and in the search index exactly
 * while it is live; lists are sorted by (timestamp, id); a doc's BM25
 * number maps back to it through bm_doc.
 */
#include "expindex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "protocol/decision.h" /* timestamp_format */
#include "protocol/fnv.h"

#define NOT_FOUND UINT32_MAX

/* ---- hashing ---- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/* The random half of a UUIDv7 is a good hash already. */
static uint64_t hash_id(const struct expid *id)
{
	uint64_t h;

	memcpy(&h, id->b + 8, sizeof(h));
	return mix64(h);
}

/* ---- ids ---- */

static int by_id_grow(struct expindex *ix)
{
	size_t cap = ix->by_id_cap ? ix->by_id_cap * 2 : 1024;
	uint32_t *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t d = 0; d < ix->n_docs; d++) {
		size_t i = hash_id(&ix->docs[d].id) & (cap - 1);

		while (t[i])
			i = (i + 1) & (cap - 1);
		t[i] = (uint32_t)d + 1;
	}
	free(ix->by_id);
	ix->by_id = t;
	ix->by_id_cap = cap;
	return 0;
}

long expindex_lookup(const struct expindex *ix, const struct expid *id)
{
	size_t mask = ix->by_id_cap - 1;

	if (!ix->by_id_cap)
		return -1;
	for (size_t i = hash_id(id) & mask; ix->by_id[i]; i = (i + 1) & mask)
		if (expid_cmp(&ix->docs[ix->by_id[i] - 1].id, id) == 0)
			return (long)ix->by_id[i] - 1;
	return -1;
}

long expindex_intern(struct expindex *ix, const struct expid *id)
{
	long found = expindex_lookup(ix, id);
	size_t i, mask;

	if (found >= 0)
		return found;
	if (ix->n_docs >= UINT32_MAX - 1)
		return -ENOMEM;
	if ((ix->n_docs + 1) * 2 > ix->by_id_cap && by_id_grow(ix) < 0)
		return -ENOMEM;
	if (grow_array((void **)&ix->docs, &ix->cap_docs, ix->n_docs + 1,
		       sizeof(*ix->docs)) < 0)
		return -ENOMEM;
	memset(&ix->docs[ix->n_docs], 0, sizeof(ix->docs[0]));
	ix->docs[ix->n_docs].id = *id;
	mask = ix->by_id_cap - 1;
	for (i = hash_id(id) & mask; ix->by_id[i]; i = (i + 1) & mask)
		;
	ix->by_id[i] = (uint32_t)ix->n_docs + 1;
	return (long)ix->n_docs++;
}

/* ---- agents and tags ---- */

static int agent_table_grow(struct expindex *ix)
{
	size_t cap = ix->agent_table_cap ? ix->agent_table_cap * 2 : 64;
	uint32_t *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t a = 0; a < ix->n_agents; a++) {
		size_t i = fnv1a64(ix->agents[a].id, ix->agents[a].len) &
			   (cap - 1);

		while (t[i])
			i = (i + 1) & (cap - 1);
		t[i] = (uint32_t)a + 1;
	}
	free(ix->agent_table);
	ix->agent_table = t;
	ix->agent_table_cap = cap;
	return 0;
}

static long agent_find(const struct expindex *ix, const char *s, size_t len)
{
	size_t mask = ix->agent_table_cap - 1;

	if (!ix->agent_table_cap)
		return -1;
	for (size_t i = fnv1a64(s, len) & mask; ix->agent_table[i];
	     i = (i + 1) & mask) {
		const struct exp_agent *a = &ix->agents[ix->agent_table[i] - 1];

		if (a->len == len && memcmp(a->id, s, len) == 0)
			return (long)ix->agent_table[i] - 1;
	}
	return -1;
}

static long agent_intern(struct expindex *ix, const char *s, size_t len)
{
	long found = agent_find(ix, s, len);
	struct exp_agent *a;
	size_t i, mask;

	if (found >= 0)
		return found;
	if ((ix->n_agents + 1) * 2 > ix->agent_table_cap &&
	    agent_table_grow(ix) < 0)
		return -ENOMEM;
	if (grow_array((void **)&ix->agents, &ix->cap_agents, ix->n_agents + 1,
		       sizeof(*ix->agents)) < 0)
		return -ENOMEM;
	a = &ix->agents[ix->n_agents];
	memset(a, 0, sizeof(*a));
	a->id = malloc(len + 1);
	if (!a->id)
		return -ENOMEM;
	memcpy(a->id, s, len);
	a->id[len] = '\0';
	a->len = len;
	mask = ix->agent_table_cap - 1;
	for (i = fnv1a64(s, len) & mask; ix->agent_table[i]; i = (i + 1) & mask)
		;
	ix->agent_table[i] = (uint32_t)ix->n_agents + 1;
	return (long)ix->n_agents++;
}

static int tag_table_grow(struct expindex *ix)
{
	size_t cap = ix->tag_table_cap ? ix->tag_table_cap * 2 : 256;
	uint32_t *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t g = 0; g < ix->n_tags; g++) {
		const char *name = ix->tag_names[g];
		size_t i = fnv1a64(name, strlen(name)) & (cap - 1);

		while (t[i])
			i = (i + 1) & (cap - 1);
		t[i] = (uint32_t)g + 1;
	}
	free(ix->tag_table);
	ix->tag_table = t;
	ix->tag_table_cap = cap;
	return 0;
}

static long tag_find(const struct expindex *ix, const char *s)
{
	size_t len = strlen(s), mask = ix->tag_table_cap - 1;

	if (!ix->tag_table_cap)
		return -1;
	for (size_t i = fnv1a64(s, len) & mask; ix->tag_table[i];
	     i = (i + 1) & mask)
		if (strcmp(ix->tag_names[ix->tag_table[i] - 1], s) == 0)
			return (long)ix->tag_table[i] - 1;
	return -1;
}

static long tag_intern(struct expindex *ix, const char *s)
{
	long found = tag_find(ix, s);
	size_t i, mask, cap_names = ix->cap_tags, cap_count = ix->cap_tags;

	if (found >= 0)
		return found;
	if ((ix->n_tags + 1) * 2 > ix->tag_table_cap && tag_table_grow(ix) < 0)
		return -ENOMEM;
	/* Both arrays grow alike from the same capacity. */
	if (grow_array((void **)&ix->tag_names, &cap_names, ix->n_tags + 1,
		       sizeof(*ix->tag_names)) < 0 ||
	    grow_array((void **)&ix->tag_count, &cap_count, ix->n_tags + 1,
		       sizeof(*ix->tag_count)) < 0)
		return -ENOMEM;
	ix->cap_tags = cap_count;
	ix->tag_names[ix->n_tags] = strdup(s);
	if (!ix->tag_names[ix->n_tags])
		return -ENOMEM;
	ix->tag_count[ix->n_tags] = 0;
	mask = ix->tag_table_cap - 1;
	for (i = fnv1a64(s, strlen(s)) & mask; ix->tag_table[i];
	     i = (i + 1) & mask)
		;
	ix->tag_table[i] = (uint32_t)ix->n_tags + 1;
	return (long)ix->n_tags++;
}

/* ---- (agent, tag) lists and per-agent tag counts ---- */

static uint64_t at_key(uint32_t agent, uint32_t tag)
{
	return (uint64_t)agent << 32 | tag;
}

/* The (agent, tag) list, or NULL. */
static struct docvec *at_find(const struct expindex *ix, uint32_t agent,
			      uint32_t tag)
{
	uint64_t key = at_key(agent, tag) + 1; /* never 0: empty */
	size_t mask = ix->at_cap - 1;

	if (!ix->at_cap)
		return NULL;
	for (size_t i = mix64(key) & mask; ix->at_key[i]; i = (i + 1) & mask)
		if (ix->at_key[i] == key)
			return &ix->at_lists[ix->at_val[i]];
	return NULL;
}

static int at_grow(struct expindex *ix)
{
	size_t cap = ix->at_cap ? ix->at_cap * 2 : 256;
	uint64_t *keys = calloc(cap, sizeof(*keys));
	uint32_t *vals = calloc(cap, sizeof(*vals));

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (size_t j = 0; j < ix->at_cap; j++) {
		size_t i;

		if (!ix->at_key[j])
			continue;
		for (i = mix64(ix->at_key[j]) & (cap - 1); keys[i];
		     i = (i + 1) & (cap - 1))
			;
		keys[i] = ix->at_key[j];
		vals[i] = ix->at_val[j];
	}
	free(ix->at_key);
	free(ix->at_val);
	ix->at_key = keys;
	ix->at_val = vals;
	ix->at_cap = cap;
	return 0;
}

static struct docvec *at_intern(struct expindex *ix, uint32_t agent,
				uint32_t tag)
{
	struct docvec *v = at_find(ix, agent, tag);
	uint64_t key = at_key(agent, tag) + 1;
	size_t i;

	if (v)
		return v;
	if ((ix->at_used + 1) * 2 > ix->at_cap && at_grow(ix) < 0)
		return NULL;
	if (grow_array((void **)&ix->at_lists, &ix->cap_at, ix->n_at + 1,
		       sizeof(*ix->at_lists)) < 0)
		return NULL;
	for (i = mix64(key) & (ix->at_cap - 1); ix->at_key[i];
	     i = (i + 1) & (ix->at_cap - 1))
		;
	ix->at_key[i] = key;
	ix->at_val[i] = (uint32_t)ix->n_at;
	ix->at_used++;
	memset(&ix->at_lists[ix->n_at], 0, sizeof(ix->at_lists[0]));
	return &ix->at_lists[ix->n_at++];
}

static int tc_grow(struct exp_agent *a)
{
	uint32_t cap = a->tc_cap ? a->tc_cap * 2 : 16;
	uint32_t *keys = calloc(cap, sizeof(*keys));
	uint32_t *vals = calloc(cap, sizeof(*vals));

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < a->tc_cap; j++) {
		uint32_t i;

		if (!a->tc_key[j])
			continue;
		for (i = (uint32_t)mix64(a->tc_key[j]) & (cap - 1); keys[i];
		     i = (i + 1) & (cap - 1))
			;
		keys[i] = a->tc_key[j];
		vals[i] = a->tc_val[j];
	}
	free(a->tc_key);
	free(a->tc_val);
	a->tc_key = keys;
	a->tc_val = vals;
	a->tc_cap = cap;
	return 0;
}

/* The count slot of tag in agent's table (made when add), or NULL. */
static uint32_t *tc_slot(struct exp_agent *a, uint32_t tag, bool add)
{
	uint32_t key = tag + 1, i;

	if (add && (a->tc_used + 1) * 2 > a->tc_cap && tc_grow(a) < 0)
		return NULL;
	if (!a->tc_cap)
		return NULL;
	for (i = (uint32_t)mix64(key) & (a->tc_cap - 1); a->tc_key[i];
	     i = (i + 1) & (a->tc_cap - 1))
		if (a->tc_key[i] == key)
			return &a->tc_val[i];
	if (!add)
		return NULL;
	a->tc_key[i] = key;
	a->tc_val[i] = 0;
	a->tc_used++;
	return &a->tc_val[i];
}

/* ---- sorted doc lists ---- */

static bool before(const struct expindex *ix, uint32_t a, uint32_t b)
{
	const struct exp_doc *x = &ix->docs[a], *y = &ix->docs[b];

	if (x->ts != y->ts)
		return x->ts < y->ts;
	return expid_cmp(&x->id, &y->id) < 0;
}

/* The first position in v whose doc is not before (ts, id). */
static size_t lower_bound(const struct expindex *ix, const struct docvec *v,
			  int64_t ts, const struct expid *id)
{
	size_t lo = 0, hi = v->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct exp_doc *d = &ix->docs[v->v[mid]];

		if (d->ts < ts ||
		    (d->ts == ts && id && expid_cmp(&d->id, id) < 0))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The first position whose timestamp is above ts. */
static size_t upper_bound_ts(const struct expindex *ix, const struct docvec *v,
			     int64_t ts)
{
	size_t lo = 0, hi = v->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (ix->docs[v->v[mid]].ts <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int vec_insert(const struct expindex *ix, struct docvec *v, uint32_t doc)
{
	size_t pos = v->n;

	if (v->n == v->cap) {
		size_t cap = v->cap;

		if (grow_array((void **)&v->v, &cap, (size_t)v->n + 1,
			       sizeof(*v->v)) < 0)
			return -ENOMEM;
		v->cap = (uint32_t)cap;
	}
	/* Nearly always an append: records come in time order. */
	if (pos > 0 && before(ix, doc, v->v[pos - 1]))
		pos = lower_bound(ix, v, ix->docs[doc].ts, &ix->docs[doc].id);
	memmove(v->v + pos + 1, v->v + pos, (v->n - pos) * sizeof(*v->v));
	v->v[pos] = doc;
	v->n++;
	return 0;
}

static void vec_remove(const struct expindex *ix, struct docvec *v,
		       uint32_t doc)
{
	size_t pos = lower_bound(ix, v, ix->docs[doc].ts, &ix->docs[doc].id);

	if (pos < v->n && v->v[pos] == doc) {
		memmove(v->v + pos, v->v + pos + 1,
			(v->n - pos - 1) * sizeof(*v->v));
		v->n--;
	}
}

/* ---- records ---- */

int expindex_init(struct expindex *ix)
{
	memset(ix, 0, sizeof(*ix));
	ix->bm = bm25_new();
	return ix->bm ? 0 : -ENOMEM;
}

void expindex_done(struct expindex *ix)
{
	for (size_t d = 0; d < ix->n_docs; d++)
		free(ix->docs[d].buf); /* the tag numbers with it */
	free(ix->docs);
	free(ix->by_id);
	for (size_t a = 0; a < ix->n_agents; a++) {
		free(ix->agents[a].id);
		free(ix->agents[a].list.v);
		free(ix->agents[a].tc_key);
		free(ix->agents[a].tc_val);
	}
	free(ix->agents);
	free(ix->agent_table);
	for (size_t t = 0; t < ix->n_tags; t++)
		free(ix->tag_names[t]);
	free(ix->tag_names);
	free(ix->tag_count);
	free(ix->tag_table);
	free(ix->at_key);
	free(ix->at_val);
	for (size_t i = 0; i < ix->n_at; i++)
		free(ix->at_lists[i].v);
	free(ix->at_lists);
	bm25_free(ix->bm);
	free(ix->bm_doc);
	memset(ix, 0, sizeof(*ix));
}

/* ---- a record's JSON, less what its fields say again ---- */

#define HEAD_MAX                                                               \
	(sizeof("{\"id\":\"\",\"agent_id\":\"\",") + EXPID_LEN +               \
	 VMEM_AGENT_ID_MAX)
#define MID_MAX                                                                \
	(sizeof("\"timestamp\":\"\",\"importance\":10,") + VMEM_TIMESTAMP_LEN)

/* The head as a doc's fields render it, into out (HEAD_MAX); its
 * length, or 0 when the agent id would need escapes in JSON (its bytes
 * then differ from the raw ones: nothing is cut). */
static size_t head_render(const struct expindex *ix, const struct exp_doc *d,
			  char *out)
{
	const struct exp_agent *a = &ix->agents[d->agent];
	size_t n = 0;

	if (a->len > VMEM_AGENT_ID_MAX)
		return 0;
	for (size_t i = 0; i < a->len; i++)
		if ((unsigned char)a->id[i] < 0x20 || a->id[i] == '"' ||
		    a->id[i] == '\\' || a->id[i] == 0x7f)
			return 0;
	memcpy(out, "{\"id\":\"", 7);
	n = 7;
	expid_format(&d->id, out + n);
	n += EXPID_LEN;
	memcpy(out + n, "\",\"agent_id\":\"", 14);
	n += 14;
	memcpy(out + n, a->id, a->len);
	n += a->len;
	memcpy(out + n, "\",", 2);
	return n + 2;
}

/* The middle as a doc's fields render it, into out (MID_MAX); its
 * length. */
static size_t mid_render(const struct exp_doc *d, char *out)
{
	size_t n = 13;

	memcpy(out, "\"timestamp\":\"", 13);
	timestamp_format(d->ts, out + n);
	n += VMEM_TIMESTAMP_LEN;
	memcpy(out + n, "\",\"importance\":", 15);
	n += 15;
	if (d->importance >= 10)
		out[n++] = (char)('0' + d->importance / 10);
	out[n++] = (char)('0' + d->importance % 10);
	out[n++] = ',';
	return n;
}

size_t expindex_json_len(const struct expindex *ix, uint32_t doc)
{
	const struct exp_doc *d = &ix->docs[doc];
	char tmp[HEAD_MAX > MID_MAX ? HEAD_MAX : MID_MAX];
	size_t n = d->len;

	if (d->head_cut)
		n += head_render(ix, d, tmp) - 1; /* the kept '{' */
	if (d->mid_at)
		n += mid_render(d, tmp);
	return n;
}

void expindex_json(const struct expindex *ix, uint32_t doc, char *out)
{
	const struct exp_doc *d = &ix->docs[doc];
	size_t from = 0;

	if (d->head_cut) {
		out += head_render(ix, d, out);
		from = 1;
	}
	if (d->mid_at) {
		memcpy(out, d->buf + from, d->mid_at - from);
		out += d->mid_at - from;
		out += mid_render(d, out);
		from = d->mid_at;
	}
	memcpy(out, d->buf + from, d->len - from);
}

bool expindex_json_append(const struct expindex *ix, uint32_t doc,
			  struct buf *b)
{
	size_t n = expindex_json_len(ix, doc);

	if (!buf_reserve(b, n))
		return false;
	expindex_json(ix, doc, b->data + b->len);
	b->len += n;
	return true;
}

int expindex_set_record(struct expindex *ix, uint32_t doc, const char *json,
			size_t len, const struct experience *e)
{
	struct exp_doc *d = &ix->docs[doc];
	char head[HEAD_MAX], mid[MID_MAX];
	const char *m;
	uint32_t tags[EXP_TAGS_MAX];
	size_t hn, mn, keep, at, skip = 0, mid_at = 0;
	long agent;
	char *buf;

	if (e->n_tags > EXP_TAGS_MAX)
		return -ENOMEM; /* parsed records never have more */
	for (size_t i = 0; i < e->n_tags; i++) {
		long t = tag_intern(ix, e->tags[i]);

		if (t < 0)
			return -ENOMEM;
		tags[i] = (uint32_t)t;
	}
	agent = agent_intern(ix, e->agent_id, strlen(e->agent_id));
	if (agent < 0)
		return -ENOMEM;
	d->agent = (uint32_t)agent;
	d->ts = e->timestamp;
	d->importance = (uint8_t)e->importance;
	/* What is cut reads exactly as rendered, so it comes back byte for
	 * byte whatever the line's member order or spacing. */
	hn = head_render(ix, d, head);
	d->head_cut = hn && len > hn && memcmp(json, head, hn) == 0;
	if (d->head_cut)
		skip = hn - 1; /* keep the '{' */
	mn = mid_render(d, mid);
	m = memmem(json + skip, len - skip, mid, mn);
	if (m)
		mid_at = (size_t)(m - json) - skip;
	keep = len - skip - (m ? mn : 0);
	/* The tag numbers go after the JSON, in its allocation: a second
	 * one per record cost a malloc chunk for a few tags. */
	at = (keep + sizeof(uint32_t) - 1) & ~(sizeof(uint32_t) - 1);
	buf = malloc(at + e->n_tags * sizeof(*tags) + (at == 0));
	if (!buf)
		return -ENOMEM;
	if (d->head_cut)
		buf[0] = '{';
	if (m) {
		memcpy(buf + !!d->head_cut, json + skip + !!d->head_cut,
		       mid_at - !!d->head_cut);
		memcpy(buf + mid_at, m + mn, len - (size_t)(m - json) - mn);
	} else {
		memcpy(buf + !!d->head_cut, json + skip + !!d->head_cut,
		       keep - !!d->head_cut);
	}
	d->buf = buf;
	d->len = (uint32_t)keep;
	d->mid_at = (uint32_t)mid_at;
	d->n_tags = (uint8_t)e->n_tags;
	d->tags = NULL;
	if (e->n_tags) {
		d->tags = (uint32_t *)(void *)(buf + at);
		memcpy(d->tags, tags, e->n_tags * sizeof(*tags));
	}
	ix->n_with_record++;
	return 0;
}

const char *expindex_agent(const struct expindex *ix, uint32_t doc, size_t *len)
{
	const struct exp_agent *a = &ix->agents[ix->docs[doc].agent];

	*len = a->len;
	return a->id;
}

/* The three fields of a record for the search index. */
static void fields_of(const struct experience *e, struct bm25_field *f)
{
	static const unsigned weight[EXP_NFIELDS] = {
		EXP_WEIGHT_CONTEXT, EXP_WEIGHT_ACTION, EXP_WEIGHT_OUTCOME};

	for (int i = 0; i < EXP_NFIELDS; i++)
		f[i] = (struct bm25_field){e->text[i], e->text_len[i],
					   weight[i]};
}

/* A doc's record parsed from its JSON (for the search index). */
static int parse_doc(const struct expindex *ix, uint32_t doc,
		     struct exp_line *l)
{
	char msg[VMEM_ERRMSG_LEN];
	size_t len = expindex_json_len(ix, doc);
	char *json = malloc(len);
	int rc;

	if (!json)
		return -ENOMEM;
	expindex_json(ix, doc, json);
	rc = exp_parse_line(json, len, l, msg);
	free(json);
	if (rc != 0 || l->is_tombstone) {
		exp_line_done(l);
		return -ENOMEM; /* our own JSON: only memory can fail */
	}
	return 0;
}

/* Undo the lists of a partial activation: those of tags[0..n). */
static void unlist(struct expindex *ix, uint32_t doc, size_t n)
{
	struct exp_doc *d = &ix->docs[doc];

	for (size_t i = 0; i < n; i++)
		vec_remove(ix, at_find(ix, d->agent, d->tags[i]), doc);
	vec_remove(ix, &ix->agents[d->agent].list, doc);
}

int expindex_activate(struct expindex *ix, uint32_t doc,
		      const struct experience *e)
{
	struct exp_doc *d = &ix->docs[doc];
	struct exp_agent *a;
	struct bm25_field f[EXP_NFIELDS];
	struct exp_line parsed;
	size_t i;
	int rc;

	if (d->live || !d->buf)
		return 0;
	a = &ix->agents[d->agent];
	if (grow_array((void **)&ix->bm_doc, &ix->cap_bm, ix->n_bm + 1,
		       sizeof(*ix->bm_doc)) < 0)
		return -ENOMEM;
	/* Every allocation first (lists, count slots), then the counts. */
	for (i = 0; i < d->n_tags; i++)
		if (!tc_slot(a, d->tags[i], true))
			return -ENOMEM;
	if (vec_insert(ix, &a->list, doc) < 0)
		return -ENOMEM;
	for (i = 0; i < d->n_tags; i++) {
		struct docvec *v = at_intern(ix, d->agent, d->tags[i]);

		if (!v || vec_insert(ix, v, doc) < 0) {
			unlist(ix, doc, i);
			return -ENOMEM;
		}
	}
	if (!e) {
		rc = parse_doc(ix, doc, &parsed);
		if (rc < 0) {
			unlist(ix, doc, d->n_tags);
			return rc;
		}
	}
	fields_of(e ? e : &parsed.rec, f);
	rc = bm25_add(ix->bm, (uint32_t)ix->n_bm, f, EXP_NFIELDS);
	if (!e)
		exp_line_done(&parsed);
	if (rc < 0) {
		/* The BM25 number is spent: numbers only grow. */
		ix->bm_doc[ix->n_bm++] = NOT_FOUND;
		unlist(ix, doc, d->n_tags);
		return rc;
	}
	d->bm = (uint32_t)ix->n_bm;
	ix->bm_doc[ix->n_bm++] = doc;
	for (i = 0; i < d->n_tags; i++) {
		(*tc_slot(a, d->tags[i], false))++;
		ix->tag_count[d->tags[i]]++;
	}
	a->imp_sum += d->importance;
	ix->imp_sum += d->importance;
	ix->n_live++;
	d->live = true;
	return 0;
}

void expindex_deactivate(struct expindex *ix, uint32_t doc)
{
	struct exp_doc *d = &ix->docs[doc];
	struct exp_agent *a;
	struct bm25_field f[EXP_NFIELDS];
	struct exp_line parsed;

	if (!d->live)
		return;
	a = &ix->agents[d->agent];
	unlist(ix, doc, d->n_tags);
	for (size_t i = 0; i < d->n_tags; i++) {
		(*tc_slot(a, d->tags[i], false))--;
		ix->tag_count[d->tags[i]]--;
	}
	a->imp_sum -= d->importance;
	ix->imp_sum -= d->importance;
	ix->n_live--;
	d->live = false;
	ix->bm_doc[d->bm] = NOT_FOUND;
	/* Without memory to parse it, its terms keep their document counts
	 * (idf slightly low) until the next start; it is not returned. */
	if (parse_doc(ix, doc, &parsed) == 0) {
		fields_of(&parsed.rec, f);
		bm25_remove(ix->bm, d->bm, f, EXP_NFIELDS);
		exp_line_done(&parsed);
	}
}

/* ---- queries ---- */

static bool holds_all(const struct exp_doc *d, const long *tags, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t k;

		for (k = 0; k < d->n_tags; k++)
			if (d->tags[k] == (uint32_t)tags[i])
				break;
		if (k == d->n_tags)
			return false;
	}
	return true;
}

size_t expindex_retrieve(const struct expindex *ix, const struct exp_filter *f,
			 uint32_t *out, size_t limit)
{
	long agent = agent_find(ix, f->agent, f->agent_len);
	long tags[EXP_TAGS_MAX];
	const struct docvec *v;
	size_t pos, n = 0;

	if (agent < 0 || f->n_tags > EXP_TAGS_MAX)
		return 0;
	v = &ix->agents[agent].list;
	for (size_t i = 0; i < f->n_tags; i++) {
		const struct docvec *tv;

		tags[i] = tag_find(ix, f->tags[i]);
		if (tags[i] < 0)
			return 0;
		tv = at_find(ix, (uint32_t)agent, (uint32_t)tags[i]);
		if (!tv)
			return 0;
		if (tv->n < v->n)
			v = tv;
	}
	pos = upper_bound_ts(ix, v, f->until);
	if (f->after) {
		long ad = expindex_lookup(ix, f->after);
		int64_t ts = ad >= 0 && ix->docs[ad].buf ? ix->docs[ad].ts
							 : expid_usec(f->after);
		size_t p = lower_bound(ix, v, ts, f->after);

		if (p < pos)
			pos = p;
	}
	while (pos > 0 && n < limit) {
		const struct exp_doc *d = &ix->docs[v->v[--pos]];

		if (d->ts < f->since)
			break;
		if (d->importance < f->min_importance ||
		    !holds_all(d, tags, f->n_tags))
			continue;
		out[n++] = v->v[pos];
	}
	return n;
}

struct similar_ctx {
	const struct expindex *ix;
	long agent; /* -1: any */
	int min_importance;
};

/* Ties: importance, then timestamp (below 2^52 microseconds, the year
 * 2112). */
static bool accept_cb(void *ctx, uint32_t bm, uint64_t *tie)
{
	const struct similar_ctx *c = ctx;
	uint32_t doc = c->ix->bm_doc[bm];
	const struct exp_doc *d;
	uint64_t ts;

	if (doc == NOT_FOUND)
		return false;
	d = &c->ix->docs[doc];
	if ((c->agent >= 0 && d->agent != (uint32_t)c->agent) ||
	    d->importance < c->min_importance)
		return false;
	ts = d->ts < 0 ? 0 : (uint64_t)d->ts;
	if (ts >= 1ull << 52)
		ts = (1ull << 52) - 1;
	*tie = (uint64_t)d->importance << 52 | ts;
	return true;
}

int expindex_similar(struct expindex *ix, const struct bm25_query *q,
		     const char *agent, size_t agent_len, int min_importance,
		     size_t limit, struct exp_similar **out, size_t *n,
		     const char **terms, size_t *n_terms)
{
	struct similar_ctx c = {ix, -1, min_importance};
	struct bm25_hit *hits = NULL;
	size_t n_hits = 0, scored[BM25_TERMS_MAX], n_scored = 0;
	struct exp_similar *res;
	int rc;

	*out = NULL;
	*n = 0;
	*n_terms = 0;
	if (agent) {
		c.agent = agent_find(ix, agent, agent_len);
		if (c.agent < 0)
			return 0;
	}
	rc = bm25_search(ix->bm, q, limit, accept_cb, &c, &hits, &n_hits,
			 scored, &n_scored);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n_scored; i++)
		terms[i] = bm25_query_term(q, scored[i]);
	*n_terms = n_scored;
	if (n_hits == 0)
		return 0;
	res = malloc(n_hits * sizeof(*res));
	if (!res) {
		free(hits);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_hits; i++)
		res[i] = (struct exp_similar){ix->bm_doc[hits[i].doc],
					      hits[i].score, hits[i].matched};
	free(hits);
	*out = res;
	*n = n_hits;
	return 0;
}

static int count_cmp(const void *a, const void *b)
{
	const struct exp_count *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Sort the counts (most first, then by name) and keep the first
 * EXP_STATS_LIST_MAX. */
static void keep_top(struct exp_count *c, size_t *n)
{
	qsort(c, *n, sizeof(*c), count_cmp);
	if (*n > EXP_STATS_LIST_MAX)
		*n = EXP_STATS_LIST_MAX;
}

int expindex_stats(const struct expindex *ix, const char *agent,
		   size_t agent_len, struct exp_stats *out)
{
	long a = -1;

	memset(out, 0, sizeof(*out));
	if (agent) {
		const struct exp_agent *ag;

		a = agent_find(ix, agent, agent_len);
		if (a < 0 || ix->agents[a].list.n == 0)
			return 0;
		ag = &ix->agents[a];
		out->total = ag->list.n;
		out->imp_sum = ag->imp_sum;
		out->oldest = ix->docs[ag->list.v[0]].ts;
		out->newest = ix->docs[ag->list.v[ag->list.n - 1]].ts;
		out->tags = malloc((ag->tc_used ? ag->tc_used : 1) *
				   sizeof(*out->tags));
		if (!out->tags)
			return -ENOMEM;
		for (uint32_t i = 0; i < ag->tc_cap; i++)
			if (ag->tc_key[i] && ag->tc_val[i])
				out->tags[out->n_tags++] = (struct exp_count){
					ix->tag_names[ag->tc_key[i] - 1],
					ag->tc_val[i]};
		out->tags_total = out->n_tags;
		keep_top(out->tags, &out->n_tags);
		return 0;
	}
	out->total = ix->n_live;
	out->imp_sum = ix->imp_sum;
	out->tags = malloc((ix->n_tags ? ix->n_tags : 1) * sizeof(*out->tags));
	out->agents = malloc((ix->n_agents ? ix->n_agents : 1) *
			     sizeof(*out->agents));
	if (!out->tags || !out->agents) {
		exp_stats_done(out);
		return -ENOMEM;
	}
	for (size_t t = 0; t < ix->n_tags; t++)
		if (ix->tag_count[t])
			out->tags[out->n_tags++] = (struct exp_count){
				ix->tag_names[t], ix->tag_count[t]};
	for (size_t i = 0; i < ix->n_agents; i++) {
		const struct docvec *v = &ix->agents[i].list;

		if (!v->n)
			continue;
		out->agents[out->n_agents++] =
			(struct exp_count){ix->agents[i].id, v->n};
		if (out->n_agents == 1 || ix->docs[v->v[0]].ts < out->oldest)
			out->oldest = ix->docs[v->v[0]].ts;
		if (out->n_agents == 1 ||
		    ix->docs[v->v[v->n - 1]].ts > out->newest)
			out->newest = ix->docs[v->v[v->n - 1]].ts;
	}
	out->tags_total = out->n_tags;
	out->agents_total = out->n_agents;
	keep_top(out->tags, &out->n_tags);
	keep_top(out->agents, &out->n_agents);
	return 0;
}

void exp_stats_done(struct exp_stats *s)
{
	free(s->tags);
	free(s->agents);
	memset(s, 0, sizeof(*s));
}

/* realloc a list down to its length (kept as it is without memory). */
static void vec_trim(struct docvec *v)
{
	uint32_t *p;

	if (v->cap == v->n || v->n == 0)
		return;
	p = realloc(v->v, v->n * sizeof(*v->v));
	if (p) {
		v->v = p;
		v->cap = v->n;
	}
}

void expindex_trim(struct expindex *ix)
{
	for (size_t a = 0; a < ix->n_agents; a++)
		vec_trim(&ix->agents[a].list);
	for (size_t i = 0; i < ix->n_at; i++)
		vec_trim(&ix->at_lists[i]);
	bm25_trim(ix->bm);
}

size_t expindex_memory(const struct expindex *ix)
{
	size_t n = sizeof(*ix) + ix->cap_docs * sizeof(*ix->docs) +
		   ix->by_id_cap * sizeof(*ix->by_id) +
		   ix->cap_agents * sizeof(*ix->agents) +
		   ix->agent_table_cap * sizeof(*ix->agent_table) +
		   ix->cap_tags *
			   (sizeof(*ix->tag_names) + sizeof(*ix->tag_count)) +
		   ix->tag_table_cap * sizeof(*ix->tag_table) +
		   ix->at_cap * (sizeof(*ix->at_key) + sizeof(*ix->at_val)) +
		   ix->cap_at * sizeof(*ix->at_lists) +
		   ix->cap_bm * sizeof(*ix->bm_doc) + bm25_memory(ix->bm);

	for (size_t d = 0; d < ix->n_docs; d++)
		n += ix->docs[d].buf
			     ? ix->docs[d].len +
				       ix->docs[d].n_tags * sizeof(uint32_t)
			     : 0;
	for (size_t a = 0; a < ix->n_agents; a++)
		n += ix->agents[a].len + 1 +
		     ix->agents[a].list.cap * sizeof(uint32_t) +
		     ix->agents[a].tc_cap * 2 * sizeof(uint32_t);
	for (size_t i = 0; i < ix->n_at; i++)
		n += ix->at_lists[i].cap * sizeof(uint32_t);
	return n;
}

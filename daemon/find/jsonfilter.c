/* See jsonfilter.h. */
#include "jsonfilter.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

/* ---- containment ---- */

static bool is_container(const json_t *v)
{
	return json_is_object(v) || json_is_array(v);
}

/* An integer-valued real within int64 compares as that integer. */
static bool real_as_int(double d, json_int_t *out)
{
	if (!(d == floor(d)) || d < -9223372036854775808.0 ||
	    d >= 9223372036854775808.0)
		return false;
	*out = (json_int_t)d;
	return true;
}

/* jsonb scalar equality: same type; numbers by value. */
static bool scalar_eq(const json_t *a, const json_t *b)
{
	json_int_t i;

	if (json_is_number(a) && json_is_number(b)) {
		if (json_is_integer(a) && json_is_integer(b))
			return json_integer_value(a) == json_integer_value(b);
		if (json_is_real(a) && json_is_real(b))
			return json_real_value(a) == json_real_value(b);
		if (json_is_integer(a))
			return real_as_int(json_real_value(b), &i) &&
			       i == json_integer_value(a);
		return real_as_int(json_real_value(a), &i) &&
		       i == json_integer_value(b);
	}
	if (json_typeof(a) != json_typeof(b))
		return false;
	if (json_is_string(a))
		return json_string_length(a) == json_string_length(b) &&
		       memcmp(json_string_value(a), json_string_value(b),
			      json_string_length(a)) == 0;
	/* true, false, null: the type is the value. */
	return true;
}

static bool contains(const json_t *a, const json_t *b, bool top)
{
	const json_t *av, *bv;
	const char *key;
	size_t i, j;

	if (json_is_object(b)) {
		if (!json_is_object(a))
			return false;
		json_object_foreach((json_t *)b, key, bv)
		{
			av = json_object_get(a, key);
			if (!av || !contains(av, bv, false))
				return false;
		}
		return true;
	}
	if (json_is_array(b)) {
		if (!json_is_array(a))
			return false;
		for (i = 0; i < json_array_size(b); i++) {
			bv = json_array_get(b, i);
			for (j = 0; j < json_array_size(a); j++) {
				av = json_array_get(a, j);
				if (is_container(bv)
					    ? contains(av, bv, false)
					    : !is_container(av) &&
						      scalar_eq(av, bv))
					break;
			}
			if (j == json_array_size(a))
				return false;
		}
		return true;
	}
	/* b is a scalar. The top-level exception: an array holding it. */
	if (top && json_is_array(a)) {
		for (j = 0; j < json_array_size(a); j++) {
			av = json_array_get(a, j);
			if (!is_container(av) && scalar_eq(av, b))
				return true;
		}
		return false;
	}
	return !is_container(a) && scalar_eq(a, b);
}

bool jsonb_contains(const json_t *doc, const json_t *filter)
{
	return contains(doc, filter, true);
}

/* ---- posting keys ---- */

/*
 * A key: the path, each step 'k' + 4-byte length + the key's bytes or
 * 'a' (an array element), then the value: 'i' + 8 bytes (integers and
 * integral reals), 'd' + 8 bytes (other reals), 's' + the bytes, 't',
 * 'f', 'n', or 'O' / 'A' for a container of that type.
 */
struct keybuf {
	char *p;
	size_t len, cap;
};

static int kb_put(struct keybuf *k, const void *p, size_t n)
{
	size_t cap;
	char *q;

	if (k->len + n > k->cap) {
		cap = k->cap ? k->cap : 128;
		while (cap < k->len + n)
			cap *= 2;
		q = realloc(k->p, cap);
		if (!q)
			return -ENOMEM;
		k->p = q;
		k->cap = cap;
	}
	memcpy(k->p + k->len, p, n);
	k->len += n;
	return 0;
}

static int kb_value(struct keybuf *k, const json_t *v)
{
	json_int_t i;
	double d;
	char tag;
	int ret;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return kb_put(k, "O", 1);
	case JSON_ARRAY:
		return kb_put(k, "A", 1);
	case JSON_STRING:
		ret = kb_put(k, "s", 1);
		return ret ? ret
			   : kb_put(k, json_string_value(v),
				    json_string_length(v));
	case JSON_INTEGER:
		i = json_integer_value(v);
		ret = kb_put(k, "i", 1);
		return ret ? ret : kb_put(k, &i, sizeof(i));
	case JSON_REAL:
		d = json_real_value(v);
		if (real_as_int(d, &i)) {
			ret = kb_put(k, "i", 1);
			return ret ? ret : kb_put(k, &i, sizeof(i));
		}
		ret = kb_put(k, "d", 1);
		return ret ? ret : kb_put(k, &d, sizeof(d));
	case JSON_TRUE:
		tag = 't';
		break;
	case JSON_FALSE:
		tag = 'f';
		break;
	default:
		tag = 'n';
		break;
	}
	return kb_put(k, &tag, 1);
}

/* Called with each key of a value or of a filter's leaves. */
typedef int (*key_fn)(void *ctx, const char *key, size_t len);

struct walk {
	struct keybuf k;
	key_fn fn;
	void *ctx;
	size_t count, max;
	bool leaves_only; /* a filter: containers only when empty */
	bool inexact;	  /* a filter: a container inside an array */
};

static int emit(struct walk *w, const json_t *v)
{
	size_t mark = w->k.len;
	int ret;

	if (++w->count > w->max)
		return -E2BIG;
	ret = kb_value(&w->k, v);
	if (ret == 0)
		ret = w->fn(w->ctx, w->k.p, w->k.len);
	w->k.len = mark;
	return ret;
}

static int walk(struct walk *w, const json_t *v, int depth, bool in_array)
{
	size_t mark = w->k.len, i, klen;
	const char *key;
	uint32_t len32;
	json_t *c;
	int ret = 0;

	if (depth > JSONFILTER_DEPTH_MAX)
		return -E2BIG;
	if (!is_container(v))
		return emit(w, v);
	if (in_array)
		w->inexact = true;
	if (!w->leaves_only || (json_is_object(v) ? json_object_size(v)
						  : json_array_size(v)) == 0) {
		ret = emit(w, v);
		if (ret < 0)
			return ret;
	}
	if (json_is_object(v)) {
		json_object_keylen_foreach((json_t *)v, key, klen, c)
		{
			len32 = (uint32_t)klen;
			ret = kb_put(&w->k, "k", 1);
			if (ret == 0)
				ret = kb_put(&w->k, &len32, 4);
			if (ret == 0)
				ret = kb_put(&w->k, key, klen);
			if (ret == 0)
				ret = walk(w, c, depth + 1, false);
			w->k.len = mark;
			if (ret < 0)
				return ret;
		}
	} else {
		for (i = 0; i < json_array_size(v); i++) {
			ret = kb_put(&w->k, "a", 1);
			if (ret == 0)
				ret = walk(w, json_array_get(v, i), depth + 1,
					   true);
			w->k.len = mark;
			if (ret < 0)
				return ret;
		}
	}
	return 0;
}

static int walk_run(const json_t *v, bool leaves_only, size_t max, key_fn fn,
		    void *ctx, bool *inexact)
{
	struct walk w = {
		.fn = fn, .ctx = ctx, .max = max, .leaves_only = leaves_only};
	int ret;

	ret = walk(&w, v, 0, false);
	if (inexact)
		*inexact = w.inexact;
	free(w.k.p);
	return ret;
}

static int count_cb(void *ctx, const char *key, size_t len)
{
	(void)ctx;
	(void)key;
	(void)len;
	return 0;
}

int jsonfilter_check(const json_t *filter, char *msg, size_t msglen)
{
	int ret;

	ret = walk_run(filter, true, JSONFILTER_FILTER_NODES, count_cb, NULL,
		       NULL);
	if (ret == -E2BIG) {
		errmsg_set(msg, msglen,
			   "metadata filter deeper than %d or with more than "
			   "%d values",
			   JSONFILTER_DEPTH_MAX, JSONFILTER_FILTER_NODES);
		return -EINVAL;
	}
	if (ret < 0)
		errmsg_set(msg, msglen, "out of memory");
	return ret;
}

/* ---- the postings table: open addressing, linear probing ---- */

struct posting {
	char *key; /* NULL: empty bucket */
	size_t klen;
	uint64_t hash;
	uint32_t *ids;
	size_t n, cap;
};

struct jfindex {
	struct posting *tab;
	size_t cap, used, bytes;
};

static uint64_t hash_key(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--)
		h = (h ^ (unsigned char)*p++) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

struct jfindex *jfindex_new(void)
{
	struct jfindex *ix = calloc(1, sizeof(*ix));

	if (!ix)
		return NULL;
	ix->cap = 64;
	ix->tab = calloc(ix->cap, sizeof(*ix->tab));
	if (!ix->tab) {
		free(ix);
		return NULL;
	}
	return ix;
}

void jfindex_free(struct jfindex *ix)
{
	size_t i;

	if (!ix)
		return;
	for (i = 0; i < ix->cap; i++) {
		free(ix->tab[i].key);
		free(ix->tab[i].ids);
	}
	free(ix->tab);
	free(ix);
}

static struct posting *lookup(const struct jfindex *ix, const char *key,
			      size_t klen, uint64_t h)
{
	size_t i = h & (ix->cap - 1);

	for (;; i = (i + 1) & (ix->cap - 1)) {
		struct posting *p = &ix->tab[i];

		if (!p->key)
			return p;
		if (p->hash == h && p->klen == klen &&
		    memcmp(p->key, key, klen) == 0)
			return p;
	}
}

static int grow_table(struct jfindex *ix)
{
	struct posting *old = ix->tab, *p;
	size_t oldcap = ix->cap, i;

	ix->tab = calloc(oldcap * 2, sizeof(*ix->tab));
	if (!ix->tab) {
		ix->tab = old;
		return -ENOMEM;
	}
	ix->cap = oldcap * 2;
	for (i = 0; i < oldcap; i++) {
		if (!old[i].key)
			continue;
		p = lookup(ix, old[i].key, old[i].klen, old[i].hash);
		*p = old[i];
	}
	free(old);
	return 0;
}

/* Backward-shift deletion keeps every probe chain unbroken. */
static void delete_at(struct jfindex *ix, struct posting *p)
{
	size_t i = (size_t)(p - ix->tab), j = i, home;

	ix->bytes -= p->klen + p->cap * sizeof(uint32_t);
	free(p->key);
	free(p->ids);
	for (;;) {
		j = (j + 1) & (ix->cap - 1);
		if (!ix->tab[j].key)
			break;
		home = ix->tab[j].hash & (ix->cap - 1);
		/* Move j back to i unless its home lies in (i, j]. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			ix->tab[i] = ix->tab[j];
			i = j;
		}
	}
	memset(&ix->tab[i], 0, sizeof(ix->tab[i]));
	ix->used--;
}

/* Index of the first id >= x in p (binary search). */
static size_t lower_bound(const uint32_t *ids, size_t n, uint32_t x)
{
	size_t lo = 0, hi = n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (ids[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct add_ctx {
	struct jfindex *ix;
	uint32_t slot;
};

static int add_cb(void *ctx, const char *key, size_t klen)
{
	struct add_ctx *a = ctx;
	struct jfindex *ix = a->ix;
	uint64_t h = hash_key(key, klen);
	struct posting *p;
	size_t at, cap;
	uint32_t *ids;

	if ((ix->used + 1) * 4 > ix->cap * 3 && grow_table(ix) < 0)
		return -ENOMEM;
	p = lookup(ix, key, klen, h);
	if (!p->key) {
		p->key = malloc(klen ? klen : 1);
		if (!p->key)
			return -ENOMEM;
		memcpy(p->key, key, klen);
		p->klen = klen;
		p->hash = h;
		ix->used++;
		ix->bytes += klen;
	}
	/* Slots mostly come in ascending order: append. */
	at = p->n && p->ids[p->n - 1] >= a->slot
		     ? lower_bound(p->ids, p->n, a->slot)
		     : p->n;
	if (at < p->n && p->ids[at] == a->slot)
		return 0; /* the same key twice in one value */
	if (p->n == p->cap) {
		cap = p->cap ? p->cap * 2 : 4;
		ids = realloc(p->ids, cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		ix->bytes += (cap - p->cap) * sizeof(*ids);
		p->ids = ids;
		p->cap = cap;
	}
	memmove(p->ids + at + 1, p->ids + at, (p->n - at) * sizeof(*p->ids));
	p->ids[at] = a->slot;
	p->n++;
	return 0;
}

static int remove_cb(void *ctx, const char *key, size_t klen)
{
	struct add_ctx *a = ctx;
	struct posting *p;
	size_t at;

	p = lookup(a->ix, key, klen, hash_key(key, klen));
	if (!p->key)
		return 0;
	at = lower_bound(p->ids, p->n, a->slot);
	if (at == p->n || p->ids[at] != a->slot)
		return 0;
	memmove(p->ids + at, p->ids + at + 1,
		(p->n - at - 1) * sizeof(*p->ids));
	if (--p->n == 0)
		delete_at(a->ix, p);
	return 0;
}

int jfindex_add(struct jfindex *ix, uint32_t slot, const json_t *value)
{
	struct add_ctx a = {ix, slot};
	int ret;

	/* Check the limits first, so a refusal indexes nothing. */
	ret = walk_run(value, false, JSONFILTER_RECORD_POSTINGS, count_cb, NULL,
		       NULL);
	if (ret == 0)
		ret = walk_run(value, false, JSONFILTER_RECORD_POSTINGS, add_cb,
			       &a, NULL);
	if (ret == -ENOMEM)
		jfindex_remove(ix, slot, value);
	return ret;
}

void jfindex_remove(struct jfindex *ix, uint32_t slot, const json_t *value)
{
	struct add_ctx a = {ix, slot};

	walk_run(value, false, JSONFILTER_RECORD_POSTINGS, remove_cb, &a, NULL);
}

size_t jfindex_postings(const struct jfindex *ix)
{
	return ix->used;
}

size_t jfindex_memory(const struct jfindex *ix)
{
	return sizeof(*ix) + ix->cap * sizeof(*ix->tab) + ix->bytes;
}

/* ---- candidates ---- */

struct lists {
	const struct jfindex *ix;
	const struct posting **p;
	size_t n, cap;
	bool missing;
};

static int leaf_cb(void *ctx, const char *key, size_t klen)
{
	struct lists *l = ctx;
	const struct posting *p;
	const struct posting **q;

	p = lookup(l->ix, key, klen, hash_key(key, klen));
	if (!p->key) {
		l->missing = true;
		return 0;
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 8;
		q = realloc(l->p, l->cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		l->p = q;
	}
	l->p[l->n++] = p;
	return 0;
}

static int cmp_len(const void *a, const void *b)
{
	const struct posting *x = *(const struct posting *const *)a;
	const struct posting *y = *(const struct posting *const *)b;

	return x->n < y->n ? -1 : x->n > y->n;
}

/* Galloping search: the first index >= from where ids[i] >= x. */
static size_t gallop(const uint32_t *ids, size_t n, size_t from, uint32_t x)
{
	size_t step = 1, lo = from, hi;

	if (lo >= n || ids[lo] >= x)
		return lo;
	while (lo + step < n && ids[lo + step] < x) {
		lo += step;
		step *= 2;
	}
	hi = lo + step < n ? lo + step + 1 : n;
	return lo + 1 + lower_bound(ids + lo + 1, hi - lo - 1, x);
}

/* The intersection of the lists into out (room for the shortest). */
static size_t intersect(const struct posting **p, size_t np, uint32_t *out)
{
	size_t n = p[0]->n, i, j, k, *pos;

	memcpy(out, p[0]->ids, n * sizeof(*out));
	if (np == 1)
		return n;
	pos = calloc(np, sizeof(*pos));
	if (!pos)
		return SIZE_MAX;
	for (i = 0, k = 0; i < n; i++) {
		for (j = 1; j < np; j++) {
			pos[j] = gallop(p[j]->ids, p[j]->n, pos[j], out[i]);
			if (pos[j] == p[j]->n || p[j]->ids[pos[j]] != out[i])
				break;
		}
		if (j == np)
			out[k++] = out[i];
		else if (pos[j] == p[j]->n)
			break;
	}
	free(pos);
	return k;
}

/* The union of two sorted lists (the top-level scalar case). */
static size_t merge(const struct posting *a, const struct posting *b,
		    uint32_t *out)
{
	size_t i = 0, j = 0, k = 0, an = a ? a->n : 0, bn = b ? b->n : 0;

	while (i < an || j < bn) {
		if (j == bn || (i < an && a->ids[i] < b->ids[j]))
			out[k++] = a->ids[i++];
		else if (i == an || b->ids[j] < a->ids[i])
			out[k++] = b->ids[j++];
		else {
			out[k++] = a->ids[i++];
			j++;
		}
	}
	return k;
}

int jfindex_candidates(const struct jfindex *ix, const json_t *filter,
		       uint32_t **out, size_t *n, bool *exact)
{
	struct lists l = {.ix = ix};
	bool inexact = false;
	uint32_t *ids = NULL;
	size_t got;
	int ret;

	*out = NULL;
	*n = 0;
	*exact = true;
	if (!is_container(filter)) {
		/* A scalar, or (top level) an array holding it. */
		const struct posting *a, *b;
		struct keybuf k = {0};
		char step = 'a';

		ret = kb_value(&k, filter);
		if (ret < 0)
			return ret;
		a = lookup(ix, k.p, k.len, hash_key(k.p, k.len));
		k.len = 0;
		ret = kb_put(&k, &step, 1);
		if (ret == 0)
			ret = kb_value(&k, filter);
		if (ret < 0) {
			free(k.p);
			return ret;
		}
		b = lookup(ix, k.p, k.len, hash_key(k.p, k.len));
		free(k.p);
		a = a->key ? a : NULL;
		b = b->key ? b : NULL;
		if (!a && !b)
			return 0;
		ids = malloc(((a ? a->n : 0) + (b ? b->n : 0)) * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		*n = merge(a, b, ids);
		*out = ids;
		return 0;
	}
	ret = walk_run(filter, true, JSONFILTER_FILTER_NODES, leaf_cb, &l,
		       &inexact);
	if (ret == -E2BIG)
		ret = -EINVAL;
	if (ret < 0 || l.missing || l.n == 0)
		goto out;
	qsort(l.p, l.n, sizeof(*l.p), cmp_len);
	ids = malloc((l.p[0]->n ? l.p[0]->n : 1) * sizeof(*ids));
	if (!ids) {
		ret = -ENOMEM;
		goto out;
	}
	got = intersect(l.p, l.n, ids);
	if (got == SIZE_MAX) {
		free(ids);
		ret = -ENOMEM;
		goto out;
	}
	if (got == 0) {
		free(ids);
		ids = NULL;
	}
	*out = ids;
	*n = got;
	*exact = !inexact;
out:
	free(l.p);
	return ret;
}

int jfindex_match(const struct jfindex *ix, const json_t *filter,
		  jfindex_value_fn value_fn, void *ctx, uint32_t **out,
		  size_t *n)
{
	const json_t *v;
	size_t i, k = 0;
	bool exact;
	int ret;

	ret = jfindex_candidates(ix, filter, out, n, &exact);
	if (ret < 0 || exact)
		return ret;
	for (i = 0; i < *n; i++) {
		v = value_fn(ctx, (*out)[i]);
		if (v && jsonb_contains(v, filter))
			(*out)[k++] = (*out)[i];
	}
	*n = k;
	if (k == 0) {
		free(*out);
		*out = NULL;
	}
	return 0;
}

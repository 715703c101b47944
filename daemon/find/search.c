/*
 * Keyword search index. Vocabulary: open-addressing hash table (FNV-1a,
 * linear probing) of token ids; token bytes live in one arena. Each token
 * has a sorted posting list of slots (uint32_t, one entry per slot; lists
 * of up to two entries are stored inline). Prefix terms use an array of
 * token ids sorted by bytes: ids are dense and assigned in order, so the
 * ids >= n_sorted are the tokens not sorted yet; they are sorted and
 * merged in at the next prefix query. Queries accumulate per-slot term
 * masks in a cached array and clear only the slots they touched.
 * Phrases: each slot also has a small Bloom filter of the pairs of
 * consecutive tokens in its text (about one byte per token), so most
 * candidates that hold a phrase's words, but not side by side, are
 * rejected without reading their text.
 * Invariant: a slot is in a token's list iff the slot's indexed text
 * contains the token.
 */
#include "search.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize.h"

struct plist {
	union {
		uint32_t *arr;
		uint32_t inl[2];
	} u;
	uint32_t n;
	uint32_t cap; /* 0: inline, n <= 2 */
};

struct tok {
	uint32_t off; /* in arena */
	uint32_t len;
	uint32_t hash;
	uint32_t mark; /* generation of the last document that saw it */
	struct plist pl;
};

/* Bloom filter of a document's consecutive token pairs. */
struct pairs {
	uint32_t nbits; /* a multiple of 64 */
	uint8_t bits[];
};

struct search_index {
	size_t n_slots;
	struct pairs **pairs; /* per slot, NULL when not indexed */
	size_t pairs_bytes;
	uint64_t *doc_pairs; /* pair hashes of the document being added */
	uint32_t doc_pairs_n, doc_pairs_cap;
	int64_t prev_tok; /* previous token of the document being added */
	struct tok *toks;
	uint32_t n_toks, cap_toks;
	uint32_t *table;    /* 0: empty, else token id + 1 */
	uint32_t table_cap; /* power of two */
	char *arena;
	size_t arena_len, arena_cap;
	uint32_t *sorted; /* token ids 0..n_sorted-1 sorted by bytes */
	uint32_t n_sorted, cap_sorted;
	uint32_t *doc; /* distinct tokens of the document being added */
	uint32_t doc_n, doc_cap;
	uint32_t gen;
	size_t plist_bytes;
	uint64_t *mask;	 /* per slot: terms matched in the running query */
	uint32_t *stamp; /* per slot: in the current prefix union */
	uint32_t stamp_gen;
	uint32_t *touched; /* slots with a non-zero mask */
	uint32_t n_touched;
};

struct qtok {
	uint32_t off, len;
};

struct qterm {
	char *bytes;		/* folded tokens, concatenated */
	struct qtok *toks;	/* ntok entries */
	struct tok_span *spans; /* the same, as pointers into bytes */
	size_t ntok;
	bool prefix;   /* last token is a prefix */
	size_t dup_of; /* index of the first identical term (self if none) */
};

struct search_query {
	size_t n;
	size_t n_unique;
	uint64_t unique; /* bits of the first occurrence of each term */
	struct qterm t[];
};

static uint32_t fnv1a(const char *p, size_t len)
{
	uint32_t h = 2166136261u;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)p[i];
		h *= 16777619u;
	}
	return h;
}

static uint32_t *pl_data(struct plist *pl)
{
	return pl->cap ? pl->u.arr : pl->u.inl;
}

static const uint32_t *pl_cdata(const struct plist *pl)
{
	return pl->cap ? pl->u.arr : pl->u.inl;
}

/* First index i with a[i] >= v. */
static uint32_t lower_bound(const uint32_t *a, uint32_t n, uint32_t v)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int pl_insert(struct search_index *si, struct plist *pl, uint32_t v)
{
	uint32_t *a = pl_data(pl), pos = pl->n, ncap;

	if (pl->n && a[pl->n - 1] >= v) {
		pos = lower_bound(a, pl->n, v);
		if (a[pos] == v)
			return 0;
	}
	if (!pl->cap && pl->n == 2) {
		uint32_t *p = malloc(4 * sizeof(*p));

		if (!p)
			return -ENOMEM;
		memcpy(p, pl->u.inl, sizeof(pl->u.inl));
		pl->u.arr = p;
		pl->cap = 4;
		si->plist_bytes += 4 * sizeof(*p);
	} else if (pl->cap && pl->n == pl->cap) {
		uint32_t *p;

		if (pl->cap > UINT32_MAX / 2)
			return -ENOMEM;
		ncap = pl->cap + pl->cap / 2;
		p = realloc(pl->u.arr, (size_t)ncap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		si->plist_bytes += (size_t)(ncap - pl->cap) * sizeof(*p);
		pl->u.arr = p;
		pl->cap = ncap;
	}
	a = pl_data(pl);
	memmove(a + pos + 1, a + pos, (size_t)(pl->n - pos) * sizeof(*a));
	a[pos] = v;
	pl->n++;
	return 0;
}

static void pl_remove(struct search_index *si, struct plist *pl, uint32_t v)
{
	uint32_t *a = pl_data(pl), pos;

	pos = lower_bound(a, pl->n, v);
	if (pos == pl->n || a[pos] != v)
		return;
	memmove(a + pos, a + pos + 1, (size_t)(pl->n - pos - 1) * sizeof(*a));
	pl->n--;
	if (pl->cap && pl->n <= 2) {
		uint32_t *p = pl->u.arr;

		si->plist_bytes -= (size_t)pl->cap * sizeof(*p);
		memcpy(pl->u.inl, p, pl->n * sizeof(*p));
		free(p);
		pl->cap = 0;
	} else if (pl->cap > 8 && pl->n < pl->cap / 4) {
		uint32_t ncap = pl->cap / 2;
		uint32_t *p = realloc(pl->u.arr, (size_t)ncap * sizeof(*p));

		if (p) {
			si->plist_bytes -=
				(size_t)(pl->cap - ncap) * sizeof(*p);
			pl->u.arr = p;
			pl->cap = ncap;
		}
	}
}

static bool tok_eq(const struct search_index *si, uint32_t id, const char *p,
		   size_t len, uint32_t h)
{
	const struct tok *t = &si->toks[id];

	return t->hash == h && t->len == len &&
	       !memcmp(si->arena + t->off, p, len);
}

/* Token id of p, or -1. */
static int64_t lookup(const struct search_index *si, const char *p, size_t len)
{
	uint32_t h = fnv1a(p, len), m = si->table_cap - 1, i, e;

	for (i = h & m;; i = (i + 1) & m) {
		e = si->table[i];
		if (!e)
			return -1;
		if (tok_eq(si, e - 1, p, len, h))
			return e - 1;
	}
}

static int rehash(struct search_index *si, uint32_t ncap)
{
	uint32_t *t = calloc(ncap, sizeof(*t)), i, j;

	if (!t)
		return -ENOMEM;
	for (i = 0; i < si->n_toks; i++) {
		for (j = si->toks[i].hash & (ncap - 1); t[j];
		     j = (j + 1) & (ncap - 1))
			;
		t[j] = i + 1;
	}
	free(si->table);
	si->table = t;
	si->table_cap = ncap;
	return 0;
}

/* Token id of p, added to the vocabulary if new; or -ENOMEM. */
static int64_t intern(struct search_index *si, const char *p, size_t len)
{
	uint32_t h = fnv1a(p, len), m = si->table_cap - 1, i, e;
	struct tok *t;

	for (i = h & m;; i = (i + 1) & m) {
		e = si->table[i];
		if (!e)
			break;
		if (tok_eq(si, e - 1, p, len, h))
			return e - 1;
	}
	if (len > UINT32_MAX || si->arena_len + len > UINT32_MAX ||
	    si->n_toks >= UINT32_MAX / 4)
		return -ENOMEM;
	if (si->n_toks == si->cap_toks) {
		uint32_t ncap = si->cap_toks ? si->cap_toks * 2 : 256;

		t = realloc(si->toks, (size_t)ncap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		si->toks = t;
		si->cap_toks = ncap;
	}
	if (si->arena_len + len > si->arena_cap) {
		size_t ncap = si->arena_cap ? si->arena_cap * 2 : 4096;
		char *a;

		while (ncap < si->arena_len + len)
			ncap *= 2;
		a = realloc(si->arena, ncap);
		if (!a)
			return -ENOMEM;
		si->arena = a;
		si->arena_cap = ncap;
	}
	/* Keep the load factor at most 1/2. */
	if ((si->n_toks + 1) * 2 > si->table_cap) {
		if (rehash(si, si->table_cap * 2) < 0)
			return -ENOMEM;
		m = si->table_cap - 1;
		for (i = h & m; si->table[i]; i = (i + 1) & m)
			;
	}
	t = &si->toks[si->n_toks];
	memset(t, 0, sizeof(*t));
	t->off = (uint32_t)si->arena_len;
	t->len = (uint32_t)len;
	t->hash = h;
	memcpy(si->arena + si->arena_len, p, len);
	si->arena_len += len;
	si->table[i] = si->n_toks + 1;
	return si->n_toks++;
}

struct search_index *search_new(size_t n_slots)
{
	struct search_index *si;

	if (n_slots > UINT32_MAX)
		return NULL;
	si = calloc(1, sizeof(*si));
	if (!si)
		return NULL;
	si->n_slots = n_slots;
	si->table_cap = 1024;
	si->table = calloc(si->table_cap, sizeof(*si->table));
	si->mask = calloc(n_slots ? n_slots : 1, sizeof(*si->mask));
	si->stamp = calloc(n_slots ? n_slots : 1, sizeof(*si->stamp));
	si->touched = malloc((n_slots ? n_slots : 1) * sizeof(*si->touched));
	si->pairs = calloc(n_slots ? n_slots : 1, sizeof(*si->pairs));
	if (!si->table || !si->mask || !si->stamp || !si->touched ||
	    !si->pairs) {
		search_free(si);
		return NULL;
	}
	return si;
}

void search_free(struct search_index *si)
{
	uint32_t i;

	if (!si)
		return;
	for (i = 0; i < si->n_toks; i++)
		if (si->toks[i].pl.cap)
			free(si->toks[i].pl.u.arr);
	if (si->pairs)
		for (size_t s = 0; s < si->n_slots; s++)
			free(si->pairs[s]);
	free(si->pairs);
	free(si->doc_pairs);
	free(si->toks);
	free(si->table);
	free(si->arena);
	free(si->sorted);
	free(si->doc);
	free(si->mask);
	free(si->stamp);
	free(si->touched);
	free(si);
}

/* Start a new document generation for token marks. */
static void next_gen(struct search_index *si)
{
	uint32_t i;

	if (++si->gen == 0) {
		for (i = 0; i < si->n_toks; i++)
			si->toks[i].mark = 0;
		si->gen = 1;
	}
}

/* splitmix64 of a pair of token ids: two filter bits from one hash. */
static uint64_t pair_hash(uint32_t a, uint32_t b)
{
	uint64_t z = ((uint64_t)a << 32 | b) + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void pairs_set(struct pairs *f, uint64_t h)
{
	uint32_t a = (uint32_t)h % f->nbits, b = (uint32_t)(h >> 32) % f->nbits;

	f->bits[a / 8] |= (uint8_t)(1u << (a % 8));
	f->bits[b / 8] |= (uint8_t)(1u << (b % 8));
}

static bool pairs_has(const struct pairs *f, uint64_t h)
{
	uint32_t a = (uint32_t)h % f->nbits, b = (uint32_t)(h >> 32) % f->nbits;

	return (f->bits[a / 8] >> (a % 8) & 1) &&
	       (f->bits[b / 8] >> (b % 8) & 1);
}

/* The filter of the pairs collected for the document being added:
 * 8 bits per pair (two set per pair: ~5% false positives). */
static struct pairs *pairs_build(struct search_index *si)
{
	uint32_t nbits, i;
	struct pairs *f;

	nbits = si->doc_pairs_n < (1u << 17) ? si->doc_pairs_n * 8u : 1u << 20;
	nbits = (nbits + 63) / 64 * 64;
	if (nbits == 0)
		nbits = 64;
	f = calloc(1, sizeof(*f) + nbits / 8);
	if (!f)
		return NULL;
	f->nbits = nbits;
	for (i = 0; i < si->doc_pairs_n; i++)
		pairs_set(f, si->doc_pairs[i]);
	return f;
}

static void pairs_drop(struct search_index *si, size_t slot)
{
	if (!si->pairs[slot])
		return;
	si->pairs_bytes -= sizeof(struct pairs) + si->pairs[slot]->nbits / 8;
	free(si->pairs[slot]);
	si->pairs[slot] = NULL;
}

static int add_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct search_index *si = ctx;
	int64_t id = intern(si, p, len);

	(void)pos;
	if (id < 0)
		return (int)id;
	if (si->prev_tok >= 0) {
		if (si->doc_pairs_n == si->doc_pairs_cap) {
			uint32_t ncap =
				si->doc_pairs_cap ? si->doc_pairs_cap * 2 : 256;
			uint64_t *d = realloc(si->doc_pairs,
					      (size_t)ncap * sizeof(*d));

			if (!d)
				return -ENOMEM;
			si->doc_pairs = d;
			si->doc_pairs_cap = ncap;
		}
		si->doc_pairs[si->doc_pairs_n++] =
			pair_hash((uint32_t)si->prev_tok, (uint32_t)id);
	}
	si->prev_tok = id;
	if (si->toks[id].mark == si->gen)
		return 0;
	if (si->doc_n == si->doc_cap) {
		uint32_t ncap = si->doc_cap ? si->doc_cap * 2 : 256;
		uint32_t *d = realloc(si->doc, (size_t)ncap * sizeof(*d));

		if (!d)
			return -ENOMEM;
		si->doc = d;
		si->doc_cap = ncap;
	}
	si->toks[id].mark = si->gen;
	si->doc[si->doc_n++] = (uint32_t)id;
	return 0;
}

int search_add(struct search_index *si, size_t slot, const char *text,
	       size_t len)
{
	uint32_t i, j;
	int rc;

	if (slot >= si->n_slots)
		return -EINVAL;
	next_gen(si);
	si->doc_n = 0;
	si->doc_pairs_n = 0;
	si->prev_tok = -1;
	rc = tokenize(text, len, add_cb, si);
	if (rc < 0)
		goto out;
	/* Without a filter phrases are still found, only checked slower. */
	pairs_drop(si, slot);
	si->pairs[slot] = pairs_build(si);
	if (si->pairs[slot])
		si->pairs_bytes +=
			sizeof(struct pairs) + si->pairs[slot]->nbits / 8;
	for (i = 0; i < si->doc_n; i++) {
		rc = pl_insert(si, &si->toks[si->doc[i]].pl, (uint32_t)slot);
		if (rc < 0) {
			for (j = 0; j < i; j++)
				pl_remove(si, &si->toks[si->doc[j]].pl,
					  (uint32_t)slot);
			pairs_drop(si, slot);
			goto out;
		}
	}
	rc = 0;
out:
	return rc;
}

struct remove_ctx {
	struct search_index *si;
	uint32_t slot;
};

static int remove_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct remove_ctx *rc = ctx;
	struct search_index *si = rc->si;
	int64_t id = lookup(si, p, len);

	(void)pos;
	if (id < 0 || si->toks[id].mark == si->gen)
		return 0;
	si->toks[id].mark = si->gen;
	pl_remove(si, &si->toks[id].pl, rc->slot);
	return 0;
}

void search_remove(struct search_index *si, size_t slot, const char *text,
		   size_t len)
{
	struct remove_ctx rc = {si, (uint32_t)slot};
	uint32_t i;

	if (slot >= si->n_slots)
		return;
	pairs_drop(si, slot);
	next_gen(si);
	if (tokenize(text, len, remove_cb, &rc) == 0)
		return;
	/* Out of memory for a huge token: drop the slot everywhere. */
	for (i = 0; i < si->n_toks; i++)
		pl_remove(si, &si->toks[i].pl, (uint32_t)slot);
}

/* ---- queries ---- */

struct parse_ctx {
	struct qterm *t;
	size_t bytes_len, bytes_cap, toks_cap;
	int err;
};

static int parse_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct parse_ctx *pc = ctx;
	struct qterm *t = pc->t;

	(void)pos;
	if (pc->bytes_len + len > pc->bytes_cap) {
		size_t ncap = pc->bytes_cap ? pc->bytes_cap * 2 : 64;
		char *b;

		while (ncap < pc->bytes_len + len)
			ncap *= 2;
		b = realloc(t->bytes, ncap);
		if (!b)
			return -ENOMEM;
		t->bytes = b;
		pc->bytes_cap = ncap;
	}
	if (t->ntok == pc->toks_cap) {
		size_t ncap = pc->toks_cap ? pc->toks_cap * 2 : 4;
		struct qtok *q = realloc(t->toks, ncap * sizeof(*q));

		if (!q)
			return -ENOMEM;
		t->toks = q;
		pc->toks_cap = ncap;
	}
	memcpy(t->bytes + pc->bytes_len, p, len);
	t->toks[t->ntok].off = (uint32_t)pc->bytes_len;
	t->toks[t->ntok].len = (uint32_t)len;
	t->ntok++;
	pc->bytes_len += len;
	return 0;
}

static bool qterm_eq(const struct qterm *a, const struct qterm *b)
{
	size_t i;

	if (a->ntok != b->ntok || a->prefix != b->prefix)
		return false;
	for (i = 0; i < a->ntok; i++)
		if (a->toks[i].len != b->toks[i].len ||
		    memcmp(a->bytes + a->toks[i].off, b->bytes + b->toks[i].off,
			   a->toks[i].len))
			return false;
	return true;
}

int search_query_parse(const char *const *terms, const size_t *lens, size_t n,
		       struct search_query **out, char *msg, size_t msgn)
{
	struct search_query *q = NULL;
	size_t i, j, len;
	int rc = -EINVAL;

	*out = NULL;
	if (n == 0) {
		snprintf(msg, msgn, "no search terms");
		goto out;
	}
	if (n > SEARCH_TERMS_MAX) {
		snprintf(msg, msgn, "too many search terms (at most %d)",
			 SEARCH_TERMS_MAX);
		goto out;
	}
	q = calloc(1, sizeof(*q) + n * sizeof(q->t[0]));
	if (!q) {
		rc = -ENOMEM;
		goto out;
	}
	q->n = n;
	for (i = 0; i < n; i++) {
		struct parse_ctx pc = {&q->t[i], 0, 0, 0, 0};

		len = lens[i];
		if (len == 0) {
			snprintf(msg, msgn, "search term %zu is empty", i);
			goto out;
		}
		if (len > SEARCH_TERM_BYTES_MAX) {
			snprintf(msg, msgn,
				 "search term %zu is longer than %d bytes", i,
				 SEARCH_TERM_BYTES_MAX);
			goto out;
		}
		if (terms[i][len - 1] == '*') {
			q->t[i].prefix = true;
			len--;
		}
		rc = tokenize(terms[i], len, parse_cb, &pc);
		if (rc < 0)
			goto out;
		rc = -EINVAL;
		if (q->t[i].ntok == 0) {
			snprintf(msg, msgn, "search term %zu has no words", i);
			goto out;
		}
		q->t[i].spans = malloc(q->t[i].ntok * sizeof(*q->t[i].spans));
		if (!q->t[i].spans) {
			rc = -ENOMEM;
			goto out;
		}
		for (j = 0; j < q->t[i].ntok; j++) {
			q->t[i].spans[j].p =
				q->t[i].bytes + q->t[i].toks[j].off;
			q->t[i].spans[j].len = q->t[i].toks[j].len;
		}
		q->t[i].dup_of = i;
		for (j = 0; j < i; j++) {
			if (qterm_eq(&q->t[i], &q->t[j])) {
				q->t[i].dup_of = j;
				break;
			}
		}
		if (q->t[i].dup_of == i) {
			q->n_unique++;
			q->unique |= (uint64_t)1 << i;
		}
	}
	*out = q;
	q = NULL;
	rc = 0;
out:
	search_query_free(q);
	return rc;
}

uint64_t search_query_unique(const struct search_query *q)
{
	return q->unique;
}

void search_query_free(struct search_query *q)
{
	size_t i;

	if (!q)
		return;
	for (i = 0; i < q->n; i++) {
		free(q->t[i].bytes);
		free(q->t[i].toks);
		free(q->t[i].spans);
	}
	free(q);
}

static int cmp_tok_bytes(const struct search_index *si, uint32_t a, uint32_t b)
{
	const struct tok *x = &si->toks[a], *y = &si->toks[b];
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(si->arena + x->off, si->arena + y->off, n);

	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

static int qsort_tok_cb(const void *a, const void *b, void *ctx)
{
	return cmp_tok_bytes(ctx, *(const uint32_t *)a, *(const uint32_t *)b);
}

/* Sort the tokens added since the last call and merge them in. */
static int sorted_update(struct search_index *si)
{
	uint32_t k = si->n_toks - si->n_sorted, i, a, b, w;
	uint32_t *s;

	if (!k)
		return 0;
	if (si->n_toks > si->cap_sorted) {
		uint32_t ncap = si->cap_sorted ? si->cap_sorted : 1024;

		while (ncap < si->n_toks)
			ncap *= 2;
		s = realloc(si->sorted, (size_t)ncap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		si->sorted = s;
		si->cap_sorted = ncap;
	}
	s = si->sorted;
	/* New ids go to the tail, sorted, then merge from the back. */
	for (i = 0; i < k; i++)
		s[si->n_toks - k + i] = si->n_sorted + i;
	qsort_r(s + si->n_sorted, k, sizeof(*s), qsort_tok_cb, si);
	if (si->n_sorted) {
		uint32_t *tail = malloc((size_t)k * sizeof(*tail));

		if (!tail)
			return -ENOMEM;
		memcpy(tail, s + si->n_sorted, (size_t)k * sizeof(*tail));
		a = si->n_sorted;
		b = k;
		w = si->n_toks;
		while (b) {
			if (a && cmp_tok_bytes(si, s[a - 1], tail[b - 1]) > 0)
				s[--w] = s[--a];
			else
				s[--w] = tail[--b];
		}
		free(tail);
	}
	si->n_sorted = si->n_toks;
	return 0;
}

/* Range [*lo, *hi) of sorted[] whose tokens start with p. */
static void prefix_range(const struct search_index *si, const char *p,
			 size_t len, uint32_t *lo, uint32_t *hi)
{
	uint32_t l = 0, h = si->n_sorted;

	while (l < h) {
		uint32_t mid = l + (h - l) / 2;
		const struct tok *t = &si->toks[si->sorted[mid]];
		size_t n = t->len < len ? t->len : len;
		int c = memcmp(si->arena + t->off, p, n);

		if (c < 0 || (c == 0 && t->len < len))
			l = mid + 1;
		else
			h = mid;
	}
	*lo = l;
	for (h = l; h < si->n_sorted; h++) {
		const struct tok *t = &si->toks[si->sorted[h]];

		if (t->len < len || memcmp(si->arena + t->off, p, len))
			break;
	}
	*hi = h;
}

static void mark_slot(struct search_index *si, uint32_t slot, uint64_t bit)
{
	if (!si->mask[slot])
		si->touched[si->n_touched++] = slot;
	si->mask[slot] |= bit;
}

static void mark_list(struct search_index *si, const struct plist *pl,
		      uint64_t bit)
{
	const uint32_t *a = pl_cdata(pl);
	uint32_t i;

	for (i = 0; i < pl->n; i++)
		mark_slot(si, a[i], bit);
}

/* Posting list of an exact query token, or NULL. */
static const struct plist *exact_list(const struct search_index *si,
				      const struct qterm *t, size_t k)
{
	int64_t id = lookup(si, t->bytes + t->toks[k].off, t->toks[k].len);

	return id < 0 ? NULL : &si->toks[id].pl;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Candidates for a phrase, verified against the text; marks the bit. */
static int run_phrase(struct search_index *si, const struct qterm *t,
		      uint64_t bit, search_text_fn text_of, void *ctx)
{
	size_t n_exact = t->prefix ? t->ntok - 1 : t->ntok, i, best = 0;
	const struct plist **lists = NULL;
	uint32_t *cand = NULL, n_cand, c, lo, hi, j;
	uint64_t *pair = NULL; /* hashes of the exact adjacent token pairs */
	int64_t prev = -1;
	int rc = 0;

	lists = malloc(n_exact * sizeof(*lists));
	pair = malloc(n_exact * sizeof(*pair));
	if (!lists || !pair) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n_exact; i++) {
		int64_t id =
			lookup(si, t->bytes + t->toks[i].off, t->toks[i].len);

		if (id < 0 || !si->toks[id].pl.n)
			goto out; /* no match anywhere */
		lists[i] = &si->toks[id].pl;
		if (lists[i]->n < lists[best]->n)
			best = i;
		if (i > 0)
			pair[i - 1] = pair_hash((uint32_t)prev, (uint32_t)id);
		prev = id;
	}
	n_cand = lists[best]->n;
	cand = malloc((size_t)n_cand * sizeof(*cand));
	if (!cand) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(cand, pl_cdata(lists[best]), (size_t)n_cand * sizeof(*cand));
	for (i = 0; i < n_exact && n_cand; i++) {
		const uint32_t *a = pl_cdata(lists[i]);
		uint32_t n = lists[i]->n, w = 0, from = 0;

		if (i == best)
			continue;
		for (c = 0; c < n_cand; c++) {
			from += lower_bound(a + from, n - from, cand[c]);
			if (from == n)
				break;
			if (a[from] == cand[c])
				cand[w++] = cand[c];
		}
		n_cand = w;
	}
	if (t->prefix && n_cand) {
		rc = sorted_update(si);
		if (rc < 0)
			goto out;
		prefix_range(si, t->bytes + t->toks[t->ntok - 1].off,
			     t->toks[t->ntok - 1].len, &lo, &hi);
		if (++si->stamp_gen == 0) {
			memset(si->stamp, 0, si->n_slots * sizeof(*si->stamp));
			si->stamp_gen = 1;
		}
		for (j = lo; j < hi; j++) {
			const struct plist *pl = &si->toks[si->sorted[j]].pl;
			const uint32_t *a = pl_cdata(pl);
			uint32_t k;

			for (k = 0; k < pl->n; k++)
				si->stamp[a[k]] = si->stamp_gen;
		}
		for (c = 0, j = 0; c < n_cand; c++)
			if (si->stamp[cand[c]] == si->stamp_gen)
				cand[j++] = cand[c];
		n_cand = j;
	}
	for (c = 0; c < n_cand; c++) {
		const struct pairs *f = si->pairs[cand[c]];
		const char *text;
		size_t len;

		for (i = 0; f && i + 1 < n_exact; i++)
			if (!pairs_has(f, pair[i]))
				break;
		if (f && i + 1 < n_exact)
			continue; /* the words are never side by side */
		rc = text_of(ctx, cand[c], &text, &len);
		if (rc < 0)
			goto out;
		rc = tokenize_has_phrase(text, len, t->spans, t->ntok,
					 t->prefix);
		if (rc < 0)
			goto out;
		if (rc)
			mark_slot(si, cand[c], bit);
	}
	rc = 0;
out:
	free(lists);
	free(pair);
	free(cand);
	return rc;
}

static int run_term(struct search_index *si, const struct qterm *t,
		    uint64_t bit, search_text_fn text_of, void *ctx)
{
	const struct plist *pl;
	uint32_t lo, hi, j;
	int rc;

	if (t->ntok > 1)
		return run_phrase(si, t, bit, text_of, ctx);
	if (!t->prefix) {
		pl = exact_list(si, t, 0);
		if (pl)
			mark_list(si, pl, bit);
		return 0;
	}
	rc = sorted_update(si);
	if (rc < 0)
		return rc;
	prefix_range(si, t->bytes, t->toks[0].len, &lo, &hi);
	for (j = lo; j < hi; j++)
		mark_list(si, &si->toks[si->sorted[j]].pl, bit);
	return 0;
}

/* Score: the distinct terms among the matched bits. */
static unsigned score_of(const struct search_query *q, uint64_t m)
{
	m &= q->unique;
	m = m - ((m >> 1) & UINT64_C(0x5555555555555555));
	m = (m & UINT64_C(0x3333333333333333)) +
	    ((m >> 2) & UINT64_C(0x3333333333333333));
	m = (m + (m >> 4)) & UINT64_C(0x0f0f0f0f0f0f0f0f);
	return (unsigned)((m * UINT64_C(0x0101010101010101)) >> 56);
}

int search_run(struct search_index *si, const struct search_query *q,
	       bool match_all, size_t limit, search_text_fn text_of, void *ctx,
	       struct search_hit **hits, size_t *n_hits)
{
	size_t count[SEARCH_TERMS_MAX + 2] = {0}, start[SEARCH_TERMS_MAX + 2];
	struct search_hit *out = NULL;
	size_t i, n_out = 0, total;
	unsigned s;
	uint32_t slot;
	int rc = 0;

	*hits = NULL;
	*n_hits = 0;
	si->n_touched = 0;
	for (i = 0; i < q->n; i++) {
		if (q->t[i].dup_of != i)
			continue;
		rc = run_term(si, &q->t[i], (uint64_t)1 << i, text_of, ctx);
		if (rc < 0)
			goto out;
	}
	/* Duplicates share their first occurrence's bit. */
	for (i = 0; i < si->n_touched; i++) {
		uint64_t m = si->mask[si->touched[i]];
		size_t k;

		for (k = 0; k < q->n; k++)
			if (q->t[k].dup_of != k && (m >> q->t[k].dup_of & 1))
				m |= (uint64_t)1 << k;
		si->mask[si->touched[i]] = m;
	}
	/* Slot order: sort the touched list, or scan densely. */
	if (si->n_touched > si->n_slots / 16) {
		size_t w = 0;

		for (slot = 0; slot < si->n_slots; slot++)
			if (si->mask[slot])
				si->touched[w++] = slot;
	} else {
		qsort(si->touched, si->n_touched, sizeof(*si->touched),
		      cmp_u32);
	}
	/* Counting sort by score, descending, stable in slot order. */
	for (i = 0; i < si->n_touched; i++) {
		s = score_of(q, si->mask[si->touched[i]]);
		if (match_all && s != q->n_unique)
			continue;
		count[s]++;
	}
	total = 0;
	for (i = SEARCH_TERMS_MAX + 1; i-- > 0;) {
		start[i] = total;
		total += count[i];
	}
	n_out = limit && limit < total ? limit : total;
	if (n_out) {
		out = malloc(n_out * sizeof(*out));
		if (!out) {
			rc = -ENOMEM;
			goto out;
		}
	}
	for (i = 0; i < si->n_touched; i++) {
		uint64_t m = si->mask[si->touched[i]];
		size_t at;

		s = score_of(q, m);
		if (match_all && s != q->n_unique)
			continue;
		at = start[s]++;
		if (at < n_out) {
			out[at].slot = si->touched[i];
			out[at].score = s;
			out[at].matched = m;
		}
	}
	*hits = out;
	*n_hits = n_out;
	out = NULL;
out:
	for (i = 0; i < si->n_touched; i++)
		si->mask[si->touched[i]] = 0;
	si->n_touched = 0;
	free(out);
	return rc;
}

size_t search_memory(const struct search_index *si)
{
	return sizeof(*si) + (size_t)si->cap_toks * sizeof(*si->toks) +
	       (size_t)si->table_cap * sizeof(*si->table) + si->arena_cap +
	       (size_t)si->cap_sorted * sizeof(*si->sorted) +
	       (size_t)si->doc_cap * sizeof(*si->doc) + si->plist_bytes +
	       si->pairs_bytes +
	       (size_t)si->doc_pairs_cap * sizeof(*si->doc_pairs) +
	       si->n_slots * (sizeof(*si->mask) + sizeof(*si->stamp) +
			      sizeof(*si->touched) + sizeof(*si->pairs));
}

/*
 * Keyword search index.
 *
 * Vocabulary: an open-addressing hash table (FNV-1a, linear probing) of
 * token ids; token bytes live in one arena; for prefixes, the ids are also
 * kept sorted by bytes in buckets keyed by a token's first two bytes (a
 * new token is one insertion into a small sorted array, never a sort of
 * the whole vocabulary).
 *
 * Postings: each token has a list of blocks sorted by slot; a block holds
 * up to BLOCK_DOCS entries (fewer bytes than BLOCK_BYTES unless it holds a
 * single entry), its first slot, and bytes: per entry a varint header
 * (slot delta from the previous entry << 1 | 1 if it has one position),
 * then either that position as a varint, or the byte length of the
 * position list and the positions (first absolute, then deltas, varints).
 * The array of block headers is the skip table. A rare token keeps its
 * few entries inside its own 32-byte entry (the first slot as a varint,
 * then the block's bytes), and a block of at most 8 bytes keeps them
 * inside its header, so rare tokens cost no allocation. Appending a slot
 * after a token's last one (loads in slot order) touches one block's
 * tail; any other insertion or removal moves the bytes of one block.
 *
 * Queries: each distinct term becomes a stream of slots (one token's
 * list; a union of many tokens' lists for a prefix, enumerated in windows
 * of a bitmap; an intersection checked on positions for a phrase), and
 * the streams are merged in slot order with a threshold: a slot is looked
 * at only when enough streams reach it for its score to enter the best
 * `limit` hits (WAND with unit weights); once `limit` hits of the best
 * possible score are known the query ends.
 *
 * Invariant: a slot is in a token's list iff the slot's indexed text
 * contains the token, with exactly its positions.
 */
#include "search.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize.h"

#define SLOT_END     UINT32_MAX
#define BLOCK_DOCS   128
#define BLOCK_BYTES  2048
#define INLINE_BYTES 8	/* a block's bytes kept in its header */
#define TOK_INLINE   24 /* a token's postings kept in its entry */
/* A prefix of more tokens than this checks a lone far slot on its text
 * rather than seeking every token's list there. */
#define UNION_TEXT_K 32
#define UNION_FAR    4096
#define WIN_MIN	     4096
#define WIN_MAX	     65536

/* ---- varints ---- */

static size_t varint_put(uint8_t *p, uint32_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

static size_t varint_len(uint32_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* Our own bytes: no bounds to check. */
static inline uint32_t varint_get(const uint8_t **pp)
{
	const uint8_t *p = *pp;
	uint32_t v = *p++, b, s = 7;

	if (v >= 0x80) {
		v &= 0x7f;
		do {
			b = *p++;
			v |= (b & 0x7f) << s;
			s += 7;
		} while (b >= 0x80);
	}
	*pp = p;
	return v;
}

/* Past one entry's body, given its header. */
static inline const uint8_t *body_skip(const uint8_t *p, uint32_t hdr)
{
	uint32_t n;

	if (hdr & 1) {
		while (*p++ & 0x80)
			;
		return p;
	}
	n = varint_get(&p);
	return p + n;
}

/* ---- structures ---- */

struct pblock {
	union {
		uint8_t *p;
		uint8_t inl[INLINE_BYTES];
	} d;
	uint32_t first; /* slot of the first entry (its delta is 0) */
	uint32_t len;	/* bytes used */
	uint32_t cap;	/* bytes allocated; 0: inline */
	uint32_t n;	/* entries */
};

/* The blocks of a token with more than one, the skip table. */
struct plist {
	uint32_t nb, cb;
	struct pblock b[];
};

/* How a token keeps its postings (bits 30-31 of tok.len). */
enum tmode {
	TM_NONE, /* none */
	TM_INL,	 /* in u.inl: the first slot as a varint, then one block's
		    bytes (their count in bits 24-28) */
	TM_ONE,	 /* one block, u.one */
	TM_MANY, /* u.pl */
};

#define TOK_LEN_MASK 0xffffffu
#define TOK_ILEN(t)  (((t)->len >> 24) & 0x1f)
#define TOK_MODE(t)  ((enum tmode)((t)->len >> 30))
#define TOK_SET(t, m)                                                          \
	((t)->len = ((t)->len & ~(3u << 30)) | (uint32_t)(m) << 30)

struct tok {
	uint32_t off;  /* bytes in the arena */
	uint32_t len;  /* bits 0-23 its length; 24-28, 30-31: enum tmode */
	uint32_t df;   /* slots holding it */
	uint32_t last; /* the largest of them (when df > 0) */
	union {
		struct pblock one;
		struct plist *pl;
		uint8_t inl[TOK_INLINE];
	} u;
};

/* Token ids whose first two bytes are the bucket's, sorted by bytes. */
struct vbucket {
	uint32_t *ids;
	uint32_t n, cap;
};

struct occ {
	uint32_t id, pos;
};

struct search_index {
	size_t n_slots;
	uint64_t gen; /* bumped by every change of the postings */
	struct tok *toks;
	uint32_t n_toks, cap_toks;
	uint32_t *table;    /* 0: empty, else token id + 1 */
	uint32_t table_cap; /* power of two */
	char *arena;
	size_t arena_len, arena_cap;
	struct vbucket *vb[256]; /* by first byte: 256 buckets by second */
	size_t vb_bytes;
	size_t post_bytes; /* block bytes and block arrays */
	/* scratch of search_add / search_remove */
	struct occ *occ;
	uint32_t n_occ, cap_occ;
	uint8_t *ebuf;
	size_t ebuf_cap;
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

static uint32_t tok_len(const struct tok *t)
{
	return t->len & TOK_LEN_MASK;
}

/* ---- blocks ---- */

static uint8_t *blk_bytes(struct pblock *b)
{
	return b->cap ? b->d.p : b->d.inl;
}

static const uint8_t *blk_cbytes(const struct pblock *b)
{
	return b->cap ? b->d.p : b->d.inl;
}

/* Room for need bytes in b (its bytes kept). */
static int blk_reserve(struct search_index *si, struct pblock *b, size_t need)
{
	size_t ncap;
	uint8_t *p;

	if (need <= (b->cap ? b->cap : INLINE_BYTES))
		return 0;
	if (need > UINT32_MAX / 2)
		return -ENOMEM;
	ncap = (need + need / 4 + 15) & ~(size_t)15;
	if (b->cap) {
		p = realloc(b->d.p, ncap);
		if (!p)
			return -ENOMEM;
		si->post_bytes += ncap - b->cap;
	} else {
		p = malloc(ncap);
		if (!p)
			return -ENOMEM;
		memcpy(p, b->d.inl, b->len);
		si->post_bytes += ncap;
	}
	b->d.p = p;
	b->cap = (uint32_t)ncap;
	return 0;
}

/* Give back the room b does not use: always (a block that stopped
 * growing) or once it shrank below a quarter. */
static void blk_fit(struct search_index *si, struct pblock *b, bool always)
{
	size_t ncap;
	uint8_t *p;

	if (!b->cap || (!always && b->len >= b->cap / 4))
		return;
	if (b->len <= INLINE_BYTES) {
		p = b->d.p;
		memcpy(b->d.inl, p, b->len);
		free(p);
		si->post_bytes -= b->cap;
		b->cap = 0;
		return;
	}
	ncap = (b->len + 7) & ~(size_t)7;
	if (ncap >= b->cap)
		return;
	p = realloc(b->d.p, ncap);
	if (!p)
		return; /* keeps the larger one */
	si->post_bytes -= b->cap - ncap;
	b->d.p = p;
	b->cap = (uint32_t)ncap;
}

static void blk_release(struct search_index *si, struct pblock *b)
{
	if (b->cap) {
		free(b->d.p);
		si->post_bytes -= b->cap;
	}
	memset(b, 0, sizeof(*b));
}

/* Where slot s goes in a block: the first entry with a slot >= s. */
struct epos {
	uint32_t off;	  /* its byte offset (len: none) */
	uint32_t slot;	  /* its slot, or SLOT_END */
	uint32_t hdr;	  /* its header */
	uint32_t hdr_len; /* its header's bytes */
	uint32_t prev;	  /* the slot of the entry before (idx > 0) */
	uint32_t idx;	  /* its index */
};

static void blk_seek(const struct pblock *b, uint32_t s, struct epos *e)
{
	const uint8_t *base = blk_cbytes(b), *p = base, *end = base + b->len;
	uint32_t slot = b->first, idx = 0, prev = 0;

	while (p < end) {
		const uint8_t *q = p;
		uint32_t h = varint_get(&q), sl = slot + (h >> 1);

		if (sl >= s) {
			e->off = (uint32_t)(p - base);
			e->slot = sl;
			e->hdr = h;
			e->hdr_len = (uint32_t)(q - p);
			e->prev = prev;
			e->idx = idx;
			return;
		}
		p = body_skip(q, h);
		prev = slot = sl;
		idx++;
	}
	e->off = b->len;
	e->slot = SLOT_END;
	e->hdr = 0;
	e->hdr_len = 0;
	e->prev = prev;
	e->idx = idx;
}

/* Replace bytes [off, off + old) of b by the n bytes at src. */
static int blk_splice(struct search_index *si, struct pblock *b, uint32_t off,
		      uint32_t old, const uint8_t *src, size_t n)
{
	uint8_t *base;
	int rc;

	if (n > old) {
		rc = blk_reserve(si, b, (size_t)b->len + (n - old));
		if (rc < 0)
			return rc;
	}
	base = blk_bytes(b);
	memmove(base + off + n, base + off + old, b->len - off - old);
	memcpy(base + off, src, n);
	b->len = (uint32_t)(b->len + n - old);
	return 0;
}

/* Insert slot s (not in b) with its encoded body before the entry at e.
 * scratch has room for the body and 10 more bytes. */
static int blk_insert(struct search_index *si, struct pblock *b,
		      const struct epos *e, uint32_t s, bool single,
		      const uint8_t *body, size_t body_len, uint8_t *scratch)
{
	size_t n = 0;
	uint32_t delta = e->idx == 0 ? 0 : s - e->prev;
	int rc;

	n += varint_put(scratch + n, delta << 1 | (single ? 1u : 0u));
	memcpy(scratch + n, body, body_len);
	n += body_len;
	if (e->slot != SLOT_END)
		n += varint_put(scratch + n, (e->slot - s) << 1 | (e->hdr & 1));
	rc = blk_splice(si, b, e->off, e->hdr_len, scratch, n);
	if (rc < 0)
		return rc;
	if (e->idx == 0)
		b->first = s;
	b->n++;
	return 0;
}

/* Remove the entry at e from b. */
static void blk_remove(struct search_index *si, struct pblock *b,
		       const struct epos *e)
{
	const uint8_t *base = blk_cbytes(b);
	const uint8_t *q = base + e->off + e->hdr_len;
	uint8_t hdr[5] = {0};
	uint32_t end, next_h, next_len = 0, next_slot = 0;
	size_t n = 0;

	q = body_skip(q, e->hdr);
	end = (uint32_t)(q - base);
	if (end < b->len) {
		const uint8_t *r = q;

		next_h = varint_get(&r);
		next_len = (uint32_t)(r - q);
		next_slot = e->slot + (next_h >> 1);
		n = varint_put(hdr, (e->idx == 0 ? 0 : next_slot - e->prev)
						    << 1 |
					    (next_h & 1));
	}
	/* Never grows: the new header is no longer than the two it
	 * replaces. */
	blk_splice(si, b, e->off, end - e->off + next_len, hdr, n);
	if (e->idx == 0 && n)
		b->first = next_slot;
	b->n--;
}

/* The last slot of a block. */
static uint32_t blk_last(const struct pblock *b)
{
	const uint8_t *p = blk_cbytes(b), *end = p + b->len;
	uint32_t slot = b->first;

	while (p < end) {
		uint32_t h = varint_get(&p);

		slot += h >> 1;
		p = body_skip(p, h);
	}
	return slot;
}

/* ---- a token's list of blocks ---- */

static size_t plist_size(uint32_t cb)
{
	return sizeof(struct plist) + (size_t)cb * sizeof(struct pblock);
}

/* The token's blocks and their number (TM_INL: unpack first). */
static struct pblock *tok_blocks(struct tok *t, uint32_t *nb)
{
	switch (TOK_MODE(t)) {
	case TM_ONE:
		*nb = 1;
		return &t->u.one;
	case TM_MANY:
		*nb = t->u.pl->nb;
		return t->u.pl->b;
	default:
		*nb = 0;
		return NULL;
	}
}

/* Make room for a zeroed block at index i. */
static int tok_open_block(struct search_index *si, struct tok *t, uint32_t i)
{
	struct plist *pl;
	uint32_t ncap;

	switch (TOK_MODE(t)) {
	case TM_NONE:
		memset(&t->u.one, 0, sizeof(t->u.one));
		TOK_SET(t, TM_ONE);
		return 0;
	case TM_ONE:
		pl = malloc(plist_size(4));
		if (!pl)
			return -ENOMEM;
		si->post_bytes += plist_size(4);
		pl->cb = 4;
		pl->nb = 1;
		pl->b[0] = t->u.one;
		t->u.pl = pl;
		TOK_SET(t, TM_MANY);
		break;
	default:
		pl = t->u.pl;
		if (pl->nb == pl->cb) {
			ncap = pl->cb + pl->cb / 2;
			pl = realloc(pl, plist_size(ncap));
			if (!pl)
				return -ENOMEM;
			si->post_bytes += plist_size(ncap) - plist_size(pl->cb);
			pl->cb = ncap;
			t->u.pl = pl;
		}
	}
	pl = t->u.pl;
	memmove(&pl->b[i + 1], &pl->b[i],
		(size_t)(pl->nb - i) * sizeof(pl->b[0]));
	memset(&pl->b[i], 0, sizeof(pl->b[0]));
	pl->nb++;
	return 0;
}

/* Drop block i (already released). */
static void tok_close_block(struct search_index *si, struct tok *t, uint32_t i)
{
	struct plist *pl;

	if (TOK_MODE(t) == TM_ONE) {
		TOK_SET(t, TM_NONE);
		return;
	}
	pl = t->u.pl;
	memmove(&pl->b[i], &pl->b[i + 1],
		(size_t)(pl->nb - i - 1) * sizeof(pl->b[0]));
	if (--pl->nb == 1) {
		t->u.one = pl->b[0];
		si->post_bytes -= plist_size(pl->cb);
		free(pl);
		TOK_SET(t, TM_ONE);
	}
}

/* Index of the block where slot s belongs: the last one whose first slot
 * is <= s, or 0. */
static uint32_t blocks_find(const struct pblock *a, uint32_t nb, uint32_t s)
{
	uint32_t lo = 0, hi = nb;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (a[mid].first <= s)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Split block i of t in two halves by entries. */
static int tok_split(struct search_index *si, struct tok *t, uint32_t i)
{
	uint32_t nblk, slot, k, mid, h = 0, hl, off;
	struct pblock *a = tok_blocks(t, &nblk), *b = &a[i], *nb;
	const uint8_t *base = blk_cbytes(b), *p = base, *q;
	uint8_t hdr[5];
	size_t hn, rest;
	int rc;

	slot = b->first;
	mid = b->n / 2;
	for (k = 0; k < mid; k++) {
		h = varint_get(&p);
		slot += h >> 1;
		p = body_skip(p, h);
	}
	off = (uint32_t)(p - base);
	q = p;
	h = varint_get(&q);
	hl = (uint32_t)(q - p);
	slot += h >> 1;
	rc = tok_open_block(si, t, i + 1);
	if (rc < 0)
		return rc;
	a = tok_blocks(t, &nblk);
	b = &a[i];
	nb = &a[i + 1];
	base = blk_cbytes(b);
	hn = varint_put(hdr, h & 1);
	rest = b->len - off - hl;
	rc = blk_reserve(si, nb, hn + rest);
	if (rc < 0) {
		tok_close_block(si, t, i + 1);
		return rc;
	}
	memcpy(blk_bytes(nb), hdr, hn);
	memcpy(blk_bytes(nb) + hn, base + off + hl, rest);
	nb->len = (uint32_t)(hn + rest);
	nb->first = slot;
	nb->n = b->n - mid;
	b->len = off;
	b->n = mid;
	blk_fit(si, b, true);
	return 0;
}

/* A token's postings kept in its entry, moved out to one block. 0 or
 * -ENOMEM. */
static int tok_unpack(struct search_index *si, struct tok *t)
{
	struct pblock b = {0};
	const uint8_t *p = t->u.inl;
	uint32_t ilen;

	if (TOK_MODE(t) != TM_INL)
		return 0;
	b.first = varint_get(&p);
	ilen = TOK_ILEN(t) - (uint32_t)(p - t->u.inl);
	b.n = t->df;
	if (blk_reserve(si, &b, ilen) < 0)
		return -ENOMEM;
	memcpy(blk_bytes(&b), p, ilen);
	b.len = ilen;
	t->u.one = b;
	t->len &= TOK_LEN_MASK;
	TOK_SET(t, TM_ONE);
	return 0;
}

/* Keep a token's postings in its entry when they fit there. */
static void tok_pack(struct search_index *si, struct tok *t)
{
	uint8_t tmp[TOK_INLINE];
	struct pblock *b = &t->u.one;
	size_t n;

	if (TOK_MODE(t) != TM_ONE || varint_len(b->first) + b->len > TOK_INLINE)
		return;
	n = varint_put(tmp, b->first);
	memcpy(tmp + n, blk_cbytes(b), b->len);
	n += b->len;
	blk_release(si, b);
	memcpy(t->u.inl, tmp, n);
	t->len = tok_len(t) | (uint32_t)n << 24;
	TOK_SET(t, TM_INL);
}

/* The bytes of a token kept inline, as a block over buf (room for cap
 * bytes; the block must never grow past it). */
static void inl_block(const struct tok *t, struct pblock *b, uint8_t *buf,
		      uint32_t cap)
{
	const uint8_t *p = t->u.inl;

	memset(b, 0, sizeof(*b));
	b->first = varint_get(&p);
	b->len = TOK_ILEN(t) - (uint32_t)(p - t->u.inl);
	b->n = t->df;
	b->cap = cap;
	b->d.p = buf;
	memcpy(buf, p, b->len);
}

/* Put a block made by inl_block back: inline when it fits, else as the
 * token's one block. 0 or -ENOMEM (the token unchanged). */
static int inl_store(struct search_index *si, struct tok *t,
		     const struct pblock *b)
{
	struct pblock one = {0};
	size_t n;

	if (b->n == 0) {
		t->len &= TOK_LEN_MASK;
		TOK_SET(t, TM_NONE);
		return 0;
	}
	if (varint_len(b->first) + b->len <= TOK_INLINE) {
		n = varint_put(t->u.inl, b->first);
		memcpy(t->u.inl + n, b->d.p, b->len);
		n += b->len;
		t->len = tok_len(t) | (uint32_t)n << 24;
		TOK_SET(t, TM_INL);
		return 0;
	}
	if (blk_reserve(si, &one, b->len) < 0)
		return -ENOMEM;
	memcpy(blk_bytes(&one), b->d.p, b->len);
	one.len = b->len;
	one.first = b->first;
	one.n = b->n;
	t->u.one = one;
	t->len &= TOK_LEN_MASK;
	TOK_SET(t, TM_ONE);
	return 0;
}

/* list_insert for a token kept inline, on a copy of its bytes on the
 * stack: no allocation unless the result outgrows the entry. 1 when
 * done, 0 when it does not fit the copy (the general path then), or
 * -errno. */
static int inl_insert(struct search_index *si, struct tok *t, uint32_t s,
		      bool single, const uint8_t *body, size_t body_len,
		      uint8_t *scratch)
{
	uint8_t buf[128];
	struct pblock b;
	struct epos e;
	int rc;

	if (TOK_ILEN(t) + body_len + 10 > sizeof(buf))
		return 0;
	inl_block(t, &b, buf, sizeof(buf));
	blk_seek(&b, s, &e);
	if (e.slot == s)
		return -EEXIST;
	rc = blk_insert(si, &b, &e, s, single, body, body_len, scratch);
	if (rc == 0)
		rc = inl_store(si, t, &b);
	if (rc < 0)
		return rc;
	if (s > t->last)
		t->last = s;
	t->df++;
	return 1;
}

/* Add slot s (not in the list) with its encoded body. scratch has room
 * for the body and 10 more bytes. */
static int list_insert(struct search_index *si, struct tok *t, uint32_t s,
		       bool single, const uint8_t *body, size_t body_len,
		       uint8_t *scratch)
{
	struct pblock *a, *b;
	struct epos e;
	uint32_t i, nb;
	size_t elen;
	int rc;

	if (TOK_MODE(t) == TM_INL) {
		rc = inl_insert(si, t, s, single, body, body_len, scratch);
		if (rc != 0)
			return rc < 0 ? rc : 0;
	}
	rc = tok_unpack(si, t);
	if (rc < 0)
		return rc;
	a = tok_blocks(t, &nb);
	if (nb == 0 || s > t->last) {
		elen = varint_len(nb ? (s - t->last) << 1 : 0) + body_len;
		b = nb ? &a[nb - 1] : NULL;
		if (!b || b->n >= BLOCK_DOCS ||
		    (size_t)b->len + elen > BLOCK_BYTES) {
			/* A new block at the end; the full one is done. */
			if (b)
				blk_fit(si, b, true);
			rc = tok_open_block(si, t, nb);
			if (rc < 0)
				goto out;
			i = nb;
			a = tok_blocks(t, &nb);
			b = &a[i];
			e.off = 0;
			e.idx = 0;
		} else {
			i = nb - 1;
			e.off = b->len;
			e.idx = b->n;
			e.prev = t->last;
		}
		e.slot = SLOT_END;
		e.hdr = 0;
		e.hdr_len = 0;
		rc = blk_insert(si, b, &e, s, single, body, body_len, scratch);
		if (rc < 0) {
			if (b->n == 0) {
				blk_release(si, b);
				tok_close_block(si, t, i);
			}
			goto out;
		}
		t->last = s;
		t->df++;
		goto out;
	}
	i = blocks_find(a, nb, s);
	b = &a[i];
	blk_seek(b, s, &e);
	if (e.slot == s) {
		rc = -EEXIST;
		goto out;
	}
	rc = blk_insert(si, b, &e, s, single, body, body_len, scratch);
	if (rc < 0)
		goto out;
	t->df++;
	if (b->n > BLOCK_DOCS || (b->len > BLOCK_BYTES && b->n > 1))
		tok_split(si, t, i); /* too big is only slower */
out:
	tok_pack(si, t);
	return rc;
}

/* Remove slot s from the list if it is there. */
static void list_remove(struct search_index *si, struct tok *t, uint32_t s)
{
	struct pblock *a, *b;
	struct epos e;
	uint32_t i, nb;

	if (t->df == 0 || s > t->last)
		return;
	if (TOK_MODE(t) == TM_INL) {
		/* Removing never grows it: done on a copy of its bytes. */
		uint8_t buf[TOK_INLINE];
		struct pblock ib;

		inl_block(t, &ib, buf, sizeof(buf));
		blk_seek(&ib, s, &e);
		if (e.slot != s)
			return;
		blk_remove(si, &ib, &e);
		t->df--;
		if (s == t->last && ib.n)
			t->last = blk_last(&ib);
		inl_store(si, t, &ib); /* fits inline: never fails */
		return;
	}
	a = tok_blocks(t, &nb);
	i = blocks_find(a, nb, s);
	b = &a[i];
	blk_seek(b, s, &e);
	if (e.slot == s) {
		blk_remove(si, b, &e);
		t->df--;
		if (b->n == 0) {
			blk_release(si, b);
			tok_close_block(si, t, i);
		} else {
			blk_fit(si, b, false);
		}
		a = tok_blocks(t, &nb);
		if (s == t->last && nb)
			t->last = blk_last(&a[nb - 1]);
	}
	tok_pack(si, t);
}

/* ---- vocabulary ---- */

static const char *tok_bytes(const struct search_index *si, uint32_t id)
{
	return si->arena + si->toks[id].off;
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);

	if (c)
		return c;
	return an < bn ? -1 : an > bn;
}

static bool tok_eq(const struct search_index *si, uint32_t id, const char *p,
		   size_t len)
{
	const struct tok *t = &si->toks[id];

	return tok_len(t) == len && !memcmp(si->arena + t->off, p, len);
}

/* Token id of p, or -1. */
static int64_t lookup(const struct search_index *si, const char *p, size_t len)
{
	uint32_t h = fnv1a(p, len), m = si->table_cap - 1, i, e;

	for (i = h & m;; i = (i + 1) & m) {
		e = si->table[i];
		if (!e)
			return -1;
		if (tok_eq(si, e - 1, p, len))
			return e - 1;
	}
}

static int rehash(struct search_index *si, uint32_t ncap)
{
	uint32_t *t = calloc(ncap, sizeof(*t)), i, j;

	if (!t)
		return -ENOMEM;
	for (i = 0; i < si->n_toks; i++) {
		for (j = fnv1a(tok_bytes(si, i), tok_len(&si->toks[i])) &
			 (ncap - 1);
		     t[j]; j = (j + 1) & (ncap - 1))
			;
		t[j] = i + 1;
	}
	free(si->table);
	si->table = t;
	si->table_cap = ncap;
	return 0;
}

static struct vbucket *bucket_of(struct search_index *si, const char *p,
				 size_t len)
{
	unsigned b0 = (unsigned char)p[0],
		 b1 = len > 1 ? (unsigned char)p[1] : 0;

	if (!si->vb[b0]) {
		si->vb[b0] = calloc(256, sizeof(struct vbucket));
		if (!si->vb[b0])
			return NULL;
		si->vb_bytes += 256 * sizeof(struct vbucket);
	}
	return &si->vb[b0][b1];
}

/* First index in bucket v of a token >= p (by bytes). */
static uint32_t bucket_lower(const struct search_index *si,
			     const struct vbucket *v, const char *p, size_t len)
{
	uint32_t lo = 0, hi = v->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct tok *t = &si->toks[v->ids[mid]];

		if (cmp_bytes(si->arena + t->off, tok_len(t), p, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int bucket_add(struct search_index *si, uint32_t id, const char *p,
		      size_t len)
{
	struct vbucket *v = bucket_of(si, p, len);
	uint32_t at;

	if (!v)
		return -ENOMEM;
	if (v->n == v->cap) {
		uint32_t ncap = v->cap ? v->cap + (v->cap + 1) / 2 : 2;
		uint32_t *ids = realloc(v->ids, (size_t)ncap * sizeof(*ids));

		if (!ids)
			return -ENOMEM;
		si->vb_bytes += (size_t)(ncap - v->cap) * sizeof(*ids);
		v->ids = ids;
		v->cap = ncap;
	}
	at = bucket_lower(si, v, p, len);
	memmove(v->ids + at + 1, v->ids + at, (v->n - at) * sizeof(*v->ids));
	v->ids[at] = id;
	v->n++;
	return 0;
}

/* Token id of p, added to the vocabulary if new; or -ENOMEM. */
static int64_t intern(struct search_index *si, const char *p, size_t len)
{
	uint32_t h = fnv1a(p, len), m = si->table_cap - 1, i, e, id;
	struct tok *t;

	for (i = h & m;; i = (i + 1) & m) {
		e = si->table[i];
		if (!e)
			break;
		if (tok_eq(si, e - 1, p, len))
			return e - 1;
	}
	if (len > TOK_LEN_MASK || si->arena_len + len > UINT32_MAX ||
	    si->n_toks >= UINT32_MAX / 4)
		return -ENOMEM;
	if (si->n_toks == si->cap_toks) {
		uint32_t ncap =
			si->cap_toks ? si->cap_toks + si->cap_toks / 2 : 256;

		t = realloc(si->toks, (size_t)ncap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		si->toks = t;
		si->cap_toks = ncap;
	}
	if (si->arena_len + len > si->arena_cap) {
		size_t ncap = si->arena_cap ? si->arena_cap : 4096;
		char *a;

		while (ncap < si->arena_len + len)
			ncap += ncap / 2;
		a = realloc(si->arena, ncap);
		if (!a)
			return -ENOMEM;
		si->arena = a;
		si->arena_cap = ncap;
	}
	/* Keep the load factor at most 0.7. */
	if ((size_t)(si->n_toks + 1) * 10 > (size_t)si->table_cap * 7) {
		if (rehash(si, si->table_cap * 2) < 0)
			return -ENOMEM;
		m = si->table_cap - 1;
		for (i = h & m; si->table[i]; i = (i + 1) & m)
			;
	}
	id = si->n_toks;
	t = &si->toks[id];
	memset(t, 0, sizeof(*t));
	t->off = (uint32_t)si->arena_len;
	t->len = (uint32_t)len; /* TM_NONE */
	memcpy(si->arena + si->arena_len, p, len);
	if (bucket_add(si, id, p, len) < 0)
		return -ENOMEM; /* the arena bytes are reused next time */
	si->arena_len += len;
	si->table[i] = id + 1;
	si->n_toks++;
	return id;
}

/* ---- the index ---- */

struct search_index *search_new(size_t n_slots)
{
	struct search_index *si;

	if (n_slots > INT32_MAX)
		return NULL;
	si = calloc(1, sizeof(*si));
	if (!si)
		return NULL;
	si->n_slots = n_slots;
	si->table_cap = 1024;
	si->table = calloc(si->table_cap, sizeof(*si->table));
	if (!si->table) {
		search_free(si);
		return NULL;
	}
	return si;
}

void search_free(struct search_index *si)
{
	uint32_t i, j;

	if (!si)
		return;
	for (i = 0; i < si->n_toks; i++) {
		struct tok *t = &si->toks[i];
		uint32_t nb;
		struct pblock *a = tok_blocks(t, &nb);

		for (j = 0; j < nb; j++)
			if (a[j].cap)
				free(a[j].d.p);
		if (TOK_MODE(t) == TM_MANY)
			free(t->u.pl);
	}
	for (i = 0; i < 256; i++) {
		if (!si->vb[i])
			continue;
		for (j = 0; j < 256; j++)
			free(si->vb[i][j].ids);
		free(si->vb[i]);
	}
	free(si->toks);
	free(si->table);
	free(si->arena);
	free(si->occ);
	free(si->ebuf);
	free(si);
}

static int add_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct search_index *si = ctx;
	int64_t id = intern(si, p, len);

	if (id < 0)
		return (int)id;
	if (pos > UINT32_MAX / 2)
		return -ENOMEM;
	if (si->n_occ == si->cap_occ) {
		uint32_t ncap = si->cap_occ ? si->cap_occ * 2 : 256;
		struct occ *o = realloc(si->occ, (size_t)ncap * sizeof(*o));

		if (!o)
			return -ENOMEM;
		si->occ = o;
		si->cap_occ = ncap;
	}
	si->occ[si->n_occ].id = (uint32_t)id;
	si->occ[si->n_occ].pos = (uint32_t)pos;
	si->n_occ++;
	return 0;
}

static int cmp_occ(const void *a, const void *b)
{
	const struct occ *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Room in the encoding scratch for n bytes. */
static int ebuf_reserve(struct search_index *si, size_t n)
{
	uint8_t *p;

	if (n <= si->ebuf_cap)
		return 0;
	n = n < 4096 ? 4096 : n * 2;
	p = realloc(si->ebuf, n);
	if (!p)
		return -ENOMEM;
	si->ebuf = p;
	si->ebuf_cap = n;
	return 0;
}

int search_add(struct search_index *si, size_t slot, const char *text,
	       size_t len)
{
	uint32_t i, j, k, done = 0;
	int rc;

	if (slot >= si->n_slots)
		return -EINVAL;
	si->gen++;
	si->n_occ = 0;
	rc = tokenize(text, len, add_cb, si);
	if (rc < 0)
		goto out;
	if (si->n_occ)
		qsort(si->occ, si->n_occ, sizeof(*si->occ), cmp_occ);
	for (i = 0; i < si->n_occ; i = j) {
		size_t n = 0, body, need;
		uint32_t prev = 0;
		uint8_t *e;

		for (j = i; j < si->n_occ && si->occ[j].id == si->occ[i].id;
		     j++)
			;
		/* The body at e, the scratch of list_insert after it. */
		need = (size_t)(j - i) * 5 + 5;
		rc = ebuf_reserve(si, 2 * need + 16);
		if (rc < 0)
			goto undo;
		e = si->ebuf;
		if (j - i == 1) {
			n = varint_put(e, si->occ[i].pos);
		} else {
			body = 0;
			for (k = i; k < j; k++) {
				body += varint_put(e + 5 + body,
						   si->occ[k].pos - prev);
				prev = si->occ[k].pos;
			}
			n = varint_put(e, (uint32_t)body);
			memmove(e + n, e + 5, body);
			n += body;
		}
		rc = list_insert(si, &si->toks[si->occ[i].id], (uint32_t)slot,
				 j - i == 1, e, n, e + need);
		if (rc < 0)
			goto undo;
		done = j;
	}
	rc = 0;
	goto out;
undo:
	for (k = 0; k < done; k++)
		if (k == 0 || si->occ[k].id != si->occ[k - 1].id)
			list_remove(si, &si->toks[si->occ[k].id],
				    (uint32_t)slot);
out:
	si->n_occ = 0;
	return rc;
}

struct remove_ctx {
	struct search_index *si;
	uint32_t *ids;
	size_t n, cap;
};

static int remove_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct remove_ctx *rc = ctx;
	int64_t id = lookup(rc->si, p, len);

	(void)pos;
	if (id < 0)
		return 0;
	if (rc->n == rc->cap) {
		size_t ncap = rc->cap ? rc->cap * 2 : 256;
		uint32_t *ids = realloc(rc->ids, ncap * sizeof(*ids));

		if (!ids)
			return -ENOMEM;
		rc->ids = ids;
		rc->cap = ncap;
	}
	rc->ids[rc->n++] = (uint32_t)id;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

void search_remove(struct search_index *si, size_t slot, const char *text,
		   size_t len)
{
	struct remove_ctx rc = {si, NULL, 0, 0};
	uint32_t i;

	if (slot >= si->n_slots)
		return;
	si->gen++;
	if (tokenize(text, len, remove_cb, &rc) == 0) {
		if (rc.n)
			qsort(rc.ids, rc.n, sizeof(*rc.ids), cmp_u32);
		for (i = 0; i < rc.n; i++)
			if (i == 0 || rc.ids[i] != rc.ids[i - 1])
				list_remove(si, &si->toks[rc.ids[i]],
					    (uint32_t)slot);
	} else {
		/* Out of memory: drop the slot everywhere. */
		for (i = 0; i < si->n_toks; i++)
			list_remove(si, &si->toks[i], (uint32_t)slot);
	}
	free(rc.ids);
}

size_t search_memory(const struct search_index *si)
{
	return sizeof(*si) + (size_t)si->cap_toks * sizeof(*si->toks) +
	       (size_t)si->table_cap * sizeof(*si->table) + si->arena_cap +
	       si->vb_bytes + si->post_bytes +
	       (size_t)si->cap_occ * sizeof(*si->occ) + si->ebuf_cap;
}

/* ---- query terms ---- */

struct parse_ctx {
	struct qterm *t;
	size_t bytes_len, bytes_cap, toks_cap;
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
		struct parse_ctx pc = {&q->t[i], 0, 0, 0};

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

/* ---- cursors over a token's list ---- */

struct pcur {
	const struct pblock *blk;
	uint32_t nb, bi;
	const uint8_t *p, *end; /* the next entry in block bi */
	uint32_t slot;		/* the current entry's, or SLOT_END */
	uint32_t hdr;		/* the current entry's header */
	const uint8_t *body;	/* its positions */
	uint32_t body_len;	/* their bytes (unless a single one) */
	size_t *units;		/* work done, counted by the query */
	struct pblock own;	/* the one block of a token kept inline */
};

/* Hot: inlined into every walk of a list. */
#define HOT static inline __attribute__((always_inline))

HOT void pc_read(struct pcur *c)
{
	const uint8_t *p = c->p;
	uint32_t h = *p++;

	if (h >= 0x80) {
		p--;
		h = varint_get(&p);
	}
	c->slot += h >> 1;
	c->hdr = h;
	c->body = p;
	if (h & 1) {
		while (*p++ & 0x80)
			;
	} else {
		c->body_len = varint_get(&p);
		c->body = p;
		p += c->body_len;
	}
	c->p = p;
	(*c->units)++;
}

HOT void pc_load(struct pcur *c)
{
	const struct pblock *b = &c->blk[c->bi];

	c->p = blk_cbytes(b);
	c->end = c->p + b->len;
	c->slot = b->first;
	pc_read(c);
}

/* A cursor on t's first entry. It points into t's blocks, or its own
 * copy of an inline one: it must not move while in use. */
static void pc_open(struct pcur *c, const struct tok *t, size_t *units)
{
	c->units = units;
	c->bi = 0;
	if (TOK_MODE(t) == TM_INL) {
		const uint8_t *p = t->u.inl;

		memset(&c->own, 0, sizeof(c->own));
		c->own.first = varint_get(&p);
		c->own.len = TOK_ILEN(t) - (uint32_t)(p - t->u.inl);
		c->own.n = t->df;
		c->own.cap = 1; /* d.p: the token's bytes */
		c->own.d.p = (uint8_t *)p;
		c->blk = &c->own;
		c->nb = 1;
	} else {
		c->blk = tok_blocks((struct tok *)t, &c->nb);
	}
	if (c->nb == 0) {
		c->slot = SLOT_END;
		return;
	}
	pc_load(c);
}

HOT void pc_next(struct pcur *c)
{
	if (c->p < c->end) {
		pc_read(c);
		return;
	}
	if (++c->bi >= c->nb) {
		c->slot = SLOT_END;
		return;
	}
	pc_load(c);
}

/* To the first entry with slot >= target. */
HOT void pc_seek(struct pcur *c, uint32_t target)
{
	if (c->slot >= target)
		return;
	if (c->bi + 1 < c->nb && c->blk[c->bi + 1].first <= target) {
		c->bi += 1 + blocks_find(c->blk + c->bi + 1, c->nb - c->bi - 1,
					 target);
		pc_load(c);
	}
	while (c->slot < target)
		pc_next(c);
}

/* The current entry's positions into out (room for cap); their count. */
static size_t pc_positions(const struct pcur *c, uint32_t *out, size_t cap)
{
	const uint8_t *p = c->body, *end;
	uint32_t v = 0;
	size_t n = 0;

	if (c->hdr & 1) {
		if (cap)
			out[0] = varint_get(&p);
		return 1;
	}
	for (end = p + c->body_len; p < end; n++) {
		v += varint_get(&p);
		if (n < cap)
			out[n] = v;
	}
	return n;
}

/* ---- query execution ---- */

enum stype { ST_NONE, ST_EXACT, ST_UNION, ST_PHRASE };

/* How far a seek may go: ENUM finds the exact next member; ALIGN (to
 * another stream's slot) lets a big prefix answer with a lower bound
 * after checking that one slot's text. */
enum seek_mode { SEEK_ENUM, SEEK_ALIGN };

struct stream {
	enum stype type;
	bool exact;   /* cur is a member; else its next member is >= cur */
	uint32_t cur; /* SLOT_END: no more */
	size_t term;  /* index of the term in the query */
	uint32_t n_ids;
	uint32_t *ids;	  /* tokens: EXACT 1, UNION k, PHRASE the exact ones */
	struct pcur *pcs; /* one cursor per token */
	bool stale;	  /* the cursors must be opened again */
	/* UNION: a bitmap of the members in [win_lo, win_hi) */
	uint64_t *bits;
	uint32_t win_lo, win_hi, win_size;
	/* PHRASE: the last token is a prefix, checked on the text */
	bool verify_text;
	uint32_t **pos;	 /* positions per cursor */
	size_t *pos_cap; /* their room */
};

struct level {
	uint32_t *slot;
	uint64_t *mask;
	size_t n, cap;
};

struct search_exec {
	struct search_index *si;
	const struct search_query *q;
	bool match_all;
	size_t limit;
	search_text_fn text_of;
	void *ctx;
	uint64_t gen; /* si->gen when the cursors were placed */
	bool placed;  /* ever */
	size_t n_st;
	struct stream st[SEARCH_TERMS_MAX];
	struct stream *order[SEARCH_TERMS_MAX]; /* by cur */
	unsigned theta; /* the least score a later slot needs */
	unsigned cap;	/* the highest score still looked for */
	bool all_first; /* first pass: slots with score cap only */
	bool paged;	/* only hits ranked after (after_score, after_slot) */
	unsigned after_score;
	uint32_t after_slot;
	uint32_t from; /* every slot before it is decided */
	bool done;
	size_t units;
	struct level lv[SEARCH_TERMS_MAX + 1]; /* hits by score */
};

static unsigned popcount64(uint64_t m)
{
	m = m - ((m >> 1) & UINT64_C(0x5555555555555555));
	m = (m & UINT64_C(0x3333333333333333)) +
	    ((m >> 2) & UINT64_C(0x3333333333333333));
	m = (m + (m >> 4)) & UINT64_C(0x0f0f0f0f0f0f0f0f);
	return (unsigned)((m * UINT64_C(0x0101010101010101)) >> 56);
}

/* Whether text holds the stream's term. 1, 0 or -ENOMEM. */
static int text_has(const struct search_exec *e, const struct stream *s,
		    const char *text, size_t len)
{
	const struct qterm *t = &e->q->t[s->term];

	return tokenize_has_phrase(text, len, t->spans, t->ntok, t->prefix);
}

/* Whether slot's current text holds the stream's term. */
static int slot_has(struct search_exec *e, const struct stream *s,
		    uint32_t slot)
{
	const char *text;
	size_t len;
	int rc = e->text_of(e->ctx, slot, &text, &len);

	e->units += 16;
	return rc < 0 ? rc : text_has(e, s, text, len);
}

static void st_open_cursors(struct search_exec *e, struct stream *s)
{
	uint32_t i;

	for (i = 0; i < s->n_ids; i++)
		pc_open(&s->pcs[i], &e->si->toks[s->ids[i]], &e->units);
	s->stale = false;
}

/* Enumerate the members of a union from target on, a window at a time. */
static void union_window(struct search_exec *e, struct stream *s,
			 uint32_t target)
{
	uint32_t i, lo = SLOT_END, hi;

	if (s->stale)
		st_open_cursors(e, s);
	for (i = 0; i < s->n_ids; i++) {
		pc_seek(&s->pcs[i], target);
		if (s->pcs[i].slot < lo)
			lo = s->pcs[i].slot;
	}
	if (lo == SLOT_END) {
		s->cur = SLOT_END;
		s->exact = true;
		return;
	}
	hi = SLOT_END - lo > s->win_size ? lo + s->win_size : SLOT_END;
	memset(s->bits, 0, (size_t)s->win_size / 8);
	for (i = 0; i < s->n_ids; i++) {
		struct pcur *c = &s->pcs[i];

		while (c->slot < hi) {
			uint32_t b = c->slot - lo;

			s->bits[b / 64] |= (uint64_t)1 << (b % 64);
			pc_next(c);
		}
	}
	s->win_lo = lo;
	s->win_hi = hi;
	if (s->win_size < WIN_MAX)
		s->win_size *= 2;
	s->cur = lo;
	s->exact = true;
}

/* The first member of the window >= target, or SLOT_END. */
static uint32_t window_next(const struct stream *s, uint32_t target)
{
	uint32_t b = target - s->win_lo, w = b / 64, words;
	uint64_t m;

	words = (s->win_hi - s->win_lo + 63) / 64;
	m = s->bits[w] & (~(uint64_t)0 << (b % 64));
	for (;;) {
		if (m)
			return s->win_lo + w * 64 +
			       (uint32_t)__builtin_ctzll(m);
		if (++w >= words)
			return SLOT_END;
		m = s->bits[w];
	}
}

/* All exact cursors of a phrase on one slot >= target (leapfrog), or
 * SLOT_END. */
static uint32_t phrase_align(struct stream *s, uint32_t target)
{
	uint32_t i = 0, agree = 0;

	while (agree < s->n_ids) {
		struct pcur *c = &s->pcs[i];

		pc_seek(c, target);
		if (c->slot == SLOT_END)
			return SLOT_END;
		if (c->slot > target) {
			target = c->slot;
			agree = 1;
		} else {
			agree++;
		}
		i = (i + 1) % s->n_ids;
	}
	return target;
}

/* Decode cursor i's positions into s->pos[i]; their count or -ENOMEM. */
static int64_t phrase_positions(struct stream *s, uint32_t i)
{
	size_t n = pc_positions(&s->pcs[i], s->pos[i], s->pos_cap[i]);

	if (n > s->pos_cap[i]) {
		uint32_t *p = realloc(s->pos[i], n * 2 * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->pos[i] = p;
		s->pos_cap[i] = n * 2;
		pc_positions(&s->pcs[i], s->pos[i], s->pos_cap[i]);
	}
	return (int64_t)n;
}

/* Whether two tokens are side by side in the current entries of a and b
 * (positions decoded as they are compared). */
static bool pair_at(const struct pcur *a, const struct pcur *b)
{
	const uint8_t *pa = a->body, *pb = b->body;
	const uint8_t *ea = a->hdr & 1 ? NULL : pa + a->body_len;
	const uint8_t *eb = b->hdr & 1 ? NULL : pb + b->body_len;
	uint32_t x = varint_get(&pa) + 1, y = varint_get(&pb);

	for (;;) {
		if (x == y)
			return true;
		if (x < y) {
			if (!ea || pa >= ea)
				return false;
			x += varint_get(&pa);
		} else {
			if (!eb || pb >= eb)
				return false;
			y += varint_get(&pb);
		}
	}
}

/* Whether the phrase's tokens, on the slot their cursors share, are
 * consecutive somewhere. 1, 0 or -ENOMEM. */
static int phrase_at(struct search_exec *e, struct stream *s)
{
	size_t stack[2 * 16], *idx = stack, *cnt = stack + 16, a, k;
	uint32_t m = s->n_ids, i;
	int rc = 0;

	e->units += m;
	if (m == 2)
		return pair_at(&s->pcs[0], &s->pcs[1]);
	if (m > 16) {
		/* A term of up to 1024 bytes: hundreds of tokens at most. */
		idx = malloc(2 * m * sizeof(*idx));
		if (!idx)
			return -ENOMEM;
		cnt = idx + m;
	}
	memset(idx, 0, m * sizeof(*idx));
	for (i = 0; i < m; i++) {
		int64_t n = phrase_positions(s, i);

		if (n < 0) {
			rc = (int)n;
			goto out;
		}
		cnt[i] = (size_t)n;
		e->units += cnt[i] / 4;
	}
	for (a = 0; a < cnt[0] && !rc; a++) {
		uint32_t p0 = s->pos[0][a];

		for (k = 1; k < m; k++) {
			uint32_t want = p0 + (uint32_t)k;

			while (idx[k] < cnt[k] && s->pos[k][idx[k]] < want)
				idx[k]++;
			if (idx[k] == cnt[k])
				goto out;
			if (s->pos[k][idx[k]] != want)
				break;
		}
		rc = k == m;
	}
out:
	if (idx != stack)
		free(idx);
	return rc;
}

/* Place a stream on its first member >= target (see enum seek_mode). A
 * phrase stops early with a lower bound once the budget is spent.
 * 0 or -errno. */
static int st_seek(struct search_exec *e, struct stream *s, uint32_t target,
		   enum seek_mode mode, size_t budget)
{
	uint32_t t;
	int rc;

	if (s->cur >= target && (s->exact || mode == SEEK_ALIGN))
		return 0;
	if (s->cur > target)
		target = s->cur; /* a lower bound: members start there */
	switch (s->type) {
	case ST_NONE:
		s->cur = SLOT_END;
		s->exact = true;
		return 0;
	case ST_EXACT:
		pc_seek(&s->pcs[0], target);
		s->cur = s->pcs[0].slot;
		s->exact = true;
		return 0;
	case ST_UNION:
		if (target >= s->win_lo && target < s->win_hi) {
			t = window_next(s, target);
			if (t != SLOT_END) {
				s->cur = t;
				s->exact = true;
				return 0;
			}
			target = s->win_hi;
		}
		if (target == SLOT_END) {
			s->cur = SLOT_END;
			s->exact = true;
			return 0;
		}
		if (mode == SEEK_ALIGN && s->n_ids > UNION_TEXT_K &&
		    target >= s->win_hi + UNION_FAR) {
			rc = slot_has(e, s, target);
			if (rc < 0)
				return rc;
			s->cur = rc ? target : target + 1;
			s->exact = rc > 0;
			return 0;
		}
		union_window(e, s, target);
		return 0;
	case ST_PHRASE:
		for (;;) {
			t = phrase_align(s, target);
			if (t == SLOT_END) {
				s->cur = SLOT_END;
				s->exact = true;
				return 0;
			}
			rc = s->verify_text ? slot_has(e, s, t)
					    : phrase_at(e, s);
			if (rc < 0)
				return rc;
			if (rc) {
				s->cur = t;
				s->exact = true;
				return 0;
			}
			target = t + 1;
			if (e->units >= budget) {
				s->cur = target;
				s->exact = false;
				return 0;
			}
		}
	}
	return 0;
}

/* Settle whether p (== s->cur, a lower bound) is a member. */
static int st_check(struct search_exec *e, struct stream *s, uint32_t p)
{
	int rc;

	if (s->type == ST_UNION) {
		rc = slot_has(e, s, p);
		if (rc < 0)
			return rc;
		s->cur = rc ? p : p + 1;
		s->exact = rc > 0;
		return 0;
	}
	return st_seek(e, s, p, SEEK_ENUM, SIZE_MAX);
}

static void order_sort(struct search_exec *e)
{
	size_t i, j;

	for (i = 1; i < e->n_st; i++) {
		struct stream *s = e->order[i];

		for (j = i; j > 0 && e->order[j - 1]->cur > s->cur; j--)
			e->order[j] = e->order[j - 1];
		e->order[j] = s;
	}
}

/* Raise the threshold once `limit` hits beat what a later slot could. */
static void theta_update(struct search_exec *e)
{
	size_t cnt = 0, k;

	if (!e->limit)
		return;
	for (k = e->q->n_unique; k >= 1; k--) {
		cnt += e->lv[k].n;
		if (cnt >= e->limit) {
			if (k + 1 > e->theta)
				e->theta = (unsigned)k + 1;
			return;
		}
	}
}

/* A slot with the terms of mask (unique terms' bits). 0 or -ENOMEM. */
static int offer(struct search_exec *e, uint32_t slot, uint64_t mask)
{
	unsigned score = popcount64(mask);
	struct level *lv;

	if (score == 0 || score < e->theta || score > e->cap ||
	    (e->paged && score == e->after_score && slot <= e->after_slot))
		return 0;
	lv = &e->lv[score];
	if (e->limit && lv->n >= e->limit)
		return 0;
	if (lv->n == lv->cap) {
		size_t ncap = lv->cap ? lv->cap * 2 : 16;
		uint32_t *sl = realloc(lv->slot, ncap * sizeof(*sl));
		uint64_t *ms;

		if (!sl)
			return -ENOMEM;
		lv->slot = sl;
		ms = realloc(lv->mask, ncap * sizeof(*ms));
		if (!ms)
			return -ENOMEM;
		lv->mask = ms;
		lv->cap = ncap;
	}
	lv->slot[lv->n] = slot;
	lv->mask[lv->n] = mask;
	lv->n++;
	theta_update(e);
	return 0;
}

/* A changed slot, judged on the text it had when the query began. */
static int eval_old(struct search_exec *e, const struct search_changes *ch,
		    uint32_t slot)
{
	const char *text;
	size_t len, i;
	uint64_t mask = 0;
	int rc = ch->old_text(ch->ctx, slot, &text, &len);

	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	for (i = 0; i < e->n_st; i++) {
		rc = text_has(e, &e->st[i], text, len);
		if (rc < 0)
			return rc;
		if (rc)
			mask |= (uint64_t)1 << e->st[i].term;
	}
	e->units += 16 * e->n_st;
	return offer(e, slot, mask);
}

static void stream_free(struct stream *s)
{
	uint32_t i;

	if (s->pos)
		for (i = 0; i < s->n_ids; i++)
			free(s->pos[i]);
	free(s->pos);
	free(s->pos_cap);
	free(s->ids);
	free(s->pcs);
	free(s->bits);
}

/* The token ids (with postings) of a prefix. 0 or -ENOMEM. */
static int prefix_ids(const struct search_index *si, const char *p, size_t len,
		      uint32_t **ids, uint32_t *n)
{
	const struct vbucket *row = si->vb[(unsigned char)p[0]];
	uint32_t cap = 0, b, i, lo, hi;
	uint32_t *out = NULL;

	*ids = NULL;
	*n = 0;
	if (!row)
		return 0;
	lo = len > 1 ? (unsigned char)p[1] : 0;
	hi = len > 1 ? lo + 1 : 256;
	for (b = lo; b < hi; b++) {
		const struct vbucket *v = &row[b];

		i = len > 1 ? bucket_lower(si, v, p, len) : 0;
		for (; i < v->n; i++) {
			const struct tok *t = &si->toks[v->ids[i]];

			if (tok_len(t) < len ||
			    memcmp(si->arena + t->off, p, len))
				break;
			if (!t->df)
				continue;
			if (*n == cap) {
				uint32_t *o;

				cap = cap ? cap * 2 : 16;
				o = realloc(out, (size_t)cap * sizeof(*o));
				if (!o) {
					free(out);
					*n = 0;
					return -ENOMEM;
				}
				out = o;
			}
			out[(*n)++] = v->ids[i];
		}
	}
	*ids = out;
	return 0;
}

/* Decide how term i is read. 0 or -ENOMEM. */
static int stream_plan(struct search_exec *e, struct stream *s, size_t i)
{
	const struct search_index *si = e->si;
	const struct qterm *t = &e->q->t[i];
	size_t n_exact = t->prefix ? t->ntok - 1 : t->ntok, k;
	int rc;

	s->term = i;
	s->type = ST_NONE;
	if (n_exact == 0) {
		rc = prefix_ids(si, t->bytes, t->toks[0].len, &s->ids,
				&s->n_ids);
		if (rc < 0)
			return rc;
		if (s->n_ids == 0)
			return 0;
		s->type = s->n_ids == 1 ? ST_EXACT : ST_UNION;
	} else {
		s->ids = malloc(n_exact * sizeof(*s->ids));
		if (!s->ids)
			return -ENOMEM;
		for (k = 0; k < n_exact; k++) {
			int64_t id = lookup(si, t->bytes + t->toks[k].off,
					    t->toks[k].len);

			if (id < 0 || !si->toks[id].df)
				return 0;
			s->ids[k] = (uint32_t)id;
		}
		if (t->prefix) {
			uint32_t *pids, np;

			rc = prefix_ids(si, t->bytes + t->toks[n_exact].off,
					t->toks[n_exact].len, &pids, &np);
			free(pids);
			if (rc < 0)
				return rc;
			if (np == 0)
				return 0;
		}
		s->n_ids = (uint32_t)n_exact;
		s->type = t->ntok == 1 ? ST_EXACT : ST_PHRASE;
		s->verify_text = t->prefix;
	}
	s->pcs = calloc(s->n_ids, sizeof(*s->pcs));
	if (!s->pcs)
		return -ENOMEM;
	if (s->type == ST_UNION) {
		s->win_size = WIN_MIN;
		s->bits = malloc(WIN_MAX / 8);
		if (!s->bits)
			return -ENOMEM;
		s->stale = true;
	}
	if (s->type == ST_PHRASE && !s->verify_text) {
		s->pos = calloc(s->n_ids, sizeof(*s->pos));
		s->pos_cap = calloc(s->n_ids, sizeof(*s->pos_cap));
		if (!s->pos || !s->pos_cap)
			return -ENOMEM;
	}
	return 0;
}

int search_exec_new(struct search_index *si, const struct search_query *q,
		    bool match_all, size_t limit, search_text_fn text_of,
		    void *ctx, struct search_exec **out)
{
	struct search_exec *e = calloc(1, sizeof(*e));
	size_t i;
	int rc;

	*out = NULL;
	if (!e)
		return -ENOMEM;
	e->si = si;
	e->q = q;
	e->match_all = match_all;
	e->limit = limit;
	e->text_of = text_of;
	e->ctx = ctx;
	e->cap = (unsigned)q->n_unique;
	e->theta = match_all ? e->cap : 1;
	/* With a limit, the slots holding every term come first: look for
	 * them alone first, as for match_all; often they are enough. */
	e->all_first = !match_all && limit && q->n_unique > 1;
	if (e->all_first)
		e->theta = e->cap;
	for (i = 0; i < q->n; i++) {
		if (q->t[i].dup_of != i)
			continue;
		e->order[e->n_st] = &e->st[e->n_st];
		rc = stream_plan(e, &e->st[e->n_st++], i);
		if (rc < 0) {
			search_exec_free(e);
			return rc;
		}
	}
	*out = e;
	return 0;
}

void search_exec_after(struct search_exec *e, unsigned score, size_t slot)
{
	e->paged = true;
	e->after_score = score;
	e->after_slot = slot > UINT32_MAX ? UINT32_MAX : (uint32_t)slot;
	if (score < e->cap)
		e->cap = score;
	if (e->all_first)
		e->theta = e->cap;
}

/* Place every stream at e->from again: the postings changed since the
 * cursors were placed, or they never were. A union keeps its window and
 * its place, which stay right for every slot that did not change (the
 * changed ones are judged apart); its cursors are opened at its next
 * window. */
static int place(struct search_exec *e, size_t budget)
{
	size_t i;
	int rc;

	for (i = 0; i < e->n_st; i++) {
		struct stream *s = &e->st[i];

		switch (s->type) {
		case ST_NONE:
			s->cur = SLOT_END;
			s->exact = true;
			break;
		case ST_UNION:
			s->stale = true;
			if (!e->placed) {
				s->cur = e->from;
				s->exact = false;
			}
			break;
		default:
			st_open_cursors(e, s);
			s->cur = e->from;
			s->exact = false;
			rc = st_seek(e, s, e->from, SEEK_ENUM, budget);
			if (rc < 0)
				return rc;
		}
	}
	e->placed = true;
	e->gen = e->si->gen;
	return 0;
}

int search_exec_step(struct search_exec *e, const struct search_changes *ch,
		     size_t budget)
{
	size_t nc, i;
	int rc;

	if (e->done)
		return 1;
	e->units = 0;
	if (!e->placed || e->gen != e->si->gen) {
		rc = place(e, budget);
		if (rc < 0)
			return rc;
	}
	nc = ch ? ch->next(ch->ctx, e->from) : SIZE_MAX;
	for (;;) {
		struct stream *pv;
		uint32_t p;

		order_sort(e);
		if (e->theta > e->cap)
			break; /* `limit` hits of the best score: done */
		if (e->units >= budget) {
			p = e->order[0]->cur;
			e->from = nc < p ? (uint32_t)nc : p;
			return 0;
		}
		/* No slot before the pivot is in theta streams. */
		pv = e->theta <= e->n_st ? e->order[e->theta - 1] : NULL;
		p = pv ? pv->cur : SLOT_END;
		if (nc != SIZE_MAX && nc <= p) {
			/* A slot changed since the query began: judged on
			 * its old text; the postings there are newer. */
			rc = eval_old(e, ch, (uint32_t)nc);
			if (rc < 0)
				return rc;
			for (i = 0; i < e->n_st; i++) {
				if (e->st[i].cur > nc)
					continue;
				rc = st_seek(e, &e->st[i], (uint32_t)nc + 1,
					     SEEK_ALIGN, budget);
				if (rc < 0)
					return rc;
			}
			e->from = (uint32_t)nc + 1;
			nc = ch->next(ch->ctx, nc + 1);
			continue;
		}
		if (p == SLOT_END)
			break;
		if (!pv->exact) {
			rc = st_seek(e, pv, p, SEEK_ENUM, budget);
			if (rc < 0)
				return rc;
			continue;
		}
		if (e->order[0]->cur == p) {
			uint64_t mask = 0;

			for (i = 0; i < e->n_st; i++) {
				struct stream *s = &e->st[i];

				if (s->cur != p)
					continue;
				if (!s->exact) {
					rc = st_check(e, s, p);
					if (rc < 0)
						return rc;
				}
				if (s->cur == p)
					mask |= (uint64_t)1 << s->term;
			}
			rc = offer(e, p, mask);
			if (rc < 0)
				return rc;
			e->units++;
			for (i = 0; i < e->n_st; i++) {
				if (e->st[i].cur != p)
					continue;
				rc = st_seek(e, &e->st[i], p + 1, SEEK_ENUM,
					     budget);
				if (rc < 0)
					return rc;
			}
			e->from = p + 1;
			continue;
		}
		for (i = 0; i + 1 < e->theta; i++) {
			if (e->order[i]->cur >= p)
				break;
			rc = st_seek(e, e->order[i], p, SEEK_ALIGN, budget);
			if (rc < 0)
				return rc;
		}
	}
	/* No stream can reach the threshold: only changed slots are left. */
	while (nc != SIZE_MAX && e->theta <= e->cap) {
		rc = eval_old(e, ch, (uint32_t)nc);
		if (rc < 0)
			return rc;
		nc = ch->next(ch->ctx, nc + 1);
	}
	if (e->all_first && e->lv[e->cap].n < e->limit) {
		/* Every slot with every term is known, and they are too
		 * few: from the start again for the others. */
		e->all_first = false;
		e->cap--;
		e->theta = 1;
		e->from = 0;
		e->placed = false;
		for (i = 0; i < e->n_st; i++) {
			e->st[i].cur = 0;
			e->st[i].exact = false;
		}
		return search_exec_step(e, ch, budget);
	}
	e->done = true;
	return 1;
}

int search_exec_take(struct search_exec *e, struct search_hit **hits,
		     size_t *n_hits)
{
	const struct search_query *q = e->q;
	struct search_hit *out = NULL;
	size_t total = 0, n = 0, i, k, j;

	*hits = NULL;
	*n_hits = 0;
	for (k = 1; k <= q->n_unique; k++)
		total += e->lv[k].n;
	if (e->limit && total > e->limit)
		total = e->limit;
	if (!total)
		return 0;
	out = malloc(total * sizeof(*out));
	if (!out)
		return -ENOMEM;
	for (k = q->n_unique; k >= 1 && n < total; k--) {
		const struct level *lv = &e->lv[k];

		for (i = 0; i < lv->n && n < total; i++) {
			uint64_t m = lv->mask[i];

			/* Duplicates share their first occurrence's bit. */
			for (j = 0; j < q->n; j++)
				if (q->t[j].dup_of != j &&
				    (m >> q->t[j].dup_of & 1))
					m |= (uint64_t)1 << j;
			out[n].slot = lv->slot[i];
			out[n].score = (unsigned)k;
			out[n].matched = m;
			n++;
		}
	}
	*hits = out;
	*n_hits = n;
	return 0;
}

void search_exec_free(struct search_exec *e)
{
	size_t i;

	if (!e)
		return;
	for (i = 0; i < e->n_st; i++)
		stream_free(&e->st[i]);
	for (i = 0; i <= SEARCH_TERMS_MAX; i++) {
		free(e->lv[i].slot);
		free(e->lv[i].mask);
	}
	free(e);
}

int search_run(struct search_index *si, const struct search_query *q,
	       bool match_all, size_t limit, search_text_fn text_of, void *ctx,
	       struct search_hit **hits, size_t *n_hits)
{
	struct search_exec *e;
	int rc;

	*hits = NULL;
	*n_hits = 0;
	rc = search_exec_new(si, q, match_all, limit, text_of, ctx, &e);
	if (rc < 0)
		return rc;
	rc = search_exec_step(e, NULL, SIZE_MAX);
	if (rc >= 0)
		rc = search_exec_take(e, hits, n_hits);
	search_exec_free(e);
	return rc;
}

/*
 * Fuzz harness of the search-term parser and the search index
 * (daemon/find/search.c over daemon/find/tokenize.c). Input: a flags byte (bit 0
 * match_all, bits 1-3 the limit), then lines. The lines before a line
 * "--" are documents (slot i = line i), the lines after it are terms;
 * without "--" every line is both. Oracle: a naive model that tokenizes
 * every document and term with tokenize() and compares token lists: the
 * parser must accept and refuse the same term lists, and search_run must
 * give exactly the model's hits (slot, score, matched bits, order,
 * limit), also after half the slots are removed and added back.
 */
#include "fuzz.h"

#include "search.h"
#include "tokenize.h"

#include <errno.h>
#include <string.h>

#define DOCS_MAX  64
#define TERMS_MAX (SEARCH_TERMS_MAX + 2)

/* A text's folded tokens, copied out of tokenize()'s callback. */
struct toks {
	char *bytes;
	size_t len, cap;
	size_t *off, *tlen;
	size_t n, ncap;
};

static int collect_cb(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct toks *t = ctx;

	FUZZ_CHECK(pos == t->n);
	FUZZ_CHECK(len > 0);
	if (t->len + len > t->cap) {
		size_t cap = (t->len + len) * 2;
		char *b = realloc(t->bytes, cap);

		if (!b)
			return -ENOMEM;
		t->bytes = b;
		t->cap = cap;
	}
	if (t->n == t->ncap) {
		size_t ncap = t->ncap ? t->ncap * 2 : 16;
		size_t *o = realloc(t->off, ncap * sizeof(*o));

		if (!o)
			return -ENOMEM;
		t->off = o;
		o = realloc(t->tlen, ncap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		t->tlen = o;
		t->ncap = ncap;
	}
	memcpy(t->bytes + t->len, tok, len);
	t->off[t->n] = t->len;
	t->tlen[t->n] = len;
	t->len += len;
	t->n++;
	return 0;
}

static void toks_done(struct toks *t)
{
	free(t->bytes);
	free(t->off);
	free(t->tlen);
	memset(t, 0, sizeof(*t));
}

struct text {
	const char *p;
	size_t len;
};

struct model {
	struct text docs[DOCS_MAX];
	struct toks dtoks[DOCS_MAX];
	bool present[DOCS_MAX];
	size_t n_docs;
	struct text terms[TERMS_MAX];
	struct toks ttoks[TERMS_MAX];
	bool prefix[TERMS_MAX];
	size_t n_terms;
};

/* Token i of a equals token j of b (or is its prefix, with prefix). */
static bool tok_match(const struct toks *a, size_t i, const struct toks *b,
		      size_t j, bool prefix)
{
	if (prefix ? a->tlen[i] > b->tlen[j] : a->tlen[i] != b->tlen[j])
		return false;
	return memcmp(a->bytes + a->off[i], b->bytes + b->off[j], a->tlen[i]) ==
	       0;
}

/* Whether doc's tokens hold term's tokens consecutively. */
static bool phrase_in(const struct toks *term, bool prefix,
		      const struct toks *doc)
{
	size_t s, k;

	for (s = 0; s + term->n <= doc->n; s++) {
		for (k = 0; k < term->n; k++)
			if (!tok_match(term, k, doc, s + k,
				       prefix && k == term->n - 1))
				break;
		if (k == term->n)
			return true;
	}
	return false;
}

static bool same_term(const struct model *m, size_t a, size_t b)
{
	size_t i;

	if (m->prefix[a] != m->prefix[b] || m->ttoks[a].n != m->ttoks[b].n)
		return false;
	for (i = 0; i < m->ttoks[a].n; i++)
		if (!tok_match(&m->ttoks[a], i, &m->ttoks[b], i, false))
			return false;
	return true;
}

static int text_cb(void *ctx, size_t slot, const char **text, size_t *len)
{
	struct model *m = ctx;

	FUZZ_CHECK(slot < m->n_docs && m->present[slot]);
	*text = m->docs[slot].p;
	*len = m->docs[slot].len;
	return 0;
}

static unsigned popcount64(uint64_t v)
{
	unsigned n = 0;

	for (; v; v &= v - 1)
		n++;
	return n;
}

/* Run the query and compare with the model. */
static void check_run(struct search_index *si, const struct search_query *q,
		      struct model *m, bool match_all, size_t limit)
{
	uint64_t unique = 0, masks[DOCS_MAX];
	unsigned score, n_unique, s;
	struct search_hit *hits = NULL;
	size_t n_hits = 0, i, j, k = 0;
	int rc;

	for (i = 0; i < m->n_terms; i++) {
		for (j = 0; j < i; j++)
			if (same_term(m, i, j))
				break;
		if (j == i)
			unique |= (uint64_t)1 << i;
	}
	FUZZ_CHECK(search_query_unique(q) == unique);
	n_unique = popcount64(unique);

	rc = search_run(si, q, match_all, limit, text_cb, m, &hits, &n_hits);
	FUZZ_CHECK(rc == 0);
	/* The model's hits, by score descending then slot. */
	for (i = 0; i < m->n_docs; i++) {
		masks[i] = 0;
		for (j = 0; m->present[i] && j < m->n_terms; j++)
			if (phrase_in(&m->ttoks[j], m->prefix[j], &m->dtoks[i]))
				masks[i] |= (uint64_t)1 << j;
	}
	for (s = SEARCH_TERMS_MAX; s >= 1; s--) {
		for (i = 0; i < m->n_docs; i++) {
			score = popcount64(masks[i] & unique);
			if (score != s || (match_all && score != n_unique))
				continue;
			if (limit && k >= limit)
				continue;
			FUZZ_CHECK(k < n_hits);
			FUZZ_CHECK(hits[k].slot == i);
			FUZZ_CHECK(hits[k].score == score);
			FUZZ_CHECK(hits[k].matched == masks[i]);
			k++;
		}
	}
	FUZZ_CHECK(k == n_hits);
	free(hits);
}

/* Split the input into the model's documents and terms. */
static void split(struct model *m, const char *p, size_t len)
{
	const char *end = p + len, *nl;
	bool docs = true, sep = false;
	struct text line;

	for (const char *q = p; q < end; q = nl + 1) {
		nl = memchr(q, '\n', (size_t)(end - q));
		if (!nl)
			nl = end;
		if (nl - q == 2 && q[0] == '-' && q[1] == '-') {
			sep = true;
			break;
		}
	}
	for (const char *q = p; q < end; q = nl + 1) {
		nl = memchr(q, '\n', (size_t)(end - q));
		if (!nl)
			nl = end;
		line = (struct text){q, (size_t)(nl - q)};
		if (docs && sep && line.len == 2 && q[0] == '-' &&
		    q[1] == '-') {
			docs = false;
			continue;
		}
		if (docs && m->n_docs < DOCS_MAX)
			m->docs[m->n_docs++] = line;
		if ((!docs || !sep) && m->n_terms < TERMS_MAX)
			m->terms[m->n_terms++] = line;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct model m;
	const char *texts[TERMS_MAX] = {0};
	size_t lens[TERMS_MAX] = {0}, i, limit;
	struct search_index *si = NULL;
	struct search_query *q = NULL;
	bool match_all, want_ok;
	char msg[128];
	int rc;

	if (size < 1)
		return 0;
	memset(&m, 0, sizeof(m));
	match_all = data[0] & 1;
	limit = (data[0] >> 1) & 7;
	split(&m, (const char *)data + 1, size - 1);

	/* The model's verdict on the term list. */
	want_ok = m.n_terms >= 1 && m.n_terms <= SEARCH_TERMS_MAX;
	for (i = 0; i < m.n_terms; i++) {
		size_t len = m.terms[i].len;

		texts[i] = m.terms[i].p;
		lens[i] = len;
		if (len == 0 || len > SEARCH_TERM_BYTES_MAX) {
			want_ok = false;
			continue;
		}
		if (m.terms[i].p[len - 1] == '*') {
			m.prefix[i] = true;
			len--;
		}
		FUZZ_CHECK(tokenize(m.terms[i].p, len, collect_cb,
				    &m.ttoks[i]) == 0);
		if (m.ttoks[i].n == 0)
			want_ok = false;
	}
	msg[0] = '\0';
	rc = search_query_parse(texts, lens, m.n_terms, &q, msg, sizeof(msg));
	FUZZ_CHECK(rc == (want_ok ? 0 : -EINVAL));
	FUZZ_CHECK(want_ok ? q != NULL : q == NULL && msg[0] != '\0');

	si = search_new(m.n_docs ? m.n_docs : 1);
	FUZZ_CHECK(si != NULL);
	for (i = 0; i < m.n_docs; i++) {
		FUZZ_CHECK(tokenize(m.docs[i].p, m.docs[i].len, collect_cb,
				    &m.dtoks[i]) == 0);
		FUZZ_CHECK(search_add(si, i, m.docs[i].p, m.docs[i].len) == 0);
		m.present[i] = true;
	}
	FUZZ_CHECK(search_add(si, m.n_docs ? m.n_docs : 1, "x", 1) == -EINVAL);
	if (!q)
		goto out;

	/* The fast phrase check agrees with the model on every pair. */
	for (i = 0; i < m.n_docs * m.n_terms && i < 256; i++) {
		size_t d = i % m.n_docs, t = i / m.n_docs, k;
		struct tok_span spans[64];
		const struct toks *tt = &m.ttoks[t];

		if (tt->n > 64)
			continue;
		for (k = 0; k < tt->n; k++)
			spans[k] = (struct tok_span){tt->bytes + tt->off[k],
						     tt->tlen[k]};
		FUZZ_CHECK(tokenize_has_phrase(m.docs[d].p, m.docs[d].len,
					       spans, tt->n, m.prefix[t]) ==
			   (int)phrase_in(tt, m.prefix[t], &m.dtoks[d]));
	}

	check_run(si, q, &m, match_all, limit);
	/* Remove every other slot, query, put them back, query again. */
	for (i = 0; i < m.n_docs; i += 2) {
		search_remove(si, i, m.docs[i].p, m.docs[i].len);
		m.present[i] = false;
	}
	check_run(si, q, &m, match_all, limit);
	for (i = 0; i < m.n_docs; i += 2) {
		FUZZ_CHECK(search_add(si, i, m.docs[i].p, m.docs[i].len) == 0);
		m.present[i] = true;
	}
	check_run(si, q, &m, !match_all, limit ? 0 : 3);
	FUZZ_CHECK(search_memory(si) > 0);
out:
	search_query_free(q);
	search_free(si);
	for (i = 0; i < DOCS_MAX; i++)
		toks_done(&m.dtoks[i]);
	for (i = 0; i < TERMS_MAX; i++)
		toks_done(&m.ttoks[i]);
	return 0;
}

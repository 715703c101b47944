/*
 * BM25 over weighted fields (see bm25.h).
 *
 * Layout: a vocabulary of terms (a hash table of indices into an array,
 * the token bytes in one arena), each term with its postings: for each
 * document holding it, the varint of the gap from the previous document
 * and one byte of weighted frequency (capped at 255). Per document: its
 * weighted length and whether it is live. For prefixes, the vocabulary is
 * also kept sorted, lazily: terms added since the last sort are a tail
 * that a prefix lookup scans, merged in once it grows.
 *
 * A search adds each scored term's contribution into a per-document
 * accumulator (kept between searches, reset through the list of the
 * documents it touched), then keeps the best documents in a heap. Terms
 * go highest possible contribution first (the rarest, usually); once
 * the best documents so far score above all that the remaining terms
 * could give a document together, no document they alone hold can be
 * among the results, and those terms only add to the documents already
 * touched (MaxScore, term at a time): a query mixing a rare word with
 * common ones reads the common words' postings without a new
 * accumulator, filter call or heap entry for each of their documents.
 */
#include "bm25.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "protocol/fnv.h"
#include "tokenize.h"

#define K1	       1.2
#define B	       0.75
#define TF_MAX	       255
#define TAIL_MERGE_MIN 1024

struct term {
	uint32_t tok;  /* offset of its bytes in the arena */
	uint32_t df;   /* live documents holding it */
	uint32_t last; /* the last document of its postings */
	uint32_t len, cap;
	uint32_t hash; /* of its bytes: probes compare it first */
	uint8_t tok_len;
	bool stop;	/* a stop word: known, never posted */
	uint8_t tf_max; /* highest frequency ever posted (a bound) */
	uint8_t *post;
};

struct bm25 {
	struct term *terms;
	size_t n_terms, cap_terms;
	uint32_t *table; /* term index + 1; 0: empty */
	size_t table_cap;
	char *arena;
	size_t arena_len, arena_cap;
	uint32_t *sorted; /* term indices by token bytes */
	size_t n_sorted;  /* terms below this index are in sorted */

	uint32_t *dl;  /* per document: weighted length */
	uint8_t *live; /* per document: bit set while live */
	size_t cap_docs;
	uint32_t next_doc; /* above every document added */
	bool any_doc;
	size_t n_live;
	uint64_t total_len; /* over the live documents */
	uint32_t dl_min;    /* lowest non-zero length ever added (a bound) */

	/* Scratch of an addition (per term) and of a search (per doc). */
	uint32_t *tf;
	size_t cap_tf;
	uint32_t *touched;
	size_t cap_touched;
	struct acc *acc; /* per document: one cache line for both */
	size_t cap_acc;
};

/* A document's running score in a search, and the query terms it
 * matched. */
struct acc {
	uint64_t mask;
	float score;
	uint8_t accept; /* ACC_* : the filter's answer, asked once */
};

enum { ACC_UNASKED, ACC_TAKEN, ACC_REFUSED };

struct qterm {
	char *tok;
	size_t len;
	bool prefix;
	char *shown; /* tok, with '*' when a prefix */
};

struct bm25_query {
	struct qterm *t;
	size_t n, cap;
};

/* ---- stop words ---- */

/* Sorted (strcmp order): common English words that say nothing about a
 * situation. */
static const char *const stopwords[] = {
	"a",	   "about",  "above",	"after",      "again",	  "against",
	"all",	   "am",     "an",	"and",	      "any",	  "are",
	"as",	   "at",     "be",	"because",    "been",	  "before",
	"being",   "below",  "between", "both",	      "but",	  "by",
	"can",	   "could",  "did",	"do",	      "does",	  "doing",
	"down",	   "during", "each",	"few",	      "for",	  "from",
	"further", "had",    "has",	"have",	      "having",	  "he",
	"her",	   "here",   "hers",	"herself",    "him",	  "himself",
	"his",	   "how",    "i",	"if",	      "in",	  "into",
	"is",	   "it",     "its",	"itself",     "just",	  "me",
	"more",	   "most",   "my",	"myself",     "no",	  "nor",
	"not",	   "now",    "of",	"off",	      "on",	  "once",
	"only",	   "or",     "other",	"our",	      "ours",	  "ourselves",
	"out",	   "over",   "own",	"same",	      "she",	  "should",
	"so",	   "some",   "such",	"than",	      "that",	  "the",
	"their",   "theirs", "them",	"themselves", "then",	  "there",
	"these",   "they",   "this",	"those",      "through",  "to",
	"too",	   "under",  "until",	"up",	      "very",	  "was",
	"we",	   "were",   "what",	"when",	      "where",	  "which",
	"while",   "who",    "whom",	"why",	      "will",	  "with",
	"would",   "you",    "your",	"yours",      "yourself", "yourselves",
};

#define N_STOPWORDS (sizeof(stopwords) / sizeof(stopwords[0]))

static int tokcmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

bool bm25_stopword(const char *tok, size_t len)
{
	size_t lo = 0, hi = N_STOPWORDS;

	if (len > 10)
		return false;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = tokcmp(tok, len, stopwords[mid],
			       strlen(stopwords[mid]));

		if (c == 0)
			return true;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return false;
}

/* ---- vocabulary ---- */

static const char *tok_of(const struct bm25 *ix, const struct term *t)
{
	return ix->arena + t->tok;
}

/* The term of a token, or -1. */
static long lookup(const struct bm25 *ix, const char *tok, size_t len)
{
	size_t mask = ix->table_cap - 1, i;

	if (!ix->table_cap)
		return -1;
	uint64_t h = fnv1a64(tok, len);

	for (i = h & mask; ix->table[i]; i = (i + 1) & mask) {
		const struct term *t = &ix->terms[ix->table[i] - 1];

		if (t->hash == (uint32_t)h && t->tok_len == len &&
		    memcmp(tok_of(ix, t), tok, len) == 0)
			return (long)ix->table[i] - 1;
	}
	return -1;
}

static int grow_table(struct bm25 *ix)
{
	size_t cap = ix->table_cap ? ix->table_cap * 2 : 1024;
	uint32_t *table = calloc(cap, sizeof(*table));

	if (!table)
		return -ENOMEM;
	for (size_t n = 0; n < ix->n_terms; n++) {
		const struct term *t = &ix->terms[n];
		size_t i = fnv1a64(tok_of(ix, t), t->tok_len) & (cap - 1);

		while (table[i])
			i = (i + 1) & (cap - 1);
		table[i] = (uint32_t)n + 1;
	}
	free(ix->table);
	ix->table = table;
	ix->table_cap = cap;
	return 0;
}

/* The term of a token, added when new; -1 when memory runs out. */
static long intern(struct bm25 *ix, const char *tok, size_t len)
{
	long found = lookup(ix, tok, len);
	struct term *t;
	size_t i;

	if (found >= 0)
		return found;
	if ((ix->n_terms + 1) * 2 > ix->table_cap && grow_table(ix) < 0)
		return -1;
	if (grow_array((void **)&ix->terms, &ix->cap_terms, ix->n_terms + 1,
		       sizeof(*ix->terms)) < 0 ||
	    grow_array((void **)&ix->arena, &ix->arena_cap, ix->arena_len + len,
		       1) < 0 ||
	    grow_array((void **)&ix->tf, &ix->cap_tf, ix->n_terms + 1,
		       sizeof(*ix->tf)) < 0)
		return -1;
	t = &ix->terms[ix->n_terms];
	memset(t, 0, sizeof(*t));
	t->tok = (uint32_t)ix->arena_len;
	t->tok_len = (uint8_t)len;
	t->hash = (uint32_t)fnv1a64(tok, len);
	t->stop = bm25_stopword(tok, len);
	memcpy(ix->arena + ix->arena_len, tok, len);
	ix->arena_len += len;
	ix->tf[ix->n_terms] = 0;
	for (i = fnv1a64(tok, len) & (ix->table_cap - 1); ix->table[i];
	     i = (i + 1) & (ix->table_cap - 1))
		;
	ix->table[i] = (uint32_t)ix->n_terms + 1;
	return (long)ix->n_terms++;
}

static int sorted_cmp(const void *a, const void *b, void *ctx)
{
	const struct bm25 *ix = ctx;
	const struct term *x = &ix->terms[*(const uint32_t *)a];
	const struct term *y = &ix->terms[*(const uint32_t *)b];

	return tokcmp(tok_of(ix, x), x->tok_len, tok_of(ix, y), y->tok_len);
}

/* Sort the tail of new terms into the sorted vocabulary. */
static int merge_tail(struct bm25 *ix)
{
	size_t n_tail = ix->n_terms - ix->n_sorted, i = 0, j = 0, o = 0;
	uint32_t *tail, *all;

	if (n_tail == 0)
		return 0;
	tail = malloc(n_tail * sizeof(*tail));
	all = malloc(ix->n_terms * sizeof(*all));
	if (!tail || !all) {
		free(tail);
		free(all);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n_tail; k++)
		tail[k] = (uint32_t)(ix->n_sorted + k);
	qsort_r(tail, n_tail, sizeof(*tail), sorted_cmp, ix);
	while (i < ix->n_sorted || j < n_tail) {
		if (j == n_tail ||
		    (i < ix->n_sorted &&
		     sorted_cmp(&ix->sorted[i], &tail[j], ix) < 0))
			all[o++] = ix->sorted[i++];
		else
			all[o++] = tail[j++];
	}
	free(tail);
	free(ix->sorted);
	ix->sorted = all;
	ix->n_sorted = ix->n_terms;
	return 0;
}

/* ---- documents ---- */

struct bm25 *bm25_new(void)
{
	return calloc(1, sizeof(struct bm25));
}

void bm25_free(struct bm25 *ix)
{
	if (!ix)
		return;
	for (size_t i = 0; i < ix->n_terms; i++)
		free(ix->terms[i].post);
	free(ix->terms);
	free(ix->table);
	free(ix->arena);
	free(ix->sorted);
	free(ix->dl);
	free(ix->live);
	free(ix->tf);
	free(ix->touched);
	free(ix->acc);
	free(ix);
}

size_t bm25_count(const struct bm25 *ix)
{
	return ix->n_live;
}

static bool is_live(const struct bm25 *ix, uint32_t doc)
{
	return doc < ix->next_doc && (ix->live[doc / 8] >> (doc % 8)) & 1;
}

/* Collecting a document's terms: the distinct ones (touched), their
 * weighted frequencies (ix->tf) and the weighted length. */
struct collect {
	struct bm25 *ix;
	unsigned weight;
	size_t n;
	uint64_t len;
	bool intern; /* add unknown terms (an addition), or skip them */
};

static int collect_cb(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct collect *c = ctx;
	struct bm25 *ix = c->ix;
	long t;

	(void)pos;
	if (len > BM25_TOKEN_MAX)
		return 0;
	/* Stop words are terms too, so each token costs one lookup. */
	t = c->intern ? intern(ix, tok, len) : lookup(ix, tok, len);
	if (t < 0)
		return c->intern ? -ENOMEM : 0;
	if (ix->terms[t].stop)
		return 0;
	c->len += c->weight;
	if (ix->tf[t] == 0) {
		if (grow_array((void **)&ix->touched, &ix->cap_touched,
			       c->n + 1, sizeof(*ix->touched)) < 0)
			return -ENOMEM;
		ix->touched[c->n++] = (uint32_t)t;
	}
	ix->tf[t] += c->weight;
	return 0;
}

static int collect(struct bm25 *ix, const struct bm25_field *fields, size_t n,
		   bool add, struct collect *c)
{
	int rc = 0;

	memset(c, 0, sizeof(*c));
	c->ix = ix;
	c->intern = add;
	for (size_t f = 0; f < n && rc == 0; f++) {
		c->weight = fields[f].weight ? fields[f].weight : 1;
		rc = tokenize(fields[f].text, fields[f].len, collect_cb, c);
	}
	return rc < 0 ? rc : 0;
}

static void collect_reset(struct bm25 *ix, const struct collect *c)
{
	for (size_t i = 0; i < c->n; i++)
		ix->tf[ix->touched[i]] = 0;
}

static int post(struct term *t, uint32_t doc, uint32_t tf, bool first)
{
	uint32_t gap = first ? doc : doc - t->last;

	if (t->len + 6 > t->cap) {
		/* Doubling a cap that bm25_trim cut to the length (a posting
		 * of 2 bytes) may still leave less than the 6 bytes needed. */
		size_t cap = t->cap ? (size_t)t->cap * 2 : 8;
		uint8_t *p;

		if (cap < (size_t)t->len + 6)
			cap = (size_t)t->len + 6;
		p = realloc(t->post, cap);

		if (!p)
			return -ENOMEM;
		t->post = p;
		t->cap = (uint32_t)cap;
	}
	while (gap >= 0x80) {
		t->post[t->len++] = (uint8_t)(gap | 0x80);
		gap >>= 7;
	}
	t->post[t->len++] = (uint8_t)gap;
	t->post[t->len++] = (uint8_t)(tf > TF_MAX ? TF_MAX : tf);
	if (t->post[t->len - 1] > t->tf_max)
		t->tf_max = t->post[t->len - 1];
	t->last = doc;
	return 0;
}

int bm25_add(struct bm25 *ix, uint32_t doc, const struct bm25_field *fields,
	     size_t n)
{
	struct collect c;
	size_t i;
	int rc;

	if (ix->any_doc && doc < ix->next_doc)
		return -EINVAL;
	if ((size_t)doc >= ix->cap_docs) {
		size_t old = ix->cap_docs;

		if (grow_array((void **)&ix->dl, &ix->cap_docs, (size_t)doc + 1,
			       sizeof(*ix->dl)) < 0)
			return -ENOMEM;
		/* live has a bit per dl entry; the new bytes are zero. */
		{
			uint8_t *live =
				realloc(ix->live, (ix->cap_docs + 7) / 8);

			if (!live) {
				ix->cap_docs = old;
				return -ENOMEM;
			}
			memset(live + (old + 7) / 8, 0,
			       (ix->cap_docs + 7) / 8 - (old + 7) / 8);
			ix->live = live;
		}
	}
	rc = collect(ix, fields, n, true, &c);
	for (i = 0; rc == 0 && i < c.n; i++) {
		struct term *t = &ix->terms[ix->touched[i]];

		rc = post(t, doc, ix->tf[ix->touched[i]], t->len == 0);
		if (rc == 0)
			t->df++;
	}
	if (rc < 0) {
		/* What was posted stays, for a document never live. */
		for (size_t k = 0; k + 1 < i; k++)
			ix->terms[ix->touched[k]].df--;
	} else {
		ix->live[doc / 8] |= (uint8_t)(1u << (doc % 8));
		ix->dl[doc] = c.len > UINT32_MAX ? UINT32_MAX : (uint32_t)c.len;
		if (ix->dl[doc] && (!ix->dl_min || ix->dl[doc] < ix->dl_min))
			ix->dl_min = ix->dl[doc];
		ix->n_live++;
		ix->total_len += ix->dl[doc];
	}
	for (uint32_t d = ix->any_doc ? ix->next_doc : 0; d < doc; d++)
		ix->dl[d] = 0;
	ix->next_doc = doc + 1;
	ix->any_doc = true;
	collect_reset(ix, &c);
	return rc;
}

void bm25_remove(struct bm25 *ix, uint32_t doc, const struct bm25_field *fields,
		 size_t n)
{
	struct collect c;

	if (!is_live(ix, doc))
		return;
	/* Terms are known (the document added them): no allocation but
	 * the touched list, which an addition of it already grew. */
	collect(ix, fields, n, false, &c);
	for (size_t i = 0; i < c.n; i++)
		if (ix->terms[ix->touched[i]].df > 0)
			ix->terms[ix->touched[i]].df--;
	collect_reset(ix, &c);
	ix->live[doc / 8] &= (uint8_t) ~(1u << (doc % 8));
	ix->n_live--;
	ix->total_len -= ix->dl[doc];
}

/* ---- queries ---- */

void bm25_query_free(struct bm25_query *q)
{
	if (!q)
		return;
	for (size_t i = 0; i < q->n; i++) {
		free(q->t[i].tok);
		free(q->t[i].shown);
	}
	free(q->t);
	free(q);
}

size_t bm25_query_terms(const struct bm25_query *q)
{
	return q->n;
}

const char *bm25_query_term(const struct bm25_query *q, size_t i)
{
	return q->t[i].shown;
}

/* The tokens of one query word. */
struct qword {
	struct bm25_query *q;
	const char *last; /* the word's last token so far (not yet added) */
	size_t last_len;
	bool too_many;
};

static int add_term(struct bm25_query *q, const char *tok, size_t len,
		    bool prefix)
{
	struct qterm *t;

	if (!prefix && bm25_stopword(tok, len))
		return 0;
	if (len > BM25_TOKEN_MAX)
		return 0; /* never indexed: it cannot match */
	for (size_t i = 0; i < q->n; i++)
		if (q->t[i].prefix == prefix && q->t[i].len == len &&
		    memcmp(q->t[i].tok, tok, len) == 0)
			return 0;
	if (q->n == BM25_QUERY_WORDS_MAX)
		return 1;
	if (grow_array((void **)&q->t, &q->cap, q->n + 1, sizeof(*q->t)) < 0)
		return -ENOMEM;
	t = &q->t[q->n];
	t->tok = malloc(len + 1);
	t->shown = malloc(len + 2);
	if (!t->tok || !t->shown) {
		free(t->tok);
		free(t->shown);
		return -ENOMEM;
	}
	memcpy(t->tok, tok, len);
	t->tok[len] = '\0';
	memcpy(t->shown, tok, len);
	t->shown[len] = '*';
	t->shown[prefix ? len + 1 : len] = '\0';
	t->len = len;
	t->prefix = prefix;
	q->n++;
	return 0;
}

/* Each token but the word's last is added at once; the last waits to
 * learn whether the word ends in '*'. The pending token is copied, as
 * the tokenizer's buffer is only valid during the call. */
struct qword_buf {
	struct qword w;
	char tok[BM25_TOKEN_MAX + 1];
};

static int qword_cb(void *ctx, const char *tok, size_t len, size_t pos)
{
	struct qword_buf *b = ctx;
	int rc = 0;

	(void)pos;
	if (b->w.last)
		rc = add_term(b->w.q, b->w.last, b->w.last_len, false);
	if (rc)
		return rc;
	if (len > BM25_TOKEN_MAX) {
		b->w.last = NULL;
		return 0;
	}
	memcpy(b->tok, tok, len);
	b->w.last = b->tok;
	b->w.last_len = len;
	return 0;
}

static bool space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

int bm25_query_parse(const char *text, size_t len, struct bm25_query **out,
		     char *msg, size_t msgn)
{
	struct bm25_query *q = calloc(1, sizeof(*q));
	struct qword_buf b;
	size_t i = 0;
	int rc = 0;

	*out = NULL;
	if (!q)
		return -ENOMEM;
	while (i < len && rc == 0) {
		size_t start;

		while (i < len && space(text[i]))
			i++;
		start = i;
		while (i < len && !space(text[i]))
			i++;
		if (i == start)
			break;
		memset(&b.w, 0, sizeof(b.w));
		b.w.q = q;
		rc = tokenize(text + start, i - start, qword_cb, &b);
		if (rc == 0 && b.w.last)
			rc = add_term(q, b.w.last, b.w.last_len,
				      text[i - 1] == '*');
	}
	if (rc < 0) {
		bm25_query_free(q);
		return rc;
	}
	if (rc > 0) {
		snprintf(msg, msgn, "more than %d distinct words to search for",
			 BM25_QUERY_WORDS_MAX);
		bm25_query_free(q);
		return -EINVAL;
	}
	if (q->n == 0) {
		snprintf(msg, msgn,
			 "nothing to search for: the text is empty or holds "
			 "only stop words and punctuation");
		bm25_query_free(q);
		return -EINVAL;
	}
	*out = q;
	return 0;
}

/* The index terms a query term stands for, at most max, into out; the
 * sum of their document counts into *df. */
static size_t resolve(struct bm25 *ix, const struct qterm *qt, uint32_t *out,
		      size_t max, uint64_t *df)
{
	size_t n = 0, lo = 0, hi;
	long t;

	*df = 0;
	if (!qt->prefix) {
		t = lookup(ix, qt->tok, qt->len);
		if (t < 0 || ix->terms[t].df == 0)
			return 0;
		out[0] = (uint32_t)t;
		*df = ix->terms[t].df;
		return 1;
	}
	if (ix->n_terms - ix->n_sorted >= TAIL_MERGE_MIN)
		merge_tail(ix); /* else (no memory) the tail is scanned */
	hi = ix->n_sorted;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct term *m = &ix->terms[ix->sorted[mid]];

		if (tokcmp(tok_of(ix, m), m->tok_len, qt->tok, qt->len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < ix->n_sorted && n < max; i++) {
		const struct term *m = &ix->terms[ix->sorted[i]];

		if (m->tok_len < qt->len ||
		    memcmp(tok_of(ix, m), qt->tok, qt->len) != 0)
			break;
		if (m->df) {
			out[n++] = ix->sorted[i];
			*df += m->df;
		}
	}
	for (size_t i = ix->n_sorted; i < ix->n_terms && n < max; i++) {
		const struct term *m = &ix->terms[i];

		if (m->df && m->tok_len >= qt->len &&
		    memcmp(tok_of(ix, m), qt->tok, qt->len) == 0) {
			out[n++] = (uint32_t)i;
			*df += m->df;
		}
	}
	return n;
}

/* A query term chosen for scoring. */
struct pick {
	size_t q;     /* its index in the query */
	uint64_t df;  /* documents of its index terms */
	size_t first; /* its index terms in the pool */
	size_t n;
};

static int pick_cmp(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;

	if (x->df != y->df)
		return x->df < y->df ? -1 : 1;
	return x->q < y->q ? -1 : x->q > y->q;
}

static int pick_q_cmp(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;

	return x->q < y->q ? -1 : x->q > y->q;
}

/* An index term to score: its query bit, idf * (k1 + 1), and the most
 * it can add to one document (its highest frequency in the shortest
 * document: a bound, since neither ever goes back). */
struct unit {
	uint32_t term;
	unsigned bit;
	float c;
	double bound;
};

static int unit_cmp(const void *a, const void *b)
{
	const struct unit *x = a, *y = b;

	if (x->bound != y->bound)
		return x->bound > y->bound ? -1 : 1;
	return x->term < y->term ? -1 : x->term > y->term;
}

static struct unit unit_of(const struct bm25 *ix, uint32_t term, unsigned bit,
			   double avgdl)
{
	const struct term *t = &ix->terms[term];
	double n = (double)ix->n_live, df = (double)t->df;
	double c = log(1.0 + (n - df + 0.5) / (df + 0.5)) * (K1 + 1.0);
	double tf = t->tf_max;

	return (struct unit){term, bit, (float)c,
			     c * tf /
				     (tf + K1 * (1.0 - B) +
				      K1 * B * (double)ix->dl_min / avgdl)};
}

/* Add one index term's contribution to every live document holding it
 * (only to those touched already when !grow): idf * tf * (k1 + 1) /
 * (tf + k1 * (1 - b) + k1 * b * dl / avgdl), its constants worked out
 * once per term. */
static void score_term(struct bm25 *ix, const struct unit *u, double avgdl,
		       bool grow, size_t *n_touched)
{
	const struct term *t = &ix->terms[u->term];
	float c = u->c;
	float base = (float)(K1 * (1.0 - B)), slope = (float)(K1 * B / avgdl);
	const uint8_t *p = t->post, *end = t->post + t->len;
	uint64_t b = 1ull << u->bit;
	uint32_t doc = 0;
	bool first = true;

	while (p < end) {
		uint32_t gap = 0;
		float tf;
		int shift = 0;
		struct acc *a;

		while (*p & 0x80) {
			gap |= (uint32_t)(*p++ & 0x7f) << shift;
			shift += 7;
		}
		gap |= (uint32_t)*p++ << shift;
		tf = (float)*p++;
		doc = first ? gap : doc + gap;
		first = false;
		a = &ix->acc[doc];
		if ((!grow && a->mask == 0) || !is_live(ix, doc))
			continue;
		if (a->mask == 0)
			ix->touched[(*n_touched)++] = doc;
		a->score += c * tf / (tf + base + slope * (float)ix->dl[doc]);
		a->mask |= b;
	}
}

/* Whether the filter takes doc (asked once per search). */
static bool taken(struct bm25 *ix, uint32_t doc, bm25_accept_fn accept,
		  void *ctx)
{
	struct acc *a = &ix->acc[doc];
	uint64_t tie;

	if (a->accept == ACC_UNASKED)
		a->accept = !accept || accept(ctx, doc, &tie) ? ACC_TAKEN
							      : ACC_REFUSED;
	return a->accept == ACC_TAKEN;
}

/* The limit-th best score of the touched documents the filter takes
 * (-1 when fewer), by a min-heap in low[limit]. */
static double threshold(struct bm25 *ix, size_t n_touched, size_t limit,
			bm25_accept_fn accept, void *ctx, float *low)
{
	size_t n = 0;

	for (size_t i = 0; i < n_touched; i++) {
		uint32_t doc = ix->touched[i];
		float sc = ix->acc[doc].score;
		size_t k = 0;

		if ((n == limit && sc <= low[0]) ||
		    !taken(ix, doc, accept, ctx))
			continue;
		if (n < limit) {
			/* sift up */
			for (k = n++; k > 0 && low[(k - 1) / 2] > sc;
			     k = (k - 1) / 2)
				low[k] = low[(k - 1) / 2];
			low[k] = sc;
			continue;
		}
		/* replace the top, sift down */
		for (;;) {
			size_t l = 2 * k + 1, m = l;

			if (l >= n)
				break;
			if (l + 1 < n && low[l + 1] < low[l])
				m = l + 1;
			if (low[m] >= sc)
				break;
			low[k] = low[m];
			k = m;
		}
		low[k] = sc;
	}
	return n == limit ? low[0] : -1.0;
}

/* Heap order: the worst hit on top. */
static bool worse(const struct bm25_hit *a, const struct bm25_hit *b)
{
	if (a->score != b->score)
		return a->score < b->score;
	if (a->tie != b->tie)
		return a->tie < b->tie;
	return a->doc < b->doc;
}

static void sift_down(struct bm25_hit *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct bm25_hit tmp;

		if (l < n && worse(&h[l], &h[m]))
			m = l;
		if (r < n && worse(&h[r], &h[m]))
			m = r;
		if (m == i)
			return;
		tmp = h[i];
		h[i] = h[m];
		h[m] = tmp;
		i = m;
	}
}

static void sift_up(struct bm25_hit *h, size_t i)
{
	while (i > 0) {
		size_t p = (i - 1) / 2;
		struct bm25_hit tmp;

		if (!worse(&h[i], &h[p]))
			return;
		tmp = h[i];
		h[i] = h[p];
		h[p] = tmp;
		i = p;
	}
}

static int hit_cmp(const void *a, const void *b)
{
	const struct bm25_hit *x = a, *y = b;

	return worse(x, y) ? 1 : worse(y, x) ? -1 : 0;
}

int bm25_search(struct bm25 *ix, const struct bm25_query *q, size_t limit,
		bm25_accept_fn accept, void *ctx, struct bm25_hit **hits,
		size_t *n_hits, size_t *scored, size_t *n_scored)
{
	struct pick *picks = NULL;
	uint32_t *pool = NULL;
	struct unit *units = NULL;
	double *rest = NULL; /* rest[i]: the bounds of units i.. summed */
	uint64_t *rest_df = NULL;
	float *low = NULL;
	struct bm25_hit *heap = NULL;
	size_t n_picks = 0, pool_len = 0, pool_cap = 0, n_touched = 0;
	size_t n_heap = 0, n_units = 0, tried_at = 0;
	bool grow = true;
	double avgdl;
	int rc = -ENOMEM;

	*hits = NULL;
	*n_hits = 0;
	*n_scored = 0;
	if (ix->n_live == 0 || limit == 0)
		return 0;
	picks = calloc(q->n, sizeof(*picks));
	if (!picks)
		goto out;
	/* Resolve each query term into the pool of index terms; a term no
	 * live document holds cannot match and is left out. */
	for (size_t i = 0; i < q->n; i++) {
		size_t cap_pool = pool_cap;
		uint64_t df;
		size_t n;

		if (grow_array((void **)&pool, &pool_cap,
			       pool_len + BM25_PREFIX_TERMS_MAX,
			       sizeof(*pool)) < 0) {
			pool_cap = cap_pool;
			goto out;
		}
		n = resolve(ix, &q->t[i], pool + pool_len,
			    BM25_PREFIX_TERMS_MAX, &df);
		if (n == 0)
			continue;
		picks[n_picks++] = (struct pick){i, df, pool_len, n};
		pool_len += n;
	}
	qsort(picks, n_picks, sizeof(*picks), pick_cmp);
	if (n_picks > BM25_TERMS_MAX)
		n_picks = BM25_TERMS_MAX;
	/* The chosen ones in query order: matched bits read as the query. */
	qsort(picks, n_picks, sizeof(*picks), pick_q_cmp);
	if (grow_array((void **)&ix->touched, &ix->cap_touched, ix->next_doc,
		       sizeof(*ix->touched)) < 0)
		goto out;
	if (ix->cap_acc < ix->next_doc) {
		size_t cap = ix->cap_acc;

		if (grow_array((void **)&ix->acc, &cap, ix->next_doc,
			       sizeof(*ix->acc)) < 0)
			goto out;
		ix->cap_acc = cap;
	}
	avgdl = (double)ix->total_len / (double)ix->n_live;
	if (avgdl <= 0)
		avgdl = 1;
	units = malloc((pool_len + 1) * sizeof(*units));
	rest = malloc((pool_len + 1) * sizeof(*rest));
	rest_df = malloc((pool_len + 1) * sizeof(*rest_df));
	low = malloc(limit < ix->n_live ? limit * sizeof(*low) : 1);
	if (!units || !rest || !rest_df || !low)
		goto out;
	for (size_t i = 0; i < n_picks; i++) {
		scored[i] = picks[i].q;
		for (size_t k = 0; k < picks[i].n; k++)
			units[n_units++] = unit_of(ix, pool[picks[i].first + k],
						   (unsigned)i, avgdl);
	}
	*n_scored = n_picks;
	/* The highest bounds first; what the others could still add. */
	qsort(units, n_units, sizeof(*units), unit_cmp);
	rest[n_units] = 0;
	rest_df[n_units] = 0;
	for (size_t i = n_units; i-- > 0;) {
		rest[i] = rest[i + 1] + units[i].bound;
		rest_df[i] = rest_df[i + 1] + ix->terms[units[i].term].df;
	}
	for (size_t i = 0; i < n_units; i++) {
		/* Are the best so far out of reach of what is left? Asked
		 * when it costs less than the postings left to read, and
		 * again once the touched documents doubled (a bounded
		 * cost); a margin for the rounding of float sums. */
		if (grow && i > 0 && limit < ix->n_live && n_touched >= limit &&
		    n_touched <= rest_df[i] && n_touched >= 2 * tried_at) {
			tried_at = n_touched;
			if (rest[i] * (1.0 + 1e-4) <
			    threshold(ix, n_touched, limit, accept, ctx, low))
				grow = false;
		}
		score_term(ix, &units[i], avgdl, grow, &n_touched);
	}
	heap = malloc((limit < n_touched ? limit : n_touched) * sizeof(*heap) +
		      1);
	if (!heap)
		goto reset;
	for (size_t i = 0; i < n_touched; i++) {
		uint32_t doc = ix->touched[i];
		struct bm25_hit h = {doc, ix->acc[doc].score, ix->acc[doc].mask,
				     0};

		/* Below the worst kept: out, without asking the filter. */
		if (n_heap == limit && h.score < heap[0].score)
			continue;
		if (ix->acc[doc].accept == ACC_REFUSED ||
		    (accept && !accept(ctx, doc, &h.tie)))
			continue;
		if (n_heap < limit) {
			heap[n_heap] = h;
			sift_up(heap, n_heap++);
		} else if (worse(&heap[0], &h)) {
			heap[0] = h;
			sift_down(heap, n_heap, 0);
		}
	}
	qsort(heap, n_heap, sizeof(*heap), hit_cmp);
	*hits = n_heap ? heap : NULL;
	*n_hits = n_heap;
	if (!n_heap)
		free(heap);
	heap = NULL;
	rc = 0;
reset:
	for (size_t i = 0; i < n_touched; i++)
		ix->acc[ix->touched[i]] = (struct acc){0, 0, ACC_UNASKED};
out:
	free(heap);
	free(low);
	free(rest_df);
	free(rest);
	free(units);
	free(picks);
	free(pool);
	return rc;
}

void bm25_trim(struct bm25 *ix)
{
	for (size_t i = 0; i < ix->n_terms; i++) {
		struct term *t = &ix->terms[i];
		uint8_t *p;

		if (t->cap == t->len)
			continue;
		p = t->len ? realloc(t->post, t->len) : NULL;
		if (p || !t->len) {
			if (!t->len)
				free(t->post);
			t->post = p;
			t->cap = t->len;
		}
	}
}

size_t bm25_memory(const struct bm25 *ix)
{
	size_t n = sizeof(*ix) + ix->cap_terms * sizeof(*ix->terms) +
		   ix->table_cap * sizeof(*ix->table) + ix->arena_cap +
		   ix->n_sorted * sizeof(*ix->sorted) +
		   ix->cap_docs * (sizeof(*ix->dl) + 1) +
		   ix->cap_tf * sizeof(*ix->tf) +
		   ix->cap_touched * sizeof(*ix->touched) +
		   ix->cap_acc * sizeof(*ix->acc);

	for (size_t i = 0; i < ix->n_terms; i++)
		n += ix->terms[i].cap;
	return n;
}

/*
 * A BM25 ranking index over documents of several weighted text fields
 * (experiences: context weighted highest, then action and outcome), on
 * the shared tokenizer (find/tokenize): whole folded words, never parts
 * of words unless a query word ends in '*' (a prefix).
 *
 * Fields are combined the BM25F way: a term's frequency in a document is
 * the weighted sum of its frequencies in the fields, and the document's
 * length the weighted sum of the fields' lengths (in tokens), so a word
 * in the context counts as much as it does three times in the outcome.
 * score(d) = sum over query terms t of
 *   idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * dl / avgdl))
 * with idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 = 1.2, b = 0.75,
 * over the live documents. Stop words (a fixed English list) are neither
 * indexed nor searched; tokens longer than BM25_TOKEN_MAX bytes are not
 * indexed.
 *
 * Documents are numbered by the caller, in strictly increasing order of
 * addition (so postings are delta-coded appends); a removed document
 * stays in the postings, skipped, until the index is rebuilt (at the
 * next start). Loop thread only.
 */
#ifndef VMEM_DAEMON_BM25_H
#define VMEM_DAEMON_BM25_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Query terms that count at most (the rarest in the index first). */
#define BM25_TERMS_MAX 64
/* Distinct words a query text may hold (more: a QueryError). */
#define BM25_QUERY_WORDS_MAX 4096
/* A token longer than this (bytes, folded) is not indexed. */
#define BM25_TOKEN_MAX 128
/* Index terms a prefix stands for at most (the most frequent first is
 * not promised: the first in byte order). */
#define BM25_PREFIX_TERMS_MAX 1024

struct bm25;
struct bm25_query;

/* One field of a document: its text and its weight (>= 1). */
struct bm25_field {
	const char *text;
	size_t len;
	unsigned weight;
};

/* A result: the document, its score, and which query terms it matched
 * (bit i: the query term scored[i] of bm25_search). */
struct bm25_hit {
	uint32_t doc;
	double score;
	uint64_t matched;
	uint64_t tie; /* the caller's tie-break key (bm25_accept_fn) */
};

/*
 * Whether a matching document may be returned (filters the index does not
 * know: an agent, a minimum importance); *tie orders equal scores, higher
 * first (experiences: importance, then recency).
 */
typedef bool (*bm25_accept_fn)(void *ctx, uint32_t doc, uint64_t *tie);

struct bm25 *bm25_new(void);
void bm25_free(struct bm25 *ix);

/*
 * Index document doc (greater than every document added before) made of
 * fields[0..n). 0, or -ENOMEM (nothing of it is then searchable), or
 * -EINVAL when doc is not above the last one.
 */
int bm25_add(struct bm25 *ix, uint32_t doc, const struct bm25_field *fields,
	     size_t n);

/* Stop returning doc; fields are what it was added with (its terms'
 * document counts go down). A document not added, or removed already,
 * is left alone. */
void bm25_remove(struct bm25 *ix, uint32_t doc, const struct bm25_field *fields,
		 size_t n);

/* Live documents. */
size_t bm25_count(const struct bm25 *ix);

/* Whether a folded token is a stop word. */
bool bm25_stopword(const char *tok, size_t len);

/*
 * Parse a query text: its words (split at white space) tokenized as the
 * documents are; a word ending in '*' makes its last token a prefix. Stop
 * words are dropped (a prefix is kept even if it is one), repeated terms
 * counted once. 0; -EINVAL with msg when nothing searchable is left (an
 * empty or all-stop-word text) or there are more than
 * BM25_QUERY_WORDS_MAX distinct terms; -ENOMEM.
 */
int bm25_query_parse(const char *text, size_t len, struct bm25_query **out,
		     char *msg, size_t msgn);
void bm25_query_free(struct bm25_query *q);

/* The query's terms: the count, and term i as shown to users (the
 * folded token, with '*' after a prefix), borrowed. */
size_t bm25_query_terms(const struct bm25_query *q);
const char *bm25_query_term(const struct bm25_query *q, size_t i);

/*
 * The best limit (>= 1) documents for q that accept takes, by score,
 * then tie key, then newest document number. Only the BM25_TERMS_MAX
 * query terms with the fewest matching documents are scored: scored[i]
 * (BM25_TERMS_MAX entries, the caller's) receives the query term that
 * bit i of a hit's matched stands for (in query order), *n_scored how
 * many. *hits is
 * malloc'd (NULL when none). 0 or -ENOMEM.
 */
int bm25_search(struct bm25 *ix, const struct bm25_query *q, size_t limit,
		bm25_accept_fn accept, void *ctx, struct bm25_hit **hits,
		size_t *n_hits, size_t *scored, size_t *n_scored);

/* Give back the room the postings grew into (after a bulk load: the
 * next addition to a term grows it again). */
void bm25_trim(struct bm25 *ix);

/* Bytes held (postings, vocabulary, per-document arrays, scratch). */
size_t bm25_memory(const struct bm25 *ix);

#endif

/*
 * The keyword search index: an inverted index from folded tokens to the
 * sorted list of index slots whose content contains them (one entry per
 * slot, not per occurrence, to keep memory below the content's size).
 * Phrases and prefixes are resolved from these lists, then phrases are
 * verified against the candidates' text. Slot order is (x, y, z) order.
 * Loop thread only.
 */
#ifndef VMEM_DAEMON_SEARCH_H
#define VMEM_DAEMON_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEARCH_TERMS_MAX      64
#define SEARCH_TERM_BYTES_MAX 1024

struct search_index;
struct search_query;

struct search_hit {
	size_t slot;
	unsigned score;	  /* distinct terms matched */
	uint64_t matched; /* bit i set: term i matched */
};

/* The text a slot was indexed with (for phrase checks): borrowed, valid
 * until the next call. 0, or negative errno. */
typedef int (*search_text_fn)(void *ctx, size_t slot, const char **text,
			      size_t *len);

/* A new empty index for slots 0..n_slots-1, or NULL. */
struct search_index *search_new(size_t n_slots);
void search_free(struct search_index *si);

/* Index a slot's text; the slot must not be indexed. 0, -EINVAL for a
 * slot >= n_slots, or -ENOMEM (then the slot is left unindexed). */
int search_add(struct search_index *si, size_t slot, const char *text,
	       size_t len);

/* Drop a slot's postings; text must be what it was indexed with. */
void search_remove(struct search_index *si, size_t slot, const char *text,
		   size_t len);

/*
 * Parse search terms. A term is tokenized like content; several tokens
 * make a phrase (consecutive tokens); a trailing '*' makes the last token
 * a prefix. Returns 0, -EINVAL with msg for an empty list, more than
 * SEARCH_TERMS_MAX terms, an empty or over-long term, or a term without
 * tokens (msg names the term by its 0-based index), or -ENOMEM. The '*'
 * is exactly the term's last byte. Terms equal after folding (same
 * tokens, same prefix flag: "Über" and "über") are one term for the
 * score, and each of them gets its matched bit.
 */
int search_query_parse(const char *const *terms, const size_t *lens, size_t n,
		       struct search_query **out, char *msg, size_t msgn);
void search_query_free(struct search_query *q);

/* Bit i set when term i is the first of the terms equal to it after
 * folding ("Über" and "über" are one term): the terms to report. */
uint64_t search_query_unique(const struct search_query *q);

/*
 * Run a query: hits sorted by score descending, then slot ascending; with
 * match_all only slots matching every term. At most limit hits (0: no
 * limit). *hits is malloc'd (caller frees; NULL when there are none).
 * Hits have score >= 1. Returns 0, or -errno (text_of's error, -ENOMEM).
 */
int search_run(struct search_index *si, const struct search_query *q,
	       bool match_all, size_t limit, search_text_fn text_of, void *ctx,
	       struct search_hit **hits, size_t *n_hits);

/* Bytes held by the index (postings, vocabulary, tables). */
size_t search_memory(const struct search_index *si);

#endif

/*
 * The keyword search index: a positional inverted index from folded
 * tokens to the slots whose content holds them, with the positions of
 * each occurrence, compressed (delta + varint, in blocks of up to 128
 * slots with a skip table), so that the index stays well below the
 * content's size. Phrases are checked on the positions; prefixes are
 * resolved through the vocabulary, kept sorted. Slot order is (x, y, z)
 * order.
 *
 * A query is evaluated document at a time in slot order, with a threshold
 * on the score that only rises (the best `limit` hits are known early for
 * common terms), and it can be run in steps: between two steps the index
 * may change, and the caller says which slots changed since the query
 * began and what their text was then, so that the answer is the one the
 * index held when the query began. Loop thread only.
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
struct search_exec;

struct search_hit {
	size_t slot;
	unsigned score;	  /* distinct terms matched */
	uint64_t matched; /* bit i set: term i matched */
};

/* The text a slot holds now (to check a phrase ending in a prefix, or a
 * prefix of many tokens on one slot): borrowed, valid until the next
 * call. 0, or negative errno. */
typedef int (*search_text_fn)(void *ctx, size_t slot, const char **text,
			      size_t *len);

/*
 * The slots whose text changed since a stepped query began (see
 * search_exec_step): next(ctx, from) is the smallest such slot >= from, or
 * SIZE_MAX; old_text(ctx, slot, ...) gives the text the slot held when the
 * query began (borrowed, valid until the next call): 0, -ENOENT when it
 * held none, or another negative errno.
 */
struct search_changes {
	void *ctx;
	size_t (*next)(void *ctx, size_t from);
	int (*old_text)(void *ctx, size_t slot, const char **text, size_t *len);
};

/* A new empty index for slots 0..n_slots-1 (n_slots < 2^31), or NULL. */
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
 * Run a query at once: hits sorted by score descending, then slot
 * ascending; with match_all only slots matching every term. At most limit
 * hits (0: no limit). *hits is malloc'd (caller frees; NULL when there are
 * none). Hits have score >= 1. Returns 0, or -errno (text_of's error,
 * -ENOMEM).
 */
int search_run(struct search_index *si, const struct search_query *q,
	       bool match_all, size_t limit, search_text_fn text_of, void *ctx,
	       struct search_hit **hits, size_t *n_hits);

/*
 * The same query in steps. search_exec_new prepares it (q, text_of's ctx
 * and si stay the caller's and must outlive it): 0 or -ENOMEM.
 * search_exec_step works for about `budget` units (a posting read, a slot
 * checked; SIZE_MAX: to the end) and returns 1 when the query is
 * finished, 0 when more steps are needed, or -errno. changes (NULL: none)
 * names the slots changed since the exec was made. search_exec_take hands
 * over the hits of a finished query as search_run would (0 or -ENOMEM).
 */
int search_exec_new(struct search_index *si, const struct search_query *q,
		    bool match_all, size_t limit, search_text_fn text_of,
		    void *ctx, struct search_exec **out);
int search_exec_step(struct search_exec *e, const struct search_changes *ch,
		     size_t budget);
/* Before the first step: a page after the hit (score, slot), i.e. only
 * the hits ranked after it (a lower score, or that score and a higher
 * slot). */
void search_exec_after(struct search_exec *e, unsigned score, size_t slot);
int search_exec_take(struct search_exec *e, struct search_hit **hits,
		     size_t *n_hits);
void search_exec_free(struct search_exec *e);

/* Bytes held by the index (postings, vocabulary, tables). */
size_t search_memory(const struct search_index *si);

#endif

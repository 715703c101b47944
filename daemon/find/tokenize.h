/*
 * The search tokenizer, used identically for decision content and search
 * terms: tokens are maximal runs of Unicode letters (L*), combining marks
 * following them (M*), decimal digits (Nd) and '_', normalised to NFC and
 * case-folded with utf8proc. Everything else separates tokens. Pure: no
 * I/O, no global state.
 */
#ifndef VMEM_DAEMON_TOKENIZE_H
#define VMEM_DAEMON_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Called for each token in order: the folded token (borrowed, valid during
 * the call, not NUL-terminated) and its 0-based position. A non-zero
 * return stops tokenizing and is returned by tokenize().
 */
typedef int (*token_fn)(void *ctx, const char *tok, size_t len, size_t pos);

/*
 * Tokenize UTF-8 text (invalid sequences act as separators). Returns 0, the
 * callback's non-zero value, or -ENOMEM.
 */
int tokenize(const char *text, size_t len, token_fn cb, void *ctx);

/* A folded token (as tokenize() hands them out), borrowed. */
struct tok_span {
	const char *p;
	size_t len;
};

/*
 * Whether text's tokens contain toks[0..n-1] (n >= 1) as consecutive
 * tokens; with last_prefix the last one need only be a prefix of the
 * text's token. Same result as tokenizing text and comparing, faster on
 * all-ASCII text. Returns 1, 0 or -ENOMEM.
 */
int tokenize_has_phrase(const char *text, size_t len,
			const struct tok_span *toks, size_t n,
			bool last_prefix);

#endif

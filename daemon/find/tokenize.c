/*
 * Search tokenizer. A token is a maximal run of code points that are
 * letters (Lu Ll Lt Lm Lo), decimal digits (Nd) or '_', plus combining
 * marks (Mn Mc Me) inside a run. Invalid UTF-8 bytes separate tokens.
 * Each token is folded with the equivalent of utf8proc_map(STABLE |
 * COMPOSE | CASEFOLD): all-ASCII tokens take a fast path (lower-casing is
 * exactly what that fold does to ASCII), others go through utf8proc. The
 * scratch buffers live on the stack and move to the heap only for tokens
 * longer than them, so tokenizing does not allocate per token.
 */
#include "tokenize.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define FOLD_OPTIONS (UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD)
#define STACK_CPS    256

/* ASCII word bytes (letters, digits, '_') to their folded form; 0: not
 * a word byte. */
static const unsigned char ascii_fold[128] = {
	['0'] = '0', ['1'] = '1', ['2'] = '2', ['3'] = '3', ['4'] = '4',
	['5'] = '5', ['6'] = '6', ['7'] = '7', ['8'] = '8', ['9'] = '9',
	['_'] = '_', ['A'] = 'a', ['B'] = 'b', ['C'] = 'c', ['D'] = 'd',
	['E'] = 'e', ['F'] = 'f', ['G'] = 'g', ['H'] = 'h', ['I'] = 'i',
	['J'] = 'j', ['K'] = 'k', ['L'] = 'l', ['M'] = 'm', ['N'] = 'n',
	['O'] = 'o', ['P'] = 'p', ['Q'] = 'q', ['R'] = 'r', ['S'] = 's',
	['T'] = 't', ['U'] = 'u', ['V'] = 'v', ['W'] = 'w', ['X'] = 'x',
	['Y'] = 'y', ['Z'] = 'z', ['a'] = 'a', ['b'] = 'b', ['c'] = 'c',
	['d'] = 'd', ['e'] = 'e', ['f'] = 'f', ['g'] = 'g', ['h'] = 'h',
	['i'] = 'i', ['j'] = 'j', ['k'] = 'k', ['l'] = 'l', ['m'] = 'm',
	['n'] = 'n', ['o'] = 'o', ['p'] = 'p', ['q'] = 'q', ['r'] = 'r',
	['s'] = 's', ['t'] = 't', ['u'] = 'u', ['v'] = 'v', ['w'] = 'w',
	['x'] = 'x', ['y'] = 'y', ['z'] = 'z',
};

enum cls { SEP, WORD, MARK };

struct scratch {
	utf8proc_int32_t stack[STACK_CPS];
	utf8proc_int32_t *buf; /* stack or heap */
	size_t cap;	       /* in code points */
};

static enum cls classify(utf8proc_int32_t cp)
{
	switch (utf8proc_category(cp)) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
	case UTF8PROC_CATEGORY_ND:
		return WORD;
	case UTF8PROC_CATEGORY_MN:
	case UTF8PROC_CATEGORY_MC:
	case UTF8PROC_CATEGORY_ME:
		return MARK;
	default:
		return cp == '_' ? WORD : SEP;
	}
}

/* Make room for n code points (or n bytes: the buffer serves both). */
static int reserve(struct scratch *s, size_t n)
{
	utf8proc_int32_t *p;

	if (n <= s->cap)
		return 0;
	if (n > SIZE_MAX / sizeof(*p) / 2)
		return -ENOMEM;
	n *= 2;
	p = malloc(n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (s->buf != s->stack)
		free(s->buf);
	s->buf = p;
	s->cap = n;
	return 0;
}

/* Fold one token (valid UTF-8) and hand it to the callback. */
static int emit(struct scratch *s, const char *tok, size_t len, bool ascii,
		token_fn cb, void *ctx, size_t pos)
{
	utf8proc_ssize_t n;
	char *out;
	size_t i;
	int rc;

	if (ascii) {
		/* A token of n ASCII bytes needs n bytes: cap is >= n / 4. */
		rc = reserve(s, len / sizeof(*s->buf) + 1);
		if (rc < 0)
			return rc;
		out = (char *)s->buf;
		for (i = 0; i < len; i++)
			out[i] = (char)ascii_fold[(unsigned char)tok[i]];
		return cb(ctx, out, len, pos);
	}
	for (;;) {
		n = utf8proc_decompose_custom((const utf8proc_uint8_t *)tok,
					      (utf8proc_ssize_t)len, s->buf,
					      (utf8proc_ssize_t)s->cap,
					      FOLD_OPTIONS, NULL, NULL);
		if (n < 0)
			return 0; /* cannot happen on valid input: skip */
		if ((size_t)n <= s->cap)
			break;
		rc = reserve(s, (size_t)n);
		if (rc < 0)
			return rc;
	}
	n = utf8proc_reencode(s->buf, n, FOLD_OPTIONS);
	if (n <= 0)
		return 0;
	return cb(ctx, (const char *)s->buf, (size_t)n, pos);
}

/* Decode one code point at p: its length, or -1 for an invalid byte. */
static utf8proc_ssize_t next_cp(const char *p, size_t left,
				utf8proc_int32_t *cp)
{
	if ((unsigned char)*p < 0x80) {
		*cp = (unsigned char)*p;
		return 1;
	}
	return utf8proc_iterate((const utf8proc_uint8_t *)p,
				(utf8proc_ssize_t)(left > 4 ? 4 : left), cp);
}

/* Fold and emit the all-ASCII token [start, end) scanned into out (w bytes
 * fitted). */
static int emit_ascii(struct scratch *s, const char *text, size_t start,
		      size_t end, size_t w, token_fn cb, void *ctx, size_t pos)
{
	if (w == end - start)
		return cb(ctx, (const char *)s->buf, w, pos);
	return emit(s, text + start, end - start, true, cb, ctx, pos);
}

int tokenize(const char *text, size_t len, token_fn cb, void *ctx)
{
	const unsigned char *u = (const unsigned char *)text;
	struct scratch s;
	size_t i = 0, pos = 0, start, w, room;
	utf8proc_int32_t cp = 0;
	utf8proc_ssize_t n;
	enum cls c;
	unsigned char f;
	char *out;
	int rc = 0;

	s.buf = s.stack;
	s.cap = STACK_CPS;
	while (i < len) {
		if (u[i] < 0x80 && !ascii_fold[u[i]]) {
			i++; /* ASCII separator */
			continue;
		}
		/* ASCII fast path: fold while scanning. */
		start = i;
		out = (char *)s.buf;
		room = s.cap * sizeof(*s.buf);
		w = 0;
		while (i < len && u[i] < 0x80 && (f = ascii_fold[u[i]])) {
			if (w < room)
				out[w++] = (char)f;
			i++;
		}
		if (i == len || u[i] < 0x80) {
			/* Ended by the text's end or an ASCII separator. */
			rc = emit_ascii(&s, text, start, i, w, cb, ctx, pos++);
			if (rc)
				goto out;
			continue;
		}
		/* A non-ASCII code point (or an invalid byte) follows. */
		n = next_cp(text + i, len - i, &cp);
		c = n < 0 ? SEP : classify(cp);
		if (i == start ? c != WORD : c == SEP) {
			if (i > start) {
				rc = emit_ascii(&s, text, start, i, w, cb, ctx,
						pos++);
				if (rc)
					goto out;
			}
			i += n < 0 ? 1 : (size_t)n; /* a separator */
			continue;
		}
		/* General path: extend over word code points and marks. */
		i += (size_t)n;
		while (i < len) {
			if (u[i] < 0x80) {
				if (!ascii_fold[u[i]])
					break;
				i++;
				continue;
			}
			n = next_cp(text + i, len - i, &cp);
			if (n < 0 || classify(cp) == SEP)
				break;
			i += (size_t)n;
		}
		rc = emit(&s, text + start, i - start, false, cb, ctx, pos++);
		if (rc)
			goto out;
	}
out:
	if (s.buf != s.stack)
		free(s.buf);
	return rc;
}

static bool all_ascii(const unsigned char *u, size_t len)
{
	uint64_t acc = 0, w;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		memcpy(&w, u + i, 8);
		acc |= w;
	}
	for (; i < len; i++)
		acc |= u[i];
	return !(acc & UINT64_C(0x8080808080808080));
}

/* Next position >= from of byte c in u[0..len), or len. */
static size_t find_byte(const unsigned char *u, size_t len, size_t from,
			unsigned char c)
{
	const unsigned char *p;

	if (from >= len)
		return len;
	p = memchr(u + from, c, len - from);
	return p ? (size_t)(p - u) : len;
}

/* Whether the tokens starting at u[i] match toks (ASCII text). */
static bool ascii_match_at(const unsigned char *u, size_t len, size_t i,
			   const struct tok_span *toks, size_t n,
			   bool last_prefix)
{
	size_t k, m, l;

	for (k = 0; k < n; k++) {
		const unsigned char *t = (const unsigned char *)toks[k].p;

		l = toks[k].len;
		while (k && i < len && !ascii_fold[u[i]])
			i++; /* separators */
		if (len - i < l)
			return false;
		for (m = 0; m < l && ascii_fold[u[i + m]] == t[m]; m++)
			;
		if (m < l)
			return false;
		i += l;
		if (!(last_prefix && k == n - 1) && i < len && ascii_fold[u[i]])
			return false; /* the text's token is longer */
	}
	return true;
}

/* ASCII text: tokens are runs of ascii_fold[] bytes, folded by it. Scan
 * for the first token's first byte in both cases with memchr. */
static int ascii_phrase(const unsigned char *u, size_t len,
			const struct tok_span *toks, size_t n, bool last_prefix)
{
	unsigned char lo = (unsigned char)toks[0].p[0], up = lo;
	size_t a, b, j;

	if (lo >= 'a' && lo <= 'z')
		up = (unsigned char)(lo - 32);
	a = find_byte(u, len, 0, lo);
	b = up == lo ? len : find_byte(u, len, 0, up);
	while (a < len || b < len) {
		j = a < b ? a : b;
		if ((j == 0 || !ascii_fold[u[j - 1]]) &&
		    ascii_match_at(u, len, j, toks, n, last_prefix))
			return 1;
		if (j == a)
			a = find_byte(u, len, j + 1, lo);
		else
			b = find_byte(u, len, j + 1, up);
	}
	return 0;
}

struct phrase_ctx {
	const struct tok_span *toks;
	size_t n;
	bool last_prefix;
	unsigned char *active; /* active[k]: the last k tokens match */
};

static int phrase_cb(void *ctx, const char *p, size_t len, size_t pos)
{
	struct phrase_ctx *pc = ctx;
	size_t k = pc->n;

	(void)pos;
	/* active[k + 1] = active[k] && the token matches toks[k] */
	while (k--) {
		const struct tok_span *t = &pc->toks[k];
		bool fits = pc->last_prefix && k == pc->n - 1 ? len >= t->len
							      : len == t->len;

		pc->active[k + 1] =
			pc->active[k] && fits && !memcmp(p, t->p, t->len);
	}
	return pc->active[pc->n];
}

int tokenize_has_phrase(const char *text, size_t len,
			const struct tok_span *toks, size_t n, bool last_prefix)
{
	unsigned char stack[64];
	struct phrase_ctx pc = {toks, n, last_prefix, stack};
	bool ascii_toks = true;
	size_t k, m;
	int rc;

	if (n == 0)
		return 1;
	for (k = 0; k < n && ascii_toks; k++)
		for (m = 0; m < toks[k].len; m++)
			if ((unsigned char)toks[k].p[m] >= 0x80)
				ascii_toks = false;
	if (all_ascii((const unsigned char *)text, len)) {
		/* Folded tokens of ASCII text are ASCII. */
		if (!ascii_toks)
			return 0;
		return ascii_phrase((const unsigned char *)text, len, toks, n,
				    last_prefix);
	}
	if (n + 1 > sizeof(stack)) {
		pc.active = malloc(n + 1);
		if (!pc.active)
			return -ENOMEM;
	}
	memset(pc.active, 0, n + 1);
	pc.active[0] = 1;
	rc = tokenize(text, len, phrase_cb, &pc);
	if (pc.active != stack)
		free(pc.active);
	return rc;
}

/*
 * The quick loader (see fastjson.h): a recursive descent over the bytes
 * that gives up (NULL) at the first thing it does not handle itself.
 */
#include "protocol/fastjson.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/decision.h" /* utf8_valid: jansson's own rules */

#define INT_DIGITS_MAX 18 /* always within json_int_t */

struct lexer {
	const char *p, *end;
	char *scratch; /* decoded strings with escapes (one at a time) */
	size_t scratch_cap;
};

static json_t *value_at(struct lexer *lx, int depth);

static void skip_ws(struct lexer *lx)
{
	while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' ||
				   *lx->p == '\n' || *lx->p == '\r'))
		lx->p++;
}

/*
 * The string whose opening quote is at lx->p: its raw bytes s[0..*raw),
 * ending before the closing quote. False if it does not end, holds a
 * control character or invalid UTF-8; *esc tells whether it has escapes.
 */
static bool string_span(struct lexer *lx, const char **s, size_t *raw,
			bool *esc)
{
	const char *q = lx->p + 1;
	bool ascii = true;

	*esc = false;
	while (q < lx->end && *q != '"') {
		unsigned char c = (unsigned char)*q;

		if (c == '\\') {
			*esc = true;
			q += 2; /* the escaped character is checked later */
			continue;
		}
		if (c < 0x20)
			return false;
		ascii &= c < 0x80;
		q++;
	}
	if (q >= lx->end)
		return false;
	*s = lx->p + 1;
	*raw = (size_t)(q - *s);
	/* Escapes are ASCII, so they never hide a bad sequence. */
	return ascii || utf8_valid(*s, *raw);
}

/* A string value: copied from the line, or decoded through scratch. */
static json_t *string_at(struct lexer *lx)
{
	const char *s;
	size_t raw, n = 0;
	bool esc;

	if (!string_span(lx, &s, &raw, &esc))
		return NULL;
	lx->p = s + raw + 1;
	if (!esc)
		return json_stringn_nocheck(s, raw);
	if (raw > lx->scratch_cap) {
		char *b = realloc(lx->scratch, raw);

		if (!b)
			return NULL;
		lx->scratch = b;
		lx->scratch_cap = raw;
	}
	for (size_t i = 0; i < raw; i++) {
		char c = s[i];

		if (c != '\\') {
			lx->scratch[n++] = c;
			continue;
		}
		switch (s[++i]) {
		case '"':
		case '\\':
		case '/':
			c = s[i];
			break;
		case 'b':
			c = '\b';
			break;
		case 'f':
			c = '\f';
			break;
		case 'n':
			c = '\n';
			break;
		case 'r':
			c = '\r';
			break;
		case 't':
			c = '\t';
			break;
		default:
			return NULL; /* \u and anything else: jansson's */
		}
		lx->scratch[n++] = c;
	}
	return json_stringn_nocheck(lx->scratch, n);
}

/* An integer of at most INT_DIGITS_MAX digits, without fraction or
 * exponent (and no leading zero, which JSON forbids). */
static json_t *integer_at(struct lexer *lx)
{
	const char *p = lx->p;
	bool neg = false;
	int64_t v = 0;
	int digits = 0;

	if (p < lx->end && *p == '-') {
		neg = true;
		p++;
	}
	if (p >= lx->end || *p < '0' || *p > '9')
		return NULL;
	if (*p == '0' && p + 1 < lx->end && p[1] >= '0' && p[1] <= '9')
		return NULL;
	while (p < lx->end && *p >= '0' && *p <= '9') {
		if (++digits > INT_DIGITS_MAX)
			return NULL;
		v = v * 10 + (*p++ - '0');
	}
	if (p < lx->end && (*p == '.' || *p == 'e' || *p == 'E'))
		return NULL;
	lx->p = p;
	return json_integer(neg ? -v : v);
}

static json_t *word_at(struct lexer *lx, const char *w, size_t n, json_t *v)
{
	if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, w, n) != 0)
		return NULL;
	lx->p += n;
	return v;
}

static json_t *object_at(struct lexer *lx, int depth)
{
	json_t *obj = json_object();

	if (!obj)
		return NULL;
	lx->p++;
	skip_ws(lx);
	if (lx->p < lx->end && *lx->p == '}') {
		lx->p++;
		return obj;
	}
	for (;;) {
		const char *key;
		size_t klen;
		bool esc;
		json_t *v;

		skip_ws(lx);
		if (lx->p >= lx->end || *lx->p != '"' ||
		    !string_span(lx, &key, &klen, &esc) || esc)
			goto fail;
		lx->p = key + klen + 1;
		skip_ws(lx);
		if (lx->p >= lx->end || *lx->p != ':')
			goto fail;
		lx->p++;
		v = value_at(lx, depth);
		if (!v)
			goto fail;
		if (json_object_getn(obj, key, klen)) {
			json_decref(v); /* a duplicate: jansson refuses it */
			goto fail;
		}
		if (json_object_setn_new_nocheck(obj, key, klen, v) < 0)
			goto fail; /* v is released by jansson */
		skip_ws(lx);
		if (lx->p < lx->end && *lx->p == ',') {
			lx->p++;
			continue;
		}
		if (lx->p < lx->end && *lx->p == '}') {
			lx->p++;
			return obj;
		}
		goto fail;
	}
fail:
	json_decref(obj);
	return NULL;
}

static json_t *array_at(struct lexer *lx, int depth)
{
	json_t *arr = json_array();

	if (!arr)
		return NULL;
	lx->p++;
	skip_ws(lx);
	if (lx->p < lx->end && *lx->p == ']') {
		lx->p++;
		return arr;
	}
	for (;;) {
		json_t *v = value_at(lx, depth);

		if (!v || json_array_append_new(arr, v) < 0)
			goto fail;
		skip_ws(lx);
		if (lx->p < lx->end && *lx->p == ',') {
			lx->p++;
			continue;
		}
		if (lx->p < lx->end && *lx->p == ']') {
			lx->p++;
			return arr;
		}
		goto fail;
	}
fail:
	json_decref(arr);
	return NULL;
}

static json_t *value_at(struct lexer *lx, int depth)
{
	skip_ws(lx);
	if (lx->p >= lx->end)
		return NULL;
	switch (*lx->p) {
	case '{':
		return depth < FASTJSON_MAX_DEPTH ? object_at(lx, depth + 1)
						  : NULL;
	case '[':
		return depth < FASTJSON_MAX_DEPTH ? array_at(lx, depth + 1)
						  : NULL;
	case '"':
		return string_at(lx);
	case 't':
		return word_at(lx, "true", 4, json_true());
	case 'f':
		return word_at(lx, "false", 5, json_false());
	case 'n':
		return word_at(lx, "null", 4, json_null());
	default:
		return integer_at(lx);
	}
}

json_t *fastjson_load(const char *text, size_t len)
{
	struct lexer lx = {text, text + len, NULL, 0};
	json_t *v = value_at(&lx, 0);

	skip_ws(&lx);
	if (v && lx.p != lx.end) {
		json_decref(v);
		v = NULL;
	}
	free(lx.scratch);
	return v;
}

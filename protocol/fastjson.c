/*
 * The quick loader (see fastjson.h): a recursive descent over the bytes
 * that gives up (NULL) at the first thing it does not handle itself.
 */
#include "protocol/fastjson.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/decision.h" /* utf8_valid: jansson's own rules */

#define INT_DIGITS_MAX 18 /* always within json_int_t */
#define REAL_CHARS_MAX 63 /* longer reals are left to jansson */

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

/* Where the JSON number at p ends (p itself if there is none there):
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; *integral tells whether
 * it has neither fraction nor exponent. */
static const char *number_end(const char *p, const char *end, bool *integral)
{
	const char *start = p, *d;

	*integral = true;
	if (p < end && *p == '-')
		p++;
	if (p >= end || *p < '0' || *p > '9')
		return start;
	if (*p == '0')
		p++;
	else
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	if (p < end && *p == '.') {
		*integral = false;
		for (d = ++p; p < end && *p >= '0' && *p <= '9'; p++)
			;
		if (p == d)
			return start;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		*integral = false;
		if (++p < end && (*p == '+' || *p == '-'))
			p++;
		for (d = p; p < end && *p >= '0' && *p <= '9'; p++)
			;
		if (p == d)
			return start;
	}
	return p;
}

/*
 * The quick way to real_of's answer, or false (then strtod's). It holds
 * for up to 19 significant digits m and a decimal exponent e with
 * |e| <= 27, on x87's long double of 64 bits: m and 10^|e| are exact there,
 * so m * 10^e or m / 10^-e is one correctly rounded operation, within
 * half a unit of the 64th bit of the true value; rounding that to 53
 * bits gives the true value's nearest double unless it lies exactly
 * halfway between two doubles (its low 11 bits 0x400), where the true
 * value may be on either side.
 */
static bool real_quick(const char *p, const char *end, double *out)
{
#if LDBL_MANT_DIG == 64 && (defined(__x86_64__) || defined(__i386__))
	static const long double pow10[] = {
		1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,
		1e7L,  1e8L,  1e9L,  1e10L, 1e11L, 1e12L, 1e13L,
		1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L,
		1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L,
	};
	bool neg = *p == '-', point = false;
	uint64_t m = 0;
	int digits = 0, e = 0, x = 0, xsign = 1;
	uint64_t significand;
	long double r;

	for (p += neg; p < end && *p != 'e' && *p != 'E'; p++) {
		if (*p == '.') {
			point = true;
			continue;
		}
		if (m == 0 && *p == '0') { /* leading zeros are not digits */
			e -= point;
			continue;
		}
		if (++digits > 19)
			return false;
		m = m * 10 + (uint64_t)(*p - '0');
		e -= point;
	}
	if (p < end) {
		if (*++p == '+' || *p == '-')
			xsign = *p++ == '-' ? -1 : 1;
		for (; p < end; p++)
			if ((x = x * 10 + (*p - '0')) > 1000)
				return false;
	}
	e += xsign * x;
	if (m == 0) {
		*out = neg ? -0.0 : 0.0;
		return true;
	}
	if (e < -27 || e > 27)
		return false;
	r = e < 0 ? (long double)m / pow10[-e] : (long double)m * pow10[e];
	/* x87's extended format: the significand's 64 bits come first. */
	memcpy(&significand, &r, sizeof(significand));
	if ((significand & 0x7ff) == 0x400)
		return false;
	*out = neg ? -(double)r : (double)r;
	return true;
#else
	(void)p;
	(void)end;
	(void)out;
	return false;
#endif
}

/*
 * The real whose text (a valid JSON number with a fraction or an
 * exponent) is p[0..n), as jansson reads it with strtod: the nearest
 * double. Why not strtod alone: an embedding is 1536 reals of 17
 * digits, and strtod took 200 ns over each.
 */
static bool real_of(const char *p, size_t n, double *out)
{
	char text[REAL_CHARS_MAX + 1], *stop;

	if (real_quick(p, p + n, out))
		return true;
	if (n > REAL_CHARS_MAX)
		return false;
	memcpy(text, p, n);
	text[n] = '\0';
	*out = strtod(text, &stop);
	/* Not all read: a locale whose decimal point is not '.' (jansson
	 * converts for it). An overflow: jansson's error. */
	return stop == text + n && !isinf(*out);
}

/*
 * A number: without fraction or exponent, an integer of at most
 * INT_DIGITS_MAX digits; with one, a real (real_of). A leading zero
 * before more digits ends the number early, and what follows then fails
 * the caller, as in jansson.
 */
static json_t *number_at(struct lexer *lx)
{
	bool integral;
	const char *p = lx->p, *e = number_end(p, lx->end, &integral);
	size_t n = (size_t)(e - p);
	double d;

	if (n == 0)
		return NULL;
	if (integral) {
		bool neg = *p == '-';
		int64_t v = 0;

		if ((size_t)neg + INT_DIGITS_MAX < n)
			return NULL;
		for (p += neg; p < e; p++)
			v = v * 10 + (*p - '0');
		lx->p = e;
		return json_integer(neg ? -v : v);
	}
	if (!real_of(p, n, &d))
		return NULL;
	lx->p = e;
	return json_real(d);
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
		return number_at(lx);
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

json_t *fastjson_loadb(const char *text, size_t len, size_t flags,
		       json_error_t *err)
{
	json_t *v = fastjson_load(text, len);

	if (v && !(flags & JSON_DECODE_ANY) && !json_is_object(v) &&
	    !json_is_array(v)) {
		json_decref(v);
		v = NULL;
	}
	return v ? v : json_loadb(text, len, flags, err);
}

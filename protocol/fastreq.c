/*
 * The fast request recogniser (see fastreq.h): a cursor over the line and
 * one function per grammar rule, each returning false at the first thing
 * it does not expect.
 */
#include "fastreq.h"

#include <string.h>

/* Digits beyond this might overflow int64: left to the full parser. */
#define INT_DIGITS_MAX 18

struct cursor {
	const char *p, *end;
};

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' ||
				 *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static bool eat(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p != ch)
		return false;
	c->p++;
	return true;
}

/* A string without escapes: its bytes between the quotes. */
static bool string(struct cursor *c, const char **s, size_t *n)
{
	const char *q;

	if (!eat(c, '"'))
		return false;
	/* Non-ASCII bytes are left to the full parser, which checks that
	 * they are UTF-8 (no string this recogniser needs has any). */
	for (q = c->p; q < c->end && *q != '"'; q++)
		if (*q == '\\' || (unsigned char)*q < 0x20 ||
		    (unsigned char)*q >= 0x80)
			return false;
	if (q >= c->end)
		return false;
	*s = c->p;
	*n = (size_t)(q - c->p);
	c->p = q + 1;
	return true;
}

static bool is(const char *s, size_t n, const char *lit)
{
	return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* A JSON integer: -?(0|[1-9][0-9]*), not followed by a fraction or an
 * exponent. */
static bool integer(struct cursor *c, int64_t *out)
{
	bool neg = false;
	int64_t v = 0;
	int digits = 0;

	skip_ws(c);
	if (c->p < c->end && *c->p == '-') {
		neg = true;
		c->p++;
	}
	if (c->p >= c->end || *c->p < '0' || *c->p > '9')
		return false;
	if (*c->p == '0') {
		c->p++;
		digits = 1;
	} else {
		while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
			if (++digits > INT_DIGITS_MAX)
				return false;
			v = v * 10 + (*c->p++ - '0');
		}
	}
	if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E' ||
			      (*c->p >= '0' && *c->p <= '9')))
		return false;
	*out = neg ? -v : v;
	return true;
}

/* {"x":int,"y":int,"z":int} in any order, each once. */
static bool coordinate(struct cursor *c, struct fastreq *r)
{
	unsigned seen = 0;
	const char *k;
	size_t n;

	if (!eat(c, '{'))
		return false;
	do {
		int64_t *v;
		unsigned bit;

		if (!string(c, &k, &n) || n != 1 || !eat(c, ':'))
			return false;
		if (*k == 'x') {
			v = &r->x;
			bit = 1;
		} else if (*k == 'y') {
			v = &r->y;
			bit = 2;
		} else if (*k == 'z') {
			v = &r->z;
			bit = 4;
		} else {
			return false;
		}
		if ((seen & bit) || !integer(c, v))
			return false;
		seen |= bit;
	} while (eat(c, ','));
	return seen == 7 && eat(c, '}');
}

/* {"coordinate":{...}} */
static bool params(struct cursor *c, struct fastreq *r)
{
	const char *k;
	size_t n;

	return eat(c, '{') && string(c, &k, &n) && is(k, n, "coordinate") &&
	       eat(c, ':') && coordinate(c, r) && eat(c, '}');
}

bool fastreq_parse(const char *line, size_t len, struct fastreq *out)
{
	struct cursor c = {line, line + len};
	unsigned seen = 0;
	const char *k, *s;
	size_t n, sn;

	if (!eat(&c, '{'))
		return false;
	do {
		unsigned bit;
		bool ok;

		if (!string(&c, &k, &n) || !eat(&c, ':'))
			return false;
		if (is(k, n, "jsonrpc")) {
			bit = 1;
			ok = string(&c, &s, &sn) && is(s, sn, "2.0");
		} else if (is(k, n, "id")) {
			bit = 2;
			ok = integer(&c, &out->id);
		} else if (is(k, n, "method")) {
			bit = 4;
			ok = string(&c, &out->method, &out->method_len);
		} else if (is(k, n, "params")) {
			bit = 8;
			ok = params(&c, out);
		} else {
			return false;
		}
		if (!ok || (seen & bit))
			return false;
		seen |= bit;
	} while (eat(&c, ','));
	if (seen != 15 || !eat(&c, '}'))
		return false;
	skip_ws(&c);
	return c.p == c.end;
}

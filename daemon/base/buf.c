/* Growable byte buffer: capacity doubles, so appends are amortised O(1). */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

bool buf_append(struct buf *b, const void *p, size_t n)
{
	if (n >= b->cap - b->len || !b->data) {
		size_t cap = b->cap ? b->cap : 256;
		char *d;

		while (cap - b->len <= n) {
			if (cap > (size_t)-1 / 2)
				return false;
			cap *= 2;
		}
		d = realloc(b->data, cap);
		if (!d)
			return false;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return true;
}

bool buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

bool buf_reserve(struct buf *b, size_t n)
{
	size_t cap;
	char *d;

	if (b->data && n < b->cap - b->len)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap - b->len <= n) {
		if (cap > (size_t)-1 / 2)
			return false;
		cap *= 2;
	}
	d = realloc(b->data, cap);
	if (!d)
		return false;
	b->data = d;
	b->cap = cap;
	b->data[b->len] = '\0';
	return true;
}

/* What a byte becomes inside a JSON string: 0 as it is, else the length
 * of its escape. */
static const unsigned char esc_len[256] = {
	6,	    6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6, /* \b \t \n \f
								    \r */
	6,	    6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 0,
	0,	    2, /* '"' */
	['\\'] = 2,
};

size_t json_str_len(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = len + 2;

	for (size_t i = 0; i < len; i++)
		if (esc_len[p[i]])
			n += esc_len[p[i]] - 1u;
	return n;
}

bool buf_json_str(struct buf *b, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run;
	char *o;

	/* The exact size costs a pass over s: skipped when the room for
	 * the worst case (every byte a \u00XX) is there already. */
	if (b->cap - b->len <= 6 * len + 2 &&
	    !buf_reserve(b, json_str_len(s, len)))
		return false;
	o = b->data + b->len;
	*o++ = '"';
	while (i < len) {
		for (run = i; run < len && !esc_len[p[run]]; run++)
			;
		memcpy(o, s + i, run - i);
		o += run - i;
		if (run == len)
			break;
		*o++ = '\\';
		switch (p[run]) {
		case '"':
		case '\\':
			*o++ = (char)p[run];
			break;
		case '\b':
			*o++ = 'b';
			break;
		case '\t':
			*o++ = 't';
			break;
		case '\n':
			*o++ = 'n';
			break;
		case '\f':
			*o++ = 'f';
			break;
		case '\r':
			*o++ = 'r';
			break;
		default:
			*o++ = 'u';
			*o++ = '0';
			*o++ = '0';
			*o++ = hex[p[run] >> 4];
			*o++ = hex[p[run] & 15];
		}
		i = run + 1;
	}
	*o++ = '"';
	b->len = (size_t)(o - b->data);
	b->data[b->len] = '\0';
	return true;
}

char *buf_take(struct buf *b, size_t *len)
{
	char *d = b->data;

	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return d;
}

void buf_done(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

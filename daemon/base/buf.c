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

bool buf_json_str(struct buf *b, const char *s, size_t len)
{
	/* The exact size costs a pass over s: skipped when the room for
	 * the worst case (every byte a \u00XX) is there already. */
	if (b->cap - b->len <= 6 * len + 2 &&
	    !buf_reserve(b, json_str_len(s, len)))
		return false;
	b->len = (size_t)(json_str_put(b->data + b->len, s, len) - b->data);
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

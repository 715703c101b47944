/*
 * NDJSON framer. The buffer holds [start, len): bytes not yet returned as
 * lines. [start, start + scanned) is known to hold no LF, so every byte is
 * searched once. The buffer grows by doubling up to what one line of
 * max_line bytes (plus CR, LF and some read slack) needs; consumed lines
 * are compacted away in framer_reserve().
 */
#include "protocol/framer.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FRAMER_MIN_ALLOC 4096
#define FRAMER_READ_TAIL 65536

/* Largest buffer framer_reserve() grows to: a full line, CR, LF, slack. */
static size_t framer_limit(const struct framer *f)
{
	size_t slack =
		f->max_line < FRAMER_READ_TAIL ? f->max_line : FRAMER_READ_TAIL;

	return f->max_line + 2 + slack;
}

void framer_init(struct framer *f, size_t max_line)
{
	memset(f, 0, sizeof(*f));
	f->max_line = max_line ? max_line : 1;
}

void framer_done(struct framer *f)
{
	free(f->buf);
	f->buf = NULL;
	f->cap = 0;
	f->start = 0;
	f->scanned = 0;
	f->len = 0;
}

static void compact(struct framer *f)
{
	if (f->start == 0)
		return;
	if (f->len > f->start)
		memmove(f->buf, f->buf + f->start, f->len - f->start);
	f->len -= f->start;
	f->start = 0;
}

/* Grow the allocation to at least need bytes (doubling). 0 or -ENOMEM. */
static int grow(struct framer *f, size_t need, size_t limit)
{
	size_t ncap = f->cap ? f->cap : FRAMER_MIN_ALLOC;
	char *nbuf;

	if (need <= f->cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2) {
			ncap = need;
			break;
		}
		ncap *= 2;
	}
	if (ncap > limit && need <= limit)
		ncap = limit;
	nbuf = realloc(f->buf, ncap);
	if (!nbuf)
		return -ENOMEM;
	f->buf = nbuf;
	f->cap = ncap;
	return 0;
}

int framer_reserve(struct framer *f, size_t want, char **ptr, size_t *avail)
{
	size_t limit = framer_limit(f);
	int ret;

	compact(f);
	if (want < FRAMER_READ_TAIL)
		want = FRAMER_READ_TAIL;
	if (f->len < limit) {
		if (want > limit - f->len)
			want = limit - f->len;
		if (f->cap - f->len < want) {
			ret = grow(f, f->len + want, limit);
			if (ret < 0)
				return ret;
		}
	}
	/* Full only when framer_next() was not called until it said 0. */
	if (f->cap == f->len)
		return -ENOBUFS;
	*ptr = f->buf + f->len;
	*avail = f->cap - f->len;
	return 0;
}

void framer_commit(struct framer *f, size_t n)
{
	if (n > f->cap - f->len)
		n = f->cap - f->len;
	f->len += n;
}

int framer_feed(struct framer *f, const void *data, size_t n)
{
	int ret;

	if (n == 0)
		return 0;
	compact(f);
	if (n > SIZE_MAX - f->len)
		return -ENOMEM;
	/* The data is already in memory: its size is the caller's bound. */
	ret = grow(f, f->len + n, framer_limit(f));
	if (ret < 0)
		return ret;
	memcpy(f->buf + f->len, data, n);
	f->len += n;
	return 0;
}

int framer_next(struct framer *f, const char **line, size_t *len)
{
	const char *p, *lf;
	size_t avail, n;

	if (f->failed)
		return -EMSGSIZE;
	for (;;) {
		p = f->buf + f->start;
		avail = f->len - f->start;
		lf = NULL;
		if (avail > f->scanned)
			lf = memchr(p + f->scanned, '\n', avail - f->scanned);
		if (!lf) {
			f->scanned = avail;
			/* max_line bytes plus a CR may still become a line. */
			if (avail > f->max_line + 1 ||
			    (avail == f->max_line + 1 && p[avail - 1] != '\r'))
				goto too_long;
			return 0;
		}
		n = (size_t)(lf - p);
		f->start += n + 1;
		f->scanned = 0;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		if (n > f->max_line)
			goto too_long;
		if (n == 0)
			continue;
		*line = p;
		*len = n;
		return 1;
	}
too_long:
	f->failed = 1;
	return -EMSGSIZE;
}

size_t framer_pending(const struct framer *f)
{
	return f->len - f->start;
}

/*
 * Fuzz harness of protocol/framer.c. The first input byte picks max_line,
 * the second seeds the chunking; the rest is the byte stream, fed in
 * chunks through framer_feed() and framer_reserve()/framer_commit() in
 * turn, with every line drained after each chunk as the daemon does.
 * Oracle: a plain model of the framing rules computed on the whole
 * stream. The lines must be exactly the model's, the error must come
 * exactly where the model puts it, and the pending tail must match.
 */
#include "fuzz.h"

#include "protocol/framer.h"

#include <errno.h>
#include <string.h>

static const size_t max_lines[] = {
	1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 64, 100, 255, 4096, 65536, 1 << 20,
};

struct model {
	const uint8_t *s;
	size_t n, pos; /* next unread byte of the stream */
};

/*
 * The model's next line: 1 with *line / *len, 0 at the end (the tail is
 * then s[pos..n)), -EMSGSIZE when a line or the tail is too long.
 */
static int model_next(struct model *m, size_t max_line, const uint8_t **line,
		      size_t *len)
{
	const uint8_t *lf;
	size_t n;

	for (;;) {
		lf = memchr(m->s + m->pos, '\n', m->n - m->pos);
		if (!lf) {
			n = m->n - m->pos;
			if (n > max_line + 1 ||
			    (n == max_line + 1 && m->s[m->n - 1] != '\r'))
				return -EMSGSIZE;
			return 0;
		}
		*line = m->s + m->pos;
		n = (size_t)(lf - *line);
		m->pos += n + 1;
		if (n > 0 && (*line)[n - 1] == '\r')
			n--;
		if (n > max_line)
			return -EMSGSIZE;
		if (n == 0)
			continue;
		*len = n;
		return 1;
	}
}

/* A small deterministic generator for chunk sizes. */
static uint32_t next_rand(uint32_t *state)
{
	*state = *state * 1103515245u + 12345u;
	return *state >> 16;
}

struct run {
	struct framer f;
	struct model m;
	size_t max_line;
	int failed; /* the framer said -EMSGSIZE */
};

/* Take every line the framer has and compare it with the model. */
static void drain(struct run *r)
{
	const char *line;
	const uint8_t *want;
	size_t len, want_len;
	int rc;

	while ((rc = framer_next(&r->f, &line, &len)) == 1) {
		FUZZ_CHECK(len > 0 && len <= r->max_line);
		FUZZ_CHECK(model_next(&r->m, r->max_line, &want, &want_len) ==
			   1);
		FUZZ_CHECK(len == want_len);
		FUZZ_CHECK(memcmp(line, want, len) == 0);
	}
	FUZZ_CHECK(rc == 0 || rc == -EMSGSIZE);
	if (rc == -EMSGSIZE)
		r->failed = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run r;
	const uint8_t *s;
	const uint8_t *want;
	const char *line;
	size_t n, off = 0, want_len;
	uint32_t seed;
	int use_reserve = 0, rc;

	if (size < 2)
		return 0;
	r.max_line =
		max_lines[data[0] % (sizeof(max_lines) / sizeof(max_lines[0]))];
	seed = data[1];
	s = data + 2;
	n = size - 2;
	framer_init(&r.f, r.max_line);
	r.m = (struct model){s, n, 0};
	r.failed = 0;

	while (off < n && !r.failed) {
		/* Mostly small chunks, sometimes everything left. */
		size_t chunk = 1 + next_rand(&seed) % 64;

		if (next_rand(&seed) % 8 == 0)
			chunk = n - off;
		if (chunk > n - off)
			chunk = n - off;
		if (use_reserve) {
			char *ptr;
			size_t avail, done = 0;

			while (done < chunk && !r.failed) {
				rc = framer_reserve(&r.f, chunk - done, &ptr,
						    &avail);
				FUZZ_CHECK(rc == 0);
				FUZZ_CHECK(avail > 0);
				if (avail > chunk - done)
					avail = chunk - done;
				memcpy(ptr, s + off + done, avail);
				framer_commit(&r.f, avail);
				done += avail;
				drain(&r);
			}
		} else {
			FUZZ_CHECK(framer_feed(&r.f, s + off, chunk) == 0);
			drain(&r);
		}
		off += chunk;
		use_reserve = !use_reserve;
	}

	/* Whatever the framer gave, the model must end the same way. */
	rc = model_next(&r.m, r.max_line, &want, &want_len);
	if (r.failed) {
		FUZZ_CHECK(rc == -EMSGSIZE);
		FUZZ_CHECK(framer_next(&r.f, &line, &want_len) == -EMSGSIZE);
	} else {
		FUZZ_CHECK(rc == 0);
		FUZZ_CHECK(framer_pending(&r.f) == n - r.m.pos);
	}
	framer_done(&r.f);
	framer_done(&r.f);
	return 0;
}

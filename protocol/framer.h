/*
 * NDJSON framer: turns a byte stream into lines. One LF ends a line, a CR
 * before it is dropped, empty lines are skipped, and a line (or an
 * unterminated tail) longer than max_line is an error. Bytes after the last
 * LF are never returned as a line, so a partial line at EOF is never taken
 * for a request. No I/O: the caller reads into the space framer_reserve()
 * hands out, or copies in with framer_feed().
 */
#ifndef VMEM_PROTOCOL_FRAMER_H
#define VMEM_PROTOCOL_FRAMER_H

#include <stddef.h>

struct framer {
	char *buf;
	size_t cap;	 /* allocated bytes of buf */
	size_t start;	 /* first byte not yet returned as a line */
	size_t scanned;	 /* bytes from start already searched for LF */
	size_t len;	 /* bytes held in buf */
	size_t max_line; /* longest line accepted, CR and LF excluded */
	int failed;	 /* set once framer_next() returned -EMSGSIZE */
};

/* Initialise an empty framer; max_line must be > 0. Allocates nothing. */
void framer_init(struct framer *f, size_t max_line);

/* Release the buffer. Safe on an initialised or already-done framer. */
void framer_done(struct framer *f);

/*
 * Make room for at least `want` more bytes (less if the line limit does not
 * need them) and return the free tail in *ptr / *avail. Compacts consumed
 * lines away first, so pointers from framer_next() are invalid afterwards.
 * The buffer never grows past max_line + 2 plus some read slack. Returns 0,
 * -ENOMEM, or -ENOBUFS when the buffer is full because framer_next() was
 * not called until it returned 0.
 */
int framer_reserve(struct framer *f, size_t want, char **ptr, size_t *avail);

/* Account for n bytes written into the space framer_reserve() returned. */
void framer_commit(struct framer *f, size_t n);

/*
 * Copy n bytes in (compact + grow + memcpy). Grows by n even past the
 * framer_reserve() limit, so the caller bounds n. 0 or -ENOMEM.
 */
int framer_feed(struct framer *f, const void *data, size_t n);

/*
 * Next complete, non-empty line. Returns 1 with *line / *len set (borrowed,
 * valid until the next framer_reserve/framer_feed/framer_done; not NUL
 * terminated), 0 when more input is needed, or -EMSGSIZE when a line or the
 * unterminated tail exceeds max_line (the framer is then unusable).
 */
int framer_next(struct framer *f, const char **line, size_t *len);

/*
 * Bytes buffered and not yet returned as a line: after framer_next()
 * returned 0, exactly the partial line after the last LF.
 */
size_t framer_pending(const struct framer *f);

#endif

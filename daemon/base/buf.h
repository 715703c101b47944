/*
 * A growable byte buffer, for responses being assembled. The bytes are
 * always followed by a NUL (not counted in len) once anything was added.
 */
#ifndef VMEM_DAEMON_BUF_H
#define VMEM_DAEMON_BUF_H

#include <stdbool.h>
#include <stddef.h>

#include "protocol/jsonstr.h"

struct buf {
	char *data;
	size_t len, cap;
};

/* Append n bytes; false (buffer unchanged) on allocation failure. */
bool buf_append(struct buf *b, const void *p, size_t n);

/* Append a NUL-terminated string. */
bool buf_puts(struct buf *b, const char *s);

/* Room for n more bytes without another allocation; false on failure. */
bool buf_reserve(struct buf *b, size_t n);

/*
 * Append s (len bytes of valid UTF-8) as a JSON string, quotes included,
 * as protocol/jsonstr.h writes it (json_str_len bytes). false (buffer
 * unchanged) on allocation failure.
 */
bool buf_json_str(struct buf *b, const char *s, size_t len);

/* Hand the bytes to the caller (who frees them) and empty the buffer. */
char *buf_take(struct buf *b, size_t *len);

/* Free the bytes and empty the buffer. */
void buf_done(struct buf *b);

#endif

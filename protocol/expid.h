/*
 * Experience ids: UUIDv7 (RFC 9562) made from the server's timestamp.
 * The 48-bit Unix milliseconds, then the microseconds within that
 * millisecond scaled to 12 bits (RFC 9562 section 6.2, method 3: more
 * clock precision), then 62 random bits. So the ids one daemon assigns
 * sort as its strictly increasing timestamps do, the timestamp to the
 * microsecond can be read back from an id, and two clones that assign
 * ids at the same microsecond still differ by the random bits.
 *
 * Text form: 36 characters, lowercase hex, 8-4-4-4-12. No I/O: the
 * caller supplies the random bits.
 */
#ifndef VMEM_PROTOCOL_EXPID_H
#define VMEM_PROTOCOL_EXPID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXPID_LEN	   36 /* 0190b5e2-7d3a-7c4f-8a1b-2c3d4e5f6a7b */
#define EXPID_RANDOM_BYTES 8

/* The 16 bytes of an id (network order, as the text reads). */
struct expid {
	uint8_t b[16];
};

/*
 * The id of a record stored at usec (microseconds since the epoch, >= 0
 * and below 2^48 ms) with 62 of the random bits given.
 */
struct expid expid_make(int64_t usec, const uint8_t rnd[EXPID_RANDOM_BYTES]);

/* The text form, NUL-terminated. */
void expid_format(const struct expid *id, char out[EXPID_LEN + 1]);

/*
 * Parse the text form (hex digits of either case) of a UUID of version 7
 * and variant 10. 0, or -1 when s[0..len) is anything else.
 */
int expid_parse(const char *s, size_t len, struct expid *out);

/* The microseconds since the epoch an id was made at (expid_make's usec
 * for ids made by it). */
int64_t expid_usec(const struct expid *id);

/* <0, 0, >0: the order of the text forms (and of the times made at). */
int expid_cmp(const struct expid *a, const struct expid *b);

#endif

/*
 * UUIDs of the local records (sessions, messages, documents): 16 bytes in
 * memory and on disk, the canonical 36-character form on the wire
 * (8-4-4-4-12 hexadecimal digits, written lowercase, read in either case).
 * New ids are random (version 4, RFC 9562 variant) from a buffer filled by
 * getrandom(2), so making one costs a syscall only every 256 ids.
 *
 * uuid_new keeps its buffer in a static: loop thread only. Parsing and
 * formatting are pure.
 */
#ifndef VMEM_DAEMON_UUID_H
#define VMEM_DAEMON_UUID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UUID_LEN      16
#define UUID_TEXT_LEN 36

/* A new random (version 4) UUID into id. */
void uuid_new(uint8_t id[UUID_LEN]);

/* Parse the canonical text form (exactly len == 36). 0 or -1. */
int uuid_parse(const char *s, size_t len, uint8_t id[UUID_LEN]);

/* The canonical lowercase form and a NUL into out. */
void uuid_format(const uint8_t id[UUID_LEN], char out[UUID_TEXT_LEN + 1]);

#endif

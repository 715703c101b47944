/*
 * A hash map from 16-byte ids to records: the records themselves are the
 * entries (each begins with its id), so a map costs one pointer and a
 * 32-bit tag per slot, at most two slots per record. Open addressing with
 * linear probing and backward-shift deletion; the hash mixes all 16
 * bytes, so ids chosen by a client (a session id) spread as well as
 * random ones. The tag (the hash's low bits, top bit set) spares a probe
 * the record's memory: at a million records each record looked at is a
 * cache miss, and a probe past other keys, a growth or a deletion's
 * shift need none.
 *
 * Not thread-safe; the owner serialises calls.
 */
#ifndef VMEM_DAEMON_IDMAP_H
#define VMEM_DAEMON_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#define IDMAP_KEY 16

struct idmap {
	void **tab;	/* each entry points at a record whose first bytes are
			   its id */
	uint32_t *tags; /* per slot: 0 empty, else the record's tag */
	size_t cap, n;
};

/* An empty map (no allocation until the first put). */
void idmap_init(struct idmap *m);

/* Free the table (not the records). */
void idmap_done(struct idmap *m);

/* The record with this id, or NULL. */
void *idmap_get(const struct idmap *m, const uint8_t *id);

/* Add rec (borrowed) under its id, replacing any record with that id;
 * the one replaced in *old (may be NULL). 0 or -ENOMEM. */
int idmap_put(struct idmap *m, void *rec, void **old);

/* Remove and return the record with this id, or NULL. */
void *idmap_del(struct idmap *m, const uint8_t *id);

/* Make room for n records in all (no failure later until then). */
int idmap_reserve(struct idmap *m, size_t n);

/* The memory held by the table. */
size_t idmap_memory(const struct idmap *m);

#endif

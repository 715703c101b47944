/*
 * Leases (lock.acquire / lock.release): an owner (a connection) reserves a
 * set of coordinates for ttl_ms, so that writes by anyone else wait until
 * it is done. A lease is taken through the per-coordinate locks (locks.h:
 * in order, first come first served, bounded by a timeout) and ends on
 * release, at expiry, or when its owner goes away. Leases are not
 * re-entrant: an owner's second lease on a coordinate it already leases
 * waits like anyone else's. Loop thread only.
 */
#ifndef VMEM_DAEMON_LEASES_H
#define VMEM_DAEMON_LEASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "locks.h"

#define LEASE_TOKEN_LEN 32

struct lease;

/*
 * The end of an acquisition: status 0 with the lease granted (token and
 * expires_at_us valid), -ETIMEDOUT having waited for slots[taken] of the
 * lease's lock set, or -ECANCELED (owner gone, daemon stopping). The lease
 * is only valid during the call.
 */
typedef void (*lease_fn)(void *arg, int status, const struct lease *l);

struct lease {
	char token[LEASE_TOKEN_LEN];
	const void *owner;
	struct leases *leases;
	size_t *slots; /* (owned) */
	struct lock_set lock;
	bool granted;
	uint64_t ttl_ms;
	uint64_t expires_ms;   /* uv_now() based */
	int64_t expires_at_us; /* wall clock, for the answer */
	lease_fn cb;
	void *arg;
	struct lease *prev, *next;
};

struct leases {
	uv_loop_t *loop;
	struct locks *locks;
	uv_timer_t timer; /* at the earliest expiry */
	struct lease *head;
	uint64_t last_id;
	bool open;
};

int leases_init(struct leases *ls, uv_loop_t *loop, struct locks *locks);

/* End every lease (pending ones get -ECANCELED) and close the timer;
 * later calls of this module do nothing. Before the locks go. */
void leases_close(struct leases *ls);

/*
 * Lease the slots (ascending, distinct; n >= 1, copied) for owner. cb
 * runs exactly once, possibly before this returns. 0, or -ENOMEM (cb not
 * called).
 */
int leases_acquire(struct leases *ls, const void *owner, const size_t *slots,
		   size_t n, uint64_t timeout_ms, uint64_t ttl_ms, lease_fn cb,
		   void *arg);

/* End owner's granted lease with this token; false if it has none. */
bool leases_release(struct leases *ls, const void *owner, const char *token);

/* The owner is gone: end its leases, abandon its pending ones. */
void leases_drop_owner(struct leases *ls, const void *owner);

/* Leases granted now. */
size_t leases_count(const struct leases *ls);

#endif

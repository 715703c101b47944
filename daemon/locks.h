/*
 * Per-coordinate write locks. A write holds its coordinate from validation
 * until its log record is durable and applied, so the next write to that
 * coordinate validates against the state the previous one left. Waiters
 * are served first come, first served; a wait ends with a timeout. Reads
 * never take locks. Loop thread only.
 */
#ifndef VMEM_DAEMON_LOCKS_H
#define VMEM_DAEMON_LOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct lock_waiter;

/* status 0: the lock is now held by the waiter; -ETIMEDOUT: gave up. */
typedef void (*lock_granted_fn)(struct lock_waiter *w, int status);

/* Embedded in its owner; the owner must stay alive until cb runs. */
struct lock_waiter {
	size_t slot;
	uint64_t deadline_ms; /* uv_now() based */
	lock_granted_fn cb;
	struct lock_waiter *next_in_slot; /* FIFO per slot */
	struct lock_waiter *prev_by_time, *next_by_time;
};

struct lock_slot {
	bool held;
	struct lock_waiter *head, *tail;
};

struct locks {
	uv_loop_t *loop;
	uv_timer_t timer; /* fires at the earliest waiter deadline */
	struct lock_slot *slots;
	size_t n_slots;
	struct lock_waiter *waiting; /* all waiters, by deadline */
};

int locks_init(struct locks *l, uv_loop_t *loop, size_t n_slots);

/* Close the timer; waiters still queued get -ECANCELED. */
void locks_done(struct locks *l);

/* Take the slot if it is free. */
bool locks_try(struct locks *l, size_t slot);

/* Queue for the slot; cb runs once, from a later loop iteration or from
 * locks_release. */
void locks_wait(struct locks *l, size_t slot, uint64_t timeout_ms,
		struct lock_waiter *w, lock_granted_fn cb);

/* Release a held slot, handing it to the first waiter if any. */
void locks_release(struct locks *l, size_t slot);

#endif

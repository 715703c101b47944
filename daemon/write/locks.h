/*
 * Per-coordinate locks of two kinds. A write holds its coordinates from
 * validation until its log record is durable and applied, so the next
 * write there validates against the state the previous one left. A lease
 * (lock.acquire) reserves coordinates for one owner (a connection) for a
 * while: writes of other owners wait for it to end, writes of the owner go
 * through. Reads never take locks.
 *
 * A request takes its whole set of slots one by one in ascending slot
 * order (the (x, y, z) order), so two sets can never wait on each other in
 * a cycle. Waiters of a slot are served first come, first served, except
 * that the leaseholder's own write passes the waiters queued behind its
 * lease (they wait for the lease to end anyway). The wait for a whole set
 * is bounded by one deadline. Loop thread only.
 */
#ifndef VMEM_DAEMON_LOCKS_H
#define VMEM_DAEMON_LOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

enum lock_kind {
	LOCKS_WRITE,
	LOCKS_LEASE,
};

struct lock_set;

/*
 * status 0: every slot of the set is now held. -ETIMEDOUT: the deadline
 * passed while waiting for slots[set->taken] (nothing is held any more).
 * -ECANCELED: the locks were closed.
 */
typedef void (*lock_set_fn)(struct lock_set *set, int status);

/* Embedded in its owner, which must stay alive until cb has run or the
 * set was cancelled. */
struct lock_set {
	/* Filled by the caller. */
	const size_t *slots; /* ascending, distinct */
	size_t n;
	const void *owner; /* who leases or writes (a connection) */
	enum lock_kind kind;
	uint64_t timeout_ms;
	lock_set_fn cb;

	/* Private. */
	size_t taken; /* slots[0..taken) are held */
	bool waiting;
	uint64_t deadline_ms;	       /* uv_now() based */
	struct lock_set *next_in_slot; /* FIFO per slot */
	struct lock_set *prev_by_time, *next_by_time;
};

struct lock_slot {
	bool held;		 /* by a write */
	const void *lease_owner; /* NULL: not leased */
	struct lock_set *head, *tail;
};

struct locks {
	uv_loop_t *loop;
	uv_timer_t timer; /* fires at the earliest waiter deadline */
	struct lock_slot *slots;
	size_t n_slots;
	struct lock_set *waiting; /* all waiting sets, by deadline */
};

int locks_init(struct locks *l, uv_loop_t *loop, size_t n_slots);

/* Close the timer; sets still waiting get -ECANCELED. */
void locks_done(struct locks *l);

/* Sort slots ascending and drop repeats, as a set's slots must be;
 * returns how many remain. */
size_t locks_sort(size_t *slots, size_t n);

/* Take the set's slots; cb runs exactly once, possibly before this
 * returns (when nothing had to wait). */
void locks_acquire(struct locks *l, struct lock_set *set);

/* Give back every slot the set holds (after cb reported 0), handing
 * each to its next waiters. */
void locks_release(struct locks *l, struct lock_set *set);

/* Abandon a set: stop waiting and give back what it holds; cb will not
 * run. Safe after cb ran (then it is locks_release). */
void locks_cancel(struct locks *l, struct lock_set *set);

/* The owner leasing the slot, or NULL. */
const void *locks_leaseholder(const struct locks *l, size_t slot);

#endif

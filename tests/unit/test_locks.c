/* Unit tests of daemon/write/locks.c: FIFO hand-over, deadlines, sets taken in
 * order, leases and their owners. */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>

#include "locks.h"
#include "run_suite.h"

struct waiter {
	struct lock_set set;
	size_t slots[4];
	int status;
	int order; /* when cb ran, 1-based; 0: not yet */
};

static int calls;

static void granted_cb(struct lock_set *set, int status)
{
	struct waiter *w = (struct waiter *)set;

	w->status = status;
	w->order = ++calls;
}

/* Start a waiter for the given ascending slots. */
static void ask(struct locks *l, struct waiter *w, const void *owner,
		enum lock_kind kind, uint64_t timeout_ms, size_t n, ...)
{
	va_list ap;

	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		w->slots[i] = va_arg(ap, size_t);
	va_end(ap);
	w->set.slots = w->slots;
	w->set.n = n;
	w->set.owner = owner;
	w->set.kind = kind;
	w->set.timeout_ms = timeout_ms;
	w->set.cb = granted_cb;
	w->order = 0;
	w->status = 1;
	locks_acquire(l, &w->set);
}

static uv_loop_t loop;
static struct locks l;
static const char owner_a[] = "a", owner_b[] = "b", owner_c[] = "c";

static void setup(void)
{
	calls = 0;
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(locks_init(&l, &loop, 16), 0);
}

static void teardown(void)
{
	locks_done(&l);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

START_TEST(fifo_handover)
{
	struct waiter a = {0}, b = {0}, c = {0}, other = {0};

	ask(&l, &a, owner_a, LOCKS_WRITE, 5000, 1, (size_t)3);
	ck_assert_int_eq(a.order, 1); /* free: granted before returning */
	ask(&l, &other, owner_a, LOCKS_WRITE, 5000, 1, (size_t)4);
	ck_assert_int_eq(other.order, 2); /* other slots are independent */
	ask(&l, &b, owner_b, LOCKS_WRITE, 5000, 1, (size_t)3);
	ask(&l, &c, owner_c, LOCKS_WRITE, 5000, 1, (size_t)3);
	ck_assert_int_eq(b.order, 0);

	locks_release(&l, &a.set); /* to b, still held */
	ck_assert_int_eq(b.order, 3);
	ck_assert_int_eq(b.status, 0);
	ck_assert_int_eq(c.order, 0);
	locks_release(&l, &b.set); /* to c */
	ck_assert_int_eq(c.order, 4);
	locks_release(&l, &c.set);
	ask(&l, &a, owner_a, LOCKS_WRITE, 5000, 1, (size_t)3);
	ck_assert_int_eq(a.order, 5);
}
END_TEST

START_TEST(deadline_expires)
{
	struct waiter holder = {0}, fast = {0}, slow = {0};

	ask(&l, &holder, owner_a, LOCKS_WRITE, 5000, 1, (size_t)1);
	ask(&l, &slow, owner_b, LOCKS_WRITE, 200, 1, (size_t)1);
	ask(&l, &fast, owner_c, LOCKS_WRITE, 20, 1, (size_t)1);
	while (fast.order == 0)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_int_eq(fast.status, -ETIMEDOUT);
	ck_assert_int_eq(slow.order, 0);
	/* The timed-out waiter left the queue: release goes to slow. */
	locks_release(&l, &holder.set);
	ck_assert_int_eq(slow.status, 0);
	ck_assert_int_eq(slow.order, 3);
}
END_TEST

START_TEST(done_cancels_waiters)
{
	struct waiter a = {0}, b = {0};

	ask(&l, &a, owner_a, LOCKS_WRITE, 1000, 1, (size_t)0);
	ask(&l, &b, owner_b, LOCKS_LEASE, 1000, 1, (size_t)0);
	locks_done(&l);
	ck_assert_int_eq(b.status, -ECANCELED);
	uv_run(&loop, UV_RUN_DEFAULT);			/* the timer closes */
	ck_assert_int_eq(locks_init(&l, &loop, 16), 0); /* for teardown */
}
END_TEST

START_TEST(lease_blocks_others_not_owner)
{
	struct waiter lease = {0}, theirs = {0}, mine = {0}, mine2 = {0};

	ask(&l, &lease, owner_a, LOCKS_LEASE, 1000, 2, (size_t)2, (size_t)5);
	ck_assert_int_eq(lease.status, 0);
	ck_assert(locks_leaseholder(&l, 5) == owner_a);

	ask(&l, &theirs, owner_b, LOCKS_WRITE, 1000, 1, (size_t)5);
	ck_assert_int_eq(theirs.order, 0);
	/* The owner's write passes the queue behind its lease. */
	ask(&l, &mine, owner_a, LOCKS_WRITE, 1000, 1, (size_t)5);
	ck_assert_int_eq(mine.status, 0);
	/* Its next write waits for the first one, not for the lease. */
	ask(&l, &mine2, owner_a, LOCKS_WRITE, 1000, 1, (size_t)5);
	ck_assert_int_eq(mine2.order, 0);
	locks_release(&l, &mine.set);
	ck_assert_int_eq(mine2.status, 0);
	ck_assert_int_eq(theirs.order, 0);
	locks_release(&l, &mine2.set);
	ck_assert_int_eq(theirs.order, 0);
	locks_release(&l, &lease.set); /* the lease ends: theirs runs */
	ck_assert_int_eq(theirs.status, 0);
	ck_assert(locks_leaseholder(&l, 5) == NULL);
	locks_release(&l, &theirs.set);
}
END_TEST

START_TEST(lease_waits_for_write_in_progress)
{
	struct waiter w = {0}, lease = {0};

	ask(&l, &w, owner_b, LOCKS_WRITE, 1000, 1, (size_t)7);
	ask(&l, &lease, owner_a, LOCKS_LEASE, 1000, 1, (size_t)7);
	ck_assert_int_eq(lease.order, 0);
	locks_release(&l, &w.set);
	ck_assert_int_eq(lease.status, 0);
	/* Leases are not re-entrant: a second one by the owner waits. */
	ask(&l, &w, owner_a, LOCKS_LEASE, 1000, 1, (size_t)7);
	ck_assert_int_eq(w.order, 0);
	locks_release(&l, &lease.set);
	ck_assert_int_eq(w.status, 0);
	locks_release(&l, &w.set);
}
END_TEST

/* Two sets over the same slots both finish: taken in order, the later
 * one waits on the first slot without holding any other. */
START_TEST(overlapping_sets_in_order)
{
	struct waiter a = {0}, b = {0}, solo = {0};

	ask(&l, &solo, owner_c, LOCKS_WRITE, 1000, 1, (size_t)9);
	ask(&l, &a, owner_a, LOCKS_LEASE, 1000, 3, (size_t)1, (size_t)9,
	    (size_t)12);
	ck_assert_int_eq(a.order, 0); /* holds 1, waits for 9 */
	ask(&l, &b, owner_b, LOCKS_LEASE, 1000, 2, (size_t)1, (size_t)12);
	ck_assert_int_eq(b.order, 0); /* waits for 1, holds nothing */
	ck_assert(locks_leaseholder(&l, 12) == NULL);
	locks_release(&l, &solo.set);
	ck_assert_int_eq(a.status, 0);
	ck_assert_int_eq(b.order, 0);
	locks_release(&l, &a.set);
	ck_assert_int_eq(b.status, 0);
	ck_assert(locks_leaseholder(&l, 12) == owner_b);
	locks_release(&l, &b.set);
}
END_TEST

/* A set that times out midway gives back what it took. */
START_TEST(set_timeout_gives_back)
{
	struct waiter hold = {0}, set = {0}, next = {0};

	ask(&l, &hold, owner_a, LOCKS_LEASE, 1000, 1, (size_t)6);
	ask(&l, &set, owner_b, LOCKS_WRITE, 30, 3, (size_t)2, (size_t)3,
	    (size_t)6);
	ask(&l, &next, owner_c, LOCKS_WRITE, 5000, 1, (size_t)3);
	ck_assert_int_eq(next.order, 0);
	while (set.order == 0)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_int_eq(set.status, -ETIMEDOUT);
	ck_assert_uint_eq(set.set.taken, 2); /* it waited for slots[2] */
	ck_assert_int_eq(next.status, 0);    /* slot 3 was handed on */
	locks_release(&l, &next.set);
	locks_release(&l, &hold.set);
}
END_TEST

START_TEST(cancel_leaves_queue)
{
	struct waiter hold = {0}, gone = {0}, after = {0};

	ask(&l, &hold, owner_a, LOCKS_WRITE, 1000, 1, (size_t)4);
	ask(&l, &gone, owner_b, LOCKS_LEASE, 1000, 2, (size_t)3, (size_t)4);
	ask(&l, &after, owner_c, LOCKS_WRITE, 1000, 1, (size_t)3);
	ck_assert_int_eq(after.order, 0); /* slot 3 is leased by b */
	locks_cancel(&l, &gone.set);
	ck_assert_int_eq(after.status, 0);
	ck_assert_int_eq(gone.order, 0); /* a cancelled set is not called */
	locks_release(&l, &hold.set);
	locks_release(&l, &after.set);
	ck_assert(locks_leaseholder(&l, 3) == NULL);
}
END_TEST

START_TEST(sort_drops_repeats)
{
	size_t s[] = {9, 2, 9, 0, 2, 7};

	ck_assert_uint_eq(locks_sort(s, 6), 4);
	ck_assert_uint_eq(s[0], 0);
	ck_assert_uint_eq(s[1], 2);
	ck_assert_uint_eq(s[2], 7);
	ck_assert_uint_eq(s[3], 9);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("locks");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, fifo_handover);
	tcase_add_test(tc, deadline_expires);
	tcase_add_test(tc, done_cancels_waiters);
	tcase_add_test(tc, lease_blocks_others_not_owner);
	tcase_add_test(tc, lease_waits_for_write_in_progress);
	tcase_add_test(tc, overlapping_sets_in_order);
	tcase_add_test(tc, set_timeout_gives_back);
	tcase_add_test(tc, cancel_leaves_queue);
	tcase_add_test(tc, sort_drops_repeats);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

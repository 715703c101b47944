/* Unit tests of daemon/locks.c: FIFO hand-over and deadlines. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "locks.h"
#include "run_suite.h"

struct waiter {
	struct lock_waiter lw;
	int status;
	int order; /* when it was called, 1-based; 0: not yet */
};

static int calls;

static void granted_cb(struct lock_waiter *lw, int status)
{
	struct waiter *w = (struct waiter *)lw;

	w->status = status;
	w->order = ++calls;
}

START_TEST(fifo_handover)
{
	uv_loop_t loop;
	struct locks l;
	struct waiter a = {0}, b = {0};

	calls = 0;
	uv_loop_init(&loop);
	ck_assert_int_eq(locks_init(&l, &loop, 8), 0);
	ck_assert(locks_try(&l, 3));
	ck_assert(!locks_try(&l, 3));
	ck_assert(locks_try(&l, 4)); /* other slots are independent */
	locks_wait(&l, 3, 5000, &a.lw, granted_cb);
	locks_wait(&l, 3, 5000, &b.lw, granted_cb);
	ck_assert_int_eq(a.order, 0);

	locks_release(&l, 3); /* to a, still held */
	ck_assert_int_eq(a.order, 1);
	ck_assert_int_eq(a.status, 0);
	ck_assert_int_eq(b.order, 0);
	ck_assert(!locks_try(&l, 3));
	locks_release(&l, 3); /* to b */
	ck_assert_int_eq(b.order, 2);
	locks_release(&l, 3); /* free */
	ck_assert(locks_try(&l, 3));
	locks_done(&l);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(deadline_expires)
{
	uv_loop_t loop;
	struct locks l;
	struct waiter fast = {0}, slow = {0};

	calls = 0;
	uv_loop_init(&loop);
	ck_assert_int_eq(locks_init(&l, &loop, 8), 0);
	ck_assert(locks_try(&l, 1));
	locks_wait(&l, 1, 200, &slow.lw, granted_cb);
	locks_wait(&l, 1, 20, &fast.lw, granted_cb);
	uv_run(&loop, UV_RUN_ONCE); /* the 20 ms deadline */
	while (fast.order == 0)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_int_eq(fast.status, -ETIMEDOUT);
	ck_assert_int_eq(slow.order, 0);
	/* The timed-out waiter left the queue: release goes to slow. */
	locks_release(&l, 1);
	ck_assert_int_eq(slow.status, 0);
	ck_assert_int_eq(slow.order, 2);
	locks_done(&l);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(done_cancels_waiters)
{
	uv_loop_t loop;
	struct locks l;
	struct waiter a = {0};

	calls = 0;
	uv_loop_init(&loop);
	ck_assert_int_eq(locks_init(&l, &loop, 2), 0);
	ck_assert(locks_try(&l, 0));
	locks_wait(&l, 0, 1000, &a.lw, granted_cb);
	locks_done(&l);
	ck_assert_int_eq(a.status, -ECANCELED);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("locks");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, fifo_handover);
	tcase_add_test(tc, deadline_expires);
	tcase_add_test(tc, done_cancels_waiters);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

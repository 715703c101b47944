/*
 * Unit tests of daemon/write/localseg.c on real files and a real libuv
 * loop: payloads handed over are appended by writer passes and read back
 * by a reopen (compared with a model of each key's last operation); a
 * failed pass gives its payloads back ahead of newer ones; compaction is
 * planned by a pass, runs on the thread pool, is taken back by the next
 * pass (which the kind asks for), and leaves the files within bounds with
 * nothing lost.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "localrec.h"
#include "localseg.h"
#include "run_suite.h"
#include "statedir.h"

#define TAG   'T'
#define NKEYS 64

static char gitdir[64];
static struct statedir root;
static struct localseg ls;
static uv_loop_t loop;
static char msg[256];

/* The model: each key's payload ("" for none). */
static char model[NKEYS][32];
static char back[NKEYS][32];

static void key_of(unsigned k, uint8_t key[REC_KEY])
{
	memset(key, 0x42, REC_KEY);
	key[0] = (uint8_t)k;
}

static int load_cb(void *ctx, const uint8_t key[SEG_KEY], const void *p,
		   size_t len)
{
	(void)ctx;
	ck_assert_uint_lt(key[0], NKEYS);
	ck_assert_uint_lt(len, sizeof(back[0]));
	memcpy(back[key[0]], p, len);
	back[key[0]][len] = '\0';
	return 0;
}

static void open_ls(uint64_t segment_max)
{
	static const char *const stores[] = {"s"};
	static const seg_load_fn loads[] = {load_cb};
	struct seg_opts o = {segment_max};

	memset(back, 0, sizeof(back));
	ck_assert_msg(localseg_open(&ls, &loop, &root, "local", stores, 1, TAG,
				    &o, loads, NULL, msg, sizeof(msg)) == 0,
		      "%s", msg);
}

static void setup(void)
{
	snprintf(gitdir, sizeof(gitdir), "/tmp/vmem-lseg-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(gitdir));
	ck_assert_int_eq(
		statedir_init(&root, gitdir, NULL, 0, msg, sizeof(msg)), 0);
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	memset(model, 0, sizeof(model));
	open_ls(1 << 20);
}

/* Let a compaction job end: the store closes a localseg only after the
 * loop's last run. */
static void drain(void)
{
	for (int i = 0; i < 10000 && ls.compacting && !ls.compact_done; i++)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert(!ls.compacting || ls.compact_done);
}

static void teardown(void)
{
	char cmd[128];

	drain();
	localseg_close(&ls);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	statedir_done(&root);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", gitdir);
	ck_assert_int_eq(system(cmd), 0);
}

/* A payload putting text under key k (text NULL: deleting it). */
static void hand_over(unsigned k, const char *text)
{
	struct buf b = {0};
	uint8_t key[REC_KEY], *p;
	size_t len;

	key_of(k, key);
	ck_assert(logpay_begin(&b, TAG));
	if (text) {
		p = logpay_put(&b, 0, key, strlen(text));
		ck_assert_ptr_nonnull(p);
		memcpy(p, text, strlen(text));
		snprintf(model[k], sizeof(model[k]), "%s", text);
	} else {
		ck_assert(logpay_del(&b, 0, key));
		model[k][0] = '\0';
	}
	p = (uint8_t *)buf_take(&b, &len);
	ck_assert(localseg_take(&ls, p, len));
}

/* One writer pass as the store runs it: snapshot, write, written. */
static void pass(void)
{
	void *snap;
	int rc;

	ck_assert_int_eq(localseg_snapshot(&ls, &snap), 0);
	rc = localseg_write(&ls, snap, false, msg, sizeof(msg));
	ck_assert_msg(rc == 0, "%s", msg);
	localseg_written(&ls, snap, rc);
	ck_assert_int_eq(localseg_sync(&ls, msg, sizeof(msg)), 0);
}

static void reopen_and_check(void)
{
	drain();
	localseg_close(&ls);
	open_ls(1 << 20);
	for (unsigned k = 0; k < NKEYS; k++)
		ck_assert_msg(strcmp(model[k], back[k]) == 0,
			      "key %u: want \"%s\", have \"%s\"", k, model[k],
			      back[k]);
}

START_TEST(passes_and_reopen)
{
	ck_assert_uint_eq(localseg_pending(&ls), 0);
	hand_over(1, "one");
	hand_over(2, "two");
	ck_assert_uint_eq(localseg_pending(&ls), 2);
	pass();
	ck_assert_uint_eq(localseg_pending(&ls), 0);
	hand_over(1, NULL);
	hand_over(3, "three");
	hand_over(3, "three again");
	pass();
	reopen_and_check();
	/* A payload that is no payload of this kind fails the pass. */
	{
		uint8_t *junk = malloc(4);
		void *snap;

		memcpy(junk, "zzzz", 4);
		ck_assert(localseg_take(&ls, junk, 4));
		ck_assert_int_eq(localseg_snapshot(&ls, &snap), 0);
		ck_assert_int_eq(
			localseg_write(&ls, snap, false, msg, sizeof(msg)),
			-EBADMSG);
		localseg_written(&ls, snap, -EBADMSG);
		ck_assert_uint_eq(localseg_pending(&ls), 1);
	}
}
END_TEST

START_TEST(failed_pass_keeps_order)
{
	void *snap;

	hand_over(5, "first");
	ck_assert_int_eq(localseg_snapshot(&ls, &snap), 0);
	hand_over(5, "second"); /* newer, while the pass "runs" */
	localseg_written(&ls, snap, -EIO);
	ck_assert_uint_eq(localseg_pending(&ls), 2);
	pass();
	reopen_and_check(); /* "second" wins: it came after "first" */
}
END_TEST

/* The loop until the compaction job ran. */
static void wait_compaction(void)
{
	for (int i = 0; i < 10000 && !ls.compact_done; i++)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert(ls.compact_done);
}

START_TEST(compaction_in_the_background)
{
	struct seg_stats st;
	char text[32];

	drain();
	localseg_close(&ls);
	open_ls(4096); /* small segments: many sealed ones */
	for (int round = 0; round < 40; round++) {
		for (unsigned k = 0; k < 16; k++) {
			snprintf(text, sizeof(text), "r%d-k%u", round, k);
			hand_over(k, text);
		}
		pass();
		if (ls.compacting) {
			ck_assert(!ls.compact_done || ls.plan);
			wait_compaction();
			/* The kind asks for a pass to take it back. */
			ck_assert_uint_eq(localseg_pending(&ls), 1);
			pass();
			ck_assert(!ls.compacting);
		}
	}
	ck_assert_uint_gt(ls.compactions, 0);
	localseg_stats(&ls, &st);
	ck_assert_uint_gt(st.compactions, 0);
	ck_assert_msg(st.disk_bytes <= 4 * st.live_bytes + 3 * 4096,
		      "disk %llu live %llu", (unsigned long long)st.disk_bytes,
		      (unsigned long long)st.live_bytes);
	reopen_and_check();
}
END_TEST

START_TEST(close_with_a_compaction_done_but_not_taken)
{
	char text[32];

	drain();
	localseg_close(&ls);
	open_ls(4096);
	for (int round = 0; round < 40 && !ls.compacting; round++) {
		for (unsigned k = 0; k < 16; k++) {
			snprintf(text, sizeof(text), "r%d-k%u", round, k);
			hand_over(k, text);
		}
		pass();
	}
	ck_assert(ls.compacting);
	wait_compaction();
	/* No pass takes it back: closing finishes it (and frees it). */
	reopen_and_check();
}
END_TEST

static Suite *localseg_suite(void)
{
	Suite *s = suite_create("localseg");
	TCase *tc = tcase_create("materialisation");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, passes_and_reopen);
	tcase_add_test(tc, failed_pass_keeps_order);
	tcase_add_test(tc, compaction_in_the_background);
	tcase_add_test(tc, close_with_a_compaction_done_but_not_taken);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(localseg_suite());
}

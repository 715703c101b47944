/*
 * Unit tests of daemon/git/watch.c on a real loop and a real directory:
 * a lock file coming or going is reported at once (lock_event), before
 * the debounced look (touched), once per loop iteration however many
 * lock events it saw, and other files are not reported as locks.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "run_suite.h"
#include "watch.h"

static char dir[64];
static uv_loop_t loop;
static struct watch w;
/* What was reported, in order: 'L' a lock event, 'T' the debounced look,
 * 'C' a change of the signature. */
static char seen[64];
static size_t nseen;

static void note(char what)
{
	if (nseen + 1 < sizeof(seen))
		seen[nseen++] = what;
	seen[nseen] = '\0';
}

static void on_lock(void *ctx)
{
	(void)ctx;
	note('L');
}

static void on_touched(void *ctx)
{
	(void)ctx;
	note('T');
}

static void on_changed(void *ctx)
{
	(void)ctx;
	note('C');
}

static void put(const char *name, const char *text)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(close(fd), 0);
}

static void drop(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_int_eq(unlink(path), 0);
}

/* Run the loop until the debounced look has come (the debounce is a
 * timer: the loop blocks until it fires, however long that takes). */
static void run_until_touched(void)
{
	while (!strchr(seen, 'T'))
		uv_run(&loop, UV_RUN_ONCE);
}

static void setup(void)
{
	char refs[128];

	snprintf(dir, sizeof(dir), "/tmp/vmem-watch-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(refs, sizeof(refs), "%s/refs", dir);
	ck_assert_int_eq(mkdir(refs, 0755), 0);
	snprintf(refs, sizeof(refs), "%s/refs/heads", dir);
	ck_assert_int_eq(mkdir(refs, 0755), 0);
	put("HEAD", "ref: refs/heads/main\n");
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(watch_start(&w, &loop, dir, dir, on_changed, NULL), 0);
	w.touched = on_touched;
	w.lock_event = on_lock;
	nseen = 0;
	seen[0] = '\0';
}

static void teardown(void)
{
	char cmd[128];

	watch_stop(&w);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* git takes index.lock and gives it back: both reported at once, the
 * debounced look after them. */
START_TEST(test_lock_reported_before_the_debounce)
{
	put("index.lock", "");
	while (!nseen)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_str_eq(seen, "L");
	drop("index.lock");
	while (nseen < 2)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_str_eq(seen, "LL");
	run_until_touched();
	ck_assert_str_eq(seen, "LLT");
}
END_TEST

/* Events already queued when the loop looks are one iteration's: one
 * report for all of them, the tree as it is after the last. */
START_TEST(test_lock_events_of_one_iteration_reported_once)
{
	put("index.lock", "");
	put("HEAD.lock", "ref: refs/heads/other\n");
	drop("index.lock");
	drop("HEAD.lock");
	run_until_touched();
	ck_assert_str_eq(seen, "LT");
}
END_TEST

/* A file that is no lock (git's ORIG_HEAD, a ref moved) is not reported
 * at once; its change comes after the debounce, as before. */
START_TEST(test_other_files_wait_for_the_debounce)
{
	put("ORIG_HEAD", "0123\n");
	run_until_touched();
	ck_assert_str_eq(seen, "T");
	nseen = 0;
	seen[0] = '\0';
	put("HEAD", "ref: refs/heads/other\n");
	run_until_touched();
	ck_assert_str_eq(seen, "TC");
}
END_TEST

/* Without a lock_event the watch behaves as before. */
START_TEST(test_no_lock_callback)
{
	w.lock_event = NULL;
	put("index.lock", "");
	drop("index.lock");
	run_until_touched();
	ck_assert_str_eq(seen, "T");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("watch");
	TCase *tc = tcase_create("watch");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_lock_reported_before_the_debounce);
	tcase_add_test(tc, test_lock_events_of_one_iteration_reported_once);
	tcase_add_test(tc, test_other_files_wait_for_the_debounce);
	tcase_add_test(tc, test_no_lock_callback);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

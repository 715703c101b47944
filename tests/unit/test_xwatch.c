/*
 * Unit tests of daemon/git/xwatch.c on real directories and a real
 * inotify instance: a directory is clean only once a whole scan after its
 * watch found it so; anything written there (a file created, removed,
 * renamed or written in place) makes it touched; a lost queue, a
 * directory gone or a .vector-memory replaced make directories unknown
 * again, never clean.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_suite.h"
#include "xwatch.h"

#define MAX_X 9

static char tmp[64], top[128];
static struct xwatch w;

/* A shell command run in the temporary directory. */
static void sh(const char *cmd)
{
	char line[512];

	snprintf(line, sizeof(line), "cd '%s' && %s", tmp, cmd);
	ck_assert_int_eq(system(line), 0);
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/vmem-xwatch-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(top, sizeof(top), "%s/.vector-memory", tmp);
	sh("mkdir -p .vector-memory/x-001 .vector-memory/x-002");
	sh("echo one > .vector-memory/x-001/y-1-z-2.json");
	sh("echo two > .vector-memory/x-002/y-1-z-2.json");
	ck_assert_int_eq(xwatch_init(&w, MAX_X), 0);
	ck_assert_int_ge(w.fd, 0);
}

static void teardown(void)
{
	char cmd[128];

	xwatch_done(&w);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

/*
 * One scan as a probe makes it: every x-NNN directory of .vector-memory
 * looked at; states[x] gets what it was told (x = 1..MAX_X; 0 where none
 * exists). whole: the scan found everything as known.
 */
static void scan(bool whole, char states[MAX_X + 2])
{
	struct xwatch_scan s;
	int vfd = open(top, O_RDONLY | O_DIRECTORY);

	ck_assert_int_ge(vfd, 0);
	ck_assert_int_eq(xwatch_begin(&w, &s), 0);
	memset(states, '-', MAX_X + 1);
	states[MAX_X + 1] = '\0';
	for (int x = 1; x <= MAX_X; x++) {
		char name[16];
		struct stat st;

		snprintf(name, sizeof(name), "x-%03d", x);
		if (fstatat(vfd, name, &st, 0) < 0)
			continue;
		switch (xwatch_look(&w, &s, vfd, x, name)) {
		case XWATCH_CLEAN:
			states[x] = 'C';
			break;
		case XWATCH_TOUCHED:
			states[x] = 'T';
			break;
		default:
			states[x] = 'U';
		}
	}
	xwatch_end(&w, &s, whole);
	xwatch_scan_done(&s);
	close(vfd);
}

/* The states of x-001 and x-002 in one scan: "CU" and so on. */
static const char *two(bool whole)
{
	static char out[3];
	char states[MAX_X + 2];

	scan(whole, states);
	out[0] = states[1];
	out[1] = states[2];
	out[2] = '\0';
	return out;
}

/* Both directories watched (first scan), found whole since (second),
 * clean (third). */
static void watched_and_clean(void)
{
	ck_assert_str_eq(two(true), "UU");
	ck_assert_str_eq(two(true), "UU");
	ck_assert_str_eq(two(true), "CC");
}

START_TEST(test_clean_after_a_whole_scan_after_the_watch)
{
	ck_assert_str_eq(two(true), "UU"); /* watches added */
	ck_assert_str_eq(two(true), "UU"); /* the first whole scan since */
	ck_assert_str_eq(two(true), "CC");
	ck_assert_str_eq(two(true), "CC");
}
END_TEST

/* A scan that was not whole (something changed, or it failed) makes
 * nothing clean. */
START_TEST(test_not_whole_makes_nothing_clean)
{
	ck_assert_str_eq(two(true), "UU");
	ck_assert_str_eq(two(false), "UU");
	ck_assert_str_eq(two(false), "UU");
	ck_assert_str_eq(two(true), "UU");
	ck_assert_str_eq(two(true), "CC");
}
END_TEST

START_TEST(test_every_kind_of_write_touches)
{
	static const char *const writes[] = {
		/* created */
		"echo new > .vector-memory/x-001/y-2-z-2.json",
		/* removed */
		"rm .vector-memory/x-001/y-2-z-2.json",
		/* renamed over, as git and our writer write */
		"echo x > .vector-memory/x-001/.tmp && mv "
		".vector-memory/x-001/.tmp "
		".vector-memory/x-001/y-1-z-2.json",
		/* written in place: the directory's stamp stays */
		"echo edited >> .vector-memory/x-001/y-1-z-2.json",
	};

	watched_and_clean();
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		sh(writes[i]);
		ck_assert_msg(strcmp(two(true), "TC") == 0, "after write %zu",
			      i);
		/* looked at and found whole: clean again */
		ck_assert_str_eq(two(true), "CC");
	}
}
END_TEST

/* A write during a scan counts against that scan: the next one looks. */
START_TEST(test_write_during_a_scan)
{
	struct xwatch_scan s;
	int vfd;

	watched_and_clean();
	vfd = open(top, O_RDONLY | O_DIRECTORY);
	ck_assert_int_eq(xwatch_begin(&w, &s), 0);
	ck_assert_int_eq(xwatch_look(&w, &s, vfd, 1, "x-001"), XWATCH_CLEAN);
	ck_assert_int_eq(xwatch_look(&w, &s, vfd, 2, "x-002"), XWATCH_CLEAN);
	sh("echo late > .vector-memory/x-002/y-3-z-2.json");
	xwatch_end(&w, &s, true);
	xwatch_scan_done(&s);
	close(vfd);
	ck_assert_str_eq(two(true), "CT");
}
END_TEST

/* More events than the kernel queues: every directory unknown until a
 * whole scan after the loss. */
START_TEST(test_overflow)
{
	watched_and_clean();
	for (int i = 0; i < 9000; i++) {
		char f[160];
		int fd;

		snprintf(f, sizeof(f), "%s/x-001/f", top);
		fd = open(f, O_WRONLY | O_CREAT, 0644);
		ck_assert_int_ge(fd, 0);
		close(fd);
		ck_assert_int_eq(unlink(f), 0);
	}
	/* x-001 had events before the loss; x-002 none that came through */
	ck_assert_str_eq(two(true), "TU");
	/* that scan looked at both (their stamps) after the loss */
	ck_assert_str_eq(two(true), "CC");
}
END_TEST

/* A directory removed and made again is another: unknown, then watched
 * anew. */
START_TEST(test_directory_replaced)
{
	watched_and_clean();
	sh("rm -r .vector-memory/x-002 && mkdir .vector-memory/x-002");
	ck_assert_str_eq(two(true), "CU");
	ck_assert_str_eq(two(true), "CU");
	ck_assert_str_eq(two(true), "CC");
}
END_TEST

/* .vector-memory moved away and another put in its place (the same
 * names, other directories, no event on their watches): all unknown. */
START_TEST(test_top_replaced)
{
	watched_and_clean();
	sh("mv .vector-memory old && mkdir -p .vector-memory/x-001 "
	   ".vector-memory/x-002");
	watched_and_clean();
	/* the old ones are not watched any more */
	sh("echo x > old/x-001/y-5-z-2.json");
	ck_assert_str_eq(two(true), "CC");
}
END_TEST

/* A watched directory a whole scan did not see (removed while no scan
 * looked, or renamed away) loses its watch: one made later under its
 * name is never taken for it. */
START_TEST(test_directory_not_seen)
{
	char states[MAX_X + 2];

	watched_and_clean();
	sh("mv .vector-memory/x-002 .vector-memory/elsewhere");
	ck_assert_str_eq(two(true), "C-");
	sh("mkdir .vector-memory/x-002");
	scan(true, states);
	ck_assert_int_eq(states[2], 'U');
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xwatch");
	TCase *tc = tcase_create("xwatch");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_clean_after_a_whole_scan_after_the_watch);
	tcase_add_test(tc, test_not_whole_makes_nothing_clean);
	tcase_add_test(tc, test_every_kind_of_write_touches);
	tcase_add_test(tc, test_write_during_a_scan);
	tcase_add_test(tc, test_overflow);
	tcase_add_test(tc, test_directory_replaced);
	tcase_add_test(tc, test_top_replaced);
	tcase_add_test(tc, test_directory_not_seen);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

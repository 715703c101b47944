/*
 * Unit tests of daemon/service/sdnotify.c's environment handling: every
 * variable systemd passes is read and unset by sdnotify_init, before any
 * thread runs (a later unsetenv raced the git workers reading environ and
 * crashed a socket-activated daemon), and the activated socket is handed
 * out afterwards as init found it.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "run_suite.h"
#include "sdnotify.h"

static void set_listen(const char *pid, const char *fds)
{
	ck_assert_int_eq(setenv("LISTEN_PID", pid, 1), 0);
	ck_assert_int_eq(setenv("LISTEN_FDS", fds, 1), 0);
	ck_assert_int_eq(setenv("LISTEN_FDNAMES", "vmem", 1), 0);
}

static void assert_all_unset(void)
{
	static const char *const vars[] = {"NOTIFY_SOCKET", "WATCHDOG_USEC",
					   "WATCHDOG_PID",  "LISTEN_PID",
					   "LISTEN_FDS",    "LISTEN_FDNAMES"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		ck_assert_msg(!getenv(vars[i]), "%s still set after init",
			      vars[i]);
}

START_TEST(test_init_takes_the_activated_socket)
{
	char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	set_listen(pid, "1");
	ck_assert_int_eq(setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1), 0);
	sdnotify_init();
	assert_all_unset();
	ck_assert_int_eq(sdnotify_listen_fd(), 3);
	/* Asked again (the server asks once; nothing is read twice). */
	ck_assert_int_eq(sdnotify_listen_fd(), 3);
}
END_TEST

START_TEST(test_several_sockets)
{
	char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	set_listen(pid, "2");
	sdnotify_init();
	assert_all_unset();
	ck_assert_int_eq(sdnotify_listen_fd(), -EINVAL);
}
END_TEST

START_TEST(test_variables_of_another_process)
{
	char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
	set_listen(pid, "1");
	sdnotify_init();
	assert_all_unset();
	ck_assert_int_eq(sdnotify_listen_fd(), -1);
}
END_TEST

START_TEST(test_none)
{
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	sdnotify_init();
	ck_assert_int_eq(sdnotify_listen_fd(), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sdnotify");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_init_takes_the_activated_socket);
	tcase_add_test(tc, test_several_sockets);
	tcase_add_test(tc, test_variables_of_another_process);
	tcase_add_test(tc, test_none);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

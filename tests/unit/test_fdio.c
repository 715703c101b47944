/*
 * Unit tests of daemon/base/fdio.c: everything is written, at the offset
 * asked; a short write is followed by another (a file size limit makes
 * the kernel write part of a buffer, then refuse the rest); failures come
 * back as -errno.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdio.h"
#include "run_suite.h"

static char path[64];
static int fd = -1;

static void setup(void)
{
	snprintf(path, sizeof(path), "/tmp/vmem-fdio-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
}

static void teardown(void)
{
	close(fd);
	unlink(path);
}

static size_t file_size(void)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return (size_t)st.st_size;
}

START_TEST(test_all_written_where_asked)
{
	size_t n = 3u << 20;
	char *a = malloc(n), *b = malloc(n);

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < n; i++)
		a[i] = (char)(i * 31 + 7);
	ck_assert_int_eq(fdio_write(fd, a, n), 0);
	ck_assert_int_eq(fdio_pwrite(fd, "XYZ", 3, 10), 0);
	ck_assert_uint_eq(file_size(), n);
	ck_assert_int_eq(pread(fd, b, n, 0), (ssize_t)n);
	memcpy(a + 10, "XYZ", 3);
	ck_assert(memcmp(a, b, n) == 0);
	/* past the end: the file grows */
	ck_assert_int_eq(fdio_pwrite(fd, "end", 3, n + 5), 0);
	ck_assert_uint_eq(file_size(), n + 8);
	free(a);
	free(b);
}
END_TEST

/* With a file size limit the kernel writes what fits (a short write);
 * the helper goes on and reports the refusal of the rest. In a child of
 * its own: the limit would stop Check's own reports too. */
START_TEST(test_short_write_then_error)
{
	struct rlimit lim = {100, 100};
	char buf[1000];
	int status = -1;
	pid_t pid;

	memset(buf, 'a', sizeof(buf));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &lim) < 0)
			_exit(1);
		if (fdio_write(fd, buf, sizeof(buf)) != -EFBIG)
			_exit(2);
		if (file_size() != 100)
			_exit(3);
		if (fdio_pwrite(fd, buf, sizeof(buf), 50) != -EFBIG)
			_exit(4);
		_exit(file_size() == 100 ? 0 : 5);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

START_TEST(test_errors)
{
	int p[2];
	int ro = open(path, O_RDONLY);

	ck_assert_int_ge(ro, 0);
	ck_assert_int_eq(fdio_write(ro, "x", 1), -EBADF);
	ck_assert_int_eq(fdio_pwrite(ro, "x", 1, 0), -EBADF);
	close(ro);
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(fdio_pwrite(p[1], "x", 1, 0), -ESPIPE);
	ck_assert_int_eq(fdio_write(p[1], "x", 1), 0);
	close(p[0]);
	close(p[1]);
	/* nothing to write is no write at all */
	ck_assert_int_eq(fdio_write(-1, "", 0), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fdio");
	TCase *tc = tcase_create("fdio");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_all_written_where_asked);
	tcase_add_test(tc, test_short_write_then_error);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

/*
 * Unit tests of daemon/git/statedir.c: the state directory created 0700
 * whatever the umask or a setgid parent, refused when it is a symbolic
 * link, not a directory, not ours or writable by others (with a message
 * naming the path, the owner and the mode), tightened when it is ours and
 * only readable by others; the same for every entry in it, for
 * subdirectories and for files opened there (no symlink followed, no fifo
 * blocking, O_TRUNC only after the checks).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statedir.h"

#define NOBODY 65534

static char gitdir[64];
static char vmem[96];
static char msg[1024];
static char note[1024];

static int rm_cb(const char *path, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void setup(void)
{
	strcpy(gitdir, "/tmp/vmem-test-statedir-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(gitdir));
	snprintf(vmem, sizeof(vmem), "%s/vmem", gitdir);
	msg[0] = note[0] = '\0';
}

static void teardown(void)
{
	nftw(gitdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	ck_assert_int_eq(lstat(path, &st), 0);
	return st.st_mode & 07777;
}

static void spit(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

static const char *slurp(const char *path)
{
	static char buf[256];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	return buf;
}

/* statedir_init must fail with err, naming path, "uid" and mode. */
static void refused(int err, const char *path, const char *mode_text)
{
	struct statedir sd;

	ck_assert_int_eq(statedir_init(&sd, gitdir, note, sizeof(note), msg,
				       sizeof(msg)),
			 err);
	ck_assert_int_eq(sd.fd, -1);
	ck_assert_ptr_null(sd.path);
	ck_assert_msg(strstr(msg, path), "%s", msg);
	ck_assert_msg(strstr(msg, "uid "), "%s", msg);
	ck_assert_msg(strstr(msg, mode_text), "%s", msg);
	statedir_done(&sd); /* harmless after a failure */
}

START_TEST(test_created_0700_whatever_the_umask)
{
	static const mode_t masks[] = {0, 022, 0277, 0777};
	struct statedir sd;

	for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
		mode_t old = umask(masks[i]);
		int rc = statedir_init(&sd, gitdir, note, sizeof(note), msg,
				       sizeof(msg));

		umask(old);
		ck_assert_msg(rc == 0, "umask %04o: %s", masks[i], msg);
		ck_assert_uint_eq(mode_of(vmem), 0700);
		ck_assert_str_eq(note, "");
		statedir_done(&sd);
		ck_assert_int_eq(rmdir(vmem), 0);
	}
}
END_TEST

/* In a shared repository's setgid git directory the new directory would
 * inherit the setgid bit: it is made exactly 0700. */
START_TEST(test_created_0700_under_setgid_parent)
{
	struct statedir sd;

	ck_assert_int_eq(chmod(gitdir, 02775), 0);
	ck_assert_int_eq(statedir_init(&sd, gitdir, note, sizeof(note), msg,
				       sizeof(msg)),
			 0);
	ck_assert_uint_eq(mode_of(vmem), 0700);
	statedir_done(&sd);
	statedir_done(&sd); /* twice is fine */
}
END_TEST

START_TEST(test_symlink_refused_target_untouched)
{
	char target[128], probe[160];

	snprintf(target, sizeof(target), "%s/elsewhere", gitdir);
	ck_assert_int_eq(mkdir(target, 0755), 0);
	ck_assert_int_eq(symlink(target, vmem), 0);
	refused(-ELOOP, vmem, "mode 0777");
	ck_assert_ptr_nonnull(strstr(msg, "symbolic link"));
	snprintf(probe, sizeof(probe), "%s/lock", target);
	ck_assert_int_eq(access(probe, F_OK), -1);
	ck_assert_uint_eq(mode_of(target), 0755);
}
END_TEST

START_TEST(test_file_refused)
{
	spit(vmem, "not a directory", 0600);
	refused(-ENOTDIR, vmem, "mode 0600");
}
END_TEST

START_TEST(test_open_to_others_refused)
{
	static const mode_t modes[] = {0777, 0770, 0702, 0720};

	ck_assert_int_eq(mkdir(vmem, 0700), 0);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		char text[16];

		ck_assert_int_eq(chmod(vmem, modes[i]), 0);
		snprintf(text, sizeof(text), "mode %04o", modes[i]);
		refused(-EPERM, vmem, text);
		ck_assert_ptr_nonnull(strstr(msg, "writable by group"));
		ck_assert_uint_eq(mode_of(vmem), modes[i]); /* left alone */
	}
}
END_TEST

/* Ours, only readable by others: tightened, and said so. */
START_TEST(test_readable_tightened)
{
	struct statedir sd;
	char wal[128], q[128];

	ck_assert_int_eq(mkdir(vmem, 0755), 0);
	snprintf(wal, sizeof(wal), "%s/wal", vmem);
	snprintf(q, sizeof(q), "%s/quarantine", vmem);
	spit(wal, "log", 0644);
	ck_assert_int_eq(mkdir(q, 0750), 0);
	ck_assert_int_eq(statedir_init(&sd, gitdir, note, sizeof(note), msg,
				       sizeof(msg)),
			 0);
	ck_assert_uint_eq(mode_of(vmem), 0700);
	ck_assert_uint_eq(mode_of(wal), 0600);
	ck_assert_uint_eq(mode_of(q), 0700);
	ck_assert_msg(strstr(note, vmem) && strstr(note, "was 0755"), "%s",
		      note);
	ck_assert_msg(strstr(note, wal) && strstr(note, "was 0644"), "%s",
		      note);
	ck_assert_msg(strstr(note, "was 0750"), "%s", note);
	ck_assert_str_eq(slurp(wal), "log");
	statedir_done(&sd);
}
END_TEST

START_TEST(test_entries_checked)
{
	char path[128], target[128];

	ck_assert_int_eq(mkdir(vmem, 0700), 0);
	/* a symlinked log, pointing at a file of ours */
	snprintf(target, sizeof(target), "%s/victim", gitdir);
	spit(target, "precious", 0644);
	snprintf(path, sizeof(path), "%s/wal", vmem);
	ck_assert_int_eq(symlink(target, path), 0);
	refused(-ELOOP, path, "mode 0777");
	ck_assert_str_eq(slurp(target), "precious");
	ck_assert_int_eq(unlink(path), 0);
	/* a group-writable file */
	snprintf(path, sizeof(path), "%s/vmemd.log", vmem);
	spit(path, "old lines", 0660);
	refused(-EPERM, path, "mode 0660");
	ck_assert_int_eq(unlink(path), 0);
	/* a group-writable directory */
	snprintf(path, sizeof(path), "%s/quarantine", vmem);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(chmod(path, 0730), 0);
	refused(-EPERM, path, "mode 0730");
}
END_TEST

/* Entries of another user are refused (needs root to make one; CI runs
 * as root). The message names the owner by name and uid. */
START_TEST(test_other_owner_refused)
{
	char path[128];

	if (geteuid() != 0) {
		fprintf(stderr, "test_other_owner_refused: not root, "
				"ownership part not run\n");
		return;
	}
	ck_assert_int_eq(mkdir(vmem, 0700), 0);
	ck_assert_int_eq(chown(vmem, NOBODY, NOBODY), 0);
	refused(-EPERM, vmem, "mode 0700");
	ck_assert_msg(strstr(msg, "uid 65534"), "%s", msg);
	ck_assert_msg(strstr(msg, "owned by another user"), "%s", msg);
	ck_assert_int_eq(chown(vmem, 0, 0), 0);
	snprintf(path, sizeof(path), "%s/lock", vmem);
	spit(path, "", 0600);
	ck_assert_int_eq(chown(path, NOBODY, NOBODY), 0);
	refused(-EPERM, path, "mode 0600");
	ck_assert_msg(strstr(msg, "uid 65534"), "%s", msg);
}
END_TEST

START_TEST(test_open_files)
{
	struct statedir sd;
	char path[128], target[128];
	int fd;

	ck_assert_int_eq(statedir_init(&sd, gitdir, note, sizeof(note), msg,
				       sizeof(msg)),
			 0);
	/* created 0600 whatever the umask */
	umask(0);
	fd = statedir_open(&sd, "lock", O_RDWR | O_CREAT, 0600, msg,
			   sizeof(msg));
	umask(022);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/lock", vmem);
	ck_assert_uint_eq(mode_of(path), 0600);
	/* a symlink planted after start-up: refused, target untouched */
	snprintf(target, sizeof(target), "%s/victim", gitdir);
	spit(target, "precious", 0644);
	snprintf(path, sizeof(path), "%s/wal", vmem);
	ck_assert_int_eq(symlink(target, path), 0);
	ck_assert_int_eq(statedir_open(&sd, "wal", O_RDWR | O_CREAT | O_TRUNC,
				       0600, msg, sizeof(msg)),
			 -ELOOP);
	ck_assert_ptr_nonnull(strstr(msg, "symbolic link"));
	ck_assert_str_eq(slurp(target), "precious");
	ck_assert_int_eq(unlink(path), 0);
	/* a fifo: refused at once, not waited on */
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(
		statedir_open(&sd, "wal", O_RDONLY, 0, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "not a regular file"));
	ck_assert_int_eq(unlink(path), 0);
	/* group-writable: refused before O_TRUNC could empty it */
	spit(path, "records", 0620);
	ck_assert_int_eq(statedir_open(&sd, "wal", O_RDWR | O_TRUNC, 0, msg,
				       sizeof(msg)),
			 -EPERM);
	ck_assert_str_eq(slurp(path), "records");
	/* readable only: tightened, then truncated as asked */
	ck_assert_int_eq(chmod(path, 0640), 0);
	fd = statedir_open(&sd, "wal", O_RDWR | O_TRUNC, 0, msg, sizeof(msg));
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_uint_eq(mode_of(path), 0600);
	ck_assert_str_eq(slurp(path), "");
	/* one path component only */
	ck_assert_int_eq(
		statedir_open(&sd, "../escape", O_RDONLY, 0, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_int_eq(statedir_unlink(&sd, "a/b"), -EINVAL);
	ck_assert_int_eq(statedir_rename(&sd, "wal", ".."), -EINVAL);
	statedir_done(&sd);
}
END_TEST

START_TEST(test_subdirectories)
{
	struct statedir sd, q;
	char path[128], target[128];
	int fd;

	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, msg, sizeof(msg)),
			 0);
	umask(0);
	ck_assert_int_eq(
		statedir_sub(&sd, "quarantine", true, &q, msg, sizeof(msg)), 0);
	umask(022);
	snprintf(path, sizeof(path), "%s/quarantine", vmem);
	ck_assert_uint_eq(mode_of(path), 0700);
	ck_assert_str_eq(q.path, path);
	fd = statedir_open(&q, "segment", O_RDWR | O_CREAT, 0600, msg,
			   sizeof(msg));
	ck_assert_int_ge(fd, 0);
	close(fd);
	statedir_done(&q);
	/* absent and not to be created */
	ck_assert_int_eq(
		statedir_sub(&sd, "segments", false, &q, msg, sizeof(msg)),
		-ENOENT);
	/* a symlink to a directory: refused, nothing created there */
	snprintf(target, sizeof(target), "%s/elsewhere", gitdir);
	ck_assert_int_eq(mkdir(target, 0700), 0);
	snprintf(path, sizeof(path), "%s/segments", vmem);
	ck_assert_int_eq(symlink(target, path), 0);
	ck_assert_int_eq(
		statedir_sub(&sd, "segments", true, &q, msg, sizeof(msg)),
		-ELOOP);
	ck_assert_ptr_null(q.path);
	ck_assert_ptr_nonnull(strstr(msg, path));
	ck_assert_int_eq(rmdir(target), 0); /* still empty */
	statedir_done(&sd);
}
END_TEST

START_TEST(test_removed)
{
	struct statedir sd;

	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, msg, sizeof(msg)),
			 0);
	ck_assert(!statedir_removed(&sd));
	ck_assert_int_eq(rmdir(vmem), 0);
	ck_assert(statedir_removed(&sd));
	statedir_done(&sd);
	ck_assert(!statedir_removed(&sd));
}
END_TEST

static Suite *statedir_suite(void)
{
	Suite *s = suite_create("statedir");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_created_0700_whatever_the_umask);
	tcase_add_test(tc, test_created_0700_under_setgid_parent);
	tcase_add_test(tc, test_symlink_refused_target_untouched);
	tcase_add_test(tc, test_file_refused);
	tcase_add_test(tc, test_open_to_others_refused);
	tcase_add_test(tc, test_readable_tightened);
	tcase_add_test(tc, test_entries_checked);
	tcase_add_test(tc, test_other_owner_refused);
	tcase_add_test(tc, test_open_files);
	tcase_add_test(tc, test_subdirectories);
	tcase_add_test(tc, test_removed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(statedir_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

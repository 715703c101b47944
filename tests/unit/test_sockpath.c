/*
 * Unit tests of protocol/sockpath.c: FNV-1a vectors, the key format, the
 * VMEM_SOCKET / XDG_RUNTIME_DIR / /tmp precedence and the length limit.
 */
#include "protocol/fnv.h"
#include "protocol/sockpath.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_fnv_vectors)
{
	ck_assert(fnv1a64("", 0) == 0xcbf29ce484222325ULL);
	ck_assert(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);
	ck_assert(fnv1a64("foobar", 6) == 0x85944171f73967e8ULL);
	/* Only len bytes count. */
	ck_assert(fnv1a64("ab", 1) == 0xaf63dc4c8601ec8cULL);
}
END_TEST

START_TEST(test_key_format)
{
	char key[17];
	int i;

	sockpath_key("", key);
	ck_assert_str_eq(key, "cbf29ce484222325");
	sockpath_key("a", key);
	ck_assert_str_eq(key, "af63dc4c8601ec8c");
	sockpath_key("/home/user/project", key);
	ck_assert_uint_eq(strlen(key), 16);
	for (i = 0; i < 16; i++)
		ck_assert_msg((key[i] >= '0' && key[i] <= '9') ||
				      (key[i] >= 'a' && key[i] <= 'f'),
			      "key %s", key);
	/* A hash with leading zero nibbles keeps all 16 digits. */
	ck_assert(fnv1a64("/home/user/project", 18) == strtoull(key, NULL, 16));
}
END_TEST

START_TEST(test_precedence)
{
	char out[SOCKPATH_MAX + 1], want[SOCKPATH_MAX + 1], key[17];
	int r;

	sockpath_key("/srv/repo", key);

	r = sockpath_resolve("/srv/repo", "/run/custom.sock", "/run/user/1000",
			     1000, out, sizeof(out));
	ck_assert_int_eq(r, (int)strlen("/run/custom.sock"));
	ck_assert_str_eq(out, "/run/custom.sock");

	r = sockpath_resolve("/srv/repo", NULL, "/run/user/1000", 1000, out,
			     sizeof(out));
	snprintf(want, sizeof(want), "/run/user/1000/vmem/%s.sock", key);
	ck_assert_str_eq(out, want);
	ck_assert_int_eq(r, (int)strlen(want));

	/* An empty VMEM_SOCKET counts as unset. */
	r = sockpath_resolve("/srv/repo", "", "/run/user/1000", 1000, out,
			     sizeof(out));
	ck_assert_str_eq(out, want);

	r = sockpath_resolve("/srv/repo", NULL, NULL, 1000, out, sizeof(out));
	snprintf(want, sizeof(want), "/tmp/vmem-1000/%s.sock", key);
	ck_assert_str_eq(out, want);
	ck_assert_int_eq(r, (int)strlen(want));

	/* An empty XDG_RUNTIME_DIR counts as unset, and so does a relative
	 * one (the XDG spec says to ignore it). */
	r = sockpath_resolve("/srv/repo", "", "", 4242, out, sizeof(out));
	snprintf(want, sizeof(want), "/tmp/vmem-4242/%s.sock", key);
	ck_assert_str_eq(out, want);
	r = sockpath_resolve("/srv/repo", NULL, "run/user", 4242, out,
			     sizeof(out));
	ck_assert_str_eq(out, want);

	/* Different roots, different keys. */
	r = sockpath_resolve("/srv/repo2", NULL, NULL, 4242, out, sizeof(out));
	ck_assert_int_gt(r, 0);
	ck_assert_str_ne(out, want);

	ck_assert_int_eq(sockpath_resolve("", NULL, NULL, 0, out, sizeof(out)),
			 -EINVAL);
	ck_assert_int_eq(
		sockpath_resolve(NULL, NULL, NULL, 0, out, sizeof(out)),
		-EINVAL);
}
END_TEST

START_TEST(test_too_long)
{
	char out[256], longdir[256], sock[256];
	int r;

	/* XDG path: dir + "/vmem/" (6) + 16 + ".sock" (5) = dir + 27. */
	memset(longdir, 'd', sizeof(longdir));
	longdir[0] = '/';
	longdir[SOCKPATH_MAX - 27] = '\0';
	memset(out, 'Z', sizeof(out));
	r = sockpath_resolve("/r", NULL, longdir, 1, out, sizeof(out));
	ck_assert_int_eq(r, SOCKPATH_MAX);
	ck_assert_uint_eq(strlen(out), SOCKPATH_MAX);
	longdir[SOCKPATH_MAX - 27] = 'd';
	longdir[SOCKPATH_MAX - 26] = '\0';
	r = sockpath_resolve("/r", NULL, longdir, 1, out, sizeof(out));
	ck_assert_int_eq(r, -ENAMETOOLONG);

	memset(sock, 's', sizeof(sock));
	sock[0] = '/';
	sock[SOCKPATH_MAX] = '\0';
	r = sockpath_resolve("/r", sock, NULL, 1, out, sizeof(out));
	ck_assert_int_eq(r, SOCKPATH_MAX);
	ck_assert_str_eq(out, sock);
	sock[SOCKPATH_MAX] = 's';
	sock[SOCKPATH_MAX + 1] = '\0';
	r = sockpath_resolve("/r", sock, NULL, 1, out, sizeof(out));
	ck_assert_int_eq(r, -ENAMETOOLONG);

	/* An output buffer too small is refused, not truncated. */
	r = sockpath_resolve("/r", "/run/x.sock", NULL, 1, out, 11);
	ck_assert_int_eq(r, -ENAMETOOLONG);
	r = sockpath_resolve("/r", "/run/x.sock", NULL, 1, out, 12);
	ck_assert_int_eq(r, 11);
}
END_TEST

static Suite *sockpath_suite(void)
{
	Suite *s = suite_create("sockpath");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_fnv_vectors);
	tcase_add_test(tc, test_key_format);
	tcase_add_test(tc, test_precedence);
	tcase_add_test(tc, test_too_long);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sockpath_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

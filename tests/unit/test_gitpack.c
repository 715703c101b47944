/*
 * Unit tests of daemon/git/gitpack.c against the git program: a pack and
 * index written by hand verify (git verify-pack, git fsck) and give back
 * every object's bytes; offsets past 31 bits go to the 64-bit table
 * (built with that limit lowered, so a small pack has both kinds); a pack
 * not committed, or refused, leaves nothing in the pack directory.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gitpack.h"
#include "run_suite.h"

static char tmp[64], packdir[128];
static char errmsg[256];

static void sh(const char *cmd)
{
	char line[1024];

	snprintf(line, sizeof(line), "cd '%s' && %s", tmp, cmd);
	ck_assert_int_eq(system(line), 0);
}

/* What a command prints (first 4 KB). */
static const char *out(const char *cmd)
{
	static char buf[4096];
	char line[1024];
	size_t n;
	FILE *f;

	snprintf(line, sizeof(line), "cd '%s' && %s", tmp, cmd);
	f = popen(line, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	pclose(f);
	return buf;
}

/* The names in the pack directory, sorted by the shell, one a line. */
static const char *listing(void)
{
	return out("ls -A .git/objects/pack");
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/vmem-gitpack-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(packdir, sizeof(packdir), "%s/.git/objects/pack", tmp);
	sh("git init -q . && git config gc.auto 0");
	git_libgit2_init();
}

static void teardown(void)
{
	char cmd[128];

	git_libgit2_shutdown();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

/* Object i's bytes: sizes that take 1, 2 and 3 bytes of the size
 * header, the empty blob, and one past the writer's 1 MiB chunk. */
static size_t object(int i, char **data)
{
	static const size_t sizes[] = {0,    15,   16,	  200,
				       2047, 2048, 70000, (1u << 20) + 3};
	size_t len = sizes[i % 8] + (size_t)i / 8;
	char *d = malloc(len + 1);

	ck_assert_ptr_nonnull(d);
	for (size_t k = 0; k < len; k++)
		d[k] = (char)('a' + (k * 7 + (size_t)i) % 26);
	*data = d;
	return len;
}

/* A pack of n blobs, committed; ids[] gets their ids. */
static void pack_of(int n, git_oid *ids)
{
	struct gitpack *p = NULL;

	ck_assert_int_eq(gitpack_begin(&p, packdir, errmsg, sizeof(errmsg)), 0);
	for (int i = 0; i < n; i++) {
		char *d;
		size_t len = object(i, &d);

		ck_assert_int_eq(git_odb_hash(&ids[i], d, len, GIT_OBJECT_BLOB),
				 0);
		ck_assert_int_eq(gitpack_add(p, GIT_OBJECT_BLOB, &ids[i], d,
					     len, errmsg, sizeof(errmsg)),
				 0);
		free(d);
	}
	ck_assert_uint_eq(gitpack_count(p), (size_t)n);
	ck_assert_msg(gitpack_commit(p, errmsg, sizeof(errmsg)) == 0, "%s",
		      errmsg);
	gitpack_free(p);
}

/* Every object reads back as written, through git. */
static void objects_read_back(int n, const git_oid *ids)
{
	for (int i = 0; i < n; i++) {
		char hex[GIT_OID_HEXSZ + 1], cmd[256], *d;
		size_t len = object(i, &d);
		FILE *f;
		char *got = malloc(len + 1);
		size_t k;

		ck_assert_ptr_nonnull(got);
		git_oid_tostr(hex, sizeof(hex), &ids[i]);
		snprintf(cmd, sizeof(cmd), "cd '%s' && git cat-file blob %s",
			 tmp, hex);
		f = popen(cmd, "r");
		ck_assert_ptr_nonnull(f);
		k = fread(got, 1, len + 1, f);
		ck_assert_int_eq(pclose(f), 0);
		ck_assert_uint_eq(k, len);
		ck_assert(memcmp(got, d, len) == 0);
		free(got);
		free(d);
	}
}

START_TEST(test_pack_verifies_and_reads_back)
{
	git_oid ids[24];
	struct stat st;
	char path[256];
	const char *ls;

	pack_of(24, ids);
	sh("git verify-pack .git/objects/pack/*.idx");
	sh("git fsck --strict --no-dangling");
	ck_assert_str_eq(out("git count-objects -v | sed -n 's/^in-pack: //p'"),
			 "24\n");
	objects_read_back(24, ids);
	/* the pack and its index only, read-only as git leaves them */
	ls = listing();
	ck_assert_int_eq((int)strlen(ls), 2 * (5 + 40 + 5) + 1);
	ck_assert(strstr(ls, ".idx\n") && strstr(ls, ".pack\n"));
	ck_assert(!strstr(ls, "tmp_"));
	snprintf(path, sizeof(path), "%s/%.49s", packdir, ls);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0444);
}
END_TEST

/* Built with offsets past 100 in the 64-bit table: git reads both. */
START_TEST(test_large_offsets)
{
	git_oid ids[10];

	pack_of(10, ids);
	ck_assert_uint_eq(GITPACK_OFF31_MAX, 100);
	sh("git verify-pack .git/objects/pack/*.idx");
	/* verify-pack -v lists each object at its offset: the last ones are
	 * far past the lowered limit */
	sh("test \"$(git verify-pack -v .git/objects/pack/*.idx | "
	   "awk '$2 == \"blob\" && $5 > 100' | wc -l)\" -ge 4");
	objects_read_back(10, ids);
}
END_TEST

/* The same objects in the same order make the same pack: the second
 * finds it there and leaves it. */
START_TEST(test_same_pack_twice)
{
	git_oid ids[4];

	pack_of(4, ids);
	pack_of(4, ids);
	ck_assert_str_eq(out("ls .git/objects/pack | wc -l"), "2\n");
	sh("git verify-pack .git/objects/pack/*.idx");
}
END_TEST

START_TEST(test_abandoned_leaves_nothing)
{
	struct gitpack *p = NULL;
	git_oid id;

	ck_assert_int_eq(gitpack_begin(&p, packdir, errmsg, sizeof(errmsg)), 0);
	ck_assert_int_eq(git_odb_hash(&id, "x", 1, GIT_OBJECT_BLOB), 0);
	ck_assert_int_eq(gitpack_add(p, GIT_OBJECT_BLOB, &id, "x", 1, errmsg,
				     sizeof(errmsg)),
			 0);
	ck_assert_str_ne(listing(), ""); /* its temporary file */
	gitpack_free(p);
	ck_assert_str_eq(listing(), "");
}
END_TEST

/* An id added again is kept once: the pack verifies with each object
 * once, and its count (patched in at the end) says so. Ids that share
 * their first bytes (the set's hash) are told apart. */
START_TEST(test_each_object_once)
{
	struct gitpack *p = NULL;
	git_oid ids[3000];

	ck_assert_int_eq(gitpack_begin(&p, packdir, errmsg, sizeof(errmsg)), 0);
	for (int i = 0; i < 3000; i++) {
		char *d;
		size_t len = object(i % 1500, &d);

		ck_assert_int_eq(git_odb_hash(&ids[i], d, len, GIT_OBJECT_BLOB),
				 0);
		ck_assert_int_eq(gitpack_add(p, GIT_OBJECT_BLOB, &ids[i], d,
					     len, errmsg, sizeof(errmsg)),
				 i < 1500 ? 0 : 1);
		free(d);
	}
	{
		git_oid twin = ids[0];
		char *d;
		size_t len = object(0, &d);

		twin.id[19] ^= 1; /* same first bytes, another id */
		ck_assert_int_eq(gitpack_add(p, GIT_OBJECT_BLOB, &twin, d, len,
					     errmsg, sizeof(errmsg)),
				 0);
		free(d);
	}
	ck_assert_uint_eq(gitpack_count(p), 1501);
	ck_assert_msg(gitpack_commit(p, errmsg, sizeof(errmsg)) == 0, "%s",
		      errmsg);
	gitpack_free(p);
	ck_assert_str_eq(out("git verify-pack -v .git/objects/pack/*.idx | "
			     "grep -c ' blob '"),
			 "1501\n");
	ck_assert_str_eq(out("od -An -tx1 -j8 -N4 .git/objects/pack/*.pack"),
			 " 00 00 05 dd\n");
}
END_TEST

START_TEST(test_refused)
{
	struct gitpack *p = NULL;

	/* none */
	ck_assert_int_eq(gitpack_begin(&p, packdir, errmsg, sizeof(errmsg)), 0);
	ck_assert_int_eq(gitpack_commit(p, errmsg, sizeof(errmsg)), -EINVAL);
	ck_assert_str_eq(errmsg, "an empty pack");
	gitpack_free(p);
	p = NULL;
	/* a directory that is not there */
	ck_assert_int_eq(
		gitpack_begin(&p, "/nonexistent/pack", errmsg, sizeof(errmsg)),
		-ENOENT);
	ck_assert(strstr(errmsg, "/nonexistent/pack/tmp_pack_"));
	ck_assert_ptr_null(p);
	ck_assert_str_eq(listing(), "");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gitpack");
	TCase *tc = tcase_create("gitpack");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pack_verifies_and_reads_back);
	tcase_add_test(tc, test_large_offsets);
	tcase_add_test(tc, test_same_pack_twice);
	tcase_add_test(tc, test_each_object_once);
	tcase_add_test(tc, test_abandoned_leaves_nothing);
	tcase_add_test(tc, test_refused);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

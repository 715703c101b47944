/*
 * Unit tests of daemon/write/segment.c on real files in a temporary
 * directory: every reopen is compared with a model of the keys' current
 * payloads. Rotation, deletes, torn tails (cut and reported), corruption
 * (a hard error naming file and offset), unsafe files, compaction (to
 * under 1.3 times the live bytes, tombstones kept while they shadow
 * older records and never resurrecting a key), compaction running in a
 * thread while the owner writes, and the crash points of compaction
 * (before the rename: a .tmp; after it: the old file still there).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "segment.h"
#include "statedir.h"
#define TEST_RNG_SEED 77
#include "test_rng.h"

#define NKEYS 400

static char gitdir[64], dir[96];
static struct statedir root, SD;
static int dirfd_;

/* The model: each key's current payload, or none. */
static struct {
	uint8_t *p[NKEYS];
	size_t len[NKEYS];
	unsigned seen[NKEYS];
} M;

static void key_of(unsigned k, uint8_t key[SEG_KEY])
{
	memset(key, 0x11, SEG_KEY);
	memcpy(key, &k, sizeof(k));
}

/* A git directory's state directory, and its "segments" below it. */
static void setup(void)
{
	char msg[256];

	snprintf(gitdir, sizeof(gitdir), "/tmp/vmem-seg-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(gitdir));
	ck_assert_msg(statedir_init(&root, gitdir, NULL, 0, msg, sizeof(msg)) ==
			      0,
		      "%s", msg);
	ck_assert_int_eq(
		statedir_sub(&root, "segments", true, &SD, msg, sizeof(msg)),
		0);
	snprintf(dir, sizeof(dir), "%s/vmem/segments", gitdir);
	dirfd_ = SD.fd;
	memset(&M, 0, sizeof(M));
}

static void teardown(void)
{
	char cmd[128];

	statedir_done(&SD);
	statedir_done(&root);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", gitdir);
	ck_assert_int_eq(system(cmd), 0);
	for (int i = 0; i < NKEYS; i++)
		free(M.p[i]);
}

static int load_cb(void *ctx, const uint8_t key[SEG_KEY], const void *p,
		   size_t len)
{
	unsigned k;

	(void)ctx;
	memcpy(&k, key, sizeof(k));
	ck_assert_uint_lt(k, NKEYS);
	ck_assert_msg(M.p[k], "key %u resurrected", k);
	ck_assert_uint_eq(len, M.len[k]);
	ck_assert(memcmp(p, M.p[k], len) == 0);
	M.seen[k]++;
	return 0;
}

/* Reopen and compare every key with the model. */
static struct segstore *reopen(struct segstore *s, uint64_t segmax,
			       struct seg_report *rep)
{
	struct seg_opts o = {segmax};
	struct seg_report r;
	char msg[256];

	segstore_close(s);
	memset(M.seen, 0, sizeof(M.seen));
	ck_assert_msg(segstore_open(&SD, &o, load_cb, NULL, &s, rep ? rep : &r,
				    msg, sizeof(msg)) == 0,
		      "%s", msg);
	for (int k = 0; k < NKEYS; k++)
		ck_assert_uint_eq(M.seen[k], M.p[k] ? 1 : 0);
	return s;
}

static void put(struct segstore *s, unsigned k, size_t len)
{
	uint8_t key[SEG_KEY];
	struct seg_op op;
	char msg[128];

	free(M.p[k]);
	M.p[k] = malloc(len ? len : 1);
	for (size_t i = 0; i < len; i++)
		M.p[k][i] = (uint8_t)rnd();
	M.len[k] = len;
	key_of(k, key);
	op = (struct seg_op){key, M.p[k], len, false};
	ck_assert_int_eq(segstore_apply(s, &op, 1, msg, sizeof(msg)), 0);
}

static void del(struct segstore *s, unsigned k)
{
	uint8_t key[SEG_KEY];
	struct seg_op op;

	free(M.p[k]);
	M.p[k] = NULL;
	key_of(k, key);
	op = (struct seg_op){key, NULL, 0, true};
	ck_assert_int_eq(segstore_apply(s, &op, 1, NULL, 0), 0);
	ck_assert(!segstore_has(s, key));
}

static void random_ops(struct segstore *s, int n)
{
	for (int i = 0; i < n; i++) {
		/* The last ten keys are kept for the tests' own use. */
		unsigned k = (unsigned)(rnd() % (NKEYS - 10));

		if (rnd() % 4 == 0)
			del(s, k);
		else
			put(s, k, rnd() % 300);
	}
}

static off_t file_size(const char *name)
{
	struct stat st;

	ck_assert_int_eq(fstatat(dirfd_, name, &st, 0), 0);
	return st.st_size;
}

START_TEST(crc_known_value)
{
	ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(crc32c(crc32c(0, "1234", 4), "56789", 5),
			  0xe3069283u);
	ck_assert_uint_eq(crc32c(0, "", 0), 0);
}
END_TEST

START_TEST(round_trip_rotation_batches)
{
	struct segstore *s = NULL;
	struct seg_stats st;
	struct seg_op ops[3];
	uint8_t k1[SEG_KEY], k2[SEG_KEY], big[10];
	char msg[128];

	s = reopen(NULL, 8192, NULL);
	random_ops(s, 2000);
	ck_assert_int_eq(segstore_sync(s, msg, sizeof(msg)), 0);
	segstore_stats(s, &st);
	ck_assert_uint_gt(st.segments, 5);
	s = reopen(s, 8192, NULL);
	random_ops(s, 500);
	s = reopen(s, 8192, NULL);
	/* A batch: put, delete and put again of one key; a stray delete. */
	key_of(5, k1);
	key_of(NKEYS - 1, k2);
	memset(big, 7, sizeof(big));
	del(s, NKEYS - 1);
	ops[0] = (struct seg_op){k1, big, 3, false};
	ops[1] = (struct seg_op){k1, NULL, 0, true};
	ops[2] = (struct seg_op){k2, NULL, 0, true};
	ck_assert_int_eq(segstore_apply(s, ops, 3, msg, sizeof(msg)), 0);
	free(M.p[5]);
	M.p[5] = NULL;
	ck_assert(!segstore_has(s, k1));
	s = reopen(s, 8192, NULL);
	/* Too big. */
	ops[0] = (struct seg_op){k1, big, SEG_PAYLOAD_MAX + 1, false};
	ck_assert_int_eq(segstore_apply(s, ops, 1, msg, sizeof(msg)), -EINVAL);
	segstore_close(s);
}
END_TEST

/* The name of the newest segment file. */
static void newest(char *name, size_t n)
{
	char cmd[200];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls %s | grep -v tmp | sort | tail -1", dir);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(fgets(name, (int)n, f));
	name[strcspn(name, "\n")] = '\0';
	pclose(f);
}

static void append_bytes(const char *name, const void *p, size_t n)
{
	int fd = openat(dirfd_, name, O_WRONLY | O_APPEND);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
	close(fd);
}

START_TEST(torn_tails_cut)
{
	struct segstore *s = NULL;
	struct seg_report rep;
	char name[64], path[200];
	uint8_t junk[100], zeros[4096] = {0};
	off_t size;

	s = reopen(NULL, 1 << 20, NULL);
	random_ops(s, 300);
	segstore_sync(s, NULL, 0);
	segstore_close(s);
	newest(name, sizeof(name));
	size = file_size(name);

	/* Garbage after the last record. */
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rnd();
	append_bytes(name, junk, sizeof(junk));
	s = reopen(NULL, 1 << 20, &rep);
	ck_assert_uint_eq(rep.torn_bytes, sizeof(junk));
	ck_assert_uint_eq(rep.torn_offset, (uint64_t)size);
	ck_assert_str_eq(rep.torn_file, name);
	ck_assert_int_eq(file_size(name), size);
	segstore_close(s);

	/* Zeros (a file system extending the file), then a record cut. */
	append_bytes(name, zeros, sizeof(zeros));
	s = reopen(NULL, 1 << 20, &rep);
	ck_assert_uint_eq(rep.torn_bytes, sizeof(zeros));
	/* A key never written before, so cutting it leaves no older state. */
	put(s, NKEYS - 1, 200);
	segstore_sync(s, NULL, 0);
	segstore_close(s);
	size = file_size(name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_int_eq(truncate(path, size - 50), 0);
	free(M.p[NKEYS - 1]);
	M.p[NKEYS - 1] = NULL;
	s = reopen(NULL, 1 << 20, &rep);
	ck_assert_uint_eq(rep.torn_bytes, 200 + SEG_REC_HDR - 50);
	ck_assert_int_eq(file_size(name), size - 200 - SEG_REC_HDR);
	segstore_close(s);
}
END_TEST

START_TEST(corruption_is_fatal)
{
	struct segstore *s = NULL;
	struct seg_opts o = {4096};
	char name[64], path[200], msg[256];
	uint8_t b;
	int fd, rc;

	s = reopen(NULL, 1 << 20, NULL);
	for (unsigned k = 0; k < 50; k++)
		put(s, k, 100);
	segstore_sync(s, NULL, 0);
	segstore_close(s);
	newest(name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	/* One byte of the tenth record's payload. */
	fd = open(path, O_RDWR);
	off_t at = SEG_HDR + 9 * (SEG_REC_HDR + 100) + SEG_REC_HDR + 5;
	ck_assert_int_eq(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
	close(fd);
	rc = segstore_open(&SD, &o, load_cb, NULL, &s, NULL, msg, sizeof(msg));
	ck_assert_int_eq(rc, -EBADMSG);
	ck_assert_ptr_null(s);
	char want[128];
	snprintf(want, sizeof(want), "corrupt record in %s at offset %ld", name,
		 (long)(SEG_HDR + 9 * (SEG_REC_HDR + 100)));
	ck_assert_str_eq(msg, want);
	/* The file was not cut. */
	ck_assert_int_eq(file_size(name), SEG_HDR + 50 * (SEG_REC_HDR + 100));
}
END_TEST

START_TEST(sealed_damage_is_fatal)
{
	struct segstore *s = NULL;
	struct seg_opts o = {4096};
	char name[64], path[200], msg[256];

	s = reopen(NULL, 4096, NULL);
	random_ops(s, 200);
	segstore_sync(s, NULL, 0);
	segstore_close(s);
	/* Cut the tail of the oldest (sealed) segment. */
	snprintf(name, sizeof(name), "seg-%016x", 1);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_int_eq(truncate(path, file_size(name) - 7), 0);
	ck_assert_int_eq(segstore_open(&SD, &o, load_cb, NULL, &s, NULL, msg,
				       sizeof(msg)),
			 -EBADMSG);
	ck_assert_ptr_nonnull(strstr(msg, name));
	/* Cut exactly at a record boundary (the seal gone): still caught. */
	ck_assert_int_eq(truncate(path, file_size(name) + 7 - 48), 0);
	ck_assert_int_eq(segstore_open(&SD, &o, load_cb, NULL, &s, NULL, msg,
				       sizeof(msg)),
			 -EBADMSG);
	ck_assert_ptr_nonnull(strstr(msg, "no seal"));
}
END_TEST

START_TEST(unsafe_files_refused)
{
	struct segstore *s = NULL;
	struct seg_opts o = {4096};
	char msg[256];

	s = reopen(NULL, 4096, NULL);
	put(s, 1, 10);
	segstore_sync(s, NULL, 0);
	segstore_close(s);
	ck_assert_int_eq(
		symlinkat("/etc/passwd", dirfd_, "seg-00000000000000ff"), 0);
	ck_assert_int_eq(segstore_open(&SD, &o, load_cb, NULL, &s, NULL, msg,
				       sizeof(msg)),
			 -ELOOP);
	ck_assert_int_eq(unlinkat(dirfd_, "seg-00000000000000ff", 0), 0);
	ck_assert_int_eq(fchmodat(dirfd_, "seg-0000000000000001", 0620, 0), 0);
	ck_assert_int_eq(segstore_open(&SD, &o, load_cb, NULL, &s, NULL, msg,
				       sizeof(msg)),
			 -EPERM);
	ck_assert_int_eq(fchmodat(dirfd_, "seg-0000000000000001", 0600, 0), 0);
	/* Other entries are counted, never touched. */
	ck_assert_int_eq(mkdirat(dirfd_, "other", 0700), 0);
	struct seg_report rep;
	s = reopen(NULL, 4096, &rep);
	ck_assert_uint_eq(rep.unknown, 1);
	segstore_close(s);
}
END_TEST

/* Compact until nothing is due; the ratio and the model after reopen. */
static struct segstore *compact_all(struct segstore *s)
{
	struct seg_compact *c;
	char msg[256];
	int rc, rounds = 0;

	while ((rc = segstore_compact_plan(s, &c, msg, sizeof(msg))) == 1) {
		ck_assert_msg(segcompact_run(c, msg, sizeof(msg)) == 0, "%s",
			      msg);
		ck_assert_int_eq(
			segstore_compact_finish(s, c, msg, sizeof(msg)), 0);
		ck_assert_int_lt(++rounds, 1000);
	}
	ck_assert_int_eq(rc, 0);
	return s;
}

START_TEST(compaction_ratio_and_tombstones)
{
	struct segstore *s = NULL;
	struct seg_stats st;
	char msg[128];

	s = reopen(NULL, 16384, NULL);
	for (int round = 0; round < 5; round++)
		random_ops(s, 1500);
	segstore_sync(s, msg, sizeof(msg));
	segstore_stats(s, &st);
	ck_assert_uint_gt(st.disk_bytes, 2 * st.live_bytes);
	s = compact_all(s);
	segstore_stats(s, &st);
	ck_assert_uint_gt(st.compactions, 0);
	ck_assert_msg(st.disk_bytes * 10 <=
			      (st.live_bytes + (SEG_HDR + 48) * st.segments) *
				      13,
		      "disk %lu live %lu segs %u", (unsigned long)st.disk_bytes,
		      (unsigned long)st.live_bytes, st.segments);
	s = reopen(s, 16384, NULL);

	/* Delete everything: after compaction nothing comes back. */
	for (unsigned k = 0; k < NKEYS; k++)
		if (M.p[k])
			del(s, k);
	segstore_sync(s, msg, sizeof(msg));
	s = compact_all(s);
	segstore_stats(s, &st);
	ck_assert_uint_eq(st.keys, 0);
	ck_assert_uint_eq(st.tombstones, 0);
	s = reopen(s, 16384, NULL);
	segstore_stats(s, &st);
	ck_assert_uint_eq(st.keys, 0);
	segstore_close(s);
}
END_TEST

/*
 * A key's put in a sealed, mostly live segment and its tombstone in a
 * mostly dead one: compacting the tombstone's segment first must keep
 * the tombstone, or the put would come back at the next open.
 */
START_TEST(tombstone_shadows_older_segment)
{
	struct segstore *s = NULL;
	struct seg_compact *c;
	struct seg_stats st;
	char msg[256];

	s = reopen(NULL, 4096, NULL);
	for (unsigned k = NKEYS - 10; k < NKEYS - 1; k++)
		put(s, k, 300);
	segstore_stats(s, &st);
	ck_assert_uint_eq(st.segments, 1);
	put(s, NKEYS - 1, 300);
	put(s, NKEYS - 1, 300);
	put(s, NKEYS - 1, 300); /* the twelfth record: rotates */
	segstore_stats(s, &st);
	ck_assert_uint_eq(st.segments, 2);
	del(s, NKEYS - 10);
	for (int i = 0; i < 8; i++)
		put(s, NKEYS - 1, 300);
	segstore_sync(s, msg, sizeof(msg));
	ck_assert_int_eq(segstore_compact_plan(s, &c, msg, sizeof(msg)), 1);
	ck_assert_int_eq(segcompact_run(c, msg, sizeof(msg)), 0);
	ck_assert_int_eq(segstore_compact_finish(s, c, msg, sizeof(msg)), 0);
	segstore_stats(s, &st);
	ck_assert_uint_eq(st.tombstones, 1);
	ck_assert_int_ne(faccessat(dirfd_, "seg-0000000000000002", F_OK, 0), 0);
	s = reopen(s, 4096, NULL);
	s = compact_all(s);
	s = reopen(s, 4096, NULL);
	segstore_close(s);
}
END_TEST

struct runner {
	struct seg_compact *c;
	int rc;
	char msg[256];
};

static void *run_thread(void *p)
{
	struct runner *r = p;

	r->rc = segcompact_run(r->c, r->msg, sizeof(r->msg));
	return NULL;
}

START_TEST(compaction_while_writing)
{
	struct segstore *s = NULL;
	struct runner r;
	pthread_t t;
	char msg[256];
	int rc;

	s = reopen(NULL, 8192, NULL);
	for (int round = 0; round < 20; round++) {
		random_ops(s, 300);
		rc = segstore_compact_plan(s, &r.c, msg, sizeof(msg));
		ck_assert_int_ge(rc, 0);
		if (rc == 0)
			continue;
		ck_assert_int_eq(pthread_create(&t, NULL, run_thread, &r), 0);
		/* Supersede kept records while the copy is being made. */
		random_ops(s, 200);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		ck_assert_msg(r.rc == 0, "%s", r.msg);
		ck_assert_int_eq(
			segstore_compact_finish(s, r.c, msg, sizeof(msg)), 0);
		segstore_sync(s, msg, sizeof(msg));
		if (round % 4 == 0)
			s = reopen(s, 8192, NULL);
	}
	s = compact_all(s);
	s = reopen(s, 8192, NULL);
	segstore_close(s);
}
END_TEST

static uint8_t *read_whole(const char *name, size_t *len)
{
	char path[200];
	FILE *f;
	uint8_t *b;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	b = malloc(*len);
	ck_assert_uint_eq(fread(b, 1, *len, f), *len);
	fclose(f);
	return b;
}

static void write_whole(const char *name, const uint8_t *b, size_t len)
{
	int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_EXCL, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, b, len), (ssize_t)len);
	close(fd);
}

/* The files in the directory and their bytes. */
struct snapshot {
	char name[64][64];
	uint8_t *bytes[64];
	size_t len[64];
	int n;
};

static void snap(struct snapshot *sn)
{
	char cmd[200];
	FILE *f;

	memset(sn, 0, sizeof(*sn));
	snprintf(cmd, sizeof(cmd), "ls %s", dir);
	f = popen(cmd, "r");
	while (sn->n < 64 && fgets(sn->name[sn->n], 64, f)) {
		sn->name[sn->n][strcspn(sn->name[sn->n], "\n")] = '\0';
		sn->bytes[sn->n] = read_whole(sn->name[sn->n], &sn->len[sn->n]);
		sn->n++;
	}
	pclose(f);
}

static void snap_free(struct snapshot *sn)
{
	for (int i = 0; i < sn->n; i++)
		free(sn->bytes[i]);
}

START_TEST(compaction_crash_points)
{
	struct segstore *s = NULL;
	struct seg_compact *c;
	struct seg_report rep;
	struct snapshot before;
	char msg[256];
	int i, gone = -1;

	s = reopen(NULL, 8192, NULL);
	for (int round = 0; round < 3; round++)
		random_ops(s, 800);
	segstore_sync(s, msg, sizeof(msg));

	/* Crash before the rename: a .tmp is left; it goes, data stays. */
	write_whole("seg-00000000000000aa.tmp", (const uint8_t *)"partial", 7);
	s = reopen(s, 8192, &rep);
	ck_assert_uint_eq(rep.tmp_removed, 1);
	ck_assert_int_ne(faccessat(dirfd_, "seg-00000000000000aa.tmp", F_OK, 0),
			 0);

	/* Crash after the rename, before the old file's removal. */
	ck_assert_int_eq(segstore_compact_plan(s, &c, msg, sizeof(msg)), 1);
	segstore_sync(s, msg, sizeof(msg));
	snap(&before);
	ck_assert_int_eq(segcompact_run(c, msg, sizeof(msg)), 0);
	ck_assert_int_eq(segstore_compact_finish(s, c, msg, sizeof(msg)), 0);
	segstore_close(s);
	for (i = 0; i < before.n; i++)
		if (faccessat(dirfd_, before.name[i], F_OK, 0) != 0)
			gone = i;
	ck_assert_int_ge(gone, 0);
	write_whole(before.name[gone], before.bytes[gone], before.len[gone]);
	/* Both files hold the kept records: read once, the old one goes. */
	s = reopen(NULL, 8192, &rep);
	ck_assert_uint_eq(rep.replaced, 1);
	ck_assert_int_ne(faccessat(dirfd_, before.name[gone], F_OK, 0), 0);
	s = reopen(s, 8192, &rep);
	ck_assert_uint_eq(rep.replaced, 0);
	segstore_close(s);
	snap_free(&before);
}
END_TEST

static Suite *segment_suite(void)
{
	Suite *s = suite_create("segment");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, crc_known_value);
	tcase_add_test(tc, round_trip_rotation_batches);
	tcase_add_test(tc, torn_tails_cut);
	tcase_add_test(tc, corruption_is_fatal);
	tcase_add_test(tc, sealed_damage_is_fatal);
	tcase_add_test(tc, unsafe_files_refused);
	tcase_add_test(tc, compaction_ratio_and_tombstones);
	tcase_add_test(tc, tombstone_shadows_older_segment);
	tcase_add_test(tc, compaction_while_writing);
	tcase_add_test(tc, compaction_crash_points);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(segment_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

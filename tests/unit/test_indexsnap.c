/* Unit tests of daemon/find/indexsnap.c: the index's snapshot saved and
 * read back, records handed out only for their own stamp, racy and dirty
 * entries left out, damage refused. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "indexsnap.h"
#include "run_suite.h"

#define OLD_NS 1700000000000000000LL /* November 2023: long settled */

static char gitdir[64], path[128], msg[256];
static struct statedir sd;

static int rm_cb(const char *p, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void setup(void)
{
	char note[256];

	strcpy(gitdir, "/tmp/vmem-test-indexsnap-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(gitdir));
	ck_assert_int_eq(statedir_init(&sd, gitdir, note, sizeof(note), msg,
				       sizeof(msg)),
			 0);
	snprintf(path, sizeof(path), "%s/vmem/%s", gitdir, INDEXSNAP_NAME);
}

static void teardown(void)
{
	statedir_done(&sd);
	nftw(gitdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static struct record *make(int x, int y, int z, const char *content)
{
	struct decision d = {.coord = {x, y, z}, .version = 3};
	struct record *r;

	d.content = strdup(content);
	d.content_len = strlen(content);
	d.agent_id = strdup("agent-1");
	timestamp_format(1736177400123456LL, d.timestamp);
	r = record_new(&d);
	decision_done(&d);
	ck_assert_ptr_nonnull(r);
	return r;
}

static struct vmdir_stamp stamp(uint64_t ino, int64_t t)
{
	return (struct vmdir_stamp){ino, 100 + ino, t, t + 1};
}

/* An index of three decisions and their stamps (the third one racy). */
static void fill(struct index *ix, struct vmdir_stamp **stamps)
{
	struct timespec now;
	struct coord c;

	ck_assert_int_eq(index_init(ix, 100), 0);
	*stamps = calloc(ix->n_slots, sizeof(**stamps));
	ck_assert_ptr_nonnull(*stamps);
	clock_gettime(CLOCK_REALTIME, &now);
	index_put(ix, make(1, 1, 1, "first \"quoted\" decision"));
	index_put(ix, make(7, 2, 3, "second"));
	index_put(ix, make(100, 5, 4, "changed just now"));
	c = (struct coord){1, 1, 1};
	(*stamps)[index_slot(ix, &c)] = stamp(11, OLD_NS);
	c = (struct coord){7, 2, 3};
	(*stamps)[index_slot(ix, &c)] = stamp(12, OLD_NS + 5);
	c = (struct coord){100, 5, 4};
	(*stamps)[index_slot(ix, &c)] =
		stamp(13, (int64_t)now.tv_sec * 1000000000 + now.tv_nsec);
}

static size_t slot_of(const struct index *ix, int x, int y, int z)
{
	struct coord c = {x, y, z};

	return index_slot(ix, &c);
}

START_TEST(round_trip_by_stamp)
{
	struct index ix, back;
	struct vmdir_stamp *stamps, st;
	struct indexsnap s = {0};
	struct record *r;
	size_t slot;

	fill(&ix, &stamps);
	/* The racy one is left out. */
	ck_assert_int_eq(
		indexsnap_save(&sd, &ix, stamps, NULL, msg, sizeof(msg)), 2);
	ck_assert_int_eq(index_init(&back, 100), 0);
	ck_assert_int_eq(indexsnap_load(&s, &sd, &back, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(s.count, 2);

	/* Another stamp, in any field: no record. */
	slot = slot_of(&ix, 1, 1, 1);
	st = stamps[slot];
	st.ctime_ns++;
	ck_assert_ptr_null(indexsnap_take(&s, slot, &st));
	st = stamps[slot];
	st.ino++;
	ck_assert_ptr_null(indexsnap_take(&s, slot, &st));
	st = stamps[slot];
	st.size--;
	ck_assert_ptr_null(indexsnap_take(&s, slot, &st));
	st = stamps[slot];
	st.mtime_ns--;
	ck_assert_ptr_null(indexsnap_take(&s, slot, &st));

	/* Its own stamp: the same record, once. */
	r = indexsnap_take(&s, slot, &stamps[slot]);
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(r->json, ix.slots[slot]->json);
	ck_assert_uint_eq(r->json_len, ix.slots[slot]->json_len);
	ck_assert_uint_eq(r->content_off, ix.slots[slot]->content_off);
	ck_assert_uint_eq(r->content_esc_len, ix.slots[slot]->content_esc_len);
	ck_assert_int_eq(r->version, 3);
	ck_assert_ptr_null(indexsnap_take(&s, slot, &stamps[slot]));
	index_put(&back, r);
	ck_assert_uint_eq(s.taken, 1);

	slot = slot_of(&ix, 100, 5, 4);
	ck_assert_ptr_null(indexsnap_take(&s, slot, &stamps[slot]));
	indexsnap_done(&s); /* frees the (7, 2, 3) record not taken (ASan) */
	indexsnap_done(&s);
	index_done(&back);
	index_done(&ix);
	free(stamps);
}
END_TEST

START_TEST(dirty_and_unknown_left_out)
{
	struct index ix, back;
	struct vmdir_stamp *stamps;
	struct indexsnap s = {0};
	uint8_t *dirty;

	fill(&ix, &stamps);
	dirty = calloc(ix.n_slots, 1);
	ck_assert_ptr_nonnull(dirty);
	dirty[slot_of(&ix, 1, 1, 1)] = 1;
	memset(&stamps[slot_of(&ix, 7, 2, 3)], 0, sizeof(*stamps));
	ck_assert_int_eq(
		indexsnap_save(&sd, &ix, stamps, dirty, msg, sizeof(msg)), 0);
	ck_assert_int_eq(index_init(&back, 100), 0);
	ck_assert_int_eq(indexsnap_load(&s, &sd, &back, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(s.count, 0);
	indexsnap_done(&s);
	index_done(&back);
	index_done(&ix);
	free(stamps);
	free(dirty);
}
END_TEST

START_TEST(beyond_max_x_dropped)
{
	struct index ix, small;
	struct vmdir_stamp *stamps;
	struct indexsnap s = {0};
	size_t slot;

	fill(&ix, &stamps);
	ck_assert_int_eq(
		indexsnap_save(&sd, &ix, stamps, NULL, msg, sizeof(msg)), 2);
	ck_assert_int_eq(index_init(&small, 5), 0);
	ck_assert_int_eq(indexsnap_load(&s, &sd, &small, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(s.count, 1);
	slot = slot_of(&small, 1, 1, 1);
	record_free(indexsnap_take(&s, slot, &stamps[slot_of(&ix, 1, 1, 1)]));
	ck_assert_uint_eq(s.taken, 1);
	indexsnap_done(&s);
	index_done(&small);
	index_done(&ix);
	free(stamps);
}
END_TEST

/* Save the filled index, damage the file with fn, expect -EBADMSG. */
static void expect_refused(void (*fn)(int fd, off_t len), const char *why)
{
	struct index ix, back;
	struct vmdir_stamp *stamps;
	struct indexsnap s = {0};
	struct stat st;
	int fd;

	fill(&ix, &stamps);
	ck_assert_int_eq(
		indexsnap_save(&sd, &ix, stamps, NULL, msg, sizeof(msg)), 2);
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	fn(fd, st.st_size);
	close(fd);
	ck_assert_int_eq(index_init(&back, 100), 0);
	ck_assert_int_eq(indexsnap_load(&s, &sd, &back, msg, sizeof(msg)),
			 -EBADMSG);
	ck_assert_msg(strstr(msg, why), "%s", msg);
	ck_assert_ptr_null(s.slots);
	ck_assert_uint_eq(s.count, 0);
	indexsnap_done(&s);
	index_done(&back);
	index_done(&ix);
	free(stamps);
}

static void flip(int fd, off_t len)
{
	char c;

	ck_assert_int_eq(pread(fd, &c, 1, len / 2), 1);
	c ^= 0x20;
	ck_assert_int_eq(pwrite(fd, &c, 1, len / 2), 1);
}

static void cut(int fd, off_t len)
{
	ck_assert_int_eq(ftruncate(fd, len - 5), 0);
}

static void empty(int fd, off_t len)
{
	(void)len;
	ck_assert_int_eq(ftruncate(fd, 0), 0);
}

static void other_magic(int fd, off_t len)
{
	(void)len;
	ck_assert_int_eq(pwrite(fd, "VMSNAP9\n", 8, 0), 8);
}

START_TEST(damage_refused)
{
	expect_refused(flip, "checksum");
	expect_refused(cut, "checksum");
	expect_refused(empty, "too short");
	expect_refused(other_magic, "format");
}
END_TEST

START_TEST(absent_and_removed)
{
	struct index ix;
	struct vmdir_stamp *stamps;
	struct indexsnap s = {0};

	fill(&ix, &stamps);
	ck_assert_int_eq(indexsnap_load(&s, &sd, &ix, msg, sizeof(msg)),
			 -ENOENT);
	ck_assert_int_eq(
		indexsnap_save(&sd, &ix, stamps, NULL, msg, sizeof(msg)), 2);
	ck_assert_int_eq(access(path, F_OK), 0);
	ck_assert_int_eq(indexsnap_remove(&sd), 0);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(indexsnap_load(&s, &sd, &ix, msg, sizeof(msg)),
			 -ENOENT);
	index_done(&ix);
	free(stamps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("indexsnap");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, round_trip_by_stamp);
	tcase_add_test(tc, dirty_and_unknown_left_out);
	tcase_add_test(tc, beyond_max_x_dropped);
	tcase_add_test(tc, damage_refused);
	tcase_add_test(tc, absent_and_removed);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

/*
 * Unit tests of daemon/git/vmdir.c: the exact on-disk layout written by
 * vmdir_apply, loading it back, temp-file clean-up, quarantine of every
 * kind of bad entry (with its original bytes kept), symlink refusal.
 * Every test works in its own temporary directory, removed afterwards.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "vmdir.h"
#include "protocol/decision.h"

#define MAXD 64

static char tmpdir[64];
static char root[128];
static char qdir[160];
static struct statedir sd; /* root/.git/vmem */
static struct vmdir vd;

struct loaded {
	size_t n;
	struct decision d[MAXD];
	int fail_at;  /* 1-based record on which to fail, 0: never */
	size_t count; /* when d[] is not kept (many files) */
	int keep;
};

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
	char gitdir[160];

	strcpy(tmpdir, "/tmp/vmem-test-vmdir-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(root, sizeof(root), "%s/tree", tmpdir);
	snprintf(qdir, sizeof(qdir), "%s/tree/.git/vmem/quarantine", tmpdir);
	ck_assert_int_eq(mkdir(root, 0755), 0);
	snprintf(gitdir, sizeof(gitdir), "%s/.git", root);
	ck_assert_int_eq(mkdir(gitdir, 0755), 0);
	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(vmdir_init(&vd, root, &sd, VMEM_MAX_X_DEFAULT), 0);
}

static void teardown(void)
{
	vmdir_done(&vd);
	statedir_done(&sd);
	nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int load_cb(void *ctx, struct decision *d,
		   const struct vmdir_stamp *stamp)
{
	struct loaded *l = ctx;

	(void)stamp;
	l->count++;
	if (l->fail_at && (int)l->count == l->fail_at)
		return -ECANCELED;
	if (!l->keep) {
		decision_done(d);
		return 0;
	}
	ck_assert_uint_lt(l->n, MAXD);
	l->d[l->n++] = *d;
	return 0;
}

static void loaded_free(struct loaded *l)
{
	for (size_t i = 0; i < l->n; i++)
		decision_done(&l->d[i]);
	memset(l, 0, sizeof(*l));
}

static const struct decision *find(const struct loaded *l, int x, int y, int z)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->d[i].coord.x == x && l->d[i].coord.y == y &&
		    l->d[i].coord.z == z)
			return &l->d[i];
	return NULL;
}

/* The exact file text of a decision with the given content. */
static char *text_of(int x, int y, int z, const char *content, size_t *len)
{
	struct decision d;
	char *s;

	memset(&d, 0, sizeof(d));
	d.coord = (struct coord){x, y, z};
	d.content = (char *)content;
	d.content_len = strlen(content);
	d.agent_id = (char *)"agent-1";
	d.version = 1;
	timestamp_format(1736177400123456LL, d.timestamp);
	s = decision_dump_file(&d, len);
	ck_assert_ptr_nonnull(s);
	return s;
}

static void apply1(int x, int y, int z, const char *content)
{
	struct vmdir_op op = {.coord = {x, y, z}, .text = NULL, .len = 0};
	char msg[256] = "";
	char *t = NULL;

	if (content) {
		t = text_of(x, y, z, content, &op.len);
		op.text = t;
	}
	ck_assert_msg(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)) == 0,
		      "%s", msg);
	free(t);
}

static char *path_of(const char *rel)
{
	static char buf[4][512];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", root, rel);
	return buf[i];
}

/* Read a whole file (NUL-terminated copy); NULL when absent. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

static void spit(const char *rel, const char *buf, size_t len)
{
	FILE *f = fopen(path_of(rel), "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static int count_entries(const char *path)
{
	struct dirent *de;
	DIR *d = opendir(path);
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static int exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

START_TEST(test_apply_layout)
{
	char *t, *got;
	size_t tlen, glen;

	t = text_of(5, 2, 1, "Use PostgreSQL for persistence layer", &tlen);
	apply1(5, 2, 1, "Use PostgreSQL for persistence layer");
	got = slurp(path_of(".vector-memory/x-005/y-2-z-1.json"), &glen);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(glen, tlen);
	ck_assert_int_eq(memcmp(got, t, tlen), 0);
	free(got);
	got = slurp(path_of(".vector-memory/metadata.json"), NULL);
	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(got, "{\n  \"format\": 1\n}\n");
	free(got);
	/* nothing else: no temp files left behind */
	ck_assert_int_eq(count_entries(path_of(".vector-memory")), 2);
	ck_assert_int_eq(count_entries(path_of(".vector-memory/x-005")), 1);

	apply1(1000, 5, 4, "wide");
	apply1(42, 1, 3, "mid");
	ck_assert(exists(path_of(".vector-memory/x-1000/y-5-z-4.json")));
	ck_assert(exists(path_of(".vector-memory/x-042/y-1-z-3.json")));
	ck_assert_int_eq(count_entries(path_of(".vector-memory")), 4);
	free(t);
}
END_TEST

START_TEST(test_apply_many_ops_and_umask)
{
	struct vmdir_op ops[6];
	char *texts[6];
	char msg[256] = "";
	struct stat st;
	mode_t old = umask(027);

	for (int i = 0; i < 6; i++) {
		ops[i].coord = (struct coord){1 + i % 3, 1 + i / 3, 2};
		texts[i] = text_of(ops[i].coord.x, ops[i].coord.y, 2, "batch",
				   &ops[i].len);
		ops[i].text = texts[i];
	}
	ck_assert_int_eq(vmdir_apply(&vd, ops, 6, true, msg, sizeof(msg)), 0);
	umask(old);
	ck_assert_int_eq(count_entries(path_of(".vector-memory")), 4);
	ck_assert_int_eq(count_entries(path_of(".vector-memory/x-002")), 2);
	ck_assert_int_eq(
		stat(path_of(".vector-memory/x-002/y-2-z-2.json"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0640);
	ck_assert_int_eq(stat(path_of(".vector-memory/x-002"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0750);
	for (int i = 0; i < 6; i++)
		free(texts[i]);
}
END_TEST

/* A bulk pass over more x directories than the process may hold open
 * files (here 400): written all the same, and the directories its
 * deletions empty go, even those it had to close meanwhile. */
START_TEST(test_apply_more_directories_than_open_files)
{
	enum { N = 1000 };
	struct vmdir_op *ops = calloc(N, sizeof(*ops));
	char **texts = calloc(N, sizeof(*texts));
	struct rlimit old, low;
	char msg[256] = "";
	int i;

	ck_assert_ptr_nonnull(ops);
	ck_assert_ptr_nonnull(texts);
	for (i = 0; i < N; i++) {
		ops[i].coord = (struct coord){1 + i, 1, 2};
		texts[i] = text_of(1 + i, 1, 2, "spread", &ops[i].len);
		ops[i].text = texts[i];
	}
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 400;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	ck_assert_msg(vmdir_apply(&vd, ops, N, false, msg, sizeof(msg)) == 0,
		      "%s", msg);
	for (i = 0; i < N; i++) {
		if (i % 2)
			continue;
		ops[i].text = NULL; /* the even ones deleted */
	}
	for (i = 0; i < N; i++)
		if (i % 2)
			ops[i].text = texts[i];
	ck_assert_msg(vmdir_apply(&vd, ops, N, false, msg, sizeof(msg)) == 0,
		      "%s", msg);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	ck_assert(!exists(path_of(".vector-memory/x-001")));
	ck_assert(exists(path_of(".vector-memory/x-002/y-1-z-2.json")));
	ck_assert(!exists(path_of(".vector-memory/x-999")));
	ck_assert(exists(path_of(".vector-memory/x-1000/y-1-z-2.json")));
	ck_assert_int_eq(count_entries(path_of(".vector-memory")), N / 2 + 1);
	for (i = 0; i < N; i++)
		free(texts[i]);
	free(texts);
	free(ops);
}
END_TEST

/* What the interrupt callback saw, and the call that says git took the
 * tree (0: none). */
static struct {
	size_t calls, thorough, stop_at;
} asked;

static bool counting_interrupt(void *ctx, bool thorough)
{
	(void)ctx;
	asked.calls++;
	asked.thorough += thorough;
	return asked.stop_at && asked.calls == asked.stop_at;
}

/* Decisions of x = x0.. (20 a directory), with their texts. */
static void paced_ops(struct vmdir_op *ops, char **texts, int n, int x0)
{
	for (int i = 0; i < n; i++) {
		ops[i] = (struct vmdir_op){
			.coord = {x0 + i / 20, 1 + i % 5, 1 + (i / 5) % 4}};
		texts[i] = text_of(ops[i].coord.x, ops[i].coord.y,
				   ops[i].coord.z, "paced", &ops[i].len);
		ops[i].text = texts[i];
	}
}

/* vmdir_apply asks before every file whether git took the tree, looks
 * at git's processes (thorough) at least every 64 files, and stops at
 * the file where the answer is yes: the files before it written, the
 * rest left (interrupted) and not created. */
START_TEST(test_apply_interrupted)
{
	enum { N = 200 };
	struct vmdir_op *ops = calloc(N, sizeof(*ops));
	char **texts = calloc(N, sizeof(*texts)), msg[256] = "", rel[80];
	int i;

	ck_assert_ptr_nonnull(ops);
	ck_assert_ptr_nonnull(texts);
	vd.interrupt = counting_interrupt;
	paced_ops(ops, texts, N, 1);
	memset(&asked, 0, sizeof(asked));
	ck_assert_msg(vmdir_apply(&vd, ops, N, false, msg, sizeof(msg)) == 0,
		      "%s", msg);
	ck_assert_uint_eq(asked.calls, N);
	ck_assert_uint_ge(asked.thorough, N / 65);
	for (i = 0; i < N; i++) {
		ck_assert(!ops[i].interrupted);
		free(texts[i]);
	}

	paced_ops(ops, texts, N, 101); /* new files */
	memset(&asked, 0, sizeof(asked));
	asked.stop_at = 5;
	ck_assert_msg(vmdir_apply(&vd, ops, N, false, msg, sizeof(msg)) == 0,
		      "%s", msg);
	ck_assert_uint_eq(asked.calls, 5);
	for (i = 0; i < N; i++) {
		memcpy(rel, ".vector-memory/", 15);
		ck_assert_int_gt(
			coord_path(&ops[i].coord, rel + 15, sizeof(rel) - 15),
			0);
		ck_assert_int_eq(ops[i].interrupted, i >= 4);
		ck_assert_int_eq(exists(path_of(rel)), i < 4);
		free(texts[i]);
	}
	vd.interrupt = NULL;
	free(texts);
	free(ops);
}
END_TEST

START_TEST(test_apply_overwrite)
{
	char *t, *got;
	size_t tlen;

	apply1(7, 3, 2, "first");
	apply1(7, 3, 2, "second, longer than the first");
	t = text_of(7, 3, 2, "second, longer than the first", &tlen);
	got = slurp(path_of(".vector-memory/x-007/y-3-z-2.json"), NULL);
	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(got, t);
	apply1(7, 3, 2, "3");
	free(t);
	free(got);
	t = text_of(7, 3, 2, "3", &tlen);
	got = slurp(path_of(".vector-memory/x-007/y-3-z-2.json"), NULL);
	ck_assert_str_eq(got, t);
	ck_assert_int_eq(count_entries(path_of(".vector-memory/x-007")), 1);
	free(t);
	free(got);
}
END_TEST

START_TEST(test_apply_delete)
{
	struct vmdir_op ops[2] = {
		{.coord = {7, 3, 2}},
		{.coord = {9, 1, 4}}, /* its directory does not exist */
	};
	char msg[256] = "";

	apply1(7, 3, 2, "to delete");
	apply1(7, 3, 3, "to keep");
	ck_assert_int_eq(vmdir_apply(&vd, ops, 2, true, msg, sizeof(msg)), 0);
	ck_assert(!exists(path_of(".vector-memory/x-007/y-3-z-2.json")));
	ck_assert(exists(path_of(".vector-memory/x-007/y-3-z-3.json")));
	ck_assert(!exists(path_of(".vector-memory/x-009")));
	/* again: absent is fine; the x directory goes once empty */
	ck_assert_int_eq(vmdir_apply(&vd, ops, 2, true, msg, sizeof(msg)), 0);
	ck_assert(exists(path_of(".vector-memory/x-007")));
	apply1(7, 3, 3, NULL);
	ck_assert(!exists(path_of(".vector-memory/x-007")));
	ck_assert(exists(path_of(".vector-memory")));
	/* and comes back with the next decision there */
	apply1(7, 1, 2, "back");
	ck_assert(exists(path_of(".vector-memory/x-007/y-1-z-2.json")));
}
END_TEST

START_TEST(test_apply_bad_coordinate)
{
	struct vmdir_op op = {.coord = {1001, 1, 1}, .text = "x", .len = 1};
	char msg[256] = "";

	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_str_ne(msg, "");
	op.coord = (struct coord){1, 6, 1};
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)),
			 -EINVAL);
}
END_TEST

START_TEST(test_load_all)
{
	struct vmdir_load_report rep;
	struct loaded l = {.keep = 1};
	const struct decision *d;
	char content[64], msg[256] = "";

	for (int i = 0; i < 40; i++) {
		snprintf(content, sizeof(content), "decision %d", i);
		apply1(1 + i % 7, 1 + i % 5, 1 + i / 10, content);
	}
	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.loaded, 40);
	ck_assert_uint_eq(l.n, 40);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert_uint_eq(rep.temp_removed, 0);
	for (int i = 0; i < 40; i++) {
		snprintf(content, sizeof(content), "decision %d", i);
		d = find(&l, 1 + i % 7, 1 + i % 5, 1 + i / 10);
		ck_assert_ptr_nonnull(d);
		ck_assert_str_eq(d->content, content);
		ck_assert_str_eq(d->agent_id, "agent-1");
		ck_assert_int_eq(d->version, 1);
	}
	vmdir_load_report_done(&rep);
	loaded_free(&l);
	/* metadata.json is left alone */
	ck_assert(exists(path_of(".vector-memory/metadata.json")));
	ck_assert(!exists(qdir));
}
END_TEST

START_TEST(test_load_absent)
{
	struct vmdir_load_report rep;
	struct loaded l = {.keep = 1};

	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, NULL, 0), 0);
	ck_assert_uint_eq(rep.loaded, 0);
	ck_assert_uint_eq(l.n, 0);
	ck_assert(!exists(path_of(".vector-memory")));
	vmdir_load_report_done(&rep);
	/* NULL report and callback are allowed */
	apply1(3, 3, 3, "x");
	ck_assert_int_eq(vmdir_load(&vd, NULL, NULL, NULL, NULL, 0), 0);
}
END_TEST

START_TEST(test_load_removes_temps)
{
	struct vmdir_load_report rep;
	struct loaded l = {.keep = 1};

	apply1(5, 2, 1, "kept");
	spit(".vector-memory/x-005/.tmp-99-1-y-2-z-1.json", "{", 1);
	spit(".vector-memory/.tmp-99-2-metadata.json", "", 0);
	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, NULL, 0), 0);
	ck_assert_uint_eq(rep.temp_removed, 2);
	ck_assert_uint_eq(rep.loaded, 1);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert(!exists(
		path_of(".vector-memory/x-005/.tmp-99-1-y-2-z-1.json")));
	ck_assert(!exists(path_of(".vector-memory/.tmp-99-2-metadata.json")));
	ck_assert_int_eq(count_entries(path_of(".vector-memory/x-005")), 1);
	vmdir_load_report_done(&rep);
	loaded_free(&l);
}
END_TEST

START_TEST(test_load_callback_error)
{
	struct vmdir_load_report rep;
	struct loaded l = {.keep = 1, .fail_at = 2};
	char msg[256] = "";

	apply1(1, 1, 1, "a");
	apply1(1, 1, 2, "b");
	apply1(1, 1, 3, "c");
	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, msg, sizeof(msg)),
			 -ECANCELED);
	ck_assert_uint_eq(l.n, 1);
	ck_assert_str_ne(msg, "");
	vmdir_load_report_done(&rep);
	loaded_free(&l);
}
END_TEST

/*
 * Plant a bad entry, load, and check it was moved to the quarantine with
 * its bytes (when a file) and reported under path with a reason; the good
 * decision next to it still loads.
 */
static void expect_quarantined(const char *path, const char *bytes, size_t len,
			       int max_x)
{
	struct vmdir_load_report rep;
	struct loaded l = {.keep = 1};
	char msg[256] = "", *got;
	size_t glen;
	struct stat st;

	vd.max_x = max_x;
	ck_assert_msg(vmdir_load(&vd, load_cb, &l, &rep, msg, sizeof(msg)) == 0,
		      "%s", msg);
	ck_assert_uint_eq(rep.n_quarantined, 1);
	ck_assert_str_eq(rep.quarantined[0].path, path);
	ck_assert_str_ne(rep.quarantined[0].reason, "");
	if (getenv("VMDIR_TEST_VERBOSE"))
		fprintf(stderr, "# %s: %s -> %s\n", path,
			rep.quarantined[0].reason, rep.quarantined[0].moved_to);
	ck_assert_ptr_nonnull(strstr(rep.quarantined[0].moved_to, qdir));
	ck_assert_msg(!exists(path_of(path)), "%s still there", path);
	ck_assert_int_eq(lstat(rep.quarantined[0].moved_to, &st), 0);
	if (bytes) {
		ck_assert(S_ISREG(st.st_mode));
		got = slurp(rep.quarantined[0].moved_to, &glen);
		ck_assert_ptr_nonnull(got);
		ck_assert_uint_eq(glen, len);
		ck_assert_int_eq(memcmp(got, bytes, len), 0);
		free(got);
	}
	ck_assert_uint_eq(rep.loaded, 1);
	ck_assert_ptr_nonnull(find(&l, 5, 2, 1));
	vmdir_load_report_done(&rep);
	loaded_free(&l);
	/* a second load finds nothing more to do */
	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert_uint_eq(rep.loaded, 1);
	vmdir_load_report_done(&rep);
	loaded_free(&l);
}

START_TEST(test_quarantine_empty)
{
	apply1(5, 2, 1, "good");
	spit(".vector-memory/x-005/y-1-z-2.json", "", 0);
	expect_quarantined(".vector-memory/x-005/y-1-z-2.json", "", 0, 1000);
}
END_TEST

START_TEST(test_quarantine_truncated)
{
	char *t;
	size_t len;

	apply1(5, 2, 1, "good");
	t = text_of(5, 1, 2, "truncated", &len);
	spit(".vector-memory/x-005/y-1-z-2.json", t, len / 2);
	expect_quarantined(".vector-memory/x-005/y-1-z-2.json", t, len / 2,
			   1000);
	free(t);
}
END_TEST

START_TEST(test_quarantine_bad_utf8)
{
	char *t, *p;
	size_t len;

	apply1(5, 2, 1, "good");
	t = text_of(5, 1, 2, "caf\xc3\xa9 menu", &len);
	p = strstr(t, "\xc3\xa9");
	ck_assert_ptr_nonnull(p);
	p[0] = (char)0xff;
	spit(".vector-memory/x-005/y-1-z-2.json", t, len);
	expect_quarantined(".vector-memory/x-005/y-1-z-2.json", t, len, 1000);
	free(t);
}
END_TEST

START_TEST(test_quarantine_coordinate_mismatch)
{
	char *t;
	size_t len;

	apply1(5, 2, 1, "good");
	t = text_of(5, 2, 2, "lives at z=2", &len);
	spit(".vector-memory/x-005/y-2-z-3.json", t, len);
	expect_quarantined(".vector-memory/x-005/y-2-z-3.json", t, len, 1000);
	free(t);
}
END_TEST

START_TEST(test_quarantine_wrong_x_dir_for_file)
{
	char *t;
	size_t len;

	apply1(5, 2, 1, "good");
	apply1(6, 2, 1, "other");
	/* a valid (6,2,1) record inside x-005 under a name x-005 expects */
	t = text_of(6, 2, 2, "wrong directory", &len);
	spit(".vector-memory/x-005/y-2-z-2.json", t, len);
	apply1(6, 2, 1, NULL);
	expect_quarantined(".vector-memory/x-005/y-2-z-2.json", t, len, 1000);
	free(t);
}
END_TEST

START_TEST(test_quarantine_unknown_names)
{
	apply1(5, 2, 1, "good");
	spit(".vector-memory/x-005/notes.txt", "hello", 5);
	expect_quarantined(".vector-memory/x-005/notes.txt", "hello", 5, 1000);
	spit(".vector-memory/x-005/y-02-z-1.json", "{}", 2);
	expect_quarantined(".vector-memory/x-005/y-02-z-1.json", "{}", 2, 1000);
	spit(".vector-memory/README", "r", 1);
	expect_quarantined(".vector-memory/README", "r", 1, 1000);
}
END_TEST

START_TEST(test_quarantine_wrong_dir_name)
{
	char *t, *got, moved[4200];
	size_t len, glen;
	struct vmdir_load_report rep;

	apply1(5, 2, 1, "good");
	ck_assert_int_eq(mkdir(path_of(".vector-memory/x-5"), 0755), 0);
	t = text_of(5, 2, 2, "in x-5", &len);
	spit(".vector-memory/x-5/y-2-z-2.json", t, len);
	ck_assert_int_eq(vmdir_load(&vd, NULL, NULL, &rep, NULL, 0), 0);
	ck_assert_uint_eq(rep.n_quarantined, 1);
	ck_assert_str_eq(rep.quarantined[0].path, ".vector-memory/x-5");
	ck_assert(!exists(path_of(".vector-memory/x-5")));
	snprintf(moved, sizeof(moved), "%s/y-2-z-2.json",
		 rep.quarantined[0].moved_to);
	got = slurp(moved, &glen);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(glen, len);
	ck_assert_int_eq(memcmp(got, t, len), 0);
	free(got);
	free(t);
	vmdir_load_report_done(&rep);
}
END_TEST

/* Decisions beyond a smaller max_x stop the load; nothing moves. */
START_TEST(test_x_beyond_max_refused)
{
	struct vmdir_load_report rep;
	struct loaded l = {.keep = 1};
	char msg[256] = "";

	apply1(5, 2, 1, "good");
	apply1(11, 1, 1, "beyond ten");
	vd.max_x = 10;
	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, msg, sizeof(msg)),
			 -ERANGE);
	ck_assert_ptr_nonnull(strstr(msg, "max_x 11"));
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert(exists(path_of(".vector-memory/x-011/y-1-z-1.json")));
	vmdir_load_report_done(&rep);
	loaded_free(&l);
}
END_TEST

START_TEST(test_quarantine_symlink_inside)
{
	char *t, target[256];
	size_t len;
	struct stat st;

	apply1(5, 2, 1, "good");
	t = text_of(5, 3, 1, "outside", &len);
	snprintf(target, sizeof(target), "%s/outside.json", tmpdir);
	{
		FILE *f = fopen(target, "wb");

		ck_assert_ptr_nonnull(f);
		fwrite(t, 1, len, f);
		fclose(f);
	}
	ck_assert_int_eq(
		symlink(target, path_of(".vector-memory/x-005/y-3-z-1.json")),
		0);
	expect_quarantined(".vector-memory/x-005/y-3-z-1.json", NULL, 0, 1000);
	/* the target was not touched */
	ck_assert_int_eq(stat(target, &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)len);
	free(t);
}
END_TEST

/* A quarantine on another file system: files copied, directories walked. */
START_TEST(test_quarantine_cross_device)
{
	char shm[] = "/dev/shm/vmem-test-q-XXXXXX", q[64], moved[4200];
	char *t, *got, target[512];
	size_t len, glen;
	struct vmdir_load_report rep;
	struct statedir shm_sd;
	struct stat a, b;
	ssize_t n;

	if (stat("/dev/shm", &a) < 0 || stat(tmpdir, &b) < 0 ||
	    a.st_dev == b.st_dev || !mkdtemp(shm))
		return; /* no second file system here */
	ck_assert_int_eq(statedir_init(&shm_sd, shm, NULL, 0, NULL, 0), 0);
	snprintf(q, sizeof(q), "%s/vmem/quarantine", shm);
	vmdir_done(&vd);
	ck_assert_int_eq(vmdir_init(&vd, root, &shm_sd, 1000), 0);
	apply1(5, 2, 1, "good");
	t = text_of(5, 2, 2, "x", &len);
	spit(".vector-memory/x-005/y-2-z-2.json", t, len / 3);
	ck_assert_int_eq(mkdir(path_of(".vector-memory/x-5"), 0755), 0);
	spit(".vector-memory/x-5/y-2-z-2.json", t, len);
	ck_assert_int_eq(
		symlink("y-2-z-2.json", path_of(".vector-memory/x-5/link")), 0);
	ck_assert_int_eq(vmdir_load(&vd, NULL, NULL, &rep, NULL, 0), 0);
	ck_assert_uint_eq(rep.n_quarantined, 2);
	ck_assert_uint_eq(rep.loaded, 1);
	ck_assert(!exists(path_of(".vector-memory/x-5")));
	ck_assert(!exists(path_of(".vector-memory/x-005/y-2-z-2.json")));
	for (size_t i = 0; i < 2; i++) {
		struct vmdir_quarantined *e = &rep.quarantined[i];

		ck_assert_ptr_nonnull(strstr(e->moved_to, q));
		if (!strcmp(e->path, ".vector-memory/x-5")) {
			snprintf(moved, sizeof(moved), "%s/y-2-z-2.json",
				 e->moved_to);
			got = slurp(moved, &glen);
			ck_assert_ptr_nonnull(got);
			ck_assert_uint_eq(glen, len);
			free(got);
			snprintf(moved, sizeof(moved), "%s/link", e->moved_to);
			n = readlink(moved, target, sizeof(target) - 1);
			ck_assert_int_eq(n, 12);
		} else {
			ck_assert_str_eq(e->path,
					 ".vector-memory/x-005/y-2-z-2.json");
			got = slurp(e->moved_to, &glen);
			ck_assert_ptr_nonnull(got);
			ck_assert_uint_eq(glen, len / 3);
			ck_assert_int_eq(memcmp(got, t, glen), 0);
			free(got);
		}
	}
	vmdir_load_report_done(&rep);
	free(t);
	vmdir_done(&vd); /* before shm_sd goes; teardown's call is a no-op */
	statedir_done(&shm_sd);
	nftw(shm, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

START_TEST(test_quarantine_symlinked_x_dir)
{
	char other[256], msg[256] = "";
	struct vmdir_op op = {.coord = {9, 1, 1}, .text = "x", .len = 1};

	apply1(5, 2, 1, "good");
	snprintf(other, sizeof(other), "%s/elsewhere", tmpdir);
	ck_assert_int_eq(mkdir(other, 0755), 0);
	ck_assert_int_eq(symlink(other, path_of(".vector-memory/x-009")), 0);
	/* apply refuses to write through it */
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)),
			 -ELOOP);
	ck_assert_ptr_nonnull(strstr(msg, "x-009"));
	ck_assert_int_eq(count_entries(other), 0);
	/* load moves it away */
	expect_quarantined(".vector-memory/x-009", NULL, 0, 1000);
	ck_assert_int_eq(count_entries(other), 0);
}
END_TEST

START_TEST(test_vmdir_symlink_refused)
{
	char other[256], msg[256] = "";
	struct vmdir_load_report rep;
	struct vmdir_op op = {.coord = {1, 1, 1}, .text = "x", .len = 1};

	snprintf(other, sizeof(other), "%s/elsewhere", tmpdir);
	ck_assert_int_eq(mkdir(other, 0755), 0);
	ck_assert_int_eq(symlink(other, path_of(".vector-memory")), 0);
	ck_assert_int_eq(vmdir_load(&vd, NULL, NULL, &rep, msg, sizeof(msg)),
			 -ELOOP);
	ck_assert_ptr_nonnull(strstr(msg, "symbolic link"));
	vmdir_load_report_done(&rep);
	msg[0] = '\0';
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)),
			 -ELOOP);
	ck_assert_str_ne(msg, "");
	ck_assert_int_eq(count_entries(other), 0);
	ck_assert(exists(path_of(".vector-memory")));
}
END_TEST

START_TEST(test_vmdir_not_a_directory)
{
	char msg[256] = "";
	struct vmdir_load_report rep;
	struct vmdir_op op = {.coord = {1, 1, 1}, .text = "x", .len = 1};

	spit(".vector-memory", "file", 4);
	ck_assert_int_eq(vmdir_load(&vd, NULL, NULL, &rep, msg, sizeof(msg)),
			 -ENOTDIR);
	vmdir_load_report_done(&rep);
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)),
			 -ENOTDIR);
}
END_TEST

START_TEST(test_apply_read_only_fails)
{
	char msg[256] = "";
	struct vmdir_op op = {.coord = {4, 1, 1}, .text = "x", .len = 1};

	if (geteuid() == 0)
		return; /* root ignores permissions */
	apply1(5, 2, 1, "good");
	ck_assert_int_eq(chmod(path_of(".vector-memory/x-005"), 0555), 0);
	op.coord = (struct coord){5, 2, 2};
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, true, msg, sizeof(msg)),
			 -EACCES);
	ck_assert_ptr_nonnull(strstr(msg, "x-005/y-2-z-2.json"));
	ck_assert_int_eq(chmod(path_of(".vector-memory/x-005"), 0755), 0);
	ck_assert_int_eq(count_entries(path_of(".vector-memory/x-005")), 1);
}
END_TEST

/* Start-up cost: 20,000 files (written without fsync to keep it quick). */
START_TEST(test_load_20000)
{
	struct vmdir_load_report rep;
	struct loaded l = {0};
	struct timespec a, b;
	char rel[128], *t;
	size_t len;
	int n = 0;

	apply1(1, 1, 1, "seed");
	for (int x = 1; x <= 1000 && n < 20000; x++) {
		snprintf(rel, sizeof(rel), ".vector-memory/x-%03d", x);
		mkdir(path_of(rel), 0755);
		for (int y = 1; y <= 5; y++) {
			for (int z = 1; z <= 4; z++, n++) {
				t = text_of(x, y, z,
					    "A decision of a typical size, "
					    "about one line of prose.",
					    &len);
				snprintf(rel, sizeof(rel),
					 ".vector-memory/x-%03d/y-%d-z-%d.json",
					 x, y, z);
				spit(rel, t, len);
				free(t);
			}
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	ck_assert_int_eq(vmdir_load(&vd, load_cb, &l, &rep, NULL, 0), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	ck_assert_uint_eq(rep.loaded, 20000);
	ck_assert_uint_eq(l.count, 20000);
	fprintf(stderr, "# vmdir_load of 20000 files: %.1f ms\n",
		(double)(b.tv_sec - a.tv_sec) * 1e3 +
			(double)(b.tv_nsec - a.tv_nsec) / 1e6);
	vmdir_load_report_done(&rep);
}
END_TEST

/* Stamps a rescan compares against: the ones load reported. */
static struct vmdir_stamp stamps[4];
static int stamp_calls;

static int stamp_cb(void *ctx, struct decision *d,
		    const struct vmdir_stamp *stamp)
{
	(void)ctx;
	stamps[d->coord.x] = *stamp;
	stamp_calls++;
	decision_done(d);
	return 0;
}

static int known_calls;

static bool known_cb(void *ctx, const struct coord *c,
		     const struct vmdir_stamp *stamp)
{
	(void)ctx;
	known_calls++;
	return memcmp(&stamps[c->x], stamp, sizeof(*stamp)) == 0;
}

static const struct vmdir_scan_hooks rescan_hooks = {
	.loaded = stamp_cb,
	.known = known_cb,
};

/* A rescan reads only the files whose stamp changed. */
START_TEST(test_rescan_reads_only_changed_files)
{
	struct vmdir_op op = {.coord = {1, 1, 2}};
	char msg[256] = "";
	char *t;

	apply1(1, 1, 1, "one");
	apply1(2, 1, 1, "two");
	apply1(3, 1, 1, "three");
	ck_assert_int_eq(
		vmdir_load(&vd, stamp_cb, NULL, NULL, msg, sizeof(msg)), 0);
	ck_assert_int_eq(stamp_calls, 3);
	stamp_calls = 0;
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    NULL, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(stamp_calls, 0);
	/* rewrite (2, 1, 1); the stamp vmdir_apply reports is what a
	 * rescan then finds */
	t = text_of(2, 1, 1, "two, again", &op.len);
	op.coord = (struct coord){2, 1, 1};
	op.text = t;
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, false, msg, sizeof(msg)), 0);
	free(t);
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    NULL, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(stamp_calls, 1);
	ck_assert_mem_eq(&stamps[2], &op.stamp, sizeof(op.stamp));
	stamp_calls = 0;
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    NULL, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(stamp_calls, 0);
}
END_TEST

/* When set, the next rename into place is followed at once by this text
 * written over the file in place (a user's editor between the writer's
 * rename and its look at what it wrote). */
static const char *meddle_text;

int renameat(int olddirfd, const char *oldpath, int newdirfd,
	     const char *newpath)
{
	int rc = (int)syscall(SYS_renameat, olddirfd, oldpath, newdirfd,
			      newpath);
	const char *text = meddle_text;

	if (rc == 0 && text) {
		int fd = openat(newdirfd, newpath, O_WRONLY | O_TRUNC);

		meddle_text = NULL;
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, text, strlen(text)),
				 (ssize_t)strlen(text));
		close(fd);
	}
	return rc;
}

/* Someone's write over a file right after the writer renamed it into
 * place is not taken for ours: the next rescan reads the file. */
START_TEST(test_write_after_rename_is_theirs)
{
	static const char markers[] = "<<<<<<< HEAD\n{}\n=======\n{}\n"
				      ">>>>>>> other\n";
	struct vmdir_op op = {.coord = {2, 1, 1}};
	struct vmdir_load_report rep;
	char msg[256] = "";
	char *t;

	apply1(2, 1, 1, "two");
	ck_assert_int_eq(
		vmdir_load(&vd, stamp_cb, NULL, NULL, msg, sizeof(msg)), 0);
	t = text_of(2, 1, 1, "two, again", &op.len);
	op.text = t;
	meddle_text = markers;
	ck_assert_int_eq(vmdir_apply(&vd, &op, 1, false, msg, sizeof(msg)), 0);
	free(t);
	ck_assert_ptr_null(meddle_text);
	stamps[2] = op.stamp;
	stamp_calls = 0;
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    &rep, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.n_conflicted, 1);
	ck_assert_int_eq(stamp_calls, 0);
	vmdir_load_report_done(&rep);
}
END_TEST

/* A rescan runs beside the file writer: it leaves the temporary files
 * of this process (writes in progress) and removes others' leftovers;
 * the start-up load removes both. */
START_TEST(test_rescan_leaves_our_temps)
{
	struct vmdir_load_report rep;
	char ours[128], rel[160], msg[256] = "";

	apply1(1, 1, 1, "one");
	snprintf(ours, sizeof(ours), ".tmp-%ld-7-y-1-z-2.json", (long)getpid());
	snprintf(rel, sizeof(rel), ".vector-memory/x-001/%s", ours);
	spit(rel, "{", 1);
	spit(".vector-memory/x-001/.tmp-99-1-y-1-z-3.json", "{", 1);
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    &rep, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.temp_removed, 1);
	ck_assert(exists(path_of(rel)));
	ck_assert(!exists(
		path_of(".vector-memory/x-001/.tmp-99-1-y-1-z-3.json")));
	vmdir_load_report_done(&rep);
	ck_assert_int_eq(vmdir_load(&vd, NULL, NULL, &rep, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.temp_removed, 1);
	ck_assert(!exists(path_of(rel)));
	vmdir_load_report_done(&rep);
}
END_TEST

/* Directory stamps as a probe's caller keeps them: the settled ones. */
static struct vmdir_stamp dirstamps[4];
static bool dir_settled[4];
static int dir_calls;

static bool dir_cb(void *ctx, int x, const struct vmdir_stamp *stamp,
		   bool settled)
{
	bool known = dirstamps[x].ino != 0 &&
		     memcmp(&dirstamps[x], stamp, sizeof(*stamp)) == 0;

	(void)ctx;
	dir_calls++;
	dir_settled[x] = settled;
	dirstamps[x] = settled ? *stamp : (struct vmdir_stamp){0};
	return known;
}

/* Scan with the directory hook; the counts of calls start from zero. */
static int scan_dirs(enum vmdir_scan_mode mode,
		     const struct unmerged_set *unmerged,
		     struct vmdir_load_report *rep)
{
	static const struct vmdir_scan_hooks hooks = {
		.loaded = stamp_cb,
		.known = known_cb,
		.dir = dir_cb,
	};
	char msg[256] = "";
	int rc;

	dir_calls = known_calls = stamp_calls = 0;
	rc = vmdir_scan(&vd, mode, &hooks, unmerged, rep, msg, sizeof(msg));
	ck_assert_msg(rc == 0, "%s", msg);
	return rc;
}

/* A probe skips the directories that kept their stamp: git writes a file
 * by removing it and creating it anew, which a directory's stamp shows;
 * an edit in place does not, and only a reload (or a probe of every
 * file) sees it. Reloads, directories that moved a moment ago, and a tree
 * with unmerged files are looked at file by file. */
START_TEST(test_probe_skips_directories_nobody_moved)
{
	const char *two = ".vector-memory/x-002/y-1-z-1.json";
	const char *three = ".vector-memory/x-003/y-1-z-1.json";
	struct unmerged_entry u = {.coord = {1, 1, 1}, .stages = 6};
	const struct unmerged_set unmerged = {.e = &u, .n = 1};
	struct vmdir_load_report rep;
	char msg[256] = "";
	size_t len;
	char *t;
	int fd;

	apply1(1, 1, 1, "one");
	apply1(2, 1, 1, "two");
	apply1(3, 1, 1, "three");
	ck_assert_int_eq(
		vmdir_load(&vd, stamp_cb, NULL, NULL, msg, sizeof(msg)), 0);
	memset(dirstamps, 0, sizeof(dirstamps));
	vd.settled_ns = 0; /* every stamp settled at once */

	/* the first look knows no directory: every file is looked at */
	scan_dirs(VMDIR_PROBE, NULL, NULL);
	ck_assert_int_eq(dir_calls, 3);
	ck_assert_int_eq(known_calls, 3);
	ck_assert(dir_settled[1] && dir_settled[2] && dir_settled[3]);
	/* nothing moved since: no file is */
	scan_dirs(VMDIR_PROBE, NULL, NULL);
	ck_assert_int_eq(dir_calls, 3);
	ck_assert_int_eq(known_calls, 0);
	/* a reload looks at every file whatever the hook says */
	scan_dirs(VMDIR_RELOAD, NULL, NULL);
	ck_assert_int_eq(known_calls, 3);

	/* git's way in x-002, an edit in place in x-003 */
	ck_assert_int_eq(unlink(path_of(two)), 0);
	t = text_of(2, 1, 1, "two, from git", &len);
	spit(two, t, len);
	free(t);
	t = text_of(3, 1, 1, "three, edited", &len);
	fd = open(path_of(three), O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, t, len), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
	free(t);
	scan_dirs(VMDIR_PROBE, NULL, NULL);
	ck_assert_int_eq(known_calls, 1);
	ck_assert_int_eq(stamp_calls, 1); /* x-002's file read */
	scan_dirs(VMDIR_PROBE, NULL, NULL);
	ck_assert_int_eq(stamp_calls, 0);
	scan_dirs(VMDIR_RELOAD, NULL, NULL);
	ck_assert_int_eq(stamp_calls, 1); /* x-003's file read */

	/* git's unmerged files are reported wherever they are */
	scan_dirs(VMDIR_PROBE, &unmerged, &rep);
	ck_assert_uint_eq(rep.n_conflicted, 1);
	ck_assert_int_eq(known_calls, 2);
	vmdir_load_report_done(&rep);

	/* a directory that moved within settled_ns is not settled, and a
	 * stamp that is not is never trusted */
	vd.settled_ns = 3600LL * 1000000000;
	scan_dirs(VMDIR_PROBE, NULL, NULL);
	ck_assert(!dir_settled[1] && !dir_settled[2] && !dir_settled[3]);
	ck_assert_int_eq(known_calls, 0); /* the stamps kept were settled */
	scan_dirs(VMDIR_PROBE, NULL, NULL);
	ck_assert_int_eq(known_calls, 3);
	vd.settled_ns = VMDIR_SETTLED_NS;
}
END_TEST

static bool git_has_tree;

static bool tree_interrupt(void *ctx, bool thorough)
{
	(void)ctx;
	ck_assert(thorough); /* a scan always looks thoroughly */
	return git_has_tree;
}

/* A probe only looks: what a reload would quarantine (an empty file, as
 * git leaves one for a moment while it writes) and others' temporary
 * files stay where they are, counted; a reload while git has the tree
 * moves nothing either (-EAGAIN), and once git is done it quarantines. */
START_TEST(test_probe_and_reload_beside_git)
{
	struct vmdir_load_report rep;
	const char *empty = ".vector-memory/x-001/y-1-z-2.json";
	const char *temp = ".vector-memory/x-001/.tmp-99-1-y-1-z-3.json";
	char msg[256] = "";

	apply1(1, 1, 1, "one");
	spit(empty, "", 0);
	spit(temp, "{", 1);
	vd.interrupt = tree_interrupt;
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_PROBE, &rescan_hooks, NULL, &rep,
				    msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.unusable, 1);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert_uint_eq(rep.temp_removed, 0);
	ck_assert(exists(path_of(empty)));
	ck_assert(exists(path_of(temp)));
	vmdir_load_report_done(&rep);

	git_has_tree = true;
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    &rep, msg, sizeof(msg)),
			 -EAGAIN);
	ck_assert_msg(strstr(msg, "git took the working tree"), "%s", msg);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert(exists(path_of(empty)));
	vmdir_load_report_done(&rep);

	git_has_tree = false;
	ck_assert_int_eq(vmdir_scan(&vd, VMDIR_RELOAD, &rescan_hooks, NULL,
				    &rep, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rep.n_quarantined, 1);
	ck_assert_uint_eq(rep.unusable, 0);
	ck_assert(!exists(path_of(empty)));
	ck_assert(!exists(path_of(temp)));
	vmdir_load_report_done(&rep);
	vd.interrupt = NULL;
}
END_TEST

/* ---- racy git: files dated a second before their write ---- */

static int64_t ns_of(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static struct stat stat_of(const char *rel)
{
	struct stat st;

	ck_assert_int_eq(lstat(path_of(rel), &st), 0);
	return st;
}

/* Write (x, y, z) with the given knowledge of its last change; its op's
 * stamp back. */
static struct vmdir_stamp write_known(int x, int y, int z, const char *content,
				      int64_t changed_ns)
{
	struct vmdir_op op = {.coord = {x, y, z}, .changed_ns = changed_ns};
	char msg[256] = "";
	char *t = NULL;

	if (content) {
		t = text_of(x, y, z, content, &op.len);
		op.text = t;
	}
	ck_assert_msg(vmdir_apply(&vd, &op, 1, false, msg, sizeof(msg)) == 0,
		      "%s", msg);
	free(t);
	return op.stamp;
}

/* A back-dated file: its mtime is a whole second before its write (the
 * ctime, which the rename sets, comes after the write). */
static bool backdated(const struct stat *st)
{
	return ns_of(&st->st_ctim) - ns_of(&st->st_mtim) >= 1000000000;
}

/* Wait until the ctime of rel is two seconds old as the file system's
 * clock goes (a condition, not a measurement): file times come from the
 * kernel's coarse clock, which may stand a tick behind CLOCK_REALTIME
 * across a second's boundary, hence one more second here. */
static void age(const char *rel)
{
	struct stat st = stat_of(rel);
	struct timespec now;

	for (;;) {
		clock_gettime(CLOCK_REALTIME, &now);
		if (now.tv_sec - st.st_ctim.tv_sec >= 3)
			return;
		usleep(50000);
	}
}

START_TEST(test_backdate_new_file)
{
	const char *rel = ".vector-memory/x-005/y-2-z-1.json";
	struct vmdir_stamp s;
	struct stat st;

	vd.started_ns = 0; /* started long ago */
	s = write_known(5, 2, 1, "one", 0);
	st = stat_of(rel);
	ck_assert(backdated(&st));
	/* the stamp reported is the file's, date included */
	ck_assert_int_eq(s.mtime_ns, ns_of(&st.st_mtim));
	ck_assert_int_eq(s.ctime_ns, ns_of(&st.st_ctim));
	/* the content is what was written */
	{
		size_t tlen;
		char *t = text_of(5, 2, 1, "one", &tlen), *got;

		got = slurp(path_of(rel), NULL);
		ck_assert_str_eq(got, t);
		free(got);
		free(t);
	}
}
END_TEST

/* A path changed in the last two seconds is not back-dated again: no two
 * versions of it share a back-dated second, and its dates only grow. */
START_TEST(test_backdate_not_twice)
{
	const char *rel = ".vector-memory/x-005/y-2-z-1.json";
	struct stat first, second, third;

	vd.started_ns = 0;
	write_known(5, 2, 1, "one", 0);
	first = stat_of(rel);
	ck_assert(backdated(&first));
	write_known(5, 2, 1, "two", 0);
	second = stat_of(rel);
	ck_assert(!backdated(&second));
	ck_assert_int_gt(second.st_mtim.tv_sec, first.st_mtim.tv_sec);
	/* two seconds on, it is back-dated again, still after the last */
	age(rel);
	write_known(5, 2, 1, "three", 0);
	third = stat_of(rel);
	ck_assert(backdated(&third));
	ck_assert_int_gt(third.st_mtim.tv_sec, second.st_mtim.tv_sec);
}
END_TEST

/* A file written where one was removed in the last two seconds is not
 * back-dated: the removal's time comes back in its stamp; our start
 * counts as a change of every path. */
START_TEST(test_backdate_after_removal)
{
	const char *rel = ".vector-memory/x-005/y-2-z-1.json";
	struct vmdir_stamp gone;
	struct stat st;

	vd.started_ns = 0;
	write_known(5, 2, 1, "one", 0);
	gone = write_known(5, 2, 1, NULL, 0);
	ck_assert(!exists(path_of(rel)));
	ck_assert_int_eq(gone.ino, 0);
	ck_assert_int_gt(gone.ctime_ns, 0);
	write_known(5, 2, 1, "two", gone.ctime_ns);
	st = stat_of(rel);
	ck_assert(!backdated(&st));
	/* a file the caller believed present, found gone: removed at a
	 * time nobody knows */
	age(rel);
	ck_assert_int_eq(unlink(path_of(rel)), 0);
	write_known(5, 2, 1, "three", VMDIR_CHANGED_UNKNOWN);
	st = stat_of(rel);
	ck_assert(!backdated(&st));
	/* unknown removals: a daemon that started just now waits too */
	vd.started_ns = ns_of(&st.st_ctim);
	write_known(6, 2, 1, "new", 0);
	st = stat_of(".vector-memory/x-006/y-2-z-1.json");
	ck_assert(!backdated(&st));
}
END_TEST

static Suite *vmdir_suite(void)
{
	Suite *s = suite_create("vmdir");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_apply_layout);
	tcase_add_test(tc, test_apply_many_ops_and_umask);
	tcase_add_test(tc, test_apply_overwrite);
	tcase_add_test(tc, test_apply_delete);
	tcase_add_test(tc, test_apply_more_directories_than_open_files);
	tcase_add_test(tc, test_apply_interrupted);
	tcase_add_test(tc, test_apply_bad_coordinate);
	tcase_add_test(tc, test_load_all);
	tcase_add_test(tc, test_load_absent);
	tcase_add_test(tc, test_load_removes_temps);
	tcase_add_test(tc, test_rescan_leaves_our_temps);
	tcase_add_test(tc, test_probe_and_reload_beside_git);
	tcase_add_test(tc, test_load_callback_error);
	tcase_add_test(tc, test_quarantine_empty);
	tcase_add_test(tc, test_quarantine_truncated);
	tcase_add_test(tc, test_quarantine_bad_utf8);
	tcase_add_test(tc, test_quarantine_coordinate_mismatch);
	tcase_add_test(tc, test_quarantine_wrong_x_dir_for_file);
	tcase_add_test(tc, test_quarantine_unknown_names);
	tcase_add_test(tc, test_quarantine_wrong_dir_name);
	tcase_add_test(tc, test_x_beyond_max_refused);
	tcase_add_test(tc, test_rescan_reads_only_changed_files);
	tcase_add_test(tc, test_write_after_rename_is_theirs);
	tcase_add_test(tc, test_quarantine_symlink_inside);
	tcase_add_test(tc, test_quarantine_symlinked_x_dir);
	tcase_add_test(tc, test_quarantine_cross_device);
	tcase_add_test(tc, test_vmdir_symlink_refused);
	tcase_add_test(tc, test_vmdir_not_a_directory);
	tcase_add_test(tc, test_apply_read_only_fails);
	tcase_add_test(tc, test_load_20000);
	tcase_add_test(tc, test_backdate_new_file);
	tcase_add_test(tc, test_backdate_not_twice);
	tcase_add_test(tc, test_backdate_after_removal);
	tcase_add_test(tc, test_probe_skips_directories_nobody_moved);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(vmdir_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

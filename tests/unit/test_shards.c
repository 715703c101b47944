/*
 * Unit tests of daemon/git/shards.c: appends (directories made, a torn
 * last line cut or ended, dedupe), scans (bad lines taken out into
 * quarantine with the good ones kept, bad entries moved, known shards
 * not read, probes), on real temporary directories.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_suite.h"
#include "shards.h"

static char tmp[200], tree[300], gitdir[300];
static struct statedir sd;
static struct shards sh;

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/vmem-shards-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(tree, sizeof(tree), "%s/tree", tmp);
	snprintf(gitdir, sizeof(gitdir), "%s/git", tmp);
	ck_assert_int_eq(mkdir(tree, 0700), 0);
	ck_assert_int_eq(mkdir(gitdir, 0700), 0);
	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(shards_init(&sh, tree, &sd), 0);
}

static void teardown(void)
{
	char cmd[300];

	shards_done(&sh);
	statedir_done(&sd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

static void path_of(const char *rel, char *out, size_t n)
{
	snprintf(out, n, "%s/.vector-memory/experiences/%s", tree, rel);
}

/* The file's bytes ("" when absent: then *exists false). */
static char *slurp(const char *rel, bool *exists)
{
	char path[600];
	static char buf[65536];
	FILE *f;
	size_t n;

	path_of(rel, path, sizeof(path));
	f = fopen(path, "r");
	if (exists)
		*exists = f != NULL;
	if (!f) {
		buf[0] = '\0';
		return buf;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void spit(const char *rel, const char *text)
{
	char path[600], dir[700];
	FILE *f;

	path_of(rel, path, sizeof(path));
	snprintf(dir, sizeof(dir), "mkdir -p \"$(dirname '%s')\"", path);
	ck_assert_int_eq(system(dir), 0);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static int append(const char *path, const char *data, bool dedupe)
{
	struct shard_append op = {
		.path = path, .data = data, .len = strlen(data)};
	char msg[512] = "";
	int rc = shards_append(&sh, &op, 1, dedupe, true, msg, sizeof(msg));

	ck_assert_int_eq(op.rc, rc);
	return rc;
}

/* A valid record line of agent a with this context. */
static const char *rec(const char *id_tail, const char *ctx)
{
	static char line[512];

	snprintf(
		line, sizeof(line),
		"{\"id\":\"01943c3c-b93b-774b-8102-0304050607%s\",\"agent_id\":"
		"\"a\",\"context\":\"%s\",\"action\":\"x\",\"outcome\":\"y\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,\"tags\":[],\"metadata\":{}}",
		id_tail, ctx);
	return line;
}

START_TEST(test_append_creates)
{
	char expect[2048];

	ck_assert_int_eq(append("a/2025-01-06.jsonl", "one\ntwo\n", false), 0);
	ck_assert_int_eq(append("a/2025-01-06.jsonl", "three\n", false), 0);
	ck_assert_str_eq(slurp("a/2025-01-06.jsonl", NULL),
			 "one\ntwo\nthree\n");
	ck_assert_int_eq(append("~YSBi/2025-01-07.jsonl", "x\n", false), 0);
	ck_assert_str_eq(slurp("~YSBi/2025-01-07.jsonl", NULL), "x\n");
	/* Paths that are not shards are refused. */
	ck_assert_int_eq(append("a/notes.txt", "x\n", false), -EINVAL);
	ck_assert_int_eq(append("nodir.jsonl", "x\n", false), -EINVAL);
	snprintf(expect, sizeof(expect), "%s", "one\ntwo\nthree\n");
	ck_assert_str_eq(slurp("a/2025-01-06.jsonl", NULL), expect);
}
END_TEST

/* A torn last line that begins a line being appended is cut (the log
 * completes it); one that does not is ended with a newline. */
START_TEST(test_torn_tail)
{
	spit("a/2025-01-06.jsonl", "first\nsec");
	ck_assert_int_eq(append("a/2025-01-06.jsonl", "second\nthird\n", false),
			 0);
	ck_assert_str_eq(slurp("a/2025-01-06.jsonl", NULL),
			 "first\nsecond\nthird\n");
	spit("a/2025-01-07.jsonl", "first\nforeign");
	ck_assert_int_eq(append("a/2025-01-07.jsonl", "second\n", false), 0);
	ck_assert_str_eq(slurp("a/2025-01-07.jsonl", NULL),
			 "first\nforeign\nsecond\n");
	/* A file of one torn line. */
	spit("a/2025-01-08.jsonl", "{\"id\"");
	ck_assert_int_eq(append("a/2025-01-08.jsonl", "{\"id\":1}\n", false),
			 0);
	ck_assert_str_eq(slurp("a/2025-01-08.jsonl", NULL), "{\"id\":1}\n");
}
END_TEST

/* With dedupe (the replay), lines the shard holds are not appended
 * again: a crash after the append, before the log was cut. */
START_TEST(test_dedupe)
{
	spit("a/2025-01-06.jsonl", "l1\nl2\nl3");
	ck_assert_int_eq(append("a/2025-01-06.jsonl", "l2\nl3\nl4\n", true), 0);
	ck_assert_str_eq(slurp("a/2025-01-06.jsonl", NULL), "l1\nl2\nl3\nl4\n");
	ck_assert_int_eq(append("a/2025-01-06.jsonl", "l1\nl4\n", true), 0);
	ck_assert_str_eq(slurp("a/2025-01-06.jsonl", NULL), "l1\nl2\nl3\nl4\n");
	ck_assert_int_eq(append("a/2025-01-06.jsonl", "l1\nl4\n", false), 0);
	ck_assert_str_eq(slurp("a/2025-01-06.jsonl", NULL),
			 "l1\nl2\nl3\nl4\nl1\nl4\n");
}
END_TEST

/* A symlinked segment directory or shard is refused, never followed. */
START_TEST(test_append_symlink)
{
	char path[600], target[600];

	snprintf(target, sizeof(target), "%s/elsewhere", tmp);
	ck_assert_int_eq(mkdir(target, 0700), 0);
	ck_assert_int_eq(append("b/2025-01-06.jsonl", "x\n", false), 0);
	path_of("a", path, sizeof(path));
	ck_assert_int_eq(symlink(target, path), 0);
	ck_assert_int_eq(append("a/2025-01-06.jsonl", "x\n", false), -ELOOP);
	path_of("b/2025-01-07.jsonl", path, sizeof(path));
	snprintf(target, sizeof(target), "%s/elsewhere/f", tmp);
	ck_assert_int_eq(symlink(target, path), 0);
	ck_assert_int_ne(append("b/2025-01-07.jsonl", "x\n", false), 0);
	ck_assert_int_ne(access(target, F_OK), 0);
}
END_TEST

/* What a scan saw. */
struct seen {
	char shards[16][80];
	struct vmdir_stamp stamps[16];
	size_t n_shards;
	size_t n_lines, n_tombs;
	const char *known_path; /* known with known_stamp */
	struct vmdir_stamp known_stamp;
};

static bool known_cb(void *ctx, const char *path, const struct vmdir_stamp *st)
{
	struct seen *s = ctx;

	return s->known_path && !strcmp(path, s->known_path) &&
	       st->ino == s->known_stamp.ino && st->size == s->known_stamp.size;
}

static int line_cb(void *ctx, struct exp_line *l, const char *raw, size_t len)
{
	struct seen *s = ctx;

	(void)raw;
	(void)len;
	if (l->is_tombstone)
		s->n_tombs++;
	else
		s->n_lines++;
	exp_line_done(l);
	return 0;
}

static int shard_cb(void *ctx, const char *path, const struct vmdir_stamp *st)
{
	struct seen *s = ctx;

	ck_assert_uint_lt(s->n_shards, 16);
	snprintf(s->shards[s->n_shards], sizeof(s->shards[0]), "%s", path);
	s->stamps[s->n_shards++] = *st;
	return 0;
}

static int scan(struct seen *s, bool probe, struct vmdir_load_report *rep)
{
	const struct shards_visit v = {
		.known = known_cb,
		.line = probe ? NULL : line_cb,
		.shard = shard_cb,
		.ctx = s,
	};
	char msg[512] = "";
	int rc = shards_scan(&sh, &v, rep, msg, sizeof(msg));

	ck_assert_msg(rc == 0, "scan: %s", msg);
	return rc;
}

START_TEST(test_scan_bad_lines)
{
	struct vmdir_load_report rep;
	struct seen s = {0};
	char text[4096], q[4096], cmd[800];
	const char *after;
	FILE *f;

	snprintf(text, sizeof(text), "%s\n", rec("01", "one"));
	snprintf(text + strlen(text), sizeof(text) - strlen(text),
		 "<<<<<<< HEAD\n%s\n\n{\"deleted\":\"01943c3c-b93b-774b-8102-"
		 "030405060701\",\"agent_id\":\"a\",\"timestamp\":\"2025-01-"
		 "06T15:31:00.000000Z\",\"deleted_by\":\"a\"}\nnot json\n",
		 rec("02", "two"));
	spit("a/2025-01-06.jsonl", text);
	scan(&s, false, &rep);
	ck_assert_uint_eq(s.n_shards, 1);
	ck_assert_str_eq(s.shards[0], "a/2025-01-06.jsonl");
	ck_assert_uint_eq(s.n_lines, 2);
	ck_assert_uint_eq(s.n_tombs, 1);
	ck_assert_uint_eq(rep.n_quarantined, 1);
	ck_assert_str_eq(rep.quarantined[0].path,
			 ".vector-memory/experiences/a/2025-01-06.jsonl");
	ck_assert_ptr_nonnull(strstr(rep.quarantined[0].reason, "2 lines"));
	ck_assert_ptr_nonnull(strstr(rep.quarantined[0].reason, "line 2"));
	/* The bad lines are kept in quarantine/, the good ones stay. */
	snprintf(q, sizeof(q), "%s", rep.quarantined[0].moved_to);
	f = fopen(q, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(text, sizeof(text), f));
	ck_assert_str_eq(text, "<<<<<<< HEAD\n");
	ck_assert_ptr_nonnull(fgets(text, sizeof(text), f));
	ck_assert_str_eq(text, "not json\n");
	fclose(f);
	after = slurp("a/2025-01-06.jsonl", NULL);
	ck_assert_ptr_null(strstr(after, "HEAD"));
	ck_assert_ptr_null(strstr(after, "not json"));
	ck_assert_ptr_nonnull(strstr(after, "\"context\":\"two\""));
	ck_assert_ptr_nonnull(strstr(after, "\"deleted\""));
	/* The stamp handed over is the rewritten file's. */
	{
		char path[600];
		struct stat st;

		path_of("a/2025-01-06.jsonl", path, sizeof(path));
		ck_assert_int_eq(stat(path, &st), 0);
		ck_assert_uint_eq(s.stamps[0].ino, st.st_ino);
		ck_assert_uint_eq(s.stamps[0].size, (uint64_t)st.st_size);
	}
	vmdir_load_report_done(&rep);
	/* Read again: clean now. */
	memset(&s, 0, sizeof(s));
	scan(&s, false, &rep);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	ck_assert_uint_eq(s.n_lines, 2);
	vmdir_load_report_done(&rep);
	snprintf(cmd, sizeof(cmd), "ls %s/vmem/quarantine | wc -l", gitdir);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(fgets(text, sizeof(text), f));
	pclose(f);
	ck_assert_str_eq(text, "1\n");
}
END_TEST

START_TEST(test_scan_bad_entries)
{
	struct vmdir_load_report rep;
	struct seen s = {0};
	char path[600], target[600];

	spit("a/2025-01-06.jsonl", "");
	spit("a/notes.txt", "mine\n");
	spit("a/.tmp-1-2-2025-01-06.jsonl", "half\n");
	spit("a b/2025-01-06.jsonl", "\n"); /* not a segment: a space */
	snprintf(target, sizeof(target), "%s/outside.jsonl", tree);
	spit("../../outside.jsonl", "{}\n");
	path_of("a/2025-01-07.jsonl", path, sizeof(path));
	ck_assert_int_eq(symlink("../../../outside.jsonl", path), 0);
	scan(&s, false, &rep);
	ck_assert_uint_eq(s.n_shards, 1);
	ck_assert_uint_eq(rep.n_quarantined, 3);
	ck_assert_uint_eq(rep.temp_removed, 1);
	ck_assert_str_eq(rep.quarantined[0].path,
			 ".vector-memory/experiences/a/2025-01-07.jsonl");
	ck_assert_str_eq(rep.quarantined[0].reason, "symbolic link");
	ck_assert_str_eq(rep.quarantined[1].path,
			 ".vector-memory/experiences/a/notes.txt");
	ck_assert_str_eq(rep.quarantined[2].path,
			 ".vector-memory/experiences/a b");
	vmdir_load_report_done(&rep);
	/* The symlink's target was never touched. */
	ck_assert_int_eq(access(target, F_OK), 0);
}
END_TEST

/* A known shard is not read; a probe reads none, it only says which
 * are not known. */
START_TEST(test_scan_known_and_probe)
{
	struct vmdir_load_report rep;
	struct seen s = {0};

	spit("a/2025-01-06.jsonl", rec("01", "one"));
	spit("a/2025-01-07.jsonl", rec("02", "two"));
	scan(&s, false, &rep);
	vmdir_load_report_done(&rep);
	ck_assert_uint_eq(s.n_shards, 2);
	ck_assert_uint_eq(s.n_lines, 2);
	s.known_path = "a/2025-01-06.jsonl";
	s.known_stamp = s.stamps[0];
	s.n_shards = s.n_lines = 0;
	scan(&s, false, &rep);
	vmdir_load_report_done(&rep);
	ck_assert_uint_eq(s.n_shards, 1);
	ck_assert_str_eq(s.shards[0], "a/2025-01-07.jsonl");
	ck_assert_uint_eq(s.n_lines, 1);
	s.n_shards = s.n_lines = 0;
	scan(&s, true, &rep);
	vmdir_load_report_done(&rep);
	ck_assert_uint_eq(s.n_shards, 1);
	ck_assert_uint_eq(s.n_lines, 0);
	/* Nothing there at all: nothing. */
	teardown();
	setup();
	memset(&s, 0, sizeof(s));
	scan(&s, false, &rep);
	ck_assert_uint_eq(s.n_shards, 0);
	vmdir_load_report_done(&rep);
}
END_TEST

static Suite *shards_suite(void)
{
	Suite *s = suite_create("shards");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_append_creates);
	tcase_add_test(tc, test_torn_tail);
	tcase_add_test(tc, test_dedupe);
	tcase_add_test(tc, test_append_symlink);
	tcase_add_test(tc, test_scan_bad_lines);
	tcase_add_test(tc, test_scan_bad_entries);
	tcase_add_test(tc, test_scan_known_and_probe);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(shards_suite());
}

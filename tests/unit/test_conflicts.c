/*
 * Unit tests of the conflict helpers that need no daemon: conflict markers
 * (daemon/git/markers), the conflict record format (protocol/conflict),
 * git operations in progress (daemon/git/gitop), git's unmerged entries
 * (daemon/git/unmerged, on a real repository made with the git program)
 * and the records on disk (daemon/git/records).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gitlock.h"
#include "gitop.h"
#include "markers.h"
#include "protocol/conflict.h"
#include "records.h"
#include "run_suite.h"
#include "unmerged.h"

static const char conflicted[] = "{\n"
				 "<<<<<<< HEAD\n"
				 "  \"content\": \"ours\",\n"
				 "=======\n"
				 "  \"content\": \"theirs\",\n"
				 ">>>>>>> other\n"
				 "  \"version\": 1\n"
				 "}\n";

START_TEST(markers_detected)
{
	ck_assert(markers_found(conflicted, strlen(conflicted)));
	ck_assert(!markers_found("{\n  \"a\": 1\n}\n", 13));
	/* in the middle of a line, or without the space: no marker */
	ck_assert(!markers_found("x <<<<<<< HEAD\n", 15));
	ck_assert(!markers_found("<<<<<<<< HEAD\n", 14));
	ck_assert(!markers_found("=======x\n", 9));
	ck_assert(markers_found("=======\r\n", 9));
	ck_assert(markers_found(">>>>>>> theirs", 14));
	ck_assert(markers_found("a\n|||||||\n", 10));
}
END_TEST

START_TEST(markers_sides)
{
	static const char diff3[] = "a\n<<<<<<< ours\nO\n||||||| base\nB\n"
				    "=======\nT\n>>>>>>> theirs\nz\n";
	size_t n = 0;
	char *o =
		markers_side(conflicted, strlen(conflicted), MARKERS_OURS, &n);
	char *t = markers_side(conflicted, strlen(conflicted), MARKERS_THEIRS,
			       &n);

	ck_assert_str_eq(o,
			 "{\n  \"content\": \"ours\",\n  \"version\": 1\n}\n");
	ck_assert_str_eq(
		t, "{\n  \"content\": \"theirs\",\n  \"version\": 1\n}\n");
	ck_assert_uint_eq(n, strlen(t));
	free(o);
	free(t);
	o = markers_side(diff3, strlen(diff3), MARKERS_OURS, &n);
	t = markers_side(diff3, strlen(diff3), MARKERS_THEIRS, &n);
	ck_assert_str_eq(o, "a\nO\nz\n");
	ck_assert_str_eq(t, "a\nT\nz\n");
	free(o);
	free(t);
	/* unbalanced blocks are refused */
	errno = 0;
	ck_assert_ptr_null(
		markers_side("<<<<<<< a\nx\n", 12, MARKERS_OURS, &n));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(markers_side("=======\nx\n", 10, MARKERS_OURS, &n));
	ck_assert_ptr_null(
		markers_side("<<<<<<< a\n=======\n=======\n>>>>>>> b\n", 36,
			     MARKERS_THEIRS, &n));
}
END_TEST

static const char kept[] =
	"{\"coordinate\":{\"x\":7,\"y\":2,\"z\":1},\"content\":\"first\","
	"\"timestamp\":\"2026-01-01T00:00:00.000001Z\",\"agent_id\":\"a\","
	"\"issue_context\":null,\"version\":1}";
static const char lost[] =
	"{\"coordinate\":{\"x\":7,\"y\":2,\"z\":1},\"content\":\"second\","
	"\"timestamp\":\"2026-01-01T00:00:00.000002Z\",\"agent_id\":\"b\","
	"\"issue_context\":null,\"version\":1}";

START_TEST(record_round_trip)
{
	struct coord c = {7, 2, 1};
	char msg[VMEM_ERRMSG_LEN], name[CONFLICT_NAME_MAX];
	size_t len = 0;
	char *text =
		conflict_record_text(CONFLICT_KIND_DRIVER, &c, 1767225600000003,
				     "first writer", kept, lost, &len);
	json_t *rec;

	ck_assert_ptr_nonnull(text);
	ck_assert_uint_eq(len, strlen(text));
	ck_assert_int_eq(text[len - 1], '\n');
	rec = conflict_record_parse(text, len, 1000, msg);
	ck_assert_msg(rec != NULL, "%s", msg);
	ck_assert_str_eq(json_string_value(json_object_get(rec, "kind")),
			 "merge-driver");
	ck_assert_str_eq(json_string_value(json_object_get(rec, "path")),
			 ".vector-memory/x-007/y-2-z-1.json");
	ck_assert_str_eq(json_string_value(json_object_get(rec, "recorded_at")),
			 "2026-01-01T00:00:00.000003Z");
	ck_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(rec, "lost"), "content")),
			 "second");
	json_decref(rec);
	free(text);
	/* a held version: lost is null; names */
	text = conflict_record_text(CONFLICT_KIND_HELD, &c, 1, "held", kept,
				    NULL, &len);
	rec = conflict_record_parse(text, len, 1000, msg);
	ck_assert_ptr_nonnull(rec);
	ck_assert(json_is_null(json_object_get(rec, "lost")));
	json_decref(rec);
	free(text);
	ck_assert_int_gt(conflict_record_name(CONFLICT_KIND_HELD, &c, 5, name,
					      sizeof(name)),
			 0);
	ck_assert_str_eq(name, "held-x-007-y-2-z-1.json");
	conflict_record_name(CONFLICT_KIND_RESOLVE, &c, 5, name, sizeof(name));
	ck_assert_str_eq(name,
			 "0000000000000005-resolution-x-007-y-2-z-1.json");
	ck_assert_int_eq(
		conflict_record_name(CONFLICT_KIND_HELD, &c, 0, name, 8), -1);
}
END_TEST

START_TEST(record_refused)
{
	struct coord other = {8, 2, 1};
	char msg[VMEM_ERRMSG_LEN];
	size_t len = 0;
	char *text;

	ck_assert_ptr_null(conflict_record_parse("[]", 2, 1000, msg));
	ck_assert_ptr_null(
		conflict_record_parse("{\"kind\":\"x\"}", 12, 1000, msg));
	/* a side of another coordinate */
	text = conflict_record_text(CONFLICT_KIND_RESOLVE, &other, 1, "r", kept,
				    NULL, &len);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_null(conflict_record_parse(text, len, 1000, msg));
	free(text);
	/* sides must be objects */
	ck_assert_ptr_null(conflict_record_text(CONFLICT_KIND_RESOLVE, &other,
						1, "r", "[1]", NULL, &len));
}
END_TEST

static char tmpl[64];

static void make_tmp(void)
{
	snprintf(tmpl, sizeof(tmpl), "/tmp/vmem-conflicts-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
}

static void rm_tmp(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpl);
	ck_assert_int_eq(system(cmd), 0);
}

static void touch(const char *dir, const char *name)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
}

START_TEST(operations_in_progress)
{
	static const struct {
		const char *name;
		bool dir;
		const char *why;
	} cases[] = {
		{"MERGE_HEAD", false, "merge in progress"},
		{"rebase-merge", true, "rebase in progress"},
		{"rebase-apply", true, "rebase or am in progress"},
		{"CHERRY_PICK_HEAD", false, "cherry-pick in progress"},
		{"REVERT_HEAD", false, "revert in progress"},
		{"sequencer", true, "cherry-pick or revert in progress"},
		{"BISECT_LOG", false, "bisect in progress"},
		{"index.lock", false, "index.lock is held by another process"},
		{"index.stash.1234", false, "stash in progress"},
	};
	char why[160], path[256];

	make_tmp();
	ck_assert(!gitop_busy(tmpl, why, sizeof(why)));
	ck_assert_str_eq(why, "");
	/* git leaves AUTO_MERGE after operations that ended */
	touch(tmpl, "AUTO_MERGE");
	touch(tmpl, "ORIG_HEAD");
	ck_assert(!gitop_busy(tmpl, why, sizeof(why)));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmpl, cases[i].name);
		if (cases[i].dir)
			ck_assert_int_eq(mkdir(path, 0700), 0);
		else
			touch(tmpl, cases[i].name);
		ck_assert_msg(gitop_busy(tmpl, why, sizeof(why)), "%s",
			      cases[i].name);
		ck_assert_str_eq(why, cases[i].why);
		if (cases[i].dir)
			rmdir(path);
		else
			unlink(path);
		ck_assert(!gitop_busy(tmpl, why, sizeof(why)));
	}
	/* a rebase stopped on a conflicted pick is a rebase to the user */
	snprintf(path, sizeof(path), "%s/rebase-merge", tmpl);
	mkdir(path, 0700);
	touch(tmpl, "CHERRY_PICK_HEAD");
	ck_assert(gitop_busy(tmpl, why, sizeof(why)));
	ck_assert_str_eq(why, "rebase in progress");
	rm_tmp();
}
END_TEST

/* Our own commit's index.lock (gitlock) is no git operation; a lock
 * file of someone else's at the same path is, as is ours once given up
 * and made again by another. */
START_TEST(own_index_lock_is_not_git)
{
	char why[160], errmsg[320], target[256];
	struct statedir sd;
	struct gitmark m;
	struct gitlock l;

	make_tmp();
	ck_assert_int_eq(
		statedir_init(&sd, tmpl, NULL, 0, errmsg, sizeof(errmsg)), 0);
	ck_assert_int_eq(gitmark_init(&m, &sd), 0);
	ck_assert_int_eq(gitmark_begin(&m), 0);
	snprintf(target, sizeof(target), "%s/index", tmpl);
	ck_assert_int_eq(gitlock_take(&l, target, &m), 0);
	ck_assert_msg(!gitop_busy(tmpl, why, sizeof(why)), "%s", why);
	gitlock_release(&l);
	gitmark_end(&m);
	touch(tmpl, "index.lock");
	ck_assert(gitop_busy(tmpl, why, sizeof(why)));
	ck_assert_str_eq(why, "index.lock is held by another process");
	statedir_done(&sd);
	rm_tmp();
}
END_TEST

/* A process that looks like a git command to /proc: a shell script
 * named name (its comm) started with arg in cwd, orphaned by a double
 * fork so that its parent is not this process. It says "ready" once
 * running and ends when its stdin closes. */
struct fake_git {
	pid_t pid;
	int in, out; /* its stdin (write end), its stdout (read end) */
};

static void fake_git_start(struct fake_git *g, const char *name,
			   const char *arg, const char *cwd, bool orphan)
{
	char script[256], line[16];
	int in[2], out[2], pids[2];
	pid_t child;
	FILE *f;

	snprintf(script, sizeof(script), "%s/bin/%s", tmpl, name);
	f = fopen(script, "w");
	ck_assert_ptr_nonnull(f);
	fputs("#!/bin/sh\necho ready\nread x\n", f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(script, 0700), 0);
	ck_assert_int_eq(pipe(in), 0);
	ck_assert_int_eq(pipe(out), 0);
	ck_assert_int_eq(pipe(pids), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		pid_t run = orphan ? fork() : 0;

		if (run == 0) {
			dup2(in[0], 0);
			dup2(out[1], 1);
			close(in[1]);
			close(out[0]);
			run = getpid();
			if (write(pids[1], &run, sizeof(run)) != sizeof(run) ||
			    chdir(cwd) < 0)
				_exit(126);
			execl(script, name, arg, (char *)NULL);
			_exit(127);
		}
		_exit(run < 0);
	}
	close(in[0]);
	close(out[1]);
	close(pids[1]);
	ck_assert_int_eq(read(pids[0], &g->pid, sizeof(g->pid)),
			 sizeof(g->pid));
	close(pids[0]);
	if (orphan) {
		int status;

		ck_assert_int_eq(waitpid(child, &status, 0), child);
		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	g->in = in[1];
	g->out = out[0];
	ck_assert_int_eq(read(g->out, line, sizeof(line)), 6);
	ck_assert(memcmp(line, "ready\n", 6) == 0);
}

/* Ends it and waits until its stdout closes (it has exited). */
static void fake_git_stop(struct fake_git *g, bool orphan)
{
	char c;

	close(g->in);
	ck_assert_int_eq(read(g->out, &c, 1), 0);
	close(g->out);
	if (!orphan)
		ck_assert_int_eq(waitpid(g->pid, NULL, 0), g->pid);
}

/* gitop_git_in_tree finds a git process by its name, its directory and
 * its arguments, whoever started it but ourselves. */
START_TEST(git_process_in_tree)
{
	static const char *const commit[] = {"commit", NULL};
	char tree[128], slash[128], sub[128], sibling[128], path[160];
	struct fake_git g;
	long pid = 0;

	make_tmp();
	snprintf(tree, sizeof(tree), "%s/tree", tmpl);
	snprintf(slash, sizeof(slash), "%s/tree/", tmpl);
	snprintf(sub, sizeof(sub), "%s/tree/sub", tmpl);
	snprintf(sibling, sizeof(sibling), "%s/treehouse", tmpl);
	snprintf(path, sizeof(path), "%s/bin", tmpl);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(mkdir(tree, 0700), 0);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(mkdir(sibling, 0700), 0);
	ck_assert(!gitop_git_in_tree(tree, 0, NULL, &pid));

	fake_git_start(&g, "git", "commit", sub, true);
	ck_assert(gitop_git_in_tree(tree, 0, NULL, &pid));
	ck_assert_int_eq(pid, g.pid);
	ck_assert(gitop_git_in_tree(slash, 0, NULL, NULL));
	ck_assert(gitop_git_in_tree(sub, 0, commit, NULL));
	ck_assert(gitop_git_in_tree(tree, 3600, commit, NULL));
	ck_assert(!gitop_git_in_tree(tree, 0, gitop_tree_changers, NULL));
	ck_assert(!gitop_git_in_tree(sibling, 0, NULL, NULL));
	fake_git_stop(&g, true);
	ck_assert(!gitop_git_in_tree(tree, 0, NULL, NULL));

	/* git's helpers (git-upload-pack, git-remote-https) are git */
	fake_git_start(&g, "git-upload-pack", "rebase", tree, true);
	ck_assert(gitop_git_in_tree(tree, 0, gitop_tree_changers, &pid));
	ck_assert_int_eq(pid, g.pid);
	fake_git_stop(&g, true);

	/* other names are not, nor is a git in a directory beside it */
	fake_git_start(&g, "gitk", "commit", tree, true);
	ck_assert(!gitop_git_in_tree(tree, 0, NULL, NULL));
	fake_git_stop(&g, true);
	fake_git_start(&g, "git", "commit", sibling, true);
	ck_assert(!gitop_git_in_tree(tree, 0, NULL, NULL));
	fake_git_stop(&g, true);

	/* our own children (git ls-files, update-index) are ours */
	fake_git_start(&g, "git", "commit", tree, false);
	ck_assert(!gitop_git_in_tree(tree, 0, NULL, NULL));
	fake_git_stop(&g, false);
	rm_tmp();
}
END_TEST

/* Run a shell command in dir. */
static void sh(const char *dir, const char *what)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "cd %s && %s", dir, what);
	ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

START_TEST(unmerged_entries)
{
	struct unmerged_set u;
	const struct unmerged_entry *e;
	char errmsg[256], gitdir[128], *blob = NULL;
	size_t len = 0;

	make_tmp();
	snprintf(gitdir, sizeof(gitdir), "%s/.git", tmpl);
	sh(tmpl,
	   "git init -q -b main && git config user.name u && "
	   "git config user.email u@x && mkdir -p .vector-memory/x-007 && "
	   "echo base > .vector-memory/x-007/y-2-z-2.json && "
	   "echo base > notes.txt && git add -A && git commit -qm base && "
	   "git checkout -qb side && "
	   "echo side > .vector-memory/x-007/y-2-z-2.json && "
	   "echo side > notes.txt && git commit -qam side && "
	   "git checkout -q main && "
	   "echo main > .vector-memory/x-007/y-2-z-2.json && "
	   "echo main > notes.txt && git commit -qam main && "
	   "(git merge -q side >/dev/null 2>&1; true)");
	ck_assert_int_eq(
		unmerged_list(tmpl, gitdir, 1000, &u, errmsg, sizeof(errmsg)),
		0);
	ck_assert_uint_eq(u.n, 1);
	e = unmerged_find(&u, &(struct coord){7, 2, 2});
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(e->stages, 0xe);
	ck_assert_str_eq(unmerged_describe(e->stages),
			 "unmerged: both modified");
	ck_assert_ptr_null(unmerged_find(&u, &(struct coord){7, 2, 3}));
	ck_assert_uint_eq(u.n_other, 0); /* notes.txt is no memory file */
	ck_assert_int_eq(unmerged_blob(tmpl, gitdir, e->oid[3], 1 << 10, &blob,
				       &len, errmsg, sizeof(errmsg)),
			 0);
	ck_assert_str_eq(blob, "side\n");
	free(blob);
	/* staged: the conflict is gone, nothing else is touched */
	ck_assert_int_eq(unmerged_stage(tmpl, gitdir,
					".vector-memory/x-007/y-2-z-2.json",
					true, errmsg, sizeof(errmsg)),
			 0);
	unmerged_set_done(&u);
	ck_assert_int_eq(
		unmerged_list(tmpl, gitdir, 1000, &u, errmsg, sizeof(errmsg)),
		0);
	ck_assert_uint_eq(u.n, 0);
	unmerged_set_done(&u);
	/* a split index reads alike */
	sh(tmpl, "git update-index --split-index && git reset -q --hard && "
		 "git checkout -qb other HEAD~1 && "
		 "echo other > .vector-memory/x-007/y-2-z-2.json && "
		 "git commit -qam other && "
		 "(git merge -q main >/dev/null 2>&1; true) && "
		 "ls .git/sharedindex.* >/dev/null");
	ck_assert_int_eq(
		unmerged_list(tmpl, gitdir, 1000, &u, errmsg, sizeof(errmsg)),
		0);
	ck_assert_uint_eq(u.n, 1);
	ck_assert_uint_eq(u.e[0].stages, 0xe);
	unmerged_set_done(&u);
	ck_assert(!unmerged_driver_registered(tmpl, gitdir));
	sh(tmpl, "git config merge.vmem.driver true");
	ck_assert(unmerged_driver_registered(tmpl, gitdir));
	/* index.lock held: -EBUSY (git takes it only to change something) */
	sh(tmpl, "echo changed > notes.txt");
	touch(gitdir, "index.lock");
	ck_assert_int_eq(unmerged_stage(tmpl, gitdir, "notes.txt", true, errmsg,
					sizeof(errmsg)),
			 -EBUSY);
	rm_tmp();
}
END_TEST

static int count_held(void *ctx, const char *name)
{
	(void)name;
	(*(int *)ctx)++;
	return 0;
}

START_TEST(records_on_disk)
{
	char errmsg[320], dir[128], *text = NULL;
	struct statedir sd;
	json_t *list = NULL;
	size_t total = 0, len = 0;
	int held = 0;

	make_tmp();
	/* tmpl plays the git directory: the state directory is tmpl/vmem */
	ck_assert_int_eq(
		statedir_init(&sd, tmpl, NULL, 0, errmsg, sizeof(errmsg)), 0);
	/* no directory yet: nothing, and reads say so */
	ck_assert_int_eq(records_list(&sd, 1000, 10, &list, &total, errmsg,
				      sizeof(errmsg)),
			 0);
	ck_assert_uint_eq(json_array_size(list), 0);
	json_decref(list);
	ck_assert_int_eq(records_read(&sd, "held-x-001-y-1-z-1.json", &text,
				      &len, errmsg, sizeof(errmsg)),
			 -ENOENT);
	ck_assert_int_eq(records_write(&sd, "held-x-007-y-2-z-1.json", "{}\n",
				       3, errmsg, sizeof(errmsg)),
			 0);
	ck_assert_int_eq(records_write(&sd, "0001-resolution-x.json", "{}\n", 3,
				       errmsg, sizeof(errmsg)),
			 0);
	ck_assert_int_eq(records_read(&sd, "held-x-007-y-2-z-1.json", &text,
				      &len, errmsg, sizeof(errmsg)),
			 0);
	ck_assert_str_eq(text, "{}\n");
	free(text);
	ck_assert_int_eq(records_scan(&sd, "held-", count_held, &held, errmsg,
				      sizeof(errmsg)),
			 0);
	ck_assert_int_eq(held, 1);
	/* listed newest first, a file that is no record said so */
	ck_assert_int_eq(records_list(&sd, 1000, 10, &list, &total, errmsg,
				      sizeof(errmsg)),
			 0);
	ck_assert_uint_eq(total, 2);
	ck_assert_str_eq(json_string_value(json_object_get(
				 json_array_get(list, 0), "file")),
			 "held-x-007-y-2-z-1.json");
	ck_assert_ptr_nonnull(
		json_object_get(json_array_get(list, 0), "error"));
	json_decref(list);
	ck_assert_int_eq(records_remove(&sd, "held-x-007-y-2-z-1.json", errmsg,
					sizeof(errmsg)),
			 0);
	ck_assert_int_eq(records_remove(&sd, "held-x-007-y-2-z-1.json", errmsg,
					sizeof(errmsg)),
			 0);
	/* a directory writable by others is refused */
	snprintf(dir, sizeof(dir), "%s/vmem/conflicts", tmpl);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	ck_assert_int_eq(
		records_write(&sd, "x.json", "{}", 2, errmsg, sizeof(errmsg)),
		-EPERM);
	ck_assert_ptr_nonnull(strstr(errmsg, "writable by group or other"));
	statedir_done(&sd);
	rm_tmp();
}
END_TEST

static Suite *conflicts_suite(void)
{
	Suite *s = suite_create("conflicts");
	TCase *tc = tcase_create("conflicts");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, markers_detected);
	tcase_add_test(tc, markers_sides);
	tcase_add_test(tc, record_round_trip);
	tcase_add_test(tc, record_refused);
	tcase_add_test(tc, operations_in_progress);
	tcase_add_test(tc, own_index_lock_is_not_git);
	tcase_add_test(tc, git_process_in_tree);
	tcase_add_test(tc, unmerged_entries);
	tcase_add_test(tc, records_on_disk);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(conflicts_suite());
}

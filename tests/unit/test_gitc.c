/*
 * Unit tests of daemon/git/gitc.c on real temporary repositories, checked with
 * the git program: root commits on an unborn branch, incremental commits,
 * deletions, the user's staged and unstaged changes left alone, a branch
 * tip moved under us (by a user commit between calls and inside the
 * commit, through the test hook), deferrals, identity, the generated
 * message, history and rollback points; git fsck --strict after each.
 *
 * The process runs with HOME, XDG_CONFIG_HOME and libgit2's config search
 * paths pointing to an empty directory, so only a repository's own config
 * gives an identity.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <git2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gitc.h"
#include "gitidx.h"
#include "gitlock.h"
#include "run_suite.h"

#define GIT "git -c advice.detachedHead=false "

static char home[64];
static char tmpdir[64];
static struct gitc *g;
static struct statedir sd; /* tmpdir/.git/vmem: the commit marker's */
static char errmsg[256];

static int rm_cb(const char *path, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Run a shell command in the repository; its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[2048];
	int n, st;
	va_list ap;

	n = snprintf(cmd, sizeof(cmd), "cd '%s' && ", tmpdir);
	va_start(ap, fmt);
	vsnprintf(cmd + n, sizeof(cmd) - (size_t)n, fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The output of a shell command in the repository (static buffer). */
static const char *out(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static const char *out(const char *fmt, ...)
{
	static char buf[16384];
	char cmd[2048];
	size_t got = 0, r;
	FILE *f;
	int n;
	va_list ap;

	n = snprintf(cmd, sizeof(cmd), "cd '%s' && ", tmpdir);
	va_start(ap, fmt);
	vsnprintf(cmd + n, sizeof(cmd) - (size_t)n, fmt, ap);
	va_end(ap);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	while ((r = fread(buf + got, 1, sizeof(buf) - 1 - got, f)) > 0)
		got += r;
	buf[got] = '\0';
	pclose(f);
	return buf;
}

static void write_file(const char *rel, const char *text)
{
	char path[512];
	FILE *f;

	ck_assert_int_eq(sh("mkdir -p \"$(dirname '%s')\"", rel), 0);
	snprintf(path, sizeof(path), "%s/%s", tmpdir, rel);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

static void init_repo(bool identity)
{
	char gitdir[96];

	strcpy(tmpdir, "/tmp/vmem-test-gitc-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	ck_assert_int_eq(sh("git init -q -b main ."), 0);
	if (identity)
		ck_assert_int_eq(sh("git config user.name 'Test User' && "
				    "git config user.email test@example.com"),
				 0);
	snprintf(gitdir, sizeof(gitdir), "%s/.git", tmpdir);
	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(gitc_open(&g, tmpdir, &sd, errmsg, sizeof(errmsg)), 0);
}

static void setup(void)
{
	init_repo(true);
}

static void setup_anon(void)
{
	init_repo(false);
}

static void teardown(void)
{
	gitc_free(g);
	g = NULL;
	statedir_done(&sd);
	nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void fsck_clean(void)
{
	ck_assert_int_eq(sh("git fsck --strict --no-progress >/dev/null 2>&1"),
			 0);
}

/* Text of a decision file, also written to the working tree. */
static const char *dtext(int x, int y, int z, const char *content, char *buf,
			 size_t n)
{
	snprintf(buf, n,
		 "{\n  \"coordinate\": {\n    \"x\": %d,\n    \"y\": %d,\n"
		 "    \"z\": %d\n  },\n  \"content\": \"%s\"\n}\n",
		 x, y, z, content);
	return buf;
}

/* Paths of changes: each put()/del() keeps its own. */
static char paths[64][64];
static int n_paths;

/* Write the file in the working tree and describe the change. */
static struct gitc_change put(int x, int y, int z, const char *content,
			      char *buf, size_t n)
{
	struct gitc_change c = {NULL, false, false};
	struct coord at = {x, y, z};
	char rel[128], *path = paths[n_paths++ % 64];

	dtext(x, y, z, content, buf, n);
	coord_path(&at, path, 64);
	snprintf(rel, sizeof(rel), ".vector-memory/%s", path);
	write_file(rel, buf);
	write_file(".vector-memory/metadata.json", "{\n  \"format\": 1\n}\n");
	c.path = path;
	return c;
}

static struct gitc_change del(int x, int y, int z)
{
	struct gitc_change c = {NULL, false, false};
	struct coord at = {x, y, z};
	char *path = paths[n_paths++ % 64];

	coord_path(&at, path, 64);
	sh("rm -f .vector-memory/%s && rmdir .vector-memory/x-%03d "
	   "2>/dev/null; true",
	   path, x);
	c.path = path;
	return c;
}

static void commit_ok(struct gitc_change *ch, size_t n, const char *msg,
		      struct gitc_result *res)
{
	int rc = gitc_commit(g, ch, n, msg, res, errmsg, sizeof(errmsg));

	ck_assert_msg(rc == 0, "gitc_commit: %d %s", rc, errmsg);
	ck_assert_str_eq(errmsg, "");
	ck_assert_str_eq(res->deferred, "");
	ck_assert_uint_eq(strlen(res->commit), 40);
}

static const char *head(void)
{
	static char h[64];

	snprintf(h, sizeof(h), "%s", out("git rev-parse HEAD"));
	h[strcspn(h, "\n")] = '\0';
	return h;
}

START_TEST(test_message)
{
	struct gitc_msgline l[4] = {
		{"x-005/y-2-z-1.json", "alice", false},
		{"x-007/y-1-z-3.json", NULL, true},
		{"x-005/y-3-z-1.json", "bob", false},
		{"experiences/alice/2025-01-06.jsonl", NULL, false},
	};
	char *m;

	m = gitc_message(l, 4);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m, "vector-memory: 3 decisions (x 5-7, y 1-3, z 1-3), "
			    "1 experience shard"
			    "\n\nx-005/y-2-z-1.json by alice\n"
			    "x-007/y-1-z-3.json deleted\n"
			    "x-005/y-3-z-1.json by bob\n"
			    "experiences/alice/2025-01-06.jsonl\n");
	free(m);
	m = gitc_message(l, 1);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m, "vector-memory: 1 decisions (x 5, y 2, z 1)\n\n"
			    "x-005/y-2-z-1.json by alice\n");
	free(m);
}
END_TEST

/* A batch of more paths than a message names: the first are listed,
 * the others counted, the subject covers them all. */
START_TEST(test_message_bounded)
{
	static char names[GITC_MESSAGE_PATHS + 2][32];
	struct gitc_msgline l[GITC_MESSAGE_PATHS + 2] = {0};
	char *m, *p;
	size_t lines = 0;

	for (int i = 0; i < GITC_MESSAGE_PATHS + 2; i++) {
		snprintf(names[i], sizeof(names[i]), "x-%03d/y-1-z-2.json",
			 i + 1);
		l[i].path = names[i];
		l[i].agent = i < GITC_MESSAGE_PATHS ? "alice" : NULL;
	}
	m = gitc_message(l, GITC_MESSAGE_PATHS + 2);
	ck_assert_ptr_nonnull(m);
	ck_assert_ptr_nonnull(strstr(m, "vector-memory: 102 decisions "
					"(x 1-102, y 1, z 2)\n\n"
					"x-001/y-1-z-2.json by alice\n"));
	ck_assert_ptr_nonnull(strstr(m, "\nx-100/y-1-z-2.json by alice\n"
					"and 2 more\n"));
	ck_assert_ptr_null(strstr(m, "x-101"));
	for (p = m; *p; p++)
		lines += *p == '\n';
	ck_assert_uint_eq(lines, 2 + GITC_MESSAGE_PATHS + 1);
	free(m);
}
END_TEST

START_TEST(test_unborn_root_commit)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], ct[32];

	c = put(5, 2, 1, "first", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_str_eq(head(), res.commit);
	ck_assert_str_eq(out("git rev-list --count HEAD"), "1\n");
	ck_assert_str_eq(out("git log -1 --format=%%P"), "\n");
	ck_assert_str_eq(out("git ls-tree -r --name-only HEAD"),
			 ".vector-memory/metadata.json\n"
			 ".vector-memory/x-005/y-2-z-1.json\n");
	ck_assert_str_eq(out("git show HEAD:.vector-memory/x-005/y-2-z-1.json"),
			 buf);
	ck_assert_str_eq(out("git show HEAD:.vector-memory/metadata.json"),
			 "{\n  \"format\": 1\n}\n");
	ck_assert_str_eq(out("git log -1 --format='%%an <%%ae>|%%cn <%%ce>'"),
			 "Test User <test@example.com>|"
			 "Test User <test@example.com>\n");
	snprintf(ct, sizeof(ct), "%lld\n", (long long)res.committed_at);
	ck_assert_str_eq(out("git log -1 --format=%%ct"), ct);
	ck_assert_str_eq(out("git cat-file commit HEAD | sed '1,/^$/d'"),
			 "vector-memory: 1 decisions (x 5, y 2, z 1)\n\n"
			 "x-005/y-2-z-1.json by unknown\n");
	/* stat data right: clean without a refresh */
	ck_assert_str_eq(out("git diff-files --name-only"), "");
	ck_assert_str_eq(out("git status --porcelain"), "");
	ck_assert_str_eq(out("git branch --show-current"), "main\n");
	fsck_clean();
}
END_TEST

START_TEST(test_second_commit_and_message)
{
	struct gitc_result r1, r2;
	struct gitc_change c[2];
	char b1[512], b2[512], b3[512], parent[64];

	c[0] = put(5, 2, 1, "one", b1, sizeof(b1));
	commit_ok(c, 1, NULL, &r1);
	c[0] = put(5, 2, 1, "one, changed", b2, sizeof(b2));
	c[1] = put(6, 1, 1, "two", b3, sizeof(b3));
	commit_ok(c, 2, "custom subject\n\ncustom body\n", &r2);
	ck_assert_str_ne(r1.commit, r2.commit);
	snprintf(parent, sizeof(parent), "%s\n", r1.commit);
	ck_assert_str_eq(out("git log -1 --format=%%P"), parent);
	ck_assert_str_eq(out("git show --name-status --format= HEAD"),
			 "M\t.vector-memory/x-005/y-2-z-1.json\n"
			 "A\t.vector-memory/x-006/y-1-z-1.json\n");
	ck_assert_str_eq(out("git cat-file commit HEAD | sed '1,/^$/d'"),
			 "custom subject\n\ncustom body\n");
	ck_assert_str_eq(out("git show HEAD:.vector-memory/x-005/y-2-z-1.json"),
			 b2);
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

START_TEST(test_noop_commit)
{
	struct gitc_result res;
	struct gitc_change c, d;
	char buf[512], h[64];
	int rc;

	c = put(5, 2, 1, "same", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	snprintf(h, sizeof(h), "%s", head());
	rc = gitc_commit(g, &c, 1, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(res.commit, "");
	d = del(9, 1, 1); /* deleting an absent decision changes nothing */
	rc = gitc_commit(g, &d, 1, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(res.commit, "");
	rc = gitc_commit(g, NULL, 0, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(res.commit, "");
	ck_assert_str_eq(head(), h);
	ck_assert_str_eq(out("git rev-list --count HEAD"), "1\n");
	fsck_clean();
}
END_TEST

START_TEST(test_delete)
{
	struct gitc_result res;
	struct gitc_change c[3];
	char b1[512], b2[512], b3[512];

	c[0] = put(5, 1, 1, "a", b1, sizeof(b1));
	c[1] = put(5, 2, 1, "b", b2, sizeof(b2));
	c[2] = put(6, 1, 1, "c", b3, sizeof(b3));
	commit_ok(c, 3, NULL, &res);
	c[0] = del(5, 1, 1);
	commit_ok(c, 1, NULL, &res);
	ck_assert_str_eq(out("git show --name-status --format= HEAD"),
			 "D\t.vector-memory/x-005/y-1-z-1.json\n");
	ck_assert_str_eq(out("git ls-tree --name-only HEAD:.vector-memory"),
			 "metadata.json\nx-005\nx-006\n");
	c[0] = del(6, 1, 1);
	commit_ok(c, 1, NULL, &res);
	ck_assert_str_eq(out("git ls-tree --name-only HEAD:.vector-memory"),
			 "metadata.json\nx-005\n");
	ck_assert_str_eq(out("git cat-file commit HEAD | sed '1,/^$/d'"),
			 "vector-memory: 1 decisions (x 6, y 1, z 1)\n\n"
			 "x-006/y-1-z-1.json deleted\n");
	ck_assert_str_eq(out("git ls-files"),
			 ".vector-memory/metadata.json\n"
			 ".vector-memory/x-005/y-2-z-1.json\n");
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

START_TEST(test_user_changes_preserved)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], cached[4096], unstaged[4096], st[4096];

	write_file("README", "readme\n");
	write_file("other.txt", "other\n");
	ck_assert_int_eq(sh("git add README other.txt && git commit -q -m "
			    "base"),
			 0);
	/* staged new file, partially staged README, unstaged other.txt */
	write_file("new.txt", "new\n");
	write_file("README", "readme staged\n");
	ck_assert_int_eq(sh("git add new.txt README"), 0);
	write_file("README", "readme staged then more\n");
	write_file("other.txt", "other changed\n");
	snprintf(cached, sizeof(cached), "%s", out("git diff --cached"));
	snprintf(unstaged, sizeof(unstaged), "%s", out("git diff"));
	snprintf(st, sizeof(st), "%s", out("git status --porcelain"));
	ck_assert_str_eq(st, "MM README\nA  new.txt\n M other.txt\n");

	c = put(5, 2, 1, "mine", buf, sizeof(buf));
	ck_assert_str_eq(out("git status --porcelain"),
			 "MM README\nA  new.txt\n M other.txt\n"
			 "?? .vector-memory/\n");
	commit_ok(&c, 1, NULL, &res);
	ck_assert_str_eq(out("git show --name-only --format= HEAD"),
			 ".vector-memory/metadata.json\n"
			 ".vector-memory/x-005/y-2-z-1.json\n");
	ck_assert_str_eq(out("git show HEAD:README"), "readme\n");
	ck_assert_str_eq(out("git diff --cached"), cached);
	ck_assert_str_eq(out("git diff"), unstaged);
	ck_assert_str_eq(out("git diff --cached --name-only"),
			 "README\nnew.txt\n");
	ck_assert_str_eq(out("git status --porcelain"),
			 "MM README\nA  new.txt\n M other.txt\n");
	ck_assert_str_eq(out("git show :README"), "readme staged\n");
	fsck_clean();
}
END_TEST

/* What is committed is what the working tree holds, byte for byte: a
 * hand edit without a final newline, another JSON layout. */
START_TEST(test_working_file_committed_as_is)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	c = put(5, 2, 1, "rendered", buf, sizeof(buf));
	write_file(".vector-memory/x-005/y-2-z-1.json",
		   "{\"coordinate\":{\"x\":5,\"y\":2,\"z\":1},"
		   "\"content\":\"hand edit\"}");
	commit_ok(&c, 1, NULL, &res);
	ck_assert(c.present && c.changed);
	ck_assert_str_eq(out("git show HEAD:.vector-memory/x-005/y-2-z-1.json"),
			 "{\"coordinate\":{\"x\":5,\"y\":2,\"z\":1},"
			 "\"content\":\"hand edit\"}");
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

/* Paths of any depth under .vector-memory commit through the same path;
 * an emptied directory goes with its last file. */
START_TEST(test_nested_paths)
{
	struct gitc_result res;
	struct gitc_change c[2] = {
		{"experiences/agent-1/2025-01-06.jsonl", false, false},
		{"experiences/agent-2/deep/er/2025-01-07.jsonl", false, false},
	};

	write_file(".vector-memory/experiences/agent-1/2025-01-06.jsonl",
		   "{\"a\":1}\n");
	write_file(".vector-memory/experiences/agent-2/deep/er/"
		   "2025-01-07.jsonl",
		   "{\"b\":2}\n{\"b\":3}\n");
	commit_ok(c, 2, NULL, &res);
	ck_assert_str_eq(out("git ls-tree -r --name-only HEAD"),
			 ".vector-memory/experiences/agent-1/2025-01-06.jsonl\n"
			 ".vector-memory/experiences/agent-2/deep/er/"
			 "2025-01-07.jsonl\n");
	ck_assert_str_eq(out("git cat-file commit HEAD | sed '1,/^$/d'"),
			 "vector-memory: 2 experience shards\n\n"
			 "experiences/agent-1/2025-01-06.jsonl\n"
			 "experiences/agent-2/deep/er/2025-01-07.jsonl\n");
	ck_assert_str_eq(out("git status --porcelain"), "");
	ck_assert_int_eq(sh("rm -r .vector-memory/experiences/agent-2"), 0);
	commit_ok(c + 1, 1, NULL, &res);
	ck_assert(!c[1].present && c[1].changed);
	ck_assert_str_eq(
		out("git ls-tree -r -t --name-only HEAD"),
		".vector-memory\n.vector-memory/experiences\n"
		".vector-memory/experiences/agent-1\n"
		".vector-memory/experiences/agent-1/2025-01-06.jsonl\n");
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

START_TEST(test_user_commit_between)
{
	struct gitc_result r1, r2;
	struct gitc_change c;
	char b1[512], b2[512], user[64], parent[80];

	c = put(5, 2, 1, "one", b1, sizeof(b1));
	commit_ok(&c, 1, NULL, &r1);
	write_file("user.txt", "user\n");
	ck_assert_int_eq(sh("git add user.txt && git commit -q -m user"), 0);
	snprintf(user, sizeof(user), "%s", head());
	c = put(5, 2, 1, "two", b2, sizeof(b2));
	commit_ok(&c, 1, NULL, &r2);
	snprintf(parent, sizeof(parent), "%s\n", user);
	ck_assert_str_eq(out("git log -1 --format=%%P"), parent);
	ck_assert_str_eq(out("git log --format=%%s"),
			 "vector-memory: 1 decisions (x 5, y 2, z 1)\n"
			 "user\n"
			 "vector-memory: 1 decisions (x 5, y 2, z 1)\n");
	ck_assert_str_eq(out("git show HEAD:user.txt"), "user\n");
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

static int hook_calls;

/*
 * Move the branch under gitc the first time only, as a process that does
 * not use the index would (the index is locked by the commit): a commit
 * of user.txt on the tip, by plumbing.
 */
static void move_tip(void *ctx, enum gitc_step step)
{
	(void)ctx;
	if (step != GITC_STEP_BEFORE_CAS)
		return;
	if (hook_calls++ == 0) {
		ck_assert_int_eq(
			sh("b=$(echo user | git hash-object -w --stdin) && "
			   "p=$(git rev-parse -q --verify HEAD) ; "
			   "if [ -n \"$p\" ]; then "
			   "t=$( (git ls-tree HEAD | grep -v 'user.txt$'; "
			   "printf '100644 blob %%s\\tuser.txt\\n' $b) | "
			   "git mktree) && "
			   "c=$(git commit-tree $t -p $p -m moved) && "
			   "git update-ref HEAD $c $p; else "
			   "t=$(printf '100644 blob %%s\\tuser.txt\\n' $b | "
			   "git mktree) && c=$(git commit-tree $t -m moved) && "
			   "git update-ref HEAD $c ''; fi"),
			0);
	}
}

START_TEST(test_tip_moved_during_commit)
{
	struct gitc_result r1, r2;
	struct gitc_change c;
	char b1[512], b2[512];

	c = put(5, 2, 1, "one", b1, sizeof(b1));
	commit_ok(&c, 1, "ours1", &r1);
	hook_calls = 0;
	gitc_set_hook(g, move_tip, NULL);
	c = put(5, 2, 1, "two", b2, sizeof(b2));
	commit_ok(&c, 1, "ours2", &r2);
	ck_assert_int_eq(hook_calls, 2);
	ck_assert_str_eq(head(), r2.commit);
	ck_assert_str_eq(out("git log --format=%%s"), "ours2\nmoved\nours1\n");
	ck_assert_str_eq(out("git show HEAD:user.txt"), "user\n");
	ck_assert_str_eq(out("git show HEAD:.vector-memory/x-005/y-2-z-1.json"),
			 b2);
	/* The mover never touched the index: user.txt is all that differs
	 * (a staged deletion of what it committed); ours are in line. */
	ck_assert_str_eq(out("git status --porcelain"), "D  user.txt\n");
	fsck_clean();
}
END_TEST

START_TEST(test_tip_moved_unborn)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	hook_calls = 0;
	gitc_set_hook(g, move_tip, NULL);
	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, "ours", &res);
	ck_assert_int_eq(hook_calls, 2);
	ck_assert_str_eq(out("git log --format=%%s"), "ours\nmoved\n");
	ck_assert_str_eq(out("git ls-tree -r --name-only HEAD"),
			 ".vector-memory/metadata.json\n"
			 ".vector-memory/x-005/y-2-z-1.json\n"
			 "user.txt\n");
	fsck_clean();
}
END_TEST

static int lock_probes;

/* At every step of a commit, git's own lock attempt must fail: the
 * commit holds index.lock throughout. */
static void try_index_lock(void *ctx, enum gitc_step step)
{
	char path[256];
	int fd;

	(void)ctx;
	snprintf(path, sizeof(path), "%s/.git/index.lock", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
	ck_assert_msg(fd < 0 && errno == EEXIST,
		      "index.lock could be taken at step %d", (int)step);
	/* and a git command fails on it as against any git process */
	ck_assert_int_ne(sh("git update-index --refresh >/dev/null 2>&1"), 0);
	lock_probes |= 1 << step;
}

START_TEST(test_lock_held_throughout)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	lock_probes = 0;
	gitc_set_hook(g, try_index_lock, NULL);
	c = put(5, 2, 1, "two", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	gitc_set_hook(g, NULL, NULL);
	ck_assert_int_eq(lock_probes, 1 << GITC_STEP_LOCKED |
					      1 << GITC_STEP_INDEX_READY |
					      1 << GITC_STEP_BEFORE_CAS |
					      1 << GITC_STEP_MOVED);
	/* released at the end, and nothing of ours left */
	ck_assert_int_ne(sh("test -e .git/index.lock"), 0);
	ck_assert_str_eq(out("ls .git/vmem"), "");
	ck_assert_str_eq(out("ls .git/refs/heads"), "main\n");
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

/* The index's version and extension signatures, "2 TREE UNTR". */
static const char *index_shape(void)
{
	static char shape[256];
	char path[256], exts[200];
	unsigned v;

	snprintf(path, sizeof(path), "%s/.git/index", tmpdir);
	ck_assert_int_eq(gitidx_describe(path, &v, exts, sizeof(exts)), 0);
	snprintf(shape, sizeof(shape), "%u %s", v, exts);
	return shape;
}

static void index_stamp(struct stat *st)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/.git/index", tmpdir);
	ck_assert_int_eq(stat(path, st), 0);
}

/*
 * A user's repository in a given index format (setup: git commands run
 * after a first user commit): our commit must keep the version and every
 * extension, stage real stat data (git status clean without re-hashing:
 * for the formats whose status would otherwise not write the index, the
 * index is left as it is), keep the user's staged change, and use the
 * expected way.
 */
static void format_case(const char *setup, int way, bool status_keeps,
			const char *status)
{
	struct gitc_result res;
	struct gitc_change c[3];
	char b[3][512], before[256], cached[1024];
	struct stat s1, s2;

	write_file("README", "readme\n");
	write_file("src/a.c", "int a;\n");
	/* Every file older than any index written here: git's racy-entry
	 * re-check never applies, so a status that writes the index does so
	 * because of what we staged. */
	ck_assert_int_eq(sh("touch -d '-5 seconds' README src/a.c && "
			    "git add -A && git commit -q -m base"),
			 0);
	ck_assert_int_eq(sh("%s", setup), 0);
	c[0] = put(5, 2, 1, "one", b[0], sizeof(b[0]));
	c[1] = put(5, 3, 1, "two", b[1], sizeof(b[1]));
	c[2] = put(6, 1, 2, "three", b[2], sizeof(b[2]));
	/* Files older than the index we write: no racy-git re-check. */
	ck_assert_int_eq(sh("touch -d '-5 seconds' .vector-memory/*/* "
			    ".vector-memory/metadata.json"),
			 0);
	write_file("README", "readme staged\n");
	ck_assert_int_eq(sh("touch -c -d '-5 seconds' README new.txt; "
			    "git add README && git status >/dev/null"),
			 0);
	snprintf(cached, sizeof(cached), "%s", out("git diff --cached"));
	snprintf(before, sizeof(before), "%s", index_shape());
	ck_assert_int_eq(
		gitc_commit(g, c, 3, NULL, &res, errmsg, sizeof(errmsg)), 0);
	ck_assert_str_eq(errmsg, "");
	ck_assert_uint_eq(strlen(res.commit), 40);
	ck_assert_int_eq(res.index_way, way);
	ck_assert(res.index_written);
	ck_assert_str_eq(index_shape(), before);
	ck_assert_str_eq(out("git diff --cached"), cached);
	ck_assert_str_eq(out("git diff-files --name-only -- .vector-memory"),
			 "");
	/* real stat data: size and inode as the file's */
	ck_assert_str_eq(
		out("git ls-files --debug .vector-memory/x-005/y-2-z-1.json | "
		    "sed -n 's/^  dev: [0-9]*\tino: \\([0-9]*\\)$/\\1/p'"),
		out("stat -c '%%i' .vector-memory/x-005/y-2-z-1.json"));
	index_stamp(&s1);
	ck_assert_str_eq(out("git status --porcelain"), status);
	index_stamp(&s2);
	if (status_keeps) {
		ck_assert_int_eq(s1.st_ino, s2.st_ino);
		ck_assert_int_eq(s1.st_mtim.tv_nsec, s2.st_mtim.tv_nsec);
	}
	ck_assert_str_eq(index_shape(), before);
	/* a second commit on the same index (a deletion, a change) */
	c[0] = del(5, 2, 1);
	c[1] = put(5, 3, 1, "two changed", b[1], sizeof(b[1]));
	ck_assert_int_eq(sh("touch -d '-5 seconds' .vector-memory/x-005/*"), 0);
	ck_assert_int_eq(
		gitc_commit(g, c, 2, NULL, &res, errmsg, sizeof(errmsg)), 0);
	ck_assert_str_eq(errmsg, "");
	ck_assert_str_eq(index_shape(), before);
	ck_assert_str_eq(out("git status --porcelain"), status);
	ck_assert_str_eq(out("git ls-files .vector-memory"),
			 ".vector-memory/metadata.json\n"
			 ".vector-memory/x-005/y-3-z-1.json\n"
			 ".vector-memory/x-006/y-1-z-2.json\n");
	ck_assert_int_eq(sh("git commit -q -m user && git status --porcelain "
			    ">/dev/null"),
			 0);
	ck_assert_str_eq(out("git show --name-only --format= HEAD"),
			 "README\n");
	fsck_clean();
}

START_TEST(test_index_v2)
{
	format_case("true", GITC_INDEX_OWN, true, "M  README\n");
}
END_TEST

START_TEST(test_index_v3)
{
	/* an intent-to-add entry makes git write version 3 */
	format_case(
		"echo later > later.txt && "
		"touch -d '-5 seconds' later.txt && git add -N later.txt && "
		"test \"$(head -c 8 .git/index | tail -c 1 | od -An -tu1 | "
		"tr -d ' ')\" = 3",
		GITC_INDEX_OWN, true, "M  README\n A later.txt\n");
}
END_TEST

START_TEST(test_index_v4)
{
	format_case("git config index.version 4 && "
		    "git update-index --index-version 4",
		    GITC_INDEX_OWN, true, "M  README\n");
}
END_TEST

START_TEST(test_index_split)
{
	format_case("git config core.splitIndex true && "
		    "git update-index --split-index",
		    GITC_INDEX_GIT, false, "M  README\n");
}
END_TEST

START_TEST(test_index_untracked_cache)
{
	format_case("git config core.untrackedCache true && "
		    "git update-index --untracked-cache && git status "
		    ">/dev/null",
		    GITC_INDEX_GIT, false, "M  README\n");
}
END_TEST

START_TEST(test_index_fsmonitor)
{
	/* a hook that says everything may have changed (protocol 2) */
	format_case("printf '#!/bin/sh\\nprintf \"token\\\\0/\\\\0\"\\n' > "
		    ".git/fsm && chmod +x .git/fsm && "
		    "git config core.fsmonitor \"$PWD/.git/fsm\" && "
		    "git config core.fsmonitorHookVersion 2 && "
		    "git update-index --fsmonitor && git status >/dev/null",
		    GITC_INDEX_GIT, false, "M  README\n");
}
END_TEST

/* A committed file changed after its bytes were read (by the hook, under
 * the lock). */
static void change_after_read(void *ctx, enum gitc_step step)
{
	(void)ctx;
	if (step == GITC_STEP_LOCKED)
		write_file(".vector-memory/x-005/y-2-z-1.json", "later\n");
}

/*
 * On a split index, such a file makes git update-index run twice (the
 * second stages the committed blob): the second run's file must not be
 * taken for our copy (a freed inode number is soon given again), or the
 * commit's paths stay out of the index and the user's next commit
 * deletes them.
 */
START_TEST(test_index_split_file_changed)
{
	struct gitc_result res;
	struct gitc_change c[3];
	char b[3][512];

	write_file("README", "readme\n");
	ck_assert_int_eq(sh("git add README && git commit -q -m base && "
			    "git config core.splitIndex true && "
			    "git update-index --split-index"),
			 0);
	for (int round = 0; round < 3; round++) {
		c[0] = put(5, 2, 1, round ? "again" : "one", b[0],
			   sizeof(b[0]));
		c[1] = put(5, 3, 1 + round, "two", b[1], sizeof(b[1]));
		c[2] = put(6, 1, 2 + round, "three", b[2], sizeof(b[2]));
		gitc_set_hook(g, change_after_read, NULL);
		ck_assert_int_eq(gitc_commit(g, c, 3, NULL, &res, errmsg,
					     sizeof(errmsg)),
				 0);
		gitc_set_hook(g, NULL, NULL);
		ck_assert_str_eq(errmsg, "");
		ck_assert_int_eq(res.index_way, GITC_INDEX_GIT);
		ck_assert(res.index_written);
		/* the index holds what HEAD holds, the change is unstaged */
		ck_assert_str_eq(out("git diff --cached --name-only HEAD"), "");
		ck_assert_str_eq(out("git diff --name-only"),
				 ".vector-memory/x-005/y-2-z-1.json\n");
	}
	ck_assert_str_eq(out("git ls-files .vector-memory | wc -l"), "8\n");
	fsck_clean();
}
END_TEST

/* A user's split index with v4 and the untracked cache all at once. */
START_TEST(test_index_everything)
{
	format_case("git config feature.manyFiles true && "
		    "git config core.splitIndex true && "
		    "git update-index --index-version 4 --split-index "
		    "--untracked-cache && git status >/dev/null",
		    GITC_INDEX_GIT, false, "M  README\n");
}
END_TEST

/*
 * A user's entry that is racily clean in the index we read (written in
 * the second of the index) would look clean in the index we write a
 * second later, and a same-second edit of the same size would be missed
 * by git: as git's own writer does, it is smudged (size 0) so git checks
 * its content again; entries that are not racy are copied as they are.
 */
START_TEST(test_racy_user_entry_smudged)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	write_file("user.txt", "aaaa\n");
	write_file("old.txt", "old\n");
	ck_assert_int_eq(sh("touch -d @1700000000 old.txt && "
			    "touch -d @1700000100 user.txt && "
			    "git add user.txt old.txt && "
			    "touch -d @1700000100 .git/index"),
			 0);
	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_int_eq(res.index_way, GITC_INDEX_OWN);
	ck_assert_str_eq(out("git ls-files --debug user.txt | "
			     "sed -n 's/.*size: \\([0-9]*\\).*/\\1/p'"),
			 "0\n");
	ck_assert_str_eq(out("git ls-files --debug old.txt | "
			     "sed -n 's/.*size: \\([0-9]*\\).*/\\1/p'"),
			 "4\n");
	/* git sees through it: nothing differs */
	ck_assert_str_eq(out("git status --porcelain"),
			 "A  old.txt\nA  user.txt\n");
	fsck_clean();
}
END_TEST

/*
 * Index v4 names are prefix-compressed against the entry before: random
 * rounds of additions, deletions (of present and absent files) and
 * changes, next to each other and to the user's entries, must leave an
 * index git reads back exactly as the tree is.
 */
START_TEST(test_index_v4_random)
{
	static char rpaths[64][32];
	unsigned seed = 7;
	struct gitc_change c[64];
	struct gitc_result res;

	write_file(".vector-memory.txt", "a user file named like ours\n");
	write_file("z-user/file", "another\n");
	ck_assert_int_eq(sh("git config index.version 4 && git add -A && "
			    "git commit -q -m base && "
			    "git update-index --index-version 4"),
			 0);
	for (int round = 0; round < 8; round++) {
		int n = 0;

		for (int k = 0; k < 24; k++) {
			struct coord at = {(int)(rand_r(&seed) % 6) + 1,
					   (int)(rand_r(&seed) % 5) + 1,
					   (int)(rand_r(&seed) % 3) + 2};
			char rel[80], buf[512];
			bool dup = false;

			coord_path(&at, rpaths[n], sizeof(rpaths[n]));
			for (int i = 0; i < n; i++)
				dup |= strcmp(rpaths[i], rpaths[n]) == 0;
			if (dup)
				continue;
			snprintf(rel, sizeof(rel), ".vector-memory/%.31s",
				 rpaths[n]);
			if (rand_r(&seed) % 3 == 0) {
				sh("rm -f '%s'", rel);
			} else {
				dtext(at.x, at.y, at.z, round % 2 ? "b" : "a",
				      buf, sizeof(buf));
				write_file(rel, buf);
			}
			c[n] = (struct gitc_change){rpaths[n], false, false};
			n++;
		}
		sh("find .vector-memory -type d -empty -delete");
		ck_assert_int_eq(gitc_commit(g, c, (size_t)n, NULL, &res,
					     errmsg, sizeof(errmsg)),
				 0);
		ck_assert_str_eq(errmsg, "");
		ck_assert_int_eq(res.index_way, GITC_INDEX_OWN);
		ck_assert_str_eq(out("head -c 8 .git/index | tail -c 1 | "
				     "od -An -tu1 | tr -d ' '"),
				 "4\n");
		ck_assert_str_eq(out("git ls-files | sort"),
				 out("{ echo .vector-memory.txt; "
				     "echo z-user/file; find .vector-memory "
				     "-type f; } | sort"));
		/* (entries of the round before, written in the second of
		 * the index, are smudged: git diff-files, which does not
		 * refresh, lists them; git status checks them) */
		ck_assert_str_eq(out("git diff-index --cached --name-only "
				     "HEAD"),
				 "");
		ck_assert_str_eq(out("git status --porcelain"), "");
	}
	fsck_clean();
}
END_TEST

/* Does this process map a pack file? */
static bool pack_mapped(void)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert_ptr_nonnull(f);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, ".pack\n") != NULL;
	fclose(f);
	return found;
}

/* Decision files at the first n coordinates in (x, y, z) order, 20 a
 * directory, the i-th by agent-<i>; with same, the last two of every ten
 * hold the same bytes, "same\n". Their changes in c, their paths in
 * names. */
static void put_many(int n, char (*names)[32], struct gitc_change *c, bool same)
{
	for (int i = 0; i < n; i++) {
		struct coord at = {i / 20 + 1, (i % 20) / 4 + 1, i % 4 + 1};
		char rel[80], buf[128];

		coord_path(&at, names[i], 32);
		snprintf(rel, sizeof(rel), ".vector-memory/%.31s", names[i]);
		if (same && i % 10 >= 8)
			snprintf(buf, sizeof(buf), "same\n");
		else
			snprintf(buf, sizeof(buf),
				 "{\n  \"content\": \"c\",\n  \"agent_id\": "
				 "\"agent-%d\"\n}\n",
				 i);
		write_file(rel, buf);
		c[i] = (struct gitc_change){names[i], false, false};
	}
}

/* A batch of many new files goes into one pack (each content once),
 * which the commit does not read back: no check that each blob exists
 * maps the pack (its pages would stay resident). */
START_TEST(test_big_batch_packed)
{
	static char bpaths[400][32];
	struct gitc_change c[400];
	struct gitc_result res;

	put_many(400, bpaths, c, true);
	commit_ok(c, 400, NULL, &res);
	ck_assert(!pack_mapped());
	ck_assert_str_eq(out("git count-objects -v | sed -n 's/^packs: //p'"),
			 "1\n");
	ck_assert_str_eq(out("git ls-tree -r HEAD | wc -l"), "400\n");
	ck_assert_str_eq(out("git status --porcelain"), "");
	ck_assert_str_eq(out("git cat-file -p HEAD:.vector-memory/x-001/"
			     "y-3-z-2.json"),
			 "same\n");
	/* The message names the first 100 paths, their agents read back
	 * from the pack, and counts the others. */
	ck_assert_str_eq(out("git log -1 --format=%%B | sed -n '1p;3,5p;11p'"),
			 "vector-memory: 400 decisions (x 1-20, y 1-5, z 1-4)\n"
			 "x-001/y-1-z-1.json by agent-0\n"
			 "x-001/y-1-z-2.json by agent-1\n"
			 "x-001/y-1-z-3.json by agent-2\n"
			 "x-001/y-3-z-1.json by unknown\n");
	ck_assert_str_eq(out("git log -1 --format=%%B | sed -n '102,$p'"),
			 "x-005/y-5-z-4.json by unknown\n"
			 "and 300 more\n\n");
	fsck_clean();
}
END_TEST

/* The agents of the paths a message names are read from the files on the
 * way; when unchanged paths come first, those named after them are read
 * back from their blobs. */
START_TEST(test_message_agents_read_back)
{
	static char bpaths[GITC_MESSAGE_PATHS + 2][32];
	struct gitc_change c[GITC_MESSAGE_PATHS + 2];
	struct gitc_result res;

	put_many(GITC_MESSAGE_PATHS + 2, bpaths, c, false);
	commit_ok(c, 2, NULL, &res); /* the first two, committed alone */
	commit_ok(c, GITC_MESSAGE_PATHS + 2, NULL, &res);
	ck_assert(!c[0].changed && !c[1].changed && c[2].changed);
	ck_assert_str_eq(out("git log -1 --format=%%B | sed -n '3p;100,$p'"),
			 "x-001/y-1-z-3.json by agent-2\n"
			 "x-005/y-5-z-4.json by agent-99\n"
			 "x-006/y-1-z-1.json by agent-100\n"
			 "x-006/y-1-z-2.json by agent-101\n\n");
	fsck_clean();
}
END_TEST

/* The index a commit replaces is handed to the caller of gitc_commit_as
 * still open (its last close frees its pages, off the sync's path);
 * gitc_commit closes it itself. */
START_TEST(test_replaced_index_held_open)
{
	struct gitc_result res;
	struct gitc_change c;
	struct stat before, held, after;
	char buf[512], index[128];

	snprintf(index, sizeof(index), "%s/.git/index", tmpdir);
	c = put(2, 1, 2, "first", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_int_eq(res.replaced_fd, -1);
	ck_assert_int_eq(stat(index, &before), 0);
	c = put(2, 1, 2, "second", buf, sizeof(buf));
	ck_assert_int_eq(gitc_commit_as(g, NULL, &c, 1, NULL, &res, errmsg,
					sizeof(errmsg)),
			 0);
	ck_assert(res.index_written);
	ck_assert_int_ge(res.replaced_fd, 0);
	ck_assert_int_eq(fstat(res.replaced_fd, &held), 0);
	ck_assert_int_eq(stat(index, &after), 0);
	ck_assert_uint_eq(held.st_ino, before.st_ino);
	ck_assert_uint_ne(after.st_ino, before.st_ino);
	ck_assert_uint_eq(held.st_nlink, 0); /* replaced, not yet freed */
	ck_assert_int_eq(close(res.replaced_fd), 0);
	/* nothing to commit: nothing replaced */
	ck_assert_int_eq(gitc_commit_as(g, NULL, &c, 1, NULL, &res, errmsg,
					sizeof(errmsg)),
			 0);
	ck_assert_int_eq(res.replaced_fd, -1);
	ck_assert_str_eq(out("git status --porcelain"), "");
}
END_TEST

/* Both ways stage the same entries. */
START_TEST(test_index_ways_agree)
{
	struct gitc_result res;
	struct gitc_change c[2];
	char b[2][512], own[4096];

	c[0] = put(5, 2, 1, "one", b[0], sizeof(b[0]));
	c[1] = put(7, 1, 1, "two", b[1], sizeof(b[1]));
	ck_assert_int_eq(sh("touch -d '-5 seconds' .vector-memory/*/* "
			    ".vector-memory/metadata.json"),
			 0);
	gitc_force_index_way(g, GITC_INDEX_OWN);
	commit_ok(c, 2, NULL, &res);
	ck_assert_int_eq(res.index_way, GITC_INDEX_OWN);
	snprintf(own, sizeof(own), "%s",
		 out("git ls-files -s --debug | grep -v '^  flags'"));
	ck_assert_int_eq(sh("git rm -q --cached -r .vector-memory"), 0);
	gitc_force_index_way(g, GITC_INDEX_GIT);
	ck_assert_int_eq(
		gitc_commit(g, c, 2, NULL, &res, errmsg, sizeof(errmsg)), 0);
	ck_assert_str_eq(res.commit, ""); /* HEAD has them: only the index */
	ck_assert(res.index_written);
	ck_assert_int_eq(res.index_way, GITC_INDEX_GIT);
	ck_assert_str_eq(out("git ls-files -s --debug | grep -v '^  flags'"),
			 own);
	gitc_force_index_way(g, -1);
	fsck_clean();
}
END_TEST

/* A path of ours in a conflict: the commit waits and stages nothing. */
START_TEST(test_index_conflict_defers)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], h[64];
	int rc;

	c = put(5, 2, 2, "base", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_int_eq(sh("git checkout -q -b side && "
			    "echo side > .vector-memory/x-005/y-2-z-2.json && "
			    "git commit -q -am side && git checkout -q main && "
			    "echo main > .vector-memory/x-005/y-2-z-2.json && "
			    "git commit -q -am main && "
			    "git merge -q side >/dev/null 2>&1; "
			    "git merge --abort; "
			    "git cherry-pick side >/dev/null 2>&1; "
			    "git cherry-pick --quit && "
			    "git ls-files -u | wc -l | grep -qx 3"),
			 0);
	snprintf(h, sizeof(h), "%s", head());
	c = put(5, 2, 2, "ours", buf, sizeof(buf));
	rc = gitc_commit(g, &c, 1, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 1);
	ck_assert_str_eq(res.deferred,
			 "conflict in .vector-memory/x-005/y-2-z-2.json");
	ck_assert_str_eq(head(), h);
	ck_assert_str_eq(out("git ls-files -u | wc -l"), "3\n");
	ck_assert_int_ne(sh("test -e .git/index.lock"), 0);
}
END_TEST

/* An index we cannot read: an error that says so, nothing moved. */
START_TEST(test_index_corrupt)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], h[64];
	int rc;

	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	snprintf(h, sizeof(h), "%s", head());
	ck_assert_int_eq(
		sh("cp .git/index index.good && "
		   "printf 'DIRC\\0\\0\\0\\2\\0\\0\\0\\7garbage-garbage-"
		   "garbage-garbage-garbage' > .git/index"),
		0);
	c = put(5, 2, 1, "two", buf, sizeof(buf));
	rc = gitc_commit(g, &c, 1, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_lt(rc, 0);
	ck_assert(res.index_error);
	ck_assert_ptr_nonnull(strstr(errmsg, "index"));
	ck_assert_str_eq(head(), h); /* the branch did not move */
	ck_assert_int_ne(sh("test -e .git/index.lock"), 0);
	ck_assert_int_eq(sh("mv index.good .git/index"), 0);
	commit_ok(&c, 1, NULL, &res);
	ck_assert_str_eq(out("git status --porcelain"), "");
	fsck_clean();
}
END_TEST

/* ---- stale locks after a crash ---- */

/* Start a commit's bookkeeping as a crashed run of ours would leave it:
 * the marker and index.lock, recorded. */
static void crash_with_lock(void)
{
	struct gitmark m;
	struct gitlock l;
	char index[256];

	snprintf(index, sizeof(index), "%s/.git/index", tmpdir);
	ck_assert_int_eq(gitmark_init(&m, &sd), 0);
	ck_assert_int_eq(gitmark_begin(&m), 0);
	ck_assert_int_eq(gitlock_take(&l, index, &m), 0);
	close(l.fd); /* "killed": nothing released */
	ck_assert_int_eq(sh("touch .git/vmem/index.next"), 0);
}

START_TEST(test_stale_ours_removed)
{
	struct gitlock_stale st;

	crash_with_lock();
	ck_assert_int_eq(gitc_clear_stale_locks(g, &st), 0);
	ck_assert(st.marker);
	ck_assert_int_eq(st.n_removed, 1);
	ck_assert_int_eq(st.n_kept, 0);
	ck_assert_ptr_nonnull(strstr(st.removed, "index.lock"));
	ck_assert_int_ne(sh("test -e .git/index.lock"), 0);
	ck_assert_str_eq(out("ls .git/vmem"), "");
}
END_TEST

START_TEST(test_stale_foreign_kept)
{
	struct gitlock_stale st;

	crash_with_lock();
	/* a git command took the lock after ours went away */
	ck_assert_int_eq(sh("rm .git/index.lock && echo git > "
			    ".git/index.lock"),
			 0);
	ck_assert_int_eq(gitc_clear_stale_locks(g, &st), 0);
	ck_assert_int_eq(st.n_removed, 0);
	ck_assert_int_eq(st.n_kept, 1);
	ck_assert_ptr_nonnull(strstr(st.kept, "index.lock"));
	ck_assert_str_eq(out("cat .git/index.lock"), "git\n");
	ck_assert_int_ne(sh("test -e .git/vmem/committing"), 0);
}
END_TEST

/* A marker written by a process that still runs is nobody's leftover. */
START_TEST(test_stale_owner_alive)
{
	struct gitlock_stale st;
	char text[512];
	FILE *f;

	crash_with_lock();
	snprintf(text, sizeof(text), "%s/.git/vmem/committing", tmpdir);
	f = fopen(text, "r+");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq((int)fread(text, 1, sizeof(text) - 1, f) > 0, 1);
	fclose(f);
	ck_assert_int_eq(sh("sed -i 's/^pid .*/pid %ld/; s/^start .*/start "
			    "%llu/' .git/vmem/committing",
			    (long)getppid(),
			    gitlock_proc_start((long)getppid())),
			 0);
	ck_assert_int_eq(gitc_clear_stale_locks(g, &st), 0);
	ck_assert(st.owner_alive);
	ck_assert_int_eq(st.n_removed, 0);
	ck_assert_int_eq(sh("test -e .git/index.lock"), 0);
	/* a pid reused by another process: its start time differs */
	ck_assert_int_eq(sh("sed -i 's/^start .*/start 1/' "
			    ".git/vmem/committing"),
			 0);
	ck_assert_int_eq(gitc_clear_stale_locks(g, &st), 0);
	ck_assert(!st.owner_alive);
	ck_assert_int_eq(st.n_removed, 1);
	ck_assert_int_ne(sh("test -e .git/index.lock"), 0);
}
END_TEST

/* gitc_commit must wait with why, writing nothing. */
static void expect_deferred(const char *why)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], h[64], objs[64];
	int rc;

	snprintf(h, sizeof(h), "%s", head());
	snprintf(objs, sizeof(objs), "%s", out("git count-objects"));
	c = put(7, 1, 1, "waiting", buf, sizeof(buf));
	rc = gitc_commit(g, &c, 1, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 1);
	ck_assert_str_eq(res.deferred, why);
	ck_assert_str_eq(res.commit, "");
	ck_assert_str_eq(head(), h);
	ck_assert_str_eq(out("git count-objects"), objs);
}

START_TEST(test_defer_detached)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_int_eq(sh(GIT "checkout -q --detach"), 0);
	expect_deferred("HEAD is detached");
	ck_assert_int_eq(sh(GIT "checkout -q main"), 0);
	c = put(7, 1, 1, "waiting", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_str_eq(head(), res.commit);
	fsck_clean();
}
END_TEST

/* A conflicting change of f.txt on branch side. */
static void make_conflict(void)
{
	write_file("f.txt", "base\n");
	ck_assert_int_eq(sh("git add f.txt && git commit -q -m base && "
			    "git checkout -q -b side"),
			 0);
	write_file("f.txt", "side\n");
	ck_assert_int_eq(sh("git commit -q -am side && git checkout -q main"),
			 0);
	write_file("f.txt", "main\n");
	ck_assert_int_eq(sh("git commit -q -am main"), 0);
}

START_TEST(test_defer_merge)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	make_conflict();
	ck_assert_int_ne(sh("git merge -q side >/dev/null 2>&1"), 0);
	expect_deferred("merge in progress");
	ck_assert_int_eq(sh("git merge --abort"), 0);
	c = put(7, 1, 1, "waiting", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	fsck_clean();
}
END_TEST

START_TEST(test_defer_cherry_pick_and_rebase)
{
	make_conflict();
	ck_assert_int_ne(sh("git cherry-pick side >/dev/null 2>&1"), 0);
	expect_deferred("cherry-pick in progress");
	ck_assert_int_eq(sh("git cherry-pick --abort"), 0);
	ck_assert_int_ne(sh("git rebase side >/dev/null 2>&1"), 0);
	expect_deferred("rebase in progress");
	ck_assert_int_eq(sh("git rebase --abort"), 0);
	fsck_clean();
}
END_TEST

START_TEST(test_defer_index_lock)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_int_eq(sh("touch .git/index.lock"), 0);
	expect_deferred("index.lock is held by another process");
	ck_assert_int_eq(sh("rm .git/index.lock"), 0);
	c = put(7, 1, 1, "waiting", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	fsck_clean();
}
END_TEST

START_TEST(test_identity_fallback)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512];

	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_str_eq(out("git log -1 --format='%%an <%%ae>|%%cn <%%ce>'"),
			 "vmemd <vmemd@localhost>|vmemd <vmemd@localhost>\n");
	fsck_clean();
}
END_TEST

START_TEST(test_worktree)
{
	struct gitc_result res;
	struct gitc_change c;
	struct gitc *main_g = g;
	struct statedir wt_sd;
	char buf[512], wt[128], wt_gitdir[160], main_head[64], parent[80];
	int rc;

	c = put(5, 2, 1, "main", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	snprintf(main_head, sizeof(main_head), "%s", head());
	ck_assert_int_eq(sh("git worktree add -q wt -b wtb"), 0);
	snprintf(wt, sizeof(wt), "%s/wt", tmpdir);
	snprintf(wt_gitdir, sizeof(wt_gitdir), "%s/.git/worktrees/wt", tmpdir);
	ck_assert_int_eq(statedir_init(&wt_sd, wt_gitdir, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(gitc_open(&g, wt, &wt_sd, errmsg, sizeof(errmsg)), 0);
	ck_assert_int_eq(sh("touch .git/worktrees/wt/index.lock"), 0);
	write_file("wt/.vector-memory/x-005/y-2-z-1.json", "wt\n");
	rc = gitc_commit(g, &c, 1, NULL, &res, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 1);
	ck_assert_str_eq(res.deferred, "index.lock is held by another process");
	ck_assert_int_eq(sh("rm .git/worktrees/wt/index.lock"), 0);
	commit_ok(&c, 1, NULL, &res);
	gitc_free(g);
	statedir_done(&wt_sd);
	g = main_g;
	ck_assert_str_eq(head(), main_head);
	snprintf(parent, sizeof(parent), "%s\n", main_head);
	ck_assert_str_eq(out("git log -1 --format=%%P wtb"), parent);
	ck_assert_str_eq(out("git show wtb:.vector-memory/x-005/y-2-z-1.json"),
			 "wt\n");
	ck_assert_str_eq(out("cd wt && git diff --cached --name-only"), "");
	fsck_clean();
}
END_TEST

/* The commit marker lives in the state directory and is never followed
 * through a symbolic link planted there: a commit neither writes nor
 * truncates the link's target, and the link goes with the marker. */
START_TEST(test_marker_symlink_not_followed)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], target[128], link[128];
	struct stat st;

	write_file("precious", "precious\n");
	snprintf(target, sizeof(target), "%s/precious", tmpdir);
	snprintf(link, sizeof(link), "%s/committing", sd.path);
	ck_assert_int_eq(symlink(target, link), 0);
	c = put(5, 2, 1, "one", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_str_eq(out("cat precious"), "precious\n");
	ck_assert_int_eq(lstat(link, &st), -1);
	ck_assert_int_eq(errno, ENOENT);
}
END_TEST

START_TEST(test_open_errors)
{
	struct gitc *g2 = (struct gitc *)1;
	char dir[128];

	snprintf(dir, sizeof(dir), "%s/nothing-here", tmpdir);
	ck_assert_int_lt(gitc_open(&g2, dir, &sd, errmsg, sizeof(errmsg)), 0);
	ck_assert_ptr_null(g2);
	ck_assert_str_ne(errmsg, "");
}
END_TEST

struct version {
	char commit[41];
	int64_t at;
	char text[512];
	bool deleted;
};

struct versions {
	size_t n;
	struct version v[8];
	int stop_at; /* return 7 on this call (1-based), 0: never */
};

static int version_cb(void *ctx, const char *commit, int64_t at,
		      const char *text, size_t len)
{
	struct versions *vs = ctx;
	struct version *v = &vs->v[vs->n++];

	ck_assert_uint_le(vs->n, 8);
	snprintf(v->commit, sizeof(v->commit), "%s", commit);
	v->at = at;
	v->deleted = !text;
	if (text) {
		ck_assert_uint_eq(strlen(text), len);
		snprintf(v->text, sizeof(v->text), "%s", text);
	}
	return (int)vs->n == vs->stop_at ? 7 : 0;
}

START_TEST(test_history)
{
	struct gitc_result r[4];
	struct gitc_change c;
	struct versions vs = {0};
	struct coord at = {5, 2, 1};
	char b1[512], b2[512], b3[512];
	int rc;

	rc = gitc_history(g, &at, 0, version_cb, &vs, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0); /* unborn: no history */
	ck_assert_uint_eq(vs.n, 0);

	c = put(5, 2, 1, "v1", b1, sizeof(b1));
	commit_ok(&c, 1, NULL, &r[0]);
	c = put(5, 2, 1, "v2", b2, sizeof(b2));
	commit_ok(&c, 1, NULL, &r[1]);
	c = put(6, 1, 1, "unrelated", b3, sizeof(b3));
	commit_ok(&c, 1, NULL, &r[2]);
	c = del(5, 2, 1);
	commit_ok(&c, 1, NULL, &r[3]);

	rc = gitc_history(g, &at, 0, version_cb, &vs, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(vs.n, 3);
	ck_assert_str_eq(vs.v[0].commit, r[3].commit);
	ck_assert(vs.v[0].deleted);
	ck_assert_int_eq(vs.v[0].at, r[3].committed_at);
	ck_assert_str_eq(vs.v[1].commit, r[1].commit);
	ck_assert(!vs.v[1].deleted);
	ck_assert_str_eq(vs.v[1].text, b2);
	ck_assert_str_eq(vs.v[2].commit, r[0].commit);
	ck_assert_str_eq(vs.v[2].text, b1);

	memset(&vs, 0, sizeof(vs));
	rc = gitc_history(g, &at, 2, version_cb, &vs, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(vs.n, 2);

	memset(&vs, 0, sizeof(vs));
	vs.stop_at = 1;
	rc = gitc_history(g, &at, 0, version_cb, &vs, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 7);
	ck_assert_uint_eq(vs.n, 1);

	memset(&vs, 0, sizeof(vs));
	at.x = 6;
	at.y = 1;
	rc = gitc_history(g, &at, 0, version_cb, &vs, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(vs.n, 1);
	ck_assert_str_eq(vs.v[0].commit, r[2].commit);
	ck_assert_str_eq(vs.v[0].text, b3);
	fsck_clean();
}
END_TEST

START_TEST(test_history_first_parent)
{
	struct gitc_result r1;
	struct gitc_change c;
	struct versions vs = {0};
	struct coord at = {5, 2, 1};
	char b1[512];
	int rc;

	c = put(5, 2, 1, "v1", b1, sizeof(b1));
	commit_ok(&c, 1, NULL, &r1);
	/* a side branch changes the file; main merges it without taking it */
	ck_assert_int_eq(sh("git checkout -q -b side && "
			    "echo side > .vector-memory/x-005/y-2-z-1.json && "
			    "git commit -q -am side && git checkout -q main && "
			    "git merge -q -s ours --no-edit side"),
			 0);
	rc = gitc_history(g, &at, 0, version_cb, &vs, errmsg, sizeof(errmsg));
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(vs.n, 1);
	ck_assert_str_eq(vs.v[0].commit, r1.commit);
	fsck_clean();
}
END_TEST

static int rollback(int xt, int yt, char commit[41], char *subj, int64_t *at)
{
	return gitc_rollback_point(g, xt, yt, commit, subj, 128, at, errmsg,
				   sizeof(errmsg));
}

START_TEST(test_rollback_point)
{
	struct gitc_result r[3];
	struct gitc_change c;
	char b[3][512], commit[41], subj[128];
	int64_t at = 0;

	ck_assert_int_eq(rollback(1, 1, commit, subj, &at), 0); /* unborn */
	c = put(1, 1, 1, "a", b[0], sizeof(b[0]));
	commit_ok(&c, 1, "c1", &r[0]);
	c = put(2, 3, 1, "b", b[1], sizeof(b[1]));
	commit_ok(&c, 1, "c2", &r[1]);
	c = put(3, 1, 1, "c", b[2], sizeof(b[2]));
	commit_ok(&c, 1, "c3\n\nbody", &r[2]);

	ck_assert_int_eq(rollback(4, 1, commit, subj, &at), 1);
	ck_assert_str_eq(commit, r[2].commit);
	ck_assert_str_eq(subj, "c3");
	ck_assert_int_eq(at, r[2].committed_at);
	ck_assert_int_eq(rollback(3, 1, commit, subj, &at), 1);
	ck_assert_str_eq(commit, r[1].commit);
	ck_assert_str_eq(subj, "c2");
	ck_assert_int_eq(rollback(3, 2, commit, subj, &at), 1);
	ck_assert_str_eq(commit, r[2].commit);
	ck_assert_int_eq(rollback(2, 4, commit, subj, &at), 1);
	ck_assert_str_eq(commit, r[1].commit);
	ck_assert_int_eq(rollback(2, 3, commit, subj, &at), 1);
	ck_assert_str_eq(commit, r[0].commit);
	ck_assert_str_eq(subj, "c1");
	ck_assert_int_eq(rollback(1, 1, commit, subj, &at), 0);
	ck_assert_str_eq(commit, "");

	/* a user commit without .vector-memory on top, then one before */
	write_file("u.txt", "u\n");
	ck_assert_int_eq(sh("git add u.txt && git commit -q -m user"), 0);
	ck_assert_int_eq(rollback(4, 1, commit, subj, &at), 1);
	ck_assert_str_eq(subj, "user"); /* .vector-memory unchanged: ok */
	ck_assert_int_eq(rollback(1, 1, commit, subj, &at), 0);
	fsck_clean();
}
END_TEST

START_TEST(test_rollback_empty_memory)
{
	struct gitc_result res;
	struct gitc_change c;
	char buf[512], commit[41], subj[128];
	int64_t at;

	write_file("README", "r\n");
	ck_assert_int_eq(sh("git add README && git commit -q -m base"), 0);
	c = put(1, 1, 1, "a", buf, sizeof(buf));
	commit_ok(&c, 1, NULL, &res);
	ck_assert_int_eq(rollback(1, 1, commit, subj, &at), 1);
	ck_assert_str_eq(subj, "base");
	c = del(1, 1, 1);
	commit_ok(&c, 1, "emptied", &res);
	/* only metadata.json is left: qualifies */
	ck_assert_int_eq(rollback(1, 1, commit, subj, &at), 1);
	ck_assert_str_eq(subj, "emptied");
	ck_assert_str_eq(commit, res.commit);
	fsck_clean();
}
END_TEST

static Suite *gitc_suite(void)
{
	Suite *s = suite_create("gitc");
	TCase *tc = tcase_create("commit");
	TCase *anon = tcase_create("identity");
	TCase *hist = tcase_create("history");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_message);
	tcase_add_test(tc, test_message_bounded);
	tcase_add_test(tc, test_unborn_root_commit);
	tcase_add_test(tc, test_second_commit_and_message);
	tcase_add_test(tc, test_noop_commit);
	tcase_add_test(tc, test_delete);
	tcase_add_test(tc, test_user_changes_preserved);
	tcase_add_test(tc, test_working_file_committed_as_is);
	tcase_add_test(tc, test_nested_paths);
	tcase_add_test(tc, test_user_commit_between);
	tcase_add_test(tc, test_tip_moved_during_commit);
	tcase_add_test(tc, test_tip_moved_unborn);
	tcase_add_test(tc, test_defer_detached);
	tcase_add_test(tc, test_defer_merge);
	tcase_add_test(tc, test_defer_cherry_pick_and_rebase);
	tcase_add_test(tc, test_defer_index_lock);
	tcase_add_test(tc, test_lock_held_throughout);
	tcase_add_test(tc, test_worktree);
	tcase_add_test(tc, test_open_errors);
	tcase_add_test(tc, test_index_v2);
	tcase_add_test(tc, test_index_v3);
	tcase_add_test(tc, test_index_v4);
	tcase_add_test(tc, test_index_split);
	tcase_add_test(tc, test_index_untracked_cache);
	tcase_add_test(tc, test_index_fsmonitor);
	tcase_add_test(tc, test_index_everything);
	tcase_add_test(tc, test_index_split_file_changed);
	tcase_add_test(tc, test_index_ways_agree);
	tcase_add_test(tc, test_big_batch_packed);
	tcase_add_test(tc, test_message_agents_read_back);
	tcase_add_test(tc, test_replaced_index_held_open);
	tcase_add_test(tc, test_index_v4_random);
	tcase_add_test(tc, test_racy_user_entry_smudged);
	tcase_add_test(tc, test_index_conflict_defers);
	tcase_add_test(tc, test_index_corrupt);
	tcase_add_test(tc, test_stale_ours_removed);
	tcase_add_test(tc, test_stale_foreign_kept);
	tcase_add_test(tc, test_stale_owner_alive);
	tcase_add_test(tc, test_marker_symlink_not_followed);
	suite_add_tcase(s, tc);

	tcase_set_timeout(anon, 60);
	tcase_add_checked_fixture(anon, setup_anon, teardown);
	tcase_add_test(anon, test_identity_fallback);
	suite_add_tcase(s, anon);

	tcase_set_timeout(hist, 60);
	tcase_add_checked_fixture(hist, setup, teardown);
	tcase_add_test(hist, test_history);
	tcase_add_test(hist, test_history_first_parent);
	tcase_add_test(hist, test_rollback_point);
	tcase_add_test(hist, test_rollback_empty_memory);
	suite_add_tcase(s, hist);
	return s;
}

int main(void)
{
	static const int levels[] = {
		GIT_CONFIG_LEVEL_SYSTEM, GIT_CONFIG_LEVEL_XDG,
		GIT_CONFIG_LEVEL_GLOBAL, GIT_CONFIG_LEVEL_PROGRAMDATA};
	int rc;
	size_t i;

	/* No identity but a repository's own: an empty HOME, no system
	 * config, for libgit2 and the git program alike. */
	strcpy(home, "/tmp/vmem-test-gitc-home-XXXXXX");
	if (!mkdtemp(home))
		return EXIT_FAILURE;
	setenv("HOME", home, 1);
	setenv("XDG_CONFIG_HOME", home, 1);
	setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
	unsetenv("GIT_DIR");
	unsetenv("GIT_WORK_TREE");
	unsetenv("GIT_INDEX_FILE");
	git_libgit2_init();
	for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], home);
	rc = run_suite(gitc_suite());
	git_libgit2_shutdown();
	rmdir(home);
	return rc;
}

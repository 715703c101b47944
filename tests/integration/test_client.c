/*
 * Integration suite of libvmem: each test gets a fresh temporary git
 * repository and its own socket inside it; opening with autostart=1
 * starts the real vmemd ($VMEMD), which is stopped with server.shutdown
 * and awaited (socket refused, tree lock free) when the test ends, and
 * again by a sweep of all test directories at the end (a failed test
 * skips its teardown). A scripted fake server covers what a well-behaved daemon
 * never does (notifications, foreign ids, silence, hang-ups).
 */
#include "vmem.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tdir[PATH_MAX];	  /* canonical temporary repository */
static char tsock[PATH_MAX + 16]; /* the daemon's socket in it */
static char base[64];		  /* every test's directory is made in it */

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static int run(const char *cmd)
{
	int st = system(cmd);

	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static struct vmem_options opts_for(int autostart, const char *agent)
{
	struct vmem_options o = {0};

	o.repo = tdir;
	o.socket = tsock;
	o.agent_id = agent;
	o.autostart = autostart;
	o.timeout_ms = 20000;
	return o;
}

static vmem_client *open_ok(const char *agent)
{
	struct vmem_options o = opts_for(1, agent);
	struct vmem_error err;
	vmem_client *c = NULL;
	int rc;

	rc = vmem_client_open(&c, &o, &err);
	ck_assert_msg(rc == 0, "open: %d %s", rc, err.message);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* Fill sun_path; false when path does not fit. No ck_assert: the sweep
 * runs outside any test. */
static bool set_path(struct sockaddr_un *sa, const char *path)
{
	size_t n = strlen(path);

	if (n >= sizeof(sa->sun_path))
		return false;
	memcpy(sa->sun_path, path, n + 1);
	return true;
}

static bool connect_refused(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc;

	if (!set_path(&sa, path))
		return false;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return rc < 0;
}

/* The daemon has exited once its tree lock can be taken. */
static bool lock_free(void)
{
	char path[PATH_MAX + 32];
	int fd;
	bool ok;

	snprintf(path, sizeof(path), "%s/.git/vmem/lock", tdir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	ok = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return ok;
}

/* Stop the daemon (if any) and wait for it, bounded; true if it stopped. */
static bool stop_daemon(void)
{
	struct vmem_options o = opts_for(0, NULL);
	struct vmem_error err;
	vmem_client *c = NULL;
	int i;

	if (vmem_client_open(&c, &o, &err) == 0) {
		vmem_shutdown(c, &err);
		vmem_client_free(c);
	}
	for (i = 0; i < 500; i++) {
		if (connect_refused(tsock) && lock_free())
			return true;
		sleep_ms(20);
	}
	return false;
}

static void setup(void)
{
	char tmpl[sizeof(base) + 16];
	char cmd[PATH_MAX + 32];

	snprintf(tmpl, sizeof(tmpl), "%s/t-XXXXXX", base);
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	ck_assert_ptr_nonnull(realpath(tmpl, tdir));
	snprintf(tsock, sizeof(tsock), "%s/d.sock", tdir);
	snprintf(cmd, sizeof(cmd), "git init -q '%s'", tdir);
	ck_assert_int_eq(run(cmd), 0);
	unsetenv("VMEM_SOCKET");
	unsetenv("VMEM_REPO");
	unsetenv("VMEM_NO_AUTOSTART");
}

static void teardown(void)
{
	ck_assert_msg(stop_daemon(), "the daemon did not stop");
}

/*
 * A failed assertion ends a forked test at once, without its teardown:
 * stop whatever daemon each test left behind, then remove everything.
 */
static void sweep(void)
{
	char cmd[sizeof(base) + 16];
	struct dirent *e;
	DIR *d = opendir(base);

	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "t-", 2) != 0)
			continue;
		snprintf(tdir, sizeof(tdir), "%s/%s", base, e->d_name);
		snprintf(tsock, sizeof(tsock), "%s/d.sock", tdir);
		stop_daemon();
	}
	if (d)
		closedir(d);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	run(cmd);
}

static json_t *parse(const char *text)
{
	json_t *j;

	ck_assert_ptr_nonnull(text);
	j = json_loads(text, JSON_DECODE_ANY, NULL);
	ck_assert_msg(j != NULL, "not JSON: %s", text);
	return j;
}

static json_int_t int_at(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	ck_assert_msg(json_is_integer(v), "%s is not an integer", key);
	return json_integer_value(v);
}

static const char *str_at(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	ck_assert_msg(json_is_string(v), "%s is not a string", key);
	return json_string_value(v);
}

static void expect_remote(int rc, const struct vmem_error *err, int code,
			  const char *type)
{
	ck_assert_int_eq(rc, -EREMOTEIO);
	ck_assert_int_eq(err->code, code);
	ck_assert_str_eq(err->type, type);
	ck_assert_msg(err->message[0] != '\0', "empty error message");
}

/* ---- with the real daemon ---------------------------------------- */

START_TEST(test_autostart_roundtrip)
{
	struct vmem_coord at = {5, 2, 1}, other = {5, 2, 3};
	struct vmem_error err;
	struct stat st;
	vmem_client *c;
	char *out = NULL;
	json_t *d, *co;
	int rc;

	ck_assert_int_ne(stat(tsock, &st), 0);
	c = open_ok("claude-01");
	ck_assert_int_eq(stat(tsock, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_str_eq(vmem_client_socket(c), tsock);
	ck_assert_str_eq(vmem_client_repo(c), tdir);

	rc = vmem_decision_store(c, &at, "Use PostgreSQL", NULL, &out, &err);
	ck_assert_msg(rc == 0, "store: %d %s", rc, err.message);
	d = parse(out);
	vmem_free(out);
	co = json_object_get(d, "coordinate");
	ck_assert_int_eq(int_at(co, "x"), 5);
	ck_assert_int_eq(int_at(co, "y"), 2);
	ck_assert_int_eq(int_at(co, "z"), 1);
	ck_assert_str_eq(str_at(d, "content"), "Use PostgreSQL");
	ck_assert_str_eq(str_at(d, "agent_id"), "claude-01");
	ck_assert_int_eq(int_at(d, "version"), 1);
	ck_assert(json_is_null(json_object_get(d, "issue_context")));
	ck_assert_int_eq(strlen(str_at(d, "timestamp")), 27);
	json_decref(d);

	out = NULL;
	ck_assert_int_eq(vmem_decision_get(c, &at, &out, &err), 1);
	d = parse(out);
	vmem_free(out);
	ck_assert_str_eq(str_at(d, "content"), "Use PostgreSQL");
	json_decref(d);
	ck_assert_int_eq(vmem_decision_exists(c, &at, &err), 1);

	out = (char *)"untouched";
	ck_assert_int_eq(vmem_decision_get(c, &other, &out, &err), 0);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(vmem_decision_exists(c, &other, &err), 0);
	ck_assert_int_eq(vmem_decision_delete(c, &other, 0, &err), 0);

	ck_assert_int_eq(
		vmem_decision_store(c, &other, "short-lived", NULL, NULL, &err),
		0);
	ck_assert_int_eq(vmem_decision_exists(c, &other, &err), 1);
	ck_assert_int_eq(vmem_decision_delete(c, &other, 0, &err), 1);
	ck_assert_int_eq(vmem_decision_exists(c, &other, &err), 0);
	ck_assert_int_eq(vmem_decision_delete(c, &other, 0, &err), 0);
	vmem_client_free(c);
}
END_TEST

START_TEST(test_error_mapping)
{
	struct vmem_coord z1 = {7, 1, 1}, z2 = {7, 1, 2}, bad = {0, 1, 2};
	struct vmem_store_options so = {0};
	struct vmem_error err;
	vmem_client *c = open_ok("agent-e");
	char *out = NULL;
	json_t *d, *ctx;
	int rc;

	ck_assert_int_eq(vmem_decision_store(c, &z1, "one", NULL, NULL, &err),
			 0);
	so.overwrite = true;
	rc = vmem_decision_store(c, &z1, "two", &so, NULL, &err);
	expect_remote(rc, &err, -32002, "ImmutableLayerError");
	rc = vmem_decision_delete(c, &z1, 0, &err);
	expect_remote(rc, &err, -32002, "ImmutableLayerError");

	ck_assert_int_eq(vmem_decision_store(c, &z2, "v1", NULL, NULL, &err),
			 0);
	rc = vmem_decision_store(c, &z2, "again", NULL, NULL, &err);
	expect_remote(rc, &err, -32006, "CoordinateOccupiedError");
	rc = vmem_decision_store(c, &z2, "v2", &so, &out, &err);
	ck_assert_msg(rc == 0, "overwrite: %s", err.message);
	d = parse(out);
	vmem_free(out);
	ck_assert_int_eq(int_at(d, "version"), 2);
	json_decref(d);

	so.overwrite = false;
	so.if_version = 1;
	rc = vmem_decision_store(c, &z2, "stale", &so, NULL, &err);
	expect_remote(rc, &err, -32003, "ConcurrencyError");
	so.if_version = 2;
	so.issue_context_json =
		"{\"issue_id\":\"t-7\",\"issue_title\":\"Mem\"}";
	out = NULL;
	rc = vmem_decision_store(c, &z2, "v3", &so, &out, &err);
	ck_assert_msg(rc == 0, "if_version: %s", err.message);
	d = parse(out);
	vmem_free(out);
	ck_assert_int_eq(int_at(d, "version"), 3);
	ctx = json_object_get(d, "issue_context");
	ck_assert_str_eq(str_at(ctx, "issue_id"), "t-7");
	json_decref(d);
	rc = vmem_decision_delete(c, &z2, 2, &err);
	expect_remote(rc, &err, -32003, "ConcurrencyError");

	rc = vmem_decision_store(c, &z2, "", &so, NULL, &err);
	expect_remote(rc, &err, -32602, "ValueError");
	rc = vmem_decision_store(c, &bad, "x", NULL, NULL, &err);
	expect_remote(rc, &err, -32001, "CoordinateValidationError");

	/* Local errors: negative errno, code 0, a message. */
	so.issue_context_json = "{not json";
	rc = vmem_decision_store(c, &z2, "v4", &so, NULL, &err);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_int_eq(err.code, 0);
	ck_assert_str_eq(err.type, "");
	ck_assert_ptr_nonnull(strstr(err.message, "issue_context"));
	/* The connection is still usable after all of that. */
	ck_assert_int_eq(vmem_decision_exists(c, &z2, &err), 1);
	vmem_client_free(c);
}
END_TEST

START_TEST(test_raw_call)
{
	struct vmem_error err;
	vmem_client *c = open_ok(NULL);
	char *out = NULL;
	json_t *d;
	int rc;

	rc = vmem_call(c, "decision.store",
		       "{\"coordinate\":{\"x\":3,\"y\":4,\"z\":2},"
		       "\"content\":\"raw\",\"agent_id\":\"raw-agent\"}",
		       &out, &err);
	ck_assert_msg(rc == 0, "store: %s", err.message);
	d = parse(out);
	vmem_free(out);
	ck_assert_str_eq(str_at(d, "agent_id"), "raw-agent");
	json_decref(d);

	rc = vmem_call(c, "decision.exists",
		       "{\"coordinate\":{\"x\":3,\"y\":4,\"z\":2}}", &out,
		       &err);
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(out, "true");
	vmem_free(out);
	rc = vmem_call(c, "decision.get",
		       "{\"coordinate\":{\"x\":3,\"y\":4,\"z\":3}}", &out,
		       &err);
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(out, "null");
	vmem_free(out);
	/* result not wanted */
	ck_assert_int_eq(vmem_call(c, "server.health", NULL, NULL, &err), 0);

	/* No agent_id anywhere: a write is refused. */
	rc = vmem_call(c, "decision.store",
		       "{\"coordinate\":{\"x\":3,\"y\":4,\"z\":3},"
		       "\"content\":\"anon\"}",
		       NULL, &err);
	expect_remote(rc, &err, -32602, "ValueError");
	/* Unknown members and methods. */
	rc = vmem_call(c, "decision.get",
		       "{\"coordinate\":{\"x\":3,\"y\":4,\"z\":3},\"zz\":1}",
		       NULL, &err);
	expect_remote(rc, &err, -32602, "ValueError");
	rc = vmem_call(c, "no.such.method", NULL, NULL, &err);
	ck_assert_int_eq(rc, -EREMOTEIO);
	ck_assert_int_eq(err.code, -32601);
	ck_assert_str_eq(err.type, "");

	/* Params must be a JSON object. */
	out = (char *)"untouched";
	ck_assert_int_eq(vmem_call(c, "server.health", "[1]", &out, &err),
			 -EINVAL);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(err.code, 0);
	ck_assert_int_eq(vmem_call(c, "server.health", "{", NULL, &err),
			 -EINVAL);
	ck_assert_int_eq(vmem_call(c, "server.health", NULL, NULL, &err), 0);
	vmem_client_free(c);
}
END_TEST

START_TEST(test_hello_health)
{
	struct vmem_coord at = {9, 3, 4};
	struct vmem_error err;
	vmem_client *c = open_ok(NULL);
	char *out = NULL;
	json_t *h, *lim;
	int rc;

	rc = vmem_hello(c, "hello-agent", &out, &err);
	ck_assert_msg(rc == 0, "hello: %s", err.message);
	h = parse(out);
	vmem_free(out);
	ck_assert_str_eq(str_at(h, "server"), "vmemd");
	ck_assert_int_eq(int_at(h, "protocol"), 1);
	ck_assert_str_eq(str_at(h, "agent_id"), "hello-agent");
	ck_assert_str_eq(str_at(h, "repo"), tdir);
	lim = json_object_get(h, "limits");
	ck_assert_int_eq(int_at(lim, "content_max"), 102400);
	json_decref(h);

	/* The hello's agent_id is used for writes. */
	out = NULL;
	ck_assert_int_eq(vmem_decision_store(c, &at, "eph", NULL, &out, &err),
			 0);
	h = parse(out);
	vmem_free(out);
	ck_assert_str_eq(str_at(h, "agent_id"), "hello-agent");
	json_decref(h);

	out = NULL;
	ck_assert_int_eq(vmem_health(c, &out, &err), 0);
	h = parse(out);
	vmem_free(out);
	ck_assert_str_eq(str_at(h, "status"), "ok");
	ck_assert_int_eq(int_at(h, "decisions"), 1);
	ck_assert_str_eq(str_at(h, "repo"), tdir);
	ck_assert(json_is_array(json_object_get(h, "quarantined")));
	json_decref(h);
	vmem_client_free(c);
}
END_TEST

START_TEST(test_single_instance)
{
	char wrap[PATH_MAX + 16], spawns[PATH_MAX + 16];
	struct vmem_coord at = {2, 2, 2};
	struct vmem_error err;
	const char *real = getenv("VMEMD");
	vmem_client *c1, *c2;
	char line[64];
	FILE *f;
	int n = 0;

	ck_assert_ptr_nonnull(real);
	/* Count the daemon starts through a wrapper. */
	snprintf(wrap, sizeof(wrap), "%s/wrap.sh", tdir);
	snprintf(spawns, sizeof(spawns), "%s/spawns", tdir);
	f = fopen(wrap, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\necho started >> '%s'\nexec '%s' \"$@\"\n",
		spawns, real);
	fclose(f);
	ck_assert_int_eq(chmod(wrap, 0700), 0);
	setenv("VMEMD", wrap, 1);

	c1 = open_ok("one");
	c2 = open_ok("two");
	ck_assert_int_eq(
		vmem_decision_store(c1, &at, "shared", NULL, NULL, &err), 0);
	ck_assert_int_eq(vmem_decision_exists(c2, &at, &err), 1);

	f = fopen(spawns, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	ck_assert_int_eq(n, 1);
	vmem_client_free(c1);
	vmem_client_free(c2);
}
END_TEST

START_TEST(test_stop_writes_files)
{
	struct vmem_coord at = {4, 1, 2};
	char file[PATH_MAX + 64];
	struct vmem_error err;
	vmem_client *c = open_ok("stopper");
	struct stat st;
	int rc;

	ck_assert_int_eq(vmem_decision_store(c, &at, "keep", NULL, NULL, &err),
			 0);
	ck_assert_int_eq(vmem_shutdown(c, &err), 0);
	vmem_client_free(c);
	rc = vmem_daemon_wait_stopped(tdir, tsock, 10000, &err);
	ck_assert_msg(rc == 0, "wait: %s", err.message);
	ck_assert(connect_refused(tsock));
	ck_assert(lock_free());
	/* A graceful stop writes every file before the daemon exits. */
	snprintf(file, sizeof(file), "%s/.vector-memory/x-004/y-1-z-2.json",
		 tdir);
	ck_assert_int_eq(stat(file, &st), 0);
	ck_assert_int_gt(st.st_size, 0);
	/* Nothing running: returns at once. */
	ck_assert_int_eq(vmem_daemon_wait_stopped(tdir, tsock, 0, &err), 0);
}
END_TEST

/* ---- without a daemon -------------------------------------------- */

START_TEST(test_no_autostart)
{
	struct vmem_options o = opts_for(0, NULL);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char stale[PATH_MAX + 16];
	struct vmem_error err;
	vmem_client *c = (vmem_client *)&o;
	int fd, rc;

	rc = vmem_client_open(&c, &o, &err);
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(err.code, 0);
	ck_assert_ptr_nonnull(strstr(err.message, "cannot connect to"));
	ck_assert_ptr_nonnull(strstr(err.message, tsock));

	/* The environment switch, with the default autostart. */
	setenv("VMEM_NO_AUTOSTART", "1", 1);
	o.autostart = -1;
	ck_assert_int_eq(vmem_client_open(&c, &o, &err), -ENOENT);
	unsetenv("VMEM_NO_AUTOSTART");

	/* A stale socket file: nobody listens. */
	snprintf(stale, sizeof(stale), "%s/stale.sock", tdir);
	ck_assert(set_path(&sa, stale));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	o.socket = stale;
	o.autostart = 0;
	rc = vmem_client_open(&c, &o, &err);
	ck_assert_int_eq(rc, -ECONNREFUSED);
	ck_assert_ptr_nonnull(strstr(err.message, "stale.sock"));
	ck_assert_ptr_nonnull(strstr(vmem_strerror(rc), "refused"));
	/* Nothing was started behind our back. */
	ck_assert(connect_refused(tsock));
}
END_TEST

START_TEST(test_spawn_failure)
{
	struct vmem_options o = opts_for(1, NULL);
	struct vmem_error err;
	vmem_client *c = NULL;
	int rc;

	setenv("VMEMD", "/nonexistent/vmemd-missing", 1);
	ck_assert_str_eq(vmem_daemon_program(), "/nonexistent/vmemd-missing");
	rc = vmem_client_open(&c, &o, &err);
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(strstr(err.message, "vmemd-missing"));
}
END_TEST

START_TEST(test_repo_discovery)
{
	char sub[PATH_MAX + 16], wt[PATH_MAX + 16], path[PATH_MAX + 32];
	struct vmem_error err;
	char *root = NULL;
	FILE *f;

	snprintf(sub, sizeof(sub), "%s/a/b", tdir);
	snprintf(path, sizeof(path), "mkdir -p '%s'", sub);
	ck_assert_int_eq(run(path), 0);
	ck_assert_int_eq(chdir(sub), 0);
	ck_assert_int_eq(vmem_repo_find(NULL, &root, &err), 0);
	ck_assert_str_eq(root, tdir);
	vmem_free(root);

	/* A worktree's .git is a file. */
	snprintf(wt, sizeof(wt), "%s/wt", tdir);
	ck_assert_int_eq(mkdir(wt, 0700), 0);
	snprintf(path, sizeof(path), "%s/.git", wt);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("gitdir: /nowhere\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/x", wt);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(chdir(path), 0);
	ck_assert_int_eq(vmem_repo_find(NULL, &root, &err), 0);
	ck_assert_str_eq(root, wt);
	vmem_free(root);

	/* VMEM_REPO overrides the current directory, an explicit repo
	 * overrides that; either may name a directory inside the tree,
	 * which resolves to the tree's root as the daemon's does. */
	setenv("VMEM_REPO", wt, 1);
	ck_assert_int_eq(vmem_repo_find(NULL, &root, &err), 0);
	ck_assert_str_eq(root, wt);
	vmem_free(root);
	setenv("VMEM_REPO", sub, 1);
	ck_assert_int_eq(vmem_repo_find(NULL, &root, &err), 0);
	ck_assert_str_eq(root, tdir);
	vmem_free(root);
	ck_assert_int_eq(vmem_repo_find(path, &root, &err), 0);
	ck_assert_str_eq(root, wt);
	vmem_free(root);
	unsetenv("VMEM_REPO");

	ck_assert_int_eq(chdir("/"), 0);
	root = (char *)"untouched";
	ck_assert_int_eq(vmem_repo_find(NULL, &root, &err), -ENOENT);
	ck_assert_ptr_null(root);
	ck_assert_int_eq(vmem_repo_find("/nonexistent/repo", &root, &err),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.message, "/nonexistent/repo"));
}
END_TEST

/* Read one request line from fd; returns its length or -1 at EOF. */
static int read_line(int fd, char *buf, size_t sz)
{
	size_t n = 0;
	char ch;

	while (read(fd, &ch, 1) == 1) {
		if (ch == '\n') {
			buf[n] = '\0';
			return (int)n;
		}
		if (n + 1 < sz)
			buf[n++] = ch;
	}
	return -1;
}

static void write_str(int fd, const char *s)
{
	size_t len = strlen(s);

	if (write(fd, s, len) != (ssize_t)len)
		_exit(3);
}

/* The fake daemon's side of test_fake_server. */
static void fake_server(int lfd)
{
	char buf[4096];
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		_exit(2);
	/* 1: a notification and a foreign id before the answer (id 1). */
	if (read_line(fd, buf, sizeof(buf)) < 0 ||
	    !strstr(buf, "\"method\":\"t.one\"") || !strstr(buf, "\"id\":1"))
		_exit(4);
	write_str(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"watch.changed\","
		      "\"params\":{}}\n"
		      "{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":false}\n"
		      "\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":"
		      "{\"ok\":true}}\r\n");
	/* 2: silence. */
	if (read_line(fd, buf, sizeof(buf)) < 0)
		_exit(5);
	/* 3: the late answer to 2 (skipped), then a connection-level error
	 * with id null, then hang up. */
	if (read_line(fd, buf, sizeof(buf)) < 0)
		_exit(6);
	write_str(fd, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":1}\n"
		      "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":"
		      "-32007,\"message\":\"too many connections\",\"data\":"
		      "{\"type\":\"UnavailableError\"}}}\n");
	close(fd);
	_exit(0);
}

START_TEST(test_fake_server)
{
	struct vmem_options o = opts_for(0, NULL);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char path[PATH_MAX + 16];
	struct vmem_error err;
	vmem_client *c = NULL;
	char *out = NULL;
	int lfd, rc, st;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/fake.sock", tdir);
	ck_assert(set_path(&sa, path));
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		fake_server(lfd);
	close(lfd);

	o.socket = path;
	o.timeout_ms = 300;
	rc = vmem_client_open(&c, &o, &err);
	ck_assert_msg(rc == 0, "open: %s", err.message);
	rc = vmem_call(c, "t.one", NULL, &out, &err);
	ck_assert_msg(rc == 0, "call: %s", err.message);
	ck_assert_str_eq(out, "{\"ok\":true}");
	vmem_free(out);

	rc = vmem_call(c, "t.two", "{}", NULL, &err);
	ck_assert_int_eq(rc, -ETIMEDOUT);
	ck_assert_ptr_nonnull(strstr(err.message, "t.two"));

	rc = vmem_call(c, "t.three", NULL, NULL, &err);
	expect_remote(rc, &err, -32007, "UnavailableError");

	rc = vmem_call(c, "t.four", NULL, NULL, &err);
	ck_assert_msg(rc == -ECONNRESET || rc == -EPIPE, "after hang-up: %d",
		      rc);
	ck_assert_int_eq(vmem_call(c, "t.five", NULL, NULL, &err), -ENOTCONN);
	vmem_client_free(c);

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "fake server status %d", st);
}
END_TEST

START_TEST(test_strerror)
{
	ck_assert_ptr_nonnull(vmem_strerror(-EREMOTEIO));
	ck_assert_str_ne(vmem_strerror(-EREMOTEIO), vmem_strerror(-EINVAL));
	ck_assert_str_eq(vmem_strerror(-ENOENT), vmem_strerror(ENOENT));
	ck_assert_ptr_nonnull(vmem_strerror(-99999));
}
END_TEST

static Suite *client_suite(void)
{
	Suite *s = suite_create("libvmem");
	TCase *daemon = tcase_create("Daemon");
	TCase *local = tcase_create("Local");

	tcase_add_checked_fixture(daemon, setup, teardown);
	tcase_set_timeout(daemon, 60);
	tcase_add_test(daemon, test_autostart_roundtrip);
	tcase_add_test(daemon, test_error_mapping);
	tcase_add_test(daemon, test_raw_call);
	tcase_add_test(daemon, test_hello_health);
	tcase_add_test(daemon, test_single_instance);
	tcase_add_test(daemon, test_stop_writes_files);
	suite_add_tcase(s, daemon);

	tcase_add_checked_fixture(local, setup, teardown);
	tcase_set_timeout(local, 30);
	tcase_add_test(local, test_no_autostart);
	tcase_add_test(local, test_spawn_failure);
	tcase_add_test(local, test_repo_discovery);
	tcase_add_test(local, test_fake_server);
	tcase_add_test(local, test_strerror);
	suite_add_tcase(s, local);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	snprintf(base, sizeof(base), "/tmp/vmem-it-XXXXXX");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	sr = srunner_create(client_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	sweep();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

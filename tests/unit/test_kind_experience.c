/*
 * Unit tests of daemon/kinds/experience.c, the experience kind, through
 * the real store (beside the decision kind) on real temporary directories,
 * a real libuv loop and a real write-ahead log: writes and their shards,
 * crashes (a child killed with SIGKILL) and their replay (a torn last
 * line completed, nothing duplicated), loads with bad lines, and reloads
 * of shards changed under us (another clone's lines, deletions, duplicate
 * records, shards gone).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "decision.h"
#include "experience.h"
#include "protocol/errors.h"
#include "run_suite.h"
#include "store.h"
#include "wal.h"

static char tmp[200], tree[300], gitdir[300], shard_dir[400];
static struct statedir sd;
static uv_loop_t loop;
static struct store st;
static struct decisions ds;
static struct experiences xs;
static struct vmdir_load_report rep;

/* What on_change reported, in order: "stored ID", "deleted ID",
 * "reloaded ID live|gone", "file PATH". */
static char events[64][96];
static size_t n_events;

static void changed_cb(void *ctx, const struct kind_change *ch)
{
	const struct experience_change *ec = ch->detail;
	char id[EXPID_LEN + 1] = "";

	(void)ctx;
	if (ch->kind != &experience_kind || n_events == 64)
		return;
	if (ec->id)
		expid_format(ec->id, id);
	if (!ec->id)
		snprintf(events[n_events++], sizeof(events[0]), "file %s",
			 ec->path);
	else if (ch->type == KIND_RELOADED)
		snprintf(events[n_events++], sizeof(events[0]),
			 "reloaded %s %s", id, ec->json ? "live" : "gone");
	else
		snprintf(events[n_events++], sizeof(events[0]), "%s %s",
			 ch->type == KIND_STORED ? "stored" : "deleted", id);
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/vmem-xkind-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(tree, sizeof(tree), "%s/tree", tmp);
	snprintf(gitdir, sizeof(gitdir), "%s/git", tmp);
	snprintf(shard_dir, sizeof(shard_dir), "%s/.vector-memory/experiences",
		 tree);
	ck_assert_int_eq(mkdir(tree, 0700), 0);
	ck_assert_int_eq(mkdir(gitdir, 0700), 0);
	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	n_events = 0;
}

static void teardown(void)
{
	char cmd[256];

	ck_assert_int_eq(uv_loop_close(&loop), 0);
	statedir_done(&sd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

static int open_store(char *msg, size_t n)
{
	int rc;

	ck_assert_int_eq(decisions_init(&ds, tree, &sd, 10), 0);
	ck_assert_int_eq(experiences_init(&xs, tree, &sd), 0);
	rc = store_open(&st, &loop, &sd,
			(struct store_kind *const[]){&ds.sk, &xs.sk}, 2, &rep,
			msg, n);
	st.on_change = changed_cb;
	return rc;
}

static void open_ok(void)
{
	char msg[512] = "";

	ck_assert_msg(open_store(msg, sizeof(msg)) == 0, "store_open: %s", msg);
}

static void close_store(void)
{
	store_close(&st);
	uv_run(&loop, UV_RUN_DEFAULT);
	decisions_done(&ds);
	experiences_done(&xs);
	vmdir_load_report_done(&rep);
}

static void flushed_cb(struct store *s, void *arg)
{
	(void)s;
	*(bool *)arg = true;
}

/* Every write in files, synced, the log empty. */
static void flush(void)
{
	bool done = false;

	store_flush(&st, flushed_cb, &done);
	while (!done)
		uv_run(&loop, UV_RUN_ONCE);
}

struct xwrite {
	struct experience_write ew;
	bool finished;
	int code;
	char id[EXPID_LEN + 1];
	int *left; /* a child that crashes after its acknowledgements */
};

static void xdone(struct store_write *w, int code, const char *msg)
{
	struct xwrite *x = w->data;

	(void)msg;
	x->finished = true;
	x->code = code;
	if (code == 0 && !x->ew.is_delete)
		expid_format(&x->ew.e.id, x->id);
	experience_write_done(&x->ew);
	if (x->left)
		(*x->left)--;
}

static void xstore(struct xwrite *x, const char *agent, const char *ctx,
		   const char *tag, int importance)
{
	struct experience *e = &x->ew.e;

	memset(x, 0, sizeof(*x));
	x->ew.w.kind = &xs.sk;
	x->ew.w.timeout_ms = 10000;
	x->ew.w.done = xdone;
	x->ew.w.data = x;
	e->agent_id = strdup(agent);
	e->text[EXP_CONTEXT] = strdup(ctx);
	e->text[EXP_ACTION] = strdup("acted");
	e->text[EXP_OUTCOME] = strdup("it worked");
	for (int f = 0; f < EXP_NFIELDS; f++)
		e->text_len[f] = strlen(e->text[f]);
	e->importance = importance;
	if (tag) {
		e->tags = calloc(1, sizeof(char *));
		e->tags[0] = strdup(tag);
		e->n_tags = 1;
	}
	e->metadata = json_object();
}

static void xdelete(struct xwrite *x, const char *id)
{
	memset(x, 0, sizeof(*x));
	x->ew.w.kind = &xs.sk;
	x->ew.w.timeout_ms = 10000;
	x->ew.w.done = xdone;
	x->ew.w.data = x;
	x->ew.is_delete = true;
	x->ew.by = "cleaner";
	ck_assert_int_eq(expid_parse(id, strlen(id), &x->ew.id), 0);
}

static void run_all(struct xwrite *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		store_submit(&st, &x[i].ew.w);
	for (size_t i = 0; i < n; i++) {
		while (!x[i].finished)
			uv_run(&loop, UV_RUN_ONCE);
		ck_assert_int_eq(x[i].code, 0);
	}
}

static bool live(const char *id)
{
	struct expid e;

	ck_assert_int_eq(expid_parse(id, strlen(id), &e), 0);
	return experiences_get(&xs, &e) != NULL;
}

/* How many lines of the shard hold s. */
static int lines_with(const char *shard, const char *s)
{
	char path[600], line[4096];
	FILE *f;
	int n = 0;

	if (snprintf(path, sizeof(path), "%s/%s", shard_dir, shard) >=
	    (int)sizeof(path))
		return -1;
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, s) != NULL;
	fclose(f);
	return n;
}

/* The first shard (below experiences/) of agent a's record id's day. */
static void shard_of(const char *agent, const char *id, char *out, size_t n)
{
	struct expid e;

	ck_assert_int_eq(expid_parse(id, strlen(id), &e), 0);
	ck_assert_int_gt(
		exp_shard_path(agent, strlen(agent), expid_usec(&e), 1, out, n),
		0);
}

static int event_at(const char *e)
{
	for (size_t i = 0; i < n_events; i++)
		if (strcmp(events[i], e) == 0)
			return (int)i;
	return -1;
}

/* Stores are served at once, deletions too; each reaches its shard as
 * one line, a deletion as a tombstone line after it. */
START_TEST(test_store_delete_and_shards)
{
	struct xwrite w[3], del;
	char shard[EXP_SHARD_PATH_MAX], e[96];

	open_ok();
	xstore(&w[0], "alpha", "first context", "t1", 3);
	xstore(&w[1], "alpha", "second context", NULL, 9);
	xstore(&w[2], "b/eta", "third context", "t1", 5);
	run_all(w, 3);
	ck_assert(live(w[0].id) && live(w[1].id) && live(w[2].id));
	ck_assert_uint_eq(xs.ix.n_live, 3);
	snprintf(e, sizeof(e), "stored %s", w[1].id);
	ck_assert_int_ge(event_at(e), 0);
	/* Ids follow the order of the writes. */
	ck_assert_int_lt(strcmp(w[0].id, w[1].id), 0);
	ck_assert_int_lt(strcmp(w[1].id, w[2].id), 0);
	xdelete(&del, w[1].id);
	run_all(&del, 1);
	ck_assert(del.ew.existed);
	ck_assert(!live(w[1].id));
	ck_assert_uint_eq(xs.ix.n_live, 2);
	/* Deleting again: nothing to do. */
	xdelete(&del, w[1].id);
	run_all(&del, 1);
	ck_assert(!del.ew.existed);
	flush();
	shard_of("alpha", w[0].id, shard, sizeof(shard));
	ck_assert_int_eq(lines_with(shard, w[0].id), 1);
	ck_assert_int_eq(lines_with(shard, w[1].id), 2); /* + tombstone */
	ck_assert_int_eq(lines_with(shard, "\"deleted_by\":\"cleaner\""), 1);
	shard_of("b/eta", w[2].id, shard, sizeof(shard));
	ck_assert_int_eq(strncmp(shard, "~Yi9ldGE/", 9), 0);
	ck_assert_int_eq(lines_with(shard, w[2].id), 1);
	close_store();
	/* A restart loads what the shards say. */
	open_ok();
	ck_assert(live(w[0].id) && !live(w[1].id) && live(w[2].id));
	ck_assert_uint_eq(xs.ix.n_live, 2);
	ck_assert_uint_eq(rep.n_quarantined, 0);
	close_store();
}
END_TEST

/* The log's payloads, in order. */
struct payloads {
	char *p[8];
	size_t len[8], n;
};

static int collect_cb(void *ctx, const char *payload, size_t len, char *errmsg,
		      size_t errn)
{
	struct payloads *pl = ctx;

	(void)errmsg;
	(void)errn;
	ck_assert_uint_lt(pl->n, 8);
	pl->p[pl->n] = malloc(len);
	memcpy(pl->p[pl->n], payload, len);
	pl->len[pl->n++] = len;
	return 0;
}

/*
 * Acknowledged writes survive a kill before any shard was written: the
 * next start replays the log into the shards, a torn last line (what an
 * append interrupted by the kill would have left) cut and completed from
 * the log, and a line already there never appended twice.
 */
/* The length of payload i's line: from after its tag to the '\n' before
 * its shard number. */
static size_t payload_line(const struct payloads *pl, size_t i)
{
	const char *nl = memchr(pl->p[i] + 1, '\n', pl->len[i] - 1);

	ck_assert_ptr_nonnull(nl);
	return (size_t)(nl - pl->p[i]) - 1;
}

START_TEST(test_crash_replay_torn_tail)
{
	int pipefd[2], status;
	char ids[3][EXPID_LEN + 1], shard[EXP_SHARD_PATH_MAX], path[700];
	char line[4096];
	struct payloads pl = {0};
	const struct wal_replay replay = {.record = collect_cb, .ctx = &pl};
	struct wal wl;
	pid_t pid;
	FILE *f;

	ck_assert_int_eq(pipe(pipefd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		static struct xwrite w[4];
		int left = 3;

		close(pipefd[0]);
		open_ok();
		for (int i = 0; i < 3; i++) {
			xstore(&w[i], "crasher", "context of a crash", "c", 5);
			w[i].left = &left;
			store_submit(&st, &w[i].ew.w);
		}
		while (left > 0)
			uv_run(&loop, UV_RUN_ONCE);
		left = 1;
		xdelete(&w[3], w[1].id);
		w[3].left = &left;
		store_submit(&st, &w[3].ew.w);
		while (left > 0)
			uv_run(&loop, UV_RUN_ONCE);
		/* Acknowledged; the writer waits 20 ms: die now. */
		for (int i = 0; i < 3; i++)
			if (write(pipefd[1], w[i].id, EXPID_LEN) != EXPID_LEN)
				_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	close(pipefd[1]);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(read(pipefd[0], ids[i], EXPID_LEN), EXPID_LEN);
		ids[i][EXPID_LEN] = '\0';
	}
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	shard_of("crasher", ids[0], shard, sizeof(shard));
	snprintf(path, sizeof(path), "%s/%s", shard_dir, shard);
	ck_assert_int_ne(access(path, F_OK), 0); /* nothing written yet */
	ck_assert_int_eq(
		wal_open(&wl, &sd, STORE_WAL_NAME, &replay, NULL, NULL, 0), 0);
	wal_close(&wl);
	ck_assert_uint_eq(pl.n, 4);
	/* Each payload names its shard: the first of the agent's day. */
	for (size_t i = 0; i < pl.n; i++) {
		size_t at = 1 + payload_line(&pl, i);

		ck_assert_uint_eq(pl.len[i] - at, 2);
		ck_assert_int_eq(memcmp(pl.p[i] + at, "\n1", 2), 0);
	}
	/* The shard as an interrupted append leaves it: the first line
	 * whole, the second torn. */
	snprintf(line, sizeof(line), "mkdir -p %s/crasher", shard_dir);
	ck_assert_int_eq(system(line), 0);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fwrite(pl.p[0] + 1, 1, payload_line(&pl, 0), f);
	fputc('\n', f);
	fwrite(pl.p[1] + 1, 1, payload_line(&pl, 1) / 2, f);
	fclose(f);
	for (size_t i = 0; i < pl.n; i++)
		free(pl.p[i]);
	open_ok();
	/* Each record once, the torn line gone, the deletion there. */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(lines_with(shard, ids[i]), i == 1 ? 2 : 1);
	f = fopen(path, "r");
	while (fgets(line, sizeof(line), f))
		ck_assert_msg(line[strlen(line) - 1] == '\n' && line[0] == '{',
			      "torn line left: %s", line);
	fclose(f);
	ck_assert(live(ids[0]) && !live(ids[1]) && live(ids[2]));
	ck_assert_uint_eq(rep.n_quarantined, 0);
	close_store();
	/* Started again: nothing more replayed, nothing doubled. */
	open_ok();
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(lines_with(shard, ids[i]), i == 1 ? 2 : 1);
	close_store();
}
END_TEST

/* A shard line that does not parse: taken out into quarantine, reported
 * once; the shard's other lines load. */
START_TEST(test_load_bad_line)
{
	struct xwrite w[2];
	char shard[EXP_SHARD_PATH_MAX], path[700];
	FILE *f;

	open_ok();
	xstore(&w[0], "alpha", "kept one", NULL, 5);
	xstore(&w[1], "alpha", "kept two", NULL, 5);
	run_all(w, 2);
	flush();
	close_store();
	shard_of("alpha", w[0].id, shard, sizeof(shard));
	snprintf(path, sizeof(path), "%s/%s", shard_dir, shard);
	f = fopen(path, "a");
	fputs("{\"id\": broken\n", f);
	fclose(f);
	open_ok();
	ck_assert(live(w[0].id) && live(w[1].id));
	ck_assert_uint_eq(rep.n_quarantined, 1);
	ck_assert_ptr_nonnull(strstr(rep.quarantined[0].path, shard));
	ck_assert_int_eq(lines_with(shard, "broken"), 0);
	close_store();
	open_ok();
	ck_assert_uint_eq(rep.n_quarantined, 0);
	close_store();
}
END_TEST

static void reload_cb(struct store *s, void *arg, int rc, const char *errmsg,
		      const struct vmdir_load_report *r)
{
	(void)s;
	(void)r;
	ck_assert_msg(rc == 0, "reload: %s", errmsg);
	*(bool *)arg = true;
}

static void reload(void)
{
	bool done = false;

	store_reload(&st, reload_cb, &done);
	while (!done)
		uv_run(&loop, UV_RUN_ONCE);
}

/* Append a line to a shard by hand (another clone's, merged by git). */
static void append_line(const char *shard, const char *line)
{
	char path[700];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", shard_dir, shard);
	f = fopen(path, "a");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%s\n", line);
	fclose(f);
}

/*
 * A reload reads the shards whose stamp changed: another clone's record
 * comes in, a tombstone takes one out, a record repeated in a second
 * shard counts once (and stays when one copy goes), a shard removed
 * takes its records along. Each change is reported.
 */
START_TEST(test_reload)
{
	static const char *other =
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"alpha\",\"context\":\"from the other clone\",\"action\":"
		"\"x\",\"outcome\":\"y\",\"timestamp\":\"2025-01-06T15:30:00."
		"123456Z\",\"importance\":5,\"tags\":[],\"metadata\":{}}";
	const char *other_id = "01943c3c-b93b-774b-8102-030405060708";
	struct xwrite w[2];
	char shard[EXP_SHARD_PATH_MAX], tomb[512], e[128], path[700];
	const struct exp_doc *d;

	open_ok();
	xstore(&w[0], "alpha", "mine", NULL, 5);
	xstore(&w[1], "alpha", "mine too", NULL, 5);
	run_all(w, 2);
	flush();
	shard_of("alpha", w[0].id, shard, sizeof(shard));
	/* Another clone's record, in the old shard of its day. */
	append_line("alpha/2025-01-06.jsonl", other);
	/* ... and the deletion of one of ours. */
	snprintf(tomb, sizeof(tomb),
		 "{\"deleted\":\"%s\",\"agent_id\":\"alpha\",\"timestamp\":"
		 "\"2025-01-07T00:00:00.000000Z\",\"deleted_by\":\"other\"}",
		 w[1].id);
	append_line(shard, tomb);
	n_events = 0;
	reload();
	ck_assert(live(other_id) && live(w[0].id) && !live(w[1].id));
	snprintf(e, sizeof(e), "reloaded %s live", other_id);
	ck_assert_int_ge(event_at(e), 0);
	snprintf(e, sizeof(e), "reloaded %s gone", w[1].id);
	ck_assert_int_ge(event_at(e), 0);
	ck_assert_uint_eq(n_events, 2);
	/* The other clone's record is served as its line says. */
	{
		struct expid id;

		expid_parse(other_id, EXPID_LEN, &id);
		d = experiences_get(&xs, &id);
		ck_assert_ptr_nonnull(d);
		uint32_t doc = (uint32_t)(d - xs.ix.docs);
		char got[1024];

		ck_assert_uint_eq(expindex_json_len(&xs.ix, doc),
				  strlen(other));
		expindex_json(&xs.ix, doc, got);
		ck_assert_int_eq(memcmp(got, other, strlen(other)), 0);
	}
	/* The same record in a second shard: still one. */
	append_line("alpha/2025-01-05.jsonl", other);
	n_events = 0;
	reload();
	ck_assert_uint_eq(n_events, 0);
	ck_assert_uint_eq(xs.ix.n_live, 2);
	/* One copy gone: it stays; both gone: it goes. */
	snprintf(path, sizeof(path), "%s/alpha/2025-01-06.jsonl", shard_dir);
	ck_assert_int_eq(unlink(path), 0);
	reload();
	ck_assert(live(other_id));
	snprintf(path, sizeof(path), "%s/alpha/2025-01-05.jsonl", shard_dir);
	ck_assert_int_eq(unlink(path), 0);
	n_events = 0;
	reload();
	ck_assert(!live(other_id));
	snprintf(e, sizeof(e), "reloaded %s gone", other_id);
	ck_assert_int_eq(event_at(e), 0);
	/* Our shard removed (a checkout of an older commit): ours go. */
	snprintf(path, sizeof(path), "%s/%s", shard_dir, shard);
	ck_assert_int_eq(unlink(path), 0);
	reload();
	ck_assert_uint_eq(xs.ix.n_live, 0);
	close_store();
}
END_TEST

/* A tombstone seen before its record (another shard, earlier in the
 * walk) still deletes it; the record's line alone is not enough. */
/* A line someone else appended to a shard before our next append to it
 * is read by the next rescan: our append does not make the shard look
 * as if we knew all of it. */
START_TEST(test_foreign_append_before_ours)
{
	static const char *other =
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060709\",\"agent_id\":"
		"\"alpha\",\"context\":\"appended beside us\",\"action\":"
		"\"x\",\"outcome\":\"y\",\"timestamp\":\"2025-01-06T15:30:00."
		"123456Z\",\"importance\":5,\"tags\":[],\"metadata\":{}}";
	const char *other_id = "01943c3c-b93b-774b-8102-030405060709";
	struct xwrite w[2];
	char shard[EXP_SHARD_PATH_MAX];

	open_ok();
	xstore(&w[0], "alpha", "mine", NULL, 5);
	run_all(w, 1);
	flush();
	shard_of("alpha", w[0].id, shard, sizeof(shard));
	append_line(shard, other);
	xstore(&w[1], "alpha", "mine too", NULL, 5);
	run_all(&w[1], 1);
	flush();
	ck_assert_int_eq(lines_with(shard, other_id), 1);
	ck_assert(!live(other_id));
	reload();
	ck_assert(live(other_id) && live(w[0].id) && live(w[1].id));
	close_store();
}
END_TEST

/* An agent's shards, all days: how many, the largest, the highest
 * number, and how many lines of all of them hold s. */
struct agent_shards {
	int files, lines_with;
	off_t largest;
	unsigned top;
	char top_name[300];
};

static struct agent_shards agent_shards(const char *agent, const char *s)
{
	struct agent_shards a = {0};
	char dir[600], path[900];
	struct dirent *de;
	struct stat sb;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/%s", shard_dir, agent);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		unsigned seq = exp_shard_name_seq(de->d_name);

		if (de->d_name[0] == '.')
			continue;
		ck_assert_msg(seq > 0, "not a shard: %s", de->d_name);
		ck_assert_int_lt(strlen(dir) + strlen(de->d_name) + 2,
				 sizeof(path));
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		ck_assert_int_eq(stat(path, &sb), 0);
		a.files++;
		if (sb.st_size > a.largest)
			a.largest = sb.st_size;
		if (seq > a.top) {
			a.top = seq;
			snprintf(a.top_name, sizeof(a.top_name), "%s/%s", agent,
				 de->d_name);
		}
		snprintf(path, sizeof(path), "%s/%s", agent, de->d_name);
		a.lines_with += lines_with(path, s);
	}
	closedir(d);
	return a;
}

/* An agent's day fills a shard of experience_shard_bytes, then begins the
 * next; a deletion goes to the open shard; a restart goes on from the
 * last one. */
START_TEST(test_shards_roll)
{
	static struct xwrite w[41];
	char ctx[400], shard[EXP_SHARD_PATH_MAX];
	struct agent_shards a;

	open_ok();
	xs.shard_max = 4096;
	for (int i = 0; i < 40; i++) {
		snprintf(ctx, sizeof(ctx), "%d %0300d", i, i);
		xstore(&w[i], "roller", ctx, NULL, 5);
	}
	run_all(w, 40);
	xdelete(&w[40], w[0].id);
	run_all(&w[40], 1);
	flush();
	a = agent_shards("roller", "\"roller\"");
	ck_assert_int_ge(a.files, 4);
	ck_assert_int_le(a.largest, 4096);
	ck_assert_int_eq(a.lines_with, 41);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(agent_shards("roller", w[i].id).lines_with,
				 i == 0 ? 2 : 1);
	/* The record in its day's first shard, its tombstone in the last. */
	shard_of("roller", w[0].id, shard, sizeof(shard));
	ck_assert_int_eq(lines_with(shard, w[0].id), 1);
	ck_assert_int_eq(lines_with(a.top_name, "\"deleted\""), 1);
	close_store();

	open_ok();
	xs.shard_max = 4096;
	ck_assert(!live(w[0].id));
	for (int i = 1; i < 40; i++)
		ck_assert(live(w[i].id));
	xstore(&w[0], "roller", "after the restart", NULL, 5);
	run_all(w, 1);
	flush();
	a = agent_shards("roller", w[0].id);
	ck_assert_int_eq(a.lines_with, 1);
	ck_assert_int_eq(lines_with(a.top_name, w[0].id), 1);
	ck_assert_int_le(a.largest, 4096);
	close_store();
}
END_TEST

/* Acknowledged lines of several shards, then a crash before the writer:
 * the start-up's replay puts each in the shard its log record names,
 * once. */
START_TEST(test_crash_replay_rolled)
{
	char ids[12][EXPID_LEN + 1], ctx[400];
	int pipefd[2], status;
	struct agent_shards a;
	pid_t pid;

	ck_assert_int_eq(pipe(pipefd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		static struct xwrite w[12];
		int left = 12;

		close(pipefd[0]);
		open_ok();
		xs.shard_max = 4096;
		for (int i = 0; i < 12; i++) {
			snprintf(ctx, sizeof(ctx), "%d %0300d", i, i);
			xstore(&w[i], "crasher", ctx, NULL, 5);
			w[i].left = &left;
			store_submit(&st, &w[i].ew.w);
		}
		while (left > 0)
			uv_run(&loop, UV_RUN_ONCE);
		for (int i = 0; i < 12; i++)
			if (write(pipefd[1], w[i].id, EXPID_LEN) != EXPID_LEN)
				_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	close(pipefd[1]);
	for (int i = 0; i < 12; i++) {
		ck_assert_int_eq(read(pipefd[0], ids[i], EXPID_LEN), EXPID_LEN);
		ids[i][EXPID_LEN] = '\0';
	}
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	for (int round = 0; round < 2; round++) {
		open_ok();
		a = agent_shards("crasher", "\"crasher\"");
		ck_assert_int_ge(a.files, 2);
		ck_assert_int_le(a.largest, 4096);
		ck_assert_int_eq(a.lines_with, 12);
		for (int i = 0; i < 12; i++)
			ck_assert(live(ids[i]));
		close_store();
	}
}
END_TEST

START_TEST(test_tombstone_first)
{
	static const char *rec =
		"{\"id\":\"01943c3c-b93b-774b-8102-030405060708\",\"agent_id\":"
		"\"zed\",\"context\":\"c\",\"action\":\"x\",\"outcome\":\"y\","
		"\"timestamp\":\"2025-01-06T15:30:00.123456Z\",\"importance\":"
		"5,"
		"\"tags\":[],\"metadata\":{}}";
	static const char *tomb =
		"{\"deleted\":\"01943c3c-b93b-774b-8102-030405060708\","
		"\"agent_id\":\"zed\",\"timestamp\":\"2025-01-07T00:00:00."
		"000000Z\",\"deleted_by\":\"z\"}";
	char cmd[1000];

	snprintf(cmd, sizeof(cmd), "mkdir -p %s/aaa %s/zed", shard_dir,
		 shard_dir);
	ck_assert_int_eq(system(cmd), 0);
	append_line("aaa/2025-01-01.jsonl", tomb);
	append_line("zed/2025-01-06.jsonl", rec);
	open_ok();
	ck_assert(!live("01943c3c-b93b-774b-8102-030405060708"));
	ck_assert_uint_eq(xs.ix.n_live, 0);
	close_store();
}
END_TEST

static Suite *kind_suite(void)
{
	Suite *s = suite_create("kind_experience");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_store_delete_and_shards);
	tcase_add_test(tc, test_crash_replay_torn_tail);
	tcase_add_test(tc, test_load_bad_line);
	tcase_add_test(tc, test_reload);
	tcase_add_test(tc, test_tombstone_first);
	tcase_add_test(tc, test_shards_roll);
	tcase_add_test(tc, test_foreign_append_before_ours);
	tcase_add_test(tc, test_crash_replay_rolled);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(kind_suite());
}

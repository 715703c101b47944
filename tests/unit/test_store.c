/*
 * Unit tests of daemon/write/store.c, the one write path, through a kind
 * that is not a decision: "note", a key -> text record locked by its key
 * and materialised as one file per key in a directory of its own. It is
 * registered beside the real decision kind, on real temporary
 * directories, a real libuv loop and a real write-ahead log; a crash is a
 * child process killed with SIGKILL right after its acknowledgements.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "decision.h"
#include "protocol/errors.h"
#include "run_suite.h"
#include "store.h"
#include "wal.h"

/* ---- the note kind ---- */

#define NOTE_TAG   'N'
#define MAX_NOTES  32
#define MAX_EVENTS 128
#define MAX_SYNCS  8

struct note {
	char key[32];
	char val[64];
	int version;
	bool dirty;
};

/* What a checkpoint's sync of the notes saw (on the pool). */
struct sync_seen {
	bool ok;
	off_t wal_size;	  /* the log file then */
	ino_t wal_ino;	  /* the cut replaces the file */
	bool files_there; /* every note's file was written */
};

struct notes {
	struct store_kind sk;
	char dir[300];
	const char *wal_path;
	struct note notes[MAX_NOTES];
	size_t n;
	/* What happened, in order: "prepare k 1", "apply k 1",
	 * "replay k 1", "load k", "changed note k", "changed decision". */
	char events[MAX_EVENTS][48];
	size_t n_events;
	int fail_syncs; /* so many syncs fail (set before the loop runs) */
	/* Set: git has the tree (the store's tree_yielded says so, and the
	 * writer leaves every note: KIND_LEFT); n_left counts such passes. */
	const char *yield;
	size_t n_left;
	size_t n_syncs;
	struct sync_seen syncs[MAX_SYNCS];
	/* Probes that looked (rescan_end), and whether every note's file
	 * was there when the last one looked (on the pool). */
	size_t n_probes;
	bool probe_saw_files;
	/* The mode of each rescan begun, in order (the first ones). */
	enum rescan_mode modes[8];
	size_t n_modes;
};

struct note_write {
	struct store_write w;
	char key[32];
	char val[64]; /* "refuse": prepare refuses it */
	/* Result. */
	bool finished;
	int code;
	char msg[256];
	int version;
	int64_t timestamp;
	size_t saw_appended; /* hold.appended when it was acknowledged */
	/* Private to the kind. */
	char *payload;
	int next_version;
};

static struct notes *notes_of(const struct store_kind *k)
{
	return KIND_CONTAINER(k, struct notes, sk);
}

static struct note_write *note_write_of(struct store_write *w)
{
	return KIND_CONTAINER(w, struct note_write, w);
}

static void __attribute__((format(printf, 2, 3)))
event(struct notes *ns, const char *fmt, ...)
{
	va_list ap;

	ck_assert_uint_lt(ns->n_events, MAX_EVENTS);
	va_start(ap, fmt);
	vsnprintf(ns->events[ns->n_events++], sizeof(ns->events[0]), fmt, ap);
	va_end(ap);
}

static struct note *note_find(struct notes *ns, const char *key)
{
	for (size_t i = 0; i < ns->n; i++)
		if (strcmp(ns->notes[i].key, key) == 0)
			return &ns->notes[i];
	return NULL;
}

static struct note *note_put(struct notes *ns, const char *key, const char *val,
			     int version)
{
	struct note *n = note_find(ns, key);

	if (!n) {
		ck_assert_uint_lt(ns->n, MAX_NOTES);
		n = &ns->notes[ns->n++];
		snprintf(n->key, sizeof(n->key), "%s", key);
	}
	snprintf(n->val, sizeof(n->val), "%s", val);
	n->version = version;
	return n;
}

static int note_lock(struct store_kind *k, const struct store_write *w,
		     struct kind_lock *out)
{
	const struct note_write *nw = KIND_CONTAINER(w, struct note_write, w);

	(void)k;
	out->key = nw->key;
	out->key_len = strlen(nw->key);
	return 1;
}

static int note_prepare(struct store_kind *k, struct store_write *w, char *msg,
			size_t n)
{
	struct notes *ns = notes_of(k);
	struct note_write *nw = note_write_of(w);
	struct note *cur = note_find(ns, nw->key);

	if (strcmp(nw->val, "refuse") == 0) {
		snprintf(msg, n, "note %s refused", nw->key);
		return RPC_INVALID_PARAMS;
	}
	nw->next_version = cur ? cur->version + 1 : 1;
	nw->timestamp = store_timestamp(k);
	ck_assert_int_ge(asprintf(&nw->payload, "%c%s=%d=%s", NOTE_TAG, nw->key,
				  nw->next_version, nw->val),
			 0);
	w->payload = nw->payload;
	w->payload_len = strlen(nw->payload);
	event(ns, "prepare %s %d", nw->key, nw->next_version);
	return KIND_LOG;
}

static void note_unprepare(struct store_kind *k, struct store_write *w)
{
	struct note_write *nw = note_write_of(w);

	(void)k;
	free(nw->payload);
	nw->payload = NULL;
}

static void note_apply(struct store_kind *k, struct store_write *w)
{
	struct notes *ns = notes_of(k);
	struct note_write *nw = note_write_of(w);

	note_put(ns, nw->key, nw->val, nw->next_version)->dirty = true;
	nw->version = nw->next_version;
	free(nw->payload);
	nw->payload = NULL;
	event(ns, "apply %s %d", nw->key, nw->version);
	store_changed(k, KIND_STORED, nw->key);
}

static int note_replay(struct store_kind *k, const char *payload, size_t len,
		       char *msg, size_t n)
{
	struct notes *ns = notes_of(k);
	char key[32], val[64];
	char text[128];
	int version;

	snprintf(text, sizeof(text), "%.*s", (int)len, payload);
	if (sscanf(text, "N%31[^=]=%d=%63[^\n]", key, &version, val) != 3) {
		snprintf(msg, n, "a bad note");
		return -EBADMSG;
	}
	note_put(ns, key, val, version)->dirty = true;
	event(ns, "replay %s %d", key, version);
	return 0;
}

static int note_load(struct store_kind *k, struct vmdir_load_report *rep,
		     char *errmsg, size_t n)
{
	struct notes *ns = notes_of(k);
	DIR *d = opendir(ns->dir);
	struct dirent *de;

	(void)rep;
	if (!d) {
		snprintf(errmsg, n, "cannot open %s", ns->dir);
		return -errno;
	}
	while ((de = readdir(d))) {
		char path[600], val[64];
		int version;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", ns->dir, de->d_name);
		f = fopen(path, "r");
		ck_assert_ptr_nonnull(f);
		ck_assert_int_eq(fscanf(f, "%d=%63[^\n]", &version, val), 2);
		fclose(f);
		note_put(ns, de->d_name, val, version);
		event(ns, "load %s", de->d_name);
	}
	closedir(d);
	return 0;
}

static size_t note_pending(const struct store_kind *k)
{
	const struct notes *ns = notes_of(k);
	size_t n = 0;

	for (size_t i = 0; i < ns->n; i++)
		n += ns->notes[i].dirty;
	return n;
}

struct note_snap {
	size_t n;
	struct note items[MAX_NOTES];
};

static int note_snapshot(struct store_kind *k, void **out)
{
	struct notes *ns = notes_of(k);
	struct note_snap *sn = calloc(1, sizeof(*sn));

	if (!sn)
		return -ENOMEM;
	for (size_t i = 0; i < ns->n; i++)
		if (ns->notes[i].dirty) {
			sn->items[sn->n++] = ns->notes[i];
			ns->notes[i].dirty = false;
		}
	*out = sn;
	return 0;
}

/* Pool: one file per note, written to a temporary name and renamed. */
static int note_write_files(struct store_kind *k, void *snap, bool sync,
			    char *errmsg, size_t n)
{
	struct notes *ns = notes_of(k);
	struct note_snap *sn = snap;

	if (ns->yield && sn->n) {
		ns->n_left++;
		return KIND_LEFT;
	}
	for (size_t i = 0; i < sn->n; i++) {
		char path[600], tmp[610];
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", ns->dir,
			 sn->items[i].key);
		snprintf(tmp, sizeof(tmp), "%s/.tmp", ns->dir);
		f = fopen(tmp, "w");
		if (!f) {
			snprintf(errmsg, n, "cannot write %s", tmp);
			return -errno;
		}
		fprintf(f, "%d=%s\n", sn->items[i].version, sn->items[i].val);
		if (sync)
			fsync(fileno(f));
		fclose(f);
		if (rename(tmp, path) < 0) {
			snprintf(errmsg, n, "cannot rename %s", tmp);
			return -errno;
		}
	}
	return 0;
}

static void note_written(struct store_kind *k, void *snap, int rc)
{
	struct notes *ns = notes_of(k);
	struct note_snap *sn = snap;

	for (size_t i = 0; (rc < 0 || rc == KIND_LEFT) && i < sn->n; i++)
		note_find(ns, sn->items[i].key)->dirty = true;
	free(sn);
}

/* Is every note's file there? */
static bool note_files_there(const struct notes *ns)
{
	for (size_t i = 0; i < ns->n; i++) {
		char path[600];

		snprintf(path, sizeof(path), "%s/%s", ns->dir,
			 ns->notes[i].key);
		if (access(path, F_OK) != 0)
			return false;
	}
	return true;
}

/* Pool: look at the log and the files first, then sync (or fail). */
static int note_sync(struct store_kind *k, char *errmsg, size_t n)
{
	struct notes *ns = notes_of(k);
	struct sync_seen *seen = &ns->syncs[ns->n_syncs++];
	struct stat st;
	int fd;

	ck_assert_uint_le(ns->n_syncs, MAX_SYNCS);
	ck_assert_int_eq(stat(ns->wal_path, &st), 0);
	seen->wal_size = st.st_size;
	seen->wal_ino = st.st_ino;
	seen->files_there = note_files_there(ns);
	if (ns->fail_syncs > 0) {
		ns->fail_syncs--;
		snprintf(errmsg, n, "injected failure");
		return -EIO;
	}
	fd = open(ns->dir, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(syncfs(fd), 0);
	close(fd);
	seen->ok = true;
	return 0;
}

/* Loop: a probe or a reload of the notes looks at ns itself. */
static int note_rescan_begin(struct store_kind *k, enum rescan_mode mode,
			     void **job)
{
	struct notes *ns = notes_of(k);

	if (ns->n_modes < sizeof(ns->modes) / sizeof(ns->modes[0]))
		ns->modes[ns->n_modes++] = mode;
	*job = ns;
	return 0;
}

/* Pool: are the files of every note there? */
static int note_rescan(struct store_kind *k, void *job,
		       struct vmdir_load_report *rep, char *errmsg, size_t n)
{
	struct notes *ns = job;

	(void)k, (void)rep, (void)errmsg, (void)n;
	ns->probe_saw_files = note_files_there(ns);
	return 0;
}

/* Loop: the files are what the notes say (nothing to reload). */
static int note_rescan_end(struct store_kind *k, void *job, int rc, bool probe,
			   const struct vmdir_load_report *rep)
{
	(void)job, (void)rc, (void)rep;
	notes_of(k)->n_probes += probe;
	return 0;
}

static const struct kind note_kind = {
	.name = "note",
	.committed = false,
	.log_tag = NOTE_TAG,
	.lock = note_lock,
	.prepare = note_prepare,
	.unprepare = note_unprepare,
	.apply = note_apply,
	.replay = note_replay,
	.load = note_load,
	.pending = note_pending,
	.snapshot = note_snapshot,
	.write = note_write_files,
	.written = note_written,
	.sync = note_sync,
	.rescan_begin = note_rescan_begin,
	.rescan = note_rescan,
	.rescan_end = note_rescan_end,
};

/* ---- fixture: a store with decisions and notes ---- */

static char tmp[200], wal_path[400], tree[300], gitdir[300];
static struct statedir sd; /* <tmp>/git/vmem: the log, quarantine/ */
static uv_loop_t loop;
static struct store st;
static struct decisions ds;
static struct notes ns;
static struct vmdir_load_report rep;

static void changed_cb(void *ctx, const struct kind_change *ch)
{
	struct notes *n = ctx;

	if (ch->kind == &note_kind)
		event(n, "changed note %s", (const char *)ch->detail);
	else
		event(n, "changed %s", ch->kind->name);
}

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/vmem-store-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(tree, sizeof(tree), "%s/tree", tmp);
	snprintf(gitdir, sizeof(gitdir), "%s/git", tmp);
	snprintf(wal_path, sizeof(wal_path), "%s/" STATEDIR_NAME "/%s", gitdir,
		 STORE_WAL_NAME);
	ck_assert_int_eq(mkdir(tree, 0700), 0);
	ck_assert_int_eq(mkdir(gitdir, 0700), 0);
	ck_assert_int_eq(statedir_init(&sd, gitdir, NULL, 0, NULL, 0), 0);
	memset(&ns, 0, sizeof(ns));
	snprintf(ns.dir, sizeof(ns.dir), "%s/notes", tmp);
	ck_assert_int_eq(mkdir(ns.dir, 0700), 0);
	ck_assert_int_eq(uv_loop_init(&loop), 0);
}

static void teardown(void)
{
	char cmd[256];

	ck_assert_int_eq(uv_loop_close(&loop), 0);
	statedir_done(&sd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

/* Fresh kind states (the notes' memory forgotten, as after a restart),
 * then the store over them. */
static int open_store(char *errmsg, size_t n)
{
	int fail_syncs = ns.fail_syncs;
	int rc;

	memset(ns.notes, 0, sizeof(ns.notes));
	ns.n = ns.n_events = ns.n_syncs = 0;
	ns.fail_syncs = fail_syncs;
	ns.sk = (struct store_kind){.kind = &note_kind};
	ns.wal_path = wal_path;
	ck_assert_int_eq(decisions_init(&ds, tree, &sd, 10), 0);
	rc = store_open(&st, &loop, &sd,
			(struct store_kind *const[]){&ds.sk, &ns.sk}, 2, &rep,
			errmsg, n);
	st.on_change = changed_cb;
	st.on_change_ctx = &ns;
	return rc;
}

static void open_ok(void)
{
	char msg[512] = "";

	ck_assert_msg(open_store(msg, sizeof(msg)) == 0, "store_open: %s", msg);
}

/* Without a flush: what the log holds stays there. */
static void close_store(void)
{
	store_close(&st);
	uv_run(&loop, UV_RUN_DEFAULT);
	decisions_done(&ds);
	vmdir_load_report_done(&rep);
}

/*
 * The log hook of test_next_batch_gathers: the first append is held
 * (entered, then waits for go) while the test submits more writes; every
 * append's size is recorded, and the records whose append and fdatasync
 * returned are counted, for the acknowledgements to compare with.
 */
static struct {
	sem_t entered, go;
	size_t batches[8];
	size_t n_batches; /* lane only until the appends are over */
	atomic_size_t appended;
} hold;

static void hold_hook(void *ctx, size_t records, bool done, int rc)
{
	(void)ctx;
	if (done) {
		if (rc == 0)
			atomic_fetch_add(&hold.appended, records);
		return;
	}
	if (hold.n_batches < 8)
		hold.batches[hold.n_batches] = records;
	hold.n_batches++;
	sem_post(&hold.entered);
	if (hold.n_batches == 1)
		while (sem_wait(&hold.go) < 0 && errno == EINTR)
			;
}

/* Wait on the loop's thread (the loop not running) for the lane to enter
 * the hook; false if it did not within a bound far beyond any append. */
static bool hold_entered(void)
{
	const char *scale = getenv("VMEM_TIMEOUT_SCALE");
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30 * (scale && atoi(scale) > 0 ? atoi(scale) : 1);
	while (sem_timedwait(&hold.entered, &until) < 0)
		if (errno != EINTR)
			return false;
	return true;
}

static void note_done(struct store_write *w, int code, const char *msg)
{
	struct note_write *nw = note_write_of(w);

	nw->saw_appended = atomic_load(&hold.appended);
	nw->finished = true;
	nw->code = code;
	snprintf(nw->msg, sizeof(nw->msg), "%s", msg ? msg : "");
	if (w->data) /* a child that crashes right after its acks */
		(*(int *)w->data)--;
}

static void note_init(struct note_write *nw, const char *key, const char *val)
{
	memset(nw, 0, sizeof(*nw));
	nw->w.kind = &ns.sk;
	nw->w.timeout_ms = 10000;
	nw->w.done = note_done;
	snprintf(nw->key, sizeof(nw->key), "%s", key);
	snprintf(nw->val, sizeof(nw->val), "%s", val);
}

static void decision_init_write(struct decision_write *dw, int x, int y, int z)
{
	memset(dw, 0, sizeof(*dw));
	dw->w.kind = &ds.sk;
	dw->w.timeout_ms = 10000;
	dw->coord = (struct coord){x, y, z};
	dw->d.content = strdup("chosen");
	dw->d.content_len = strlen("chosen");
	dw->d.agent_id = strdup("tester");
	ck_assert_ptr_nonnull(dw->d.content);
	ck_assert_ptr_nonnull(dw->d.agent_id);
}

static bool all_finished(struct note_write *nw, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!nw[i].finished)
			return false;
	return true;
}

static void run_until_finished(struct note_write *nw, size_t n)
{
	while (!all_finished(nw, n))
		uv_run(&loop, UV_RUN_ONCE);
}

/* Where event e is in the log of events, or -1. */
static int event_at(const char *e)
{
	for (size_t i = 0; i < ns.n_events; i++)
		if (strcmp(ns.events[i], e) == 0)
			return (int)i;
	return -1;
}

static void assert_note_file(const char *key, const char *want)
{
	char path[600], got[80] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", ns.dir, key);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: no file", path);
	ck_assert_ptr_nonnull(fgets(got, sizeof(got), f));
	fclose(f);
	ck_assert_str_eq(got, want);
}

/* The payloads of the log, in order, joined with '|'. */
static void log_payloads(char *out, size_t n);

/* ---- tests ---- */

/*
 * Writes to different keys share a batch; a write to a key already being
 * written waits for that write's apply and validates against it; the
 * batch is applied (and reported) in log order.
 */
START_TEST(test_apply_order_and_key_locks)
{
	struct note_write w[4];
	char payloads[512];

	open_ok();
	note_init(&w[0], "a", "one");
	note_init(&w[1], "b", "two");
	note_init(&w[2], "a", "three"); /* waits for w[0]'s lock */
	note_init(&w[3], "c", "four");
	for (int i = 0; i < 4; i++)
		store_submit(&st, &w[i].w);
	/* w[0] went to the log at once; the others are not prepared yet
	 * or wait in the batch being filled. */
	ck_assert_int_ge(event_at("prepare b 1"), 0);
	ck_assert_int_ge(event_at("prepare c 1"), 0);
	ck_assert_int_eq(event_at("prepare a 2"), -1);
	run_until_finished(w, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_msg(w[i].code == 0, "write %d: %s", i, w[i].msg);
	ck_assert_int_eq(w[0].version, 1);
	ck_assert_int_eq(w[2].version, 2); /* saw w[0] applied */
	ck_assert_int_gt(event_at("prepare a 2"), event_at("apply a 1"));
	/* Applied in log order: a, then the second batch b, c, a. */
	ck_assert_int_lt(event_at("apply a 1"), event_at("apply b 1"));
	ck_assert_int_lt(event_at("apply b 1"), event_at("apply c 1"));
	ck_assert_int_lt(event_at("apply c 1"), event_at("apply a 2"));
	ck_assert_int_eq(event_at("changed note a") + 1,
			 event_at("prepare a 2"));
	log_payloads(payloads, sizeof(payloads));
	ck_assert_str_eq(payloads, "Na=1=one|Nb=1=two|Nc=1=four|Na=2=three");
	/* The shared timestamps increase in the order of validation. */
	ck_assert_int_lt(w[0].timestamp, w[1].timestamp);
	ck_assert_int_lt(w[3].timestamp, w[2].timestamp);
	close_store();
	for (int i = 0; i < 4; i++)
		note_unprepare(&ns.sk, &w[i].w);
}
END_TEST

/*
 * Group commit with the next batch gathering while an append runs: the
 * writes that come while the first append (and its fdatasync) is held
 * are validated and gather into one batch queued behind it; none is
 * acknowledged while the first is held; the lane starts that batch as
 * soon as the first returns, without a turn of the loop (the loop is
 * not run between the release and the second append); and each write is
 * acknowledged only after the append and fdatasync of its own batch.
 */
START_TEST(test_next_batch_gathers)
{
	struct note_write w[4];
	char payloads[512];

	ck_assert_int_eq(sem_init(&hold.entered, 0, 0), 0);
	ck_assert_int_eq(sem_init(&hold.go, 0, 0), 0);
	hold.n_batches = 0;
	atomic_store(&hold.appended, 0);
	open_ok();
	store_set_log_hook(&st, hold_hook, NULL);
	note_init(&w[0], "a", "one");
	note_init(&w[1], "b", "two");
	note_init(&w[2], "c", "three");
	note_init(&w[3], "d", "four");
	store_submit(&st, &w[0].w);
	ck_assert_msg(hold_entered(), "the first append never started");
	for (int i = 1; i < 4; i++)
		store_submit(&st, &w[i].w);
	ck_assert_int_ge(event_at("prepare d 1"), 0);
	for (int i = 0; i < 8; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	for (int i = 0; i < 4; i++)
		ck_assert_msg(!w[i].finished,
			      "write %d acknowledged while the "
			      "first append is held",
			      i);
	ck_assert_int_eq(event_at("apply a 1"), -1);
	sem_post(&hold.go);
	ck_assert_msg(hold_entered(),
		      "the gathered batch did not start without the loop");
	run_until_finished(w, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_msg(w[i].code == 0, "write %d: %s", i, w[i].msg);
	ck_assert_uint_eq(hold.n_batches, 2);
	ck_assert_uint_eq(hold.batches[0], 1);
	ck_assert_uint_eq(hold.batches[1], 3);
	ck_assert_uint_ge(w[0].saw_appended, 1);
	for (int i = 1; i < 4; i++)
		ck_assert_msg(w[i].saw_appended >= 4,
			      "write %d acknowledged before its batch's "
			      "append returned (%zu records appended)",
			      i, w[i].saw_appended);
	ck_assert_int_lt(event_at("apply a 1"), event_at("apply b 1"));
	ck_assert_int_lt(event_at("apply c 1"), event_at("apply d 1"));
	log_payloads(payloads, sizeof(payloads));
	ck_assert_str_eq(payloads, "Na=1=one|Nb=1=two|Nc=1=three|Nd=1=four");
	close_store();
	sem_destroy(&hold.entered);
	sem_destroy(&hold.go);
}
END_TEST

/*
 * Acknowledged notes survive a crash before any file was written: the
 * next open replays them from the log, materialises them, empties the
 * log and loads them.
 */
START_TEST(test_crash_then_replay)
{
	int pipefd[2], status;
	char c;
	pid_t pid;
	struct stat sb;

	ck_assert_int_eq(pipe(pipefd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		static struct note_write w[3];
		int left = 3;

		close(pipefd[0]);
		open_ok();
		note_init(&w[0], "x", "first");
		note_init(&w[1], "y", "second");
		note_init(&w[2], "x", "third");
		for (int i = 0; i < 3; i++) {
			w[i].w.data = &left;
			store_submit(&st, &w[i].w);
		}
		while (left > 0)
			uv_run(&loop, UV_RUN_ONCE);
		/* Acknowledged; the writer has not run (it waits 20 ms
		 * after the batch): die now. */
		if (write(pipefd[1], "k", 1) != 1)
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	close(pipefd[1]);
	ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* Nothing materialised: only the log has them. */
	{
		char path[600];

		snprintf(path, sizeof(path), "%s/x", ns.dir);
		ck_assert_int_ne(access(path, F_OK), 0);
	}

	open_ok();
	ck_assert_int_eq(event_at("replay x 1"), 0);
	ck_assert_int_eq(event_at("replay y 1"), 1);
	ck_assert_int_eq(event_at("replay x 2"), 2);
	ck_assert_int_gt(event_at("load x"), 2);
	ck_assert_int_gt(event_at("load y"), 2);
	/* Replay is not reported as a change (no listener then). */
	ck_assert_int_eq(event_at("changed note x"), -1);
	assert_note_file("x", "2=third\n");
	assert_note_file("y", "1=second\n");
	ck_assert_str_eq(note_find(&ns, "x")->val, "third");
	ck_assert_int_eq(note_find(&ns, "x")->version, 2);
	ck_assert_int_eq(stat(wal_path, &sb), 0);
	ck_assert_int_eq(sb.st_size, 0);
	close_store();
}
END_TEST

static int crash_fd = -1; /* set: a group's end kills the process */

static void group_done(struct store_group *g, int code, const char *msg,
		       size_t failed)
{
	int *out = g->data;

	if (crash_fd >= 0) {
		/* Acknowledged, never materialised: die now. */
		if (write(crash_fd, "k", 1) != 1)
			_exit(2);
		raise(SIGKILL);
	}
	out[0] = 1;
	out[1] = code;
	out[2] = (int)failed;
	(void)msg;
}

/* A group of a decision and a note: prepared together, one batch. */
static void submit_pair(struct decision_write *dw, struct note_write *nw,
			int *result)
{
	static struct store_write *items[2];
	static struct store_group g;

	memset(&g, 0, sizeof(g));
	items[0] = &dw->w;
	items[1] = &nw->w;
	g.items = items;
	g.n = 2;
	g.timeout_ms = 10000;
	g.done = group_done;
	g.data = result;
	result[0] = 0;
	store_submit_group(&st, &g);
	while (!result[0])
		uv_run(&loop, UV_RUN_ONCE);
}

/*
 * A group spans kinds: a refusal of either item changes nothing and logs
 * nothing; an accepted group is applied whole and logged as one batch,
 * so a crash that tears that batch drops both of its items and keeps the
 * batch before it.
 */
START_TEST(test_group_across_kinds)
{
	struct note_write first, nw;
	struct decision_write dw;
	struct coord a = {3, 2, 2}, b = {5, 1, 3};
	int result[3], pipefd[2], status;
	char payloads[1024], c;
	pid_t pid;

	open_ok();
	/* Refused by the note kind, after the decision was prepared. */
	decision_init_write(&dw, 3, 2, 2);
	note_init(&nw, "g1", "refuse");
	submit_pair(&dw, &nw, result);
	ck_assert_int_eq(result[1], RPC_INVALID_PARAMS);
	ck_assert_int_eq(result[2], 1);
	ck_assert_ptr_null(index_get(&ds.index, &a));
	ck_assert_ptr_null(note_find(&ns, "g1"));
	ck_assert_ptr_null(dw.rec); /* unprepared */
	log_payloads(payloads, sizeof(payloads));
	ck_assert_str_eq(payloads, "");
	decision_done(&dw.d);

	/* Accepted: both applied, both reported, one timestamp order. */
	decision_init_write(&dw, 3, 2, 2);
	note_init(&nw, "g1", "grouped");
	submit_pair(&dw, &nw, result);
	ck_assert_int_eq(result[1], 0);
	ck_assert_ptr_eq(index_get(&ds.index, &a), dw.stored);
	ck_assert_str_eq(note_find(&ns, "g1")->val, "grouped");
	ck_assert_int_ge(event_at("changed decision"), 0);
	ck_assert_int_gt(event_at("changed note g1"),
			 event_at("changed decision"));
	{
		/* The decision, prepared first, has the earlier stamp. */
		const char *t = strstr(dw.stored->json, "\"timestamp\":\"");
		char ts[VMEM_TIMESTAMP_LEN + 1];
		int64_t usec;

		ck_assert_ptr_nonnull(t);
		snprintf(ts, sizeof(ts), "%s", t + 13);
		ck_assert_int_eq(timestamp_parse(ts, &usec), 0);
		ck_assert_int_lt(usec, nw.timestamp);
	}
	decision_done(&dw.d);
	close_store();

	/* Then in a process that dies right after its next group. */
	ck_assert_int_eq(pipe(pipefd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(pipefd[0]);
		open_ok();
		note_init(&first, "before", "kept");
		store_submit(&st, &first.w);
		run_until_finished(&first, 1);
		decision_init_write(&dw, 5, 1, 3);
		note_init(&nw, "g2", "torn");
		crash_fd = pipefd[1];
		submit_pair(&dw, &nw, result);
		_exit(3);
	}
	close(pipefd[1]);
	ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	log_payloads(payloads, sizeof(payloads));
	ck_assert_msg(strstr(payloads, "Nbefore=1=kept|{\"coordinate\":"
				       "{\"x\":5,\"y\":1,\"z\":3}") &&
			      strstr(payloads, "|Ng2=1=torn"),
		      "%s", payloads);

	/* Tear the group's batch: cut its last bytes off. */
	{
		struct wal w;

		ck_assert_int_eq(
			wal_open(&w, &sd, STORE_WAL_NAME, NULL, NULL, NULL, 0),
			0);
		ck_assert_int_eq(truncate(wal_path, (off_t)w.end - 3), 0);
		wal_close(&w);
	}
	open_ok();
	ck_assert_ptr_null(index_get(&ds.index, &b));
	ck_assert_ptr_null(note_find(&ns, "g2"));
	ck_assert_str_eq(note_find(&ns, "before")->val, "kept");
	ck_assert_ptr_nonnull(index_get(&ds.index, &a));
	ck_assert_str_eq(note_find(&ns, "g1")->val, "grouped");
	ck_assert_ptr_nonnull(strstr(st.last_error, "torn tail"));
	close_store();
}
END_TEST

static void flushed_cb(struct store *s, void *arg)
{
	(void)s;
	*(bool *)arg = true;
}

/*
 * A checkpoint cuts the log only after every kind's sync succeeded: when
 * the notes' sync fails, the log (the same file, still holding the
 * records) waits for the next checkpoint, whose sync finds the files
 * written and the log still whole; only then is it cut.
 */
START_TEST(test_checkpoint_waits_for_sync)
{
	struct note_write w[2];
	struct stat before, after;
	bool flushed = false;

	ns.fail_syncs = 1;
	open_ok();
	note_init(&w[0], "p", "one");
	note_init(&w[1], "q", "two");
	store_submit(&st, &w[0].w);
	store_submit(&st, &w[1].w);
	run_until_finished(w, 2);
	ck_assert_int_eq(stat(wal_path, &before), 0);
	ck_assert_int_gt(before.st_size, 0);
	store_flush(&st, flushed_cb, &flushed);
	while (!flushed)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_uint_eq(ns.n_syncs, 2);
	ck_assert(!ns.syncs[0].ok);
	ck_assert(ns.syncs[1].ok);
	for (int i = 0; i < 2; i++) {
		ck_assert(ns.syncs[i].files_there);
		ck_assert_int_gt(ns.syncs[i].wal_size, 0);
		ck_assert_uint_eq(ns.syncs[i].wal_ino, before.st_ino);
	}
	ck_assert_ptr_nonnull(strstr(st.last_error, "syncing note files"));
	ck_assert_int_eq(stat(wal_path, &after), 0);
	ck_assert_int_eq(after.st_size, 0);
	ck_assert_uint_eq(store_unwritten(&st), 0);
	close_store();
	/* Nothing to replay: the files hold it all. */
	open_ok();
	ck_assert_int_eq(event_at("replay p 1"), -1);
	ck_assert_str_eq(note_find(&ns, "q")->val, "two");
	close_store();
}
END_TEST

/* A write still queued for its key's lock can be given up (store_cancel:
 * never prepared, never logged, done never called); one past its lock
 * cannot, and completes. */
START_TEST(test_cancel_waiting_write)
{
	struct note_write w[3];
	char payloads[256];

	open_ok();
	note_init(&w[0], "k", "held");
	note_init(&w[1], "k", "given up");
	note_init(&w[2], "k", "after");
	for (int i = 0; i < 3; i++)
		store_submit(&st, &w[i].w);
	ck_assert(!store_cancel(&st, &w[0].w)); /* holds the lock */
	ck_assert(store_cancel(&st, &w[1].w));
	w[1].finished = true;
	w[1].code = 12345; /* its done would overwrite this */
	run_until_finished(w, 3);
	ck_assert_int_eq(w[1].code, 12345);
	ck_assert_int_eq(w[0].code, 0);
	ck_assert_int_eq(w[2].code, 0);
	ck_assert_int_eq(w[2].version, 2); /* the cancelled one left no trace */
	ck_assert_int_eq(event_at("prepare k 3"), -1);
	log_payloads(payloads, sizeof(payloads));
	ck_assert_str_eq(payloads, "Nk=1=held|Nk=2=after");
	close_store();
}
END_TEST

static void write_log(const char *const *payloads);

static const char *yield_cb(void *ctx)
{
	return ((struct notes *)ctx)->yield;
}

struct waiting {
	struct store_wait w;
	bool done;
	int rc;
};

static void waiting_done(struct store_wait *w, int rc)
{
	struct waiting *wt = KIND_CONTAINER(w, struct waiting, w);

	wt->done = true;
	wt->rc = rc;
}

static void reload_cb(struct store *s, void *arg, int rc, const char *errmsg,
		      const struct vmdir_load_report *r)
{
	(void)s;
	(void)errmsg;
	(void)r;
	*(int *)arg = rc;
}

/*
 * While git has the working tree (tree_yielded), a kind leaves its files
 * (KIND_LEFT): at start-up the log keeps what it replayed; later writes
 * are acknowledged but a wait for the files is not answered, the writer
 * looks again and again, and a reload is refused (-EAGAIN). Once git is
 * done (store_resume) the files are written, the wait answered, and a
 * flush empties the log.
 */
START_TEST(test_tree_yielded)
{
	struct waiting wt = {.w = {.done = waiting_done}};
	struct note_write w;
	char payloads[256], path[600];
	bool flushed = false;
	int reload_rc = 1;

	write_log((const char *const[]){"Nold=1=kept", NULL});
	ns.yield = "a merge is in progress";
	open_ok();
	st.tree_yielded = yield_cb;
	st.tree_yielded_ctx = &ns;
	ck_assert_uint_eq(ns.n_left, 1);
	ck_assert_uint_eq(store_unwritten(&st), 1);
	snprintf(path, sizeof(path), "%s/old", ns.dir);
	ck_assert_int_ne(access(path, F_OK), 0);
	log_payloads(payloads, sizeof(payloads));
	ck_assert_str_eq(payloads, "Nold=1=kept");

	note_init(&w, "new", "later");
	store_submit(&st, &w.w);
	run_until_finished(&w, 1);
	ck_assert_int_eq(w.code, 0);
	store_wait(&st, &wt.w);
	/* the writer looks again, and leaves again (n_left, a worker's
	 * count, read only while no writer job is out) */
	while (st.writer_busy || ns.n_left < 3)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert(!wt.done);
	ck_assert_uint_eq(store_unwritten(&st), 2);
	store_reload(&st, reload_cb, &reload_rc);
	while (reload_rc == 1)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_int_eq(reload_rc, -EAGAIN);

	ns.yield = NULL;
	store_resume(&st);
	while (!wt.done)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_int_eq(wt.rc, 0);
	assert_note_file("old", "1=kept\n");
	assert_note_file("new", "1=later\n");
	store_flush(&st, flushed_cb, &flushed);
	while (!flushed)
		uv_run(&loop, UV_RUN_ONCE);
	log_payloads(payloads, sizeof(payloads));
	ck_assert_str_eq(payloads, "");
	close_store();
}
END_TEST

/* A probe for changes made under us (store_check_files) looks before
 * the writer writes what waits (the writer waits while a probe looks:
 * what git put in the tree is learnt first, docs/architecture.md), then
 * the writer goes; and writes that keep coming do not starve it. */
START_TEST(test_probe_before_the_writer)
{
	struct waiting wt = {.w = {.done = waiting_done}};
	struct note_write w[20];
	char key[8];
	size_t n = 0;

	open_ok();
	note_init(&w[n], "a", "first");
	store_submit(&st, &w[n].w);
	run_until_finished(&w[n], 1);
	n++;
	ck_assert_uint_eq(store_unwritten(&st), 1);
	store_check_files(&st);
	while (ns.n_probes == 0)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert(!ns.probe_saw_files);
	store_wait(&st, &wt.w);
	while (!wt.done)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_int_eq(wt.rc, 0);
	assert_note_file("a", "1=first\n");

	/* A write acknowledged on every turn of the loop meanwhile (as many
	 * as the notes and their events allow; a slow probe just ends the
	 * writes sooner). */
	store_check_files(&st);
	while (ns.n_probes == 1) {
		if (n == sizeof(w) / sizeof(w[0])) {
			uv_run(&loop, UV_RUN_ONCE);
			continue;
		}
		snprintf(key, sizeof(key), "k%zu", n % 4);
		note_init(&w[n], key, "more");
		store_submit(&st, &w[n].w);
		run_until_finished(&w[n], 1);
		n++;
	}
	close_store();
}
END_TEST

/* What a probe looks at: where files moved after git gave the tree back
 * (store_check_moved), every file after a change of HEAD or the index
 * (store_check_files); asked for while the first looks, every file
 * comes next. */
START_TEST(test_probe_of_the_moved_or_of_every_file)
{
	open_ok();
	store_check_moved(&st);
	store_check_files(&st);
	while (ns.n_probes < 2)
		uv_run(&loop, UV_RUN_ONCE);
	store_check_moved(&st);
	while (ns.n_probes < 3)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert_uint_eq(ns.n_modes, 3);
	ck_assert_int_eq(ns.modes[0], RESCAN_PROBE_MOVED);
	ck_assert_int_eq(ns.modes[1], RESCAN_PROBE);
	ck_assert_int_eq(ns.modes[2], RESCAN_PROBE_MOVED);
	close_store();
}
END_TEST

/* Append payloads to the log as one batch, as a daemon would have. */
static void write_log(const char *const *payloads)
{
	struct wal w;
	struct iovec iov[8];
	size_t n = 0;

	ck_assert_int_eq(wal_open(&w, &sd, STORE_WAL_NAME, NULL, NULL, NULL, 0),
			 0);
	for (; payloads[n]; n++)
		iov[n] = (struct iovec){(void *)payloads[n],
					strlen(payloads[n])};
	ck_assert_int_eq(wal_append(&w, iov, n), 0);
	wal_close(&w);
}

/* A record of a kind this daemon does not know stops the start, with a
 * message saying so; the log is left as it was. */
START_TEST(test_unknown_kind_refused)
{
	char msg[512] = "";
	struct stat before, after;

	write_log((const char *const[]){"Nk=1=v", "Zfrom the future", NULL});
	ck_assert_int_eq(stat(wal_path, &before), 0);
	ck_assert_int_eq(open_store(msg, sizeof(msg)), -EPROTO);
	ck_assert_msg(strstr(msg, "kind this vmemd does not know") &&
			      strstr(msg, "0x5a") &&
			      strstr(msg, "refusing to start"),
		      "%s", msg);
	ck_assert_int_eq(stat(wal_path, &after), 0);
	ck_assert_int_eq(after.st_size, before.st_size);
	close_store();
}
END_TEST

/* Logs of 0.1.0 hold bare decision JSON and {"deleted": ...}
 * tombstones: they still replay, as decisions. */
START_TEST(test_old_decision_log_replays)
{
	struct coord kept = {1, 2, 3}, gone = {4, 1, 2};
	const struct record *r;
	char path[600];

	write_log((const char *const[]){
		"{\"coordinate\":{\"x\":1,\"y\":2,\"z\":3},\"content\":"
		"\"kept\",\"timestamp\":\"2025-01-06T15:30:00.123456Z\","
		"\"agent_id\":\"old\",\"issue_context\":null,\"version\":1}",
		"{\"coordinate\":{\"x\":4,\"y\":1,\"z\":2},\"content\":"
		"\"gone\",\"timestamp\":\"2025-01-06T15:30:00.123457Z\","
		"\"agent_id\":\"old\",\"issue_context\":null,\"version\":1}",
		NULL});
	write_log((const char *const[]){
		"{\"deleted\":{\"x\":4,\"y\":1,\"z\":2}}", NULL});
	open_ok();
	r = index_get(&ds.index, &kept);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_nonnull(strstr(r->json, "\"kept\""));
	ck_assert_ptr_null(index_get(&ds.index, &gone));
	ck_assert_uint_eq(ds.n_replayed, 2);
	snprintf(path, sizeof(path), "%s/.vector-memory/x-001/y-2-z-3.json",
		 tree);
	ck_assert_int_eq(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/.vector-memory/x-004/y-1-z-2.json",
		 tree);
	ck_assert_int_ne(access(path, F_OK), 0);
	close_store();
}
END_TEST

/* ---- reading the log back ---- */

struct joined {
	char *out;
	size_t n, len;
};

static int join_cb(void *ctx, const char *payload, size_t len, char *errmsg,
		   size_t errn)
{
	struct joined *j = ctx;
	int w;

	(void)errmsg;
	(void)errn;
	w = snprintf(j->out + j->len, j->n - j->len, "%s%.*s",
		     j->len ? "|" : "", (int)len, payload);
	ck_assert_int_lt(j->len + (size_t)w, j->n);
	j->len += (size_t)w;
	return 0;
}

static void log_payloads(char *out, size_t n)
{
	struct joined j = {out, n, 0};
	const struct wal_replay replay = {.record = join_cb, .ctx = &j};
	struct wal w;

	out[0] = '\0';
	ck_assert_int_eq(
		wal_open(&w, &sd, STORE_WAL_NAME, &replay, NULL, NULL, 0), 0);
	wal_close(&w);
}

int main(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_apply_order_and_key_locks);
	tcase_add_test(tc, test_next_batch_gathers);
	tcase_add_test(tc, test_crash_then_replay);
	tcase_add_test(tc, test_group_across_kinds);
	tcase_add_test(tc, test_checkpoint_waits_for_sync);
	tcase_add_test(tc, test_cancel_waiting_write);
	tcase_add_test(tc, test_unknown_kind_refused);
	tcase_add_test(tc, test_tree_yielded);
	tcase_add_test(tc, test_probe_before_the_writer);
	tcase_add_test(tc, test_probe_of_the_moved_or_of_every_file);
	tcase_add_test(tc, test_old_decision_log_replays);
	suite_add_tcase(s, tc);
	return run_suite(s);
}

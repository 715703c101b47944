/*
 * The write path, for every kind of record (kind.h): a write takes its
 * lock, is validated and prepared by its kind against the current state,
 * joins the batch being filled for the write-ahead log, and is applied by
 * its kind and acknowledged (done callback) only once that batch is
 * fdatasynced. One log job runs at a time, so every write arriving
 * meanwhile shares the next fdatasync (group commit). Applied writes
 * leave their kind something to materialise; a background writer pass
 * asks every kind for it (coalescing repeated writes, without syncing),
 * and checkpoints have every kind sync what it wrote, then cut the log
 * records the files now hold from the log's head.
 *
 * The store never names a kind: it loops over writes and over the kinds
 * registered at store_open.
 *
 * Loop thread only; blocking work runs on the libuv thread pool (and the
 * log's own lane) with its data handed over whole.
 */
#ifndef VMEM_DAEMON_STORE_H
#define VMEM_DAEMON_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "kind.h"
#include "lane.h"
#include "locks.h"
#include "vmdir.h"
#include "wal.h"

/* Kinds one store serves at most. */
#define STORE_MAX_KINDS 8
/* Lock slots shared by the kinds that lock by key (kind.h). */
#define STORE_KEY_SLOTS 4096
/* The write-ahead log's name in the state directory. */
#define STORE_WAL_NAME "wal"

struct store;
struct store_write;
struct store_group;

/*
 * A kind's place in the store, embedded in the kind's state (which
 * outlives the store). The kind's init fills kind and n_lock_slots.
 */
struct store_kind {
	const struct kind *kind;
	size_t n_lock_slots; /* its own lock slots (kind.h, kind_lock) */

	/* Private to the store. */
	struct store *store;
	size_t lock_base; /* its first slot in the store's locks */
};

/*
 * Completion of a write: code 0 on success, else an RPC domain code
 * (errors.h) and a one-line message. The result (in the kind's part of
 * the write) is valid only during the call; the callback may free w.
 */
typedef void (*store_done_fn)(struct store_write *w, int code, const char *msg);

/*
 * A write, embedded in the kind's own write struct (the request and the
 * result: see the kind's header), which the caller owns until done().
 */
struct store_write {
	/* Request, filled by the caller. */
	struct store_kind *kind;
	uint64_t timeout_ms;
	const void *owner; /* the writer, for leases (a connection) */
	store_done_fn done;
	void *data; /* for the caller */

	/* The log bytes, set by the kind's prepare (kind.h). */
	const void *payload;
	size_t payload_len;

	/* Private to the store. */
	struct store *store;
	struct store_group *group; /* the group it belongs to */
	struct lock_set lock;
	size_t lock_slot;
	struct kind_lock lk; /* what it locks, for messages */
	bool has_lock;
	struct store_write *next;
};

/*
 * Completion of a group: code 0 when every item was stored (each item's
 * result is then valid during the call), else the RPC domain code and
 * message of the refusal, and the index of the item refused (SIZE_MAX
 * when the whole group failed, e.g. in the log).
 */
typedef void (*store_group_fn)(struct store_group *g, int code, const char *msg,
			       size_t failed);

/*
 * Writes that succeed or fail together (decision.store_many), of any
 * kinds: all their locks are taken as one set (in order), every item is
 * prepared in item order against the state before the group, and only
 * then are all logged in one batch; after a crash the log replays all of
 * them or none. Items are filled as for store_submit; their done and
 * owner fields are the group's. Items must not share a lock (each sees
 * the state before the group, not the others' changes): the caller
 * refuses such groups.
 */
struct store_group {
	struct store_write **items;
	size_t n;
	const void *owner;
	uint64_t timeout_ms;
	store_group_fn done;
	void *data; /* for the caller */

	/* Private to the store. */
	struct store *store;
	size_t *slots;
	struct lock_set lock;
	size_t n_finished;
	int code;
	char msg[200];
};

typedef void (*store_idle_fn)(struct store *s, void *arg);

/* The end of a reload: rc 0 with what it quarantined, or -errno with a
 * reason. rep is valid during the call only. */
typedef void (*store_reload_fn)(struct store *s, void *arg, int rc,
				const char *errmsg,
				const struct vmdir_load_report *rep);

/* Told of every change a kind applied (a write, or a reload), during the
 * call; not of the log's replay at start-up (each kind keeps what it
 * replayed, for whoever starts commits). */
typedef void (*store_change_fn)(void *ctx, const struct kind_change *ch);

/* For tests: on the lane's thread, before a batch of records is
 * appended (done false) and after its append and fdatasync returned rc
 * (done true). */
typedef void (*store_log_hook_fn)(void *ctx, size_t records, bool done, int rc);

struct wal_job;

/*
 * A wait for the files (store_wait): done runs once, with 0 when its
 * condition holds, or -ESHUTDOWN when the store closes first.
 */
struct store_wait {
	void (*done)(struct store_wait *w, int rc);
	void *data;
	bool idle; /* wait until the store is idle, not only the files */
	/* private */
	uint64_t need_seq;
	struct store_wait *next;
};

/* A caller of store_reload waiting for its reload (private). */
struct store_reload_wait {
	store_reload_fn cb;
	void *arg;
	struct store_reload_wait *next;
};

struct store {
	uv_loop_t *loop;
	struct store_kind *kinds[STORE_MAX_KINDS]; /* registered, borrowed */
	size_t n_kinds;
	size_t key_base; /* the first of the STORE_KEY_SLOTS */
	struct locks locks;
	struct wal wal;
	struct lane wal_lane; /* log jobs: never behind the thread pool */

	/* Group commit: writes validated since the last hand-over, then
	 * moved into wal_next, the batch queued behind the running append,
	 * which keeps gathering until the lane starts it (lane_amend), so
	 * one append follows the other without a turn of the loop. */
	struct store_write *filling_head, *filling_tail;
	size_t filling_n;
	struct wal_job *wal_next; /* NULL once the lane took it */
	size_t wal_jobs;	  /* log jobs submitted, after not yet run */
	bool cutting;		  /* a checkpoint's cut is among them */
	bool wal_failing;	  /* the last append failed */
	uint64_t wal_end; /* log bytes, as of the last finished log job */
	size_t in_flight; /* writes inside log jobs not finished */
	/* The lane's own: the batch's payloads as one iovec array. */
	struct iovec *wal_iov;
	size_t wal_iov_cap;
	/* For tests (store_set_log_hook); read on the lane. */
	store_log_hook_fn log_hook;
	void *log_hook_ctx;

	/* The file writer: one pass (or a checkpoint's sync) at a time. */
	bool writer_busy;
	uv_timer_t writer_timer;
	unsigned writer_retry_ms;
	uint64_t writer_seq;	  /* writer passes started */
	uint64_t writer_done_seq; /* the last pass that succeeded */

	/* Checkpoint: files synced, then the log's head cut (store.c). */
	uv_timer_t ckpt_timer; /* a checkpoint after writes go quiet */
	bool ckpt;	       /* one is running */
	bool ckpt_synced;
	uint64_t ckpt_head;	/* log bytes it will cut */
	uint64_t ckpt_need_seq; /* writer pass it waits for */

	int64_t last_timestamp;
	char last_error[512];
	uint64_t n_errors; /* failures so far (last_error is the newest) */

	store_change_fn on_change; /* NULL: nobody listens yet */
	void *on_change_ctx;

	/* A reload from the files (store_reload), and a probe for changes
	 * made under us (store_check_files; of every file when probe_all,
	 * else only of files moved: store_check_moved). */
	bool probe_wanted;
	bool probe_all;
	bool probe_after_yield; /* a change seen while git had the tree */
	bool probing;
	bool reloading;
	bool reload_running; /* its load job is in flight */
	struct store_reload_wait *reload_waiters; /* of the reload to come */
	struct store_reload_wait *reload_next;	  /* came while it read */
	uint64_t reloads_done;			  /* reloads finished */

	/* What a probe or a reload found (quarantined files, files in
	 * conflict), every kind's: each report goes here, to be logged and
	 * shown in health. NULL: nobody listens. */
	void (*on_report)(void *ctx, const struct vmdir_load_report *rep);
	void *on_report_ctx;

	/* Why git has the working tree now (an operation runs: conflicts.h),
	 * or NULL; NULL hook: never. Meanwhile the kinds leave the files of
	 * the tree alone (KIND_LEFT), the writer looks again every
	 * WRITER_YIELD_MS (store.c), reloads are refused with -EAGAIN, and
	 * probes run even with writes pending; store_resume ends it. */
	const char *(*tree_yielded)(void *ctx);
	void *tree_yielded_ctx;

	/* A pending store_flush, and store_waits. */
	store_idle_fn idle_cb;
	void *idle_arg;
	struct store_wait *waits;
	bool closed;
};

/*
 * Open the write-ahead log (STORE_WAL_NAME in the state directory dir,
 * which must outlive the store) for the kinds given (at most
 * STORE_MAX_KINDS, each initialised by its kind, borrowed until
 * store_close): replay it through the kinds (a record of a kind not
 * given stops the start), have every kind materialise what it replayed
 * durably, empty the log, then have every kind load its state (what
 * they quarantined goes into rep, which is zeroed first). Blocking;
 * called once at start-up, before the loop runs. Returns 0 or -errno
 * with errmsg; store_close releases what was set up either way.
 */
int store_open(struct store *s, uv_loop_t *loop, const struct statedir *dir,
	       struct store_kind *const *kinds, size_t n_kinds,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn);

/* Submit a write; w->done runs exactly once, never before this returns
 * for a write that has to wait for the log. */
void store_submit(struct store *s, struct store_write *w);

/*
 * Give up a write that still waits for its lock (a cancelled request):
 * it leaves the lock's queue, done will not run, and true is returned;
 * the caller answers and releases it. A write that holds its lock has
 * been validated and joins (or is in) the log: false, and it completes
 * through done as usual.
 */
bool store_cancel(struct store *s, struct store_write *w);

/* Submit a group; g->done runs exactly once, possibly before this
 * returns. */
void store_submit_group(struct store *s, struct store_group *g);

/* Why a wait for the set's locks ended with status (see locks.h): an RPC
 * domain code and a message naming what it waited for. */
int store_lock_error(struct store *s, const struct lock_set *set, int status,
		     char *msg, size_t n);

/* The store's lock slot of one of the kind's own slots (for leases). */
size_t store_kind_slot(const struct store_kind *k, size_t slot);

/* For kinds: the server-assigned timestamp of a record being prepared,
 * in microseconds since the epoch, strictly increasing across every
 * kind (even when the clock steps back). */
int64_t store_timestamp(struct store_kind *k);

/* For kinds, at load: a time already given to a record, which the clock
 * of store_timestamp will pass (so times keep growing across restarts,
 * even when the system clock went back meanwhile). */
void store_timestamp_seen(struct store_kind *k, int64_t usec);

/* For kinds: report a change applied to their state (on_change). */
void store_changed(struct store_kind *k, enum kind_change_type type,
		   const void *detail);

/* For kinds: have the files looked at (store_check_files) once the
 * current step is over. */
void store_probe_soon(struct store_kind *k);

/* Call cb once no write is in flight, every applied write is in synced
 * files and the log is empty (used for a graceful stop). */
void store_flush(struct store *s, store_idle_fn cb, void *arg);

/*
 * Make every kind's state what the files say (after a checkout, a pull,
 * a reset): new writes are held, every acknowledged write is written and
 * checkpointed (so the log can never bring it back over the new files),
 * then the kinds rescan their files on the thread pool and swap the
 * result in, reporting what changed (KIND_RELOADED), and the writes held
 * meanwhile are validated again against the new state. cb runs once.
 * Calls coalesce: a call made before a reload starts reading the files
 * shares that reload's result; a call made while it reads waits for the
 * next reload, which starts as soon as that one ends. Every cb of one
 * reload gets the same rep; reloads_done counts reloads, so a caller can
 * tell whether it saw this rep already. -EAGAIN (through cb) while git
 * has the working tree (tree_yielded; the files are looked at again
 * when it ends).
 */
void store_reload(struct store *s, store_reload_fn cb, void *arg);

/* Git gave the tree back (tree_yielded ended): write what waits, and
 * look at the files if a change was seen meanwhile. */
void store_resume(struct store *s);

/*
 * Files may have changed under us (a checkout, a pull): have the kinds
 * probe them without holding writes, and reload (store_reload) only if
 * one says they differ from what it last saw or wrote. Cheap when
 * nothing changed.
 */
void store_check_files(struct store *s);

/*
 * The same, looking only where files were created, removed or renamed
 * since the kinds last looked (RESCAN_PROBE_MOVED): after git held the
 * tree without changing the index or HEAD (a git status), what git
 * itself may have changed. Cheap however large the tree.
 */
void store_check_moved(struct store *s);

/*
 * w->done(w, 0) once every write applied before this call is
 * materialised (a writer pass that started after the call has
 * succeeded), or, with w->idle, once the store is idle as for a stop
 * (nothing in flight, every file written and synced, the log empty). The
 * files are written now rather than after the coalescing delay, and with
 * idle a checkpoint starts now. done may run before this returns. Waits
 * still pending when the store closes get -ESHUTDOWN.
 */
void store_wait(struct store *s, struct store_wait *w);

/* Forget a wait whose done has not run (its caller gave up). */
void store_wait_cancel(struct store *s, struct store_wait *w);

/* True when every applied write of the committed kinds is in its file
 * (synced or not): what a commit may take from the tree. */
bool store_files_written(const struct store *s);

/* Run the file writer now rather than after the coalescing delay. */
void store_write_files_now(struct store *s);

/* For tests: fn(ctx, ...) around every log append (store_log_hook_fn);
 * NULL clears. Set while no log job runs. */
void store_set_log_hook(struct store *s, store_log_hook_fn fn, void *ctx);

/* True while a job of the store runs on another thread. */
bool store_jobs_running(const struct store *s);

/* True while the log or the file writer is failing (and retrying). */
bool store_failing(const struct store *s);

/* Applied writes not yet handed to a writer pass, over all kinds. */
size_t store_unwritten(const struct store *s);

/* Writes accepted but not yet materialised: being logged, or applied
 * and not yet handed to a writer pass. */
size_t store_pending(const struct store *s);

/* Release everything; waiting writes fail with UnavailableError. The
 * loop must run afterwards to close the store's handles. The kinds'
 * states are their owners' to release, after this. */
void store_close(struct store *s);

#endif

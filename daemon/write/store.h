/*
 * The decision store: the index plus the path every write takes to become
 * durable. A write takes its coordinate's lock, is validated against the
 * current state (layer rules, occupancy, if_version), joins the batch
 * being filled for the write-ahead log, and is applied to the index and
 * acknowledged (done callback) only once that batch is fdatasynced. One
 * log job runs at a time, so every write arriving meanwhile shares the
 * next fdatasync (group commit). Applied writes mark their coordinate
 * dirty; a background writer materialises dirty coordinates as files
 * (coalescing repeated writes, without syncing), and checkpoints sync the
 * files and cut the log records they now hold from the log's head.
 *
 * Loop thread only; blocking work runs on the libuv thread pool with its
 * data handed over whole.
 */
#ifndef VMEM_DAEMON_STORE_H
#define VMEM_DAEMON_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "conflicts.h"
#include "index.h"
#include "lane.h"
#include "locks.h"
#include "repo.h"
#include "vmdir.h"
#include "wal.h"

struct store;
struct store_write;
struct store_group;

/*
 * Completion of a write: code 0 on success, else an RPC domain code
 * (errors.h) and a one-line message. The result fields of w are valid only
 * during the call; the callback may free w.
 */
typedef void (*store_done_fn)(struct store_write *w, int code, const char *msg);

struct store_write {
	/* Request, filled by the caller, who owns d's strings and context
	 * and releases them after done(). For a store, d.content,
	 * d.content_len, d.agent_id and d.issue_context are required; the
	 * store sets d.coord, d.timestamp and d.version. */
	struct coord coord;
	bool is_delete;
	struct decision d;
	bool overwrite;
	int64_t if_version; /* 0: no compare-and-set */
	uint64_t timeout_ms;
	const void *owner; /* the writer, for leases (a connection) */
	store_done_fn done;
	void *data; /* for the caller */

	/* Result, valid during done(). */
	const struct record *stored; /* a store's new record */
	bool existed;		     /* a delete found a decision */

	/* Private to the store. */
	struct store *store;
	struct store_group *group; /* the store_many it belongs to */
	struct lock_set lock;
	size_t lock_slot;
	struct store_write *next;
	struct record *rec; /* the record a store will apply */
	char *tombstone;    /* a delete's log payload */
};

/*
 * Completion of a group: code 0 when every item was stored (each item's
 * stored field is then valid during the call), else the RPC domain code
 * and message of the refusal, and the index of the item refused (SIZE_MAX
 * when the whole group failed, e.g. in the log).
 */
typedef void (*store_group_fn)(struct store_group *g, int code, const char *msg,
			       size_t failed);

/*
 * Stores that succeed or fail together (decision.store_many): all their
 * coordinates are locked (in order), every item is validated, and only
 * then are all logged in one batch; after a crash the log replays all of
 * them or none. Items are stores (not deletes) filled as for
 * store_submit, with distinct coordinates; their done and owner fields
 * are the store's.
 */
struct store_group {
	struct store_write *items;
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

struct wal_batch;

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
	int max_x;
	struct index index;
	struct locks locks;
	struct wal wal;
	struct lane wal_lane; /* log jobs: never behind the thread pool */
	struct vmdir dir;

	/* Group commit: writes waiting for the next log job. */
	struct store_write *filling_head, *filling_tail;
	size_t filling_n;
	bool wal_busy;
	bool wal_failing; /* the last append failed */
	uint64_t wal_end; /* log bytes, as of the last finished log job */
	size_t in_flight; /* writes inside the running log job */

	/* Materialisation of dirty coordinates. */
	uint8_t *dirty;		    /* one flag per index slot */
	struct vmdir_stamp *stamps; /* per slot: its file as we last saw it */
	size_t *dirty_list;	    /* slots with the flag set */
	size_t n_dirty;
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

	/* Told of every write applied to the index and of every slot a
	 * reload changed (reloaded true); the slots the log replay changed
	 * at start-up are listed in replayed instead. */
	void (*on_applied)(void *ctx, size_t slot, bool reloaded);
	void *on_applied_ctx;
	size_t *replayed; /* slots changed by the replay (owned) */
	size_t n_replayed;

	/* A reload from the files (store_reload), and a probe for changes
	 * made under us (store_check_files). */
	bool probe_wanted;
	bool probe_after_yield; /* a change seen while git had the tree */
	bool probing;
	bool reloading;
	bool reload_running; /* its load job is in flight */
	struct store_reload_wait *reload_waiters; /* of the reload to come */
	struct store_reload_wait *reload_next;	  /* came while it read */
	uint64_t reloads_done;			  /* reloads finished */

	/* A reload is about to put rec (NULL: none) where old was, for a
	 * change under us that is no conflict's end (old is still in the
	 * index during the call). */
	void (*on_replacing)(void *ctx, size_t slot, const struct record *old,
			     const struct record *rec);
	void *on_replacing_ctx;

	/* What a probe or a reload found (quarantined, conflicted files):
	 * every report goes here, to be logged and shown in health. */
	void (*on_report)(void *ctx, const struct vmdir_load_report *rep);
	void *on_report_ctx;

	/* Git conflicts and operations (conflicts.h), or NULL: conflicted
	 * coordinates refuse writes and are held, not written; while git
	 * has the tree the writer writes nothing there and reloads wait. */
	struct conflicts *conflicts;

	/* A pending store_flush, and store_waits. */
	store_idle_fn idle_cb;
	void *idle_arg;
	struct store_wait *waits;
	bool closed;
};

/*
 * Replay the write-ahead log onto the files and empty it, then load every
 * decision file (quarantining bad ones, see vmdir.h) into the index.
 * With cf, the files in conflict (unmerged, listed in u, or holding
 * markers) are neither written nor loaded: the replay keeps their
 * versions as held records and rep->conflicted lists them (for
 * conflicts_start). Blocking; called once at start-up. Returns 0 or
 * -errno with errmsg.
 */
int store_open(struct store *s, uv_loop_t *loop, const struct repo *r,
	       int max_x, struct conflicts *cf, const struct unmerged_set *u,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn);

/* Git gave the tree back (the yield ended): write what waits, and look
 * at the files. */
void store_resume(struct store *s);

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
 * domain code and a message naming the coordinate. */
int store_lock_error(struct store *s, const struct lock_set *set, int status,
		     char *msg, size_t n);

/* Call cb once no write is in flight, every applied write is in synced
 * files and the log is empty (used for a graceful stop). */
void store_flush(struct store *s, store_idle_fn cb, void *arg);

/*
 * Make the index what the files say (after a checkout, a pull, a reset):
 * new writes are held, every acknowledged write is written and
 * checkpointed (so the log can never bring it back over the new files),
 * then the files are loaded afresh on the thread pool and swapped in;
 * coordinates that changed are reported through on_applied, and the
 * writes held meanwhile are validated again against the new state. cb
 * runs once. Calls coalesce: a call made before a reload starts reading
 * the files shares that reload's result; a call made while it reads waits
 * for the next reload, which starts as soon as that one ends. Every cb of
 * one reload gets the same rep; reloads_done counts reloads, so a caller
 * can tell whether it saw this rep already.
 * -EAGAIN (through cb) while git has the working tree (a merge, a
 * rebase... in progress; the files are looked at again when it ends).
 */
void store_reload(struct store *s, store_reload_fn cb, void *arg);

/*
 * Files may have changed under us (a checkout, a pull): rescan them by
 * stamp without holding writes, and reload (store_reload) only if a file
 * differs from what we last saw or wrote. Cheap when nothing changed.
 */
void store_check_files(struct store *s);

/*
 * w->done(w, 0) once every write applied before this call is in its file
 * (a writer pass that started after the call has succeeded), or, with
 * w->idle, once the store is idle as for a stop (nothing in flight, every
 * file written and synced, the log empty). The files are written now
 * rather than after the coalescing delay, and with idle a checkpoint
 * starts now. done may run before this returns. Waits still pending when
 * the store closes get -ESHUTDOWN.
 */
void store_wait(struct store *s, struct store_wait *w);

/* Forget a wait whose done has not run (its caller gave up). */
void store_wait_cancel(struct store *s, struct store_wait *w);

/* True when every applied write is in its file (synced or not). */
bool store_files_written(const struct store *s);

/* Write the dirty files now rather than after the coalescing delay. */
void store_write_files_now(struct store *s);

/* True while a job of the store runs on another thread. */
bool store_jobs_running(const struct store *s);

/* True while the log or the file writer is failing (and retrying). */
bool store_failing(const struct store *s);

/* Writes accepted but not yet in synced files. */
size_t store_pending(const struct store *s);

/* Release everything; waiting writes fail with UnavailableError. The
 * loop must run afterwards to close the store's handles. */
void store_close(struct store *s);

#endif

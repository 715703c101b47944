/*
 * Conflicts inside .vector-memory as a state of the daemon, and the
 * working tree yielded to git while it runs an operation.
 *
 * A coordinate is conflicted while git's index has unmerged entries for
 * its file (stages 1-3) or the file holds conflict markers. Meanwhile the
 * daemon keeps serving the version it had acknowledged (the index keeps
 * it, and a "held" conflict record on disk keeps it across restarts),
 * refuses writes there (ConflictError), never writes or stages its file,
 * defers commits (the reason names the file) and lists it in health. The
 * conflict ends when git no longer shows it (the user's own git, or
 * conflict.resolve); the next reload then loads the file, and when that
 * drops the acknowledged version, the held record becomes a "resolution"
 * record (logged, listed in health and by conflict.list).
 *
 * A file deleted on one side and modified on the other is a conflict git
 * does not hand to merge drivers; when the merge driver is registered,
 * its rule applies here: the modification is kept (written, staged, and
 * reported in a merge-driver record).
 *
 * Yielding: while git runs an operation (gitop.h) the file writer writes
 * nothing in the tree and reloads wait; the state is re-checked on every
 * change the repository watcher sees and at least once a second, and
 * `resumed` runs when it ends.
 *
 * Loop thread, except the functions marked "any thread", which read only
 * the paths fixed at init.
 */
#ifndef VMEM_DAEMON_CONFLICTS_H
#define VMEM_DAEMON_CONFLICTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "index.h"
#include "protocol/conflict.h"
#include "repo.h"
#include "unmerged.h"
#include "vmdir.h"

#define CONFLICTS_DROPS_MAX 64 /* drops health remembers (the newest) */
#define CONFLICTS_YIELD_LEN 160

struct conflict {
	struct coord coord;
	size_t slot;
	char reason[VMEM_ERRMSG_LEN]; /* "unmerged: both modified", ... */
	unsigned stages;	      /* unmerged stages; 0: markers only */
	char oid[4][UNMERGED_OID_LEN + 1];
	int64_t since_usec;
	bool ended; /* git no longer shows it: the next reload applies it */
};

/* An acknowledged version a resolution dropped. */
struct conflict_drop {
	struct coord coord;
	int64_t at_usec;
	int64_t version; /* of the version dropped */
	char timestamp[VMEM_TIMESTAMP_LEN + 1];
	char agent_id[VMEM_AGENT_ID_MAX + 1];
	char record[CONFLICT_NAME_MAX]; /* the record keeping it */
};

struct conflicts_job;

struct conflicts {
	uv_loop_t *loop;
	int max_x;
	size_t n_slots;
	char *root, *gitdir, *statedir; /* (owned; statedir for messages) */
	const struct statedir *state;	/* the daemon's (read-only) */
	mode_t file_mode, dir_mode;	/* of what we write in the tree */
	uint8_t *flag;			/* per slot: conflicted */
	uint8_t *z1; /* per slot: a z=1 write was acknowledged there */
	struct conflict *list;
	size_t n, cap;
	struct conflict_drop drops[CONFLICTS_DROPS_MAX]; /* a ring */
	size_t n_drops;					 /* in the ring */
	uint64_t drops_seen;				 /* since start */
	char yield[CONFLICTS_YIELD_LEN]; /* why the tree is git's now */
	uv_timer_t yield_timer;
	void (*resumed)(void *ctx); /* the yield ended */
	void *resumed_ctx;
	void (*touched)(void *ctx); /* we changed files: look at them */
	void *touched_ctx;
	/* a new conflict (after its log line): path is its file's */
	void (*appeared)(void *ctx, const char *path, const char *reason);
	void *appeared_ctx;
	const struct index *ix; /* the versions served (for resolutions) */
	struct conflicts_job *jobs, *jobs_tail; /* record files to change */
	bool job_running;
	size_t resolving;	 /* resolution jobs on the thread pool */
	uint64_t records_failed; /* record jobs that failed */
	char last_error[320];
	bool closed;
};

/*
 * Set up (no I/O): r's paths and modes are copied; its state directory
 * (opened, repo_lock) is used for the records and must outlive cf.
 * 0 or -ENOMEM.
 */
int conflicts_init(struct conflicts *cf, uv_loop_t *loop, size_t n_slots,
		   int max_x, const struct repo *r);

/* True while a job of the module runs on the thread pool. */
static inline bool conflicts_busy(const struct conflicts *cf)
{
	return cf->job_running || cf->resolving > 0;
}

/* Stop (idempotent); the loop must run afterwards to close the timer.
 * The record jobs running or queued finish on their own meanwhile. */
void conflicts_close(struct conflicts *cf);

/* Release the memory, after the loop closed the timer. */
void conflicts_done(struct conflicts *cf);

static inline bool conflicts_has(const struct conflicts *cf, size_t slot)
{
	return cf && cf->flag[slot];
}

/* The conflict of slot, or NULL. */
const struct conflict *conflicts_get(const struct conflicts *cf, size_t slot);

/*
 * Validation of a write at slot (coordinate c; occupied: the index holds
 * a decision there): 0 to go on, or RPC_CONFLICT (conflicted) or
 * RPC_IMMUTABLE_LAYER (a store at a z=1 coordinate whose decision this
 * daemon acknowledged before and a git command removed) with msg.
 */
int conflicts_refuse(const struct conflicts *cf, size_t slot,
		     const struct coord *c, bool occupied, bool is_delete,
		     char *msg, size_t n);

/* A write was acknowledged at slot (for the z=1 rule). */
void conflicts_acknowledged(struct conflicts *cf, size_t slot);

/* Remember (health's last_error) and log a failure to see or keep
 * conflicts. */
void __attribute__((format(printf, 2, 3)))
conflicts_fail(struct conflicts *cf, const char *fmt, ...);

/* Any thread: is git running an operation (see gitop.h)? */
bool conflicts_yield_check(const struct conflicts *cf, char *why, size_t n);

/* Any thread: the same question as an interrupt callback of a file
 * writer or a rescan (cf: a struct conflicts *, or NULL: never); without
 * thorough, git's locks and state files only (gitop_busy), not its
 * processes. */
bool conflicts_interrupt(void *cf, bool thorough);

/* Any thread: git's unmerged decision files. 0 or -errno (errmsg). */
int conflicts_unmerged(const struct conflicts *cf, struct unmerged_set *out,
		       char *errmsg, size_t errn);

/*
 * Any thread: keep json (a compact decision, or NULL for "none") as the
 * held version of c, durably. 0 or -errno (errmsg).
 */
int conflicts_hold(const struct conflicts *cf, const struct coord *c,
		   const char *json, char *errmsg, size_t errn);

/* What the writer or the watcher saw: why git has the tree ("" or NULL:
 * it does not). Runs resumed when a yield ends. */
void conflicts_set_yield(struct conflicts *cf, const char *why);

/* Look at the git directory now (a few lstat calls) and set the yield. */
void conflicts_check_yield(struct conflicts *cf);

/*
 * A scan's findings (the unmerged set and the files the scan reported in
 * rep->conflicted). New conflicts are added and logged, and their slots
 * put in fresh (the caller writes their held versions); conflicts git no
 * longer shows are removed with apply (a reload, which loads their files:
 * their slots go in ended, and the caller reports each through
 * conflicts_ended) or only marked ended without (a probe). fresh and
 * ended have room for n_slots entries each. Returns true when a conflict
 * ended (without apply: a reload must follow).
 */
bool conflicts_update(struct conflicts *cf, const struct unmerged_set *u,
		      const struct vmdir_load_report *rep, bool apply,
		      size_t *fresh, size_t *n_fresh, size_t *ended,
		      size_t *n_ended);

/*
 * A conflict ended and the reload put now (NULL: no decision) where the
 * held version held_json (NULL: none) was: the held record goes, and
 * when now is not the held version, a "resolution" record keeps the
 * dropped one (logged and listed in health).
 */
void conflicts_ended(struct conflicts *cf, const struct coord *c,
		     const char *held_json, const struct record *now);

/*
 * A change under us (a reset, a stash, a checkout) replaced or removed an
 * acknowledged version that was not committed yet (held_json): it is kept
 * in a "replaced" record, logged, and listed in health's dropped, so that
 * it stays findable.
 */
void conflicts_replaced(struct conflicts *cf, const struct coord *c,
			const char *held_json, const struct record *now);

/*
 * Any thread: is json (a compact decision) the version HEAD's tree holds
 * at its path? A write-once (z=1) decision that left the tree, or changed
 * there, while HEAD still holds it was not changed by a commit of anyone:
 * the daemon keeps it and writes its file again (z=1 is never rewritten,
 * and never deleted by a commit of the daemon's). False when unsure.
 */
bool conflicts_in_head(const struct conflicts *cf, const char *json);

/* A write-once decision kept over a change in the tree (see
 * conflicts_in_head): say so. */
void conflicts_z1_restored(struct conflicts *cf, const struct coord *c);

/* The writer found conflict markers in slot's file (its held version is
 * already written): make it a conflict until a scan says more. */
void conflicts_markers_found(struct conflicts *cf, size_t slot);

/*
 * Why commits must wait: a conflict ("conflict in .vector-memory/...")
 * or git having the tree (looked at again now, so a commit follows git
 * at once). true with why, or false.
 */
bool conflicts_defer(struct conflicts *cf, char *why, size_t n);

/* Which version a resolution keeps. */
enum conflicts_keep {
	CONFLICTS_KEEP_OURS,
	CONFLICTS_KEEP_THEIRS,
	CONFLICTS_KEEP_ACKNOWLEDGED,
};

/*
 * The end of a resolution: rc 0 with the version kept and the
 * acknowledged version it drops (compact JSON, NULL for none; both valid
 * during the call), 1 when an automatic resolution did not apply (the
 * merge driver is not registered), or -errno with a message. code is the
 * RPC domain code of a failure.
 */
typedef void (*conflicts_resolved_fn)(void *arg, int rc, int code,
				      const char *msg, const char *kept,
				      const char *dropped);

/*
 * Resolve the conflict of slot on the thread pool: write the kept
 * version (git's ours or theirs side: the stage's blob, or that side of
 * the markers; or held_json, the acknowledged version, NULL for none) to
 * the file, or remove it when the side has none, and stage it when git
 * has unmerged entries for it (git update-index, under git's own
 * index.lock). The daemon takes the file at its next reload, as after a
 * resolution by hand. With automatic (the merge driver's rule for a file
 * deleted on one side and modified on the other, which git does not hand
 * to merge drivers), nothing happens unless the driver is registered.
 * cb runs once, on the loop. 0, or -errno when it cannot start (cb does
 * not run then).
 */
int conflicts_resolve(struct conflicts *cf, size_t slot,
		      enum conflicts_keep keep, const char *held_json,
		      bool automatic, conflicts_resolved_fn cb, void *arg);

/*
 * Start-up, blocking, after the store loaded: make the scan's conflicts
 * the state, put in ix the version to serve for each (its held record,
 * else what the log replay put there, else git's "ours" side), and settle
 * held records of coordinates no longer conflicted (removed, or made
 * resolution records when the file dropped them). 0 or -errno (errmsg).
 */
int conflicts_start(struct conflicts *cf, struct index *ix,
		    const struct unmerged_set *u,
		    const struct vmdir_load_report *rep, char *errmsg,
		    size_t errn);

#endif

/*
 * Decisions as a record kind (kind.h): one record per coordinate (x, y,
 * z), versioned, layer z=1 write-once. The kind validates writes against
 * the index (find/index, with its search index), applies them to it,
 * logs a store as the record's compact JSON and a delete as
 * {"deleted":{"x":..,"y":..,"z":..}} (the log payloads of 0.1.0, so its
 * logs still replay), and materialises each coordinate as its file under
 * .vector-memory (git/vmdir), which git commits.
 *
 * Locks: one slot of its own per coordinate, which leases (lock.acquire)
 * take too. Loop thread only, but for the pool functions of the table,
 * which touch only their snapshot and the read-only dir.
 */
#ifndef VMEM_DAEMON_KIND_DECISION_H
#define VMEM_DAEMON_KIND_DECISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conflicts.h"
#include "index.h"
#include "kind.h"
#include "protocol/decision.h"
#include "store.h"
#include "vmdir.h"
#include "xwatch.h"

extern const struct kind decision_kind;

/* The kind's state; owned by the daemon, registered with the store. */
struct decisions {
	struct store_kind sk; /* its place in the store */
	int max_x;
	struct index index; /* the authoritative index (read it freely) */
	struct vmdir dir;   /* .vector-memory (read-only paths) */

	/* Materialisation: coordinates applied but not yet handed to a
	 * writer pass, and each file as we last saw or wrote it. */
	uint8_t *dirty; /* one flag per slot */
	size_t *dirty_list;
	size_t n_dirty;
	struct vmdir_stamp *stamps;
	/* Per x (0..max_x): its directory's settled stamp when a scan last
	 * found every file there as stamps says, else zero; a probe of the
	 * moved (RESCAN_PROBE_MOVED) skips a directory that kept it. */
	struct vmdir_stamp *dirstamps;
	/* Per x: whether anything touched its directory since a scan found
	 * it whole (inotify): a probe of the moved skips the untouched
	 * without a stat, and lists the touched whatever their stamp. */
	struct xwatch xw;
	/* How far the state directory's index snapshot is from the index:
	 * the files a start from it would read (changed since it was saved,
	 * or not in it) plus the slots changed since this start; SIZE_MAX:
	 * no snapshot was used. */
	size_t snap_stale;

	/* Slots the log replay changed at start-up: they may differ from
	 * HEAD (whoever starts commits marks them). */
	size_t *replayed;
	size_t n_replayed;

	/* Git conflicts and operations, or NULL (decisions_use_conflicts):
	 * conflicted coordinates refuse writes and are held, not written;
	 * while git has the tree no file is written (KIND_LEFT). */
	struct conflicts *conflicts;
	/* Start-up only (until load): git's unmerged files, which the
	 * replay's writes and the load leave alone. */
	const struct unmerged_set *unmerged;
	/* A reload is about to put rec (NULL: none) where old was, for a
	 * change under us that is no conflict's end (old is still in the
	 * index during the call). */
	void (*on_replacing)(void *ctx, const struct record *old,
			     const struct record *rec);
	void *on_replacing_ctx;
};

/*
 * A decision write (decision.store or decision.delete, or an item of a
 * store_many), owned by the caller, zeroed, then filled: w.kind (the
 * decisions' sk), w's request fields and this request. For a store,
 * d.content, d.content_len, d.agent_id and d.issue_context are required
 * (the caller owns them and releases them after done); the kind sets
 * d.coord, d.timestamp and d.version.
 */
struct decision_write {
	struct store_write w;

	/* Request. */
	struct coord coord;
	bool is_delete;
	struct decision d;
	bool overwrite;
	int64_t if_version; /* 0: no compare-and-set */

	/* Result, valid during done(). */
	const struct record *stored; /* a store's new record */
	bool existed;		     /* a delete found a decision */

	/* Private to the kind. */
	struct record *rec; /* the record a store will apply */
	char *tombstone;    /* a delete's log payload */
};

/* The detail of a decision's kind_change: the coordinate, its slot and
 * its record now (NULL: none). Valid during the call. */
struct decision_change {
	size_t slot;
	struct coord coord;
	const struct record *rec;
};

/*
 * Set up the index and the files' paths (no I/O) for coordinates up to
 * max_x; root is the working tree (copied), state the state directory
 * whose quarantine/ takes bad files (borrowed: it must outlive ds). The
 * modes of the files written (dir.file_mode, dir.dir_mode) are the
 * caller's to set. 0 or -ENOMEM (then decisions_done cleans up).
 */
int decisions_init(struct decisions *ds, const char *root,
		   const struct statedir *state, int max_x);

/*
 * Before store_open: git's conflicts (cf, borrowed for ds's life) and,
 * for the start-up only, its unmerged files (u, borrowed until
 * store_open returns). The replay then writes no file in conflict (its
 * version is held: conflicts_hold) and none while git has the tree (the
 * log keeps them), and the load reports the files in conflict in
 * rep->conflicted instead of loading them (for conflicts_start).
 */
void decisions_use_conflicts(struct decisions *ds, struct conflicts *cf,
			     const struct unmerged_set *u);

/* Release the index and the rest; after store_close. Safe after a
 * failed decisions_init. */
void decisions_done(struct decisions *ds);

/*
 * A stop keeps the snapshot it started from while at most 1 in this many
 * decisions changed since (the next start reads those few files) rather
 * than rewrite all of it.
 */
#define DECISIONS_SNAP_STALE_DIV 64

/*
 * Save the index with its files' stamps as the state directory's
 * snapshot (find/indexsnap), which the next start's load takes records
 * from instead of reading files that did not change; unless the snapshot
 * there is close enough (*saved false, *stale: the files the next start
 * reads at most, see DECISIONS_SNAP_STALE_DIV). Blocking: after the loop
 * has stopped. The number of decisions the index holds, or -errno
 * (errmsg).
 */
long decisions_save_snapshot(struct decisions *ds, bool *saved, size_t *stale,
			     char *errmsg, size_t n);

/* The store's lock slot of a coordinate, as leases take it. */
size_t decisions_lock_slot(const struct decisions *ds, const struct coord *c);

#endif

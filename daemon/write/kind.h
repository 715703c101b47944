/*
 * A record kind: the table of functions through which the one write path
 * (store.h) handles a kind of record without knowing it. The store owns
 * the order of things (lock -> prepare -> log batch -> fdatasync -> apply
 * -> acknowledge -> writer -> checkpoint, and replay, load, reload); a
 * kind owns its records, its indexes, its log payloads and its files.
 *
 * A kind's state embeds a struct store_kind (its place in the store), and
 * every function of the table gets that pointer back; its writes embed a
 * struct store_write. KIND_CONTAINER recovers the embedding struct.
 *
 * Threads: every function runs on the loop thread, except those marked
 * "pool", which run on a libuv worker while the loop goes on, and may
 * touch only what they were handed (a snapshot or a job) and the parts
 * of the state that never change after start-up (paths, limits); and
 * load and replay, which run at start-up before the loop runs.
 *
 * docs/architecture.md, "Record kinds: how a kind plugs in", tells the
 * whole story; the header of each function says its part of it.
 */
#ifndef VMEM_DAEMON_KIND_H
#define VMEM_DAEMON_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;
struct store_kind;
struct store_write;
struct vmdir_load_report;

/* The struct of type whose member is at ptr. (clang-format would take
 * "(ptr) -" for a cast.) */
/* clang-format off */
#define KIND_CONTAINER(ptr, type, member)                                      \
	((type *)((char *)(ptr) - offsetof(type, member)))
/* clang-format on */

/* What prepare decided (else a negative RPC domain code, errors.h). */
enum {
	KIND_LOG = 0,  /* prepared: the payload joins the log batch */
	KIND_NOOP = 1, /* nothing to change: acknowledged as it is */
};

/* What write may answer besides 0 and -errno. */
enum {
	/* Some files were not written because git has the working tree (an
	 * operation runs: store.h, tree_yielded): written makes their items
	 * pending again, and the pass does not count as complete (no
	 * checkpoint cuts their log records; at start-up the log keeps
	 * them). */
	KIND_LEFT = 1,
};

/*
 * The lock a write holds from prepare until it is applied or refused:
 * one of the kind's own slots (n_lock_slots of them, e.g. one per
 * coordinate, which leases can also take), or a key (a session id, a
 * document id) that the store hashes into slots shared by all keyed
 * kinds, where a collision only makes two writers wait for each other
 * briefly. Keys are printable: a lock timeout's message shows them.
 */
struct kind_lock {
	size_t slot;	 /* of the kind's own, when key is NULL */
	const char *key; /* borrowed from the write; NULL: slot */
	size_t key_len;
};

/* What a change did, as reported to the daemon (struct kind_change). */
enum kind_change_type {
	KIND_STORED,   /* by a write */
	KIND_DELETED,  /* by a write */
	KIND_RELOADED, /* by a reload from the files (either way) */
};

/*
 * One change applied to a kind's state, handed to the store's on_change
 * callback (the daemon: commit queue and subscribers) during the call
 * only. detail is the kind's own description (its header says what).
 */
struct kind_change {
	const struct kind *kind;
	enum kind_change_type type;
	const void *detail;
};

/*
 * What a rescan does. A reload finds the new state of every file; a
 * probe only looks for a difference from what the kind last saw or
 * wrote, in every file, or (RESCAN_PROBE_MOVED) only where files were
 * created, removed or renamed since the kind last looked: what git does
 * to a file it changes, but not an edit in place (vmdir_dir_fn).
 */
enum rescan_mode { RESCAN_RELOAD, RESCAN_PROBE, RESCAN_PROBE_MOVED };

struct kind {
	const char *name; /* "decision": in messages and health */
	/* In the working tree and committed to git (the commit queue waits
	 * for its files), or local under <gitdir>/vmem. */
	bool committed;
	/* The first byte of each of its log payloads: replay dispatches on
	 * it. Decisions keep 0.1.0's bare JSON ('{'); every other kind
	 * picks a byte that cannot start JSON and writes it first. */
	unsigned char log_tag;

	/* ---- a write (loop) ---- */

	/* The write's lock into *out: 1, or 0 when it needs none. */
	int (*lock)(struct store_kind *k, const struct store_write *w,
		    struct kind_lock *out);
	/* The name of one of the kind's own lock slots, for messages
	 * ("(1, 2, 3)"); NULL for a kind without own slots. */
	void (*slot_name)(struct store_kind *k, size_t slot, char *buf,
			  size_t n);
	/*
	 * Validate the write against the current state, its lock held, and
	 * prepare it: ids, versions, the timestamp (store_timestamp), the
	 * record it will apply, and w->payload/payload_len, the log bytes
	 * (at least the tag; owned by the write's kind part until apply or
	 * unprepare). Returns KIND_LOG, KIND_NOOP (payload left NULL; the
	 * write's result says what it found), or a negative RPC domain code
	 * with a one-line message in msg. Nothing of the state changes here:
	 * the items of a group are all prepared before any is applied.
	 */
	int (*prepare)(struct store_kind *k, struct store_write *w, char *msg,
		       size_t n);
	/* Drop what prepare made (a refusal, a reload, a failed log). Safe
	 * on a write never prepared or already unprepared. */
	void (*unprepare)(struct store_kind *k, struct store_write *w);
	/* The write is durable: apply it to the indexes, note what must be
	 * materialised, report the change (store_changed), and fill the
	 * write's result. Cannot fail. */
	void (*apply)(struct store_kind *k, struct store_write *w);

	/* ---- start-up (blocking, before the loop runs) ---- */

	/* One log payload of this kind, in log order: apply it as apply
	 * would (without reporting it) and note it for materialisation.
	 * 0, or -errno with a reason in msg (start-up then fails). */
	int (*replay)(struct store_kind *k, const char *payload, size_t len,
		      char *msg, size_t n);
	/* Load the materialised state (after the replay was materialised
	 * and the log emptied). Quarantined files go into rep (zeroed,
	 * the caller's). 0 or -errno with errmsg. Required, as are lock,
	 * prepare, unprepare, apply, replay and the writer's four. */
	int (*load)(struct store_kind *k, struct vmdir_load_report *rep,
		    char *errmsg, size_t n);

	/* ---- materialisation: the file writer's pass ---- */

	/* Writes applied but not yet handed to a writer pass. */
	size_t (*pending)(const struct store_kind *k);
	/* Loop: take what is pending (clearing it) into *snap, a copy the
	 * pool can use alone. 0 or -ENOMEM (nothing taken). */
	int (*snapshot)(struct store_kind *k, void **snap);
	/* Pool: materialise the snapshot, without syncing unless sync (at
	 * start-up); a crash may leave it incomplete while the log still
	 * holds it. 0, KIND_LEFT, or -errno with errmsg. */
	int (*write)(struct store_kind *k, void *snap, bool sync, char *errmsg,
		     size_t n);
	/* Loop: the pass is over (rc from write): on failure, make the
	 * snapshot's items pending again unless newer writes did (with
	 * KIND_LEFT, the items left); free snap. */
	void (*written)(struct store_kind *k, void *snap, int rc);
	/* Pool: make everything written so far durable (a checkpoint cuts
	 * the log only after every kind's sync). 0 or -errno with errmsg.
	 * NULL only for a kind whose write is durable on return. */
	int (*sync)(struct store_kind *k, char *errmsg, size_t n);

	/* ---- reload after a change made under us (NULL: never) ---- */

	/*
	 * Loop: snapshot what a rescan compares against into *job (see
	 * enum rescan_mode). 0 or -ENOMEM.
	 */
	int (*rescan_begin)(struct store_kind *k, enum rescan_mode mode,
			    void **job);
	/* Pool: look at the files; quarantine into rep (zeroed). 0 or
	 * -errno with errmsg. */
	int (*rescan)(struct store_kind *k, void *job,
		      struct vmdir_load_report *rep, char *errmsg, size_t n);
	/*
	 * Loop, rc from rescan, rep what it reported: a probe answers 1
	 * when the files differ from what the kind knows (a reload
	 * follows), else 0; a reload that succeeded makes the state what
	 * the files say, reporting each change (KIND_RELOADED). Either may
	 * make items pending (the writer runs next). Frees job either way.
	 */
	int (*rescan_end)(struct store_kind *k, void *job, int rc, bool probe,
			  const struct vmdir_load_report *rep);
};

#endif

/*
 * Decisions as a record kind (see decision.h; the table's contract is in
 * kind.h).
 *
 * Invariants: the index holds only what the log made durable; a slot is
 * dirty from its write's apply until a writer pass snapshots it (a
 * failed pass makes it dirty again unless a newer write did); stamps[slot]
 * is the file as we last wrote or loaded it, so a rescan reads only the
 * files someone else changed.
 */
#include "decision.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errmsg.h"
#include "indexsnap.h"
#include "log.h"
#include "progress.h"
#include "protocol/errors.h"

static struct decisions *of(struct store_kind *k)
{
	return KIND_CONTAINER(k, struct decisions, sk);
}

static struct decision_write *decision_write_of(struct store_write *w)
{
	return KIND_CONTAINER(w, struct decision_write, w);
}

size_t decisions_lock_slot(const struct decisions *ds, const struct coord *c)
{
	return store_kind_slot(&ds->sk, index_slot(&ds->index, c));
}

static void mark_dirty(struct decisions *ds, size_t slot)
{
	if (ds->snap_stale < SIZE_MAX)
		ds->snap_stale++;
	if (ds->dirty[slot])
		return;
	ds->dirty[slot] = 1;
	ds->dirty_list[ds->n_dirty++] = slot;
}

/* Tell the daemon (commit queue, subscribers) about a slot's change. */
static void report(struct decisions *ds, size_t slot,
		   enum kind_change_type type)
{
	struct decision_change ch = {slot, index_coord(&ds->index, slot),
				     ds->index.slots[slot]};

	store_changed(&ds->sk, type, &ch);
}

/* ---- a write ---- */

static int lock(struct store_kind *k, const struct store_write *w,
		struct kind_lock *out)
{
	const struct decision_write *dw =
		KIND_CONTAINER(w, struct decision_write, w);

	out->slot = index_slot(&of(k)->index, &dw->coord);
	out->key = NULL;
	out->key_len = 0;
	return 1;
}

static void slot_name(struct store_kind *k, size_t slot, char *buf, size_t n)
{
	struct coord c = index_coord(&of(k)->index, slot);

	snprintf(buf, n, "(%d, %d, %d)", c.x, c.y, c.z);
}

/*
 * The decision rules, against the current index with the coordinate's
 * lock held: layer z=1 write-once, if_version, occupancy. A store gets
 * its version and timestamp and is serialised once (its compact JSON is
 * both the log payload and what the index keeps); a delete becomes the
 * tombstone payload.
 */
static int prepare(struct store_kind *k, struct store_write *w, char *msg,
		   size_t n)
{
	struct decisions *ds = of(k);
	struct decision_write *dw = decision_write_of(w);
	const struct record *cur = index_get(&ds->index, &dw->coord);
	int x = dw->coord.x, y = dw->coord.y, z = dw->coord.z;

	dw->stored = NULL;
	dw->existed = false;
	if (ds->conflicts) {
		int rc = conflicts_refuse(
			ds->conflicts, index_slot(&ds->index, &dw->coord),
			&dw->coord, cur != NULL, dw->is_delete, msg, n);

		if (rc)
			return rc;
	}
	if (z == 1 && (cur || dw->is_delete)) {
		/* "Cannot modify decision" and "immutable": the seed's
		 * words, which its users match on. */
		snprintf(msg, n,
			 dw->is_delete
				 ? "Cannot modify decision at (%d, %d, %d): "
				   "layer z=1 (Architecture) is immutable "
				   "(write-once), it cannot be deleted"
				 : "Cannot modify decision at (%d, %d, %d): "
				   "layer z=1 (Architecture) is immutable "
				   "(write-once) and already holds a decision",
			 x, y, z);
		return RPC_IMMUTABLE_LAYER;
	}
	if (dw->if_version > 0 && (!cur || cur->version != dw->if_version)) {
		if (cur)
			snprintf(msg, n,
				 "if_version %lld does not match version "
				 "%lld at (%d, %d, %d)",
				 (long long)dw->if_version,
				 (long long)cur->version, x, y, z);
		else
			snprintf(msg, n,
				 "if_version %lld given but (%d, %d, %d) is "
				 "empty",
				 (long long)dw->if_version, x, y, z);
		return RPC_CONCURRENCY;
	}
	if (dw->is_delete) {
		if (!cur)
			return KIND_NOOP;
		if (asprintf(&dw->tombstone,
			     "{\"deleted\":{\"x\":%d,\"y\":%d,\"z\":%d}}", x, y,
			     z) < 0) {
			dw->tombstone = NULL;
			snprintf(msg, n, "out of memory");
			return RPC_INTERNAL_ERROR;
		}
		w->payload = dw->tombstone;
		w->payload_len = strlen(dw->tombstone);
		return KIND_LOG;
	}
	if (cur && !dw->overwrite && dw->if_version == 0) {
		snprintf(msg, n,
			 "(%d, %d, %d) already holds version %lld; pass "
			 "overwrite or if_version to replace it",
			 x, y, z, (long long)cur->version);
		return RPC_COORDINATE_OCCUPIED;
	}
	dw->d.coord = dw->coord;
	dw->d.version = cur ? cur->version + 1 : 1;
	timestamp_format(store_timestamp(k), dw->d.timestamp);
	dw->rec = record_new(&dw->d);
	if (!dw->rec) {
		snprintf(msg, n, "out of memory");
		return RPC_INTERNAL_ERROR;
	}
	w->payload = dw->rec->json;
	w->payload_len = dw->rec->json_len;
	return KIND_LOG;
}

static void unprepare(struct store_kind *k, struct store_write *w)
{
	struct decision_write *dw = decision_write_of(w);

	(void)k;
	record_free(dw->rec);
	dw->rec = NULL;
	free(dw->tombstone);
	dw->tombstone = NULL;
}

static void apply(struct store_kind *k, struct store_write *w)
{
	struct decisions *ds = of(k);
	struct decision_write *dw = decision_write_of(w);
	size_t slot = index_slot(&ds->index, &dw->coord);

	if (dw->is_delete) {
		dw->existed = index_remove(&ds->index, &dw->coord) == 1;
		free(dw->tombstone);
		dw->tombstone = NULL;
	} else {
		index_put(&ds->index, dw->rec);
		dw->stored = dw->rec;
		dw->rec = NULL;
	}
	mark_dirty(ds, slot);
	report(ds, slot, dw->is_delete ? KIND_DELETED : KIND_STORED);
}

/* ---- start-up ---- */

/* Replayed slots are remembered (once each) for the first commit. */
static void mark_replayed(struct decisions *ds, size_t slot)
{
	if (!ds->dirty[slot])
		ds->replayed[ds->n_replayed++] = slot;
	mark_dirty(ds, slot);
}

/* A log payload: a record, or a {"deleted": coordinate}. */
static int replay(struct store_kind *k, const char *payload, size_t len,
		  char *msg, size_t n)
{
	struct decisions *ds = of(k);
	struct decision d;
	struct coord c;
	struct record *r;
	char why[VMEM_ERRMSG_LEN];
	json_t *doc = json_loadb(payload, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *del = doc ? json_object_get(doc, "deleted") : NULL;
	int rc;

	if (!ds->replayed) {
		ds->replayed =
			malloc(ds->index.n_slots * sizeof(*ds->replayed));
		if (!ds->replayed) {
			json_decref(doc);
			errmsg_set(msg, n, "out of memory");
			return -ENOMEM;
		}
	}
	if (del) {
		rc = coord_from_json(del, ds->max_x, &c, why);
		json_decref(doc);
		if (rc != 0) {
			errmsg_set(msg, n, "a decision's deletion: %s", why);
			return -EBADMSG;
		}
		index_remove(&ds->index, &c);
		mark_replayed(ds, index_slot(&ds->index, &c));
		return 0;
	}
	json_decref(doc);
	if (decision_parse(payload, len, ds->max_x, &d, why) != 0) {
		errmsg_set(msg, n, "a decision: %s", why);
		return -EBADMSG;
	}
	r = record_new(&d);
	decision_done(&d);
	if (!r) {
		errmsg_set(msg, n, "out of memory");
		return -ENOMEM;
	}
	index_put(&ds->index, r);
	mark_replayed(ds, index_slot(&ds->index, &r->coord));
	return 0;
}

/* The start-up load: the kind, and the snapshot it may take records
 * from (NULL: none). */
struct load_ctx {
	struct decisions *ds;
	struct indexsnap *snap;
};

/* Start-up load: each decision into the index, with its file's stamp. */
static int load_cb(void *ctx, struct decision *d,
		   const struct vmdir_stamp *stamp)
{
	struct decisions *ds = ((struct load_ctx *)ctx)->ds;
	struct record *r;

	/* The log's version, still to be written (git had the tree). */
	if (ds->dirty[index_slot(&ds->index, &d->coord)]) {
		decision_done(d);
		return 0;
	}
	r = record_new(d);
	if (!r)
		return -ENOMEM;
	decision_done(d);
	ds->stamps[index_slot(&ds->index, &r->coord)] = *stamp;
	index_put(&ds->index, r);
	return 0;
}

/* A file the snapshot holds as it is now: its record comes from there,
 * and the file is not read. */
static bool snap_known_cb(void *ctx, const struct coord *c,
			  const struct vmdir_stamp *stamp)
{
	struct load_ctx *l = ctx;
	size_t slot = index_slot(&l->ds->index, c);
	struct record *r;

	/* The log's version, still to be written: load_cb keeps it. */
	if (l->ds->dirty[slot])
		return false;
	r = indexsnap_take(l->snap, slot, stamp);
	if (!r)
		return false;
	l->ds->stamps[slot] = *stamp;
	index_put(&l->ds->index, r);
	return true;
}

/* Start-up load: every directory's stamp (a probe of the moved skips
 * those that keep it). */
static bool load_dir_cb(void *ctx, int x, const struct vmdir_stamp *stamp,
			bool settled)
{
	struct decisions *ds = ((struct load_ctx *)ctx)->ds;

	if (settled)
		ds->dirstamps[x] = *stamp;
	return false;
}

/* Start-up progress (progress.h) of the replay's files... */
static void apply_progress_cb(void *ctx, uint64_t done, uint64_t total,
			      uint64_t files)
{
	(void)ctx;
	(void)files;
	if (progress_due())
		progress_say("writing the replayed decisions to their files: "
			     "%llu of %llu",
			     (unsigned long long)done,
			     (unsigned long long)total);
}

/* ... and of the load. */
static void load_progress_cb(void *ctx, uint64_t done, uint64_t total,
			     uint64_t files)
{
	const struct load_ctx *l = ctx;

	/* Decisions loaded: the files read, and those taken from the index
	 * snapshot without reading their files. */
	if (progress_due())
		progress_say("loading the decision files: %llu loaded, %llu of "
			     "%llu entries of " VMDIR_DIRNAME,
			     (unsigned long long)files +
				     (l->snap ? l->snap->taken : 0),
			     (unsigned long long)done,
			     (unsigned long long)total);
}

/* The last step of the start: after it, the files are written on the
 * thread pool only, where progress is not reported (vmdir.h). */
static int load(struct store_kind *k, struct vmdir_load_report *rep,
		char *errmsg, size_t n)
{
	struct decisions *ds = of(k);
	struct indexsnap snap = {0};
	struct load_ctx l = {ds, NULL};
	char why[VMEM_ERRMSG_LEN];
	int rc = -ENOENT;

	if (ds->dir.state) {
		if (progress_due())
			progress_say("reading the index snapshot");
		rc = indexsnap_load(&snap, ds->dir.state, &ds->index, why,
				    sizeof(why));
	}
	if (rc == 0)
		l.snap = &snap;
	else if (rc != -ENOENT)
		log_warn("ignoring the index snapshot %s (%s): reading every "
			 "decision file",
			 INDEXSNAP_NAME, why);
	ds->dir.progress = load_progress_cb;
	ds->dir.progress_ctx = &l;
	rc = vmdir_scan(&ds->dir, VMDIR_LOAD,
			&(struct vmdir_scan_hooks){
				.loaded = load_cb,
				.known = l.snap ? snap_known_cb : NULL,
				.dir = load_dir_cb,
				.ctx = &l,
			},
			ds->unmerged, rep, errmsg, n);
	ds->dir.progress = NULL;
	ds->dir.progress_ctx = NULL;
	ds->unmerged = NULL; /* the start-up is over */
	ds->snap_stale = SIZE_MAX;
	if (rc == 0 && l.snap && rep) {
		log_info("index snapshot: %zu decisions taken from it, %zu "
			 "files read (changed since, or not in it)",
			 snap.taken, rep->loaded);
		/* What a start from it would read or drop now. */
		ds->snap_stale = rep->loaded + (snap.count - snap.taken);
	}
	indexsnap_done(&snap);
	return rc;
}

long decisions_save_snapshot(struct decisions *ds, bool *saved, size_t *stale,
			     char *errmsg, size_t n)
{
	*saved = false;
	*stale = 0;
	if (!ds->dir.state) {
		errmsg_set(errmsg, n, "no state directory");
		return -EINVAL;
	}
	if (ds->snap_stale <= ds->index.count / DECISIONS_SNAP_STALE_DIV) {
		*stale = ds->snap_stale;
		return (long)ds->index.count;
	}
	*saved = true;
	return indexsnap_save(ds->dir.state, &ds->index, ds->stamps, ds->dirty,
			      errmsg, n);
}

/* ---- materialisation ---- */

/* One coordinate handed to the file writer: its record, or a deletion. */
struct writer_item {
	struct coord coord;
	/* The record to write (a reference: records are immutable, so the
	 * worker reads it while the loop goes on), NULL for a deletion. */
	struct record *rec;
	int64_t changed_ns;	   /* our last write or removal of its file */
	struct vmdir_stamp stamp;  /* of the file written (worker) */
	struct vmdir_stamp expect; /* of the file as we last saw it */
	bool held;		   /* conflicted: held, its file left alone */
	bool left;		   /* not written: git has the tree (worker) */
	bool conflicted; /* its file turned out to be in conflict (worker) */
	bool superseded; /* z=1 first written by someone else (worker) */
};

struct snapshot {
	struct writer_item *items;
	size_t n;
	char yield[CONFLICTS_YIELD_LEN]; /* git had the tree (worker) */
};

/* Loop thread (the records' counts are the loop's). */
static void snapshot_free(struct snapshot *sn)
{
	for (size_t i = 0; i < sn->n; i++)
		record_free(sn->items[i].rec);
	free(sn->items);
	free(sn);
}

static size_t pending(const struct store_kind *k)
{
	return KIND_CONTAINER(k, struct decisions, sk)->n_dirty;
}

/* The dirty coordinates' current state, clearing their flags. */
static int snapshot(struct store_kind *k, void **out)
{
	struct decisions *ds = of(k);
	struct snapshot *sn = calloc(1, sizeof(*sn));
	size_t n = ds->n_dirty;

	if (!sn)
		return -ENOMEM;
	sn->items = calloc(n ? n : 1, sizeof(*sn->items));
	if (!sn->items) {
		free(sn);
		return -ENOMEM;
	}
	sn->n = n;
	for (size_t i = 0; i < n; i++) {
		size_t slot = ds->dirty_list[i];
		struct record *r = ds->index.slots[slot];

		sn->items[i].coord = index_coord(&ds->index, slot);
		/* A file we know of that is gone when written again was
		 * removed by someone at a time we do not know. */
		sn->items[i].changed_ns = ds->stamps[slot].ino
						  ? VMDIR_CHANGED_UNKNOWN
						  : ds->stamps[slot].ctime_ns;
		sn->items[i].expect = ds->stamps[slot];
		sn->items[i].held =
			conflicts_has(ds->conflicts, slot) ||
			(ds->unmerged &&
			 unmerged_find(ds->unmerged, &sn->items[i].coord));
		if (r) {
			record_ref(r);
			sn->items[i].rec = r;
		}
	}
	for (size_t i = 0; i < n; i++)
		ds->dirty[ds->dirty_list[i]] = 0;
	ds->n_dirty = 0;
	*out = sn;
	return 0;
}

/* Files rendered and written at a time (a pass of 100,000 decisions
 * held all their texts at once, 93 MB), and how often the start-up
 * replay reports its progress. */
#define WRITE_CHUNK 1024

/*
 * Blocking: render the file text of each item (re-indenting the cached
 * compact record, no parsing) and write the files (durably with sync,
 * see vmdir_apply), WRITE_CHUNK at a time. Conflicted items, and those
 * whose file turns out to hold conflict markers, are kept as held
 * versions (conflicts_hold) instead; while git has the tree (checked
 * first, then between files) no file is written and the items are left
 * (KIND_LEFT).
 */
static int write_files(struct store_kind *k, void *snap, bool sync,
		       char *errmsg, size_t errn)
{
	struct decisions *ds = of(k);
	struct conflicts *cf = ds->conflicts;
	struct snapshot *sn = snap;
	struct writer_item *items = sn->items;
	size_t cap = sn->n < WRITE_CHUNK ? (sn->n ? sn->n : 1) : WRITE_CHUNK;
	struct vmdir_op *ops = malloc(cap * sizeof(*ops));
	size_t *op_of = malloc(cap * sizeof(*op_of)), n_ops;
	bool yield =
		cf && conflicts_yield_check(cf, sn->yield, sizeof(sn->yield));
	/* One chunk syncs as vmdir_apply does; more are flushed at once
	 * after the last. */
	bool whole = sn->n <= WRITE_CHUNK, left = false;
	int rc = 0;

	if (!ops || !op_of) {
		errmsg_set(errmsg, errn, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (size_t next = 0; rc == 0 && next < sn->n;) {
		memset(ops, 0, cap * sizeof(*ops));
		for (n_ops = 0; rc == 0 && next < sn->n && n_ops < cap;
		     next++) {
			struct writer_item *it = &items[next];
			struct vmdir_op *op = &ops[n_ops];

			if (it->held || yield) {
				it->left = !it->held;
				continue;
			}
			op_of[n_ops++] = next;
			op->coord = it->coord;
			op->guard = cf != NULL;
			op->expect = it->expect;
			op->changed_ns = it->changed_ns;
			if (!it->rec)
				continue;
			op->text = decision_file_from_compact(
				it->rec->json, it->rec->json_len, &op->len);
			if (!op->text) {
				errmsg_set(errmsg, errn, "out of memory");
				rc = -ENOMEM;
			}
		}
		if (rc == 0 && n_ops) /* (none while git has the tree) */
			rc = vmdir_apply(&ds->dir, ops, n_ops, sync && whole,
					 errmsg, errn);
		for (size_t i = 0; i < n_ops; i++) {
			struct writer_item *it = &items[op_of[i]];

			free((char *)ops[i].text);
			if (rc < 0)
				continue;
			it->stamp = ops[i].stamp;
			it->conflicted = it->held = ops[i].skipped;
			it->left = ops[i].interrupted;
			it->superseded = ops[i].superseded;
		}
		/* (the start-up replay's: on the caller's thread) */
		if (rc == 0 && ds->dir.progress && next < sn->n)
			ds->dir.progress(ds->dir.progress_ctx, next, sn->n,
					 next);
	}
	if (rc == 0 && sync && !whole)
		rc = vmdir_sync(&ds->dir, errmsg, errn);
	for (size_t i = 0; rc == 0 && i < sn->n; i++) {
		left |= items[i].left;
		if (items[i].held)
			rc = conflicts_hold(cf, &items[i].coord,
					    items[i].rec ? items[i].rec->json
							 : NULL,
					    errmsg, errn);
	}
	/* Interrupted on the way: say why. */
	if (rc == 0 && left && !sn->yield[0])
		conflicts_yield_check(cf, sn->yield, sizeof(sn->yield));
out:
	free(ops);
	free(op_of);
	return rc < 0 ? rc : left ? KIND_LEFT : 0;
}

static void written(struct store_kind *k, void *snap, int rc)
{
	struct decisions *ds = of(k);
	struct snapshot *sn = snap;
	bool probe = false;

	for (size_t i = 0; i < sn->n; i++) {
		const struct writer_item *it = &sn->items[i];
		size_t slot = index_slot(&ds->index, &it->coord);

		if (rc < 0 || it->left) {
			/* (unless a newer write did) failed, or git had the
			 * tree: the next pass writes it */
			mark_dirty(ds, slot);
		} else if (it->conflicted) {
			/* its held version is written: a conflict now */
			conflicts_markers_found(ds->conflicts, slot);
		} else if (it->superseded) {
			/* the first writer's z=1 came with git: a look at
			 * the files takes it (ours is kept in a record, see
			 * on_replacing) */
			probe = true;
		} else if (!it->held && (!ds->dirty[slot] || !it->rec)) {
			/* What we wrote is what a rescan will find, unless
			 * a newer write is already on its way; a removal's
			 * time is kept anyway, so the file written next there
			 * is not back-dated too soon (vmdir.h). */
			ds->stamps[slot] = it->stamp;
		}
	}
	if (rc >= 0 && ds->conflicts)
		conflicts_set_yield(ds->conflicts, sn->yield);
	if (probe)
		store_probe_soon(k);
	snapshot_free(sn);
}

static int sync_files(struct store_kind *k, char *errmsg, size_t n)
{
	return vmdir_sync(&of(k)->dir, errmsg, n);
}

/* ---- reload ---- */

/* A change a rescan found: the slot's new record (NULL: none). */
struct reload_change {
	size_t slot;
	struct record *rec;
	struct vmdir_stamp stamp;
};

/* Handed over whole: snapshots of what the loop knows, and the changes
 * the worker found. */
struct rescan_job {
	const struct decisions *ds; /* index_slot, dir, conflicts' paths in
				       the worker */
	bool probe;		    /* look only (VMDIR_PROBE) */
	size_t n_slots;
	/* per x: the directories as last seen whole, for a probe of the
	 * moved only (else NULL); and as this scan found them (worker) */
	struct vmdir_stamp *dirs, *dirs_seen;
	struct xwatch_scan xs;	    /* what inotify says of each directory */
	uint8_t *present;	    /* per slot: the index holds a decision */
	struct vmdir_stamp *stamps; /* per slot: as last seen */
	uint8_t *seen;		    /* per slot: found on disk (worker) */
	struct reload_change *changes;
	size_t n_changes, cap_changes;
	/* With conflicts: */
	struct unmerged_set unmerged; /* git's unmerged files (worker) */
	int unmerged_rc;
	char unmerged_err[256];
	char **z1;     /* per slot: a z=1 decision's compact JSON (owned) */
	uint8_t *keep; /* per slot: z=1 kept over the tree (worker) */
};

static void rescan_job_free(struct rescan_job *j)
{
	for (size_t i = 0; i < j->n_changes; i++)
		record_free(j->changes[i].rec);
	free(j->changes);
	free(j->present);
	free(j->stamps);
	free(j->seen);
	free(j->dirs);
	free(j->dirs_seen);
	xwatch_scan_done(&j->xs);
	for (size_t i = 0; j->z1 && i < j->n_slots; i++)
		free(j->z1[i]);
	free(j->z1);
	free(j->keep);
	unmerged_set_done(&j->unmerged);
	free(j);
}

/* The z=1 decisions a reload may have to keep (conflicts_in_head): not
 * those in conflict (a probe keeps nothing: it needs none). 0 or
 * -ENOMEM. */
static int z1_snapshot(const struct decisions *ds, struct rescan_job *j)
{
	j->z1 = calloc(j->n_slots, sizeof(*j->z1));
	j->keep = calloc(j->n_slots, 1);
	if (!j->z1 || !j->keep)
		return -ENOMEM;
	for (size_t i = 0; i < j->n_slots; i += VMEM_MAX_Z) /* slot i: z=1 */
		if (ds->index.slots[i] && !conflicts_has(ds->conflicts, i) &&
		    !(j->z1[i] = strdup(ds->index.slots[i]->json)))
			return -ENOMEM;
	return 0;
}

/* A probe of the moved looks at every directory while a conflict is
 * open: each conflicted file is reported at every look, or the conflict
 * would seem to have ended. Otherwise it does not ask git for unmerged
 * files either (at 100,000 decisions a git ls-files reads a 10 MB index):
 * only a change of the index makes them, and the watcher then asks for a
 * probe of every file (a file git wrote with conflict markers is one
 * already, if it moved). */
static bool skip_unmoved(const struct decisions *ds)
{
	return !ds->conflicts || ds->conflicts->n == 0;
}

static int rescan_begin(struct store_kind *k, enum rescan_mode mode, void **out)
{
	struct decisions *ds = of(k);
	struct rescan_job *j = calloc(1, sizeof(*j));
	size_t n_dirs = (size_t)ds->max_x + 1;
	bool moved = mode == RESCAN_PROBE_MOVED && skip_unmoved(ds);

	if (j) {
		j->ds = ds;
		j->probe = mode != RESCAN_RELOAD;
		j->n_slots = ds->index.n_slots;
		j->present = calloc(j->n_slots, 1);
		j->seen = calloc(j->n_slots, 1);
		j->stamps = malloc(j->n_slots * sizeof(*j->stamps));
		j->dirs_seen = calloc(n_dirs, sizeof(*j->dirs_seen));
		j->dirs = moved ? malloc(n_dirs * sizeof(*j->dirs)) : NULL;
	}
	if (j && (!j->present || !j->seen || !j->stamps || !j->dirs_seen ||
		  (moved && !j->dirs) || xwatch_begin(&ds->xw, &j->xs) < 0 ||
		  (ds->conflicts && !j->probe && z1_snapshot(ds, j) < 0))) {
		rescan_job_free(j);
		j = NULL;
	}
	if (!j)
		return -ENOMEM;
	memcpy(j->stamps, ds->stamps, j->n_slots * sizeof(*j->stamps));
	if (j->dirs)
		memcpy(j->dirs, ds->dirstamps, n_dirs * sizeof(*j->dirs));
	for (size_t i = 0; i < j->n_slots; i++)
		j->present[i] = ds->index.slots[i] != NULL;
	*out = j;
	return 0;
}

static bool stamp_eq(const struct vmdir_stamp *a, const struct vmdir_stamp *b)
{
	return a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

static bool known_cb(void *ctx, const struct coord *c,
		     const struct vmdir_stamp *stamp)
{
	struct rescan_job *j = ctx;
	size_t slot = index_slot(&j->ds->index, c);

	if (!j->present[slot] || !stamp_eq(&j->stamps[slot], stamp))
		return false;
	j->seen[slot] = 1;
	return true;
}

/* Directory x's files are taken as known: all its slots seen. */
static void dir_known(struct rescan_job *j, int x)
{
	size_t first = index_slot(&j->ds->index, &(struct coord){x, 1, 1});

	memset(j->seen + first, 1, VMEM_MAX_Y * VMEM_MAX_Z);
}

/* What inotify says of a directory: a probe of the moved skips one
 * nothing touched since a scan found it whole (its stamp stays the one
 * last seen whole). Every directory looked at is watched. */
static bool clean_cb(void *ctx, int vfd, int x, const char *name)
{
	struct rescan_job *j = ctx;

	if (xwatch_look(&j->ds->xw, &j->xs, vfd, x, name) != XWATCH_CLEAN ||
	    !j->dirs)
		return false;
	j->dirs_seen[x] = j->dirs[x];
	dir_known(j, x);
	return true;
}

/* A directory's stamp: kept when settled; a probe of the moved skips the
 * directory when it kept the one last seen whole (its slots all seen),
 * unless inotify saw something touch it (a file written in place keeps
 * its directory's stamp). */
static bool dir_cb(void *ctx, int x, const struct vmdir_stamp *stamp,
		   bool settled)
{
	struct rescan_job *j = ctx;

	if (settled)
		j->dirs_seen[x] = *stamp;
	if (!j->dirs || !settled || j->dirs[x].ino == 0 ||
	    !stamp_eq(&j->dirs[x], stamp) ||
	    xwatch_said(&j->xs, x) == XWATCH_TOUCHED)
		return false;
	dir_known(j, x);
	return true;
}

static int changed_cb(void *ctx, struct decision *d,
		      const struct vmdir_stamp *stamp)
{
	struct rescan_job *j = ctx;
	struct record *r = record_new(d);

	if (!r)
		return -ENOMEM;
	if (j->n_changes == j->cap_changes) {
		size_t cap = j->cap_changes ? j->cap_changes * 2 : 64;
		struct reload_change *c = realloc(j->changes, cap * sizeof(*c));

		if (!c) {
			record_free(r);
			return -ENOMEM;
		}
		j->changes = c;
		j->cap_changes = cap;
	}
	decision_done(d);
	j->seen[index_slot(&j->ds->index, &r->coord)] = 1;
	j->changes[j->n_changes++] = (struct reload_change){
		index_slot(&j->ds->index, &r->coord), r, *stamp};
	return 0;
}

/*
 * Blocking: stat every file (a probe of the moved: only those of the
 * directories that moved), read only those whose stamp changed; with
 * conflicts, git's unmerged files first (reported, not read; not in a
 * probe of the moved, skip_unmoved), and for a reload which write-once
 * decisions stay over what the tree says (conflicts_in_head: no commit
 * changed them).
 */
static int rescan(struct store_kind *k, void *job,
		  struct vmdir_load_report *rep, char *errmsg, size_t n)
{
	struct decisions *ds = of(k);
	struct rescan_job *j = job;
	int rc;

	if (ds->conflicts && !j->dirs)
		j->unmerged_rc = conflicts_unmerged(ds->conflicts, &j->unmerged,
						    j->unmerged_err,
						    sizeof(j->unmerged_err));
	rc = vmdir_scan(&ds->dir, j->probe ? VMDIR_PROBE : VMDIR_RELOAD,
			&(struct vmdir_scan_hooks){
				.loaded = changed_cb,
				.known = known_cb,
				.dir = dir_cb,
				.clean = clean_cb,
				.ctx = j,
			},
			&j->unmerged, rep, errmsg, n);
	for (size_t i = 0; rc == 0 && j->z1 && i < j->n_changes; i++) {
		size_t slot = j->changes[i].slot;

		if (j->z1[slot] &&
		    strcmp(j->z1[slot], j->changes[i].rec->json) != 0 &&
		    conflicts_in_head(ds->conflicts, j->z1[slot]))
			j->keep[slot] = 1;
	}
	for (size_t slot = 0; rc == 0 && j->z1 && slot < j->n_slots; slot++)
		if (j->z1[slot] && !j->seen[slot] &&
		    conflicts_in_head(ds->conflicts, j->z1[slot]))
			j->keep[slot] = 1;
	return rc;
}

static bool record_same(const struct record *a, const struct record *b)
{
	if (!a || !b)
		return a == b;
	return a->json_len == b->json_len &&
	       memcmp(a->json, b->json, a->json_len) == 0;
}

/* Put a slot's new state (rec NULL: none) into the index; report it
 * when it really changed (to on_replacing too, unless a conflict's end
 * explains it). */
static void reload_apply(struct decisions *ds, size_t slot, struct record *rec,
			 const struct vmdir_stamp *stamp, bool conflict_ended)
{
	const struct record *old = ds->index.slots[slot];

	if (ds->snap_stale < SIZE_MAX)
		ds->snap_stale++;
	ds->stamps[slot] = *stamp;
	if (record_same(old, rec)) {
		record_free(rec);
		return;
	}
	if (old && !conflict_ended && ds->on_replacing)
		ds->on_replacing(ds->on_replacing_ctx, old, rec);
	if (rec) {
		index_put(&ds->index, rec);
	} else {
		struct coord c = index_coord(&ds->index, slot);

		index_remove(&ds->index, &c);
	}
	report(ds, slot, KIND_RELOADED);
}

/* A probe's verdict: does a file differ from what we know (a slot
 * written meanwhile is ours, not a change)? */
static bool probe_changed(const struct decisions *ds,
			  const struct rescan_job *j)
{
	for (size_t i = 0; i < j->n_changes; i++)
		if (!ds->dirty[j->changes[i].slot] &&
		    !record_same(ds->index.slots[j->changes[i].slot],
				 j->changes[i].rec))
			return true;
	for (size_t slot = 0; slot < j->n_slots; slot++)
		if (j->present[slot] && !j->seen[slot] &&
		    ds->index.slots[slot] && !ds->dirty[slot])
			return true;
	return false;
}

/*
 * What a rescan found about conflicts (conflicts_update; apply for a
 * reload): the slots newly conflicted get their held version written
 * (made pending), and every conflicted slot counts as seen (it keeps its
 * acknowledged version whatever its file holds). Returns whether a
 * conflict ended; with apply, ended (n_slots entries) lists the slots
 * and held their versions before the reload (malloc'd compact JSON or
 * NULL each).
 */
static bool scan_conflicts(struct decisions *ds, struct rescan_job *j,
			   const struct vmdir_load_report *rep, bool apply,
			   size_t *ended, size_t *n_ended, char **held)
{
	struct conflicts *cf = ds->conflicts;
	size_t *fresh, n_fresh = 0, none = 0;
	bool any;

	*n_ended = 0;
	if (j->unmerged_rc < 0)
		conflicts_fail(cf, "listing git's unmerged files: %s",
			       j->unmerged_err);
	fresh = malloc(j->n_slots * sizeof(*fresh));
	if (!fresh) {
		conflicts_fail(cf, "out of memory: conflicts not updated");
		return false;
	}
	any = conflicts_update(cf, &j->unmerged, rep, apply, fresh, &n_fresh,
			       apply ? ended : fresh, apply ? n_ended : &none);
	for (size_t i = 0; i < n_fresh; i++)
		mark_dirty(ds, fresh[i]);
	for (size_t i = 0; i < cf->n; i++)
		j->seen[cf->list[i].slot] = 1;
	for (size_t i = 0; i < *n_ended; i++) {
		const struct record *r = ds->index.slots[ended[i]];

		held[i] = r ? strdup(r->json) : NULL;
	}
	free(fresh);
	return any;
}

static bool in_list(const size_t *list, size_t n, size_t v)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] == v)
			return true;
	return false;
}

/* A reload's result into the index: write-once decisions kept over the
 * tree, the changes, what went away, and the conflicts that ended. */
static void reload_end(struct decisions *ds, struct rescan_job *j,
		       const struct vmdir_load_report *rep)
{
	struct vmdir_stamp gone = {0};
	struct timespec now;
	size_t *ended = NULL, n_ended = 0;
	char **held = NULL;

	/* A file found gone counts as removed now: the next one written
	 * there is not back-dated for two seconds (vmdir.h). */
	clock_gettime(CLOCK_REALTIME, &now);
	gone.ctime_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;

	if (ds->conflicts) {
		ended = malloc(j->n_slots * sizeof(*ended));
		held = calloc(j->n_slots, sizeof(*held));
		if (ended && held)
			scan_conflicts(ds, j, rep, true, ended, &n_ended, held);
		else
			conflicts_fail(ds->conflicts,
				       "out of memory: conflicts not updated");
	}
	for (size_t slot = 0; j->keep && slot < j->n_slots; slot++) {
		struct coord c;

		if (!j->keep[slot])
			continue;
		c = index_coord(&ds->index, slot);
		conflicts_z1_restored(ds->conflicts, &c);
		j->seen[slot] = 1;
		mark_dirty(ds, slot); /* its file written again */
	}
	for (size_t i = 0; i < j->n_changes; i++) {
		size_t slot = j->changes[i].slot;

		if (j->keep && j->keep[slot])
			continue;
		reload_apply(ds, slot, j->changes[i].rec, &j->changes[i].stamp,
			     in_list(ended, n_ended, slot));
		j->changes[i].rec = NULL;
	}
	for (size_t slot = 0; slot < j->n_slots; slot++)
		if (j->present[slot] && !j->seen[slot])
			reload_apply(ds, slot, NULL, &gone,
				     in_list(ended, n_ended, slot));
	/* A conflict that ended: what the file now says replaced the
	 * acknowledged version (or kept it). */
	for (size_t i = 0; i < n_ended; i++) {
		struct coord c = index_coord(&ds->index, ended[i]);

		conflicts_ended(ds->conflicts, &c, held[i],
				ds->index.slots[ended[i]]);
		free(held[i]);
	}
	free(held);
	free(ended);
}

static int rescan_end(struct store_kind *k, void *job, int rc, bool probe,
		      const struct vmdir_load_report *rep)
{
	struct decisions *ds = of(k);
	struct rescan_job *j = job;
	size_t none = 0;
	int changed = 0;

	if (rc == 0 && probe) {
		/* a conflict that ended is a change: a reload applies it, as
		 * it quarantines what the probe left where it is */
		changed =
			(ds->conflicts && scan_conflicts(ds, j, rep, false,
							 NULL, &none, NULL)) ||
			probe_changed(ds, j) || rep->unusable > 0;
	} else if (rc == 0) {
		reload_end(ds, j, rep);
	}
	/* Every file as the scan found it is now what the kind knows (a
	 * probe's changes are not: its reload will know them). */
	if (rc == 0 && !changed)
		memcpy(ds->dirstamps, j->dirs_seen,
		       ((size_t)ds->max_x + 1) * sizeof(*ds->dirstamps));
	xwatch_end(&ds->xw, &j->xs, rc == 0 && !changed);
	rescan_job_free(j);
	return changed;
}

const struct kind decision_kind = {
	.name = "decision",
	.committed = true,
	.log_tag = '{',
	.lock = lock,
	.slot_name = slot_name,
	.prepare = prepare,
	.unprepare = unprepare,
	.apply = apply,
	.replay = replay,
	.load = load,
	.pending = pending,
	.snapshot = snapshot,
	.write = write_files,
	.written = written,
	.sync = sync_files,
	.rescan_begin = rescan_begin,
	.rescan = rescan,
	.rescan_end = rescan_end,
};

/* ---- set-up ---- */

int decisions_init(struct decisions *ds, const char *root,
		   const struct statedir *state, int max_x)
{
	int rc;

	memset(ds, 0, sizeof(*ds));
	ds->xw.fd = -1;
	ds->snap_stale = SIZE_MAX;
	ds->sk.kind = &decision_kind;
	ds->max_x = max_x;
	rc = index_init(&ds->index, max_x);
	if (rc < 0)
		return rc;
	ds->sk.n_lock_slots = ds->index.n_slots;
	rc = vmdir_init(&ds->dir, root, state, max_x);
	if (rc < 0)
		return rc;
	/* Start-up writes the replay's files on this thread: say how far
	 * it got (load ends it). */
	ds->dir.progress = apply_progress_cb;
	ds->dirty = calloc(ds->index.n_slots, 1);
	ds->dirty_list = calloc(ds->index.n_slots, sizeof(*ds->dirty_list));
	ds->stamps = calloc(ds->index.n_slots, sizeof(*ds->stamps));
	ds->dirstamps = calloc((size_t)max_x + 1, sizeof(*ds->dirstamps));
	if (!ds->dirty || !ds->dirty_list || !ds->stamps || !ds->dirstamps)
		return -ENOMEM;
	return xwatch_init(&ds->xw, max_x);
}

void decisions_use_conflicts(struct decisions *ds, struct conflicts *cf,
			     const struct unmerged_set *u)
{
	ds->conflicts = cf;
	ds->unmerged = u;
	ds->dir.interrupt = conflicts_interrupt;
	ds->dir.interrupt_ctx = cf;
}

void decisions_done(struct decisions *ds)
{
	index_done(&ds->index);
	vmdir_done(&ds->dir);
	free(ds->dirty);
	free(ds->dirty_list);
	free(ds->stamps);
	free(ds->dirstamps);
	free(ds->replayed);
	xwatch_done(&ds->xw);
	ds->dirty = NULL;
	ds->dirty_list = NULL;
	ds->stamps = NULL;
	ds->dirstamps = NULL;
	ds->replayed = NULL;
	ds->n_dirty = ds->n_replayed = 0;
}

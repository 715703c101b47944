/*
 * The write path: coordinate lock -> validation -> log batch -> fdatasync
 * -> index -> acknowledgement -> dirty -> file writer (no sync) ->
 * checkpoint (one syncfs, then the log's head is cut).
 *
 * Invariants: the index holds only durable (logged) state, so readers
 * never see a write that could still be lost; a coordinate's lock is held
 * from validation until its write is applied or refused; a log record is
 * dropped only after its write is in a file and the files were synced.
 *
 * Files are written without syncing so the writer never competes with the
 * log's fdatasync for the disk; a checkpoint makes them durable in bulk
 * when the log has grown past CHECKPOINT_BYTES, after CHECKPOINT_IDLE_MS
 * without writes, and at a stop. A checkpoint never holds writes back: it
 * remembers the log's end, waits for a writer pass that started after
 * that, syncs, and cuts exactly the records before that end.
 */
#include "store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "progress.h"
#include "protocol/errors.h"

/* Delay that lets bursts of writes coalesce before files are written. */
#define WRITER_DELAY_MS	    20
#define WRITER_RETRY_MAX_MS 5000
#define CHECKPOINT_BYTES    (16u << 20)
#define CHECKPOINT_IDLE_MS  1000
/* While git has the tree, the writer looks again this often. */
#define WRITER_YIELD_MS 200

struct wal_job {
	struct lane_job job; /* first: the lane hands it back */
	struct store *s;
	struct store_write *head; /* the batch; NULL for a checkpoint cut */
	uint64_t cut;		  /* log bytes to drop */
	struct iovec *iov;
	size_t n;
	int rc;
};

/* One coordinate handed to the file writer: its compact JSON, or a
 * deletion when json is NULL. */
struct writer_item {
	struct coord coord;
	char *json;
	size_t json_len;
	char *file; /* filled by the worker */
	size_t file_len;
	struct vmdir_stamp stamp;  /* of the file written (worker) */
	struct vmdir_stamp expect; /* of the file as we last saw it */
	bool held;		   /* conflicted: held, its file left alone */
	bool left;		   /* not written: git has the tree (worker) */
	bool conflicted; /* its file turned out to be in conflict (worker) */
	bool superseded; /* z=1 first written by someone else (worker) */
};

struct writer_job {
	uv_work_t req;
	struct store *s;
	struct writer_item *items; /* NULL for a checkpoint's sync */
	size_t n;
	uint64_t seq;
	int rc;
	char errmsg[256];
	char yield[CONFLICTS_YIELD_LEN]; /* git had the tree (worker) */
};

static void wal_kick(struct store *s);

/* Remember and log a storage failure (health reports the last one). */
static void __attribute__((format(printf, 2, 3)))
set_error(struct store *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->last_error, sizeof(s->last_error), fmt, ap);
	va_end(ap);
	s->n_errors++;
	log_err("%s", s->last_error);
}

static void writer_kick(struct store *s, unsigned delay_ms);
static void check_idle(struct store *s);
static void reload_finish(struct store *s, int rc, const char *errmsg,
			  const struct vmdir_load_report *rep);
static void checkpoint_start(struct store *s);
static void checkpoint_step(struct store *s);
static void ckpt_timer_cb(uv_timer_t *t);

static int64_t now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Server-assigned timestamps strictly increase, even if the clock steps
 * back, so the order of writes is visible in them. */
static void assign_timestamp(struct store *s, struct decision *d)
{
	int64_t t = now_usec();

	if (t <= s->last_timestamp)
		t = s->last_timestamp + 1;
	s->last_timestamp = t;
	timestamp_format(t, d->timestamp);
}

static void mark_dirty(struct store *s, size_t slot)
{
	if (s->dirty[slot])
		return;
	s->dirty[slot] = 1;
	s->dirty_list[s->n_dirty++] = slot;
}

/* ---- file writer ---- */

static void writer_items_free(struct writer_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(items[i].json);
		free(items[i].file);
	}
	free(items);
}

/* Snapshot the dirty coordinates' current state, clearing their flags. */
static int writer_snapshot(struct store *s, struct writer_item **out,
			   size_t *n_out)
{
	struct writer_item *items = calloc(s->n_dirty, sizeof(*items));
	size_t n = s->n_dirty;

	if (!items)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t slot = s->dirty_list[i];
		const struct record *r = s->index.slots[slot];

		items[i].coord = index_coord(&s->index, slot);
		items[i].expect = s->stamps[slot];
		items[i].held = conflicts_has(s->conflicts, slot);
		if (r) {
			items[i].json = strdup(r->json);
			items[i].json_len = r->json_len;
			if (!items[i].json) {
				writer_items_free(items, n);
				return -ENOMEM;
			}
		}
	}
	for (size_t i = 0; i < n; i++)
		s->dirty[s->dirty_list[i]] = 0;
	s->n_dirty = 0;
	*out = items;
	*n_out = n;
	return 0;
}

/* Put items back in the dirty set after a failed write (unless a newer
 * write already did). */
static void writer_restore(struct store *s, const struct writer_item *items,
			   size_t n)
{
	for (size_t i = 0; i < n; i++)
		mark_dirty(s, index_slot(&s->index, &items[i].coord));
}

/*
 * Blocking: render the file text of each item and write the files
 * (durably with sync, see vmdir_apply). Conflicted items, and those whose
 * file turns out to hold conflict markers, are kept as held versions
 * (conflicts.h) instead; with yield (git has the tree) no file is
 * written and those items are marked left.
 */
static int writer_run(struct vmdir *dir, struct conflicts *cf,
		      struct writer_item *items, size_t n, bool sync,
		      bool yield, char *errmsg, size_t errn)
{
	struct vmdir_op *ops = calloc(n ? n : 1, sizeof(*ops));
	size_t *of = calloc(n ? n : 1, sizeof(*of)), k = 0;
	int rc = 0;

	if (!ops || !of) {
		snprintf(errmsg, errn, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (items[i].held || yield) {
			items[i].left = !items[i].held;
			continue;
		}
		of[k] = i;
		ops[k].coord = items[i].coord;
		ops[k].guard = cf != NULL;
		ops[k].expect = items[i].expect;
		if (items[i].json) {
			items[i].file = decision_file_from_compact(
				items[i].json, items[i].json_len,
				&items[i].file_len);
			if (!items[i].file) {
				snprintf(errmsg, errn, "out of memory");
				rc = -ENOMEM;
				goto out;
			}
			ops[k].text = items[i].file;
			ops[k].len = items[i].file_len;
		}
		k++;
	}
	rc = vmdir_apply(dir, ops, k, sync, errmsg, errn);
	for (size_t i = 0; rc == 0 && i < k; i++) {
		items[of[i]].stamp = ops[i].stamp;
		items[of[i]].conflicted = ops[i].skipped;
		items[of[i]].held = ops[i].skipped;
		items[of[i]].left = ops[i].interrupted;
		items[of[i]].superseded = ops[i].superseded;
	}
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (items[i].held)
			rc = conflicts_hold(cf, &items[i].coord, items[i].json,
					    errmsg, errn);
out:
	free(ops);
	free(of);
	return rc;
}

/* The file writer's check between files (any thread): has git taken the
 * working tree since the pass began? */
static bool writer_interrupt(void *ctx)
{
	char why[CONFLICTS_YIELD_LEN];

	return conflicts_yield_check(ctx, why, sizeof(why));
}

static void writer_work_cb(uv_work_t *req)
{
	struct writer_job *j = req->data;
	struct conflicts *cf = j->s->conflicts;

	if (j->items) {
		j->rc = writer_run(&j->s->dir, cf, j->items, j->n, false,
				   cf && conflicts_yield_check(
						 cf, j->yield, sizeof(j->yield)),
				   j->errmsg, sizeof(j->errmsg));
		/* interrupted on the way: say why */
		if (cf && !j->yield[0] && j->n && j->items[j->n - 1].left)
			conflicts_yield_check(cf, j->yield, sizeof(j->yield));
	} else
		j->rc = vmdir_sync(&j->s->dir, j->errmsg, sizeof(j->errmsg));
}

static void writer_after_cb(uv_work_t *req, int status)
{
	struct writer_job *j = req->data;
	struct store *s = j->s;

	s->writer_busy = false;
	if (status < 0 && j->rc == 0) {
		j->rc = status;
		snprintf(j->errmsg, sizeof(j->errmsg), "writer cancelled");
	}
	if (!j->items) {
		/* A checkpoint's sync: on failure, try again later. */
		if (j->rc < 0) {
			set_error(s, "syncing decision files: %s", j->errmsg);
			s->ckpt = false;
			uv_timer_start(&s->ckpt_timer, ckpt_timer_cb,
				       CHECKPOINT_IDLE_MS, 0);
		} else {
			s->ckpt_synced = true;
		}
		writer_kick(s, WRITER_DELAY_MS);
	} else if (j->rc < 0) {
		set_error(s, "writing decision files: %s", j->errmsg);
		writer_restore(s, j->items, j->n);
		s->writer_retry_ms =
			s->writer_retry_ms ? s->writer_retry_ms * 2 : 100;
		if (s->writer_retry_ms > WRITER_RETRY_MAX_MS)
			s->writer_retry_ms = WRITER_RETRY_MAX_MS;
		writer_kick(s, s->writer_retry_ms);
	} else {
		bool left = false;

		s->writer_retry_ms = 0;
		/* What we wrote is what a rescan will find, unless a newer
		 * write is already on its way. Files git has (it runs an
		 * operation) wait for the next pass; a file found in conflict
		 * is one from now on (its version is held). */
		for (size_t i = 0; i < j->n; i++) {
			struct writer_item *it = &j->items[i];
			size_t slot = index_slot(&s->index, &it->coord);

			if (it->left) {
				mark_dirty(s, slot);
				left = true;
			} else if (it->conflicted) {
				conflicts_markers_found(s->conflicts, slot);
			} else if (it->superseded) {
				/* the first writer's z=1 came with git: a
				 * look at the files takes it (ours is kept
				 * in a record, see on_replacing) */
				s->probe_wanted = true;
			} else if (!it->held && !s->dirty[slot]) {
				s->stamps[slot] = it->stamp;
			}
		}
		/* A pass that left files is not one a checkpoint can count. */
		if (!left)
			s->writer_done_seq = j->seq;
		if (s->conflicts)
			conflicts_set_yield(s->conflicts, j->yield);
		writer_kick(s, left ? WRITER_YIELD_MS : WRITER_DELAY_MS);
	}
	writer_items_free(j->items, j->n);
	free(j);
	checkpoint_step(s);
	check_idle(s);
}

static void writer_start(struct store *s)
{
	struct writer_job *j;

	if (s->writer_busy || s->n_dirty == 0 || s->closed)
		return;
	j = calloc(1, sizeof(*j));
	if (!j || writer_snapshot(s, &j->items, &j->n) < 0) {
		free(j);
		writer_kick(s, 100);
		return;
	}
	j->s = s;
	j->req.data = j;
	j->seq = ++s->writer_seq;
	if (uv_queue_work(s->loop, &j->req, writer_work_cb, writer_after_cb) <
	    0) {
		writer_restore(s, j->items, j->n);
		writer_items_free(j->items, j->n);
		free(j);
		writer_kick(s, 100);
		return;
	}
	s->writer_busy = true;
}

/* A checkpoint's flush of the written files, on the writer's lane. */
static void sync_start(struct store *s)
{
	struct writer_job *j;

	if (s->writer_busy || s->closed)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		return; /* checkpoint_step tries again after the next job */
	j->s = s;
	j->req.data = j;
	if (uv_queue_work(s->loop, &j->req, writer_work_cb, writer_after_cb) <
	    0) {
		free(j);
		return;
	}
	s->writer_busy = true;
}

static void writer_timer_cb(uv_timer_t *t)
{
	writer_start(t->data);
}

static void writer_kick(struct store *s, unsigned delay_ms)
{
	if (s->closed || s->writer_busy || s->n_dirty == 0)
		return;
	if (s->conflicts && s->conflicts->yield[0]) {
		/* Git has the tree: look again at a slow pace (store_resume
		 * comes sooner when the watcher sees the operation end). */
		if (uv_is_active((uv_handle_t *)&s->writer_timer))
			return;
		if (delay_ms < WRITER_YIELD_MS)
			delay_ms = WRITER_YIELD_MS;
	} else if (s->writer_retry_ms) {
		/* Failing: the retry waits its back-off, whoever asks. */
		if (uv_is_active((uv_handle_t *)&s->writer_timer))
			return;
		if (delay_ms < s->writer_retry_ms)
			delay_ms = s->writer_retry_ms;
	} else if (s->idle_cb || s->waits) {
		delay_ms = 0; /* someone waits: no coalescing delay */
	}
	if (uv_is_active((uv_handle_t *)&s->writer_timer) && delay_ms > 0)
		return;
	uv_timer_start(&s->writer_timer, writer_timer_cb, delay_ms, 0);
}

/* ---- write-ahead log ---- */

static void wal_work_cb(struct lane_job *job)
{
	struct wal_job *j = (struct wal_job *)job;

	if (j->head)
		j->rc = wal_append(&j->s->wal, j->iov, j->n);
	else
		j->rc = wal_cut_head(&j->s->wal, j->cut);
}

/* A group is over: unlock (as for a single write, see finish), then
 * answer; done may free g. */
static void group_end(struct store *s, struct store_group *g, int code,
		      const char *msg, size_t failed)
{
	locks_release(&s->locks, &g->lock);
	free(g->slots);
	g->slots = NULL;
	g->done(g, code, msg, failed);
}

/* One item of a logged group is over; the last one ends the group. */
static void group_item_finished(struct store *s, struct store_write *w,
				int code, const char *msg)
{
	struct store_group *g = w->group;

	if (code != 0 && g->code == 0) {
		g->code = code;
		snprintf(g->msg, sizeof(g->msg), "%s", msg);
	}
	if (++g->n_finished == g->n)
		group_end(s, g, g->code, g->code ? g->msg : NULL, SIZE_MAX);
}

/* A write is over: unlock (done may free w; the next writer there only
 * validates, it cannot change what w's result points to), then answer. */
static void finish(struct store *s, struct store_write *w, int code,
		   const char *msg)
{
	if (w->group) {
		group_item_finished(s, w, code, msg);
		return;
	}
	locks_release(&s->locks, &w->lock);
	w->done(w, code, msg);
}

/* Apply one logged write to the index and acknowledge it. */
static void apply_and_ack(struct store *s, struct store_write *w)
{
	struct coord c = w->coord;
	size_t slot = index_slot(&s->index, &c);

	if (w->is_delete) {
		w->existed = index_remove(&s->index, &c) == 1;
		free(w->tombstone);
		w->tombstone = NULL;
	} else {
		index_put(&s->index, w->rec);
		w->stored = w->rec;
		w->rec = NULL;
	}
	mark_dirty(s, slot);
	if (s->on_applied)
		s->on_applied(s->on_applied_ctx, slot, false);
	finish(s, w, 0, NULL);
}

/* Drop what validation prepared for the log. */
static void unprepare(struct store_write *w)
{
	record_free(w->rec);
	w->rec = NULL;
	free(w->tombstone);
	w->tombstone = NULL;
}

static void refuse(struct store *s, struct store_write *w, int code,
		   const char *msg)
{
	unprepare(w);
	finish(s, w, code, msg);
}

static void wal_after_cb(struct lane_job *job)
{
	struct wal_job *j = (struct wal_job *)job;
	struct store *s = j->s;
	struct store_write *w = j->head;
	int rc = j->rc;

	/* The job is over, so the log's end can be read here. */
	s->wal_end = s->wal.end;
	if (!j->head) {
		s->ckpt = false;
		if (rc < 0) {
			set_error(s, "cutting the write-ahead log: %s",
				  strerror(-rc));
			uv_timer_start(&s->ckpt_timer, ckpt_timer_cb,
				       CHECKPOINT_IDLE_MS, 0);
		}
	} else if (rc == 0) {
		s->wal_failing = false;
		uv_timer_start(&s->ckpt_timer, ckpt_timer_cb,
			       CHECKPOINT_IDLE_MS, 0);
	} else {
		s->wal_failing = true;
		set_error(s, "write-ahead log: %s", strerror(-rc));
	}
	/* Acknowledge the batch; freed locks may start the next writes,
	 * which queue for the next log job. */
	s->in_flight = 0;
	while (w) {
		struct store_write *next = w->next;

		w->next = NULL;
		if (rc == 0) {
			apply_and_ack(s, w);
		} else {
			char msg[300];

			snprintf(msg, sizeof(msg),
				 "write-ahead log append failed: %s",
				 strerror(-rc));
			refuse(s, w, RPC_STORAGE, msg);
		}
		w = next;
	}
	s->wal_busy = false;
	free(j->iov);
	free(j);
	if (s->wal_end >= CHECKPOINT_BYTES)
		checkpoint_start(s);
	checkpoint_step(s); /* a due cut goes before the next batch */
	wal_kick(s);
	writer_kick(s, WRITER_DELAY_MS);
	check_idle(s);
}

/* Start the next log append: the batch filled so far. */
static void wal_kick(struct store *s)
{
	struct wal_job *j;
	size_t i = 0;

	if (s->wal_busy || s->closed || s->filling_n == 0 || s->reloading)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		goto fail;
	j->s = s;
	j->iov = calloc(s->filling_n, sizeof(*j->iov));
	if (!j->iov)
		goto fail;
	for (struct store_write *w = s->filling_head; w; w = w->next) {
		if (w->is_delete) {
			j->iov[i].iov_base = w->tombstone;
			j->iov[i].iov_len = strlen(w->tombstone);
		} else {
			j->iov[i].iov_base = w->rec->json;
			j->iov[i].iov_len = w->rec->json_len;
		}
		i++;
	}
	j->n = s->filling_n;
	j->head = s->filling_head;
	j->job.work = wal_work_cb;
	j->job.after = wal_after_cb;
	lane_submit(&s->wal_lane, &j->job);
	s->in_flight = s->filling_n;
	s->filling_head = s->filling_tail = NULL;
	s->filling_n = 0;
	s->wal_busy = true;
	return;
fail:
	if (j)
		free(j->iov);
	free(j);
	/* Refuse the batch rather than leave its writers waiting. */
	while (s->filling_head) {
		struct store_write *w = s->filling_head;

		s->filling_head = w->next;
		w->next = NULL;
		s->filling_n--;
		refuse(s, w, RPC_STORAGE, "cannot schedule the log write");
	}
	s->filling_tail = NULL;
}

/* ---- checkpoints ---- */

/* Cut the checkpointed head off the log, between two batches. */
static void cut_start(struct store *s)
{
	struct wal_job *j;

	if (s->wal_busy || s->closed)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		return; /* tried again after the next log job */
	j->s = s;
	j->cut = s->ckpt_head;
	j->job.work = wal_work_cb;
	j->job.after = wal_after_cb;
	lane_submit(&s->wal_lane, &j->job);
	s->wal_busy = true;
}

static void checkpoint_start(struct store *s)
{
	if (s->ckpt || s->closed || s->wal_end == 0)
		return;
	s->ckpt = true;
	s->ckpt_synced = false;
	s->ckpt_head = s->wal_end;
	/* Every write logged before head is in a file once a writer pass
	 * that starts after now has finished (or, with nothing dirty, the
	 * pass running now). */
	s->ckpt_need_seq = s->n_dirty	    ? s->writer_seq + 1
			   : s->writer_busy ? s->writer_seq
					    : 0;
	writer_kick(s, 0);
	checkpoint_step(s);
}

/* Move a running checkpoint on: writer pass, then sync, then cut. */
static void checkpoint_step(struct store *s)
{
	if (!s->ckpt || s->closed)
		return;
	if (s->writer_done_seq < s->ckpt_need_seq)
		writer_kick(s, 0);
	else if (!s->ckpt_synced)
		sync_start(s);
	else
		cut_start(s);
}

static void ckpt_timer_cb(uv_timer_t *t)
{
	checkpoint_start(t->data);
}

/* ---- validation ---- */

static void join_batch(struct store *s, struct store_write *w)
{
	w->next = NULL;
	if (s->filling_tail)
		s->filling_tail->next = w;
	else
		s->filling_head = w;
	s->filling_tail = w;
	s->filling_n++;
}

/* What validation found a write should do. */
enum {
	WRITE_LOG = 0,	/* prepared: join the log batch */
	WRITE_NOOP = 1, /* nothing to change (a delete of nothing) */
			/* or an RPC domain code (negative), with a message */
};

/*
 * Check a write against the current state with its lock held; on success
 * prepare its log payload (a store's record, with version and timestamp).
 */
static int validate(struct store *s, struct store_write *w, char *msg, size_t n)
{
	const struct record *cur = index_get(&s->index, &w->coord);
	int x = w->coord.x, y = w->coord.y, z = w->coord.z;

	if (s->closed) {
		snprintf(msg, n, "the daemon is shutting down");
		return RPC_UNAVAILABLE;
	}
	if (s->conflicts) {
		int rc = conflicts_refuse(s->conflicts,
					  index_slot(&s->index, &w->coord),
					  &w->coord, cur != NULL, w->is_delete,
					  msg, n);

		if (rc)
			return rc;
	}
	if (z == 1 && (cur || w->is_delete)) {
		/* "Cannot modify decision" and "immutable": the seed's
		 * words, which its users match on. */
		snprintf(msg, n,
			 w->is_delete
				 ? "Cannot modify decision at (%d, %d, %d): "
				   "layer z=1 (Architecture) is immutable "
				   "(write-once), it cannot be deleted"
				 : "Cannot modify decision at (%d, %d, %d): "
				   "layer z=1 (Architecture) is immutable "
				   "(write-once) and already holds a decision",
			 x, y, z);
		return RPC_IMMUTABLE_LAYER;
	}
	if (w->if_version > 0 && (!cur || cur->version != w->if_version)) {
		if (cur)
			snprintf(msg, n,
				 "if_version %lld does not match version "
				 "%lld at (%d, %d, %d)",
				 (long long)w->if_version,
				 (long long)cur->version, x, y, z);
		else
			snprintf(msg, n,
				 "if_version %lld given but (%d, %d, %d) is "
				 "empty",
				 (long long)w->if_version, x, y, z);
		return RPC_CONCURRENCY;
	}
	if (w->is_delete) {
		if (!cur)
			return WRITE_NOOP;
		if (asprintf(&w->tombstone,
			     "{\"deleted\":{\"x\":%d,\"y\":%d,\"z\":%d}}", x, y,
			     z) < 0) {
			w->tombstone = NULL;
			snprintf(msg, n, "out of memory");
			return RPC_INTERNAL_ERROR;
		}
		return WRITE_LOG;
	}
	if (cur && !w->overwrite && w->if_version == 0) {
		snprintf(msg, n,
			 "(%d, %d, %d) already holds version %lld; pass "
			 "overwrite or if_version to replace it",
			 x, y, z, (long long)cur->version);
		return RPC_COORDINATE_OCCUPIED;
	}
	w->d.coord = w->coord;
	w->d.version = cur ? cur->version + 1 : 1;
	assign_timestamp(s, &w->d);
	w->rec = record_new(&w->d);
	if (!w->rec) {
		snprintf(msg, n, "out of memory");
		return RPC_INTERNAL_ERROR;
	}
	return WRITE_LOG;
}

/* A single write holding its lock: validated, then logged or answered. */
static void start(struct store *s, struct store_write *w)
{
	char msg[200];
	int rc = validate(s, w, msg, sizeof(msg));

	if (rc == WRITE_LOG) {
		join_batch(s, w);
		wal_kick(s);
	} else if (rc == WRITE_NOOP) {
		finish(s, w, 0, NULL);
	} else {
		refuse(s, w, rc, msg);
	}
}

/* A group holding its locks: every item validated, then all join the
 * same log batch, or none does. */
static void group_start(struct store *s, struct store_group *g)
{
	char msg[200];

	for (size_t i = 0; i < g->n; i++)
		unprepare(&g->items[i]);
	for (size_t i = 0; i < g->n; i++) {
		int rc = validate(s, &g->items[i], msg, sizeof(msg));

		if (rc != WRITE_LOG) {
			for (size_t j = 0; j < i; j++)
				unprepare(&g->items[j]);
			group_end(s, g, rc, msg, i);
			return;
		}
	}
	/* Joined without a kick in between, so one log job takes all. */
	for (size_t i = 0; i < g->n; i++)
		join_batch(s, &g->items[i]);
	wal_kick(s);
}

int store_lock_error(struct store *s, const struct lock_set *set, int status,
		     char *msg, size_t n)
{
	const void *holder;
	struct coord c;

	if (status != -ETIMEDOUT) {
		snprintf(msg, n, "the daemon is shutting down");
		return RPC_UNAVAILABLE;
	}
	c = index_coord(&s->index, set->slots[set->taken]);
	holder = locks_leaseholder(&s->locks, set->slots[set->taken]);
	snprintf(msg, n, "timed out after %llu ms waiting for (%d, %d, %d)%s",
		 (unsigned long long)set->timeout_ms, c.x, c.y, c.z,
		 !holder		? " (another write holds it)"
		 : holder == set->owner ? ", leased by this connection (leases "
					  "are not re-entrant)"
					: ", leased by another connection");
	return RPC_CONCURRENCY;
}

static void write_locked_cb(struct lock_set *set, int status)
{
	struct store_write *w =
		(struct store_write *)((char *)set -
				       offsetof(struct store_write, lock));
	char msg[200];
	int code;

	if (status == 0) {
		start(w->store, w);
		return;
	}
	code = store_lock_error(w->store, set, status, msg, sizeof(msg));
	w->done(w, code, msg);
}

static void group_locked_cb(struct lock_set *set, int status)
{
	struct store_group *g =
		(struct store_group *)((char *)set -
				       offsetof(struct store_group, lock));
	char msg[200];
	int code;
	size_t failed = 0;

	if (status == 0) {
		group_start(g->store, g);
		return;
	}
	/* The item whose coordinate it waited for. */
	for (size_t i = 0; i < g->n; i++)
		if (index_slot(&g->store->index, &g->items[i].coord) ==
		    set->slots[set->taken])
			failed = i;
	code = store_lock_error(g->store, set, status, msg, sizeof(msg));
	group_end(g->store, g, code, msg, failed);
}

static void prepare_write(struct store *s, struct store_write *w)
{
	w->store = s;
	w->next = NULL;
	w->rec = NULL;
	w->tombstone = NULL;
	w->stored = NULL;
	w->existed = false;
}

void store_submit(struct store *s, struct store_write *w)
{
	prepare_write(s, w);
	w->group = NULL;
	if (s->closed) {
		w->done(w, RPC_UNAVAILABLE, "the daemon is shutting down");
		return;
	}
	w->lock_slot = index_slot(&s->index, &w->coord);
	w->lock.slots = &w->lock_slot;
	w->lock.n = 1;
	w->lock.owner = w->owner;
	w->lock.kind = LOCKS_WRITE;
	w->lock.timeout_ms = w->timeout_ms;
	w->lock.cb = write_locked_cb;
	locks_acquire(&s->locks, &w->lock);
}

bool store_cancel(struct store *s, struct store_write *w)
{
	if (!w->lock.waiting)
		return false;
	locks_cancel(&s->locks, &w->lock);
	return true;
}

void store_submit_group(struct store *s, struct store_group *g)
{
	g->store = s;
	g->n_finished = 0;
	g->code = 0;
	if (s->closed) {
		g->done(g, RPC_UNAVAILABLE, "the daemon is shutting down",
			SIZE_MAX);
		return;
	}
	g->slots = malloc(g->n * sizeof(*g->slots));
	if (!g->slots) {
		g->done(g, RPC_INTERNAL_ERROR, "out of memory", SIZE_MAX);
		return;
	}
	for (size_t i = 0; i < g->n; i++) {
		prepare_write(s, &g->items[i]);
		g->items[i].group = g;
		g->items[i].is_delete = false;
		g->slots[i] = index_slot(&s->index, &g->items[i].coord);
	}
	g->lock.slots = g->slots;
	g->lock.n = locks_sort(g->slots, g->n); /* distinct: still n */
	g->lock.owner = g->owner;
	g->lock.kind = LOCKS_WRITE;
	g->lock.timeout_ms = g->timeout_ms;
	g->lock.cb = group_locked_cb;
	locks_acquire(&s->locks, &g->lock);
}

/* ---- flush, pending, open, close ---- */

static void reload_step(struct store *s);
static void probe_step(struct store *s);

static bool idle(const struct store *s)
{
	return !(s->wal_busy || s->writer_busy || s->filling_n || s->n_dirty ||
		 s->wal_end || s->ckpt || s->reloading || s->probing);
}

/* Answer the store_waits whose condition holds. */
static void waits_step(struct store *s)
{
	struct store_wait **p = &s->waits, *w;

	while ((w = *p)) {
		if (w->idle ? !idle(s) : s->writer_done_seq < w->need_seq) {
			p = &w->next;
			continue;
		}
		*p = w->next;
		w->next = NULL;
		w->done(w, 0);
		p = &s->waits; /* done may have cancelled another */
	}
}

static void check_idle(struct store *s)
{
	store_idle_fn cb = s->idle_cb;

	reload_step(s);
	probe_step(s);
	waits_step(s);
	if (!cb || !idle(s))
		return;
	s->idle_cb = NULL;
	cb(s, s->idle_arg);
}

void store_wait(struct store *s, struct store_wait *w)
{
	if (s->closed) {
		w->done(w, -ESHUTDOWN);
		return;
	}
	/* As for a checkpoint: the next pass covers what is dirty now, the
	 * running one what it snapshotted. */
	w->need_seq = s->n_dirty       ? s->writer_seq + 1
		      : s->writer_busy ? s->writer_seq
				       : 0;
	w->next = s->waits;
	s->waits = w;
	writer_kick(s, 0);
	if (w->idle)
		checkpoint_start(s);
	check_idle(s);
}

void store_wait_cancel(struct store *s, struct store_wait *w)
{
	for (struct store_wait **p = &s->waits; *p; p = &(*p)->next) {
		if (*p == w) {
			*p = w->next;
			w->next = NULL;
			return;
		}
	}
}

void store_flush(struct store *s, store_idle_fn cb, void *arg)
{
	s->idle_cb = cb;
	s->idle_arg = arg;
	uv_timer_stop(&s->writer_timer);
	writer_kick(s, 0);
	checkpoint_start(s);
	check_idle(s);
}

bool store_files_written(const struct store *s)
{
	return s->n_dirty == 0 && !s->writer_busy;
}

void store_write_files_now(struct store *s)
{
	writer_kick(s, 0);
}

bool store_jobs_running(const struct store *s)
{
	return s->wal_busy || s->writer_busy || s->reload_running ||
	       s->probing;
}

bool store_failing(const struct store *s)
{
	return s->wal_failing || s->writer_retry_ms > 0;
}

size_t store_pending(const struct store *s)
{
	return s->n_dirty + s->filling_n + s->in_flight;
}

/* Log replay: each payload is a record or a {"deleted": coordinate}. */
static int replay_cb(void *ctx, const char *payload, size_t len)
{
	struct store *s = ctx;
	struct decision d;
	struct coord c;
	struct record *r;
	char msg[VMEM_ERRMSG_LEN];
	json_t *doc = json_loadb(payload, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *del = doc ? json_object_get(doc, "deleted") : NULL;
	int rc;

	if (del) {
		rc = coord_from_json(del, s->max_x, &c, msg);
		json_decref(doc);
		if (rc != 0)
			return -EBADMSG;
		index_remove(&s->index, &c);
		mark_dirty(s, index_slot(&s->index, &c));
		return 0;
	}
	json_decref(doc);
	if (decision_parse(payload, len, s->max_x, &d, msg) != 0)
		return -EBADMSG;
	r = record_new(&d);
	decision_done(&d);
	if (!r)
		return -ENOMEM;
	index_put(&s->index, r);
	mark_dirty(s, index_slot(&s->index, &r->coord));
	return 0;
}

/* ---- start-up progress (progress.h) ---- */

static void replay_progress_cb(void *ctx, uint64_t done, uint64_t total,
			       uint64_t records)
{
	(void)ctx;
	if (progress_due())
		progress_say("replaying the write-ahead log: %.1f of %.1f MiB, "
			     "%llu records",
			     (double)done / (1 << 20),
			     (double)total / (1 << 20),
			     (unsigned long long)records);
}

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

static void load_progress_cb(void *ctx, uint64_t done, uint64_t total,
			     uint64_t files)
{
	(void)ctx;
	if (progress_due())
		progress_say("loading the decision files: %llu loaded, %llu of "
			     "%llu entries of " VMDIR_DIRNAME,
			     (unsigned long long)files,
			     (unsigned long long)done,
			     (unsigned long long)total);
}

/* Start-up load: each decision into the index, with its file's stamp. */
static int load_cb(void *ctx, struct decision *d,
		   const struct vmdir_stamp *stamp)
{
	struct store *s = ctx;
	struct record *r;

	/* The log's version, still to be written (git had the tree). */
	if (s->dirty[index_slot(&s->index, &d->coord)]) {
		decision_done(d);
		return 0;
	}
	r = record_new(d);
	if (!r)
		return -ENOMEM;
	decision_done(d);
	s->stamps[index_slot(&s->index, &r->coord)] = *stamp;
	index_put(&s->index, r);
	return 0;
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
struct reload_job {
	uv_work_t req;
	struct store *s; /* only its read-only parts in the worker */
	bool probe;	 /* only look: reload if anything changed */
	size_t n_slots;
	uint8_t *present;	    /* per slot: the index holds a decision */
	struct vmdir_stamp *stamps; /* per slot: as last seen */
	uint8_t *seen;		    /* per slot: found on disk (worker) */
	struct reload_change *changes;
	size_t n_changes, cap_changes;
	struct vmdir_load_report rep;
	struct unmerged_set unmerged; /* git's unmerged decision files */
	char **z1;	  /* per slot: a z=1 decision's compact JSON (owned) */
	uint8_t *keep; /* per slot: z=1 kept over the tree (worker) */
	int unmerged_rc;
	char unmerged_err[256];
	int rc;
	char errmsg[256];
};

static bool stamp_eq(const struct vmdir_stamp *a, const struct vmdir_stamp *b)
{
	return a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

static bool known_cb(void *ctx, const struct coord *c,
		     const struct vmdir_stamp *stamp)
{
	struct reload_job *j = ctx;
	size_t slot = index_slot(&j->s->index, c);

	if (!j->present[slot] || !stamp_eq(&j->stamps[slot], stamp))
		return false;
	j->seen[slot] = 1;
	return true;
}

static int changed_cb(void *ctx, struct decision *d,
		      const struct vmdir_stamp *stamp)
{
	struct reload_job *j = ctx;
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
	j->seen[index_slot(&j->s->index, &r->coord)] = 1;
	j->changes[j->n_changes++] = (struct reload_change){
		index_slot(&j->s->index, &r->coord), r, *stamp};
	return 0;
}

/* Blocking: stat every file, read only those whose stamp changed. */
static void reload_work_cb(uv_work_t *req)
{
	struct reload_job *j = req->data;

	if (j->s->conflicts)
		j->unmerged_rc = conflicts_unmerged(j->s->conflicts,
						    &j->unmerged,
						    j->unmerged_err,
						    sizeof(j->unmerged_err));
	j->rc = vmdir_scan(&j->s->dir, known_cb, changed_cb, j, &j->unmerged,
			   &j->rep, j->errmsg, sizeof(j->errmsg));
	/* A write-once decision HEAD still holds but the tree changed or
	 * lost: no commit changed it, so it stays (conflicts_in_head). */
	for (size_t i = 0; j->rc == 0 && j->z1 && i < j->n_changes; i++) {
		size_t slot = j->changes[i].slot;

		if (j->z1[slot] && strcmp(j->z1[slot], j->changes[i].rec->json) &&
		    conflicts_in_head(j->s->conflicts, j->z1[slot]))
			j->keep[slot] = 1;
	}
	for (size_t slot = 0; j->rc == 0 && j->z1 && slot < j->n_slots; slot++)
		if (j->z1[slot] && !j->seen[slot] &&
		    conflicts_in_head(j->s->conflicts, j->z1[slot]))
			j->keep[slot] = 1;
}

static void reload_job_free(struct reload_job *j)
{
	for (size_t i = 0; i < j->n_changes; i++)
		record_free(j->changes[i].rec);
	free(j->changes);
	free(j->present);
	free(j->stamps);
	free(j->seen);
	for (size_t i = 0; j->z1 && i < j->n_slots; i++)
		free(j->z1[i]);
	free(j->z1);
	free(j->keep);
	vmdir_load_report_done(&j->rep);
	unmerged_set_done(&j->unmerged);
	free(j);
}

static void reload_join(struct store *s, struct store_reload_wait *list);

static bool record_same(const struct record *a, const struct record *b)
{
	if (!a || !b)
		return a == b;
	return a->json_len == b->json_len &&
	       memcmp(a->json, b->json, a->json_len) == 0;
}

/* Put a slot's new state (rec NULL: none) into the index; tell the
 * commit queue when it really changed. */
static void reload_apply(struct store *s, size_t slot, struct record *rec,
			 const struct vmdir_stamp *stamp, bool conflict_ended)
{
	const struct record *old = s->index.slots[slot];
	bool same = record_same(old, rec);

	s->stamps[slot] = *stamp;
	if (same) {
		record_free(rec);
		return;
	}
	if (old && !conflict_ended && s->on_replacing)
		s->on_replacing(s->on_replacing_ctx, slot, old, rec);
	if (rec) {
		index_put(&s->index, rec);
	} else {
		struct coord c = index_coord(&s->index, slot);

		index_remove(&s->index, &c);
	}
	if (s->on_applied)
		s->on_applied(s->on_applied_ctx, slot, true);
}

static void reload_finish(struct store *s, int rc, const char *errmsg,
			  const struct vmdir_load_report *rep)
{
	struct store_reload_wait *waiter = s->reload_waiters, *next;
	struct store_write *held = s->filling_head;

	s->reloading = false;
	s->reload_waiters = NULL;
	/* Writes held during the reload were validated against the old
	 * state: validate them again against what the files say now. */
	s->filling_head = s->filling_tail = NULL;
	s->filling_n = 0;
	while (held) {
		struct store_write *w = held;

		if (w->group) {
			/* A group's items joined the batch together. */
			struct store_group *g = w->group;

			held = g->items[g->n - 1].next;
			group_start(s, g);
			continue;
		}
		held = w->next;
		unprepare(w);
		start(s, w);
	}
	wal_kick(s);
	s->reloads_done++;
	for (; waiter; waiter = next) {
		next = waiter->next;
		waiter->cb(s, waiter->arg, rc, errmsg, rep);
		free(waiter);
	}
	/* Callers that came while this reload was reading the files get a
	 * reload of their own, started now. */
	if (s->reload_next) {
		waiter = s->reload_next;
		s->reload_next = NULL;
		reload_join(s, waiter);
	}
}

static void probe_done(struct store *s, struct reload_job *j, int rc);

/*
 * What a scan found about conflicts (conflicts_update; apply for a
 * reload): the slots newly conflicted get their held version written,
 * and every conflicted slot counts as seen (it keeps its acknowledged
 * version whatever its file holds). Returns whether a conflict ended;
 * with apply, *ended (n_slots entries) lists the slots and *held their
 * versions before the reload (malloc'd compact JSON or NULL each).
 */
static bool scan_conflicts(struct store *s, struct reload_job *j, bool apply,
			   size_t *ended, size_t *n_ended, char **held)
{
	struct conflicts *cf = s->conflicts;
	size_t *fresh, n_fresh = 0, none = 0;
	bool any;

	*n_ended = 0;
	if (!cf)
		return false;
	if (j->unmerged_rc < 0)
		set_error(s, "listing git's unmerged files: %s",
			  j->unmerged_err);
	fresh = malloc(j->n_slots * sizeof(*fresh));
	if (!fresh) {
		set_error(s, "out of memory: conflicts not updated");
		return false;
	}
	any = conflicts_update(cf, &j->unmerged, &j->rep, apply, fresh,
			       &n_fresh, apply ? ended : fresh,
			       apply ? n_ended : &none);
	for (size_t i = 0; i < n_fresh; i++)
		mark_dirty(s, fresh[i]);
	for (size_t i = 0; i < cf->n; i++)
		j->seen[cf->list[i].slot] = 1;
	for (size_t i = 0; i < *n_ended; i++) {
		const struct record *r = s->index.slots[ended[i]];

		held[i] = r ? strdup(r->json) : NULL;
	}
	free(fresh);
	if (n_fresh)
		writer_kick(s, 0);
	return any;
}

static bool in_list(const size_t *list, size_t n, size_t v)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] == v)
			return true;
	return false;
}

static void reload_after_cb(uv_work_t *req, int status)
{
	struct reload_job *j = req->data;
	struct store *s = j->s;
	int rc = status < 0 ? status : j->rc;
	static const struct vmdir_stamp none;
	size_t *ended = NULL, n_ended = 0;
	char **held = NULL;

	s->reload_running = false;
	if (s->on_report && rc == 0)
		s->on_report(s->on_report_ctx, &j->rep);
	if (j->probe) {
		probe_done(s, j, rc);
		return;
	}
	if (rc == 0 && s->conflicts) {
		ended = malloc(j->n_slots * sizeof(*ended));
		held = calloc(j->n_slots, sizeof(*held));
		if (ended && held)
			scan_conflicts(s, j, true, ended, &n_ended, held);
		else
			set_error(s, "out of memory: conflicts not updated");
	}
	if (rc == 0) {
		for (size_t slot = 0; j->keep && slot < j->n_slots; slot++) {
			if (!j->keep[slot])
				continue;
			struct coord c = index_coord(&s->index, slot);

			conflicts_z1_restored(s->conflicts, &c);
			j->seen[slot] = 1;
			mark_dirty(s, slot); /* its file written again */
			writer_kick(s, 0);
		}
		for (size_t i = 0; i < j->n_changes; i++) {
			if (j->keep && j->keep[j->changes[i].slot])
				continue;
			reload_apply(s, j->changes[i].slot, j->changes[i].rec,
				     &j->changes[i].stamp,
				     in_list(ended, n_ended,
					     j->changes[i].slot));
			j->changes[i].rec = NULL;
		}
		for (size_t slot = 0; slot < j->n_slots; slot++)
			if (j->present[slot] && !j->seen[slot])
				reload_apply(s, slot, NULL, &none,
					     in_list(ended, n_ended, slot));
		/* A conflict that ended: what the file now says replaced
		 * the acknowledged version (or kept it). */
		for (size_t i = 0; i < n_ended; i++) {
			struct coord c = index_coord(&s->index, ended[i]);

			conflicts_ended(s->conflicts, &c, held[i],
					s->index.slots[ended[i]]);
		}
	} else {
		set_error(s, "reloading the decision files: %s", j->errmsg);
	}
	for (size_t i = 0; i < n_ended; i++)
		free(held[i]);
	free(held);
	free(ended);
	reload_finish(s, rc, j->errmsg, &j->rep);
	reload_job_free(j);
	check_idle(s);
}

static void probe_reload_done(struct store *s, void *arg, int rc,
			      const char *errmsg,
			      const struct vmdir_load_report *rep)
{
	(void)arg;
	if (rc == -EAGAIN) /* git took the tree: look again when it is done */
		s->probe_after_yield = true;
	else if (rc < 0)
		log_err("reloading after a change in the repository: %s",
			errmsg);
	else
		log_info("reloaded the decision files after a change in the "
			 "repository (%zu quarantined)",
			 rep ? rep->n_quarantined : 0);
}

/* A probe saw the files: reload if any differs from what we know (a
 * slot written meanwhile is ours, not a change). */
static void probe_done(struct store *s, struct reload_job *j, int rc)
{
	bool changed = false;
	size_t none = 0;

	s->probing = false;
	if (rc == 0)
		changed = scan_conflicts(s, j, false, NULL, &none, NULL);
	for (size_t i = 0; rc == 0 && !changed && i < j->n_changes; i++)
		changed = !s->dirty[j->changes[i].slot] &&
			  !record_same(s->index.slots[j->changes[i].slot],
				       j->changes[i].rec);
	for (size_t slot = 0; rc == 0 && !changed && slot < j->n_slots; slot++)
		changed = j->present[slot] && !j->seen[slot] &&
			  s->index.slots[slot] && !s->dirty[slot];
	if (rc < 0)
		set_error(s, "checking the decision files: %s", j->errmsg);
	reload_job_free(j);
	if (changed && s->conflicts && s->conflicts->yield[0])
		s->probe_after_yield = true; /* see store_resume */
	else if (changed)
		store_reload(s, probe_reload_done, NULL);
	check_idle(s);
}

static struct reload_job *reload_job_new(struct store *s)
{
	struct reload_job *j = calloc(1, sizeof(*j));

	if (j) {
		j->s = s;
		j->req.data = j;
		j->n_slots = s->index.n_slots;
		j->present = calloc(j->n_slots, 1);
		j->seen = calloc(j->n_slots, 1);
		j->stamps = malloc(j->n_slots * sizeof(*j->stamps));
	}
	if (j && (!j->present || !j->seen || !j->stamps)) {
		reload_job_free(j);
		j = NULL;
	}
	if (!j)
		return NULL;
	memcpy(j->stamps, s->stamps, j->n_slots * sizeof(*j->stamps));
	for (size_t i = 0; i < j->n_slots; i++)
		j->present[i] = s->index.slots[i] != NULL;
	if (s->conflicts) {
		j->z1 = calloc(j->n_slots, sizeof(*j->z1));
		j->keep = calloc(j->n_slots, 1);
		for (size_t i = 0; j->z1 && j->keep && i < j->n_slots;
		     i += VMEM_MAX_Z) /* slot i is z=1 */
			if (s->index.slots[i] && !conflicts_has(s->conflicts, i) &&
			    !(j->z1[i] = strdup(s->index.slots[i]->json))) {
				reload_job_free(j);
				return NULL;
			}
		if (!j->z1 || !j->keep) {
			reload_job_free(j);
			return NULL;
		}
	}
	return j;
}

/* Start a wanted probe once the writer has caught up (its stamps are
 * then current). */
static void probe_step(struct store *s)
{
	struct reload_job *j;

	/* While git has the tree the writer cannot catch up; a probe still
	 * runs then (dirty slots are ours, not changes), to see conflicts. */
	if (!s->probe_wanted || s->probing || s->reloading || s->closed ||
	    s->writer_busy ||
	    (s->n_dirty && !(s->conflicts && s->conflicts->yield[0])))
		return;
	j = reload_job_new(s);
	if (!j)
		return; /* tried again at the next idle check */
	j->probe = true;
	if (uv_queue_work(s->loop, &j->req, reload_work_cb, reload_after_cb) <
	    0) {
		reload_job_free(j);
		return;
	}
	s->probe_wanted = false;
	s->probing = true;
}

void store_check_files(struct store *s)
{
	s->probe_wanted = true;
	writer_kick(s, 0);
	probe_step(s);
}

/* Move a reload on: files written, log checkpointed, then the load. */
static void reload_step(struct store *s)
{
	struct reload_job *j;

	if (!s->reloading || s->reload_running || s->closed)
		return;
	if (s->conflicts && s->conflicts->yield[0]) {
		/* Git took the tree before the files could be written. */
		reload_finish(s, -EAGAIN, s->conflicts->yield, NULL);
		return;
	}
	if (s->wal_busy || s->writer_busy || s->n_dirty) {
		writer_kick(s, 0);
		return;
	}
	if (s->wal_end > 0 || s->ckpt) {
		checkpoint_start(s);
		return;
	}
	if (s->probing)
		return; /* its after-callback moves us on */
	j = reload_job_new(s);
	if (!j) {
		reload_finish(s, -ENOMEM, "out of memory", NULL);
		return;
	}
	if (uv_queue_work(s->loop, &j->req, reload_work_cb, reload_after_cb) <
	    0) {
		reload_job_free(j);
		reload_finish(s, -EAGAIN, "cannot start the reload", NULL);
		return;
	}
	s->reload_running = true;
}

/* Callers (a list) join the reload to come, which starts unless one is
 * already on its way. */
static void reload_join(struct store *s, struct store_reload_wait *list)
{
	struct store_reload_wait **tail = &s->reload_waiters;

	if (s->closed) {
		while (list) {
			struct store_reload_wait *next = list->next;

			list->cb(s, list->arg, -ESHUTDOWN,
				 "the daemon is shutting down", NULL);
			free(list);
			list = next;
		}
		return;
	}
	while (*tail)
		tail = &(*tail)->next;
	*tail = list;
	if (s->reloading)
		return;
	s->reloading = true;
	writer_kick(s, 0);
	reload_step(s);
}

void store_reload(struct store *s, store_reload_fn cb, void *arg)
{
	struct store_reload_wait *w, **tail;

	w = calloc(1, sizeof(*w));
	if (!w) {
		cb(s, arg, -ENOMEM, "out of memory", NULL);
		return;
	}
	w->cb = cb;
	w->arg = arg;
	if (!s->reload_running) {
		/* A reload not reading the files yet will see every change
		 * made before this call: join it (or start one). */
		reload_join(s, w);
		return;
	}
	/* The running one may have read a file before it changed: wait for
	 * the next reload, which starts when this one ends. */
	for (tail = &s->reload_next; *tail; tail = &(*tail)->next)
		;
	*tail = w;
}

int store_open(struct store *s, uv_loop_t *loop, const struct repo *r,
	       int max_x, struct conflicts *cf, const struct unmerged_set *u,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn)
{
	const struct wal_replay replay = {
		.record = replay_cb,
		.progress = replay_progress_cb,
		.ctx = s,
	};
	struct wal_report wrep = {0};
	struct writer_item *items = NULL;
	size_t n = 0;
	int rc;

	memset(s, 0, sizeof(*s));
	s->loop = loop;
	s->max_x = max_x;
	s->conflicts = cf;
	wal_init(&s->wal);
	rc = index_init(&s->index, max_x);
	if (rc == 0)
		rc = locks_init(&s->locks, loop, s->index.n_slots);
	if (rc == 0)
		rc = vmdir_init(&s->dir, r->root, &r->state, max_x);
	s->dir.file_mode = r->file_mode;
	s->dir.dir_mode = r->dir_mode;
	if (rc == 0 && cf) {
		s->dir.interrupt = writer_interrupt;
		s->dir.interrupt_ctx = cf;
	}
	s->dirty = calloc(s->index.n_slots, 1);
	s->stamps = calloc(s->index.n_slots, sizeof(*s->stamps));
	s->dirty_list = calloc(s->index.n_slots, sizeof(*s->dirty_list));
	if (rc < 0 || !s->dirty || !s->dirty_list || !s->stamps) {
		snprintf(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	rc = lane_init(&s->wal_lane, loop);
	if (rc < 0) {
		snprintf(errmsg, errn, "cannot start the log thread: %s",
			 uv_strerror(rc));
		return rc;
	}
	uv_timer_init(loop, &s->writer_timer);
	s->writer_timer.data = s;
	uv_timer_init(loop, &s->ckpt_timer);
	s->ckpt_timer.data = s;

	/* The log first: its writes are newer than any file, and a file it
	 * covers may be incomplete after a crash (vmdir.h), so they are
	 * materialised before the files are loaded and judged. */
	rc = wal_open(&s->wal, &r->state, "wal", &replay, &wrep, errmsg, errn);
	if (rc < 0)
		return rc;
	if (wrep.torn_bytes)
		set_error(s,
			  "cut a torn tail of %llu bytes off the write-ahead "
			  "log",
			  (unsigned long long)wrep.torn_bytes);
	if (s->n_dirty > 0) {
		char why[CONFLICTS_YIELD_LEN];

		s->replayed = malloc(s->n_dirty * sizeof(*s->replayed));
		if (!s->replayed) {
			snprintf(errmsg, errn, "out of memory");
			return -ENOMEM;
		}
		memcpy(s->replayed, s->dirty_list,
		       s->n_dirty * sizeof(*s->replayed));
		s->n_replayed = s->n_dirty;
		if (cf && conflicts_yield_check(cf, why, sizeof(why))) {
			/* Git has the tree: the log keeps these writes and
			 * the writer makes their files once git is done. */
			s->wal_end = s->wal.end;
			goto load;
		}
		rc = writer_snapshot(s, &items, &n);
		/* A file in conflict keeps its text: the log's version of it
		 * is held instead (conflicts_start serves it). */
		for (size_t i = 0; rc == 0 && i < n; i++)
			items[i].held = cf && unmerged_find(u, &items[i].coord);
		s->dir.progress = apply_progress_cb;
		s->dir.progress_ctx = s;
		if (rc == 0)
			rc = writer_run(&s->dir, cf, items, n, true, false,
					errmsg, errn);
		s->dir.progress = NULL;
		/* Git took the tree meanwhile: what it did not write waits,
		 * in the log, for the writer. */
		for (size_t i = 0; rc == 0 && i < n; i++) {
			if (items[i].left) {
				mark_dirty(s, index_slot(&s->index,
							 &items[i].coord));
				s->wal_end = s->wal.end;
			}
		}
		writer_items_free(items, n);
		if (rc < 0)
			return rc;
		if (s->wal_end)
			goto load;
	}
	if (wrep.records > 0 || wrep.torn_bytes > 0) {
		rc = wal_truncate(&s->wal);
		if (rc < 0) {
			snprintf(errmsg, errn,
				 "cannot truncate the write-ahead log: %s",
				 strerror(-rc));
			return rc;
		}
	}
load:
	s->dir.progress = load_progress_cb;
	rc = vmdir_scan(&s->dir, NULL, load_cb, s, u, rep, errmsg, errn);
	s->dir.progress = NULL;
	return rc;
}

void store_resume(struct store *s)
{
	if (s->probe_after_yield) {
		s->probe_after_yield = false;
		s->probe_wanted = true;
	}
	writer_kick(s, 0);
	check_idle(s);
}

void store_close(struct store *s)
{
	struct store_reload_wait *waiting;

	if (s->closed)
		return;
	s->closed = true;
	while (s->waits) {
		struct store_wait *w = s->waits;

		s->waits = w->next;
		w->next = NULL;
		w->done(w, -ESHUTDOWN);
	}
	/* Reload callers still waiting (a stop that did not wait for
	 * them): told, not forgotten. */
	reload_join(s, s->reload_next);
	s->reload_next = NULL;
	waiting = s->reload_waiters;
	s->reload_waiters = NULL;
	reload_join(s, waiting);
	locks_done(&s->locks);
	lane_close(&s->wal_lane);
	uv_close((uv_handle_t *)&s->writer_timer, NULL);
	uv_close((uv_handle_t *)&s->ckpt_timer, NULL);
	free(s->replayed);
	s->replayed = NULL;
	wal_close(&s->wal);
	vmdir_done(&s->dir);
	index_done(&s->index);
	free(s->dirty);
	free(s->dirty_list);
	free(s->stamps);
	s->dirty = NULL;
	s->dirty_list = NULL;
}

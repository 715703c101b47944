/*
 * The write path: lock -> validation (the kind's prepare) -> log batch ->
 * fdatasync -> the kind's apply -> acknowledgement -> file writer (every
 * kind's pending items, no sync) -> checkpoint (every kind's sync, then
 * the log's head is cut).
 *
 * Invariants: a kind's state holds only durable (logged) writes, so
 * readers never see a write that could still be lost; a write's lock is
 * held from validation until it is applied or refused; a log record is
 * dropped only after its write is materialised and every kind synced
 * what it wrote after it.
 *
 * Files are written without syncing so the writer never competes with the
 * log's fdatasync for the disk; a checkpoint makes them durable in bulk
 * when the log has grown past CHECKPOINT_BYTES, after CHECKPOINT_IDLE_MS
 * without writes, and at a stop. A checkpoint never holds writes back: it
 * remembers the log's end, waits for a writer pass that started after
 * that, syncs, and cuts exactly the records before that end.
 *
 * Nothing here names a kind: writes carry their kind (struct store_kind),
 * the log's payloads say theirs in their first byte, and the writer, the
 * checkpoint, the load and the reload loop over the registered kinds.
 */
#include "store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errmsg.h"
#include "log.h"
#include "progress.h"
#include "protocol/errors.h"
#include "protocol/fnv.h"

/* Delay that lets bursts of writes coalesce before files are written. */
#define WRITER_DELAY_MS	    20
#define WRITER_RETRY_MAX_MS 5000
#define CHECKPOINT_BYTES    (16u << 20)
#define CHECKPOINT_IDLE_MS  1000
/* While git has the working tree, the writer looks again this often. */
#define WRITER_YIELD_MS 200

/* A log job: a batch to append, or a checkpoint's cut. */
struct wal_job {
	struct lane_job job; /* first: the lane hands it back */
	struct store *s;
	/* The batch, in log order (linked by next; NULL for a cut): the
	 * loop adds to it (wal_gather) until the lane starts the job. */
	struct store_write *head, *tail;
	size_t n;
	uint64_t cut; /* log bytes to drop */
	uint64_t end; /* the log's end after the job (set on the lane) */
	int rc;
};

/* One kind's share of a writer pass. */
struct writer_part {
	struct store_kind *k;
	void *snap; /* the kind's snapshot (kind.h) */
	int rc;
};

/* A writer pass, or a checkpoint's sync (no parts), handed over whole. */
struct writer_job {
	uv_work_t req;
	struct store *s; /* only its kinds' read-only parts in the worker */
	bool sync;
	struct writer_part parts[STORE_MAX_KINDS];
	size_t n;
	uint64_t seq;
	int rc;
	const char *failed; /* the name of the kind that failed first */
	char errmsg[256];
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

/* Why git has the working tree now (store.h, tree_yielded), or NULL. */
static const char *yielded(const struct store *s)
{
	return s->tree_yielded ? s->tree_yielded(s->tree_yielded_ctx) : NULL;
}

static void writer_kick(struct store *s, unsigned delay_ms);
static void check_idle(struct store *s);
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
int64_t store_timestamp(struct store_kind *k)
{
	struct store *s = k->store;
	int64_t t = now_usec();

	if (t <= s->last_timestamp)
		t = s->last_timestamp + 1;
	s->last_timestamp = t;
	return t;
}

void store_timestamp_seen(struct store_kind *k, int64_t usec)
{
	if (usec > k->store->last_timestamp)
		k->store->last_timestamp = usec;
}

void store_changed(struct store_kind *k, enum kind_change_type type,
		   const void *detail)
{
	struct store *s = k->store;
	struct kind_change ch = {k->kind, type, detail};

	if (s->on_change)
		s->on_change(s->on_change_ctx, &ch);
}

void store_probe_soon(struct store_kind *k)
{
	k->store->probe_wanted = true;
	k->store->probe_all = true;
}

size_t store_kind_slot(const struct store_kind *k, size_t slot)
{
	return k->lock_base + slot;
}

size_t store_unwritten(const struct store *s)
{
	size_t n = 0;

	for (size_t i = 0; i < s->n_kinds; i++)
		n += s->kinds[i]->kind->pending(s->kinds[i]);
	return n;
}

size_t store_pending(const struct store *s)
{
	return store_unwritten(s) + s->filling_n + s->in_flight;
}

/* ---- file writer ---- */

/* Hand each part's outcome back to its kind, which frees the snapshot
 * (and, on failure, makes its items pending again). */
static void writer_parts_done(struct writer_job *j, int status)
{
	for (size_t i = 0; i < j->n; i++) {
		struct writer_part *p = &j->parts[i];

		p->k->kind->written(p->k, p->snap, status < 0 ? status : p->rc);
		p->snap = NULL;
	}
	j->n = 0;
}

/* Take every kind's pending items into j's parts. 0 or -ENOMEM (then
 * nothing is taken). */
static int writer_snapshot(struct store *s, struct writer_job *j)
{
	for (size_t i = 0; i < s->n_kinds; i++) {
		struct store_kind *k = s->kinds[i];
		struct writer_part *p = &j->parts[j->n];

		if (k->kind->pending(k) == 0)
			continue;
		p->k = k;
		p->rc = 0;
		if (k->kind->snapshot(k, &p->snap) < 0) {
			writer_parts_done(j, -ENOMEM);
			return -ENOMEM;
		}
		j->n++;
	}
	return 0;
}

/* Blocking: every part written (each kind tries even when another
 * failed), or every kind's files synced for a checkpoint. */
static void writer_work_cb(uv_work_t *req)
{
	struct writer_job *j = req->data;
	struct store *s = j->s;
	char msg[sizeof(j->errmsg)];

	if (j->sync) {
		for (size_t i = 0; i < s->n_kinds && j->rc == 0; i++) {
			struct store_kind *k = s->kinds[i];

			if (!k->kind->sync)
				continue;
			j->rc = k->kind->sync(k, j->errmsg, sizeof(j->errmsg));
			if (j->rc < 0)
				j->failed = k->kind->name;
		}
		return;
	}
	for (size_t i = 0; i < j->n; i++) {
		struct writer_part *p = &j->parts[i];

		p->rc = p->k->kind->write(p->k, p->snap, false, msg,
					  sizeof(msg));
		if (p->rc < 0 && j->rc == 0) {
			j->rc = p->rc;
			j->failed = p->k->kind->name;
			memcpy(j->errmsg, msg, sizeof(msg));
		}
	}
}

static void writer_after_cb(uv_work_t *req, int status)
{
	struct writer_job *j = req->data;
	struct store *s = j->s;

	s->writer_busy = false;
	if (status < 0 && j->rc == 0) {
		j->rc = status;
		j->failed = j->n ? j->parts[0].k->kind->name : "the";
		snprintf(j->errmsg, sizeof(j->errmsg), "writer cancelled");
	}
	if (j->sync) {
		/* A checkpoint's sync: on failure, try again later. */
		if (j->rc < 0) {
			set_error(s, "syncing %s files: %s", j->failed,
				  j->errmsg);
			s->ckpt = false;
			uv_timer_start(&s->ckpt_timer, ckpt_timer_cb,
				       CHECKPOINT_IDLE_MS, 0);
		} else {
			s->ckpt_synced = true;
		}
		writer_kick(s, WRITER_DELAY_MS);
	} else {
		/* A kind that left files to git's operation (KIND_LEFT) made
		 * them pending again: the pass does not count as done. */
		bool left = false;

		for (size_t i = 0; status == 0 && i < j->n; i++)
			left |= j->parts[i].rc == KIND_LEFT;
		writer_parts_done(j, status);
		if (j->rc < 0) {
			set_error(s, "writing %s files: %s", j->failed,
				  j->errmsg);
			s->writer_retry_ms = s->writer_retry_ms
						     ? s->writer_retry_ms * 2
						     : 100;
			if (s->writer_retry_ms > WRITER_RETRY_MAX_MS)
				s->writer_retry_ms = WRITER_RETRY_MAX_MS;
			writer_kick(s, s->writer_retry_ms);
		} else {
			s->writer_retry_ms = 0;
			if (!left)
				s->writer_done_seq = j->seq;
			writer_kick(s,
				    left ? WRITER_YIELD_MS : WRITER_DELAY_MS);
		}
	}
	free(j);
	checkpoint_step(s);
	check_idle(s);
}

/* The writer's pass: every kind's pending items, in one job. Not while a
 * probe looks at the files (it would take our own writes for changes
 * under us); probe_done kicks the writer. */
static void writer_start(struct store *s)
{
	struct writer_job *j;

	if (s->writer_busy || s->probing || store_unwritten(s) == 0 ||
	    s->closed)
		return;
	j = calloc(1, sizeof(*j));
	if (!j || writer_snapshot(s, j) < 0) {
		free(j);
		writer_kick(s, 100);
		return;
	}
	j->s = s;
	j->req.data = j;
	j->seq = ++s->writer_seq;
	if (uv_queue_work(s->loop, &j->req, writer_work_cb, writer_after_cb) <
	    0) {
		writer_parts_done(j, -EAGAIN);
		free(j);
		writer_kick(s, 100);
		return;
	}
	s->writer_busy = true;
}

/* A checkpoint's flush of what every kind wrote, on the writer's lane. */
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
	j->sync = true;
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
	if (s->closed || s->writer_busy || store_unwritten(s) == 0)
		return;
	if (yielded(s)) {
		/* Git has the tree: look again at a slow pace (store_resume
		 * comes sooner when the operation is seen to end). */
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

/* Append a batch: its payloads gathered into the lane's iovec array
 * (the loop touches neither the writes nor the array meanwhile). */
static int wal_append_batch(struct store *s, struct wal_job *j)
{
	size_t i = 0;

	if (j->n > s->wal_iov_cap) {
		struct iovec *iov = realloc(s->wal_iov, j->n * sizeof(*iov));

		if (!iov)
			return -ENOMEM;
		s->wal_iov = iov;
		s->wal_iov_cap = j->n;
	}
	for (struct store_write *w = j->head; w; w = w->next) {
		s->wal_iov[i].iov_base = (void *)w->payload;
		s->wal_iov[i].iov_len = w->payload_len;
		i++;
	}
	return wal_append(&s->wal, s->wal_iov, j->n);
}

static void wal_work_cb(struct lane_job *job)
{
	struct wal_job *j = (struct wal_job *)job;
	struct store *s = j->s;

	if (j->head) {
		if (s->log_hook)
			s->log_hook(s->log_hook_ctx, j->n, false, 0);
		j->rc = wal_append_batch(s, j);
		if (s->log_hook)
			s->log_hook(s->log_hook_ctx, j->n, true, j->rc);
	} else {
		j->rc = wal_cut_head(&s->wal, j->cut);
	}
	j->end = s->wal.end;
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

/* Apply one logged write (its kind reports the change) and acknowledge
 * it. */
static void apply_and_ack(struct store *s, struct store_write *w)
{
	w->kind->kind->apply(w->kind, w);
	w->payload = NULL;
	w->payload_len = 0;
	finish(s, w, 0, NULL);
}

/* Drop what validation prepared for the log. */
static void unprepare(struct store_write *w)
{
	w->kind->kind->unprepare(w->kind, w);
	w->payload = NULL;
	w->payload_len = 0;
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

	/* The next job may be running already: its end is not ours. */
	s->wal_end = j->end;
	s->wal_jobs--;
	if (j == s->wal_next)
		s->wal_next = NULL;
	if (!j->head) {
		s->cutting = false;
		s->ckpt = false;
		if (rc < 0)
			set_error(s, "cutting the write-ahead log: %s",
				  strerror(-rc));
		/* Records appended while this checkpoint ran (their own idle
		 * timer found it running) get the next one, as does a failed
		 * cut. */
		if (rc < 0 || (s->wal_end > 0 &&
			       !uv_is_active((uv_handle_t *)&s->ckpt_timer)))
			uv_timer_start(&s->ckpt_timer, ckpt_timer_cb,
				       CHECKPOINT_IDLE_MS, 0);
	} else if (rc == 0) {
		s->wal_failing = false;
		uv_timer_start(&s->ckpt_timer, ckpt_timer_cb,
			       CHECKPOINT_IDLE_MS, 0);
	} else {
		s->wal_failing = true;
		set_error(s, "write-ahead log: %s", strerror(-rc));
	}
	/* Acknowledge the batch in log order; freed locks may start the
	 * next writes, which queue for the next log job. */
	s->in_flight -= j->n;
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
	free(j);
	if (s->wal_end >= CHECKPOINT_BYTES)
		checkpoint_start(s);
	checkpoint_step(s); /* a due cut: behind the queued batches */
	wal_kick(s);
	writer_kick(s, WRITER_DELAY_MS);
	check_idle(s);
}

/* Move the writes validated so far to the end of job's batch (on the
 * loop; under the lane's mutex once the job is queued). A group's items
 * are always moved together, so they share one batch. */
static void wal_gather(struct lane_job *job, void *arg)
{
	struct wal_job *j = (struct wal_job *)job;
	struct store *s = arg;

	if (j->tail)
		j->tail->next = s->filling_head;
	else
		j->head = s->filling_head;
	j->tail = s->filling_tail;
	j->n += s->filling_n;
	s->in_flight += s->filling_n;
	s->filling_head = s->filling_tail = NULL;
	s->filling_n = 0;
}

/*
 * Hand the writes validated so far to the log: to the batch queued
 * behind the running append while the lane has not started it, else to
 * a new job. One append runs at a time (the lane) while the next batch
 * gathers, and the lane starts that batch the moment the running
 * fdatasync returns, while the loop acknowledges the finished one.
 */
static void wal_kick(struct store *s)
{
	struct wal_job *j;

	if (s->closed || s->filling_n == 0 || s->reloading)
		return;
	if (s->wal_next &&
	    lane_amend(&s->wal_lane, &s->wal_next->job, wal_gather, s))
		return;
	s->wal_next = NULL;
	j = calloc(1, sizeof(*j));
	if (!j)
		goto fail;
	j->s = s;
	wal_gather(&j->job, s);
	j->job.work = wal_work_cb;
	j->job.after = wal_after_cb;
	lane_submit(&s->wal_lane, &j->job);
	s->wal_next = j;
	s->wal_jobs++;
	return;
fail:
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

	if (s->cutting || s->closed)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		return; /* tried again after the next log job */
	j->s = s;
	j->cut = s->ckpt_head;
	j->job.work = wal_work_cb;
	j->job.after = wal_after_cb;
	/* Behind the batches queued so far, whose records it keeps. */
	lane_submit(&s->wal_lane, &j->job);
	s->wal_jobs++;
	s->cutting = true;
}

static void checkpoint_start(struct store *s)
{
	if (s->ckpt || s->closed || s->wal_end == 0)
		return;
	s->ckpt = true;
	s->ckpt_synced = false;
	s->ckpt_head = s->wal_end;
	/* Every write logged before head is materialised once a writer
	 * pass that starts after now has finished (or, with nothing
	 * pending, the pass running now). */
	s->ckpt_need_seq = store_unwritten(s) ? s->writer_seq + 1
			   : s->writer_busy   ? s->writer_seq
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

/*
 * Check a write against the current state with its lock held; on
 * success its kind has prepared its log payload. KIND_LOG, KIND_NOOP,
 * or a negative RPC domain code with a message.
 */
static int validate(struct store *s, struct store_write *w, char *msg, size_t n)
{
	if (s->closed) {
		snprintf(msg, n, "the daemon is shutting down");
		return RPC_UNAVAILABLE;
	}
	return w->kind->kind->prepare(w->kind, w, msg, n);
}

/* A single write holding its lock: validated, then logged or answered. */
static void start(struct store *s, struct store_write *w)
{
	char msg[200];
	int rc = validate(s, w, msg, sizeof(msg));

	if (rc == KIND_LOG) {
		join_batch(s, w);
		wal_kick(s);
	} else if (rc == KIND_NOOP) {
		finish(s, w, 0, NULL);
	} else {
		refuse(s, w, rc, msg);
	}
}

/*
 * A group holding its locks: every item validated, then all that change
 * something join the same log batch, or none does. Items with nothing
 * to change count as finished at once (a reload's second validation
 * counts afresh).
 */
static void group_start(struct store *s, struct store_group *g)
{
	char msg[200];
	size_t n_noop = 0;

	for (size_t i = 0; i < g->n; i++)
		unprepare(g->items[i]);
	for (size_t i = 0; i < g->n; i++) {
		int rc = validate(s, g->items[i], msg, sizeof(msg));

		if (rc == KIND_NOOP) {
			n_noop++;
		} else if (rc != KIND_LOG) {
			for (size_t j = 0; j <= i; j++)
				unprepare(g->items[j]);
			group_end(s, g, rc, msg, i);
			return;
		}
	}
	g->n_finished = n_noop;
	if (n_noop == g->n) {
		group_end(s, g, 0, NULL, SIZE_MAX);
		return;
	}
	/* Joined without a kick in between, so one log job takes all. */
	for (size_t i = 0; i < g->n; i++)
		if (g->items[i]->payload)
			join_batch(s, g->items[i]);
	wal_kick(s);
}

/* The message of a lock wait that ended with status, waiting for what. */
static int lock_message(struct store *s, const struct lock_set *set, int status,
			const char *what, char *msg, size_t n)
{
	const void *holder;

	if (status != -ETIMEDOUT) {
		snprintf(msg, n, "the daemon is shutting down");
		return RPC_UNAVAILABLE;
	}
	holder = locks_leaseholder(&s->locks, set->slots[set->taken]);
	snprintf(msg, n, "timed out after %llu ms waiting for %s%s",
		 (unsigned long long)set->timeout_ms, what,
		 !holder		? " (another write holds it)"
		 : holder == set->owner ? ", leased by this connection (leases "
					  "are not re-entrant)"
					: ", leased by another connection");
	return RPC_CONCURRENCY;
}

/* What a write locks, for messages: its kind's name of the slot, or the
 * kind and the key. */
static void lock_name(const struct store_write *w, char *buf, size_t n)
{
	struct store_kind *k = w->kind;

	if (w->lk.key)
		snprintf(buf, n, "%s %.*s", k->kind->name,
			 (int)(w->lk.key_len > 64 ? 64 : w->lk.key_len),
			 w->lk.key);
	else if (k->kind->slot_name)
		k->kind->slot_name(k, w->lk.slot, buf, n);
	else
		snprintf(buf, n, "a %s", k->kind->name);
}

int store_lock_error(struct store *s, const struct lock_set *set, int status,
		     char *msg, size_t n)
{
	size_t slot = set->slots[set->taken];
	char what[96];

	snprintf(what, sizeof(what), "a record");
	for (size_t i = 0; i < s->n_kinds; i++) {
		struct store_kind *k = s->kinds[i];

		if (slot >= k->lock_base &&
		    slot - k->lock_base < k->n_lock_slots && k->kind->slot_name)
			k->kind->slot_name(k, slot - k->lock_base, what,
					   sizeof(what));
	}
	return lock_message(s, set, status, what, msg, n);
}

static void write_locked_cb(struct lock_set *set, int status)
{
	struct store_write *w =
		(struct store_write *)((char *)set -
				       offsetof(struct store_write, lock));
	char msg[256], what[96];
	int code;

	if (status == 0) {
		start(w->store, w);
		return;
	}
	lock_name(w, what, sizeof(what));
	code = lock_message(w->store, set, status, what, msg, sizeof(msg));
	w->done(w, code, msg);
}

static void group_locked_cb(struct lock_set *set, int status)
{
	struct store_group *g =
		(struct store_group *)((char *)set -
				       offsetof(struct store_group, lock));
	char msg[256], what[96] = "a record";
	int code;
	size_t failed = 0;

	if (status == 0) {
		group_start(g->store, g);
		return;
	}
	/* The item whose lock it waited for. */
	for (size_t i = 0; i < g->n; i++)
		if (g->items[i]->has_lock &&
		    g->items[i]->lock_slot == set->slots[set->taken]) {
			failed = i;
			lock_name(g->items[i], what, sizeof(what));
		}
	code = lock_message(g->store, set, status, what, msg, sizeof(msg));
	group_end(g->store, g, code, msg, failed);
}

/*
 * Ask the write's kind what it locks and find that lock's slot: one of
 * the kind's own, or a key's among the shared ones. 0, or -EINVAL for a
 * slot the kind does not have.
 */
static int lock_of(struct store *s, struct store_write *w)
{
	struct store_kind *k = w->kind;

	w->has_lock = k->kind->lock(k, w, &w->lk) == 1;
	if (!w->has_lock)
		return 0;
	if (w->lk.key) {
		uint64_t h = fnv1a64(w->lk.key, w->lk.key_len) ^
			     ((uint64_t)k->kind->log_tag << 56);

		w->lock_slot = s->key_base + (size_t)(h % STORE_KEY_SLOTS);
		return 0;
	}
	if (w->lk.slot >= k->n_lock_slots)
		return -EINVAL;
	w->lock_slot = k->lock_base + w->lk.slot;
	return 0;
}

static void prepare_write(struct store *s, struct store_write *w)
{
	w->store = s;
	w->next = NULL;
	w->payload = NULL;
	w->payload_len = 0;
	w->has_lock = false;
}

void store_submit(struct store *s, struct store_write *w)
{
	prepare_write(s, w);
	w->group = NULL;
	if (s->closed) {
		w->done(w, RPC_UNAVAILABLE, "the daemon is shutting down");
		return;
	}
	if (lock_of(s, w) < 0) {
		w->done(w, RPC_INTERNAL_ERROR, "a write names no valid lock");
		return;
	}
	w->lock.slots = &w->lock_slot;
	w->lock.n = w->has_lock ? 1 : 0;
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
	size_t m = 0;

	g->store = s;
	g->n_finished = 0;
	g->code = 0;
	if (s->closed) {
		g->done(g, RPC_UNAVAILABLE, "the daemon is shutting down",
			SIZE_MAX);
		return;
	}
	g->slots = malloc((g->n ? g->n : 1) * sizeof(*g->slots));
	if (!g->slots) {
		g->done(g, RPC_INTERNAL_ERROR, "out of memory", SIZE_MAX);
		return;
	}
	for (size_t i = 0; i < g->n; i++) {
		struct store_write *w = g->items[i];

		prepare_write(s, w);
		w->group = g;
		if (lock_of(s, w) < 0) {
			free(g->slots);
			g->slots = NULL;
			g->done(g, RPC_INTERNAL_ERROR,
				"a write names no valid lock", i);
			return;
		}
		if (w->has_lock)
			g->slots[m++] = w->lock_slot;
	}
	g->lock.slots = g->slots;
	g->lock.n = locks_sort(g->slots, m);
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
	return !(s->wal_jobs || s->writer_busy || s->filling_n ||
		 store_unwritten(s) || s->wal_end || s->ckpt || s->reloading ||
		 s->probing);
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
	w->need_seq = store_unwritten(s) ? s->writer_seq + 1
		      : s->writer_busy	 ? s->writer_seq
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
	if (s->writer_busy)
		return false;
	for (size_t i = 0; i < s->n_kinds; i++)
		if (s->kinds[i]->kind->committed &&
		    s->kinds[i]->kind->pending(s->kinds[i]) > 0)
			return false;
	return true;
}

void store_write_files_now(struct store *s)
{
	writer_kick(s, 0);
}

void store_set_log_hook(struct store *s, store_log_hook_fn fn, void *ctx)
{
	s->log_hook = fn;
	s->log_hook_ctx = ctx;
}

bool store_jobs_running(const struct store *s)
{
	return s->wal_jobs || s->writer_busy || s->reload_running || s->probing;
}

bool store_failing(const struct store *s)
{
	return s->wal_failing || s->writer_retry_ms > 0;
}

/* Log replay: the payload's first byte names its kind. */
static int replay_cb(void *ctx, const char *payload, size_t len, char *errmsg,
		     size_t errn)
{
	struct store *s = ctx;

	for (size_t i = 0; len > 0 && i < s->n_kinds; i++) {
		struct store_kind *k = s->kinds[i];

		if ((unsigned char)payload[0] == k->kind->log_tag)
			return k->kind->replay(k, payload, len, errmsg, errn);
	}
	if (len == 0)
		errmsg_set(errmsg, errn, "an empty record");
	else
		errmsg_set(errmsg, errn,
			   "a record of a kind this vmemd does not know "
			   "(first byte 0x%02x; written by a newer vmemd?): "
			   "refusing to start rather than drop it",
			   (unsigned char)payload[0]);
	return -EPROTO;
}

/* Start-up progress (progress.h): the log's replay. */
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

/* ---- reload ---- */

/* One kind's share of a rescan. */
struct rescan_part {
	struct store_kind *k;
	void *job; /* the kind's (kind.h) */
	int rc;
	struct vmdir_load_report rep;
};

/* Handed over whole: the kinds' snapshots, and what they found. */
struct rescan_job {
	uv_work_t req;
	struct store *s; /* only its kinds' read-only parts in the worker */
	bool probe;	 /* only look: reload if anything changed */
	struct rescan_part parts[STORE_MAX_KINDS];
	size_t n;
	int rc;
	const char *failed; /* the name of the kind that failed first */
	char errmsg[256];
	struct vmdir_load_report rep; /* every part's, for the caller */
};

/* Blocking: every kind looks at its files. */
static void rescan_work_cb(uv_work_t *req)
{
	struct rescan_job *j = req->data;
	char msg[sizeof(j->errmsg)];

	for (size_t i = 0; i < j->n; i++) {
		struct rescan_part *p = &j->parts[i];

		p->rc = p->k->kind->rescan(p->k, p->job, &p->rep, msg,
					   sizeof(msg));
		if (p->rc < 0 && j->rc == 0) {
			j->rc = p->rc;
			j->failed = p->k->kind->name;
			memcpy(j->errmsg, msg, sizeof(msg));
		}
	}
}

/* Hand every part back to its kind (rc: the part's, or the job's when
 * it never ran), which frees its job; the result of a probe: did any
 * kind see a change? */
static bool rescan_parts_end(struct rescan_job *j, int status)
{
	bool changed = false;

	for (size_t i = 0; i < j->n; i++) {
		struct rescan_part *p = &j->parts[i];

		if (p->k->kind->rescan_end(p->k, p->job,
					   status < 0 ? status : p->rc,
					   j->probe, &p->rep) > 0)
			changed = true;
		p->job = NULL;
	}
	return changed;
}

static void rescan_job_free(struct rescan_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		vmdir_load_report_done(&j->parts[i].rep);
	vmdir_load_report_done(&j->rep);
	free(j);
}

static void reload_join(struct store *s, struct store_reload_wait *list);

/* Every kind that can rescan takes its snapshot; NULL when one cannot
 * (nothing is then left taken). */
static struct rescan_job *rescan_job_new(struct store *s, enum rescan_mode mode)
{
	struct rescan_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->s = s;
	j->req.data = j;
	j->probe = mode != RESCAN_RELOAD;
	for (size_t i = 0; i < s->n_kinds; i++) {
		struct store_kind *k = s->kinds[i];
		struct rescan_part *p = &j->parts[j->n];

		if (!k->kind->rescan_begin)
			continue;
		p->k = k;
		if (k->kind->rescan_begin(k, mode, &p->job) < 0) {
			rescan_parts_end(j, -ECANCELED);
			rescan_job_free(j);
			return NULL;
		}
		j->n++;
	}
	return j;
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
			size_t last = g->n - 1;

			while (!g->items[last]->payload)
				last--; /* one joined: w */
			held = g->items[last]->next;
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

static void probe_done(struct store *s, struct rescan_job *j, int status);

static void reload_after_cb(uv_work_t *req, int status)
{
	struct rescan_job *j = req->data;
	struct store *s = j->s;
	int rc = status < 0 ? status : j->rc;

	s->reload_running = false;
	for (size_t i = 0; i < j->n; i++)
		if (vmdir_load_report_merge(&j->rep, &j->parts[i].rep) < 0)
			log_warn("out of memory: a reload's quarantined "
				 "files are only in this log");
	if (rc == 0 && s->on_report)
		s->on_report(s->on_report_ctx, &j->rep);
	if (j->probe) {
		probe_done(s, j, status);
		return;
	}
	rescan_parts_end(j, status);
	writer_kick(s, 0); /* what a kind made pending meanwhile */
	/* -EAGAIN: git took the tree before the reload could quarantine
	 * (vmdir.h, VMDIR_RELOAD); no failure of ours, tried again. */
	if (rc < 0 && rc != -EAGAIN) {
		if (status < 0)
			snprintf(j->errmsg, sizeof(j->errmsg),
				 "the reload was cancelled");
		set_error(s, "reloading the %s files: %s",
			  j->failed ? j->failed : "record", j->errmsg);
	}
	reload_finish(s, rc, j->errmsg, &j->rep);
	rescan_job_free(j);
	check_idle(s);
}

static void probe_reload_done(struct store *s, void *arg, int rc,
			      const char *errmsg,
			      const struct vmdir_load_report *rep)
{
	(void)arg;
	if (rc == -EAGAIN) /* git has the tree: look again once it is done */
		s->probe_after_yield = true;
	else if (rc < 0)
		log_err("reloading after a change in the repository: %s",
			errmsg);
	else
		log_info("reloaded the files after a change in the "
			 "repository (%zu quarantined)",
			 rep ? rep->n_quarantined : 0);
}

/* A probe saw the files: reload if any kind says they differ from what
 * it knows. */
static void probe_done(struct store *s, struct rescan_job *j, int status)
{
	bool changed;

	s->probing = false;
	changed = rescan_parts_end(j, status);
	writer_kick(s, 0); /* what a kind made pending meanwhile */
	if (status < 0 || j->rc < 0)
		set_error(s, "checking the %s files: %s",
			  j->failed ? j->failed : "record",
			  status < 0 ? "the check was cancelled" : j->errmsg);
	rescan_job_free(j);
	if (changed && yielded(s))
		s->probe_after_yield = true; /* see store_resume */
	else if (changed)
		store_reload(s, probe_reload_done, NULL);
	check_idle(s);
}

/* Start a wanted probe between two passes of the writer. It does not
 * wait for the writer to catch up: with agents writing all the time it
 * never would, and the probe would starve (a conflict resolved in git
 * stayed listed for good). What is pending is ours, not a change: each
 * kind's verdict leaves the items it has pending aside. */
static void probe_step(struct store *s)
{
	struct rescan_job *j;

	if (!s->probe_wanted || s->probing || s->reloading || s->closed ||
	    s->writer_busy)
		return;
	j = rescan_job_new(s, s->probe_all ? RESCAN_PROBE : RESCAN_PROBE_MOVED);
	if (!j)
		return; /* tried again at the next idle check */
	if (uv_queue_work(s->loop, &j->req, rescan_work_cb, reload_after_cb) <
	    0) {
		rescan_parts_end(j, -ECANCELED);
		rescan_job_free(j);
		return;
	}
	s->probe_wanted = false;
	s->probe_all = false;
	s->probing = true;
}

void store_check_files(struct store *s)
{
	s->probe_all = true;
	store_check_moved(s);
}

void store_check_moved(struct store *s)
{
	s->probe_wanted = true;
	writer_kick(s, 0);
	probe_step(s);
}

/* Move a reload on: files written, log checkpointed, then the rescan. */
static void reload_step(struct store *s)
{
	struct rescan_job *j;

	if (!s->reloading || s->reload_running || s->closed)
		return;
	if (yielded(s)) {
		/* Git took the tree before the files could be written. */
		reload_finish(s, -EAGAIN, yielded(s), NULL);
		return;
	}
	if (s->wal_jobs || s->writer_busy || store_unwritten(s)) {
		writer_kick(s, 0);
		return;
	}
	if (s->wal_end > 0 || s->ckpt) {
		checkpoint_start(s);
		return;
	}
	if (s->probing)
		return; /* its after-callback moves us on */
	j = rescan_job_new(s, RESCAN_RELOAD);
	if (!j) {
		reload_finish(s, -ENOMEM, "out of memory", NULL);
		return;
	}
	if (uv_queue_work(s->loop, &j->req, rescan_work_cb, reload_after_cb) <
	    0) {
		rescan_parts_end(j, -ECANCELED);
		rescan_job_free(j);
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

/* ---- open, close ---- */

/* Start-up: every kind materialises what the replay gave it, durably.
 * *left: a kind left files to git's operation (KIND_LEFT), so the log
 * must keep them. */
static int materialise_replay(struct store *s, bool *left, char *errmsg,
			      size_t errn)
{
	*left = false;
	for (size_t i = 0; i < s->n_kinds; i++) {
		struct store_kind *k = s->kinds[i];
		void *snap;
		int rc;

		if (k->kind->pending(k) == 0)
			continue;
		rc = k->kind->snapshot(k, &snap);
		if (rc < 0) {
			errmsg_set(errmsg, errn, "out of memory");
			return rc;
		}
		rc = k->kind->write(k, snap, true, errmsg, errn);
		k->kind->written(k, snap, rc);
		if (rc < 0)
			return rc;
		*left |= rc == KIND_LEFT;
	}
	return 0;
}

/* Register the kinds: their lock slots one after the other, then the
 * shared key slots; log tags must differ. */
static int add_kinds(struct store *s, struct store_kind *const *kinds, size_t n,
		     size_t *n_slots, char *errmsg, size_t errn)
{
	size_t slots = 0;

	if (n > STORE_MAX_KINDS) {
		errmsg_set(errmsg, errn, "too many record kinds (%zu)", n);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < i; j++)
			if (kinds[j]->kind->log_tag ==
			    kinds[i]->kind->log_tag) {
				errmsg_set(errmsg, errn,
					   "kinds %s and %s share a log tag",
					   kinds[j]->kind->name,
					   kinds[i]->kind->name);
				return -EINVAL;
			}
		kinds[i]->store = s;
		kinds[i]->lock_base = slots;
		slots += kinds[i]->n_lock_slots;
		s->kinds[s->n_kinds++] = kinds[i];
	}
	s->key_base = slots;
	*n_slots = slots + STORE_KEY_SLOTS;
	return 0;
}

int store_open(struct store *s, uv_loop_t *loop, const struct statedir *dir,
	       struct store_kind *const *kinds, size_t n_kinds,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn)
{
	const struct wal_replay replay = {
		.record = replay_cb,
		.progress = replay_progress_cb,
		.ctx = s,
	};
	struct wal_report wrep = {0};
	size_t n_slots = 0;
	bool left;
	int rc;

	memset(s, 0, sizeof(*s));
	memset(rep, 0, sizeof(*rep));
	s->loop = loop;
	wal_init(&s->wal);
	/* First, so that store_close can always close them. */
	uv_timer_init(loop, &s->writer_timer);
	s->writer_timer.data = s;
	uv_timer_init(loop, &s->ckpt_timer);
	s->ckpt_timer.data = s;
	rc = add_kinds(s, kinds, n_kinds, &n_slots, errmsg, errn);
	if (rc < 0)
		return rc;
	rc = locks_init(&s->locks, loop, n_slots);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	rc = lane_init(&s->wal_lane, loop);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "cannot start the log thread: %s",
			   uv_strerror(rc));
		return rc;
	}

	/* The log first: its writes are newer than any file, and a file it
	 * covers may be incomplete after a crash (vmdir.h), so they are
	 * materialised before the files are loaded and judged. */
	rc = wal_open(&s->wal, dir, STORE_WAL_NAME, &replay, &wrep, errmsg,
		      errn);
	if (rc < 0)
		return rc;
	if (wrep.torn_bytes)
		set_error(s,
			  "cut a torn tail of %llu bytes off the write-ahead "
			  "log",
			  (unsigned long long)wrep.torn_bytes);
	rc = materialise_replay(s, &left, errmsg, errn);
	if (rc < 0)
		return rc;
	if (left) {
		/* Git has the tree: the log keeps the writes whose files
		 * wait, and the writer makes them once git is done. */
		s->wal_end = s->wal.end;
	} else if (wrep.records > 0 || wrep.torn_bytes > 0) {
		rc = wal_truncate(&s->wal);
		if (rc < 0) {
			errmsg_set(errmsg, errn,
				   "cannot truncate the write-ahead log: %s",
				   strerror(-rc));
			return rc;
		}
	}
	for (size_t i = 0; i < s->n_kinds; i++) {
		struct store_kind *k = s->kinds[i];
		struct vmdir_load_report part = {0};

		rc = k->kind->load(k, &part, errmsg, errn);
		if (vmdir_load_report_merge(rep, &part) < 0 && rc == 0) {
			errmsg_set(errmsg, errn, "out of memory");
			rc = -ENOMEM;
		}
		vmdir_load_report_done(&part);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void store_resume(struct store *s)
{
	if (s->probe_after_yield) {
		s->probe_after_yield = false;
		s->probe_wanted = true;
		s->probe_all = true;
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
	free(s->wal_iov);
	s->wal_iov = NULL;
	s->wal_iov_cap = 0;
	uv_close((uv_handle_t *)&s->writer_timer, NULL);
	uv_close((uv_handle_t *)&s->ckpt_timer, NULL);
	wal_close(&s->wal);
}

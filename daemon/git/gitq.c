/*
 * Commit batching. Invariants: a slot is pending from the write's apply
 * until a commit job that snapshotted it succeeds (a deferred or failed
 * job puts its slots back); one job runs at a time; a git.sync is answered
 * by the first job that started after it was called, so that job's
 * snapshot holds every write acknowledged before the call.
 */
#include "gitq.h"

#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "protocol/errors.h"

#define RETRY_FIRST_MS 250
#define RETRY_MAX_MS   5000
#define FILES_WAIT_MS  5

struct gitq_item {
	struct coord coord;
	char *json; /* compact record, NULL for a deletion */
	size_t json_len;
	char *file; /* filled by the worker */
	size_t file_len;
	char *agent;
	bool changed; /* it differed from HEAD and was committed */
};

struct gitq_job {
	uv_work_t req;
	struct gitq *q;
	struct gitq_item *items;
	size_t n;
	char *message;
	struct gitc_ident ident; /* the job's own copy */
	uint64_t seq;
	uint64_t started_ms;
	int rc;
	struct gitc_result res;
	char errmsg[256];
};

static void kick(struct gitq *q, unsigned delay_ms);
static void timer_cb(uv_timer_t *t);

int gitq_init(struct gitq *q, uv_loop_t *loop, struct store *store,
	      const struct index *index, const char *workdir,
	      const struct statedir *state, unsigned delay_ms,
	      unsigned max_batch, char *errmsg, size_t errn)
{
	int rc;

	memset(q, 0, sizeof(*q));
	q->loop = loop;
	q->store = store;
	q->index = index;
	q->delay_ms = delay_ms;
	q->max_batch = max_batch ? max_batch : 1;
	q->pending = calloc(index->n_slots, 1);
	q->committing = calloc(index->n_slots, 1);
	q->pending_list = calloc(index->n_slots, sizeof(*q->pending_list));
	uv_timer_init(loop, &q->timer);
	q->timer.data = q;
	if (!q->pending || !q->committing || !q->pending_list) {
		snprintf(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	rc = gitc_open(&q->gitc, workdir, state, errmsg, errn);
	if (rc < 0)
		return rc;
	{
		char removed[3 * PATH_MAX];

		if (gitc_clear_stale_locks(q->gitc, removed, sizeof(removed)) >
		    0)
			log_notice("removed the git lock files a commit of our "
				   "previous run left when it was killed: %s",
				   removed);
	}
	return 0;
}

static void set_pending(struct gitq *q, size_t slot)
{
	if (!q->pending[slot]) {
		q->pending[slot] = 1;
		q->pending_list[q->n_pending++] = slot;
	}
}

void gitq_mark(struct gitq *q, size_t slot)
{
	if (q->closed)
		return;
	set_pending(q, slot);
	kick(q, q->n_pending >= q->max_batch ? 0 : q->delay_ms);
}

bool gitq_uncommitted(const struct gitq *q, size_t slot)
{
	return q->pending[slot] || q->committing[slot];
}

void gitq_set_timing(struct gitq *q, unsigned delay_ms, unsigned max_batch)
{
	q->delay_ms = delay_ms;
	q->max_batch = max_batch ? max_batch : 1;
	/* A timer set for a longer delay is brought forward; a shorter one
	 * stands (kick only ever brings a job forward). */
	kick(q, q->n_pending >= q->max_batch ? 0 : q->delay_ms);
}

void gitq_set_ident(struct gitq *q, const char *name, const char *email)
{
	if (!name || !email || !*name || !*email) {
		memset(&q->ident, 0, sizeof(q->ident));
		return;
	}
	snprintf(q->ident.name, sizeof(q->ident.name), "%s", name);
	snprintf(q->ident.email, sizeof(q->ident.email), "%s", email);
}

void gitq_commit_soon(struct gitq *q)
{
	kick(q, 0);
}

size_t gitq_pending(const struct gitq *q)
{
	return q->n_pending + q->in_flight;
}

static void items_free(struct gitq_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(items[i].json);
		free(items[i].file);
		free(items[i].agent);
	}
	free(items);
}

/* Blocking: file bytes and agent of each item, then the commit. */
static void job_work_cb(uv_work_t *req)
{
	struct gitq_job *j = req->data;
	struct gitc_change *ch = calloc(j->n ? j->n : 1, sizeof(*ch));

	if (!ch) {
		j->rc = -ENOMEM;
		snprintf(j->errmsg, sizeof(j->errmsg), "out of memory");
		return;
	}
	for (size_t i = 0; i < j->n; i++) {
		struct gitq_item *it = &j->items[i];

		ch[i].coord = it->coord;
		if (!it->json)
			continue;
		json_t *doc = json_loadb(it->json, it->json_len, 0, NULL);
		const char *agent =
			json_string_value(json_object_get(doc, "agent_id"));

		it->agent = agent ? strdup(agent) : NULL;
		json_decref(doc);
		it->file = decision_file_from_compact(it->json, it->json_len,
						      &it->file_len);
		if (!it->file) {
			j->rc = -ENOMEM;
			snprintf(j->errmsg, sizeof(j->errmsg), "out of memory");
			free(ch);
			return;
		}
		ch[i].text = it->file;
		ch[i].len = it->file_len;
		ch[i].agent_id = it->agent;
	}
	j->rc = gitc_commit_as(j->q->gitc, &j->ident, ch, j->n, j->message,
			       &j->res, j->errmsg, sizeof(j->errmsg));
	for (size_t i = 0; i < j->n; i++)
		j->items[i].changed = ch[i].changed;
	free(ch);
}

/* Answer the syncs the finished job covers. */
static void answer_syncs(struct gitq *q, uint64_t seq, int code,
			 const char *msg, const struct gitq_batch *b)
{
	struct gitq_sync **p = &q->waiters;

	while (*p) {
		struct gitq_sync *w = *p;

		if (w->need_seq > seq) {
			p = &w->next;
			continue;
		}
		*p = w->next;
		w->next = NULL;
		w->done(w, code, msg, b);
	}
}

static void batch_of(const struct gitq_job *j, struct gitq_batch *b,
		     struct coord *coords)
{
	memset(b, 0, sizeof(*b));
	memcpy(b->commit, j->res.commit, sizeof(b->commit));
	b->committed_at = j->res.committed_at;
	b->coords = coords;
	for (size_t i = 0; i < j->n; i++) {
		const struct coord *c = &j->items[i].coord;

		if (!j->res.commit[0] || !j->items[i].changed)
			continue;
		coords[b->n++] = *c;
		if (b->n == 1) {
			b->min = b->max = *c;
			continue;
		}
		b->min.x = c->x < b->min.x ? c->x : b->min.x;
		b->min.y = c->y < b->min.y ? c->y : b->min.y;
		b->min.z = c->z < b->min.z ? c->z : b->min.z;
		b->max.x = c->x > b->max.x ? c->x : b->max.x;
		b->max.y = c->y > b->max.y ? c->y : b->max.y;
		b->max.z = c->z > b->max.z ? c->z : b->max.z;
	}
}

static void job_after_cb(uv_work_t *req, int status)
{
	struct gitq_job *j = req->data;
	struct gitq *q = j->q;
	int rc = status < 0 ? status : j->rc;
	gitq_idle_fn idle = NULL;

	q->busy = false;
	q->in_flight = 0;
	for (size_t i = 0; i < j->n; i++)
		q->committing[index_slot(q->index, &j->items[i].coord)] = 0;
	if (rc != 0) {
		char msg[400];

		/* The batch stays pending; try again later. */
		for (size_t i = 0; i < j->n; i++)
			set_pending(q,
				    index_slot(q->index, &j->items[i].coord));
		if (rc == 1) {
			bool changed = strcmp(q->deferred, j->res.deferred);

			if (changed)
				log_notice("commit deferred: %s",
					   j->res.deferred);
			snprintf(q->deferred, sizeof(q->deferred), "%s",
				 j->res.deferred);
			if (changed && q->deferral)
				q->deferral(q->deferral_ctx, q->deferred);
			snprintf(msg, sizeof(msg), "commit deferred: %s",
				 j->res.deferred);
		} else {
			snprintf(q->last_error, sizeof(q->last_error),
				 "git commit: %s", j->errmsg);
			log_err("%s", q->last_error);
			snprintf(msg, sizeof(msg), "%s", q->last_error);
		}
		q->retry_ms = q->retry_ms ? q->retry_ms * 2 : RETRY_FIRST_MS;
		if (q->retry_ms > RETRY_MAX_MS)
			q->retry_ms = RETRY_MAX_MS;
		answer_syncs(q, j->seq, RPC_STORAGE, msg, NULL);
		if (q->message == NULL)
			q->message = j->message; /* keep a sync's message */
		else
			free(j->message);
		j->message = NULL;
		idle = q->idle_cb;
		kick(q, q->retry_ms);
	} else {
		struct coord *coords = calloc(j->n ? j->n : 1, sizeof(*coords));
		struct gitq_batch b;

		q->retry_ms = 0;
		if (q->deferred[0] && q->deferral)
			q->deferral(q->deferral_ctx, "");
		q->deferred[0] = '\0';
		if (j->res.commit[0]) {
			memcpy(q->last_commit, j->res.commit,
			       sizeof(q->last_commit));
			q->last_commit_at = j->res.committed_at;
			log_info("committed %.12s (%zu pending decisions "
				 "compared) in %llu ms",
				 j->res.commit, j->n,
				 (unsigned long long)(uv_now(q->loop) -
						      j->started_ms));
			if (q->committed)
				q->committed(q->committed_ctx);
		}
		if (j->errmsg[0])
			log_warn("after commit %.12s: %s", j->res.commit,
				 j->errmsg);
		if (coords) {
			batch_of(j, &b, coords);
			answer_syncs(q, j->seq, 0, NULL, &b);
		} else {
			answer_syncs(q, j->seq, RPC_INTERNAL_ERROR,
				     "out of memory", NULL);
		}
		free(coords);
		if (q->n_pending == 0)
			idle = q->idle_cb;
		kick(q, q->waiters || q->idle_cb ? 0 : q->delay_ms);
	}
	items_free(j->items, j->n);
	free(j->message);
	free(j);
	if (idle && q->idle_cb) {
		q->idle_cb = NULL;
		idle(q->idle_arg);
	}
}

/* Commits must wait (the defer hook said why): syncs are told, a stop is
 * not held up, and the queue looks again with back-off. */
static void defer_now(struct gitq *q, const char *why)
{
	gitq_idle_fn idle = q->idle_cb;
	char msg[400];

	if (strcmp(q->hook_deferred, why) != 0) {
		log_notice("commit deferred: %s", why);
		if (q->deferral)
			q->deferral(q->deferral_ctx, why);
	}
	snprintf(q->hook_deferred, sizeof(q->hook_deferred), "%s", why);
	snprintf(msg, sizeof(msg), "commit deferred: %s", why);
	answer_syncs(q, UINT64_MAX, RPC_STORAGE, msg, NULL);
	q->retry_ms = q->retry_ms ? q->retry_ms * 2 : RETRY_FIRST_MS;
	if (q->retry_ms > RETRY_MAX_MS)
		q->retry_ms = RETRY_MAX_MS;
	kick(q, q->retry_ms);
	if (idle) {
		q->idle_cb = NULL;
		idle(q->idle_arg);
	}
}

static void job_start(struct gitq *q)
{
	struct gitq_job *j;
	char why[sizeof(q->deferred)];

	if (q->busy || q->closed || q->n_pending == 0)
		return;
	if (q->defer && q->defer(q->defer_ctx, why, sizeof(why))) {
		defer_now(q, why);
		return;
	}
	if (q->hook_deferred[0] && !q->deferred[0] && q->deferral)
		q->deferral(q->deferral_ctx, "");
	q->hook_deferred[0] = '\0';
	/* Commit what the files hold, so the working tree matches HEAD
	 * (git status stays clean) once the commit is made. */
	if (!store_files_written(q->store)) {
		/* Files that cannot be written now are no reason to keep a
		 * git.sync waiting: it is told, and the commit retried. */
		if (store_failing(q->store)) {
			char msg[600];

			snprintf(msg, sizeof(msg),
				 "the decision files cannot be written: %s",
				 q->store->last_error);
			answer_syncs(q, UINT64_MAX, RPC_STORAGE, msg, NULL);
			uv_timer_start(&q->timer, timer_cb, RETRY_MAX_MS, 0);
			return;
		}
		store_write_files_now(q->store);
		uv_timer_start(&q->timer, timer_cb, FILES_WAIT_MS, 0);
		return;
	}
	j = calloc(1, sizeof(*j));
	if (j)
		j->items = calloc(q->n_pending, sizeof(*j->items));
	if (!j || !j->items)
		goto fail;
	for (size_t i = 0; i < q->n_pending; i++) {
		size_t slot = q->pending_list[i];
		const struct record *r = q->index->slots[slot];

		j->items[i].coord = index_coord(q->index, slot);
		if (r) {
			j->items[i].json = strdup(r->json);
			j->items[i].json_len = r->json_len;
			if (!j->items[i].json) {
				j->n = i;
				goto fail;
			}
		}
	}
	j->n = q->n_pending;
	for (size_t i = 0; i < q->n_pending; i++) {
		q->pending[q->pending_list[i]] = 0;
		q->committing[q->pending_list[i]] = 1;
	}
	q->n_pending = 0;
	j->q = q;
	j->req.data = j;
	j->message = q->message;
	q->message = NULL;
	j->ident = q->ident;
	j->seq = ++q->seq;
	j->started_ms = uv_now(q->loop);
	if (uv_queue_work(q->loop, &j->req, job_work_cb, job_after_cb) < 0) {
		for (size_t i = 0; i < j->n; i++)
			set_pending(q,
				    index_slot(q->index, &j->items[i].coord));
		q->message = j->message;
		j->message = NULL;
		goto fail;
	}
	q->busy = true;
	q->in_flight = j->n;
	return;
fail:
	if (j)
		items_free(j->items, j->n);
	free(j);
	kick(q, RETRY_MAX_MS);
}

static void timer_cb(uv_timer_t *t)
{
	job_start(t->data);
}

/* Start a job after delay_ms (sooner if already due sooner). */
static void kick(struct gitq *q, unsigned delay_ms)
{
	uint64_t due;

	if (q->closed || q->busy || q->n_pending == 0)
		return;
	if (uv_is_active((uv_handle_t *)&q->timer)) {
		due = uv_timer_get_due_in(&q->timer);
		if (due <= delay_ms)
			return;
	}
	uv_timer_start(&q->timer, timer_cb, delay_ms, 0);
}

void gitq_sync(struct gitq *q, struct gitq_sync *w, const char *message)
{
	struct gitq_batch empty = {0};

	if (q->closed) {
		w->done(w, RPC_UNAVAILABLE, "the daemon is shutting down",
			NULL);
		return;
	}
	if (q->n_pending == 0 && !q->busy) {
		w->done(w, 0, NULL, &empty);
		return;
	}
	/* The running job holds what was written before it started; what
	 * is pending now goes into the next one. */
	w->need_seq = q->n_pending ? q->seq + 1 : q->seq;
	w->next = q->waiters;
	q->waiters = w;
	if (message && !q->message)
		q->message = strdup(message);
	kick(q, 0);
}

void gitq_flush(struct gitq *q, gitq_idle_fn cb, void *arg)
{
	if (q->closed || (q->n_pending == 0 && !q->busy)) {
		cb(arg);
		return;
	}
	q->idle_cb = cb;
	q->idle_arg = arg;
	q->retry_ms = 0;
	kick(q, 0);
}

void gitq_close(struct gitq *q)
{
	if (q->closed)
		return;
	q->closed = true;
	answer_syncs(q, UINT64_MAX, RPC_UNAVAILABLE,
		     "the daemon is shutting down", NULL);
	uv_close((uv_handle_t *)&q->timer, NULL);
	gitc_free(q->gitc);
	free(q->pending);
	free(q->committing);
	free(q->pending_list);
	free(q->message);
}

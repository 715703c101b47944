/*
 * Commit batching. Invariants: a path is pending from its mark until a
 * commit job that took it succeeds (a deferred or failed job puts its
 * paths back); one job runs at a time (the start-up scan counts as one);
 * a job takes only paths whose file the file writer has written since the
 * mark (the pass after the mark has finished), so it commits the newest
 * bytes and never loses a write to a file not written yet, and commits go
 * on while writers keep the file writer busy; a git.sync is answered by
 * the first job that started after it was called, and that job waits for
 * the file writer's pass that holds every write acknowledged before the
 * call.
 */
#include "gitq.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "protocol/errors.h"
#include "protocol/experience.h"
#include "protocol/fnv.h"
#include "vmdir.h"

#define RETRY_FIRST_MS	  250
#define RETRY_MAX_MS	  5000
#define RETRY_LOCK_MAX_MS 1000
#define FILES_WAIT_MS	  1
#define TABLE_MIN	  64

#define P_PENDING    1
#define P_COMMITTING 2

/* A path not committed yet. */
struct gitq_path {
	uint64_t hash;
	uint64_t need_pass; /* the file writer's pass that writes its file */
	uint8_t flags;
	char path[];
};

/* A free slot of the table after a removal (probes go past it). */
static struct gitq_path tombstone;

struct gitq_item {
	/* Its entry in the table (not copied: a first commit takes every
	 * path), kept there while the job holds it (P_COMMITTING) and until
	 * the job is done with it (forget_settled). The worker reads only
	 * its path, which never changes. */
	struct gitq_path *e;
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
	char errmsg[320];
};

/* The start-up scan: the paths git reports, handed back whole. */
struct gitq_scan {
	uv_work_t req;
	struct gitq *q;
	char **paths;
	size_t n, cap;
	bool fallback; /* the scan failed: paths are HEAD's decisions */
	int cancel_fd; /* an eventfd: written to give the scan up */
	bool cancelled;
	int rc;
	char errmsg[320];
};

static void kick(struct gitq *q, unsigned delay_ms);
static void timer_cb(uv_timer_t *t);

/* The table slot of path: its entry, or the empty slot that ends its
 * probe (*free_slot: the first tombstone or empty slot seen). */
static size_t probe(const struct gitq *q, const char *path, uint64_t h,
		    size_t *free_slot)
{
	size_t mask = q->table_cap - 1, i = h & mask;
	bool have_free = false;

	for (;; i = (i + 1) & mask) {
		struct gitq_path *e = q->table[i];

		if (!e) {
			if (free_slot)
				*free_slot = have_free ? *free_slot : i;
			return i;
		}
		if (e == &tombstone) {
			if (free_slot && !have_free) {
				*free_slot = i;
				have_free = true;
			}
			continue;
		}
		if (e->hash == h && strcmp(e->path, path) == 0)
			return i;
	}
}

static struct gitq_path *find(const struct gitq *q, const char *path)
{
	size_t i;

	if (!q->table_cap)
		return NULL;
	i = probe(q, path, fnv1a64(path, strlen(path)), NULL);
	return q->table[i];
}

static int grow(struct gitq *q)
{
	size_t cap = q->table_cap ? q->table_cap : TABLE_MIN;
	struct gitq_path **old = q->table, **t;
	size_t old_cap = q->table_cap, live = 0;

	for (size_t i = 0; i < old_cap; i++)
		live += old[i] && old[i] != &tombstone;
	while (live * 2 >= cap)
		cap *= 2;
	t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	q->table = t;
	q->table_cap = cap;
	q->table_used = live;
	for (size_t i = 0; i < old_cap; i++) {
		struct gitq_path *e = old[i];

		if (e && e != &tombstone)
			t[probe(q, e->path, e->hash, NULL)] = e;
	}
	free(old);
	return 0;
}

/* The entry of path, made if need be; NULL when out of memory. */
static struct gitq_path *get(struct gitq *q, const char *path)
{
	uint64_t h = fnv1a64(path, strlen(path));
	size_t i, slot = 0;
	struct gitq_path *e;

	if ((q->table_used + 1) * 4 >= q->table_cap * 3 && grow(q) < 0)
		return NULL;
	i = probe(q, path, h, &slot);
	if (q->table[i])
		return q->table[i];
	e = malloc(sizeof(*e) + strlen(path) + 1);
	if (!e)
		return NULL;
	e->hash = h;
	e->need_pass = 0;
	e->flags = 0;
	strcpy(e->path, path);
	if (!q->table[slot])
		q->table_used++;
	q->table[slot] = e;
	return e;
}

/* Forget an entry that is neither pending nor being committed. */
static void drop(struct gitq *q, struct gitq_path *e)
{
	size_t i = probe(q, e->path, e->hash, NULL);

	q->table[i] = &tombstone;
	free(e);
}

static void set_pending(struct gitq *q, struct gitq_path *e)
{
	if (e->flags & P_PENDING)
		return;
	if (q->n_pending == q->pending_cap) {
		size_t cap = q->pending_cap ? q->pending_cap * 2 : 64;
		struct gitq_path **l =
			realloc(q->pending_list, cap * sizeof(*l));

		if (!l) {
			log_err("out of memory: %s stays uncommitted until "
				"the next start",
				e->path);
			return;
		}
		q->pending_list = l;
		q->pending_cap = cap;
	}
	e->flags |= P_PENDING;
	q->pending_list[q->n_pending++] = e;
}

int gitq_init(struct gitq *q, uv_loop_t *loop, struct store *store,
	      const struct index *index, const char *workdir,
	      const struct statedir *state, unsigned delay_ms,
	      unsigned max_batch, char *errmsg, size_t errn)
{
	struct gitlock_stale stale;
	int rc;

	memset(q, 0, sizeof(*q));
	q->loop = loop;
	q->store = store;
	q->index = index;
	q->delay_ms = delay_ms;
	q->max_batch = max_batch ? max_batch : 1;
	uv_timer_init(loop, &q->timer);
	q->timer.data = q;
	if (grow(q) < 0) {
		snprintf(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	rc = gitc_open(&q->gitc, workdir, state, errmsg, errn);
	if (rc < 0)
		return rc;
	rc = gitc_clear_stale_locks(q->gitc, &stale);
	if (rc < 0)
		log_warn("cannot read the marker of our last commit: %s",
			 strerror(-rc));
	if (stale.owner_alive)
		log_warn("the marker of a commit in progress belongs to a "
			 "process still running: its locks are left alone");
	if (stale.n_removed)
		log_notice("removed the git lock files a commit of our "
			   "previous run left when it was killed: %s",
			   stale.removed);
	if (stale.n_kept) {
		snprintf(q->foreign_locks, sizeof(q->foreign_locks), "%s",
			 stale.kept);
		log_warn("left alone git lock files our killed commit did "
			 "not make (another git command's): %s",
			 stale.kept);
	}
	return 0;
}

/* An experience shard's path: experiences/<agent segment>/<date>[.N].jsonl
 * (protocol/experience.h). */
static bool shard_path(const char *path)
{
	static const char prefix[] = VMDIR_EXPERIENCES "/";
	char seg[EXP_SEGMENT_MAX + 1], agent[VMEM_AGENT_ID_MAX + 1];
	const char *rest, *slash;
	size_t len;

	if (strncmp(path, prefix, sizeof(prefix) - 1) != 0)
		return false;
	rest = path + sizeof(prefix) - 1;
	slash = strchr(rest, '/');
	if (!slash || (size_t)(slash - rest) > EXP_SEGMENT_MAX ||
	    strchr(slash + 1, '/'))
		return false;
	memcpy(seg, rest, (size_t)(slash - rest));
	seg[slash - rest] = '\0';
	return exp_segment_decode(seg, agent, sizeof(agent), &len) == 0 &&
	       exp_shard_name_valid(slash + 1);
}

/* Is path one the queue commits? Decisions' files, metadata.json and
 * experience shards; a kind whose files live under .vector-memory adds
 * its own here. */
static bool committable(const struct gitq *q, const char *path)
{
	struct coord c;
	const char *slash = strchr(path, '/');
	char dir[32];

	if (strcmp(path, "metadata.json") == 0 || shard_path(path))
		return true;
	if (!slash || (size_t)(slash - path) >= sizeof(dir) ||
	    strchr(slash + 1, '/'))
		return false;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return coord_from_path(dir, slash + 1, q->index->max_x, &c) == 0;
}

void gitq_mark(struct gitq *q, const char *path)
{
	struct gitq_path *e;

	if (q->closed)
		return;
	e = get(q, path);
	if (!e) {
		log_err("out of memory: %s stays uncommitted until the next "
			"start",
			path);
		return;
	}
	/* Its write reaches the file in the writer's next pass (or is there
	 * already: a reload, the start-up scan). */
	e->need_pass = q->store->writer_seq + 1;
	set_pending(q, e);
	kick(q, q->n_pending >= q->max_batch ? 0 : q->delay_ms);
}

void gitq_mark_coord(struct gitq *q, const struct coord *c)
{
	char path[64];

	if (coord_path(c, path, sizeof(path)) >= 0)
		gitq_mark(q, path);
}

bool gitq_uncommitted(const struct gitq *q, const char *path)
{
	const struct gitq_path *e = find(q, path);

	return e && e->flags;
}

bool gitq_uncommitted_coord(const struct gitq *q, const struct coord *c)
{
	char path[64];

	return coord_path(c, path, sizeof(path)) >= 0 &&
	       gitq_uncommitted(q, path);
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

/* Blocking: the commit of what the working tree holds at the paths. */
static void job_work_cb(uv_work_t *req)
{
	struct gitq_job *j = req->data;
	struct gitc_change *ch = calloc(j->n ? j->n : 1, sizeof(*ch));

	if (!ch) {
		j->rc = -ENOMEM;
		snprintf(j->errmsg, sizeof(j->errmsg), "out of memory");
		return;
	}
	for (size_t i = 0; i < j->n; i++)
		ch[i].path = j->items[i].e->path;
	j->rc = gitc_commit_as(j->q->gitc, &j->ident, ch, j->n, j->message,
			       &j->res, j->errmsg, sizeof(j->errmsg));
	for (size_t i = 0; i < j->n; i++)
		j->items[i].changed = ch[i].changed;
	free(ch);
}

/* The index a commit replaced, closed on a pool thread: the last close
 * frees its pages (tens of ms for a 100 MB index), after the syncs the
 * commit served are answered rather than before. Only when no job can
 * be queued (out of memory) is it closed here, on the loop. */
struct replaced {
	uv_work_t req;
	int fd;
};

static void replaced_work_cb(uv_work_t *req)
{
	struct replaced *r = req->data;

	close(r->fd);
}

static void replaced_after_cb(uv_work_t *req, int status)
{
	(void)status;
	free(req->data);
}

static void close_replaced(struct gitq *q, int fd)
{
	struct replaced *r;

	if (fd < 0)
		return;
	r = malloc(sizeof(*r));
	if (r) {
		r->fd = fd;
		r->req.data = r;
		if (uv_queue_work(q->loop, &r->req, replaced_work_cb,
				  replaced_after_cb) == 0)
			return;
		free(r);
	}
	close(fd);
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
		const char *path = j->items[i].e->path,
			   *slash = strchr(path, '/');
		struct coord c;
		char dir[32];

		if (!j->res.commit[0] || !j->items[i].changed || !slash ||
		    (size_t)(slash - path) >= sizeof(dir))
			continue;
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = '\0';
		if (coord_from_path(dir, slash + 1, INT_MAX, &c) < 0)
			continue;
		coords[b->n++] = c;
		if (b->n == 1) {
			b->min = b->max = c;
			continue;
		}
		b->min.x = c.x < b->min.x ? c.x : b->min.x;
		b->min.y = c.y < b->min.y ? c.y : b->min.y;
		b->min.z = c.z < b->min.z ? c.z : b->min.z;
		b->max.x = c.x > b->max.x ? c.x : b->max.x;
		b->max.y = c.y > b->max.y ? c.y : b->max.y;
		b->max.z = c.z > b->max.z ? c.z : b->max.z;
	}
}

/* The job's paths are no longer in a commit being made; put them back
 * as pending (failure). */
static void settle_items(struct gitq *q, const struct gitq_job *j, bool again)
{
	for (size_t i = 0; i < j->n; i++) {
		struct gitq_path *e = j->items[i].e;

		e->flags &= (uint8_t)~P_COMMITTING;
		if (again)
			set_pending(q, e);
	}
}

/* The job is done with its paths: forget those neither pending nor in a
 * commit (not marked again since), and the job's list. */
static void forget_settled(struct gitq *q, struct gitq_job *j)
{
	for (size_t i = 0; i < j->n; i++)
		if (!j->items[i].e->flags)
			drop(q, j->items[i].e);
	free(j->items);
	j->items = NULL;
}

/* The retry delay after a deferral or a failure, doubling up to max. */
static unsigned backoff(struct gitq *q, unsigned max)
{
	q->retry_ms = q->retry_ms ? q->retry_ms * 2 : RETRY_FIRST_MS;
	if (q->retry_ms > max)
		q->retry_ms = max;
	return q->retry_ms;
}

/* Commits stop while the index cannot be brought in line (or start
 * again, why NULL). */
static void set_stopped(struct gitq *q, const char *why)
{
	if (!why) {
		if (q->stopped[0])
			log_notice("commits resumed: the index is in line "
				   "again");
		q->stopped[0] = '\0';
		return;
	}
	if (strcmp(q->stopped, why) != 0)
		log_err("commits stopped: %s (acknowledged writes stay in "
			"the files; retrying)",
			why);
	snprintf(q->stopped, sizeof(q->stopped), "%s", why);
	snprintf(q->last_error, sizeof(q->last_error), "commits stopped: %s",
		 why);
}

static void job_after_cb(uv_work_t *req, int status)
{
	struct gitq_job *j = req->data;
	struct gitq *q = j->q;
	int rc = status < 0 ? status : j->rc;
	gitq_idle_fn idle = NULL;

	q->busy = false;
	q->in_flight = 0;
	if (rc == 0 && j->res.index_error) {
		/* Committed, but the index is behind: its paths go again,
		 * so the next job brings the index in line. */
		set_stopped(q, j->errmsg);
	} else if (rc == 0) {
		set_stopped(q, NULL);
	}
	settle_items(q, j, rc != 0 || j->res.index_error);
	if (rc != 0) {
		char msg[480];

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
		} else if (j->res.index_error) {
			set_stopped(q, j->errmsg);
			snprintf(msg, sizeof(msg), "%s", q->last_error);
		} else {
			snprintf(q->last_error, sizeof(q->last_error),
				 "git commit: %s", j->errmsg);
			log_err("%s", q->last_error);
			snprintf(msg, sizeof(msg), "%s", q->last_error);
		}
		answer_syncs(q, j->seq, RPC_STORAGE, msg, NULL);
		if (q->message == NULL)
			q->message = j->message; /* keep a sync's message */
		else
			free(j->message);
		j->message = NULL;
		idle = q->idle_cb;
		/* A lock is held for moments (a git command): look again
		 * soon; anything else may take a while. */
		kick(q, backoff(q, rc == 1 && strstr(j->res.deferred,
						     ".lock is held")
					   ? RETRY_LOCK_MAX_MS
					   : RETRY_MAX_MS));
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
			log_info("committed %.12s (%zu paths compared; index "
				 "by %s%s%s) in %llu ms",
				 j->res.commit, j->n,
				 j->res.index_way == GITC_INDEX_GIT
					 ? "git update-index"
					 : "our writer",
				 j->res.index_why[0] ? ": " : "",
				 j->res.index_why,
				 (unsigned long long)(uv_now(q->loop) -
						      j->started_ms));
		}
		if (j->res.commit[0] || j->res.index_written)
			if (q->committed)
				q->committed(q->committed_ctx);
		if (coords) {
			batch_of(j, &b, coords);
			answer_syncs(q, j->seq, 0, NULL, &b);
		} else {
			answer_syncs(q, j->seq, RPC_INTERNAL_ERROR,
				     "out of memory", NULL);
		}
		free(coords);
		if (j->res.index_error) {
			kick(q, backoff(q, RETRY_MAX_MS));
		} else {
			if (q->n_pending == 0)
				idle = q->idle_cb;
			kick(q, q->waiters || q->idle_cb ? 0 : q->delay_ms);
		}
	}
	close_replaced(q, j->res.replaced_fd);
	forget_settled(q, j);
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

/* Is the file of e written as of its last mark? */
static bool ready(const struct gitq *q, const struct gitq_path *e, bool all)
{
	return all || e->need_pass <= q->store->writer_done_seq;
}

static void job_start(struct gitq *q)
{
	bool all = store_files_written(q->store), blocked = false;
	struct gitq_job *j;
	char why[sizeof(q->deferred)];
	size_t n = 0, k = 0;

	if (q->busy || q->closed || q->n_pending == 0)
		return;
	if (q->defer && q->defer(q->defer_ctx, why, sizeof(why))) {
		defer_now(q, why);
		return;
	}
	if (q->hook_deferred[0] && !q->deferred[0] && q->deferral)
		q->deferral(q->deferral_ctx, "");
	q->hook_deferred[0] = '\0';
	/* A job waits for the writer's pass that holds what was pending when
	 * it was first due (and a git.sync for the pass holding its writes);
	 * what was marked since may wait for the next job, so commits go on
	 * while writers keep the file writer busy. */
	if (!all && !q->wait_pass)
		for (size_t i = 0; i < q->n_pending; i++)
			if (q->pending_list[i]->need_pass > q->wait_pass)
				q->wait_pass = q->pending_list[i]->need_pass;
	blocked = !all && q->wait_pass > q->store->writer_done_seq;
	for (struct gitq_sync *w = q->waiters; w && !all; w = w->next)
		blocked |= w->need_pass > q->store->writer_done_seq;
	for (size_t i = 0; i < q->n_pending && !blocked; i++)
		n += ready(q, q->pending_list[i], all);
	if (blocked || n == 0) {
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
	q->wait_pass = 0;
	j = calloc(1, sizeof(*j));
	if (j) {
		j->res.replaced_fd = -1; /* until a commit says otherwise */
		j->items = calloc(n, sizeof(*j->items));
	}
	if (!j || !j->items)
		goto fail;
	for (size_t i = 0; i < q->n_pending; i++) {
		struct gitq_path *e = q->pending_list[i];

		if (!ready(q, e, all))
			continue;
		j->items[j->n++].e = e;
	}
	/* Taken paths leave the pending list; the others keep their
	 * order. */
	for (size_t i = 0; i < q->n_pending; i++) {
		struct gitq_path *e = q->pending_list[i];

		if (ready(q, e, all))
			e->flags = (e->flags & ~P_PENDING) | P_COMMITTING;
		else
			q->pending_list[k++] = e;
	}
	q->n_pending = k;
	j->q = q;
	j->req.data = j;
	j->message = q->message;
	q->message = NULL;
	j->ident = q->ident;
	j->seq = ++q->seq;
	j->started_ms = uv_now(q->loop);
	if (uv_queue_work(q->loop, &j->req, job_work_cb, job_after_cb) < 0) {
		settle_items(q, j, true);
		q->message = j->message;
		j->message = NULL;
		goto fail;
	}
	q->busy = true;
	q->in_flight = j->n;
	return;
fail:
	if (j)
		free(j->items);
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
	 * is pending now goes into the next one, once the file writer's
	 * pass after this call has written it. */
	w->need_seq = q->n_pending ? q->seq + 1 : q->seq;
	w->need_pass = q->store->writer_seq + 1;
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
	for (size_t i = 0; i < q->table_cap; i++)
		if (q->table[i] && q->table[i] != &tombstone)
			free(q->table[i]);
	free(q->table);
	free(q->pending_list);
	free(q->message);
}

/* ---- the start-up scan ---- */

static int scan_add(void *ctx, const char *path)
{
	struct gitq_scan *s = ctx;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		char **p = realloc(s->paths, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->paths = p;
		s->cap = cap;
	}
	s->paths[s->n] = strdup(path);
	if (!s->paths[s->n])
		return -ENOMEM;
	s->n++;
	return 0;
}

static int scan_coord(void *ctx, const struct coord *c)
{
	char path[64];

	if (coord_path(c, path, sizeof(path)) < 0)
		return 0;
	return scan_add(ctx, path);
}

static void scan_work_cb(uv_work_t *req)
{
	struct gitq_scan *s = req->data;

	s->rc = gitc_scan(s->q->gitc, s->cancel_fd >= 0 ? &s->cancel_fd : NULL,
			  scan_add, s, s->errmsg, sizeof(s->errmsg));
	if (s->rc < 0 && s->rc != -ECANCELED) {
		/* Without git's view: HEAD's decisions (the deletions a
		 * crash kept uncommitted are among them); the loop adds
		 * every decision it holds. */
		for (size_t i = 0; i < s->n; i++)
			free(s->paths[i]);
		s->n = 0;
		s->fallback = true;
		if (gitc_head_coords(s->q->gitc, INT_MAX, scan_coord, s) < 0)
			s->n = 0;
	}
}

static void scan_after_cb(uv_work_t *req, int status)
{
	struct gitq_scan *s = req->data;
	struct gitq *q = s->q;
	size_t marked = 0;

	q->busy = false;
	q->scanning = false;
	q->scan = NULL;
	if (s->cancel_fd >= 0)
		close(s->cancel_fd);
	if (s->rc == -ECANCELED) {
		log_info("stopped asking git what differs from HEAD: the next "
			 "start asks again");
		for (size_t i = 0; i < s->n; i++)
			free(s->paths[i]);
		s->n = 0;
	} else if (status < 0 && !s->fallback) {
		s->fallback = true;
		snprintf(s->errmsg, sizeof(s->errmsg), "%s",
			 uv_strerror(status));
	}
	if (s->fallback) {
		const struct index *ix = q->index;

		log_warn("cannot ask git what differs from HEAD (%s): "
			 "comparing every decision",
			 s->errmsg);
		for (size_t i = 0; i < ix->n_slots; i++) {
			if (ix->slots[i]) {
				struct coord c = index_coord(ix, i);

				gitq_mark_coord(q, &c);
			}
		}
	}
	for (size_t i = 0; i < s->n; i++) {
		if (committable(q, s->paths[i])) {
			gitq_mark(q, s->paths[i]);
			marked++;
		}
		free(s->paths[i]);
	}
	free(s->paths);
	if (s->rc != -ECANCELED)
		log_info("%zu paths under .vector-memory differ from HEAD "
			 "(git status)",
			 marked);
	free(s);
	if (q->n_pending == 0) {
		/* Nothing to commit: whoever waited for the scan is done. */
		struct gitq_batch empty = {0};
		gitq_idle_fn idle = q->idle_cb;

		answer_syncs(q, UINT64_MAX, 0, NULL, &empty);
		q->idle_cb = NULL;
		if (idle)
			idle(q->idle_arg);
		return;
	}
	/* What the scan found is committed now; writes made meanwhile wait
	 * for their delay as usual. */
	kick(q,
	     marked || q->waiters || q->idle_cb || q->n_pending >= q->max_batch
		     ? 0
		     : q->delay_ms);
}

void gitq_start(struct gitq *q)
{
	struct gitq_scan *s = calloc(1, sizeof(*s));

	if (!s || q->closed) {
		free(s);
		return;
	}
	s->q = q;
	s->req.data = s;
	/* Without one the scan cannot be given up: a stop waits for it. */
	s->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (uv_queue_work(q->loop, &s->req, scan_work_cb, scan_after_cb) < 0) {
		s->fallback = true;
		snprintf(s->errmsg, sizeof(s->errmsg), "cannot queue it");
		scan_after_cb(&s->req, 0);
		return;
	}
	q->busy = true;
	q->scanning = true;
	q->scan = s;
}

void gitq_cancel_scan(struct gitq *q)
{
	struct gitq_scan *s = q->scan;

	if (!s || s->cancelled || s->cancel_fd < 0)
		return;
	s->cancelled = true;
	if (eventfd_write(s->cancel_fd, 1) < 0)
		log_warn("cannot give up the start-up scan (%s): the stop "
			 "waits for it",
			 strerror(errno));
}

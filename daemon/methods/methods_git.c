/*
 * Git methods: git.sync (commit what is pending and say what), and the
 * reads of history, decision.history and git.rollback_point.
 */
#include "methods.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "params.h"
#include "protocol/errors.h"

/* A git.sync waiting for its commit; the queue may answer at once. */
struct sync_call {
	struct gitq_sync w;
	struct call *call;
};

/*
 * A git.sync's answer, {commit, decisions, coordinates, ranges}, written
 * a slice at a time from a copy of the batch: a first commit of the whole
 * memory lists every decision (a million coordinates, 20 MB of text).
 */
struct sync_answer {
	struct gitq_batch b; /* coords: ours */
	size_t next;	     /* coordinates written */
	bool opened;
};

static void sync_answer_free(void *ctx)
{
	struct sync_answer *a = ctx;

	free(a->b.coords);
	free(a);
}

static int sync_produce(struct call *call, void *ctx, struct buf *out)
{
	struct sync_answer *a = ctx;
	const struct gitq_batch *b = &a->b;
	size_t start = out->len;
	char t[192];
	int k;

	(void)call;
	if (!a->opened) {
		k = snprintf(t, sizeof(t),
			     "{\"commit\":%s%s%s,\"decisions\":%zu,"
			     "\"coordinates\":[",
			     b->commit[0] ? "\"" : "",
			     b->commit[0] ? b->commit : "null",
			     b->commit[0] ? "\"" : "", b->n);
		if (!buf_append(out, t, (size_t)k))
			return -ENOMEM;
		a->opened = true;
	}
	while (a->next < b->n && out->len - start < SLICE_BYTES) {
		const struct coord *c = &b->coords[a->next];

		k = snprintf(t, sizeof(t), "%s{\"x\":%d,\"y\":%d,\"z\":%d}",
			     a->next ? "," : "", c->x, c->y, c->z);
		if (!buf_append(out, t, (size_t)k))
			return -ENOMEM;
		a->next++;
	}
	if (a->next < b->n)
		return 0;
	if (b->n)
		k = snprintf(t, sizeof(t),
			     "],\"ranges\":{\"x\":[%d,%d],\"y\":[%d,%d],"
			     "\"z\":[%d,%d]}}",
			     b->min.x, b->max.x, b->min.y, b->max.y, b->min.z,
			     b->max.z);
	else
		k = snprintf(t, sizeof(t), "],\"ranges\":null}");
	return buf_append(out, t, (size_t)k) ? 1 : -ENOMEM;
}

static void sync_done(struct gitq_sync *w, int code, const char *msg,
		      const struct gitq_batch *b)
{
	struct sync_call *sc = w->data;
	struct call *call = sc->call;
	struct sync_answer *a = NULL;

	free(sc);
	if (code == RPC_STORAGE) {
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	} else if (code != 0) {
		call_error(call, code, NULL, "%s", msg);
	} else {
		a = calloc(1, sizeof(*a));
		if (a) {
			a->b = *b;
			a->b.coords =
				malloc((b->n ? b->n : 1) * sizeof(*b->coords));
		}
		if (!a || !a->b.coords) {
			free(a);
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
		} else {
			if (b->n)
				memcpy(a->b.coords, b->coords,
				       b->n * sizeof(*b->coords));
			if (call_reply_slices(call, sync_produce,
					      sync_answer_free,
					      a) == CALL_ASYNC)
				return; /* answered, then completed, by its
					   slices */
		}
	}
	call_complete(call);
}

int git_sync(struct call *call)
{
	static const char *const allowed[] = {"message", NULL};
	json_t *message = json_object_get(call->params, "message");
	struct sync_call *sc;

	if (!param_only(call, allowed))
		return CALL_DONE;
	if (message &&
	    (!json_is_string(message) || json_string_length(message) == 0 ||
	     json_string_length(message) > MESSAGE_MAX ||
	     !utf8_valid(json_string_value(message),
			 json_string_length(message)))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "message must be a non-empty string of at most %d "
			   "bytes",
			   MESSAGE_MAX);
		return CALL_DONE;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	sc->call = call;
	sc->w.done = sync_done;
	sc->w.data = sc;
	gitq_sync(&call->d->gitq, &sc->w,
		  message ? json_string_value(message) : NULL);
	return CALL_ASYNC;
}

/* ---- reads of git history, on the thread pool ---- */

/* A history or rollback-point request: a repository of its own is opened
 * in the worker, so reads never wait for (or share with) the commit job. */
struct git_read {
	uv_work_t req;
	struct call *call;
	char *root;
	const struct statedir *state; /* the daemon's, read-only */
	int max_x;
	enum { READ_HISTORY, READ_ROLLBACK, READ_LOG } kind;
	struct coord coord; /* history */
	bool uncommitted;   /* history: result[0] is the state not in HEAD */
	bool walked;	    /* history: a version from git was seen */
	size_t limit;	    /* history, log: 0 for all */
	char after[41];	    /* history: list the versions after this commit */
	bool skipping;	    /* history: after not reached yet */
	int xt, yt;	    /* rollback point */
	json_t *result;	    /* handed over whole: built by the worker */
	char *text;	    /* the result's JSON, written by the worker */
	size_t text_len, sent;
	int rc;
	char errmsg[256];
};

static json_t *when_json(int64_t seconds)
{
	char when[VMEM_TIMESTAMP_LEN + 1];

	timestamp_format(seconds * 1000000, when);
	return json_string(when);
}

/* One element of a history: a version of the decision, or a deletion. */
static json_t *version_json(const struct decision *d, const char *commit,
			    json_t *committed_at)
{
	if (!d)
		return json_pack("{s:n,s:n,s:n,s:n,s:b,s:o,s:o}", "content",
				 "agent_id", "timestamp", "version", "deleted",
				 1, "commit",
				 commit ? json_string(commit) : json_null(),
				 "committed_at",
				 committed_at ? committed_at : json_null());
	return json_pack(
		"{s:s%,s:s,s:s,s:I,s:b,s:o,s:o}", "content", d->content,
		d->content_len, "agent_id", d->agent_id, "timestamp",
		d->timestamp, "version", (json_int_t)d->version, "deleted", 0,
		"commit", commit ? json_string(commit) : json_null(),
		"committed_at", committed_at ? committed_at : json_null());
}

/* Add a version from git; the newest one replaces the uncommitted state
 * put first when it is that very state (its commit landed meanwhile), so
 * no version is listed twice. */
static int add_version(struct git_read *r, json_t *v, const char *timestamp)
{
	bool first = !r->walked;

	r->walked = true;
	if (!v)
		return -ENOMEM;
	if (first && r->uncommitted) {
		json_t *now = json_array_get(r->result, 0);
		json_t *ts = json_object_get(now, "timestamp");

		if (timestamp ? json_is_string(ts) &&
					strcmp(json_string_value(ts),
					       timestamp) == 0
			      : json_is_null(ts))
			return json_array_set_new(r->result, 0, v) < 0 ? -ENOMEM
								       : 0;
	}
	return json_array_append_new(r->result, v) < 0 ? -ENOMEM : 0;
}

static int history_cb(void *ctx, const char *commit, int64_t committed_at,
		      const char *text, size_t len)
{
	struct git_read *r = ctx;
	struct decision d;
	char msg[VMEM_ERRMSG_LEN];
	int rc;

	if (r->skipping) {
		r->skipping = strcmp(commit, r->after) != 0;
		return 0;
	}
	/* A page after a version: the walk has no limit of its own, the
	 * page is full here. */
	if (r->after[0] && r->limit && json_array_size(r->result) >= r->limit)
		return 1;
	if (!text)
		return add_version(
			r, version_json(NULL, commit, when_json(committed_at)),
			NULL);
	if (decision_parse(text, len, r->max_x, &d, msg) != 0)
		return 0; /* not a file vmemd wrote: not a version */
	rc = add_version(r, version_json(&d, commit, when_json(committed_at)),
			 d.timestamp);
	decision_done(&d);
	return rc;
}

static int log_cb(void *ctx, const char *commit, int64_t committed_at,
		  const char *subject)
{
	struct git_read *r = ctx;

	return json_array_append_new(
		       r->result, json_pack("{s:s,s:s,s:o}", "commit", commit,
					    "subject", subject, "committed_at",
					    when_json(committed_at))) < 0
		       ? -ENOMEM
		       : 0;
}

static void read_work_cb(uv_work_t *req)
{
	struct git_read *r = req->data;
	struct gitc *g = NULL;
	char commit[41], subject[256];
	int64_t at = 0;

	r->rc = gitc_open(&g, r->root, r->state, r->errmsg, sizeof(r->errmsg));
	if (r->rc < 0)
		return;
	if (r->kind == READ_HISTORY) {
		r->rc = gitc_history(g, &r->coord, r->after[0] ? 0 : r->limit,
				     history_cb, r, r->errmsg,
				     sizeof(r->errmsg));
		/* The walk took limit versions besides the uncommitted one. */
		while (r->limit && json_array_size(r->result) > r->limit)
			json_array_remove(r->result,
					  json_array_size(r->result) - 1);
	} else if (r->kind == READ_LOG) {
		r->rc = gitc_log(g, r->limit, log_cb, r, r->errmsg,
				 sizeof(r->errmsg));
	} else {
		r->rc = gitc_rollback_point(g, r->xt, r->yt, commit, subject,
					    sizeof(subject), &at, r->errmsg,
					    sizeof(r->errmsg));
		if (r->rc == 1)
			r->result = json_pack("{s:s,s:s,s:o}", "commit", commit,
					      "subject", subject,
					      "committed_at", when_json(at));
		else if (r->rc == 0)
			r->result = json_pack("{s:n,s:n,s:n}", "commit",
					      "subject", "committed_at");
	}
	gitc_free(g);
	/* Serialised here too, not on the loop: a history can be big. */
	if (r->rc >= 0) {
		r->text =
			r->result ? json_dumps(r->result, JSON_COMPACT) : NULL;
		if (!r->text)
			r->rc = -ENOMEM;
		else
			r->text_len = strlen(r->text);
	}
	json_decref(r->result);
	r->result = NULL;
}

static void read_free(void *ctx)
{
	struct git_read *r = ctx;

	free(r->text);
	free(r->root);
	free(r);
}

/* The worker's text, a slice at a time. */
static int read_produce(struct call *call, void *ctx, struct buf *out)
{
	struct git_read *r = ctx;
	size_t n = r->text_len - r->sent;

	(void)call;
	if (n > SLICE_BYTES)
		n = SLICE_BYTES;
	if (!buf_append(out, r->text + r->sent, n))
		return -ENOMEM;
	r->sent += n;
	return r->sent == r->text_len;
}

static void read_after_cb(uv_work_t *req, int status)
{
	struct git_read *r = req->data;
	struct call *call = r->call;
	int rc = status < 0 ? status : r->rc;

	if (rc < 0) {
		if (!r->errmsg[0])
			snprintf(r->errmsg, sizeof(r->errmsg), "%s",
				 strerror(-rc));
		call_error(call, RPC_STORAGE,
			   json_pack("{s:s}", "reason", r->errmsg),
			   "reading git history: %s", r->errmsg);
		read_free(r);
	} else if (call_reply_slices(call, read_produce, read_free, r) ==
		   CALL_ASYNC) {
		return; /* answered, then completed, by its slices */
	}
	call_complete(call);
}

static int read_start(struct git_read *r)
{
	struct call *call = r->call;

	r->req.data = r;
	r->root = strdup(call->d->repo.root);
	r->state = &call->d->repo.state;
	r->max_x = call->d->limits.max_x;
	if (!r->root || uv_queue_work(call->d->loop, &r->req, read_work_cb,
				      read_after_cb) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "cannot start reading git history");
		json_decref(r->result);
		free(r->root);
		free(r);
		return CALL_DONE;
	}
	return CALL_ASYNC;
}

int decision_history(struct call *call)
{
	static const char *const allowed[] = {"coordinate", "limit", "after",
					      NULL};
	struct gitq *q = &call->d->gitq;
	json_t *after = json_object_get(call->params, "after");
	struct git_read *r;
	int64_t limit = 0;
	size_t slot;

	r = calloc(1, sizeof(*r));
	if (!r) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	r->call = call;
	if (!param_only(call, allowed) || !param_coord(call, &r->coord) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		goto done;
	/* Paging: "uncommitted" (the first entry) or a commit id. */
	if (after && !json_is_null(after)) {
		const char *a =
			json_is_string(after) ? json_string_value(after) : "";
		size_t len = strlen(a);

		if (strcmp(a, "uncommitted") != 0 &&
		    (len != 40 || strspn(a, "0123456789abcdef") != 40)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "after must be a commit id (40 lowercase "
				   "hex digits) or \"uncommitted\"");
			goto done;
		}
		if (len == 40) {
			memcpy(r->after, a, 41);
			r->skipping = true;
		} else {
			memcpy(r->after, "uncommitted", 12);
		}
	}
	r->result = json_array();
	if (!r->result)
		goto oom;
	/* A change not committed yet comes first, as it is now. */
	slot = index_slot(q->index, &r->coord);
	r->uncommitted = !r->after[0] && gitq_uncommitted_coord(q, &r->coord);
	if (r->uncommitted) {
		const struct record *rec = q->index->slots[slot];
		struct decision d;
		char msg[VMEM_ERRMSG_LEN];
		json_t *v = NULL;

		if (!rec) {
			v = version_json(NULL, NULL, NULL);
		} else if (decision_parse(rec->json, rec->json_len,
					  call->d->limits.max_x, &d,
					  msg) == 0) {
			v = version_json(&d, NULL, NULL);
			decision_done(&d);
		}
		if (!v || json_array_append_new(r->result, v) < 0)
			goto oom;
	}
	r->limit = (size_t)limit;
	return read_start(r);
oom:
	call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
done:
	json_decref(r->result);
	free(r);
	return CALL_DONE;
}

int git_rollback_point(struct call *call)
{
	static const char *const allowed[] = {"x_threshold", "y_threshold",
					      NULL};
	struct git_read *r;
	int xt, yt;

	if (!param_only(call, allowed) ||
	    !param_threshold(call, "x_threshold", call->d->limits.max_x + 1, 0,
			     &xt) ||
	    !param_threshold(call, "y_threshold", VMEM_MAX_Y + 1, 0, &yt))
		return CALL_DONE;
	r = calloc(1, sizeof(*r));
	if (!r) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	r->call = call;
	r->kind = READ_ROLLBACK;
	r->xt = xt;
	r->yt = yt;
	return read_start(r);
}

/* ---- git.reload ---- */

static void reload_done(struct store *s, void *arg, int rc, const char *errmsg,
			const struct vmdir_load_report *rep)
{
	struct call *call = arg;
	struct daemon *d = call->d;

	if (rc < 0) {
		call_error(call, RPC_STORAGE,
			   json_pack("{s:s}", "reason", errmsg),
			   "reload failed: %s", errmsg);
	} else {
		/* The store's on_report logged it and added it to health. */
		call_reply(call, json_pack("{s:I,s:o}", "count",
					   (json_int_t)d->decisions.index.count,
					   "quarantined",
					   rep ? quarantined_json(rep)
					       : json_array()));
	}
	call_complete(call);
}

int git_reload(struct call *call)
{
	static const char *const allowed[] = {NULL};

	if (!param_only(call, allowed))
		return CALL_DONE;
	/* The yield is otherwise looked at again once a second: a git
	 * command that has just ended must not refuse the reload its user
	 * asks for next. */
	conflicts_check_yield(&call->d->conflicts);
	store_reload(&call->d->store, reload_done, call);
	return CALL_ASYNC;
}

int git_log(struct call *call)
{
	static const char *const allowed[] = {"limit", NULL};
	struct git_read *r;
	int64_t limit = 20;

	if (!param_only(call, allowed) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		return CALL_DONE;
	r = calloc(1, sizeof(*r));
	if (r)
		r->result = json_array();
	if (!r || !r->result) {
		free(r);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	r->call = call;
	r->kind = READ_LOG;
	r->limit = (size_t)limit;
	return read_start(r);
}

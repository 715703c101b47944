/* server.* methods: hello, health, flush, shutdown, stats. */
#include "methods.h"

#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <git2.h>

#include "conn.h"
#include "daemon.h"
#include "hnsw.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/decision.h"
#include "protocol/errors.h"

static json_t *limits_json(const struct limits *l)
{
	return json_pack("{s:I,s:I,s:I,s:i,s:i}", "max_line",
			 (json_int_t)l->max_line, "max_batch",
			 (json_int_t)l->max_batch, "max_connections",
			 (json_int_t)l->max_connections, "max_x", l->max_x,
			 "content_max", VMEM_CONTENT_MAX);
}

int server_hello(struct call *call)
{
	static const char *const allowed[] = {"agent_id", "client", "protocol",
					      NULL};
	json_t *agent = json_object_get(call->params, "agent_id");
	json_t *client = json_object_get(call->params, "client");
	int64_t protocol = 1;
	const char *agent_id = NULL;
	struct conn *c = call->conn;

	if (!param_only(call, allowed) ||
	    !param_int(call, "protocol", INT64_MIN, INT64_MAX, &protocol))
		return CALL_DONE;
	if (protocol != 1) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "unsupported protocol version %lld (this daemon "
			   "speaks 1)",
			   (long long)protocol);
		return CALL_DONE;
	}
	if (client && !json_is_string(client) && !json_is_object(client)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "client must be a string or an object");
		return CALL_DONE;
	}
	if (agent && !param_agent(call, &agent_id))
		return CALL_DONE;
	if (agent_id) {
		char *copy = strdup(agent_id);

		if (!copy) {
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
			return CALL_DONE;
		}
		free(c->agent_id);
		c->agent_id = copy;
	}
	call_reply(
		call,
		json_pack("{s:s,s:s,s:i,s:s,s:o,s:o}", "server", "vmemd",
			  "version", VMEMD_VERSION, "protocol", 1, "repo",
			  call->d->repo.root, "agent_id",
			  c->agent_id ? json_string(c->agent_id) : json_null(),
			  "limits", limits_json(&call->d->limits)));
	return CALL_DONE;
}

json_t *quarantined_json(const struct vmdir_load_report *rep)
{
	json_t *list = json_array();

	for (size_t i = 0; list && i < rep->n_quarantined; i++) {
		const struct vmdir_quarantined *q = &rep->quarantined[i];

		json_array_append_new(list, json_pack("{s:s,s:s,s:s}", "path",
						      q->path, "moved_to",
						      q->moved_to, "reason",
						      q->reason));
	}
	return list;
}

/* {"commit", "committed_at"} of the daemon's last commit, or null. */
static json_t *last_commit_json(const struct gitq *q)
{
	char when[VMEM_TIMESTAMP_LEN + 1];

	if (!q->last_commit[0])
		return json_null();
	timestamp_format(q->last_commit_at * 1000000, when);
	return json_pack("{s:s,s:s}", "commit", q->last_commit, "committed_at",
			 when);
}

/* At most this many conflicts in health (conflict.list has them all). */
#define HEALTH_CONFLICTS_MAX 100

/* ---- the local kinds in health (issue 15) ---- */

/* The versions of what serves the data (the seed's postgres_version and
 * pgvector_version, for vmem). */
static json_t *versions_json(void)
{
	int maj = 0, min = 0, rev = 0;
	char git[32];

	git_libgit2_version(&maj, &min, &rev);
	snprintf(git, sizeof(git), "%d.%d.%d", maj, min, rev);
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "vmemd", VMEMD_VERSION,
			 "hnsw", hnsw_library(), "vector_kernel",
			 vector_kernel(), "libuv", uv_version_string(),
			 "libgit2", git, "jansson", JANSSON_VERSION);
}

static json_t *segments_json(const struct localseg *ls)
{
	struct seg_stats st;

	localseg_stats(ls, &st);
	return json_pack("{s:I,s:I,s:I,s:I,s:I}", "segments",
			 (json_int_t)st.segments, "disk_bytes",
			 (json_int_t)st.disk_bytes, "live_bytes",
			 (json_int_t)st.live_bytes, "dead_bytes",
			 (json_int_t)st.dead_bytes, "compactions",
			 (json_int_t)ls->compactions);
}

static json_t *vector_index_json(const struct documents *ds)
{
	struct vindex_stats st;

	vindex_stats(ds->ix.vi, &st);
	return json_pack("{s:s,s:o,s:I,s:I,s:b,s:I}", "state",
			 ds->index_state[0] ? ds->index_state : "empty", "note",
			 ds->index_note[0] ? json_string(ds->index_note)
					   : json_null(),
			 "vectors", (json_int_t)st.live, "graph_rows",
			 (json_int_t)st.graph_rows, "building", st.building,
			 "saves", (json_int_t)ds->saves);
}

/* The newest error of the local kinds, "" when none. */
static const char *local_error(const struct daemon *d)
{
	if (d->documents.last_error[0])
		return d->documents.last_error;
	if (d->documents.seg.last_error[0])
		return d->documents.seg.last_error;
	return d->conversations.seg.last_error;
}

int server_health(struct call *call)
{
	static const char *const allowed[] = {NULL};
	struct daemon *d = call->d;
	const char *last_error = d->store.last_error[0] && !d->gitq.stopped[0]
					 ? d->store.last_error
				 : d->gitq.last_error[0] ? d->gitq.last_error
				 : d->conflicts.last_error[0]
					 ? d->conflicts.last_error
					 : local_error(d);
	bool degraded = d->loaded.n_quarantined > 0 ||
			store_failing(&d->store) || d->gitq.stopped[0] ||
			d->conflicts.n > 0 || d->conversations.n_adopted > 0 ||
			d->documents.n_orphans > 0;
	const char *status =
		d->stopping ? "stopping" : (degraded ? "degraded" : "ok");
	char why[200];
	const char *deferred = conflicts_defer(&d->conflicts, why, sizeof(why))
				       ? why
			       : d->gitq.deferred[0] ? d->gitq.deferred
						     : NULL;
	json_t *h, *locks = json_array();
	char *save = NULL, *p, list[sizeof(d->gitq.foreign_locks)];

	if (!param_only(call, allowed)) {
		json_decref(locks);
		return CALL_DONE;
	}
	snprintf(list, sizeof(list), "%s", d->gitq.foreign_locks);
	for (p = strtok_r(list, ",", &save); p && locks;
	     p = strtok_r(NULL, ",", &save))
		json_array_append_new(locks, json_string(p + (*p == ' ')));
	h = json_pack(
		"{s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I}",
		"status", status, "version", VMEMD_VERSION, "repo",
		d->repo.root, "decisions", (json_int_t)d->decisions.index.count,
		"experiences", (json_int_t)d->experiences.ix.n_live, "pending",
		(json_int_t)gitq_pending(&d->gitq), "last_commit",
		last_commit_json(&d->gitq), "commit_deferred",
		deferred ? json_string(deferred) : json_null(),
		"files_wait_for_git",
		d->conflicts.yield[0] ? json_string(d->conflicts.yield)
				      : json_null(),
		"conflicts", conflicts_json(d, HEALTH_CONFLICTS_MAX), "dropped",
		drops_json(d), "quarantined", quarantined_json(&d->loaded),
		"last_error",
		last_error[0] ? json_string(last_error) : json_null(),
		"uptime_s",
		(json_int_t)((uv_now(d->loop) - d->started_ms) / 1000));
	if (h && locks) {
		json_object_set_new(h, "commits_stopped",
				    d->gitq.stopped[0]
					    ? json_string(d->gitq.stopped)
					    : json_null());
		json_object_set_new(h, "git_locks", locks);
		locks = NULL;
	}
	json_decref(locks);
	/* Conversations and documents: counts per kind, what serves them. */
	if (h &&
	    json_object_update_new(
		    h,
		    json_pack(
			    "{s:o,s:{s:I,s:I,s:I,s:I,s:I,s:I},s:{s:o,s:o},s:o,"
			    "s:{s:I,s:I}}",
			    "versions", versions_json(), "counts", "decisions",
			    (json_int_t)d->decisions.index.count, "experiences",
			    (json_int_t)d->experiences.ix.n_live, "sessions",
			    (json_int_t)d->conversations.ix.n_sessions,
			    "messages",
			    (json_int_t)d->conversations.ix.n_messages,
			    "documents", (json_int_t)d->documents.ix.n_docs,
			    "embeddings",
			    (json_int_t)docindex_vectors(&d->documents.ix),
			    "local_storage", "conversations",
			    segments_json(&d->conversations.seg), "documents",
			    segments_json(&d->documents.seg), "vector_index",
			    vector_index_json(&d->documents), "repaired",
			    "sessions_adopted",
			    (json_int_t)d->conversations.n_adopted,
			    "embeddings_dropped",
			    (json_int_t)d->documents.n_orphans)) < 0) {
		json_decref(h);
		h = NULL;
	}
	if (!h) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	call_attr_str(call, "status", status, strlen(status));
	call_attr_str(call, "postgres_version", "vmemd " VMEMD_VERSION,
		      strlen("vmemd " VMEMD_VERSION));
	call_reply(call, h);
	return CALL_DONE;
}

/* ---- server.flush ---- */

#define FLUSH_TIMEOUT_DEFAULT_MS 30000
#define FLUSH_TIMEOUT_MAX_MS	 600000

/*
 * A server.flush: a store_wait, then (until "committed") a git.sync-like
 * wait on the commit queue, under one timer. Freed once both its timer is
 * closed and its wait has ended; a timeout answers at once and leaves the
 * commit wait (which cannot be cancelled) to end by itself.
 */
struct flush_call {
	struct call *call; /* NULL once answered */
	struct store_wait sw;
	struct gitq_sync gs;
	uv_timer_t timer;
	bool commit;	 /* until "committed" */
	bool waiting;	 /* the store wait or the commit wait is on */
	bool in_store;	 /* ... and it is the store wait */
	bool timer_open; /* not closed yet */
};

static void flush_free_if_done(struct flush_call *fc)
{
	if (!fc->waiting && !fc->timer_open)
		free(fc);
}

static void flush_timer_closed_cb(uv_handle_t *h)
{
	struct flush_call *fc = h->data;

	fc->timer_open = false;
	flush_free_if_done(fc);
}

/* Answer (once) and stop the timer. */
static void flush_answer(struct flush_call *fc, int code, const char *msg,
			 json_t *result)
{
	struct call *call = fc->call;

	if (!call) {
		json_decref(result);
		return;
	}
	fc->call = NULL;
	if (code == RPC_STORAGE)
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	else if (code)
		call_error(call, code, NULL, "%s", msg);
	else
		call_reply(call, result);
	call_complete(call);
	if (!uv_is_closing((uv_handle_t *)&fc->timer))
		uv_close((uv_handle_t *)&fc->timer, flush_timer_closed_cb);
}

static void flush_synced(struct gitq_sync *w, int code, const char *msg,
			 const struct gitq_batch *b)
{
	struct flush_call *fc = w->data;

	fc->waiting = false;
	if (code)
		flush_answer(fc, code, msg, NULL);
	else
		flush_answer(fc, 0, NULL,
			     json_pack("{s:b,s:b,s:o}", "written", 1,
				       "committed", 1, "commit",
				       b->commit[0] ? json_string(b->commit)
						    : json_null()));
	flush_free_if_done(fc);
}

static void flush_stored(struct store_wait *w, int rc)
{
	struct flush_call *fc = w->data;

	fc->in_store = false;
	if (rc < 0) {
		fc->waiting = false;
		flush_answer(fc, RPC_UNAVAILABLE, "the daemon is shutting down",
			     NULL);
		flush_free_if_done(fc);
		return;
	}
	if (!fc->commit || !fc->call) {
		fc->waiting = false;
		flush_answer(fc, 0, NULL,
			     json_pack("{s:b,s:b,s:n}", "written", 1,
				       "committed", 0, "commit"));
		flush_free_if_done(fc);
		return;
	}
	fc->gs.done = flush_synced;
	fc->gs.data = fc;
	gitq_sync(&fc->call->d->gitq, &fc->gs, NULL);
}

static void flush_timeout_cb(uv_timer_t *t)
{
	struct flush_call *fc = t->data;
	struct daemon *d = fc->call->d;
	char msg[160];

	snprintf(msg, sizeof(msg), "server.flush timed out after %llu ms: %s",
		 (unsigned long long)uv_timer_get_repeat(t),
		 fc->in_store ? "files still being written"
			      : "the commit is not done yet");
	if (fc->in_store) {
		store_wait_cancel(&d->store, &fc->sw);
		fc->waiting = false;
		fc->in_store = false;
	}
	flush_answer(fc, RPC_CONCURRENCY, msg, NULL);
}

int server_flush(struct call *call)
{
	static const char *const allowed[] = {"until", "timeout_ms", NULL};
	json_t *until = json_object_get(call->params, "until");
	int64_t timeout = FLUSH_TIMEOUT_DEFAULT_MS;
	struct flush_call *fc;
	bool commit = true;

	if (!param_only(call, allowed) ||
	    !param_int(call, "timeout_ms", 1, FLUSH_TIMEOUT_MAX_MS, &timeout))
		return CALL_DONE;
	if (until && json_is_string(until) &&
	    strcmp(json_string_value(until), "written") == 0) {
		commit = false;
	} else if (until && (!json_is_string(until) ||
			     strcmp(json_string_value(until), "committed"))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "until must be \"written\" or \"committed\"");
		return CALL_DONE;
	}
	fc = calloc(1, sizeof(*fc));
	if (!fc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	fc->call = call;
	fc->commit = commit;
	fc->waiting = fc->in_store = fc->timer_open = true;
	uv_timer_init(call->d->loop, &fc->timer);
	fc->timer.data = fc;
	/* The repeat value only remembers the timeout for the message. */
	uv_timer_start(&fc->timer, flush_timeout_cb, (uint64_t)timeout,
		       (uint64_t)timeout);
	fc->sw.done = flush_stored;
	fc->sw.data = fc;
	fc->sw.idle = commit;
	store_wait(&call->d->store, &fc->sw);
	return CALL_ASYNC;
}

int server_shutdown(struct call *call)
{
	static const char *const allowed[] = {NULL};

	if (!param_only(call, allowed))
		return CALL_DONE;
	call_reply(call, json_true());
	daemon_stop(call->d);
	return CALL_DONE;
}

/* Resident memory of the daemon in bytes, or -1 when unknown. */
static json_int_t resident_bytes(void)
{
	char buf[128];
	long long pages = -1, rss = -1;
	FILE *f = fopen("/proc/self/statm", "re");

	if (f) {
		if (fgets(buf, sizeof(buf), f) &&
		    sscanf(buf, "%lld %lld", &pages, &rss) != 2)
			rss = -1;
		fclose(f);
	}
	return rss < 0 ? -1 : (json_int_t)rss * sysconf(_SC_PAGESIZE);
}

static json_t *methods_json(const struct stats *st)
{
	json_t *all = json_object();

	for (size_t i = 0; all && i < st->n; i++) {
		const struct method_stats *ms = &st->methods[i];

		if (!ms->count)
			continue;
		json_object_set_new(
			all, method_name(i),
			json_pack("{s:I,s:I,s:f,s:f,s:f}", "count",
				  (json_int_t)ms->count, "errors",
				  (json_int_t)ms->errors, "p50_us",
				  (double)stats_percentile(ms, 0.5) / 1e3,
				  "p99_us",
				  (double)stats_percentile(ms, 0.99) / 1e3,
				  "max_us", (double)ms->max_ns / 1e3));
	}
	return all;
}

int server_stats(struct call *call)
{
	static const char *const allowed[] = {NULL};
	struct daemon *d = call->d;
	const struct index *ix = &d->decisions.index;
	json_int_t layers[VMEM_MAX_Z];

	if (!param_only(call, allowed))
		return CALL_DONE;
	for (size_t z = 0; z < VMEM_MAX_Z; z++)
		layers[z] = (json_int_t)ix->by_layer[z];
	call_reply(
		call,
		json_pack(
			"{s:I,s:I,s:o,s:{s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I},"
			"s:I,s:I,s:I,s:{s:I,s:I,s:I},s:{s:I,s:I,s:I}}",
			"uptime_s",
			(json_int_t)((uv_now(d->loop) - d->started_ms) / 1000),
			"connections",
			(json_int_t)server_connections(&d->server), "methods",
			methods_json(&d->stats), "decisions_by_layer", "1",
			layers[0], "2", layers[1], "3", layers[2], "4",
			layers[3], "queues", "log",
			(json_int_t)(d->store.filling_n + d->store.in_flight),
			"files", (json_int_t)store_unwritten(&d->store),
			"commit", (json_int_t)gitq_pending(&d->gitq), "leases",
			(json_int_t)leases_count(&d->leases), "subscriptions",
			(json_int_t)d->subs.n, "resident_bytes",
			resident_bytes(), "memory", "content_bytes",
			(json_int_t)ix->content_bytes, "record_bytes",
			(json_int_t)ix->record_bytes, "search_bytes",
			(json_int_t)search_memory(ix->search), "experiences",
			"count", (json_int_t)d->experiences.ix.n_live, "agents",
			(json_int_t)d->experiences.ix.n_agents, "index_bytes",
			(json_int_t)expindex_memory(&d->experiences.ix)));
	return CALL_DONE;
}

/*
 * Method handlers of protocol v1: server.* and the single-decision
 * operations. Params are checked here, at the edge: member names and
 * types, then domain values (protocol/decision.h); the store applies the
 * layer and version rules.
 */
#include "methods.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "protocol/decision.h"
#include "protocol/errors.h"
#include "query.h"
#include "search.h"

#define TIMEOUT_DEFAULT_MS 5000
#define TIMEOUT_MAX_MS	   600000
#define RESULTS_LIMIT_MAX  10000

/* Refuse members of params not listed in allowed (NULL-terminated). */
static bool only_members(struct call *call, const char *const *allowed)
{
	const char *key;
	json_t *value;

	json_object_foreach(call->params, key, value)
	{
		const char *const *a = allowed;

		while (*a && strcmp(*a, key) != 0)
			a++;
		if (!*a) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "unknown parameter: %.100s", key);
			return false;
		}
	}
	return true;
}

static bool get_coord(struct call *call, struct coord *out)
{
	json_t *v = json_object_get(call->params, "coordinate");
	char msg[VMEM_ERRMSG_LEN];

	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: coordinate");
		return false;
	}
	if (coord_from_json(v, call->d->limits.max_x, out, msg) != 0) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL, "%s", msg);
		return false;
	}
	return true;
}

/* An optional integer member in [min, max]; *out untouched if absent. */
static bool get_int(struct call *call, const char *name, int64_t min,
		    int64_t max, int64_t *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < min ||
	    json_integer_value(v) > max) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be an integer in %lld..%lld", name,
			   (long long)min, (long long)max);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

static bool get_bool(struct call *call, const char *name, bool *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v)
		return true;
	if (!json_is_boolean(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be true or false", name);
		return false;
	}
	*out = json_is_true(v);
	return true;
}

/* The agent of a write: the agent_id param, else the connection's. */
static bool get_agent(struct call *call, const char **out)
{
	json_t *v = json_object_get(call->params, "agent_id");
	char msg[VMEM_ERRMSG_LEN];

	if (v) {
		if (!json_is_string(v)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "agent_id must be a string");
			return false;
		}
		if (agent_id_check(json_string_value(v), json_string_length(v),
				   msg) != 0) {
			call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
			return false;
		}
		*out = json_string_value(v);
		return true;
	}
	if (!call->conn->agent_id) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "agent_id is required: pass it or call "
			   "server.hello first");
		return false;
	}
	*out = call->conn->agent_id;
	return true;
}

/* ---- server.* ---- */

static json_t *limits_json(const struct limits *l)
{
	return json_pack("{s:I,s:I,s:I,s:i,s:i}", "max_line",
			 (json_int_t)l->max_line, "max_batch",
			 (json_int_t)l->max_batch, "max_connections",
			 (json_int_t)l->max_connections, "max_x", l->max_x,
			 "content_max", VMEM_CONTENT_MAX);
}

static int server_hello(struct call *call)
{
	static const char *const allowed[] = {"agent_id", "client", "protocol",
					      NULL};
	json_t *agent = json_object_get(call->params, "agent_id");
	json_t *client = json_object_get(call->params, "client");
	int64_t protocol = 1;
	const char *agent_id = NULL;
	struct conn *c = call->conn;

	if (!only_members(call, allowed) ||
	    !get_int(call, "protocol", INT64_MIN, INT64_MAX, &protocol))
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
	if (agent && !get_agent(call, &agent_id))
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

static json_t *quarantined_json(const struct vmdir_load_report *rep)
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

static int server_health(struct call *call)
{
	static const char *const allowed[] = {NULL};
	struct daemon *d = call->d;
	const char *last_error = d->store.last_error;
	bool degraded = d->loaded.n_quarantined > 0 || store_failing(&d->store);

	if (!only_members(call, allowed))
		return CALL_DONE;
	call_reply(
		call,
		json_pack("{s:s,s:s,s:s,s:I,s:I,s:n,s:n,s:o,s:o,s:I}", "status",
			  d->stopping ? "stopping"
				      : (degraded ? "degraded" : "ok"),
			  "version", VMEMD_VERSION, "repo", d->repo.root,
			  "decisions", (json_int_t)d->store.index.count,
			  "pending", (json_int_t)store_pending(&d->store),
			  "last_commit", "commit_deferred", "quarantined",
			  quarantined_json(&d->loaded), "last_error",
			  last_error[0] ? json_string(last_error) : json_null(),
			  "uptime_s",
			  (json_int_t)((uv_now(d->loop) - d->started_ms) /
				       1000)));
	return CALL_DONE;
}

static int server_shutdown(struct call *call)
{
	static const char *const allowed[] = {NULL};

	if (!only_members(call, allowed))
		return CALL_DONE;
	call_reply(call, json_true());
	daemon_stop(call->d);
	return CALL_DONE;
}

/* ---- decision reads ---- */

static int decision_get(struct call *call)
{
	static const char *const allowed[] = {"coordinate", NULL};
	const struct record *r;
	struct coord c;

	if (!only_members(call, allowed) || !get_coord(call, &c))
		return CALL_DONE;
	r = index_get(&call->d->store.index, &c);
	if (r)
		call_reply_raw(call, r->json, r->json_len);
	else
		call_reply(call, json_null());
	return CALL_DONE;
}

static int decision_exists(struct call *call)
{
	static const char *const allowed[] = {"coordinate", NULL};
	struct coord c;

	if (!only_members(call, allowed) || !get_coord(call, &c))
		return CALL_DONE;
	call_reply(call,
		   json_boolean(index_get(&call->d->store.index, &c) != NULL));
	return CALL_DONE;
}

/* ---- queries ---- */

/* Answer with a JSON array of records, spliced without re-parsing. */
static void reply_records(struct call *call, const struct record *const *recs,
			  size_t n)
{
	struct buf b = {0};
	bool ok = buf_append(&b, "[", 1);

	for (size_t i = 0; ok && i < n; i++)
		ok = (i == 0 || buf_append(&b, ",", 1)) &&
		     buf_append(&b, recs[i]->json, recs[i]->json_len);
	if (ok && buf_append(&b, "]", 1))
		call_reply_raw(call, b.data, b.len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(&b);
}

/*
 * An optional axis range [min, max]. Absent or null means the whole axis.
 * A value that is not a two-element array is a ValueError; bounds that
 * are not integers, or min > max, are a QueryError.
 */
static bool get_range(struct call *call, const char *name,
		      struct axis_range *out)
{
	json_t *v = json_object_get(call->params, name);
	json_t *lo, *hi;

	out->min = INT32_MIN;
	out->max = INT32_MAX;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_array(v) || json_array_size(v) != 2) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be an array [min, max]", name);
		return false;
	}
	lo = json_array_get(v, 0);
	hi = json_array_get(v, 1);
	if (!json_is_integer(lo) || !json_is_integer(hi)) {
		call_error(call, RPC_QUERY, NULL, "%s bounds must be integers",
			   name);
		return false;
	}
	if (json_integer_value(lo) > json_integer_value(hi)) {
		call_error(call, RPC_QUERY, NULL,
			   "%s is empty: min %lld > max %lld", name,
			   (long long)json_integer_value(lo),
			   (long long)json_integer_value(hi));
		return false;
	}
	/* Bounds beyond int just match nothing beyond the domain. */
	out->min = json_integer_value(lo) < INT32_MIN
			   ? INT32_MIN
			   : (json_integer_value(lo) > INT32_MAX
				      ? INT32_MAX
				      : (int)json_integer_value(lo));
	out->max = json_integer_value(hi) > INT32_MAX
			   ? INT32_MAX
			   : (json_integer_value(hi) < INT32_MIN
				      ? INT32_MIN
				      : (int)json_integer_value(hi));
	return true;
}

static int decision_query_range(struct call *call)
{
	static const char *const allowed[] = {"x_range", "y_range", "z_range",
					      "limit",	 "after",   NULL};
	struct axis_range x, y, z;
	struct coord after;
	json_t *after_v = json_object_get(call->params, "after");
	int64_t limit = 0;
	const struct record **recs;
	size_t n;
	char msg[VMEM_ERRMSG_LEN];

	if (!only_members(call, allowed) || !get_range(call, "x_range", &x) ||
	    !get_range(call, "y_range", &y) ||
	    !get_range(call, "z_range", &z) ||
	    !get_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		return CALL_DONE;
	if (after_v && !json_is_null(after_v) &&
	    coord_from_json(after_v, call->d->limits.max_x, &after, msg) != 0) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL, "after: %s",
			   msg);
		return CALL_DONE;
	}
	if (query_range(&call->d->store.index, &x, &y, &z,
			after_v && !json_is_null(after_v) ? &after : NULL,
			(size_t)limit, &recs, &n) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	reply_records(call, recs, n);
	free(recs);
	return CALL_DONE;
}

/* A required (or, with def > 0, optional) threshold integer in
 * [1, max]; anything else is a CoordinateValidationError. */
static bool get_threshold(struct call *call, const char *name, int max, int def,
			  int *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v && def > 0) {
		*out = def == INT32_MAX ? 0 : def;
		return true;
	}
	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: %s", name);
		return false;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > max) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL,
			   "%s must be an integer in 1..%d", name, max);
		return false;
	}
	*out = (int)json_integer_value(v);
	return true;
}

static int decision_query_partial_order(struct call *call)
{
	static const char *const allowed[] = {"x_threshold", "y_threshold",
					      "z_filter", NULL};
	int max_x = call->d->limits.max_x;
	int xt, yt, zf;
	const struct record **recs;
	size_t n;

	if (!only_members(call, allowed) ||
	    !get_threshold(call, "x_threshold", max_x + 1, 0, &xt) ||
	    !get_threshold(call, "y_threshold", VMEM_MAX_Y + 1, 0, &yt) ||
	    !get_threshold(call, "z_filter", VMEM_MAX_Z, INT32_MAX, &zf))
		return CALL_DONE;
	if (query_before(&call->d->store.index, xt, yt, zf, &recs, &n) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	reply_records(call, recs, n);
	free(recs);
	return CALL_DONE;
}

/* One search hit: the decision with "score" and "matched_terms" added;
 * a term repeated (after folding) is listed once, as first given. */
static bool append_hit(struct buf *b, const struct record *r,
		       const struct search_hit *h, uint64_t unique,
		       char *const *term_json, size_t n_terms)
{
	char score[48];
	bool ok, first = true;

	snprintf(score, sizeof(score), ",\"score\":%u,\"matched_terms\":[",
		 h->score);
	ok = buf_append(b, r->json, r->json_len - 1) && buf_puts(b, score);
	for (size_t i = 0; ok && i < n_terms; i++) {
		if (!(h->matched & unique & ((uint64_t)1 << i)))
			continue;
		ok = (first || buf_append(b, ",", 1)) &&
		     buf_puts(b, term_json[i]);
		first = false;
	}
	return ok && buf_append(b, "]}", 2);
}

static int decision_search(struct call *call)
{
	static const char *const allowed[] = {"terms", "match_all", "limit",
					      NULL};
	struct index *ix = &call->d->store.index;
	json_t *terms = json_object_get(call->params, "terms");
	const char *texts[SEARCH_TERMS_MAX];
	size_t lens[SEARCH_TERMS_MAX];
	char *term_json[SEARCH_TERMS_MAX] = {0};
	struct search_query *q = NULL;
	struct search_hit *hits = NULL;
	size_t n_terms, n_hits = 0;
	bool match_all = false, ok = true;
	int64_t limit = 0;
	struct buf b = {0};
	char msg[160];
	int rc;

	if (!only_members(call, allowed) ||
	    !get_bool(call, "match_all", &match_all) ||
	    !get_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		return CALL_DONE;
	if (!terms || !json_is_array(terms)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "terms must be an array of strings");
		return CALL_DONE;
	}
	n_terms = json_array_size(terms);
	if (n_terms > SEARCH_TERMS_MAX) {
		call_error(call, RPC_QUERY, NULL,
			   "at most %d search terms are allowed",
			   SEARCH_TERMS_MAX);
		return CALL_DONE;
	}
	for (size_t i = 0; i < n_terms; i++) {
		json_t *t = json_array_get(terms, i);

		if (!json_is_string(t)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "terms[%zu] must be a string", i);
			return CALL_DONE;
		}
		texts[i] = json_string_value(t);
		lens[i] = json_string_length(t);
	}
	rc = search_query_parse(texts, lens, n_terms, &q, msg, sizeof(msg));
	if (rc < 0) {
		call_error(call, rc == -EINVAL ? RPC_QUERY : RPC_INTERNAL_ERROR,
			   NULL, "%s", rc == -EINVAL ? msg : "out of memory");
		return CALL_DONE;
	}
	if (search_run(ix->search, q, match_all, (size_t)limit, index_text, ix,
		       &hits, &n_hits) < 0)
		ok = false;
	for (size_t i = 0; ok && i < n_terms; i++) {
		term_json[i] = json_dumps(json_array_get(terms, i),
					  JSON_ENCODE_ANY | JSON_COMPACT);
		ok = term_json[i] != NULL;
	}
	ok = ok && buf_append(&b, "[", 1);
	for (size_t i = 0; ok && i < n_hits; i++)
		ok = (i == 0 || buf_append(&b, ",", 1)) &&
		     append_hit(&b, ix->slots[hits[i].slot], &hits[i],
				search_query_unique(q), term_json, n_terms);
	if (ok && buf_append(&b, "]", 1))
		call_reply_raw(call, b.data, b.len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "out of memory searching");
	for (size_t i = 0; i < n_terms; i++)
		free(term_json[i]);
	buf_done(&b);
	free(hits);
	search_query_free(q);
	return CALL_DONE;
}

/* ---- decision writes ---- */

/* A write in progress on behalf of a call. The store may answer inside
 * store_submit (a refusal) or later (after the log sync). */
struct write_call {
	struct store_write w;
	struct call *call;
	bool submitting;
	bool answered;
};

static void write_done(struct store_write *w, int code, const char *msg)
{
	struct write_call *wc = w->data;
	struct call *call = wc->call;

	if (code == RPC_STORAGE)
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	else if (code != 0)
		call_error(call, code, NULL, "%s", msg);
	else if (w->is_delete)
		call_reply(call, json_boolean(w->existed));
	else
		call_reply_raw(call, w->stored->json, w->stored->json_len);
	decision_done(&w->d);
	if (wc->submitting) {
		wc->answered = true;
		return;
	}
	free(wc);
	call_complete(call);
}

static int submit(struct write_call *wc)
{
	wc->w.done = write_done;
	wc->w.data = wc;
	wc->submitting = true;
	store_submit(&wc->call->d->store, &wc->w);
	wc->submitting = false;
	if (!wc->answered)
		return CALL_ASYNC;
	free(wc);
	return CALL_DONE;
}

static struct write_call *write_call_new(struct call *call)
{
	struct write_call *wc = calloc(1, sizeof(*wc));

	if (!wc)
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	else
		wc->call = call;
	return wc;
}

/* Common write params: coordinate, if_version, timeout_ms. */
static bool get_write_params(struct call *call, struct store_write *w)
{
	int64_t timeout = TIMEOUT_DEFAULT_MS;

	if (!get_coord(call, &w->coord) ||
	    !get_int(call, "if_version", 1, INT64_MAX, &w->if_version) ||
	    !get_int(call, "timeout_ms", 0, TIMEOUT_MAX_MS, &timeout))
		return false;
	w->timeout_ms = (uint64_t)timeout;
	return true;
}

static bool get_store_params(struct call *call, struct store_write *w)
{
	json_t *content = json_object_get(call->params, "content");
	json_t *ctx = json_object_get(call->params, "issue_context");
	char msg[VMEM_ERRMSG_LEN];
	const char *agent_id;

	if (!get_write_params(call, w) ||
	    !get_bool(call, "overwrite", &w->overwrite) ||
	    !get_agent(call, &agent_id))
		return false;
	if (!content) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: content");
		return false;
	}
	if (!json_is_string(content)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "content must be a string");
		return false;
	}
	if (content_check(json_string_value(content),
			  json_string_length(content), msg) != 0 ||
	    (ctx && issue_context_check(ctx, msg) != 0)) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		return false;
	}
	w->d.content = strdup(json_string_value(content));
	w->d.content_len = json_string_length(content);
	w->d.agent_id = strdup(agent_id);
	w->d.issue_context = json_is_object(ctx) ? json_incref(ctx) : NULL;
	if (!w->d.content || !w->d.agent_id) {
		decision_done(&w->d);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return false;
	}
	return true;
}

static int decision_store(struct call *call)
{
	static const char *const allowed[] = {
		"coordinate", "content",    "issue_context", "agent_id",
		"overwrite",  "if_version", "timeout_ms",    NULL};
	struct write_call *wc;

	if (!only_members(call, allowed))
		return CALL_DONE;
	wc = write_call_new(call);
	if (!wc)
		return CALL_DONE;
	if (!get_store_params(call, &wc->w)) {
		free(wc);
		return CALL_DONE;
	}
	return submit(wc);
}

static int decision_delete(struct call *call)
{
	static const char *const allowed[] = {"coordinate", "if_version",
					      "timeout_ms", NULL};
	struct write_call *wc;

	if (!only_members(call, allowed))
		return CALL_DONE;
	wc = write_call_new(call);
	if (!wc)
		return CALL_DONE;
	if (!get_write_params(call, &wc->w)) {
		free(wc);
		return CALL_DONE;
	}
	wc->w.is_delete = true;
	return submit(wc);
}

/* Sorted by name for bsearch. */
static const struct method methods[] = {
	{"decision.delete", decision_delete},
	{"decision.exists", decision_exists},
	{"decision.get", decision_get},
	{"decision.query_partial_order", decision_query_partial_order},
	{"decision.query_range", decision_query_range},
	{"decision.search", decision_search},
	{"decision.store", decision_store},
	{"server.health", server_health},
	{"server.hello", server_hello},
	{"server.shutdown", server_shutdown},
};

static int method_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct method *)elem)->name);
}

const struct method *method_find(const char *name)
{
	return bsearch(name, methods, sizeof(methods) / sizeof(methods[0]),
		       sizeof(methods[0]), method_cmp);
}

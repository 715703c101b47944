/*
 * Experience methods: store and delete go through the store's write path
 * (kinds/experience) and may answer later; get, retrieve, find_similar
 * and stats read the experience index (find/expindex). Results are
 * spliced from the records' kept JSON, never re-serialised.
 */
#include "methods.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"
#include "protocol/experience.h"

#define RETRIEVE_DEFAULT 10
#define SIMILAR_DEFAULT	 5

/* ---- params ---- */

/* The required "id": ValueError when missing or not an experience id. */
static bool param_id(struct call *call, struct expid *out)
{
	json_t *v = json_object_get(call->params, "id");

	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: id");
		return false;
	}
	if (!json_is_string(v) ||
	    expid_parse(json_string_value(v), json_string_length(v), out) < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "id must be an experience id (a UUIDv7: 8-4-4-4-12 "
			   "hex digits)");
		return false;
	}
	return true;
}

/* An optional agent filter: NULL when absent, else checked. */
static bool param_agent_filter(struct call *call, const char **out)
{
	json_t *v = json_object_get(call->params, "agent_id");
	char msg[VMEM_ERRMSG_LEN];

	*out = NULL;
	if (!v)
		return true;
	if (!json_is_string(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "agent_id must be a string");
		return false;
	}
	if (agent_id_check(json_string_value(v), json_string_length(v), msg) !=
	    0) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		return false;
	}
	*out = json_string_value(v);
	return true;
}

/* An optional timestamp (RFC 3339, any offset) in microseconds. */
static bool param_time(struct call *call, const char *name, int64_t *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v || json_is_null(v))
		return true;
	if (!json_is_string(v) ||
	    timestamp_parse_any(json_string_value(v), json_string_length(v),
				out) < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be an RFC 3339 timestamp "
			   "(YYYY-MM-DDTHH:MM:SS[.ffffff][Z|+HH:MM])",
			   name);
		return false;
	}
	return true;
}

/* A text of the record: required, checked as for a new record. */
static bool param_text(struct call *call, enum exp_field f,
		       struct experience *e)
{
	const char *name = exp_field_names[f];
	json_t *v = json_object_get(call->params, name);
	char msg[VMEM_ERRMSG_LEN];

	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: %s", name);
		return false;
	}
	if (!json_is_string(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be a string", name);
		return false;
	}
	if (exp_text_check(f, json_string_value(v), json_string_length(v), true,
			   msg) != 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		return false;
	}
	e->text_len[f] = json_string_length(v);
	e->text[f] = malloc(e->text_len[f] + 1);
	if (!e->text[f]) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return false;
	}
	memcpy(e->text[f], json_string_value(v), e->text_len[f] + 1);
	return true;
}

/* ---- answers ---- */

/* A JSON array of docs' records. */
static void reply_docs(struct call *call, const struct expindex *ix,
		       const uint32_t *docs, size_t n)
{
	struct buf b = {0};
	bool ok = buf_append(&b, "[", 1);

	for (size_t i = 0; ok && i < n; i++)
		ok = (i == 0 || buf_append(&b, ",", 1)) &&
		     expindex_json_append(ix, docs[i], &b);
	if (ok && buf_append(&b, "]", 1))
		call_reply_raw(call, b.data, b.len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(&b);
}

/* ---- reads ---- */

int experience_get(struct call *call)
{
	static const char *const allowed[] = {"id", NULL};
	const struct expindex *ix = &call->d->experiences.ix;
	const struct exp_doc *d;
	struct expid id;
	struct buf b = {0};

	if (!param_only(call, allowed) || !param_id(call, &id))
		return CALL_DONE;
	d = experiences_get(&call->d->experiences, &id);
	if (d)
		call_reply_buf(
			call, &b,
			expindex_json_append(ix, (uint32_t)(d - ix->docs), &b));
	else
		call_reply(call, json_null());
	return CALL_DONE;
}

/* tags: checked as a record's (1..32 distinct strings); *tags borrows
 * the params' strings into a malloc'd array. */
static bool param_tag_filter(struct call *call, const char ***tags, size_t *n)
{
	json_t *v = json_object_get(call->params, "tags");
	char msg[VMEM_ERRMSG_LEN], **copies = NULL;
	size_t count = 0;

	*tags = NULL;
	*n = 0;
	if (!v || json_is_null(v))
		return true;
	if (exp_tags_from_json(v, &copies, &count, msg) != 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		return false;
	}
	for (size_t i = 0; i < count; i++)
		free(copies[i]);
	free(copies);
	if (count == 0)
		return true;
	*tags = malloc(count * sizeof(**tags));
	if (!*tags) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return false;
	}
	for (size_t i = 0; i < count; i++)
		(*tags)[i] = json_string_value(json_array_get(v, i));
	*n = count;
	return true;
}

int experience_retrieve(struct call *call)
{
	static const char *const allowed[] = {
		"agent_id", "limit", "min_importance", "tags",
		"since",    "until", "after",	       NULL};
	struct exp_filter f = {0};
	int64_t limit = RETRIEVE_DEFAULT, min_imp = EXP_IMPORTANCE_MIN;
	json_t *after = json_object_get(call->params, "after");
	struct expid after_id;
	uint32_t *docs;
	size_t n;

	f.since = INT64_MIN;
	f.until = INT64_MAX;
	if (!param_only(call, allowed) || !param_agent(call, &f.agent) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_int(call, "min_importance", EXP_IMPORTANCE_MIN,
		       EXP_IMPORTANCE_MAX, &min_imp) ||
	    !param_time(call, "since", &f.since) ||
	    !param_time(call, "until", &f.until))
		return CALL_DONE;
	if (after && !json_is_null(after)) {
		if (!json_is_string(after) ||
		    expid_parse(json_string_value(after),
				json_string_length(after), &after_id) < 0) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "after must be an experience id (a "
				   "UUIDv7)");
			return CALL_DONE;
		}
		f.after = &after_id;
	}
	if (f.since > f.until) {
		call_error(call, RPC_QUERY, NULL,
			   "since is later than until: the range is empty");
		return CALL_DONE;
	}
	if (!param_tag_filter(call, (const char ***)&f.tags, &f.n_tags))
		return CALL_DONE;
	f.agent_len = strlen(f.agent);
	f.min_importance = (int)min_imp;
	docs = malloc((size_t)limit * sizeof(*docs));
	if (!docs) {
		free((void *)f.tags);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	n = expindex_retrieve(&call->d->experiences.ix, &f, docs,
			      (size_t)limit);
	reply_docs(call, &call->d->experiences.ix, docs, n);
	free(docs);
	free((void *)f.tags);
	return CALL_DONE;
}

/* One hit: the record with "score" and "matched_terms" spliced in. */
static bool append_hit(struct buf *b, const struct expindex *ix,
		       const struct exp_similar *h, const char *const *terms,
		       size_t n_terms)
{
	char score[64];
	json_t *matched = json_array();
	char *m = NULL;
	bool ok;

	for (size_t i = 0; matched && i < n_terms; i++)
		if ((h->matched >> i) & 1 &&
		    json_array_append_new(matched, json_string(terms[i])) < 0) {
			json_decref(matched);
			matched = NULL;
		}
	if (matched)
		m = json_dumps(matched, JSON_COMPACT);
	json_decref(matched);
	snprintf(score, sizeof(score),
		 ",\"score\":%.6g,\"matched_terms\":", h->score);
	ok = m && expindex_json_append(ix, h->doc, b);
	if (ok)
		b->len--; /* the record's closing '}' */
	ok = ok && buf_puts(b, score) && buf_puts(b, m) &&
	     buf_append(b, "}", 1);
	free(m);
	return ok;
}

/*
 * find_similar: the ranking of the context; with after (a result's id),
 * the results ranked after it, among the first RESULTS_LIMIT_MAX.
 */
int experience_find_similar(struct call *call)
{
	static const char *const allowed[] = {"agent_id", "context",
					      "limit",	  "min_importance",
					      "after",	  NULL};
	json_t *ctx = json_object_get(call->params, "context");
	json_t *after = json_object_get(call->params, "after");
	struct expid after_id;
	size_t first = 0;
	struct expindex *ix = &call->d->experiences.ix;
	int64_t limit = SIMILAR_DEFAULT, min_imp = EXP_IMPORTANCE_MIN;
	const char *agent, *terms[BM25_TERMS_MAX];
	struct bm25_query *q = NULL;
	struct exp_similar *hits = NULL;
	size_t n = 0, n_terms = 0;
	struct buf b = {0};
	char msg[256];
	bool ok;
	int rc;

	if (!param_only(call, allowed) || !param_agent_filter(call, &agent) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_int(call, "min_importance", EXP_IMPORTANCE_MIN,
		       EXP_IMPORTANCE_MAX, &min_imp))
		return CALL_DONE;
	if (!ctx) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: context");
		return CALL_DONE;
	}
	if (!json_is_string(ctx) || json_string_length(ctx) > EXP_TEXT_MAX) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "context must be a string of at most %d bytes",
			   EXP_TEXT_MAX);
		return CALL_DONE;
	}
	if (after && !json_is_null(after) &&
	    (!json_is_string(after) ||
	     expid_parse(json_string_value(after), json_string_length(after),
			 &after_id) < 0)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "after must be an experience id (a UUIDv7)");
		return CALL_DONE;
	}
	rc = bm25_query_parse(json_string_value(ctx), json_string_length(ctx),
			      &q, msg, sizeof(msg));
	if (rc == -EINVAL) {
		call_error(call, RPC_QUERY, NULL, "%s", msg);
		return CALL_DONE;
	}
	if (rc == 0)
		rc = expindex_similar(
			ix, q, agent, agent ? strlen(agent) : 0, (int)min_imp,
			after && !json_is_null(after) ? RESULTS_LIMIT_MAX
						      : (size_t)limit,
			&hits, &n, terms, &n_terms);
	if (rc == 0 && after && !json_is_null(after)) {
		first = n; /* not among them: nothing after it */
		for (size_t i = 0; i < n; i++)
			if (expid_cmp(&ix->docs[hits[i].doc].id, &after_id) ==
			    0)
				first = i + 1;
		if (n > first + (size_t)limit)
			n = first + (size_t)limit;
	}
	ok = rc == 0 && buf_append(&b, "[", 1);
	for (size_t i = first; ok && i < n; i++)
		ok = (i == first || buf_append(&b, ",", 1)) &&
		     append_hit(&b, ix, &hits[i], terms, n_terms);
	if (ok && buf_append(&b, "]", 1))
		call_reply_raw(call, b.data, b.len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(&b);
	free(hits);
	bm25_query_free(q);
	return CALL_DONE;
}

/* {name: count, ...} of a stats list. */
static json_t *counts_json(const struct exp_count *c, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < n; i++)
		if (json_object_set_new(o, c[i].name,
					json_integer((json_int_t)c[i].count)) <
		    0) {
			json_decref(o);
			o = NULL;
		}
	return o;
}

static json_t *time_json(int64_t usec, bool set)
{
	char ts[VMEM_TIMESTAMP_LEN + 1];

	if (!set)
		return json_null();
	timestamp_format(usec, ts);
	return json_string(ts);
}

int experience_stats(struct call *call)
{
	static const char *const allowed[] = {"agent_id", NULL};
	struct exp_stats st;
	const char *agent;
	json_t *out;

	if (!param_only(call, allowed) || !param_agent_filter(call, &agent))
		return CALL_DONE;
	if (expindex_stats(&call->d->experiences.ix, agent,
			   agent ? strlen(agent) : 0, &st) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	out = json_pack("{s:o,s:I,s:f,s:o,s:o,s:o,s:I}", "agent_id",
			agent ? json_string(agent) : json_null(), "total_count",
			(json_int_t)st.total, "avg_importance",
			st.total ? (double)st.imp_sum / (double)st.total : 0.0,
			"oldest", time_json(st.oldest, st.total > 0), "newest",
			time_json(st.newest, st.total > 0), "tag_distribution",
			counts_json(st.tags, st.n_tags), "tags_total",
			(json_int_t)st.tags_total);
	if (out && !agent &&
	    (json_object_set_new(out, "agents",
				 counts_json(st.agents, st.n_agents)) < 0 ||
	     json_object_set_new(out, "agents_total",
				 json_integer((json_int_t)st.agents_total)) <
		     0)) {
		json_decref(out);
		out = NULL;
	}
	exp_stats_done(&st);
	if (out)
		call_reply(call, out);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	return CALL_DONE;
}

/* ---- writes ---- */

/* A write in progress on behalf of a call. */
struct exp_call {
	struct experience_write ew;
	struct call *call;
	char *by; /* a delete's agent (a copy) */
};

static void exp_call_free(struct exp_call *xc)
{
	experience_write_done(&xc->ew);
	free(xc->by);
	free(xc);
}

static void write_done(struct store_write *w, int code, const char *msg)
{
	struct exp_call *xc = w->data;
	struct experience_write *ew = &xc->ew;
	struct call *call = xc->call;

	if (code == RPC_STORAGE)
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	else if (code != 0)
		call_error(call, code, NULL, "%s", msg);
	else if (ew->is_delete)
		call_reply(call, json_boolean(ew->existed));
	else if (ew->json)
		call_reply_raw(call, ew->json, ew->json_len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "out of memory: the experience is durable and is "
			   "served after a restart");
	exp_call_free(xc);
	call_complete(call);
}

/* notifications/cancelled for a delete still waiting for its id's lock:
 * given up (never logged). */
static bool write_cancel(struct call *call)
{
	struct exp_call *xc = call->cancel_data;

	if (!store_cancel(&call->d->store, &xc->ew.w))
		return false;
	exp_call_free(xc);
	call_error(call, RPC_REQUEST_CANCELLED, NULL,
		   "cancelled while waiting for the experience's lock; "
		   "nothing was deleted");
	call_complete(call);
	return true;
}

static int submit(struct exp_call *xc)
{
	struct call *call = xc->call;

	xc->ew.w.kind = &call->d->experiences.sk;
	xc->ew.w.owner = call->conn;
	xc->ew.w.done = write_done;
	xc->ew.w.data = xc;
	/* Set first: done may run (and free xc) before store_submit
	 * returns, and call_complete then clears it. */
	call->cancel = write_cancel;
	call->cancel_data = xc;
	store_submit(&call->d->store, &xc->ew.w);
	return CALL_ASYNC;
}

int experience_store(struct call *call)
{
	static const char *const allowed[] = {
		"agent_id",   "context",  "action",	"outcome", "tags",
		"importance", "metadata", "timeout_ms", NULL};
	json_t *imp = json_object_get(call->params, "importance");
	json_t *meta = json_object_get(call->params, "metadata");
	json_t *tags = json_object_get(call->params, "tags");
	char msg[VMEM_ERRMSG_LEN];
	struct exp_call *xc;
	struct experience *e;
	const char *agent;
	int rc = 0;

	if (!param_only(call, allowed) || !param_agent(call, &agent))
		return CALL_DONE;
	xc = calloc(1, sizeof(*xc));
	if (!xc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	xc->call = call;
	e = &xc->ew.e;
	e->importance = EXP_IMPORTANCE_DEFAULT;
	if (!param_timeout(call, &xc->ew.w.timeout_ms) ||
	    !param_text(call, EXP_CONTEXT, e) ||
	    !param_text(call, EXP_ACTION, e) ||
	    !param_text(call, EXP_OUTCOME, e))
		goto refused;
	if (imp && !json_is_null(imp))
		rc = exp_importance_from_json(imp, &e->importance, msg);
	if (rc == 0 && tags && !json_is_null(tags))
		rc = exp_tags_from_json(tags, &e->tags, &e->n_tags, msg);
	if (rc == 0 && meta && !json_is_null(meta))
		rc = exp_metadata_check(meta, msg);
	if (rc != 0) {
		call_error(call, rc, NULL, "%s", msg);
		goto refused;
	}
	e->metadata =
		meta && !json_is_null(meta) ? json_incref(meta) : json_object();
	e->agent_id = strdup(agent);
	if (!e->metadata || !e->agent_id) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		goto refused;
	}
	return submit(xc);
refused:
	exp_call_free(xc);
	return CALL_DONE;
}

int experience_delete(struct call *call)
{
	static const char *const allowed[] = {"id", "agent_id", "timeout_ms",
					      NULL};
	struct exp_call *xc;
	const char *agent;

	if (!param_only(call, allowed) || !param_agent(call, &agent))
		return CALL_DONE;
	xc = calloc(1, sizeof(*xc));
	if (!xc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	xc->call = call;
	xc->ew.is_delete = true;
	if (!param_timeout(call, &xc->ew.w.timeout_ms) ||
	    !param_id(call, &xc->ew.id)) {
		exp_call_free(xc);
		return CALL_DONE;
	}
	xc->by = strdup(agent);
	if (!xc->by) {
		exp_call_free(xc);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	xc->ew.by = xc->by;
	return submit(xc);
}

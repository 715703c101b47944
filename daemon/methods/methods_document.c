/*
 * document.*: documents with optional embeddings (kinds/document). Reads
 * (get, semantic_search, temporal_query) answer from the index
 * (find/docindex), bounded before they are built; writes go through the
 * store and answer once durable.
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
#include "uuid.h"

#define TOP_K_DEFAULT	10
#define BETWEEN_DEFAULT 100

static struct documents *docs_of(struct call *call)
{
	return &call->d->documents;
}

/*
 * An embedding member: absent (*v NULL), null (*v NULL, *is_null), or
 * exactly embedding_dim finite numbers into *v (malloc'd, the caller
 * frees).
 */
static bool param_embedding(struct call *call, const char *name, float **v,
			    bool *is_null)
{
	json_t *e = json_object_get(call->params, name);
	uint32_t dim = docs_of(call)->vopts.dim;
	char msg[VMEM_ERRMSG_LEN];

	*v = NULL;
	if (is_null)
		*is_null = e && json_is_null(e);
	if (!e || json_is_null(e))
		return true;
	*v = malloc(dim * sizeof(**v));
	if (!*v) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return false;
	}
	if (rec_embedding_from_json(e, dim, name, *v, msg, sizeof(msg)) < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		free(*v);
		*v = NULL;
		return false;
	}
	return true;
}

/* ---- writes ---- */

struct doc_call {
	struct doc_write dw;
	struct call *call;
	char *meta;    /* owned */
	float *vector; /* owned */
};

static void doc_free(struct doc_call *dc)
{
	free(dc->meta);
	free(dc->vector);
	free(dc);
}

static void write_done(struct store_write *w, int code, const char *msg)
{
	struct doc_call *dc = w->data;
	struct doc_write *dw = &dc->dw;
	struct call *call = dc->call;
	struct buf b = {0};

	if (code == RPC_STORAGE)
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	else if (code != 0)
		call_error(call, code, NULL, "%s", msg);
	else if (dw->op == DOC_DELETE)
		call_reply(call, json_boolean(dw->existed));
	else if (dw->op == DOC_UPDATE && !dw->existed)
		call_reply(call, json_null());
	else if (dw->d)
		call_reply_buf(call, &b,
			       doc_json(&b, &docs_of(call)->ix, dw->d, false, 0,
					false));
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "the write was logged but could not be applied "
			   "(out of memory); a restart recovers it");
	doc_free(dc);
	call_complete(call);
}

static bool write_cancel(struct call *call)
{
	struct doc_call *dc = call->cancel_data;

	if (!store_cancel(&call->d->store, &dc->dw.w))
		return false;
	doc_free(dc);
	call_error(call, RPC_REQUEST_CANCELLED, NULL,
		   "cancelled while waiting for the document's lock; nothing "
		   "was written");
	call_complete(call);
	return true;
}

static struct doc_call *doc_call_new(struct call *call, enum doc_op op)
{
	struct doc_call *dc = calloc(1, sizeof(*dc));

	if (!dc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return NULL;
	}
	dc->call = call;
	dc->dw.op = op;
	dc->dw.w.kind = &call->d->documents.sk;
	dc->dw.w.owner = call->conn;
	dc->dw.w.done = write_done;
	dc->dw.w.data = dc;
	return dc;
}

static int submit(struct doc_call *dc)
{
	struct call *call = dc->call;

	call->cancel = write_cancel;
	call->cancel_data = dc;
	store_submit(&call->d->store, &dc->dw.w);
	return CALL_ASYNC;
}

/* content (required unless optional), checked. */
static bool get_content(struct call *call, struct doc_write *dw, bool optional)
{
	char msg[VMEM_ERRMSG_LEN];

	if (optional && !json_object_get(call->params, "content"))
		return true;
	if (!param_str(call, "content", &dw->content, &dw->content_len))
		return false;
	if (rec_content_check("content", dw->content_len, msg, sizeof(msg)) <
	    0) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		return false;
	}
	dw->has_content = true;
	return true;
}

int document_store(struct call *call)
{
	static const char *const allowed[] = {"content", "metadata",
					      "embedding", "timeout_ms", NULL};
	json_t *meta = json_object_get(call->params, "metadata");
	struct doc_call *dc;

	if (!param_only(call, allowed))
		return CALL_DONE;
	dc = doc_call_new(call, DOC_STORE);
	if (!dc)
		return CALL_DONE;
	if (!param_timeout(call, &dc->dw.w.timeout_ms) ||
	    !get_content(call, &dc->dw, false) ||
	    !param_meta(call, "metadata", &dc->meta, &dc->dw.meta_len) ||
	    !param_embedding(call, "embedding", &dc->vector, NULL)) {
		doc_free(dc);
		return CALL_DONE;
	}
	dc->dw.meta = dc->meta;
	dc->dw.embedding = dc->vector;
	call_attr_int(call, "content_length", (int64_t)dc->dw.content_len);
	call_attr_bool(call, "has_embedding", dc->vector != NULL);
	call_attr_keys(call, "metadata_keys", meta);
	return submit(dc);
}

int document_update(struct call *call)
{
	static const char *const allowed[] = {
		"id", "content", "metadata", "embedding", "timeout_ms", NULL};
	struct doc_call *dc;
	bool clear = false;

	if (!param_only(call, allowed))
		return CALL_DONE;
	dc = doc_call_new(call, DOC_UPDATE);
	if (!dc)
		return CALL_DONE;
	if (!param_timeout(call, &dc->dw.w.timeout_ms) ||
	    !param_uuid(call, "id", true, dc->dw.id, dc->dw.key, NULL) ||
	    !get_content(call, &dc->dw, true) ||
	    !param_embedding(call, "embedding", &dc->vector, &clear)) {
		doc_free(dc);
		return CALL_DONE;
	}
	if (json_object_get(call->params, "metadata")) {
		if (!param_meta(call, "metadata", &dc->meta,
				&dc->dw.meta_len)) {
			doc_free(dc);
			return CALL_DONE;
		}
		dc->dw.has_meta = true;
		dc->dw.meta = dc->meta;
	}
	if (!dc->dw.has_content && !dc->dw.has_meta && !dc->vector && !clear) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "nothing to update: give content, metadata or "
			   "embedding");
		doc_free(dc);
		return CALL_DONE;
	}
	dc->dw.embedding = dc->vector;
	dc->dw.clear_embedding = clear;
	call_attr_str(call, "document_id", dc->dw.key, UUID_TEXT_LEN);
	return submit(dc);
}

int document_delete(struct call *call)
{
	static const char *const allowed[] = {"id", "timeout_ms", NULL};
	struct doc_call *dc;

	if (!param_only(call, allowed))
		return CALL_DONE;
	dc = doc_call_new(call, DOC_DELETE);
	if (!dc)
		return CALL_DONE;
	if (!param_timeout(call, &dc->dw.w.timeout_ms) ||
	    !param_uuid(call, "id", true, dc->dw.id, dc->dw.key, NULL)) {
		doc_free(dc);
		return CALL_DONE;
	}
	call_attr_str(call, "document_id", dc->dw.key, UUID_TEXT_LEN);
	return submit(dc);
}

/* ---- reads ---- */

int document_get(struct call *call)
{
	static const char *const allowed[] = {"id", "include_embedding", NULL};
	const struct doc *d;
	uint8_t id[REC_KEY];
	bool with = true;
	struct buf b = {0};

	if (!param_only(call, allowed) ||
	    !param_uuid(call, "id", true, id, NULL, NULL) ||
	    !param_bool(call, "include_embedding", &with))
		return CALL_DONE;
	d = docindex_get(&docs_of(call)->ix, id);
	if (!d) {
		call_reply(call, json_null());
		return CALL_DONE;
	}
	call_reply_buf(call, &b,
		       doc_json(&b, &docs_of(call)->ix, d, false, 0, with));
	return CALL_DONE;
}

static const char *path_name(enum vindex_path p)
{
	static const char *const names[] = {
		[VINDEX_EXACT] = "exact",
		[VINDEX_EXACT_CANDS] = "exact_candidates",
		[VINDEX_GRAPH] = "hnsw",
		[VINDEX_GRAPH_FILTER] = "hnsw_filtered",
		[VINDEX_FALLBACK] = "exact_fallback",
	};

	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}

/* The documents of a result, bounded before they are built. */
static bool docs_json(struct call *call, const struct doc_hit *hits, size_t n,
		      bool scores, bool with_embedding, struct buf *b)
{
	const struct docindex *ix = &docs_of(call)->ix;
	size_t bound = 2;
	bool ok;

	for (size_t i = 0; i < n; i++)
		bound += doc_json_max(ix, hits[i].doc, with_embedding) + 1;
	if (bound > ANSWER_BYTES_MAX) {
		bound = 2;
		for (size_t i = 0; i < n; i++)
			bound += 300 + hits[i].doc->meta_len +
				 json_str_len(hits[i].doc->data,
					      hits[i].doc->content_len) +
				 (with_embedding ? ix->dim * 16u : 0);
		if (bound > ANSWER_BYTES_MAX) {
			call_error(call, RPC_QUERY, NULL,
				   "the %zu documents would take %zu bytes, "
				   "more than %u: ask for fewer",
				   n, bound, ANSWER_BYTES_MAX);
			return false;
		}
	}
	ok = buf_reserve(b, bound) && buf_append(b, "[", 1);
	for (size_t i = 0; ok && i < n; i++)
		ok = (i == 0 || buf_append(b, ",", 1)) &&
		     doc_json(b, ix, hits[i].doc, scores, hits[i].score,
			      with_embedding);
	ok = ok && buf_append(b, "]", 1);
	if (!ok)
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	return ok;
}

int document_semantic_search(struct call *call)
{
	static const char *const allowed[] = {"query_embedding",   "top_k",
					      "metadata_filters",  "exact",
					      "include_embedding", NULL};
	json_t *k = json_object_get(call->params, "top_k");
	int64_t top_k = TOP_K_DEFAULT;
	uint64_t t0 = uv_hrtime();
	bool exact = false, with = false;
	struct doc_hit *hits = NULL;
	enum vindex_path path = VINDEX_EXACT;
	char msg[VMEM_ERRMSG_LEN] = "";
	float *q = NULL;
	json_t *filter;
	size_t n_filter, n = 0;
	struct buf b = {0};
	int ret;

	if (!param_only(call, allowed))
		return CALL_DONE;
	if (k && (!json_is_integer(k) || json_integer_value(k) < 1 ||
		  json_integer_value(k) > VECTOR_TOPK_MAX)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "top_k must be an integer in 1..%u",
			   VECTOR_TOPK_MAX);
		return CALL_DONE;
	}
	if (k)
		top_k = json_integer_value(k);
	if (!json_object_get(call->params, "query_embedding")) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: query_embedding");
		return CALL_DONE;
	}
	if (!param_filters(call, &filter, &n_filter) ||
	    !param_bool(call, "exact", &exact) ||
	    !param_bool(call, "include_embedding", &with) ||
	    !param_embedding(call, "query_embedding", &q, NULL))
		return CALL_DONE;
	if (!q) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "query_embedding must be an array of %u numbers "
			   "(or a string: base64url of as many little-endian "
			   "float32)",
			   docs_of(call)->vopts.dim);
		return CALL_DONE;
	}
	call_attr_int(call, "top_k", top_k);
	call_attr_int(call, "filter_count", (int64_t)n_filter);
	hits = malloc((size_t)top_k * sizeof(*hits));
	if (!hits) {
		free(q);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	ret = docindex_search(&docs_of(call)->ix, q, (size_t)top_k, filter,
			      exact, hits, &n, &path, msg, sizeof(msg));
	free(q);
	if (ret == -EINVAL)
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
	else if (ret < 0)
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	else if (docs_json(call, hits, n, true, with, &b))
		call_reply_raw(call, b.data, b.len);
	call_attr_int(call, "result_count", (int64_t)n);
	call_attr_str(call, "search.path", path_name(path),
		      strlen(path_name(path)));
	call_attr_double(call, "query_time_ms",
			 (double)(uv_hrtime() - t0) / 1e6);
	buf_done(&b);
	free(hits);
	return CALL_DONE;
}

struct between_ctx {
	struct doc_hit *hits;
	size_t n;
};

static bool between_cb(void *arg, const struct doc *d)
{
	struct between_ctx *c = arg;

	c->hits[c->n].doc = d;
	c->hits[c->n++].score = 0;
	return true;
}

int document_temporal_query(struct call *call)
{
	static const char *const allowed[] = {"start",
					      "end",
					      "metadata_filters",
					      "limit",
					      "include_embedding",
					      NULL};
	int64_t start, end, limit = BETWEEN_DEFAULT;
	struct between_ctx c = {NULL, 0};
	json_t *filter;
	size_t n_filter;
	bool with = false;
	struct buf b = {0};
	int ret;

	if (!param_only(call, allowed) ||
	    !param_time_required(call, "start", &start) ||
	    !param_time_required(call, "end", &end) ||
	    !param_filters(call, &filter, &n_filter) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit) ||
	    !param_bool(call, "include_embedding", &with))
		return CALL_DONE;
	if (end < start) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "end is before start");
		return CALL_DONE;
	}
	call_attr_str(
		call, "start_date",
		json_string_value(json_object_get(call->params, "start")),
		json_string_length(json_object_get(call->params, "start")));
	call_attr_str(call, "end_date",
		      json_string_value(json_object_get(call->params, "end")),
		      json_string_length(json_object_get(call->params, "end")));
	call_attr_int(call, "filter_count", (int64_t)n_filter);
	c.hits = malloc((size_t)limit * sizeof(*c.hits));
	if (!c.hits) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	ret = docindex_between(&docs_of(call)->ix, start, end, filter,
			       (size_t)limit, between_cb, &c);
	if (ret == -EINVAL)
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "metadata_filters is beyond the limits of a filter");
	else if (ret < 0)
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	else if (docs_json(call, c.hits, c.n, false, with, &b))
		call_reply_raw(call, b.data, b.len);
	call_attr_int(call, "result_count", (int64_t)c.n);
	buf_done(&b);
	free(c.hits);
	return CALL_DONE;
}

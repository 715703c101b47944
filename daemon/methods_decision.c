/*
 * Single-decision methods: get and exists read the index; store and
 * delete go through the store's write path and may answer later.
 */
#include "methods.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/decision.h"
#include "protocol/errors.h"

#define TIMEOUT_DEFAULT_MS 5000
#define TIMEOUT_MAX_MS	   600000

int decision_get(struct call *call)
{
	static const char *const allowed[] = {"coordinate", NULL};
	const struct record *r;
	struct coord c;

	if (!param_only(call, allowed) || !param_coord(call, &c))
		return CALL_DONE;
	r = index_get(&call->d->store.index, &c);
	if (r)
		call_reply_raw(call, r->json, r->json_len);
	else
		call_reply(call, json_null());
	return CALL_DONE;
}

int decision_exists(struct call *call)
{
	static const char *const allowed[] = {"coordinate", NULL};
	struct coord c;

	if (!param_only(call, allowed) || !param_coord(call, &c))
		return CALL_DONE;
	call_reply(call,
		   json_boolean(index_get(&call->d->store.index, &c) != NULL));
	return CALL_DONE;
}

/* ---- decision writes ---- */

/* A write in progress on behalf of a call; the store answers later, or
 * at once for a refusal (dispatch copes with both). */
struct write_call {
	struct store_write w;
	struct call *call;
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
	free(wc);
	call_complete(call);
}

static int submit(struct write_call *wc)
{
	wc->w.done = write_done;
	wc->w.data = wc;
	store_submit(&wc->call->d->store, &wc->w);
	return CALL_ASYNC;
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

	if (!param_coord(call, &w->coord) ||
	    !param_int(call, "if_version", 1, INT64_MAX, &w->if_version) ||
	    !param_int(call, "timeout_ms", 0, TIMEOUT_MAX_MS, &timeout))
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
	    !param_bool(call, "overwrite", &w->overwrite) ||
	    !param_agent(call, &agent_id))
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

/* A store or a delete: params checked, then handed to the store. */
static int write_method(struct call *call, const char *const *allowed,
			bool is_delete)
{
	struct write_call *wc;
	bool ok;

	if (!param_only(call, allowed))
		return CALL_DONE;
	wc = write_call_new(call);
	if (!wc)
		return CALL_DONE;
	ok = is_delete ? get_write_params(call, &wc->w)
		       : get_store_params(call, &wc->w);
	if (!ok) {
		free(wc);
		return CALL_DONE;
	}
	wc->w.is_delete = is_delete;
	return submit(wc);
}

int decision_store(struct call *call)
{
	static const char *const allowed[] = {
		"coordinate", "content",    "issue_context", "agent_id",
		"overwrite",  "if_version", "timeout_ms",    NULL};

	return write_method(call, allowed, false);
}

int decision_delete(struct call *call)
{
	static const char *const allowed[] = {"coordinate", "if_version",
					      "timeout_ms", NULL};

	return write_method(call, allowed, true);
}

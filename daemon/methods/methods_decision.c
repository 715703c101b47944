/*
 * Single-decision methods: get and exists read the index; store and
 * delete go through the store's write path and may answer later.
 */
#include "methods.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/decision.h"
#include "protocol/errors.h"

int decision_get(struct call *call)
{
	static const char *const allowed[] = {"coordinate", NULL};
	const struct record *r;
	struct coord c;

	if (!param_only(call, allowed) || !param_coord(call, &c))
		return CALL_DONE;
	r = index_get(&call->d->decisions.index, &c);
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
	call_reply(call, json_boolean(index_get(&call->d->decisions.index,
						&c) != NULL));
	return CALL_DONE;
}

/* ---- decision writes ---- */

/* A write in progress on behalf of a call; the store answers later, or
 * at once for a refusal (dispatch copes with both). */
struct write_call {
	struct decision_write dw;
	struct call *call;
};

static void write_done(struct store_write *w, int code, const char *msg)
{
	struct write_call *wc = w->data;
	struct decision_write *dw = &wc->dw;
	struct call *call = wc->call;

	if (code == RPC_STORAGE)
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	else if (code != 0)
		call_error(call, code, NULL, "%s", msg);
	else if (dw->is_delete)
		call_reply(call, json_boolean(dw->existed));
	else
		call_reply_raw(call, dw->stored->json, dw->stored->json_len);
	decision_done(&dw->d);
	free(wc);
	call_complete(call);
}

/* notifications/cancelled for a write still waiting for its lock: it is
 * given up (never logged); once past its lock it completes. */
static bool write_cancel(struct call *call)
{
	struct write_call *wc = call->cancel_data;

	if (!store_cancel(&call->d->store, &wc->dw.w))
		return false;
	decision_done(&wc->dw.d);
	free(wc);
	call_error(call, RPC_REQUEST_CANCELLED, NULL,
		   "cancelled while waiting for the coordinate's lock; "
		   "nothing was written");
	call_complete(call);
	return true;
}

static int submit(struct write_call *wc)
{
	struct call *call = wc->call;

	wc->dw.w.done = write_done;
	wc->dw.w.data = wc;
	/* Set first: done may run (and free wc) before store_submit
	 * returns, and call_complete then clears it. */
	call->cancel = write_cancel;
	call->cancel_data = wc;
	store_submit(&call->d->store, &wc->dw.w);
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

/* What every write names: coordinate and if_version. */
static bool get_target(struct call *call, struct decision_write *w)
{
	return param_coord(call, &w->coord) &&
	       param_int(call, "if_version", 1, INT64_MAX, &w->if_version);
}

/* A store's own members (coordinate, if_version, overwrite, content,
 * issue_context) from call->params; agent_id is the writer's (borrowed,
 * copied here). */
static bool get_store_item(struct call *call, struct decision_write *w,
			   const char *agent_id)
{
	json_t *content = json_object_get(call->params, "content");
	json_t *ctx = json_object_get(call->params, "issue_context");
	char msg[VMEM_ERRMSG_LEN];

	if (!get_target(call, w) ||
	    !param_bool(call, "overwrite", &w->overwrite))
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
	if (content_check_new(json_string_value(content),
			      json_string_length(content), msg) != 0 ||
	    (ctx && issue_context_check(ctx, msg) != 0)) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		return false;
	}
	w->d.content = strdup(json_string_value(content));
	w->d.content_len = json_string_length(content);
	w->d.agent_id = strdup(agent_id);
	w->d.issue_context = json_is_object(ctx) ? json_incref(ctx) : NULL;
	w->w.kind = &call->d->decisions.sk;
	w->w.owner = call->conn;
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
	const char *agent_id = NULL;
	bool ok;

	if (!param_only(call, allowed))
		return CALL_DONE;
	wc = write_call_new(call);
	if (!wc)
		return CALL_DONE;
	ok = param_timeout(call, &wc->dw.w.timeout_ms) &&
	     (is_delete ? get_target(call, &wc->dw)
			: param_agent(call, &agent_id) &&
				  get_store_item(call, &wc->dw, agent_id));
	if (!ok) {
		free(wc);
		return CALL_DONE;
	}
	wc->dw.is_delete = is_delete;
	wc->dw.w.kind = &call->d->decisions.sk;
	wc->dw.w.owner = call->conn;
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

/* ---- decision.store_many ---- */

#define STORE_MANY_MAX 1000

struct many_call {
	struct store_group g;
	struct call *call;
	size_t n_parsed;	   /* items whose decision holds copies */
	struct store_write **ptrs; /* the group's items: &items[i].w */
	struct decision_write items[];
};

static void many_free(struct many_call *mc)
{
	for (size_t i = 0; i < mc->n_parsed; i++)
		decision_done(&mc->items[i].d);
	free(mc);
}

static void many_done(struct store_group *g, int code, const char *msg,
		      size_t failed)
{
	struct many_call *mc = g->data;
	struct call *call = mc->call;
	struct buf out = {0};
	bool ok = true;

	if (code != 0) {
		call->list = "items";
		call->item = failed;
		call_error(call, code,
			   code == RPC_STORAGE
				   ? json_pack("{s:s}", "reason", msg)
				   : NULL,
			   "%s", msg);
	} else {
		for (size_t i = 0; i < g->n && ok; i++) {
			const struct record *r = mc->items[i].stored;

			ok = buf_append(&out, i ? "," : "[", 1) &&
			     buf_append(&out, r->json, r->json_len);
		}
		if (ok && buf_append(&out, "]", 1))
			call_reply_raw(call, out.data, out.len);
		else
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
		buf_done(&out);
	}
	many_free(mc);
	call_complete(call);
}

struct slot_item {
	size_t slot, item;
};

static int cmp_slot_item(const void *a, const void *b)
{
	const struct slot_item *x = a, *y = b;

	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->item < y->item ? -1 : x->item > y->item;
}

/* Refuse a coordinate named twice: the first item repeating an earlier
 * one is the culprit. */
static bool check_distinct(struct call *call, struct many_call *mc)
{
	const struct index *ix = &call->d->decisions.index;
	size_t n = mc->g.n, dup = SIZE_MAX;
	struct slot_item *si = malloc(n * sizeof(*si));

	if (!si) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		si[i].slot = index_slot(ix, &mc->items[i].coord);
		si[i].item = i;
	}
	qsort(si, n, sizeof(*si), cmp_slot_item);
	for (size_t i = 1; i < n; i++)
		if (si[i].slot == si[i - 1].slot &&
		    (i < 2 || si[i - 2].slot != si[i].slot) && si[i].item < dup)
			dup = si[i].item;
	free(si);
	if (dup == SIZE_MAX)
		return true;
	call->list = "items";
	call->item = dup;
	call_error(call, RPC_INVALID_PARAMS, NULL,
		   "(%d, %d, %d) is named by an earlier item",
		   mc->items[dup].coord.x, mc->items[dup].coord.y,
		   mc->items[dup].coord.z);
	return false;
}

/* Each item checked like a decision.store's params, by pointing the
 * call's params at it. */
static bool get_items(struct call *call, json_t *items, struct many_call *mc,
		      const char *agent_id)
{
	static const char *const allowed[] = {"coordinate",    "content",
					      "issue_context", "overwrite",
					      "if_version",    NULL};
	json_t *params = call->params;
	bool ok = true;

	for (size_t i = 0; i < mc->g.n && ok; i++) {
		json_t *item = json_array_get(items, i);

		call->list = "items";
		call->item = i;
		if (!json_is_object(item)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "an item must be an object");
			ok = false;
			break;
		}
		call->params = item;
		ok = param_only(call, allowed) &&
		     get_store_item(call, &mc->items[i], agent_id);
		if (ok)
			mc->n_parsed++;
		call->params = params;
	}
	call->item = SIZE_MAX;
	return ok;
}

int decision_store_many(struct call *call)
{
	static const char *const allowed[] = {"items", "agent_id", "timeout_ms",
					      NULL};
	json_t *items = json_object_get(call->params, "items");
	const char *agent_id;
	struct many_call *mc;
	uint64_t timeout_ms;
	size_t n;

	if (!param_only(call, allowed) || !param_agent(call, &agent_id) ||
	    !param_timeout(call, &timeout_ms))
		return CALL_DONE;
	if (!json_is_array(items) || json_array_size(items) == 0 ||
	    json_array_size(items) > STORE_MANY_MAX) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "items must be an array of 1..%d decisions",
			   STORE_MANY_MAX);
		return CALL_DONE;
	}
	n = json_array_size(items);
	mc = calloc(1, sizeof(*mc) + n * (sizeof(mc->items[0]) +
					  sizeof(mc->ptrs[0])));
	if (!mc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	mc->call = call;
	mc->ptrs = (struct store_write **)(mc->items + n);
	for (size_t i = 0; i < n; i++)
		mc->ptrs[i] = &mc->items[i].w;
	mc->g.items = mc->ptrs;
	mc->g.n = n;
	mc->g.owner = call->conn;
	mc->g.timeout_ms = timeout_ms;
	mc->g.done = many_done;
	mc->g.data = mc;
	if (!get_items(call, items, mc, agent_id) ||
	    !check_distinct(call, mc)) {
		many_free(mc);
		return CALL_DONE;
	}
	store_submit_group(&call->d->store, &mc->g);
	return CALL_ASYNC;
}

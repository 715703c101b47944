/*
 * session.* and message.*: sessions and their messages (kinds/
 * conversation). Reads answer from the index (find/convindex), bounded
 * before they are built; writes go through the store and answer once
 * durable.
 */
#include "methods.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"
#include "uuid.h"

#define HISTORY_DEFAULT 100
#define LIST_DEFAULT	100

static struct convindex *ix_of(struct call *call)
{
	return &call->d->conversations.ix;
}

/* Answer with the JSON text in b, or out of memory. */
/* ---- writes ---- */

struct conv_call {
	struct conv_write cw;
	struct call *call;
	char *meta; /* owned */
};

static void conv_free(struct conv_call *cc)
{
	free(cc->meta);
	free(cc);
}

static void write_done(struct store_write *w, int code, const char *msg)
{
	struct conv_call *cc = w->data;
	struct conv_write *cw = &cc->cw;
	struct call *call = cc->call;
	struct buf b = {0};

	if (code == RPC_STORAGE) {
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	} else if (code != 0) {
		call_error(call, code, NULL, "%s", msg);
	} else if (cw->op == CONV_DELETE_SESSION) {
		call_reply(call, json_boolean(cw->existed));
	} else if (cw->op == CONV_CREATE_SESSION && cw->s) {
		call_reply_buf(call, &b, conv_session_json(&b, cw->s));
	} else if (cw->op == CONV_STORE_MESSAGE && cw->m) {
		call_attr_bool(call, "session_created", cw->created);
		call_reply_buf(call, &b, conv_message_json(&b, cw->m));
	} else {
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "the write was logged but could not be applied "
			   "(out of memory); a restart recovers it");
	}
	conv_free(cc);
	call_complete(call);
}

static bool write_cancel(struct call *call)
{
	struct conv_call *cc = call->cancel_data;

	if (!store_cancel(&call->d->store, &cc->cw.w))
		return false;
	conv_free(cc);
	call_error(call, RPC_REQUEST_CANCELLED, NULL,
		   "cancelled while waiting for the session's lock; nothing "
		   "was written");
	call_complete(call);
	return true;
}

static struct conv_call *conv_call_new(struct call *call, enum conv_op op)
{
	struct conv_call *cc = calloc(1, sizeof(*cc));

	if (!cc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return NULL;
	}
	cc->call = call;
	cc->cw.op = op;
	cc->cw.w.kind = &call->d->conversations.sk;
	cc->cw.w.owner = call->conn;
	cc->cw.w.done = write_done;
	cc->cw.w.data = cc;
	return cc;
}

static int submit(struct conv_call *cc)
{
	struct call *call = cc->call;

	call->cancel = write_cancel;
	call->cancel_data = cc;
	store_submit(&call->d->store, &cc->cw.w);
	return CALL_ASYNC;
}

int session_create(struct call *call)
{
	static const char *const allowed[] = {"user_id", "metadata",
					      "timeout_ms", NULL};
	struct conv_call *cc;

	if (!param_only(call, allowed))
		return CALL_DONE;
	cc = conv_call_new(call, CONV_CREATE_SESSION);
	if (!cc)
		return CALL_DONE;
	if (!param_timeout(call, &cc->cw.w.timeout_ms) ||
	    !param_user(call, &cc->cw.user_id, &cc->cw.user_len) ||
	    !param_meta(call, "metadata", &cc->meta, &cc->cw.meta_len)) {
		conv_free(cc);
		return CALL_DONE;
	}
	if (!cc->cw.user_id) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "user_id is required: pass it or call "
			   "server.hello with an agent_id first");
		conv_free(cc);
		return CALL_DONE;
	}
	cc->cw.meta = cc->meta;
	call_attr_str(call, "user_id", cc->cw.user_id, cc->cw.user_len);
	call_attr_keys(call, "metadata_keys",
		       json_object_get(call->params, "metadata"));
	return submit(cc);
}

int message_store(struct call *call)
{
	static const char *const allowed[] = {
		"session_id", "role",	    "content", "metadata",
		"user_id",    "timeout_ms", NULL};
	struct conv_call *cc;
	const char *role;
	size_t role_len;
	char msg[VMEM_ERRMSG_LEN];
	json_t *meta = json_object_get(call->params, "metadata");

	if (!param_only(call, allowed))
		return CALL_DONE;
	cc = conv_call_new(call, CONV_STORE_MESSAGE);
	if (!cc)
		return CALL_DONE;
	if (!param_timeout(call, &cc->cw.w.timeout_ms) ||
	    !param_uuid(call, "session_id", true, cc->cw.session, cc->cw.key,
			NULL) ||
	    !param_str(call, "role", &role, &role_len) ||
	    !param_str(call, "content", &cc->cw.content, &cc->cw.content_len) ||
	    !param_user(call, &cc->cw.user_id, &cc->cw.user_len) ||
	    !param_meta(call, "metadata", &cc->meta, &cc->cw.meta_len)) {
		conv_free(cc);
		return CALL_DONE;
	}
	cc->cw.meta = cc->meta;
	cc->cw.role = rec_role_parse(role, role_len);
	if (cc->cw.role < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "role must be user, assistant or system (got "
			   "\"%.40s\")",
			   role);
		conv_free(cc);
		return CALL_DONE;
	}
	if (rec_content_check("content", cc->cw.content_len, msg, sizeof(msg)) <
	    0) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
		conv_free(cc);
		return CALL_DONE;
	}
	call_attr_str(call, "session_id", cc->cw.key, UUID_TEXT_LEN);
	call_attr_str(call, "role", role, role_len);
	call_attr_int(call, "content_length", (int64_t)cc->cw.content_len);
	call_attr_keys(call, "metadata_keys", meta);
	call_attr_bool(call, "has_metadata",
		       json_is_object(meta) && json_object_size(meta) > 0);
	return submit(cc);
}

int session_delete(struct call *call)
{
	static const char *const allowed[] = {"session_id", "timeout_ms", NULL};
	struct conv_call *cc;

	if (!param_only(call, allowed))
		return CALL_DONE;
	cc = conv_call_new(call, CONV_DELETE_SESSION);
	if (!cc)
		return CALL_DONE;
	if (!param_timeout(call, &cc->cw.w.timeout_ms) ||
	    !param_uuid(call, "session_id", true, cc->cw.session, cc->cw.key,
			NULL)) {
		conv_free(cc);
		return CALL_DONE;
	}
	call_attr_str(call, "session_id", cc->cw.key, UUID_TEXT_LEN);
	return submit(cc);
}

/* ---- reads ---- */

int session_get(struct call *call)
{
	static const char *const allowed[] = {"session_id", NULL};
	const struct conv_session *s;
	uint8_t id[REC_KEY];
	struct buf b = {0};

	if (!param_only(call, allowed) ||
	    !param_uuid(call, "session_id", true, id, NULL, NULL))
		return CALL_DONE;
	s = convindex_session(ix_of(call), id);
	if (!s) {
		call_reply(call, json_null());
		return CALL_DONE;
	}
	call_reply_buf(call, &b, conv_session_json(&b, s));
	return CALL_DONE;
}

struct list_ctx {
	struct buf *b; /* NULL: only count the bytes */
	size_t left, n, bytes;
	bool ok;
};

static bool list_cb(void *arg, const struct conv_session *s)
{
	struct list_ctx *l = arg;

	if (!l->b) {
		l->bytes += 200 + s->meta_len +
			    (s->user ? json_str_len(s->user->name, s->user->len)
				     : 4);
		return --l->left > 0;
	}
	l->ok = l->ok && buf_append(l->b, l->n ? "," : "", l->n ? 1 : 0) &&
		conv_session_json(l->b, s);
	l->n++;
	return l->ok && --l->left > 0;
}

int session_list(struct call *call)
{
	static const char *const allowed[] = {"user_id", "limit", "after",
					      NULL};
	json_t *after = json_object_get(call->params, "after");
	json_t *user = json_object_get(call->params, "user_id");
	int64_t limit = LIST_DEFAULT, after_at = 0;
	uint8_t after_id[REC_KEY] = {0};
	struct buf b = {0};
	struct list_ctx l = {NULL, 0, 0, 2, true};
	json_t *params = call->params;
	bool has_after = after && !json_is_null(after), ok;
	const char *u = NULL;
	size_t ulen = 0;

	if (!param_only(call, allowed) ||
	    !param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		return CALL_DONE;
	if (user && !json_is_null(user)) {
		if (!json_is_string(user)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "user_id must be a string");
			return CALL_DONE;
		}
		u = json_string_value(user);
		ulen = json_string_length(user);
	}
	if (has_after) {
		/* The last session of the previous page: its updated_at and
		 * id (the whole session object will do). */
		if (!json_is_object(after)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "after must be an object {updated_at, id} "
				   "(the last session of the previous page)");
			return CALL_DONE;
		}
		call->params = after;
		ok = param_time_required(call, "updated_at", &after_at) &&
		     param_uuid(call, "id", true, after_id, NULL, NULL);
		call->params = params;
		if (!ok)
			return CALL_DONE;
	}
	/* Bounded before it is built: a first walk counts the bytes. */
	l.left = (size_t)limit;
	convindex_list(ix_of(call), u, ulen, has_after, after_at, after_id,
		       list_cb, &l);
	if (l.bytes > ANSWER_BYTES_MAX) {
		call_error(call, RPC_QUERY, NULL,
			   "the answer would pass %u bytes: ask for fewer "
			   "sessions (limit)",
			   ANSWER_BYTES_MAX);
		return CALL_DONE;
	}
	l.b = &b;
	l.left = (size_t)limit;
	ok = buf_reserve(&b, l.bytes) && buf_append(&b, "[", 1);
	convindex_list(ix_of(call), u, ulen, has_after, after_at, after_id,
		       list_cb, &l);
	call_reply_buf(call, &b, ok && l.ok && buf_append(&b, "]", 1));
	return CALL_DONE;
}

int message_history(struct call *call)
{
	static const char *const allowed[] = {"session_id", "limit", NULL};
	json_t *lim = json_object_get(call->params, "limit");
	const struct conv_session *s;
	uint8_t id[REC_KEY];
	char text[UUID_TEXT_LEN + 1];
	int64_t limit = HISTORY_DEFAULT;
	size_t from, bound = 2;
	struct buf b = {0};
	bool ok;

	if (!param_only(call, allowed) ||
	    !param_uuid(call, "session_id", true, id, text, NULL))
		return CALL_DONE;
	if (lim && (!json_is_integer(lim) || json_integer_value(lim) <= 0)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "limit must be a positive integer");
		return CALL_DONE;
	}
	if (!param_int(call, "limit", 1, RESULTS_LIMIT_MAX, &limit))
		return CALL_DONE;
	call_attr_str(call, "session_id", text, UUID_TEXT_LEN);
	call_attr_int(call, "limit", limit);
	s = convindex_session(ix_of(call), id);
	if (!s || s->n_msgs == 0) {
		call_attr_int(call, "result_count", 0);
		call_reply(call, json_array());
		return CALL_DONE;
	}
	from = s->n_msgs > (uint64_t)limit ? s->n_msgs - (size_t)limit : 0;
	/* Bounded before it is built. */
	for (size_t i = from; i < s->n_msgs; i++)
		bound += conv_message_json_max(s->msgs[i]) + 1;
	if (bound > ANSWER_BYTES_MAX) {
		call_error(call, RPC_QUERY, NULL,
			   "the %zu messages would take %zu bytes, more than "
			   "%u: ask for fewer (limit)",
			   s->n_msgs - from, bound, ANSWER_BYTES_MAX);
		return CALL_DONE;
	}
	ok = buf_reserve(&b, bound) && buf_append(&b, "[", 1) &&
	     conv_messages_json(&b, s, from, s->n_msgs);
	call_attr_int(call, "result_count", (int64_t)(s->n_msgs - from));
	call_reply_buf(call, &b, ok && buf_append(&b, "]", 1));
	return CALL_DONE;
}

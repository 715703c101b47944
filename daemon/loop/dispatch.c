/*
 * Line dispatch. A job is one line: a single request or a batch, run one
 * request at a time in order; the job keeps the parsed document, a
 * reference on the connection, and the responses collected so far. A batch
 * is answered as one array line, joined from the per-request response
 * lines, and not at all when every element was a notification.
 *
 * A handler may also run another method's handler on a nested call
 * (call_forward: MCP's tools/call runs decision.store and the like): the
 * nested call's answer is captured in its struct forward instead of being
 * collected, and its completion, now or later, answers the outer call.
 *
 * An answer in slices (call_reply_slices) is written to the connection
 * piece by piece as its producer makes them: the batch's answers before
 * it are sent first, then its head, its pieces, its tail; the job keeps
 * collecting the answers after it (opened: its "[" is sent already). A
 * forwarded call's pieces are gathered and answered whole.
 */
#include "dispatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "conn.h"
#include "daemon.h"
#include "log.h"
#include "methods.h"
#include "protocol/errors.h"
#include "protocol/fastreq.h"
#include "protocol/jsonrpc.h"
#include "server.h"
#include "trace.h"

/* A forwarded call: the nested call run for an outer one, and its answer
 * as captured (code 0 with result, or an error). */
struct forward {
	struct call call;
	struct call *outer;
	call_answer_fn transform;
	void *ctx;	/* for the transform */
	json_t *params; /* owned; the nested call borrows it */
	bool answered;
	int code;
	json_t *result; /* owned */
	char *message;	/* owned */
	json_t *data;	/* owned */
};

struct job {
	struct conn *conn;
	json_t *doc;
	bool batch;
	bool opened;	/* a batch's "[" and answers before out are sent */
	bool cancelled; /* notifications/cancelled named it while it waited */
	size_t n, next;
	struct call call;
	struct buf out; /* "[r1,r2" for a batch, the response for a single */
	struct job *prev, *next_waiting; /* the connection's waiting jobs */
};

/* An answer in slices (see call_reply_slices), on its connection's list
 * (c->slices) while it runs. It is written as it is produced on a
 * connection answered in order; it is gathered and answered whole for a
 * forwarded call, or on a connection answered out of order (another
 * answer could come out in the middle of its line). */
struct slices {
	struct call *call;
	call_produce_fn produce;
	void (*release)(void *ctx);
	void *ctx;
	struct buf piece; /* produced, not sent yet */
	struct buf whole; /* the result gathered, when it is */
	bool gather;
	bool head_sent;
	bool complete;
	struct slices *next;
};

/* Forget what a forwarded call answered before (a handler answering
 * twice: the last answer wins, as for a sent one). */
static void forward_clear(struct forward *f)
{
	json_decref(f->result);
	json_decref(f->data);
	free(f->message);
	f->result = NULL;
	f->data = NULL;
	f->message = NULL;
	f->code = 0;
	f->answered = false;
}

static void capture_result(struct forward *f, json_t *result)
{
	forward_clear(f);
	f->answered = true;
	f->result = result;
}

static void capture_error(struct forward *f, int code, json_t *data,
			  const char *msg)
{
	forward_clear(f);
	f->answered = true;
	f->code = code;
	f->data = data;
	f->message = strdup(msg);
	if (!f->message) {
		/* Still an error; the text is lost. */
		f->code = RPC_INTERNAL_ERROR;
	}
}

static void set_response(struct call *call, json_t *msg)
{
	free(call->response);
	call->response = msg ? rpc_dump_line(msg, &call->response_len) : NULL;
	json_decref(msg);
}

void call_reply(struct call *call, json_t *result)
{
	if (!result) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return;
	}
	if (call->fwd) {
		capture_result(call->fwd, result);
		return;
	}
	set_response(call, rpc_result_new(call->id, result));
}

void call_reply_raw(struct call *call, const char *json, size_t len)
{
	if (call->fwd) {
		/* Our own serialisation: it parses unless memory ran out. */
		json_t *v = json_loadb(json, len, JSON_DECODE_ANY, NULL);

		if (!v)
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
		else
			capture_result(call->fwd, v);
		return;
	}
	free(call->response);
	call->response =
		rpc_dump_raw_result(call->id, json, len, &call->response_len);
}

void call_reply_buf(struct call *call, struct buf *b, bool ok)
{
	if (ok)
		call_reply_raw(call, b->data, b->len);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(b);
}

void call_error(struct call *call, int code, json_t *data, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	int n = 0;

	if (call->item != SIZE_MAX) {
		n = snprintf(msg, sizeof(msg), "%s[%zu]: ", call->list,
			     call->item);
		if (!data)
			data = json_object();
		json_object_set_new(data, "index",
				    json_integer((json_int_t)call->item));
	}
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	va_end(ap);
	call->failed = true;
	if (call->span) {
		free(call->span_err);
		call->span_err = strdup(msg);
	}
	if (call->fwd) {
		capture_error(call->fwd, code, data, msg);
		return;
	}
	set_response(call, rpc_error_new(call->id, code, msg, data));
}

/* ---- tracing ---- */

void call_attr_str(struct call *call, const char *key, const char *v,
		   size_t len)
{
	if (call->span)
		span_attr_str(call->span, key, v, len);
}

void call_attr_int(struct call *call, const char *key, int64_t v)
{
	if (call->span)
		span_attr_int(call->span, key, v);
}

void call_attr_double(struct call *call, const char *key, double v)
{
	if (call->span)
		span_attr_double(call->span, key, v);
}

void call_attr_bool(struct call *call, const char *key, bool v)
{
	if (call->span)
		span_attr_bool(call->span, key, v);
}

void call_attr_keys(struct call *call, const char *key, const json_t *obj)
{
	const char *keys[TRACE_ATTRS];
	size_t lens[TRACE_ATTRS], n = 0;
	const char *k;
	json_t *v;

	if (!call->span)
		return;
	json_object_foreach((json_t *)obj, k, v)
	{
		if (n == TRACE_ATTRS)
			break;
		keys[n] = k;
		lens[n++] = strlen(k);
	}
	span_attr_strs(call->span, key, keys, lens, n);
}

/*
 * params._meta (the MCP convention) is the dispatcher's: taken out before
 * the handler sees the params, its traceparent made the parent of the
 * request's span. An unusable traceparent starts a new trace, as W3C
 * Trace Context says. false: the call was answered (a bad _meta).
 */
static bool take_meta(struct call *call, struct trace_ctx *parent,
		      bool *has_parent)
{
	json_t *meta = json_object_get(call->params, "_meta");
	json_t *tp;

	*has_parent = false;
	if (!meta)
		return true;
	if (!json_is_object(meta)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "_meta must be an object");
		return false;
	}
	tp = json_object_get(meta, "traceparent");
	if (json_is_string(tp) &&
	    traceparent_parse(json_string_value(tp), json_string_length(tp),
			      parent) == 0)
		*has_parent = true;
	json_object_del(call->params, "_meta");
	return true;
}

/* The seed's operation name of a span ("memory.store_message" ->
 * "store_message"), else the method; its length in *len (measured on the
 * whole name: gcc's -Wstringop-overread cannot see that a prefix matched
 * and warns on strlen(name + 7) under the sanitizers). */
static const char *operation_of(const char *span_name, size_t *len)
{
	size_t n = strlen(span_name);

	if (n > 7 && memcmp(span_name, "memory.", 7) == 0) {
		*len = n - 7;
		return span_name + 7;
	}
	*len = n;
	return span_name;
}

static void span_begin(struct call *call, const char *method,
		       const struct trace_ctx *parent)
{
	const char *name = trace_span_name(method), *op;
	struct span *sp = calloc(1, sizeof(*sp));
	size_t op_len;

	if (!sp)
		return; /* the request goes on untraced */
	span_start(sp, name, parent, trace_now_ns());
	op = operation_of(name, &op_len);
	span_attr_str(sp, "operation.type", op, op_len);
	span_attr_str(sp, "rpc.method", method, strlen(method));
	span_attr_str(sp, "db.system", "vmem", 4);
	call->span = sp;
}

static void span_end(struct call *call)
{
	struct span *sp = call->span;

	if (!sp)
		return;
	span_attr_bool(sp, "operation.success", !call->failed);
	trace_sink_emit(call->d->trace, sp, trace_now_ns(),
			call->failed
				? (call->span_err ? call->span_err : "error")
				: NULL);
	span_done(sp);
	free(sp);
	free(call->span_err);
	call->span = NULL;
	call->span_err = NULL;
}

/* Move the current call's response into the job's output. */
static void collect(struct job *j)
{
	struct call *call = &j->call;
	bool ok = true;

	if (call->method != SIZE_MAX)
		stats_record(&call->d->stats, call->method,
			     uv_hrtime() - call->started_ns, call->failed);
	span_end(call);
	/* A cancelled request is not answered where answers may come out
	 * of order (MCP: the client has forgotten the id). */
	if (j->cancelled && !j->batch && j->conn->max_inflight > 1) {
		free(call->response);
		call->response = NULL;
	}
	if (call->response && call->id) {
		size_t len = call->response_len;

		if (len > 0 && call->response[len - 1] == '\n')
			len--;
		if (j->batch)
			ok = buf_append(&j->out,
					j->out.len || j->opened ? "," : "[", 1);
		ok = ok && buf_append(&j->out, call->response, len);
		if (!ok)
			log_err("out of memory collecting a response");
	}
	free(call->response);
	call->response = NULL;
	call->response_len = 0;
}

static void job_free(struct job *j)
{
	if (j->call.span) {
		span_done(j->call.span);
		free(j->call.span);
	}
	free(j->call.span_err);
	json_decref(j->doc);
	free(j->call.response);
	buf_done(&j->out);
	conn_unref(j->conn);
	free(j);
}

/* Send the job's output and free it. */
static void job_finish(struct job *j)
{
	if (j->out.len > 0 || (j->batch && j->opened)) {
		if (j->batch)
			buf_append(&j->out, "]", 1);
		buf_append(&j->out, "\n", 1);
		conn_send(j->conn, j->out.data, j->out.len);
	}
	job_free(j);
}

static json_t *empty_params(void)
{
	static json_t *empty;

	if (!empty)
		empty = json_object();
	return empty;
}

/* Run one request of the job. Returns CALL_ASYNC if it continues later. */
static int run_one(struct job *j, json_t *elem)
{
	struct call *call = &j->call;
	struct rpc_request req;
	const struct method *m;
	struct trace_ctx parent;
	bool has_parent;
	int rc;

	call->method = SIZE_MAX;
	call->item = SIZE_MAX;
	call->failed = false;
	call->cancel = NULL;
	call->cancel_data = NULL;
	rpc_request_check(elem, &req);
	call->id = req.notification ? NULL : (req.id ? req.id : json_null());
	call->params = req.params ? req.params : empty_params();
	if (req.error) {
		/* An invalid request is answered, with a null id if it had no
		 * valid one; a notification with bad params is not. */
		if (!req.notification)
			call->id = req.id ? req.id : json_null();
		call_error(call, req.error, NULL, "%s", req.error_msg);
		return CALL_DONE;
	}
	m = method_find(req.method);
	if (!m) {
		call_error(call, RPC_METHOD_NOT_FOUND, NULL,
			   "method not found: %.200s", req.method);
		return CALL_DONE;
	}
	call->method = method_index(m);
	call->started_ns = uv_hrtime();
	if (!take_meta(call, &parent, &has_parent))
		return CALL_DONE;
	if (call->d->trace)
		span_begin(call, req.method, has_parent ? &parent : NULL);
	call->in_handler = true;
	call->completed_early = false;
	rc = m->handler(call);
	call->in_handler = false;
	return rc == CALL_ASYNC && call->completed_early ? CALL_DONE : rc;
}

/* Run the remaining requests; returns true when the job is finished. */
static bool job_run(struct job *j)
{
	/* Once the connection is closing nobody is left to answer: the rest
	 * of a batch is dropped rather than run (the store may be closing). */
	while (j->next < j->n && !j->conn->closing) {
		json_t *elem =
			j->batch ? json_array_get(j->doc, j->next) : j->doc;

		j->next++;
		if (run_one(j, elem) == CALL_ASYNC)
			return false;
		collect(j);
	}
	job_finish(j);
	return true;
}

static void forward_free(struct forward *f)
{
	forward_clear(f);
	json_decref(f->params);
	free(f);
}

/* The nested call has answered: let the transform answer the outer call
 * from it, and free the nested call. */
static void forward_finish(struct forward *f)
{
	struct call_answer ans = {0};

	ans.ctx = f->ctx;
	if (!f->answered) {
		ans.code = RPC_INTERNAL_ERROR;
		ans.message = "the forwarded method gave no answer";
	} else {
		ans.code = f->code;
		ans.result = f->result;
		ans.message =
			f->code ? (f->message ? f->message : "out of memory")
				: NULL;
		ans.data = f->data;
		ans.ctx = f->ctx;
	}
	f->transform(f->outer, &ans);
	forward_free(f);
}

/* The outer call's cancel: that of the nested call, if it has one. */
static bool forward_cancel(struct call *call)
{
	struct forward *f = call->cancel_data;

	return f->call.cancel && f->call.cancel(&f->call);
}

int call_forward(struct call *call, int (*handler)(struct call *),
		 json_t *params, call_answer_fn transform, void *ctx)
{
	struct forward *f = NULL;
	int rc;

	if (!params || !json_is_object(params) ||
	    !(f = calloc(1, sizeof(*f)))) {
		struct call_answer ans = {.code = RPC_INTERNAL_ERROR,
					  .message = "out of memory",
					  .ctx = ctx};

		/* The transform answers, and releases ctx. */
		json_decref(params);
		transform(call, &ans);
		return CALL_DONE;
	}
	f->outer = call;
	f->transform = transform;
	f->ctx = ctx;
	f->params = params;
	f->call.job = call->job;
	f->call.d = call->d;
	f->call.conn = call->conn;
	f->call.id = json_null(); /* answered as a request */
	f->call.params = params;
	f->call.method = SIZE_MAX; /* only the outer call is counted */
	f->call.started_ns = uv_hrtime();
	f->call.item = SIZE_MAX;
	f->call.fwd = f;
	f->call.in_handler = true;
	rc = handler(&f->call);
	f->call.in_handler = false;
	if (rc == CALL_ASYNC && !f->call.completed_early) {
		call->cancel = forward_cancel;
		call->cancel_data = f;
		return CALL_ASYNC;
	}
	forward_finish(f);
	return CALL_DONE;
}

/* The connection's list of waiting jobs. */
static void job_wait(struct job *j)
{
	struct conn *c = j->conn;

	j->prev = NULL;
	j->next_waiting = c->waiting;
	if (c->waiting)
		c->waiting->prev = j;
	c->waiting = j;
	c->inflight++;
	if (c->inflight >= c->max_inflight)
		c->busy = true;
}

static void job_unwait(struct job *j)
{
	struct conn *c = j->conn;

	if (j->prev)
		j->prev->next_waiting = j->next_waiting;
	else
		c->waiting = j->next_waiting;
	if (j->next_waiting)
		j->next_waiting->prev = j->prev;
	c->inflight--;
}

bool call_cancelled(const struct call *call)
{
	return call->job && call->job->cancelled;
}

bool dispatch_cancel(struct conn *c, const json_t *request_id)
{
	struct job *j;
	struct call *call;

	for (j = c->waiting; j; j = j->next_waiting)
		if (!j->batch && j->call.id && !j->cancelled &&
		    json_equal(j->call.id, (json_t *)request_id))
			break;
	if (!j)
		return false;
	j->cancelled = true;
	call = &j->call;
	/* The handler answers and completes the call when it gives up; the
	 * job may be gone after this. */
	if (call->cancel)
		call->cancel(call);
	return true;
}

void call_complete(struct call *call)
{
	struct job *j = call->job;
	struct conn *c = j->conn;

	call->cancel = NULL;
	call->cancel_data = NULL;
	if (call->in_handler) {
		call->completed_early = true;
		return;
	}
	if (call->fwd) {
		/* A nested call finished later: answer the outer one, which
		 * went asynchronous, and continue its line. */
		struct call *outer = call->fwd->outer;

		forward_finish(call->fwd);
		call_complete(outer);
		return;
	}
	collect(j);
	conn_ref(c);
	job_unwait(j);
	if (job_run(j))
		conn_resume(c);
	else
		job_wait(j);
	conn_unref(c);
}

static void slices_free(struct conn *c, struct slices *s)
{
	struct slices **p = &c->slices;

	while (*p && *p != s)
		p = &(*p)->next;
	if (*p)
		*p = s->next;
	s->release(s->ctx);
	buf_done(&s->piece);
	buf_done(&s->whole);
	free(s);
}

int call_reply_slices(struct call *call, call_produce_fn produce,
		      void (*release)(void *ctx), void *ctx)
{
	struct slices *s = calloc(1, sizeof(*s));
	struct conn *c = call->conn;
	int rc;

	if (!s) {
		release(ctx);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	s->call = call;
	s->produce = produce;
	s->release = release;
	s->ctx = ctx;
	s->gather = call->fwd || c->max_inflight > 1;
	rc = produce(call, ctx, &s->piece);
	if (rc != 0) {
		if (rc == 1)
			call_reply_raw(call, s->piece.data, s->piece.len);
		else
			call_error(call, RPC_INTERNAL_ERROR, NULL, "%s",
				   rc == -ENOMEM ? "out of memory"
						 : "internal error");
		s->release(s->ctx);
		buf_done(&s->piece);
		free(s);
		return CALL_DONE;
	}
	s->next = c->slices;
	c->slices = s;
	server_slices_soon(c->srv, c);
	return CALL_ASYNC;
}

/* Send the batch's answers so far, then the head of this answer. */
static bool slices_open(struct slices *s)
{
	struct call *call = s->call;
	struct job *j = call->job;
	struct conn *c = j->conn;
	size_t len;
	char *head;

	if (j->batch) {
		if (!buf_append(&j->out, j->out.len || j->opened ? "," : "[",
				1))
			return false;
		conn_send(c, j->out.data, j->out.len);
		j->out.len = 0;
		j->opened = true;
	}
	/* The head is the bytes of an empty result up to the result. */
	head = rpc_dump_raw_result(call->id, "", 0, &len);
	if (!head)
		return false;
	conn_send(c, head, len - 2);
	free(head);
	return true;
}

/* One slice of s: produce and send (or gather) a piece; at the end,
 * answer and complete its call. */
static void slices_run(struct conn *c, struct slices *s)
{
	struct call *call = s->call;
	int rc;

	if (c->closing) {
		slices_free(c, s);
		call_complete(call);
		return;
	}
	if (!s->gather && !s->head_sent) {
		if (!slices_open(s))
			goto broken;
		s->head_sent = true;
	} else if (!s->complete) {
		rc = s->produce(call, s->ctx, &s->piece);
		if (rc < 0)
			goto broken;
		s->complete = rc == 1;
	}
	if (s->piece.len == 0) {
		/* nothing produced this time (a search still evaluating) */
	} else if (s->gather) {
		if (!buf_append(&s->whole, s->piece.data, s->piece.len))
			goto broken;
	} else {
		conn_send(c, s->piece.data, s->piece.len);
	}
	s->piece.len = 0;
	if (!s->complete)
		return;
	if (s->gather)
		call_reply_raw(call, s->whole.data, s->whole.len);
	else
		conn_send(c, "}\n", call->job->batch ? 1 : 2);
	slices_free(c, s);
	call_complete(call);
	return;
broken:
	if (s->gather) {
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "out of memory answering in slices");
	} else {
		/* Part of the line is out: it cannot be answered now. */
		log_err("closing a connection: out of memory in the middle "
			"of an answer");
		conn_close(c);
	}
	slices_free(c, s);
	call_complete(call);
}

void dispatch_run_slice(struct conn *c)
{
	struct slices *s, *next;

	/* Completing one may start another (the next request of a batch),
	 * at the head: it runs next time. */
	for (s = c->slices; s; s = next) {
		next = s->next;
		slices_run(c, s);
	}
}

/*
 * The fast path of the commonest request, a read of one coordinate
 * (protocol/fastreq.h): answered straight from the index with the bytes
 * the full path would give (decision_get, decision_exists), or left to it
 * (false) for any other method and for a coordinate outside the domain,
 * whose errors it gives.
 */
static bool fast_read(struct conn *c, const char *line, size_t len)
{
	static const struct method *get, *exists;
	struct daemon *d = c->srv->d;
	const struct method *m;
	const struct record *r;
	struct fastreq q;
	struct coord co;
	uint64_t t0 = uv_hrtime();
	char head[64];
	int n;

	if (!get) {
		get = method_find("decision.get");
		exists = method_find("decision.exists");
	}
	if (!fastreq_parse(line, len, &q))
		return false;
	if (q.method_len == 12 && memcmp(q.method, "decision.get", 12) == 0)
		m = get;
	else if (q.method_len == 15 &&
		 memcmp(q.method, "decision.exists", 15) == 0)
		m = exists;
	else
		return false;
	if (q.x < 1 || q.x > d->limits.max_x || q.y < 1 || q.y > 5 || q.z < 1 ||
	    q.z > 4)
		return false;
	co = (struct coord){(int)q.x, (int)q.y, (int)q.z};
	r = index_get(&d->decisions.index, &co);
	n = snprintf(
		head, sizeof(head),
		"{\"jsonrpc\":\"2.0\",\"id\":%" PRId64 ",\"result\":", q.id);
	conn_send(c, head, (size_t)n);
	if (m == exists)
		conn_send(c, r ? "true" : "false", r ? 4 : 5);
	else if (r)
		conn_send(c, r->json, r->json_len);
	else
		conn_send(c, "null", 4);
	conn_send(c, "}\n", 2);
	stats_record(&d->stats, method_index(m), uv_hrtime() - t0, false);
	return true;
}

void dispatch_line(struct conn *c, const char *line, size_t len)
{
	const struct limits *lim = &c->srv->d->limits;
	const char *msg = NULL;
	json_t *doc = NULL;
	struct job *j;
	int rc;

	/* Every request gets its span when tracing: no fast path then. */
	if (!c->srv->d->trace && fast_read(c, line, len))
		return;

	rc = rpc_parse(line, len, lim->max_depth, &doc, &msg);
	if (rc != 0) {
		conn_send_error(c, rc, msg);
		return;
	}
	if (json_is_array(doc) && json_array_size(doc) > lim->max_batch) {
		char text[96];

		snprintf(text, sizeof(text),
			 "batch of %zu requests exceeds the limit of %zu",
			 json_array_size(doc), lim->max_batch);
		conn_send_error(c, RPC_INVALID_REQUEST, text);
		json_decref(doc);
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		conn_send_error(c, RPC_INTERNAL_ERROR, "out of memory");
		json_decref(doc);
		return;
	}
	j->conn = c;
	conn_ref(c);
	j->doc = doc;
	j->batch = json_is_array(doc);
	j->n = j->batch ? json_array_size(doc) : 1;
	j->call.job = j;
	j->call.d = c->srv->d;
	j->call.conn = c;
	if (!job_run(j))
		job_wait(j);
}

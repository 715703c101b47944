/*
 * JSON-RPC semantics for one framed line: parse, batches, notifications,
 * method lookup, and the in-order execution of a batch's requests, some of
 * which finish later (a write waits for the log). Method handlers see a
 * struct call and answer through call_reply* / call_error.
 */
#ifndef VMEM_DAEMON_DISPATCH_H
#define VMEM_DAEMON_DISPATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;
struct conn;
struct daemon;
struct forward;
struct job;
struct span;

/* Handler return values. */
enum {
	CALL_DONE = 0,	/* answered (call_reply* or call_error was called) */
	CALL_ASYNC = 1, /* will answer later, then call_complete() */
};

struct call {
	struct job *job;
	struct daemon *d;
	struct conn *conn; /* referenced while the call runs */
	json_t *id;	   /* borrowed; NULL for a notification */
	json_t *params;	   /* borrowed object, never NULL */
	char *response;	   /* the response line with LF (owned) */
	size_t response_len;
	bool in_handler;      /* the handler has not returned yet */
	bool failed;	      /* answered with an error */
	size_t method;	      /* index in the method table, or SIZE_MAX */
	uint64_t started_ns;  /* uv_hrtime when it started */
	bool completed_early; /* call_complete ran before it returned */
	/* The item of a list param being checked (decision.store_many's
	 * items), or SIZE_MAX: errors then name it ("items[i]: ...",
	 * data.index). */
	size_t item;
	const char *list; /* the list param's name */
	/* Set on a forwarded (nested) call: its answer is captured for the
	 * outer call instead of being sent (call_forward). */
	struct forward *fwd;
	/*
	 * Set by a handler that went asynchronous and can give up its work
	 * (a write still waiting for its lock): returns true when it did,
	 * having answered the call and completed it, false when the work goes
	 * on (it will answer as usual). Cleared when the call completes.
	 */
	bool (*cancel)(struct call *call);
	void *cancel_data; /* the handler's, for cancel */
	/* Its trace span (--trace-file, and the caller samples), else
	 * NULL; the error it answered with, for the span. */
	struct span *span;
	char *span_err;
};

/*
 * Attributes of the call's span (trace.h), nothing when it has none; the
 * dispatcher adds operation.type, operation.success, db.system and
 * rpc.method itself. call_attr_keys: the keys of an object (metadata).
 */
void call_attr_str(struct call *call, const char *key, const char *v,
		   size_t len);
void call_attr_int(struct call *call, const char *key, int64_t v);
void call_attr_double(struct call *call, const char *key, double v);
void call_attr_bool(struct call *call, const char *key, bool v);
void call_attr_keys(struct call *call, const char *key, const json_t *obj);

/* Dispatch one line; the connection is marked busy when as many lines
 * wait as it may have in flight (conn.h). */
void dispatch_line(struct conn *c, const char *line, size_t len);

/*
 * notifications/cancelled: the request of c whose id equals request_id,
 * if it is still waiting, is cancelled. Its work is given up when the
 * handler can (call->cancel); either way, on a connection answered out of
 * order (MCP) it gets no response, as the MCP specification asks; on an
 * ordered one it is answered (-32800 when given up). Returns true when such
 * a request was waiting.
 */
bool dispatch_cancel(struct conn *c, const json_t *request_id);

/* Whether the request of call was cancelled while it waited (its answer
 * will not be sent on an out-of-order connection). */
bool call_cancelled(const struct call *call);

/* Answer with a result (stolen). */
void call_reply(struct call *call, json_t *result);

/* Answer with a pre-serialised JSON result text (copied). */
void call_reply_raw(struct call *call, const char *json, size_t len);

struct buf;

/* Answer with the JSON result text built in b when ok (false: building
 * it ran out of memory, answered -32603); b is released either way. */
void call_reply_buf(struct call *call, struct buf *b, bool ok);

/*
 * A big answer, produced in slices so that no request holds the loop (a
 * query_range of everything, a search with thousands of hits): produce
 * appends the next piece of the result's JSON text to out, about
 * SLICE_BYTES or SLICE_NS of work, and returns 1 when the result is
 * complete, 0 when there is more, or a negative errno. The pieces go out
 * as they come, one per loop iteration, and only while the connection's
 * unsent output is under output_backlog, so the answer is never held whole
 * in memory. release frees ctx, once: when the answer is complete or
 * abandoned (the connection closed). The first piece is produced at once:
 * a result complete after it is answered as usual (CALL_DONE); otherwise
 * CALL_ASYNC, which the handler returns. An error after the first piece
 * went out cannot be answered: the connection is closed (and it is
 * logged).
 */
#define SLICE_BYTES (64 * 1024)
#define SLICE_NS    (250 * 1000)
typedef int (*call_produce_fn)(struct call *call, void *ctx, struct buf *out);
int call_reply_slices(struct call *call, call_produce_fn produce,
		      void (*release)(void *ctx), void *ctx);

/* Run the next slice of c's answer in slices, or abandon it if c is
 * closing (the server's pass, when c has room for more output). */
void dispatch_run_slice(struct conn *c);

/* Answer with an error; data (stolen, may be NULL) gets data.type. */
void call_error(struct call *call, int code, json_t *data, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * An asynchronous handler has answered: continue the line. May also be
 * called before the handler returns CALL_ASYNC (the work finished at
 * once); the call then simply counts as done.
 */
void call_complete(struct call *call);

/* What a forwarded call answered: a result, or an error. */
struct call_answer {
	int code;	     /* 0: a result; else the JSON-RPC error code */
	json_t *result;	     /* borrowed; the result when code is 0 */
	const char *message; /* borrowed; the error message, else NULL */
	json_t *data; /* borrowed; the error's data (data.type) or NULL */
	void *ctx;    /* call_forward's ctx */
};

/* Answers call (call_reply* or call_error) from a forwarded call's answer;
 * it must not call call_complete. */
typedef void (*call_answer_fn)(struct call *call,
			       const struct call_answer *ans);

/*
 * Run handler on a nested call bound to call's connection, with params
 * (stolen; NULL is an allocation failure), and capture its answer instead
 * of sending it: transform then answers call from it, with ctx in the
 * answer (the transform releases ctx; it runs even when the nested call
 * could not be set up). The nested handler may answer at once or later;
 * return the result straight from call's handler: CALL_DONE when call is
 * answered already, CALL_ASYNC when it will be (then call_complete(call)
 * follows). Only the outer call counts in the per-method statistics; a
 * cancel of the outer call is the nested call's.
 */
int call_forward(struct call *call, int (*handler)(struct call *),
		 json_t *params, call_answer_fn transform, void *ctx);

#endif

/*
 * JSON-RPC 2.0 codec: parse one framed line into requests and build the
 * response objects. Knows the spec's rules (batches, notifications, id
 * types, error codes) and nothing of our methods. No I/O.
 */
#ifndef VMEM_PROTOCOL_JSONRPC_H
#define VMEM_PROTOCOL_JSONRPC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * One request of a line. All pointers borrow from the parsed document.
 * When `error` is non-zero the element was not a valid request: answer it
 * with rpc_error_new(req.id, req.error, req.error_msg, NULL) (id is NULL
 * then, meaning JSON null, unless the id itself was valid) -- unless
 * `notification` is true, which only happens for RPC_INVALID_PARAMS (a
 * well-formed notification with params by position): drop it unanswered.
 * An invalid Request (RPC_INVALID_REQUEST) is always answered.
 */
struct rpc_request {
	json_t *id;	    /* NULL when absent (a notification) */
	const char *method; /* NUL-terminated */
	json_t *params;	    /* object, or NULL when absent */
	bool notification;  /* no "id" member: execute, never answer */
	int error;	    /* 0, RPC_INVALID_REQUEST or RPC_INVALID_PARAMS */
	const char *error_msg;
};

/*
 * Parse one line. On success returns 0 and *doc owns the document: an object
 * (a single request) or a non-empty array (a batch). On failure returns a
 * JSON-RPC code (RPC_PARSE_ERROR for invalid JSON, RPC_INVALID_REQUEST for
 * an empty array or a text that is neither object nor array), *doc is NULL
 * and *msg a static description. max_depth bounds nesting (0: no bound).
 * An integer literal outside int64 is read as a real (so a param that
 * takes an integer refuses it, and the request is answered with its own
 * id), except as a request's id: that line is a parse error.
 */
int rpc_parse(const char *line, size_t len, size_t max_depth, json_t **doc,
	      const char **msg);

/*
 * Check one request object (a single request or a batch element) and fill
 * *req with borrowed pointers. Never fails: problems are reported in
 * req->error. Params given as an array are refused (we take params by
 * name) with RPC_INVALID_PARAMS.
 */
void rpc_request_check(json_t *elem, struct rpc_request *req);

/* {"jsonrpc":"2.0","id":id,"result":result}. Borrows id, steals result. */
json_t *rpc_result_new(json_t *id, json_t *result);

/*
 * {"jsonrpc":"2.0","id":id|null,"error":{"code","message","data"}}.
 * Borrows id (NULL means JSON null), steals data (may be NULL). When data is
 * NULL and the code has a data.type, data becomes {"type": NAME}; when data
 * is an object without "type" it gets one.
 */
json_t *rpc_error_new(json_t *id, int code, const char *message, json_t *data);

/*
 * Compact, single-line serialisation of a response with a final LF, in the
 * order the members were added. Returns a malloc'd string (caller frees)
 * with its length in *len, or NULL on allocation failure.
 */
char *rpc_dump_line(const json_t *msg, size_t *len);

/*
 * Splice a pre-serialised result into a response line without re-parsing:
 * {"jsonrpc":"2.0","id":<id>,"result":<raw>}\n. raw must be one valid JSON
 * text. Returns a malloc'd string (caller frees) or NULL.
 */
char *rpc_dump_raw_result(json_t *id, const char *raw, size_t raw_len,
			  size_t *len);

#endif

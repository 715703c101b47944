/*
 * Fuzz harness of protocol/jsonrpc.c and protocol/fastreq.c. The input is
 * one request line. It is parsed with the daemon's nesting bound and
 * without one, every request of it is checked, answered (result, error,
 * raw result) and the answers dumped and parsed back. Oracles: the bound
 * only ever refuses, never changes a document; every answer is one line
 * of JSON echoing the id; and whenever the fast recogniser accepts a line
 * the full parser reads the same request from it (same id, method and
 * coordinate), since the fast path may change the cost of an answer but
 * never the answer; likewise whenever the quick loader (fastjson) accepts
 * a line, jansson reads the same tree from it, members in the same order.
 */
#include "fuzz.h"

#include "protocol/errors.h"
#include "protocol/fastjson.h"
#include "protocol/fastreq.h"
#include "protocol/jsonrpc.h"

#include <string.h>

#define MAX_DEPTH 64 /* the daemon's default (daemon/loop/main.c) */

/* Parse a dumped response line back and check its shape and id. */
static void check_line(const char *line, size_t len, json_t *id,
		       const json_t *result)
{
	json_error_t err;
	json_t *back, *v;

	FUZZ_CHECK(line != NULL);
	FUZZ_CHECK(len > 0 && line[len - 1] == '\n');
	FUZZ_CHECK(strlen(line) == len);
	FUZZ_CHECK(memchr(line, '\n', len - 1) == NULL);
	back = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
	FUZZ_CHECK(back != NULL);
	FUZZ_CHECK(json_is_object(back));
	v = json_object_get(back, "jsonrpc");
	FUZZ_CHECK(json_is_string(v) &&
		   strcmp(json_string_value(v), "2.0") == 0);
	v = json_object_get(back, "id");
	FUZZ_CHECK(v != NULL);
	FUZZ_CHECK(id ? json_equal(v, id) : json_is_null(v));
	if (result)
		FUZZ_CHECK(json_equal(json_object_get(back, "result"), result));
	json_decref(back);
}

/* Answer one request in the three ways the daemon can. */
static void answer(json_t *elem)
{
	struct rpc_request req;
	json_t *msg, *result, *data;
	char *line, *raw;
	size_t len;
	bool typed;

	rpc_request_check(elem, &req);
	if (req.error) {
		FUZZ_CHECK(req.error == RPC_INVALID_REQUEST ||
			   req.error == RPC_INVALID_PARAMS);
		FUZZ_CHECK(req.error_msg != NULL);
		/* Only a notification with positional params goes unanswered.
		 */
		if (req.notification)
			FUZZ_CHECK(req.error == RPC_INVALID_PARAMS);
		msg = rpc_error_new(req.id, req.error, req.error_msg, NULL);
		FUZZ_CHECK(msg != NULL);
		line = rpc_dump_line(msg, &len);
		check_line(line, len, req.id, NULL);
		free(line);
		json_decref(msg);
		return;
	}
	FUZZ_CHECK(req.method != NULL);
	FUZZ_CHECK(req.notification == (req.id == NULL));
	FUZZ_CHECK(!req.params || json_is_object(req.params));

	/* A result echoing the params. */
	result = req.params ? json_deep_copy(req.params) : json_null();
	FUZZ_CHECK(result != NULL);
	msg = rpc_result_new(req.id, json_incref(result));
	FUZZ_CHECK(msg != NULL);
	line = rpc_dump_line(msg, &len);
	check_line(line, len, req.id, result);
	free(line);
	json_decref(msg);

	/* The same result spliced in as text. */
	raw = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
	FUZZ_CHECK(raw != NULL);
	line = rpc_dump_raw_result(req.id, raw, strlen(raw), &len);
	check_line(line, len, req.id, result);
	free(line);
	free(raw);

	/* A domain error carrying the params as data. */
	typed = json_object_get(result, "type") != NULL;
	data = json_is_object(result) ? json_incref(result) : NULL;
	msg = rpc_error_new(req.id, RPC_QUERY, req.method, data);
	FUZZ_CHECK(msg != NULL);
	data = json_object_get(json_object_get(msg, "error"), "data");
	if (!typed) {
		const char *type =
			json_string_value(json_object_get(data, "type"));

		FUZZ_CHECK(type && strcmp(type, rpc_code_type(RPC_QUERY)) == 0);
	}
	line = rpc_dump_line(msg, &len);
	check_line(line, len, req.id, NULL);
	free(line);
	json_decref(msg);
	json_decref(result);
}

/* A tree the quick loader accepts is jansson's, in the same order. */
static void check_fastjson(const char *line, size_t size)
{
	json_t *fast = fastjson_load(line, size), *slow;
	char *a, *b;

	if (!fast)
		return;
	slow = json_loadb(line, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			  NULL);
	FUZZ_CHECK(slow != NULL && json_equal(fast, slow));
	a = json_dumps(fast, JSON_COMPACT | JSON_ENCODE_ANY);
	b = json_dumps(slow, JSON_COMPACT | JSON_ENCODE_ANY);
	FUZZ_CHECK(a && b && strcmp(a, b) == 0);
	free(a);
	free(b);
	json_decref(fast);
	json_decref(slow);
}

/* What the fast recogniser read must be what the full parser reads. */
static void check_fast(const struct fastreq *q, json_t *doc)
{
	struct rpc_request req;
	json_t *co;

	FUZZ_CHECK(doc != NULL && json_is_object(doc));
	rpc_request_check(doc, &req);
	FUZZ_CHECK(req.error == 0);
	FUZZ_CHECK(!req.notification);
	FUZZ_CHECK(json_is_integer(req.id));
	FUZZ_CHECK(json_integer_value(req.id) == q->id);
	FUZZ_CHECK(strlen(req.method) == q->method_len);
	FUZZ_CHECK(memcmp(req.method, q->method, q->method_len) == 0);
	FUZZ_CHECK(json_object_size(req.params) == 1);
	co = json_object_get(req.params, "coordinate");
	FUZZ_CHECK(json_is_object(co) && json_object_size(co) == 3);
	FUZZ_CHECK(json_is_integer(json_object_get(co, "x")));
	FUZZ_CHECK(json_is_integer(json_object_get(co, "y")));
	FUZZ_CHECK(json_is_integer(json_object_get(co, "z")));
	FUZZ_CHECK(json_integer_value(json_object_get(co, "x")) == q->x);
	FUZZ_CHECK(json_integer_value(json_object_get(co, "y")) == q->y);
	FUZZ_CHECK(json_integer_value(json_object_get(co, "z")) == q->z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int seeded;
	const char *line = (const char *)data;
	const char *msg, *msg2;
	json_t *doc = NULL, *doc2 = NULL;
	struct fastreq q;
	bool fast;
	size_t i;
	int rc, rc2;

	if (!seeded) {
		json_object_seed(1);
		seeded = 1;
	}
	check_fastjson(line, size);
	fast = fastreq_parse(line, size, &q);
	rc = rpc_parse(line, size, MAX_DEPTH, &doc, &msg);
	rc2 = rpc_parse(line, size, 0, &doc2, &msg2);
	if (rc == 0) {
		FUZZ_CHECK(doc != NULL && msg == NULL);
		FUZZ_CHECK(json_is_object(doc) ||
			   (json_is_array(doc) && json_array_size(doc) > 0));
		FUZZ_CHECK(rc2 == 0 && json_equal(doc, doc2));
	} else {
		FUZZ_CHECK(doc == NULL && msg != NULL);
		FUZZ_CHECK(rc == RPC_PARSE_ERROR || rc == RPC_INVALID_REQUEST);
		/* Without the bound only the nesting refusal may go away. */
		if (rc == RPC_PARSE_ERROR)
			FUZZ_CHECK(rc2 == RPC_PARSE_ERROR);
	}
	if (fast)
		check_fast(&q, doc);
	if (rc == 0) {
		if (json_is_array(doc)) {
			for (i = 0; i < json_array_size(doc); i++)
				answer(json_array_get(doc, i));
		} else {
			answer(doc);
		}
	} else {
		/* The error answer of a line that does not parse. */
		json_t *err = rpc_error_new(NULL, rc, msg, NULL);
		char *out;
		size_t len;

		FUZZ_CHECK(err != NULL);
		out = rpc_dump_line(err, &len);
		check_line(out, len, NULL, NULL);
		free(out);
		json_decref(err);
	}
	json_decref(doc);
	json_decref(doc2);
	return 0;
}

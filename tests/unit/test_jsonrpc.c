/*
 * Unit tests of protocol/jsonrpc.c, protocol/fastjson.c and
 * protocol/errors.c. The JSON-RPC 2.0
 * specification's examples are replayed as transcripts (--> request,
 * <-- expected response) through a tiny dispatcher built on the codec, and
 * compared with json_equal against the specification's responses.
 */
#include "protocol/errors.h"
#include "protocol/fastjson.h"
#include "protocol/jsonrpc.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A toy method table standing in for the daemon's dispatch. */
static json_t *call(const struct rpc_request *req)
{
	json_t *p = req->params, *v;
	json_int_t sum = 0;
	size_t i;

	if (strcmp(req->method, "subtract") == 0)
		return rpc_result_new(
			req->id,
			json_integer(json_integer_value(
					     json_object_get(p, "minuend")) -
				     json_integer_value(json_object_get(
					     p, "subtrahend"))));
	if (strcmp(req->method, "sum") == 0) {
		json_array_foreach(json_object_get(p, "values"), i, v) sum +=
			json_integer_value(v);
		return rpc_result_new(req->id, json_integer(sum));
	}
	if (strcmp(req->method, "get_data") == 0)
		return rpc_result_new(req->id, json_pack("[si]", "hello", 5));
	if (strcmp(req->method, "update") == 0 ||
	    strcmp(req->method, "notify_hello") == 0 ||
	    strcmp(req->method, "notify_sum") == 0)
		return rpc_result_new(req->id, json_null());
	return rpc_error_new(req->id, RPC_METHOD_NOT_FOUND, NULL, NULL);
}

/* Answer one element: a response, or NULL when nothing is sent. */
static json_t *answer(json_t *elem)
{
	struct rpc_request req;
	json_t *resp;

	rpc_request_check(elem, &req);
	if (req.error)
		ck_assert_ptr_nonnull(req.error_msg);
	if (req.notification) {
		if (!req.error) {
			resp = call(&req);
			ck_assert_ptr_nonnull(resp);
			json_decref(resp);
		}
		return NULL;
	}
	if (req.error)
		return rpc_error_new(req.id, req.error, NULL, NULL);
	return call(&req);
}

/* Replay one line: the response document, or NULL for no response. */
static json_t *process(const char *line)
{
	json_t *doc = NULL, *out, *elem, *r;
	const char *msg;
	size_t i;
	int code;

	code = rpc_parse(line, strlen(line), 64, &doc, &msg);
	if (code) {
		ck_assert_ptr_null(doc);
		ck_assert_ptr_nonnull(msg);
		return rpc_error_new(NULL, code, NULL, NULL);
	}
	if (json_is_object(doc)) {
		out = answer(doc);
	} else {
		out = json_array();
		json_array_foreach(doc, i, elem)
		{
			r = answer(elem);
			if (r)
				json_array_append_new(out, r);
		}
		if (json_array_size(out) == 0) {
			json_decref(out);
			out = NULL;
		}
	}
	json_decref(doc);
	return out;
}

/* --> request, <-- expected (NULL: no response at all). */
static void transcript(const char *request, const char *expected)
{
	json_t *got = process(request), *want;
	json_error_t err;
	char *text;

	if (!expected) {
		ck_assert_msg(got == NULL, "unexpected response to %s",
			      request);
		return;
	}
	want = json_loads(expected, 0, &err);
	ck_assert_msg(want != NULL, "bad expectation %s", expected);
	ck_assert_msg(got != NULL, "no response to %s", request);
	text = json_dumps(got, JSON_COMPACT);
	ck_assert_msg(json_equal(got, want), "--> %s\n<-- %s\nwanted %s",
		      request, text, expected);
	free(text);
	json_decref(got);
	json_decref(want);
}

START_TEST(test_spec_named_params)
{
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"subtract\", "
		   "\"params\": {\"subtrahend\": 23, \"minuend\": 42}, "
		   "\"id\": 3}",
		   "{\"jsonrpc\": \"2.0\", \"result\": 19, \"id\": 3}");
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"subtract\", "
		   "\"params\": {\"minuend\": 42, \"subtrahend\": 23}, "
		   "\"id\": 4}",
		   "{\"jsonrpc\": \"2.0\", \"result\": 19, \"id\": 4}");
}
END_TEST

START_TEST(test_spec_positional_refused)
{
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"subtract\", "
		   "\"params\": [42, 23], \"id\": 1}",
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32602, "
		   "\"message\": \"Invalid params\", \"data\": {\"type\": "
		   "\"ValueError\"}}, \"id\": 1}");
}
END_TEST

START_TEST(test_spec_notifications)
{
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"update\", "
		   "\"params\": [1,2,3,4,5]}",
		   NULL);
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"foobar\"}", NULL);
	transcript("[{\"jsonrpc\": \"2.0\", \"method\": \"notify_sum\", "
		   "\"params\": [1,2,4]}, {\"jsonrpc\": \"2.0\", \"method\": "
		   "\"notify_hello\", \"params\": [7]}]",
		   NULL);
	transcript("[{\"jsonrpc\": \"2.0\", \"method\": \"notify_sum\", "
		   "\"params\": {\"values\": [1,2,4]}}, {\"jsonrpc\": \"2.0\", "
		   "\"method\": \"notify_hello\", \"params\": {\"n\": 7}}]",
		   NULL);
}
END_TEST

START_TEST(test_spec_method_not_found)
{
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"foobar\", \"id\": "
		   "\"1\"}",
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32601, "
		   "\"message\": \"Method not found\"}, \"id\": \"1\"}");
}
END_TEST

START_TEST(test_spec_invalid_json)
{
	transcript("{\"jsonrpc\": \"2.0\", \"method\": \"foobar, \"params\": "
		   "\"bar\", \"baz]",
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32700, "
		   "\"message\": \"Parse error\"}, \"id\": null}");
	transcript("[\n  {\"jsonrpc\": \"2.0\", \"method\": \"sum\", "
		   "\"params\": [1,2,4], \"id\": \"1\"},\n  {\"jsonrpc\": "
		   "\"2.0\", \"method\"\n]",
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32700, "
		   "\"message\": \"Parse error\"}, \"id\": null}");
}
END_TEST

START_TEST(test_spec_invalid_request)
{
	transcript("{\"jsonrpc\": \"2.0\", \"method\": 1, \"params\": "
		   "\"bar\"}",
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		   "\"message\": \"Invalid Request\"}, \"id\": null}");
	transcript("[]", "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
			 "\"message\": \"Invalid Request\"}, \"id\": null}");
	transcript("[1]",
		   "[{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		   "\"message\": \"Invalid Request\"}, \"id\": null}]");
	transcript("[1,2,3]",
		   "[{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		   "\"message\": \"Invalid Request\"}, \"id\": null},"
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		   "\"message\": \"Invalid Request\"}, \"id\": null},"
		   "{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		   "\"message\": \"Invalid Request\"}, \"id\": null}]");
}
END_TEST

/* The specification's mixed batch, with params by name. */
START_TEST(test_spec_mixed_batch)
{
	transcript(
		"[\n"
		"{\"jsonrpc\": \"2.0\", \"method\": \"sum\", \"params\": "
		"{\"values\": [1,2,4]}, \"id\": \"1\"},\n"
		"{\"jsonrpc\": \"2.0\", \"method\": \"notify_hello\", "
		"\"params\": {\"n\": 7}},\n"
		"{\"jsonrpc\": \"2.0\", \"method\": \"subtract\", \"params\": "
		"{\"minuend\": 42, \"subtrahend\": 23}, \"id\": \"2\"},\n"
		"{\"foo\": \"boo\"},\n"
		"{\"jsonrpc\": \"2.0\", \"method\": \"foo.get\", \"params\": "
		"{\"name\": \"myself\"}, \"id\": \"5\"},\n"
		"{\"jsonrpc\": \"2.0\", \"method\": \"get_data\", \"id\": "
		"\"9\"}\n"
		"]",
		"[\n"
		"{\"jsonrpc\": \"2.0\", \"result\": 7, \"id\": \"1\"},\n"
		"{\"jsonrpc\": \"2.0\", \"result\": 19, \"id\": \"2\"},\n"
		"{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		"\"message\": \"Invalid Request\"}, \"id\": null},\n"
		"{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32601, "
		"\"message\": \"Method not found\"}, \"id\": \"5\"},\n"
		"{\"jsonrpc\": \"2.0\", \"result\": [\"hello\", 5], \"id\": "
		"\"9\"}\n"
		"]");
}
END_TEST

/* The same batch verbatim: positional params are refused by name. */
START_TEST(test_spec_mixed_batch_positional)
{
	transcript(
		"[{\"jsonrpc\": \"2.0\", \"method\": \"sum\", \"params\": "
		"[1,2,4], \"id\": \"1\"},"
		"{\"jsonrpc\": \"2.0\", \"method\": \"notify_hello\", "
		"\"params\": [7]},"
		"{\"jsonrpc\": \"2.0\", \"method\": \"subtract\", \"params\": "
		"[42,23], \"id\": \"2\"},"
		"{\"foo\": \"boo\"},"
		"{\"jsonrpc\": \"2.0\", \"method\": \"foo.get\", \"params\": "
		"{\"name\": \"myself\"}, \"id\": \"5\"},"
		"{\"jsonrpc\": \"2.0\", \"method\": \"get_data\", \"id\": "
		"\"9\"}]",
		"[{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32602, "
		"\"message\": \"Invalid params\", \"data\": {\"type\": "
		"\"ValueError\"}}, \"id\": \"1\"},"
		"{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32602, "
		"\"message\": \"Invalid params\", \"data\": {\"type\": "
		"\"ValueError\"}}, \"id\": \"2\"},"
		"{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32600, "
		"\"message\": \"Invalid Request\"}, \"id\": null},"
		"{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32601, "
		"\"message\": \"Method not found\"}, \"id\": \"5\"},"
		"{\"jsonrpc\": \"2.0\", \"result\": [\"hello\", 5], \"id\": "
		"\"9\"}]");
}
END_TEST

/* Check one element text; returns req.error, req copied out. */
static int check_one(const char *text, json_t **doc, struct rpc_request *req)
{
	const char *msg;
	int code = rpc_parse(text, strlen(text), 0, doc, &msg);

	ck_assert_msg(code == 0, "parse of %s failed: %d", text, code);
	rpc_request_check(*doc, req);
	return req->error;
}

START_TEST(test_wrong_jsonrpc)
{
	static const char *const bad[] = {
		"{\"jsonrpc\":\"1.0\",\"method\":\"a\",\"id\":7}",
		"{\"jsonrpc\":2.0,\"method\":\"a\",\"id\":7}",
		"{\"method\":\"a\",\"id\":7}",
		"{\"jsonrpc\":\"2.0 \",\"method\":\"a\",\"id\":7}",
		"{\"jsonrpc\":null,\"method\":\"a\",\"id\":7}",
	};
	struct rpc_request req;
	json_t *doc;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(check_one(bad[i], &doc, &req),
				 RPC_INVALID_REQUEST);
		/* The id was valid: the error echoes it. */
		ck_assert_ptr_nonnull(req.id);
		ck_assert_int_eq(json_integer_value(req.id), 7);
		ck_assert(!req.notification);
		json_decref(doc);
	}
	/* Without an id an invalid request is still answered (null id). */
	ck_assert_int_eq(
		check_one("{\"jsonrpc\":\"1.0\",\"method\":\"a\"}", &doc, &req),
		RPC_INVALID_REQUEST);
	ck_assert_ptr_null(req.id);
	ck_assert(!req.notification);
	json_decref(doc);
}
END_TEST

START_TEST(test_bad_id_types)
{
	static const char *const ids[] = {"{}",	 "{\"a\":1}", "[]",
					  "[1]", "true",      "false"};
	char text[128];
	struct rpc_request req;
	json_t *doc, *resp, *want;
	size_t i;

	want = json_loads("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{"
			  "\"code\":-32600,\"message\":\"Invalid Request\"}}",
			  0, NULL);
	ck_assert_ptr_nonnull(want);
	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		snprintf(text, sizeof(text),
			 "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":%s}",
			 ids[i]);
		ck_assert_int_eq(check_one(text, &doc, &req),
				 RPC_INVALID_REQUEST);
		ck_assert_ptr_null(req.id);
		ck_assert(!req.notification);
		resp = rpc_error_new(req.id, req.error, "Invalid Request",
				     NULL);
		ck_assert(json_equal(resp, want));
		json_decref(resp);
		json_decref(doc);
	}
	json_decref(want);
}
END_TEST

START_TEST(test_id_echo_exact)
{
	static const char *const ids[] = {
		"\"abc\"",
		"\"\"",
		"\"\\u00dcber\"",
		"null",
		"0",
		"-1",
		"9223372036854775807",
		"1.5",
		"42",
		"-9223372036854775808",
	};
	char text[160], want[160];
	struct rpc_request req;
	json_t *doc, *resp;
	size_t i, len;
	char *line;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		snprintf(text, sizeof(text),
			 "{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":%s}",
			 ids[i]);
		ck_assert_int_eq(check_one(text, &doc, &req), 0);
		ck_assert_ptr_nonnull(req.id);
		ck_assert(!req.notification);
		ck_assert_str_eq(req.method, "a");
		resp = rpc_result_new(req.id, json_true());
		line = rpc_dump_line(resp, &len);
		ck_assert_ptr_nonnull(line);
		snprintf(want, sizeof(want),
			 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":true}\n",
			 strcmp(ids[i], "\"\\u00dcber\"") == 0 ? "\"\xc3\x9c"
								 "ber\""
							       : ids[i]);
		ck_assert_str_eq(line, want);
		ck_assert_uint_eq(len, strlen(want));
		free(line);
		json_decref(resp);
		json_decref(doc);
	}
	/* Integers as ints, exactly. */
	ck_assert_int_eq(
		check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"id\":"
			  "-9223372036854775808}",
			  &doc, &req),
		0);
	ck_assert(json_is_integer(req.id));
	ck_assert(json_integer_value(req.id) == INT64_MIN);
	json_decref(doc);
}
END_TEST

START_TEST(test_params_shapes)
{
	struct rpc_request req;
	json_t *doc;

	ck_assert_int_eq(check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\","
				   "\"params\":[1],\"id\":1}",
				   &doc, &req),
			 RPC_INVALID_PARAMS);
	ck_assert_str_eq(req.error_msg, "params must be an object (by name)");
	ck_assert_int_eq(json_integer_value(req.id), 1);
	json_decref(doc);

	ck_assert_int_eq(check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\","
				   "\"params\":\"x\",\"id\":1}",
				   &doc, &req),
			 RPC_INVALID_REQUEST);
	json_decref(doc);
	ck_assert_int_eq(check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\","
				   "\"params\":null,\"id\":1}",
				   &doc, &req),
			 RPC_INVALID_REQUEST);
	json_decref(doc);

	ck_assert_int_eq(check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\","
				   "\"params\":{\"k\":1},\"id\":1}",
				   &doc, &req),
			 0);
	ck_assert(json_is_object(req.params));
	json_decref(doc);

	ck_assert_int_eq(
		check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\"}", &doc, &req),
		0);
	ck_assert_ptr_null(req.params);
	ck_assert(req.notification);
	json_decref(doc);

	/* Invalid request beats invalid params. */
	ck_assert_int_eq(check_one("{\"jsonrpc\":\"1.0\",\"method\":\"a\","
				   "\"params\":[1],\"id\":1}",
				   &doc, &req),
			 RPC_INVALID_REQUEST);
	json_decref(doc);

	/* Unknown top-level member. */
	ck_assert_int_eq(check_one("{\"jsonrpc\":\"2.0\",\"method\":\"a\","
				   "\"id\":1,\"extra\":0}",
				   &doc, &req),
			 RPC_INVALID_REQUEST);
	ck_assert_int_eq(json_integer_value(req.id), 1);
	json_decref(doc);
}
END_TEST

static int parse_code(const char *text, size_t max_depth)
{
	json_t *doc = NULL;
	const char *msg = NULL;
	int code = rpc_parse(text, strlen(text), max_depth, &doc, &msg);

	if (code == 0) {
		ck_assert_ptr_nonnull(doc);
		json_decref(doc);
	} else {
		ck_assert_ptr_null(doc);
		ck_assert_ptr_nonnull(msg);
	}
	return code;
}

START_TEST(test_depth_limit)
{
	ck_assert_int_eq(parse_code("{\"a\":[[[1]]]}", 4), 0);
	ck_assert_int_eq(parse_code("{\"a\":[[[[1]]]]}", 4),
			 RPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("[[[[[[[[[[[[[[[[[[[[", 8),
			 RPC_INVALID_REQUEST);
	/* Brackets in strings, and escaped quotes, do not count. */
	ck_assert_int_eq(
		parse_code("{\"m\":\"[[[[{{{{\",\"n\":\"\\\"[[[[[\"}", 2), 0);
	ck_assert_int_eq(parse_code("{\"m\":\"\\\\\",\"n\":[[[1]]]}", 3),
			 RPC_INVALID_REQUEST);
	/* Siblings do not add up. */
	ck_assert_int_eq(parse_code("[[1],[2],[3],{\"a\":{}}]", 3), 0);
	/* 0 means unbounded (jansson's own limit still applies). */
	ck_assert_int_eq(parse_code("[[[[[[[[[[1]]]]]]]]]]", 0), 0);
}
END_TEST

START_TEST(test_parse_rejects)
{
	/* Duplicate keys, at any level. */
	ck_assert_int_eq(
		parse_code("{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"method\":"
			   "\"b\",\"id\":1}",
			   0),
		RPC_PARSE_ERROR);
	ck_assert_int_eq(
		parse_code("{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":"
			   "{\"k\":1,\"k\":2},\"id\":1}",
			   0),
		RPC_PARSE_ERROR);
	/* NUL, escaped, in a value and in a key. */
	ck_assert_int_eq(
		parse_code("{\"jsonrpc\":\"2.0\",\"method\":\"a\\u0000b\","
			   "\"id\":1}",
			   0),
		RPC_PARSE_ERROR);
	ck_assert_int_eq(
		parse_code("{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":"
			   "{\"k\\u0000\":1},\"id\":1}",
			   0),
		RPC_PARSE_ERROR);
	/* A raw NUL byte inside the line. */
	ck_assert_int_eq(rpc_parse("{\"a\":\"\0\"}", 9, 0, &(json_t *){NULL},
				   &(const char *){NULL}),
			 RPC_PARSE_ERROR);
	/* Invalid UTF-8, trailing garbage, empty text. */
	ck_assert_int_eq(parse_code("{\"a\":\"\xff\"}", 0), RPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("{} x", 0), RPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("", 0), RPC_PARSE_ERROR);
	/* Valid JSON that is not a request or batch. */
	ck_assert_int_eq(parse_code("42", 0), RPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("\"x\"", 0), RPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("null", 0), RPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("[]", 0), RPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code(" [ ] ", 0), RPC_INVALID_REQUEST);
}
END_TEST

/* Parse line (which must parse) and return member name of params as a
 * new reference of what jansson made of it (first request of a batch). */
static json_t *param_of(const char *line, const char *name, json_t **id)
{
	const char *msg;
	json_t *doc, *req, *v;

	ck_assert_msg(rpc_parse(line, strlen(line), 0, &doc, &msg) == 0, "%s",
		      line);
	req = json_is_array(doc) ? json_array_get(doc, 0) : doc;
	v = json_object_get(json_object_get(req, "params"), name);
	ck_assert_ptr_nonnull(v);
	json_incref(v);
	if (id) {
		*id = json_object_get(req, "id");
		json_incref(*id);
	}
	json_decref(doc);
	return v;
}

/* An integer beyond int64 in params becomes a real (refused by every
 * integer param, answered with the request's id); as a request's id it
 * keeps the line a parse error. */
START_TEST(test_big_integers)
{
	json_t *v, *id;

	v = param_of("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"m\","
		     "\"params\":{\"x\":99999999999999999999}}",
		     "x", &id);
	ck_assert(json_is_real(v));
	ck_assert(json_real_value(v) == 1e20);
	ck_assert(json_is_integer(id) && json_integer_value(id) == 7);
	json_decref(v);
	json_decref(id);
	/* Negative, inside an object and an array, in a batch, after a
	 * string holding digits and an escaped quote. */
	v = param_of("[{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"1\",\"method\":"
		     "\"m\",\"params\":{\"s\":\"99999999999999999999\",\"c\":"
		     "{\"x\":1,\"y\":-9223372036854775809,\"z\":[1,"
		     "18446744073709551616]}}}]",
		     "c", &id);
	ck_assert_str_eq(json_string_value(id), "a\"1");
	ck_assert(json_is_integer(json_object_get(v, "x")));
	ck_assert(json_is_real(json_object_get(v, "y")));
	ck_assert(json_real_value(json_object_get(v, "y")) < -9.2e18);
	ck_assert(json_is_real(json_array_get(json_object_get(v, "z"), 1)));
	json_decref(v);
	json_decref(id);
	v = param_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\","
		     "\"params\":{\"s\":\"keep 99999999999999999999\","
		     "\"n\":-1000000000000000000000000000000000000000000000000"
		     "0000000000000000000000000000000000000000000000000000000"
		     "0000000000000000000000000000000000000000000000000000000"
		     "0000000000000000000000000000000000000000000000000000000"
		     "0000000000000000000000000000000000000000000000000000000"
		     "0000000000000000000000000000000000000000000000000000000"
		     "0000000000000000000000000000000000000000}}",
		     "n", NULL);
	ck_assert(json_is_real(v) && json_real_value(v) == -1e300);
	json_decref(v);
	/* The edges of int64 stay integers. */
	v = param_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\","
		     "\"params\":{\"a\":[9223372036854775807,"
		     "-9223372036854775808],\"b\":9223372036854775808}}",
		     "a", NULL);
	ck_assert(json_integer_value(json_array_get(v, 0)) == INT64_MAX);
	ck_assert(json_integer_value(json_array_get(v, 1)) == INT64_MIN);
	json_decref(v);
	/* The id itself, alone or in a batch, or a big params member
	 * named "id": still a parse error only for the request's id. */
	ck_assert_int_eq(parse_code("{\"jsonrpc\":\"2.0\",\"method\":\"m\","
				    "\"id\":9223372036854775808}",
				    0),
			 RPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("[{\"jsonrpc\":\"2.0\",\"method\":\"m\","
				    "\"id\":1},{\"id\":-9223372036854775809,"
				    "\"jsonrpc\":\"2.0\",\"method\":\"m\"}]",
				    0),
			 RPC_PARSE_ERROR);
	v = param_of("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"m\","
		     "\"params\":{\"id\":9223372036854775808}}",
		     "id", &id);
	ck_assert(json_is_real(v));
	ck_assert(json_integer_value(id) == 3);
	json_decref(v);
	json_decref(id);
	/* Other broken JSON stays broken. */
	ck_assert_int_eq(parse_code("{\"a\":99999999999999999999", 0),
			 RPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("{\"a\":099999999999999999999}", 0),
			 RPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("{\"a\":1e999}", 0), RPC_PARSE_ERROR);
}
END_TEST

START_TEST(test_error_data)
{
	json_t *e, *id = json_integer(5);
	char *line;

	/* Pure JSON-RPC code: no data at all. */
	e = rpc_error_new(id, RPC_INTERNAL_ERROR, "boom", NULL);
	line = rpc_dump_line(e, NULL);
	ck_assert_str_eq(line, "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{"
			       "\"code\":-32603,\"message\":\"boom\"}}\n");
	free(line);
	json_decref(e);

	/* Domain code: data.type added, first. */
	e = rpc_error_new(id, RPC_STORAGE, "disk",
			  json_pack("{s:s}", "reason", "ENOSPC"));
	line = rpc_dump_line(e, NULL);
	ck_assert_str_eq(line,
			 "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":"
			 "-32004,\"message\":\"disk\",\"data\":{\"type\":"
			 "\"StorageError\",\"reason\":\"ENOSPC\"}}}\n");
	free(line);
	json_decref(e);

	e = rpc_error_new(NULL, RPC_COORDINATE_OCCUPIED, "taken", NULL);
	line = rpc_dump_line(e, NULL);
	ck_assert_str_eq(line, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{"
			       "\"code\":-32006,\"message\":\"taken\","
			       "\"data\":{\"type\":"
			       "\"CoordinateOccupiedError\"}}}\n");
	free(line);
	json_decref(e);

	/* Non-ASCII stays unescaped. */
	e = rpc_result_new(id, json_string("\xc3\x9c"
					   "ber \xe3\x83\x87"));
	line = rpc_dump_line(e, NULL);
	ck_assert_str_eq(line, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":"
			       "\"\xc3\x9c"
			       "ber \xe3\x83\x87\"}\n");
	free(line);
	json_decref(e);
	json_decref(id);
}
END_TEST

START_TEST(test_raw_result)
{
	json_t *id = json_string("q-1"), *parsed, *built;
	const char *raw = "{\"coordinate\":{\"x\":1,\"y\":2,\"z\":3}}";
	char *line;
	size_t len;

	line = rpc_dump_raw_result(id, raw, strlen(raw), &len);
	ck_assert_ptr_nonnull(line);
	ck_assert_str_eq(line, "{\"jsonrpc\":\"2.0\",\"id\":\"q-1\",\"result\":"
			       "{\"coordinate\":{\"x\":1,\"y\":2,\"z\":3}}}\n");
	ck_assert_uint_eq(len, strlen(line));
	parsed = json_loads(line, 0, NULL);
	built = rpc_result_new(id, json_loads(raw, 0, NULL));
	ck_assert(json_equal(parsed, built));
	json_decref(parsed);
	json_decref(built);
	free(line);

	line = rpc_dump_raw_result(NULL, "null", 4, &len);
	ck_assert_str_eq(line,
			 "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":null}\n");
	free(line);
	json_decref(id);

	id = json_integer(INT64_MAX);
	line = rpc_dump_raw_result(id, "true", 4, &len);
	ck_assert_str_eq(line,
			 "{\"jsonrpc\":\"2.0\",\"id\":9223372036854775807,"
			 "\"result\":true}\n");
	free(line);
	json_decref(id);
}
END_TEST

START_TEST(test_error_table)
{
	static const struct {
		int code;
		const char *type;
	} rows[] = {
		{-32602, "ValueError"},
		{-32001, "CoordinateValidationError"},
		{-32002, "ImmutableLayerError"},
		{-32003, "ConcurrencyError"},
		{-32004, "StorageError"},
		{-32005, "QueryError"},
		{-32006, "CoordinateOccupiedError"},
		{-32007, "UnavailableError"},
		{-32008, "ConflictError"},
	};
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		ck_assert_str_eq(rpc_code_type(rows[i].code), rows[i].type);
		ck_assert_int_eq(rpc_code_from_type(rows[i].type),
				 rows[i].code);
	}
	ck_assert_ptr_null(rpc_code_type(-32700));
	ck_assert_ptr_null(rpc_code_type(-32600));
	ck_assert_ptr_null(rpc_code_type(-32601));
	ck_assert_ptr_null(rpc_code_type(-32603));
	ck_assert_ptr_null(rpc_code_type(0));
	ck_assert_int_eq(rpc_code_from_type("NoSuchError"), 0);
	ck_assert_int_eq(rpc_code_from_type(NULL), 0);
}
END_TEST

/* jansson's tree of text, for comparison. */
static json_t *jansson_load(const char *text, size_t len)
{
	return json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			  NULL);
}

/* The same tree as jansson's, members in the same order. */
static void assert_same_tree(const char *text, size_t len)
{
	json_t *fast = fastjson_load(text, len),
	       *slow = jansson_load(text, len);
	char *a, *b;

	ck_assert_msg(fast != NULL, "not accepted: %.60s", text);
	ck_assert_msg(slow != NULL, "jansson refuses: %.60s", text);
	ck_assert_msg(json_equal(fast, slow), "different: %.60s", text);
	a = json_dumps(fast, JSON_COMPACT | JSON_ENCODE_ANY);
	b = json_dumps(slow, JSON_COMPACT | JSON_ENCODE_ANY);
	ck_assert_str_eq(a, b);
	free(a);
	free(b);
	json_decref(fast);
	json_decref(slow);
}

/*
 * The quick loader gives jansson's tree for the plain JSON it accepts
 * (escapes, UTF-8, whitespace, every kind of value, a 4 KB content, reals
 * down to the last bit, an embedding of 1536 of them) and leaves
 * everything else to jansson, valid or not: \u escapes, escaped keys,
 * duplicates, long integers and reals, overflowing reals, leading zeros,
 * control characters, bad UTF-8, trailing bytes, unfinished input, deep
 * nesting.
 */
START_TEST(test_fastjson)
{
	static const char *const same[] = {
		"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"decision.store\","
		"\"params\":{\"coordinate\":{\"x\":1,\"y\":2,\"z\":3},"
		"\"content\":\"a \\\"quoted\\\" \\\\ line\\nnext\\ttab \\/ "
		"\\b\\f\\r\",\"overwrite\":true,\"issue_context\":{}}}",
		" [ {\"a\" : [ ] , \"b\" : { } , \"c\" : null , \"d\" : false ,"
		" \"e\" : -0 , \"f\" : -123456789012345678 , \"g\" : [1,[2,"
		"[true]]]} ] \r\n\t",
		"\"caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80 \x7f\"",
		"{\"\":\"\",\"k\xc3\xa9y\":0,\"z\":\"\"}",
		"123456789012345678",
		"true",
		"[1.5,1e3,1E+2,-2.5e-3,-0.0,0.0e0,0.038645542594663886,"
		"-0.0019900742681478573,4.9e-324,2.2250738585072014e-308,"
		"1.7976931348623157e308,1e-400,9007199254740993.0,"
		"0.1000000000000000055511151231257827]",
		"-12.75",
	};
	static const char *const left[] = {
		"{\"a\":\"\\u0041\"}",
		"{\"a\\n\":1}",
		"{\"a\":1,\"a\":2}",
		"{\"a\":1e400}",
		"-1.8e308",
		"{\"a\":1.}",
		"{\"a\":.5}",
		"{\"a\":1.e3}",
		"{\"a\":1e}",
		"{\"a\":1e+}",
		"{\"a\":01.5}",
		"{\"a\":0."
		"00000000000000000000000000000000000000000000000000000000000000"
		"01}",
		"{\"a\":0123}",
		"1234567890123456789",
		"{\"a\":\"\x01\"}",
		"{\"a\":\"\xc3\x28\"}",
		"{\"a\":\"\xed\xa0\x80\"}",
		"{\"a\":\"\\x\"}",
		"{\"a\":1}x",
		"{\"a\":1,}",
		"[1,]",
		"{\"a\" 1}",
		"\"open",
		"\"open\\\"",
		"tru",
		"nulls",
		"-",
		"{",
		"",
		"+1",
		"\xc3\xa9",
	};
	char deep[2 * (FASTJSON_MAX_DEPTH + 1) + 1];
	char *big = malloc(4200);
	size_t n = 0;

	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		assert_same_tree(same[i], strlen(same[i]));
	ck_assert_ptr_nonnull(big);
	n += (size_t)sprintf(big, "{\"id\":1,\"params\":{\"content\":\"");
	while (n < 4150)
		n += (size_t)sprintf(big + n, "word\\n \\\"q\\\" \xc3\xa9 ");
	n += (size_t)sprintf(big + n, "\"}}");
	assert_same_tree(big, n);
	/* An embedding as Python writes one: 17 significant digits. */
	big = realloc(big, 1536 * 32 + 64);
	ck_assert_ptr_nonnull(big);
	n = (size_t)sprintf(big, "{\"query_embedding\":[");
	for (unsigned i = 0, r = 12345; i < 1536; i++) {
		r = r * 1103515245u + 12345u;
		n += (size_t)sprintf(big + n, "%s%.17g", i ? "," : "",
				     ((double)(r >> 8) / (1u << 24) - 0.5) /
					     (1 + (r & 7)));
	}
	n += (size_t)sprintf(big + n, "],\"top_k\":10}");
	assert_same_tree(big, n);
	free(big);
	for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++)
		ck_assert_msg(fastjson_load(left[i], strlen(left[i])) == NULL,
			      "accepted: %s", left[i]);
	/* One level past the bound: jansson's (and still valid). */
	memset(deep, '[', FASTJSON_MAX_DEPTH + 1);
	memset(deep + FASTJSON_MAX_DEPTH + 1, ']', FASTJSON_MAX_DEPTH + 1);
	ck_assert_ptr_null(fastjson_load(deep, sizeof(deep) - 1));
	assert_same_tree(deep + 1, sizeof(deep) - 3);
}
END_TEST

/*
 * Every real the quick loader reads is the double strtod reads, to the
 * last bit: random doubles over sixty decades written the ways clients
 * write them (17, 16 and 15 significant digits, exponents, trailing
 * zeros), and the values next to halfway points between two doubles.
 */
START_TEST(test_fastjson_reals)
{
	uint64_t r = 0x9e3779b97f4a7c15u;
	char text[96];

	for (int i = 0; i < 40000; i++) {
		double v, want;
		uint64_t bits;
		json_t *got;

		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		/* A random double in 1e-30..1e30, either sign. */
		v = ldexp((double)(r >> 11) / 9007199254740992.0 + 0.5,
			  (int)(r % 200) - 100);
		if (r & 1)
			v = -v;
		if (i % 7 == 0) { /* a double's halfway point, as a decimal */
			memcpy(&bits, &v, sizeof(bits));
			bits |= 1;
			memcpy(&v, &bits, sizeof(v));
			snprintf(text, sizeof(text), "%.25e",
				 (double)(v + nextafter(v, 0)) / 2);
		} else if (i % 6 == 0)
			snprintf(text, sizeof(text), "%.17g", v);
		else if (i % 6 == 1)
			snprintf(text, sizeof(text), "%.16g", v);
		else if (i % 6 == 2)
			snprintf(text, sizeof(text), "%.15g", v);
		else if (i % 6 == 3)
			snprintf(text, sizeof(text), "%.6e", v);
		else if (i % 6 == 4)
			snprintf(text, sizeof(text), "%.19f", v);
		else
			snprintf(text, sizeof(text), "%.3f", v);
		if (!strpbrk(text, ".e"))
			continue; /* an integer: not a real */
		want = strtod(text, NULL);
		got = fastjson_load(text, strlen(text));
		if (strlen(text) > 63) {
			json_decref(got);
			continue;
		}
		ck_assert_msg(json_is_real(got), "not read: %s", text);
		ck_assert_msg(memcmp(&(double){json_real_value(got)}, &want,
				     sizeof(want)) == 0,
			      "%s: %.17g, strtod %.17g", text,
			      json_real_value(got), want);
		json_decref(got);
	}
}
END_TEST

static Suite *jsonrpc_suite(void)
{
	Suite *s = suite_create("jsonrpc");
	TCase *tc = tcase_create("spec");
	TCase *tc2 = tcase_create("codec");

	tcase_add_test(tc, test_spec_named_params);
	tcase_add_test(tc, test_spec_positional_refused);
	tcase_add_test(tc, test_spec_notifications);
	tcase_add_test(tc, test_spec_method_not_found);
	tcase_add_test(tc, test_spec_invalid_json);
	tcase_add_test(tc, test_spec_invalid_request);
	tcase_add_test(tc, test_spec_mixed_batch);
	tcase_add_test(tc, test_spec_mixed_batch_positional);
	suite_add_tcase(s, tc);
	tcase_add_test(tc2, test_wrong_jsonrpc);
	tcase_add_test(tc2, test_bad_id_types);
	tcase_add_test(tc2, test_id_echo_exact);
	tcase_add_test(tc2, test_params_shapes);
	tcase_add_test(tc2, test_depth_limit);
	tcase_add_test(tc2, test_parse_rejects);
	tcase_add_test(tc2, test_big_integers);
	tcase_add_test(tc2, test_error_data);
	tcase_add_test(tc2, test_raw_result);
	tcase_add_test(tc2, test_fastjson_reals);
	tcase_add_test(tc2, test_error_table);
	tcase_add_test(tc2, test_fastjson);
	suite_add_tcase(s, tc2);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(jsonrpc_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/*
 * JSON-RPC 2.0 codec over jansson. Parsing rejects duplicate keys and NUL
 * in strings; nesting is bounded by a cheap pre-scan before jansson sees
 * the text. Responses keep members in insertion order.
 */
#include "protocol/jsonrpc.h"
#include "protocol/errors.h"
#include "protocol/fastjson.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deepest [ / { nesting of a JSON text, counted outside strings. */
static size_t nesting_depth(const char *s, size_t len, size_t stop)
{
	size_t i, depth = 0, max = 0;
	int in_str = 0, esc = 0;

	for (i = 0; i < len; i++) {
		char c = s[i];

		if (in_str) {
			if (esc)
				esc = 0;
			else if (c == '\\')
				esc = 1;
			else if (c == '"')
				in_str = 0;
			continue;
		}
		switch (c) {
		case '"':
			in_str = 1;
			break;
		case '[':
		case '{':
			if (++depth > max) {
				max = depth;
				if (max > stop)
					return max;
			}
			break;
		case ']':
		case '}':
			if (depth > 0)
				depth--;
			break;
		default:
			break;
		}
	}
	return max;
}

/* Is the integer literal s[0..n) (optional '-', digits) outside int64? */
static bool beyond_int64(const char *s, size_t n)
{
	static const char max[] = "9223372036854775807";
	bool neg = s[0] == '-';
	size_t d = n - neg;
	int cmp;

	s += neg;
	if (d == 0 || (s[0] == '0' && d > 1))
		return false; /* not valid JSON: jansson says so */
	if (d != sizeof(max) - 1)
		return d > sizeof(max) - 1;
	cmp = memcmp(s, max, d);
	/* -9223372036854775808 is the one more that fits. */
	return cmp > 0 && !(neg && memcmp(s, "9223372036854775808", d) == 0);
}

/* Is the object at level lvl (1 or 2) a request of the line (the line's
 * object, or an element of its batch)? */
static bool request_level(const char type[3], size_t lvl)
{
	return (lvl == 1 && type[1] == '{') ||
	       (lvl == 2 && type[1] == '[' && type[2] == '{');
}

/*
 * The line with every integer literal outside int64 written as a real (its
 * digits and ".0", or +-1e300 when a double cannot hold it), so that
 * jansson parses it and the request is answered with its own id: every
 * integer param refuses a real as it refuses any other non-integer. A
 * request's own id beyond int64 is left as it is, so that line stays a
 * parse error (its id cannot be echoed). Returns a malloc'd text (length
 * in *out_len), or NULL when nothing was rewritten or memory ran out.
 */
static char *widen_big_integers(const char *s, size_t len, size_t *out_len)
{
	char type[3] = {0}, *out = NULL, *t;
	bool expect_key[3] = {false}, key_is_id[3] = {false}, changed = false;
	size_t i = 0, depth = 0, n = 0, cap = len + 64, key = 0, j;

	out = malloc(cap);
	if (!out)
		return NULL;
	while (i < len) {
		char c = s[i];

		if (c == '"') {
			/* A string, copied whole; a request's member name is
			 * remembered when it is "id". */
			for (j = i + 1; j < len && s[j] != '"'; j++)
				if (s[j] == '\\')
					j++;
			if (j > len)
				j = len; /* a backslash ended the line */
			if (depth <= 2 && type[depth] == '{' &&
			    expect_key[depth])
				key_is_id[depth] =
					j - i - 1 == 2 &&
					memcmp(s + i + 1, "id", 2) == 0;
			key = j < len ? j + 1 - i : len - i;
			memcpy(out + n, s + i, key);
			n += key;
			i += key;
			continue;
		}
		if (c == '-' || (c >= '0' && c <= '9')) {
			bool integer = true;

			for (j = i;
			     j < len && s[j] && strchr("+-.eE0123456789", s[j]);
			     j++)
				if (s[j] == '.' || s[j] == 'e' || s[j] == 'E')
					integer = false;
			if (integer && beyond_int64(s + i, j - i) &&
			    !(request_level(type, depth) && key_is_id[depth])) {
				bool fits = j - i - (c == '-') <= 300;
				size_t need = n + (fits ? j - i + 2 : 7) +
					      (len - j) + 1;

				if (need > cap) {
					cap = need + cap / 2;
					t = realloc(out, cap);
					if (!t)
						goto fail;
					out = t;
				}
				if (fits) {
					memcpy(out + n, s + i, j - i);
					n += j - i;
					memcpy(out + n, ".0", 2);
					n += 2;
				} else {
					n += (size_t)sprintf(out + n, "%s1e300",
							     c == '-' ? "-"
								      : "");
				}
				changed = true;
			} else {
				memcpy(out + n, s + i, j - i);
				n += j - i;
			}
			i = j;
			continue;
		}
		switch (c) {
		case '{':
		case '[':
			if (++depth <= 2) {
				type[depth] = c;
				expect_key[depth] = c == '{';
				key_is_id[depth] = false;
			}
			break;
		case '}':
		case ']':
			if (depth > 0)
				depth--;
			break;
		case ':':
			if (depth <= 2)
				expect_key[depth] = false;
			break;
		case ',':
			if (depth <= 2 && type[depth] == '{') {
				expect_key[depth] = true;
				key_is_id[depth] = false;
			}
			break;
		default:
			break;
		}
		out[n++] = c;
		i++;
	}
	if (!changed)
		goto fail;
	*out_len = n;
	return out;
fail:
	free(out);
	return NULL;
}

static const char *load_error_msg(const json_error_t *err)
{
	switch (json_error_code(err)) {
	case json_error_duplicate_key:
		return "Parse error: duplicate object key";
	case json_error_null_character:
	case json_error_null_byte_in_key:
		return "Parse error: NUL character in string";
	case json_error_invalid_utf8:
		return "Parse error: invalid UTF-8";
	default:
		return "Parse error";
	}
}

int rpc_parse(const char *line, size_t len, size_t max_depth, json_t **doc,
	      const char **msg)
{
	json_error_t err;
	json_t *root = NULL;
	int ret = 0;

	*doc = NULL;
	*msg = NULL;
	if (max_depth > 0 && nesting_depth(line, len, max_depth) > max_depth) {
		*msg = "Invalid Request: nesting too deep";
		return RPC_INVALID_REQUEST;
	}
	root = fastjson_loadb(line, len,
			      JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
	if (!root && json_error_code(&err) == json_error_numeric_overflow) {
		size_t wide_len;
		char *wide = widen_big_integers(line, len, &wide_len);

		if (wide)
			root = json_loadb(
				wide, wide_len,
				JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
		free(wide);
	}
	if (!root) {
		*msg = load_error_msg(&err);
		ret = RPC_PARSE_ERROR;
		goto out;
	}
	if (json_is_array(root)) {
		if (json_array_size(root) == 0) {
			*msg = "Invalid Request: empty batch";
			ret = RPC_INVALID_REQUEST;
			goto out;
		}
	} else if (!json_is_object(root)) {
		*msg = "Invalid Request: not an object or array";
		ret = RPC_INVALID_REQUEST;
		goto out;
	}
	*doc = root;
	root = NULL;
out:
	json_decref(root);
	return ret;
}

static void set_error(struct rpc_request *req, int code, const char *msg)
{
	if (req->error)
		return;
	req->error = code;
	req->error_msg = msg;
}

void rpc_request_check(json_t *elem, struct rpc_request *req)
{
	const char *key;
	json_t *val, *v;
	bool params_by_position = false;

	memset(req, 0, sizeof(*req));
	if (!json_is_object(elem)) {
		set_error(req, RPC_INVALID_REQUEST,
			  "Invalid Request: not an object");
		return;
	}

	v = json_object_get(elem, "id");
	if (!v) {
		req->notification = true;
	} else if (json_is_string(v) || json_is_integer(v) || json_is_real(v) ||
		   json_is_null(v)) {
		req->id = v;
	} else {
		set_error(req, RPC_INVALID_REQUEST,
			  "Invalid Request: id must be a string, number or "
			  "null");
	}

	v = json_object_get(elem, "jsonrpc");
	if (!json_is_string(v) || json_string_length(v) != 3 ||
	    memcmp(json_string_value(v), "2.0", 3) != 0)
		set_error(req, RPC_INVALID_REQUEST,
			  "Invalid Request: jsonrpc must be \"2.0\"");

	v = json_object_get(elem, "method");
	if (!json_is_string(v))
		set_error(req, RPC_INVALID_REQUEST,
			  "Invalid Request: method must be a string");
	else if (strlen(json_string_value(v)) != json_string_length(v))
		set_error(req, RPC_INVALID_REQUEST,
			  "Invalid Request: NUL in method");
	else
		req->method = json_string_value(v);

	v = json_object_get(elem, "params");
	if (json_is_object(v))
		req->params = v;
	else if (json_is_array(v))
		params_by_position = true;
	else if (v)
		set_error(req, RPC_INVALID_REQUEST,
			  "Invalid Request: params must be an object");

	json_object_foreach(elem, key, val)
	{
		if (strcmp(key, "jsonrpc") != 0 && strcmp(key, "method") != 0 &&
		    strcmp(key, "params") != 0 && strcmp(key, "id") != 0) {
			set_error(req, RPC_INVALID_REQUEST,
				  "Invalid Request: unknown member");
			break;
		}
	}

	/* A well-formed request with positional params: a params error. */
	if (params_by_position)
		set_error(req, RPC_INVALID_PARAMS,
			  "params must be an object (by name)");

	/* An invalid Request is answered (with a null id if need be). */
	if (req->error == RPC_INVALID_REQUEST)
		req->notification = false;
}

json_t *rpc_result_new(json_t *id, json_t *result)
{
	json_t *msg = NULL;

	if (!result)
		return NULL;
	msg = json_object();
	if (!msg)
		goto fail;
	if (json_object_set_new(msg, "jsonrpc", json_string("2.0")) < 0 ||
	    json_object_set_new(msg, "id", id ? json_incref(id) : json_null()) <
		    0)
		goto fail;
	if (json_object_set_new(msg, "result", result) < 0) {
		json_decref(msg);
		return NULL;
	}
	return msg;
fail:
	json_decref(result);
	json_decref(msg);
	return NULL;
}

static const char *default_message(int code)
{
	const char *type;

	switch (code) {
	case RPC_PARSE_ERROR:
		return "Parse error";
	case RPC_INVALID_REQUEST:
		return "Invalid Request";
	case RPC_METHOD_NOT_FOUND:
		return "Method not found";
	case RPC_INVALID_PARAMS:
		return "Invalid params";
	case RPC_INTERNAL_ERROR:
		return "Internal error";
	default:
		type = rpc_code_type(code);
		return type ? type : "Server error";
	}
}

/* data with its "type" member first, or NULL. Steals data. */
static json_t *typed_data(int code, json_t *data)
{
	const char *type = rpc_code_type(code);
	json_t *obj = NULL;

	if (!type || (data && !json_is_object(data)) ||
	    (data && json_object_get(data, "type")))
		return data;
	obj = json_pack("{s:s}", "type", type);
	if (!obj)
		goto out;
	if (data && json_object_update(obj, data) < 0) {
		json_decref(obj);
		obj = NULL;
	}
out:
	json_decref(data);
	return obj;
}

json_t *rpc_error_new(json_t *id, int code, const char *message, json_t *data)
{
	json_t *msg = NULL, *err = NULL;

	data = typed_data(code, data);
	if (rpc_code_type(code) && !data)
		goto fail;
	err = json_object();
	if (!err)
		goto fail;
	if (json_object_set_new(err, "code", json_integer(code)) < 0 ||
	    json_object_set_new(
		    err, "message",
		    json_string(message ? message : default_message(code))) < 0)
		goto fail;
	if (data) {
		if (json_object_set_new(err, "data", data) < 0) {
			data = NULL;
			goto fail;
		}
		data = NULL;
	}
	msg = json_object();
	if (!msg)
		goto fail;
	if (json_object_set_new(msg, "jsonrpc", json_string("2.0")) < 0 ||
	    json_object_set_new(msg, "id", id ? json_incref(id) : json_null()) <
		    0)
		goto fail;
	if (json_object_set_new(msg, "error", err) < 0) {
		err = NULL;
		goto fail;
	}
	return msg;
fail:
	json_decref(data);
	json_decref(err);
	json_decref(msg);
	return NULL;
}

char *rpc_dump_line(const json_t *msg, size_t *len)
{
	char *s, *t;
	size_t n;

	s = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!s)
		return NULL;
	n = strlen(s);
	t = realloc(s, n + 2);
	if (!t) {
		free(s);
		return NULL;
	}
	t[n] = '\n';
	t[n + 1] = '\0';
	if (len)
		*len = n + 1;
	return t;
}

char *rpc_dump_raw_result(json_t *id, const char *raw, size_t raw_len,
			  size_t *len)
{
	static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
	static const char mid[] = ",\"result\":";
	char *idtext = NULL, *out = NULL, *p;
	size_t idlen, total;

	if (id)
		idtext = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
	else
		idtext = strdup("null");
	if (!idtext)
		goto out;
	idlen = strlen(idtext);
	total = sizeof(head) - 1 + idlen + sizeof(mid) - 1;
	if (raw_len > SIZE_MAX - total - 3)
		goto out;
	total += raw_len + 2; /* "}\n" */
	out = malloc(total + 1);
	if (!out)
		goto out;
	p = out;
	memcpy(p, head, sizeof(head) - 1);
	p += sizeof(head) - 1;
	memcpy(p, idtext, idlen);
	p += idlen;
	memcpy(p, mid, sizeof(mid) - 1);
	p += sizeof(mid) - 1;
	memcpy(p, raw, raw_len);
	p += raw_len;
	*p++ = '}';
	*p++ = '\n';
	*p = '\0';
	if (len)
		*len = total;
out:
	free(idtext);
	return out;
}

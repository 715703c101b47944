/*
 * Checking method params at the edge, by name: the member set, types and
 * domain values. Each helper answers the call with the right error (a
 * ValueError for shape and type; the domain error for coordinates,
 * thresholds and query ranges) and returns false, so a handler simply
 * returns when one fails.
 */
#include "params.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "daemon.h"
#include "jsonfilter.h"
#include "uuid.h"
#include "protocol/errors.h"

/* Refuse members of params not listed in allowed (NULL-terminated). */
bool param_only(struct call *call, const char *const *allowed)
{
	const char *key;
	json_t *value;

	json_object_foreach(call->params, key, value)
	{
		const char *const *a = allowed;

		while (*a && strcmp(*a, key) != 0)
			a++;
		if (!*a) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "unknown parameter: %.100s", key);
			return false;
		}
	}
	return true;
}

bool param_coord(struct call *call, struct coord *out)
{
	json_t *v = json_object_get(call->params, "coordinate");
	char msg[VMEM_ERRMSG_LEN];

	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: coordinate");
		return false;
	}
	if (coord_from_json(v, call->d->limits.max_x, out, msg) != 0) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL, "%s", msg);
		return false;
	}
	return true;
}

/* An optional integer member in [min, max]; *out untouched if absent. */
bool param_int(struct call *call, const char *name, int64_t min, int64_t max,
	       int64_t *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < min ||
	    json_integer_value(v) > max) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be an integer in %lld..%lld", name,
			   (long long)min, (long long)max);
		return false;
	}
	*out = json_integer_value(v);
	return true;
}

bool param_timeout(struct call *call, uint64_t *out)
{
	int64_t timeout = TIMEOUT_DEFAULT_MS;

	if (!param_int(call, "timeout_ms", 0, TIMEOUT_MAX_MS, &timeout))
		return false;
	*out = (uint64_t)timeout;
	return true;
}

bool param_bool(struct call *call, const char *name, bool *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v)
		return true;
	if (!json_is_boolean(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be true or false", name);
		return false;
	}
	*out = json_is_true(v);
	return true;
}

/* The agent of a write: the agent_id param, else the connection's. */
bool param_agent(struct call *call, const char **out)
{
	json_t *v = json_object_get(call->params, "agent_id");
	char msg[VMEM_ERRMSG_LEN];

	if (v) {
		if (!json_is_string(v)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "agent_id must be a string");
			return false;
		}
		if (agent_id_check(json_string_value(v), json_string_length(v),
				   msg) != 0) {
			call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
			return false;
		}
		*out = json_string_value(v);
		return true;
	}
	if (!call->conn->agent_id) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "agent_id is required: pass it or call "
			   "server.hello first");
		return false;
	}
	*out = call->conn->agent_id;
	return true;
}

/*
 * An optional axis range [min, max]. Absent or null means the whole axis.
 * A value that is not a two-element array is a ValueError; bounds that
 * are not integers, or min > max, are a QueryError.
 */
bool param_range(struct call *call, const char *name, struct axis_range *out)
{
	json_t *v = json_object_get(call->params, name);
	json_t *lo, *hi;

	out->min = INT32_MIN;
	out->max = INT32_MAX;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_array(v) || json_array_size(v) != 2) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be an array [min, max]", name);
		return false;
	}
	lo = json_array_get(v, 0);
	hi = json_array_get(v, 1);
	if (!json_is_integer(lo) || !json_is_integer(hi)) {
		call_error(call, RPC_QUERY, NULL, "%s bounds must be integers",
			   name);
		return false;
	}
	if (json_integer_value(lo) > json_integer_value(hi)) {
		call_error(call, RPC_QUERY, NULL,
			   "%s is empty: min %lld > max %lld", name,
			   (long long)json_integer_value(lo),
			   (long long)json_integer_value(hi));
		return false;
	}
	/* Bounds beyond int just match nothing beyond the domain. */
	out->min = json_integer_value(lo) < INT32_MIN
			   ? INT32_MIN
			   : (json_integer_value(lo) > INT32_MAX
				      ? INT32_MAX
				      : (int)json_integer_value(lo));
	out->max = json_integer_value(hi) > INT32_MAX
			   ? INT32_MAX
			   : (json_integer_value(hi) < INT32_MIN
				      ? INT32_MIN
				      : (int)json_integer_value(hi));
	return true;
}

/* A required (or, with def > 0, optional) threshold integer in
 * [1, max]; anything else is a CoordinateValidationError. */
bool param_threshold(struct call *call, const char *name, int max, int def,
		     int *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v && def > 0) {
		*out = def == INT32_MAX ? 0 : def;
		return true;
	}
	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: %s", name);
		return false;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > max) {
		call_error(call, RPC_COORDINATE_VALIDATION, NULL,
			   "%s must be an integer in 1..%d", name, max);
		return false;
	}
	*out = (int)json_integer_value(v);
	return true;
}

/* ---- conversations and documents ---- */

bool param_uuid(struct call *call, const char *name, bool required,
		uint8_t out[16], char *text, bool *present)
{
	json_t *v = json_object_get(call->params, name);

	if (present)
		*present = false;
	if (!v || json_is_null(v)) {
		if (!required)
			return true;
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: %s", name);
		return false;
	}
	if (!json_is_string(v) ||
	    uuid_parse(json_string_value(v), json_string_length(v), out) < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be a UUID "
			   "(xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
			   name);
		return false;
	}
	if (text)
		uuid_format(out, text);
	if (present)
		*present = true;
	return true;
}

bool param_str(struct call *call, const char *name, const char **s, size_t *len)
{
	json_t *v = json_object_get(call->params, name);

	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: %s", name);
		return false;
	}
	if (!json_is_string(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be a string", name);
		return false;
	}
	*s = json_string_value(v);
	*len = json_string_length(v);
	return true;
}

bool param_meta(struct call *call, const char *name, char **text, size_t *len)
{
	char msg[VMEM_ERRMSG_LEN];
	int ret = rec_meta_text(json_object_get(call->params, name), text, len,
				msg, sizeof(msg));

	if (ret == -EINVAL)
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s: %s", name, msg);
	else if (ret < 0)
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	return ret == 0;
}

bool param_time_required(struct call *call, const char *name, int64_t *out)
{
	json_t *v = json_object_get(call->params, name);

	if (!v) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "missing parameter: %s", name);
		return false;
	}
	if (!json_is_string(v) ||
	    timestamp_parse_any(json_string_value(v), json_string_length(v),
				out) < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "%s must be an RFC 3339 time "
			   "(YYYY-MM-DDTHH:MM:SS[.ffffff][Z|+HH:MM]; no "
			   "offset is UTC)",
			   name);
		return false;
	}
	return true;
}

bool param_filters(struct call *call, json_t **out, size_t *count)
{
	json_t *v = json_object_get(call->params, "metadata_filters");
	char msg[VMEM_ERRMSG_LEN];

	*out = NULL;
	*count = 0;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_object(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "metadata_filters must be an object");
		return false;
	}
	if (jsonfilter_check(v, msg, sizeof(msg)) < 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "metadata_filters: %s", msg);
		return false;
	}
	*out = v;
	*count = json_object_size(v);
	return true;
}

bool param_user(struct call *call, const char **out, size_t *len)
{
	json_t *v = json_object_get(call->params, "user_id");
	char msg[VMEM_ERRMSG_LEN];

	*out = NULL;
	*len = 0;
	if (v) {
		if (!json_is_string(v)) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "user_id must be a string");
			return false;
		}
		if (rec_user_id_check(json_string_value(v),
				      json_string_length(v), msg,
				      sizeof(msg)) < 0) {
			call_error(call, RPC_INVALID_PARAMS, NULL, "%s", msg);
			return false;
		}
		*out = json_string_value(v);
		*len = json_string_length(v);
		return true;
	}
	if (call->conn->agent_id) {
		*out = call->conn->agent_id;
		*len = strlen(*out);
	}
	return true;
}

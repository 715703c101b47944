/*
 * Subscriptions: watch.subscribe registers a box of coordinates for the
 * calling connection, which then receives watch.changed notifications
 * (see subs.h); watch.unsubscribe ends one.
 */
#include "methods.h"

#include <stdint.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"

/* kinds: ["decision" | "message" | "document", ...], default decisions
 * only; false when answered with an error. */
static bool get_kinds(struct call *call, unsigned *kinds)
{
	static const struct {
		const char *name;
		unsigned bit;
	} names[] = {
		{"decision", SUBS_KIND_DECISION},
		{"message", SUBS_KIND_MESSAGE},
		{"document", SUBS_KIND_DOCUMENT},
	};
	json_t *v = json_object_get(call->params, "kinds"), *k;
	size_t i, j;

	*kinds = SUBS_KIND_DECISION;
	if (!v)
		return true;
	if (!json_is_array(v) || json_array_size(v) == 0)
		goto bad;
	*kinds = 0;
	json_array_foreach(v, i, k)
	{
		for (j = 0; j < sizeof(names) / sizeof(names[0]); j++)
			if (json_is_string(k) &&
			    strcmp(json_string_value(k), names[j].name) == 0)
				break;
		if (j == sizeof(names) / sizeof(names[0]))
			goto bad;
		*kinds |= names[j].bit;
	}
	return true;
bad:
	call_error(call, RPC_INVALID_PARAMS, NULL,
		   "kinds must be a non-empty array of \"decision\", "
		   "\"message\", \"document\"");
	return false;
}

int watch_subscribe(struct call *call)
{
	static const char *const allowed[] = {
		"x_range", "y_range", "z_range", "kinds", "session_id", NULL};
	struct axis_range x, y, z;
	uint8_t session[16];
	bool one_session = false;
	unsigned kinds;
	uint64_t id;

	if (!param_only(call, allowed) || !get_kinds(call, &kinds) ||
	    !param_range(call, "x_range", &x) ||
	    !param_range(call, "y_range", &y) ||
	    !param_range(call, "z_range", &z) ||
	    !param_uuid(call, "session_id", false, session, NULL, &one_session))
		return CALL_DONE;
	if (!(kinds & SUBS_KIND_DECISION) &&
	    (json_object_get(call->params, "x_range") ||
	     json_object_get(call->params, "y_range") ||
	     json_object_get(call->params, "z_range"))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "ranges select decisions: add \"decision\" to "
			   "kinds");
		return CALL_DONE;
	}
	if (one_session && !(kinds & SUBS_KIND_MESSAGE)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "session_id selects messages: add \"message\" to "
			   "kinds");
		return CALL_DONE;
	}
	if (subs_add_kinds(&call->d->subs, call->conn, kinds, &x, &y, &z,
			   one_session ? session : NULL, &id) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	call_reply(call, json_pack("{s:I}", "subscription", (json_int_t)id));
	return CALL_DONE;
}

int watch_unsubscribe(struct call *call)
{
	static const char *const allowed[] = {"subscription", NULL};
	json_t *id = json_object_get(call->params, "subscription");

	if (!param_only(call, allowed))
		return CALL_DONE;
	if (!json_is_integer(id)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   id ? "subscription must be an integer"
			      : "missing parameter: subscription");
		return CALL_DONE;
	}
	/* Ids are positive: any other integer is simply not one of ours. */
	call_reply(call,
		   json_boolean(json_integer_value(id) > 0 &&
				subs_remove(&call->d->subs, call->conn,
					    (uint64_t)json_integer_value(id))));
	return CALL_DONE;
}

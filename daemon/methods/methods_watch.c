/*
 * Subscriptions: watch.subscribe registers, for the calling connection,
 * a box of coordinates (decisions), the experiences (of one agent, or
 * all), or both (kinds); the connection then receives watch.changed
 * notifications (see subs.h); watch.unsubscribe ends one.
 */
#include "methods.h"

#include <stdint.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"

/* The "kinds" of a subscription (SUBS_*): absent, decisions. */
static bool param_kinds(struct call *call, unsigned *out)
{
	static const struct {
		const char *name;
		unsigned bit;
	} names[] = {
		{"decision", SUBS_KIND_DECISION},
		{"experience", SUBS_KIND_EXPERIENCE},
		{"message", SUBS_KIND_MESSAGE},
		{"document", SUBS_KIND_DOCUMENT},
	};
	json_t *v = json_object_get(call->params, "kinds"), *k;
	size_t i, j;

	*out = SUBS_KIND_DECISION;
	if (!v)
		return true;
	if (!json_is_array(v) || json_array_size(v) == 0)
		goto bad;
	*out = 0;
	json_array_foreach(v, i, k)
	{
		for (j = 0; j < sizeof(names) / sizeof(names[0]); j++)
			if (json_is_string(k) &&
			    strcmp(json_string_value(k), names[j].name) == 0)
				break;
		if (j == sizeof(names) / sizeof(names[0]))
			goto bad;
		*out |= names[j].bit;
	}
	return true;
bad:
	call_error(call, RPC_INVALID_PARAMS, NULL,
		   "kinds must be a non-empty array of \"decision\", "
		   "\"experience\", \"message\", \"document\"");
	return false;
}

int watch_subscribe(struct call *call)
{
	static const char *const allowed[] = {
		"x_range",  "y_range",	  "z_range", "kinds",
		"agent_id", "session_id", NULL};
	static const char *const box[] = {"x_range", "y_range", "z_range"};
	json_t *agent = json_object_get(call->params, "agent_id");
	struct axis_range x, y, z;
	char msg[VMEM_ERRMSG_LEN];
	uint8_t session[16];
	bool one_session = false;
	unsigned kinds;
	uint64_t id;

	if (!param_only(call, allowed) || !param_kinds(call, &kinds) ||
	    !param_range(call, "x_range", &x) ||
	    !param_range(call, "y_range", &y) ||
	    !param_range(call, "z_range", &z) ||
	    !param_uuid(call, "session_id", false, session, NULL, &one_session))
		return CALL_DONE;
	for (size_t i = 0; i < 3; i++)
		if (!(kinds & SUBS_KIND_DECISION) &&
		    json_object_get(call->params, box[i])) {
			call_error(call, RPC_INVALID_PARAMS, NULL,
				   "%s applies to decisions: add \"decision\" "
				   "to kinds",
				   box[i]);
			return CALL_DONE;
		}
	if (agent && !(kinds & SUBS_KIND_EXPERIENCE)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "agent_id applies to experiences: add "
			   "\"experience\" to kinds");
		return CALL_DONE;
	}
	if (agent && (!json_is_string(agent) ||
		      agent_id_check(json_string_value(agent),
				     json_string_length(agent), msg) != 0)) {
		call_error(call, RPC_INVALID_PARAMS, NULL, "%s",
			   json_is_string(agent) ? msg
						 : "agent_id must be a string");
		return CALL_DONE;
	}
	if (one_session && !(kinds & SUBS_KIND_MESSAGE)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "session_id selects messages: add \"message\" to "
			   "kinds");
		return CALL_DONE;
	}
	if (subs_add_kinds(&call->d->subs, call->conn, kinds, &x, &y, &z,
			   json_string_value(agent),
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

/*
 * Subscriptions: watch.subscribe registers a box of coordinates for the
 * calling connection, which then receives watch.changed notifications
 * (see subs.h); watch.unsubscribe ends one.
 */
#include "methods.h"

#include <stdint.h>

#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"

int watch_subscribe(struct call *call)
{
	static const char *const allowed[] = {"x_range", "y_range", "z_range",
					      NULL};
	struct axis_range x, y, z;
	uint64_t id;

	if (!param_only(call, allowed) || !param_range(call, "x_range", &x) ||
	    !param_range(call, "y_range", &y) ||
	    !param_range(call, "z_range", &z))
		return CALL_DONE;
	if (subs_add(&call->d->subs, call->conn, &x, &y, &z, &id) < 0) {
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

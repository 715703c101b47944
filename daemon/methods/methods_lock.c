/*
 * Leases: lock.acquire reserves coordinates for the calling connection
 * (see leases.h), lock.release gives them back.
 */
#include "methods.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/decision.h"
#include "protocol/errors.h"

#define LEASE_COORDS_MAX 1000
#define TTL_DEFAULT_MS	 30000
#define TTL_MAX_MS	 3600000

static void acquired_cb(void *arg, int status, const struct lease *l)
{
	struct call *call = arg;
	char msg[200], ts[VMEM_TIMESTAMP_LEN + 1];
	int code;

	if (status == 0) {
		timestamp_format(l->expires_at_us, ts);
		call_reply(call, json_pack("{s:s,s:s}", "token", l->token,
					   "expires_at", ts));
	} else {
		code = store_lock_error(&call->d->store, &l->lock, status, msg,
					sizeof(msg));
		call_error(call, code, NULL, "%s", msg);
	}
	call_complete(call);
}

/* The coordinates' slots, ascending and distinct, into *slots (malloc'd)
 * and *n; false with the call answered otherwise. */
static bool get_slots(struct call *call, size_t **slots, size_t *n)
{
	json_t *list = json_object_get(call->params, "coordinates");
	char msg[VMEM_ERRMSG_LEN];
	size_t *s;
	struct coord c;

	if (!json_is_array(list) || json_array_size(list) == 0 ||
	    json_array_size(list) > LEASE_COORDS_MAX) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "coordinates must be an array of 1..%d coordinates",
			   LEASE_COORDS_MAX);
		return false;
	}
	s = malloc(json_array_size(list) * sizeof(*s));
	if (!s) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return false;
	}
	for (size_t i = 0; i < json_array_size(list); i++) {
		if (coord_from_json(json_array_get(list, i),
				    call->d->limits.max_x, &c, msg) != 0) {
			call->list = "coordinates";
			call->item = i;
			call_error(call, RPC_COORDINATE_VALIDATION, NULL, "%s",
				   msg);
			free(s);
			return false;
		}
		s[i] = decisions_lock_slot(&call->d->decisions, &c);
	}
	*slots = s;
	*n = locks_sort(s, json_array_size(list));
	return true;
}

int lock_acquire(struct call *call)
{
	static const char *const allowed[] = {"coordinates", "timeout_ms",
					      "ttl_ms", NULL};
	int64_t ttl_ms = TTL_DEFAULT_MS;
	uint64_t timeout_ms;
	size_t *slots, n;
	int rc;

	if (!param_only(call, allowed) || !param_timeout(call, &timeout_ms) ||
	    !param_int(call, "ttl_ms", 1, TTL_MAX_MS, &ttl_ms) ||
	    !get_slots(call, &slots, &n))
		return CALL_DONE;
	rc = leases_acquire(&call->d->leases, call->conn, slots, n, timeout_ms,
			    (uint64_t)ttl_ms, acquired_cb, call);
	free(slots);
	if (rc < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	return CALL_ASYNC;
}

int lock_release(struct call *call)
{
	static const char *const allowed[] = {"token", NULL};
	json_t *token = json_object_get(call->params, "token");

	if (!param_only(call, allowed))
		return CALL_DONE;
	if (!json_is_string(token)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   token ? "token must be a string"
				 : "missing parameter: token");
		return CALL_DONE;
	}
	call_reply(call,
		   json_boolean(leases_release(&call->d->leases, call->conn,
					       json_string_value(token))));
	return CALL_DONE;
}

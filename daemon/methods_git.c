/* git.* methods: sync (commit what is pending and say what). */
#include "methods.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "params.h"
#include "protocol/errors.h"

#define MESSAGE_MAX 65536

/* A git.sync waiting for its commit; the queue may answer at once. */
struct sync_call {
	struct gitq_sync w;
	struct call *call;
	bool submitting;
	bool answered;
};

static json_t *batch_json(const struct gitq_batch *b)
{
	json_t *coords = json_array();

	for (size_t i = 0; coords && i < b->n; i++)
		json_array_append_new(coords, coord_to_json(&b->coords[i]));
	return json_pack("{s:o,s:I,s:o,s:o}", "commit",
			 b->commit[0] ? json_string(b->commit) : json_null(),
			 "decisions", (json_int_t)b->n, "coordinates", coords,
			 "ranges",
			 b->n ? json_pack("{s:[i,i],s:[i,i],s:[i,i]}", "x",
					  b->min.x, b->max.x, "y", b->min.y,
					  b->max.y, "z", b->min.z, b->max.z)
			      : json_null());
}

static void sync_done(struct gitq_sync *w, int code, const char *msg,
		      const struct gitq_batch *b)
{
	struct sync_call *sc = w->data;
	struct call *call = sc->call;

	if (code == RPC_STORAGE)
		call_error(call, code, json_pack("{s:s}", "reason", msg), "%s",
			   msg);
	else if (code != 0)
		call_error(call, code, NULL, "%s", msg);
	else
		call_reply(call, batch_json(b));
	if (sc->submitting) {
		sc->answered = true;
		return;
	}
	free(sc);
	call_complete(call);
}

int git_sync(struct call *call)
{
	static const char *const allowed[] = {"message", NULL};
	json_t *message = json_object_get(call->params, "message");
	struct sync_call *sc;

	if (!param_only(call, allowed))
		return CALL_DONE;
	if (message &&
	    (!json_is_string(message) || json_string_length(message) == 0 ||
	     json_string_length(message) > MESSAGE_MAX ||
	     !utf8_valid(json_string_value(message),
			 json_string_length(message)))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "message must be a non-empty string of at most %d "
			   "bytes",
			   MESSAGE_MAX);
		return CALL_DONE;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	sc->call = call;
	sc->w.done = sync_done;
	sc->w.data = sc;
	sc->submitting = true;
	gitq_sync(&call->d->gitq, &sc->w,
		  message ? json_string_value(message) : NULL);
	sc->submitting = false;
	if (!sc->answered)
		return CALL_ASYNC;
	free(sc);
	return CALL_DONE;
}

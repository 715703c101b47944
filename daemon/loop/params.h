/*
 * Param checks for method handlers. Each returns true when the member is
 * acceptable (absent optional members leave *out untouched unless said
 * otherwise), and otherwise answers the call with an error and returns
 * false.
 */
#ifndef VMEM_DAEMON_PARAMS_H
#define VMEM_DAEMON_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "dispatch.h"
#include "localrec.h"
#include "protocol/decision.h"
#include "query.h"

/* The largest "limit" of a list result, and of a commit message. */
#define RESULTS_LIMIT_MAX 10000
#define MESSAGE_MAX	  65536
/* The wait of a request for locks: timeout_ms. */
#define TIMEOUT_DEFAULT_MS 5000
#define TIMEOUT_MAX_MS	   600000

/* Refuse members not listed in allowed (NULL-terminated): ValueError. */
bool param_only(struct call *call, const char *const *allowed);

/* The required "coordinate": ValueError when missing, else
 * CoordinateValidationError when not a coordinate of the domain. */
bool param_coord(struct call *call, struct coord *out);

/* An optional integer in [min, max]: ValueError otherwise. */
bool param_int(struct call *call, const char *name, int64_t min, int64_t max,
	       int64_t *out);

/* The optional "timeout_ms" of a request that may wait for locks:
 * 0..600000, default 5000. */
bool param_timeout(struct call *call, uint64_t *out);

/* An optional boolean: ValueError otherwise. */
bool param_bool(struct call *call, const char *name, bool *out);

/* The agent of a write: the "agent_id" param (checked), else the
 * connection's from server.hello, else ValueError. Borrowed. */
bool param_agent(struct call *call, const char **out);

/* An optional axis range [min, max]; absent or null: the whole axis. */
bool param_range(struct call *call, const char *name, struct axis_range *out);

/*
 * A threshold integer in [1, max] (CoordinateValidationError otherwise).
 * With def > 0 it is optional and def is used when absent (INT32_MAX
 * meaning 0, "none"); with def 0 it is required (ValueError if missing).
 */
bool param_threshold(struct call *call, const char *name, int max, int def,
		     int *out);

/* ---- conversations and documents (issue 15) ---- */

/* The largest answer of a read of conversations or documents, built
 * whole: a read that would pass it is refused (QueryError). */
#define ANSWER_BYTES_MAX (16u << 20)

/*
 * A UUID member in its canonical text form into out (and its text,
 * lowercase, into text when not NULL: 37 bytes). Required: ValueError
 * when missing; optional (required false): *present says whether it was
 * given (null counts as absent).
 */
bool param_uuid(struct call *call, const char *name, bool required,
		uint8_t out[16], char *text, bool *present);

/* A required string member, its bytes borrowed. */
bool param_str(struct call *call, const char *name, const char **s,
	       size_t *len);

/* The optional "metadata"-like member name: its compact JSON text
 * (malloc'd, the caller frees; "{}" when absent or null). */
bool param_meta(struct call *call, const char *name, char **text, size_t *len);

/* A required RFC 3339 time (as timestamp_parse_any reads them; no
 * offset is UTC) in microseconds. */
bool param_time_required(struct call *call, const char *name, int64_t *out);

/* The optional "metadata_filters": an object within the filter limits,
 * borrowed into *out (NULL when absent or null); *count its keys. */
bool param_filters(struct call *call, json_t **out, size_t *count);

/* The writer's user id: the "user_id" param (checked), else the
 * connection's agent id, else *out NULL. */
bool param_user(struct call *call, const char **out, size_t *len);

#endif

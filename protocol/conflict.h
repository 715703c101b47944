/*
 * Conflict records: what a conflict in .vector-memory kept and what it
 * lost, one JSON file each in <gitdir>/vmem/conflicts/ (local to the
 * working tree, never committed; docs/operations.md says why). Written by
 * the merge driver (`vmem merge-driver`, a loser of the layer rules) and
 * by the daemon (the acknowledged version it serves while a coordinate is
 * conflicted, and a resolution that dropped an acknowledged version).
 * This module is the format both share: the file's JSON and its name. No
 * I/O.
 *
 * A record, pretty-printed with keys in this order:
 *
 *   {"kind": "merge-driver" | "resolution" | "held" | "replaced",
 *    "coordinate": {"x", "y", "z"},
 *    "path": ".vector-memory/x-007/y-2-z-1.json",
 *    "recorded_at": RFC 3339 UTC with microseconds,
 *    "reason": one line,
 *    "kept": a decision record or null,
 *    "lost": a decision record or null}
 *
 * "replaced" is an acknowledged version not yet committed that a git
 * command replaced or removed in the tree (a reset, a stash) before the
 * daemon could commit it.
 *
 * "held" is the version the daemon keeps serving while the coordinate is
 * conflicted (kept; lost null): there is one per conflicted coordinate,
 * and when the conflict ends it is removed, or becomes a "resolution"
 * record if the resolution dropped it.
 */
#ifndef VMEM_PROTOCOL_CONFLICT_H
#define VMEM_PROTOCOL_CONFLICT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/decision.h"

#define CONFLICT_DIRNAME       "conflicts" /* in <gitdir>/vmem */
#define CONFLICT_KIND_DRIVER   "merge-driver"
#define CONFLICT_KIND_RESOLVE  "resolution"
#define CONFLICT_KIND_HELD     "held"
#define CONFLICT_KIND_REPLACED "replaced"
#define CONFLICT_NAME_MAX      96
#define CONFLICT_REASON_MAX    400
#define CONFLICT_FILE_MAX      (512 * 1024) /* two decisions and change */

/*
 * The record's text (pretty JSON with a final newline). kept and lost are
 * decision records in the compact form (decision_dump_compact) or NULL.
 * malloc'd, caller frees; NULL when out of memory or when kept/lost are
 * not JSON objects.
 */
char *conflict_record_text(const char *kind, const struct coord *c,
			   int64_t recorded_usec, const char *reason,
			   const char *kept, const char *lost, size_t *len);

/*
 * The file name of a record: "held-x-007-y-2-z-1.json" for a held
 * version, else "<recorded_usec>-<kind>-x-007-y-2-z-1.json", so that names
 * sort by time. Returns the length, or -1 when it does not fit n bytes.
 */
int conflict_record_name(const char *kind, const struct coord *c,
			 int64_t recorded_usec, char *buf, size_t n);

/*
 * Read a record's text: the JSON object (new reference, caller decrefs)
 * with its members checked (kind one of the three, coordinate valid for
 * max_x, path matching, recorded_at a timestamp, reason a string, kept and
 * lost null or valid decisions at that coordinate). NULL with msg when it
 * is not a record.
 */
json_t *conflict_record_parse(const char *text, size_t len, int max_x,
			      char msg[VMEM_ERRMSG_LEN]);

#endif

/*
 * The domain: coordinates, decisions, their validation and their two
 * serialisations (compact for the wire and the log, pretty for the files
 * under .vector-memory/). No I/O.
 *
 * Validation errors are reported as a JSON-RPC code (errors.h) plus a
 * one-line message written into a caller-supplied buffer.
 */
#ifndef VMEM_PROTOCOL_DECISION_H
#define VMEM_PROTOCOL_DECISION_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMEM_MAX_X_DEFAULT     1000
#define VMEM_MAX_Y	       5
#define VMEM_MAX_Z	       4
#define VMEM_CONTENT_MAX       102400
#define VMEM_AGENT_ID_MAX      128
#define VMEM_CONTEXT_KEYS_MAX  64
#define VMEM_CONTEXT_VALUE_MAX 4096
#define VMEM_TIMESTAMP_LEN     27 /* 2025-01-06T15:30:00.123456Z */
#define VMEM_ERRMSG_LEN	       160

struct coord {
	int x, y, z;
};

/* A decision as stored; all strings NUL-terminated and owned by it. */
struct decision {
	struct coord coord;
	char *content;
	size_t content_len;
	char timestamp[VMEM_TIMESTAMP_LEN + 1];
	char *agent_id;
	json_t *issue_context; /* NULL, or an object of string -> string */
	int64_t version;
};

/* Compare by (x, y, z): <0, 0, >0. */
int coord_cmp(const struct coord *a, const struct coord *b);

/* True when every axis is an integer within its domain (x <= max_x). */
bool coord_valid(const struct coord *c, int max_x);

/*
 * Read a coordinate object {"x","y","z"} (exactly those members, each a JSON
 * integer in its domain). Returns 0, or RPC_COORDINATE_VALIDATION with msg.
 */
int coord_from_json(const json_t *obj, int max_x, struct coord *out,
		    char msg[VMEM_ERRMSG_LEN]);

/* {"x":..,"y":..,"z":..} (new reference, NULL on allocation failure). */
json_t *coord_to_json(const struct coord *c);

/*
 * Relative path of a decision file: "x-005/y-2-z-1.json" (x zero-padded to
 * at least 3 digits), below .vector-memory/. Returns the length, or -1 if
 * it does not fit n bytes.
 */
int coord_path(const struct coord *c, char *buf, size_t n);

/*
 * Parse a relative path of the exact form coord_path() writes ("x-005" for
 * the directory part, "y-2-z-1.json" for the file part). Returns 0, or -1
 * when the path is not a decision file name in the domain.
 */
int coord_from_path(const char *dir, const char *file, int max_x,
		    struct coord *out);

/* Checks of single fields: 0, or RPC_INVALID_PARAMS with msg. */
int content_check(const char *s, size_t len, char msg[VMEM_ERRMSG_LEN]);

/*
 * The content of a new write: content_check, and not made only of
 * whitespace (the whitespace of Python's str.strip(), ASCII and Unicode).
 * Records already stored are judged by content_check alone, so files
 * written before this rule still load.
 */
int content_check_new(const char *s, size_t len, char msg[VMEM_ERRMSG_LEN]);
int agent_id_check(const char *s, size_t len, char msg[VMEM_ERRMSG_LEN]);
int issue_context_check(const json_t *ctx, char msg[VMEM_ERRMSG_LEN]);

/* True when s[0..len) is valid UTF-8 without NUL bytes. */
bool utf8_valid(const char *s, size_t len);

/* True when valid UTF-8 s[0..len) holds only whitespace (that of
 * Python's str.strip(), ASCII and Unicode), or nothing. */
bool utf8_blank(const char *s, size_t len);

/* Format microseconds since the epoch as RFC 3339 UTC with 6 digits + Z. */
void timestamp_format(int64_t usec, char out[VMEM_TIMESTAMP_LEN + 1]);

/* Parse that exact format back. 0, or -1 when malformed. */
int timestamp_parse(const char *s, int64_t *usec);

/*
 * Parse the timestamps a stored record may carry: ours, and every form
 * the seed library writes (Python isoformat() and RFC 3339):
 * YYYY-MM-DD, 'T' (or 't' or a space), HH:MM:SS, an optional fraction of
 * 1 to 9 digits (truncated to microseconds), then 'Z', 'z', +HH:MM,
 * -HH:MM or nothing (no offset counts as UTC). 0, or -1 when malformed.
 */
int timestamp_parse_any(const char *s, size_t len, int64_t *usec);

/* Free the strings and context of d (not d itself). NULL-safe. */
void decision_done(struct decision *d);

/*
 * The record object with keys in file order: coordinate, content,
 * timestamp, agent_id, issue_context, version. New reference or NULL.
 */
json_t *decision_to_json(const struct decision *d);

/*
 * Validate a record object (as read from a file or the log) and fill *out
 * (owned by the caller: decision_done). Every member must be of the right
 * type and within its limits; no extra members. Every member must be
 * present but two, which the seed library's files may lack: version
 * (then 1) and issue_context (then null). The timestamp may be in any
 * form timestamp_parse_any() reads; *out holds it in our form. Returns 0,
 * or an RPC code with msg.
 */
int decision_from_json(const json_t *obj, int max_x, struct decision *out,
		       char msg[VMEM_ERRMSG_LEN]);

/*
 * Compact one-line JSON of the record (wire and log form, no LF).
 * malloc'd, caller frees; length in *len. NULL on allocation failure.
 */
char *decision_dump_compact(const struct decision *d, size_t *len);

/* The same form written in place, for a caller that sizes its own
 * memory: its length, then the bytes at o (room for that length and a
 * NUL after, which is written); returns the end of the JSON. */
size_t decision_compact_len(const struct decision *d);
char *decision_write_compact(const struct decision *d, char *o);

/*
 * The exact file form: two-space indentation, keys in record order, UTF-8
 * unescaped, final newline. malloc'd, caller frees; NULL on failure.
 */
char *decision_dump_file(const struct decision *d, size_t *len);

/*
 * The file form of a record given in the compact form that
 * decision_dump_compact wrote, by re-indenting its text (no parsing):
 * the same bytes as decision_dump_file. malloc'd, caller frees; NULL on
 * allocation failure or text that is not such a record.
 */
char *decision_file_from_compact(const char *json, size_t len, size_t *out_len);

/*
 * Parse and validate a record from text (a file or a log payload).
 * Returns 0 or an RPC code with msg; *out owned by the caller.
 */
int decision_parse(const char *text, size_t len, int max_x,
		   struct decision *out, char msg[VMEM_ERRMSG_LEN]);

#endif

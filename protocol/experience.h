/*
 * Experiences (seed 004): what an agent met (context), did (action) and
 * got (outcome), with an importance and tags. Their validation, their
 * one serialisation (a compact JSON object on one line: the wire form,
 * the log payload after its tag byte, and a line of a shard file), the
 * tombstone line of a deletion, the parser of shard lines, and the
 * names of the shard files below .vector-memory:
 * experiences/<agent segment>/<YYYY-MM-DD>.jsonl for the first shard of
 * an agent's day, <YYYY-MM-DD>.<N>.jsonl (N = 2, 3, ...) for the next
 * ones, begun when one is full. No I/O.
 *
 * A record line has exactly these members, in this order:
 *   {"id","agent_id","context","action","outcome","timestamp",
 *    "importance","tags","metadata"}
 * a tombstone line exactly these:
 *   {"deleted","agent_id","timestamp","deleted_by"}
 * where deleted is the id removed, agent_id the record's agent (its
 * shard), timestamp when it was deleted, deleted_by who deleted it.
 *
 * Agent segments: an agent id made only of ASCII letters, digits, '_',
 * '-' and '.' (not first) is its own segment; any other is '~' followed
 * by its bytes in unpadded base64url (RFC 4648 section 5). The two
 * forms cannot be confused ('~' is not in the first), and decoding
 * checks that the segment is the one the agent id encodes to, so each
 * agent has exactly one directory.
 */
#ifndef VMEM_PROTOCOL_EXPERIENCE_H
#define VMEM_PROTOCOL_EXPERIENCE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "expid.h"

#define EXP_TEXT_MAX	       102400 /* context, action, outcome: bytes */
#define EXP_TAGS_MAX	       32
#define EXP_TAG_MAX	       64    /* bytes */
#define EXP_METADATA_MAX       16384 /* bytes of its compact JSON */
#define EXP_IMPORTANCE_MIN     1
#define EXP_IMPORTANCE_MAX     10
#define EXP_IMPORTANCE_DEFAULT 5
/* A shard line longer than this is refused unread: every valid record
 * is shorter (three texts escaped at worst six bytes per byte, and the
 * rest). */
#define EXP_LINE_MAX (4u << 20)
/* "<segment>/<YYYY-MM-DD>[.<N>].jsonl": a segment is at most
 * 1 + 4 * 128 / 3 rounded up (171) bytes, N at most 8 digits. */
#define EXP_SEGMENT_MAX	   172
#define EXP_SHARD_SEQ_MAX  99999999
#define EXP_SHARD_PATH_MAX 208
#define EXP_SHARD_SUFFIX   ".jsonl"

/* The three texts, in the order of the record and of their weights. */
enum exp_field { EXP_CONTEXT, EXP_ACTION, EXP_OUTCOME, EXP_NFIELDS };

extern const char *const exp_field_names[EXP_NFIELDS];

/* A record; every string NUL-terminated and owned by it. */
struct experience {
	struct expid id;
	char *agent_id;
	char *text[EXP_NFIELDS];
	size_t text_len[EXP_NFIELDS];
	int64_t timestamp; /* microseconds since the epoch */
	int importance;
	char **tags; /* n_tags distinct strings, in the order given */
	size_t n_tags;
	json_t *metadata; /* an object (owned reference) */
};

/* A deletion as a shard line holds it; strings owned. */
struct exp_tombstone {
	struct expid id;   /* the record deleted */
	char *agent_id;	   /* the record's agent: its shard */
	int64_t timestamp; /* when it was deleted */
	char *deleted_by;
};

/* A parsed shard line: one or the other. */
struct exp_line {
	bool is_tombstone;
	struct experience rec;
	struct exp_tombstone tomb;
};

/* Free what e holds (not e); NULL-safe, and safe on a zeroed struct. */
void experience_done(struct experience *e);
void exp_tombstone_done(struct exp_tombstone *t);
void exp_line_done(struct exp_line *l);

/*
 * Checks of the fields of a new record: 0, or RPC_INVALID_PARAMS with a
 * message naming the field. A text must be non-empty UTF-8 without NUL
 * of at most EXP_TEXT_MAX bytes, not only white space when is_new
 * (records already stored are judged without that rule).
 */
int exp_text_check(enum exp_field f, const char *s, size_t len, bool is_new,
		   char msg[VMEM_ERRMSG_LEN]);

/* importance: a JSON integer in 1..10. */
int exp_importance_from_json(const json_t *v, int *out,
			     char msg[VMEM_ERRMSG_LEN]);

/*
 * tags: an array of 0..32 distinct non-empty strings of at most 64 bytes
 * of UTF-8 without control characters (C0, DEL, C1). The copies go to
 * *tags (a malloc'd array of malloc'd strings, NULL when none) and *n.
 */
int exp_tags_from_json(const json_t *v, char ***tags, size_t *n,
		       char msg[VMEM_ERRMSG_LEN]);

/* metadata: an object whose compact JSON is at most 16 KB. */
int exp_metadata_check(const json_t *v, char msg[VMEM_ERRMSG_LEN]);

/*
 * The compact one-line JSON of a record (no newline), after prefix
 * bytes left for the caller (a log tag). malloc'd; *len is the JSON's
 * length without the prefix. NULL when memory runs out.
 */
char *exp_dump(const struct experience *e, size_t prefix, size_t *len);

/* The same for a tombstone line. */
char *exp_dump_tombstone(const struct exp_tombstone *t, size_t prefix,
			 size_t *len);

/*
 * Parse one shard line (or a log payload after its tag): a record or a
 * tombstone, exactly as described above, every field within its limits
 * (texts by the rules of stored records). A final CR is ignored (a
 * clone that checks files out with CRLF). 0, or RPC_INVALID_PARAMS (or
 * RPC_INTERNAL_ERROR when memory runs out) with a reason in msg; *out is
 * the caller's to release with exp_line_done either way.
 */
int exp_parse_line(const char *s, size_t len, struct exp_line *out,
		   char msg[VMEM_ERRMSG_LEN]);

/*
 * exp_parse_line through a JSON tree only. exp_parse_line first reads
 * the lines exp_dump writes without one (a start-up reads every record
 * of every shard), and this for the rest; both agree on every line (the
 * fuzz harness shard_line checks it).
 */
int exp_parse_line_general(const char *s, size_t len, struct exp_line *out,
			   char msg[VMEM_ERRMSG_LEN]);

/*
 * The directory name of an agent's shards, NUL-terminated into out (at
 * least EXP_SEGMENT_MAX + 1 bytes). Returns its length, or -1 for an
 * agent id agent_id_check refuses.
 */
int exp_segment(const char *agent, size_t len, char *out, size_t n);

/*
 * The agent id a directory name stands for, NUL-terminated into out (at
 * least VMEM_AGENT_ID_MAX + 1 bytes), its length in *len. 0, or -1 when
 * seg is not the segment of any valid agent id.
 */
int exp_segment_decode(const char *seg, char *out, size_t n, size_t *len);

/*
 * The path of shard seq (1..EXP_SHARD_SEQ_MAX) of agent's records made
 * at usec, relative to the experiences directory, the day being the UTC
 * date: "<segment>/<YYYY-MM-DD>.jsonl" for seq 1,
 * "<segment>/<YYYY-MM-DD>.<seq>.jsonl" after. Returns its length, or -1
 * (a refused agent id, a time outside the years 1970..9999, a seq out
 * of range, or n too small).
 */
int exp_shard_path(const char *agent, size_t len, int64_t usec, unsigned seq,
		   char *out, size_t n);

/* The seq of a shard file's name: 1 for "YYYY-MM-DD.jsonl" (a real date),
 * N for "YYYY-MM-DD.N.jsonl" (N from 2 to EXP_SHARD_SEQ_MAX, no leading
 * zero); 0 for any other name. */
unsigned exp_shard_name_seq(const char *name);

/* Whether name is a shard file's name (exp_shard_name_seq is not 0). */
bool exp_shard_name_valid(const char *name);

#endif

/*
 * The MCP tools: the table that maps each tool onto a method handler, the
 * input and output schemas tools/list shows, and the shaping of a
 * handler's result into the tool's structured result (bounded pages for
 * listings). The schemas state the daemon's own bounds (max_x from its
 * limits), so a client that validates before calling is refused for the
 * same things the daemon refuses; the daemon still checks every argument.
 */
#include "mcp_tools.h"

#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "methods.h"
#include "params.h"
#include "protocol/decision.h"
#include "localrec.h"
#include "protocol/experience.h"
#include "search.h"

#define DESC_MAX 2048

/* JSON Schema (ECMA-262 syntax) of an agent id: no C0, DEL or C1
 * control characters, as agent_id_check refuses them. */
#define AGENT_ID_PATTERN "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"

/* ---- schema pieces ---- */

static json_t *p_int(const char *desc, json_int_t min, json_int_t max)
{
	return json_pack("{s:s,s:I,s:I,s:s}", "type", "integer", "minimum", min,
			 "maximum", max, "description", desc);
}

static json_t *p_str(const char *desc, json_int_t min_len, json_int_t max_len)
{
	return json_pack("{s:s,s:I,s:I,s:s}", "type", "string", "minLength",
			 min_len, "maxLength", max_len, "description", desc);
}

static json_t *p_bool(const char *desc)
{
	return json_pack("{s:s,s:b,s:s}", "type", "boolean", "default", 0,
			 "description", desc);
}

static json_t *p_range(const char *desc, json_int_t max)
{
	return json_pack("{s:s,s:{s:s,s:i,s:I},s:i,s:i,s:s}", "type", "array",
			 "items", "type", "integer", "minimum", 1, "maximum",
			 max, "minItems", 2, "maxItems", 2, "description",
			 desc);
}

static json_t *p_limit(void)
{
	char d[256];

	snprintf(d, sizeof(d),
		 "Return at most this many results (default %d, at most %d); "
		 "a page also stops before its text passes %d KB.",
		 MCP_PAGE_DEFAULT, MCP_PAGE_MAX, MCP_PAGE_BYTES / 1024);
	return p_int(d, 1, MCP_PAGE_MAX);
}

static json_t *p_x(int max_x)
{
	char d[128];

	snprintf(d, sizeof(d), "Issue number, 1..%d.", max_x);
	return p_int(d, 1, max_x);
}

static json_t *p_y(void)
{
	return p_int("Cycle stage: 1 architect, 2 test, 3 implement, "
		     "4 review, 5 merge.",
		     1, VMEM_MAX_Y);
}

static json_t *p_z(void)
{
	return p_int("Layer: 1 Architecture (write-once), 2 Interfaces, "
		     "3 Implementation, 4 Ephemeral.",
		     1, VMEM_MAX_Z);
}

static json_t *p_coord_after(int max_x, const char *desc)
{
	return json_pack("{s:s,s:{s:o,s:o,s:o},s:[s,s,s],s:b,s:s}", "type",
			 "object", "properties", "x", p_x(max_x), "y", p_y(),
			 "z", p_z(), "required", "x", "y", "z",
			 "additionalProperties", 0, "description", desc);
}

static json_t *p_if_version(void)
{
	return json_pack("{s:s,s:i,s:s}", "type", "integer", "minimum", 1,
			 "description",
			 "Only act if the decision's current version is this "
			 "one (optimistic concurrency); otherwise "
			 "ConcurrencyError. Implies overwrite.");
}

static json_t *p_timeout(void)
{
	return json_pack("{s:s,s:i,s:i,s:i,s:s}", "type", "integer", "minimum",
			 0, "maximum", TIMEOUT_MAX_MS, "default", 5000,
			 "description",
			 "How long to wait, in milliseconds, for a coordinate "
			 "locked by another agent before failing with "
			 "ConcurrencyError.");
}

/* ---- input schemas, one per tool ---- */

#define SET(name, val) (rc |= json_object_set_new(props, (name), (val)))

static int in_coord(json_t *props, int max_x)
{
	int rc = 0;

	SET("x", p_x(max_x));
	SET("y", p_y());
	SET("z", p_z());
	return rc ? -1 : 0;
}

static int in_store(json_t *props, int max_x)
{
	char d[DESC_MAX];
	int rc = in_coord(props, max_x);

	snprintf(d, sizeof(d),
		 "The decision text: not empty or only white space, at most "
		 "%d bytes of UTF-8 (the daemon counts bytes; maxLength, "
		 "which counts characters, is the same number).",
		 VMEM_CONTENT_MAX);
	SET("content", p_str(d, 1, VMEM_CONTENT_MAX));
	SET("issue_context",
	    json_pack("{s:s,s:{s:s,s:i},s:i,s:s}", "type", "object",
		      "additionalProperties", "type", "string", "maxLength",
		      VMEM_CONTEXT_VALUE_MAX, "maxProperties",
		      VMEM_CONTEXT_KEYS_MAX, "description",
		      "Optional string-to-string facts about the issue, e.g. "
		      "{\"issue_id\": \"abc-12\", \"issue_title\": \"Login "
		      "page\"}."));
	SET("agent_id",
	    json_pack("{s:s,s:i,s:i,s:s,s:s}", "type", "string", "minLength", 1,
		      "maxLength", VMEM_AGENT_ID_MAX, "pattern",
		      AGENT_ID_PATTERN, "description",
		      "Who is writing (default: the agent id of this session, "
		      "named in the server's instructions). At most 128 bytes, "
		      "no control characters."));
	SET("overwrite", p_bool("Replace an existing decision at layers 2-4 "
				"(its version goes up by one). Without it a "
				"store on an occupied coordinate fails with "
				"CoordinateOccupiedError. Never allowed at "
				"layer 1."));
	SET("if_version", p_if_version());
	SET("timeout_ms", p_timeout());
	return rc ? -1 : 0;
}

static int in_delete(json_t *props, int max_x)
{
	int rc = in_coord(props, max_x);

	SET("if_version", p_if_version());
	SET("timeout_ms", p_timeout());
	return rc ? -1 : 0;
}

static int in_query(json_t *props, int max_x)
{
	char d[256];
	int rc = 0;

	snprintf(d, sizeof(d),
		 "Issue numbers [min, max], inclusive (default: 1..%d).",
		 max_x);
	SET("x_range", p_range(d, max_x));
	SET("y_range",
	    p_range("Cycle stages [min, max], inclusive (default: 1..5).",
		    VMEM_MAX_Y));
	SET("z_range", p_range("Layers [min, max], inclusive (default: 1..4).",
			       VMEM_MAX_Z));
	SET("limit", p_limit());
	SET("after", p_coord_after(max_x, "Paging: only decisions after this "
					  "coordinate in (x, y, z) order "
					  "(pass next_after of the previous "
					  "page)."));
	return rc ? -1 : 0;
}

static int in_before(json_t *props, int max_x)
{
	char d[256];
	int rc = 0;

	snprintf(d, sizeof(d),
		 "Issue number threshold, 1..%d: decisions of earlier issues "
		 "are returned.",
		 max_x + 1);
	SET("x_threshold", p_int(d, 1, (json_int_t)max_x + 1));
	SET("y_threshold", p_int("Stage threshold, 1..6: at issue "
				 "x_threshold, decisions of earlier stages "
				 "are returned.",
				 1, VMEM_MAX_Y + 1));
	SET("z_filter",
	    p_int("Only this layer (default: every layer).", 1, VMEM_MAX_Z));
	SET("limit", p_limit());
	SET("after", p_coord_after(max_x, "Paging: only decisions after this "
					  "coordinate in (x, y, z) order "
					  "(pass next_after of the previous "
					  "page)."));
	return rc ? -1 : 0;
}

static int in_search(json_t *props, int max_x)
{
	int rc = 0;
	json_t *after = p_coord_after(max_x, "Paging: continue after this "
					     "result (pass next_after of the "
					     "previous page).");

	if (after) {
		json_t *p = json_object_get(after, "properties");
		json_t *req = json_object_get(after, "required");

		rc |= json_object_set_new(
			p, "score",
			p_int("The result's score.", 1, SEARCH_TERMS_MAX));
		rc |= json_array_append_new(req, json_string("score"));
	}
	SET("terms",
	    json_pack("{s:s,s:{s:s,s:i},s:i,s:i,s:s}", "type", "array", "items",
		      "type", "string", "minLength", 1, "minItems", 1,
		      "maxItems", SEARCH_TERMS_MAX, "description",
		      "Words or phrases. Matching is by whole words, "
		      "case-insensitive; a term of several words matches them "
		      "consecutively (\"rest api\"); a final * matches a "
		      "prefix (\"postgres*\")."));
	SET("match_all",
	    p_bool("Require every term to match (default: any term)."));
	SET("limit", p_limit());
	SET("after", after);
	return rc ? -1 : 0;
}

static int in_history(json_t *props, int max_x)
{
	int rc = in_coord(props, max_x);

	SET("limit", p_limit());
	SET("after",
	    json_pack("{s:s,s:s,s:s}", "type", "string", "pattern",
		      "^([0-9a-f]{40}|uncommitted)$", "description",
		      "Paging: the versions older than this one (pass "
		      "next_after of the previous page: a commit id, or "
		      "\"uncommitted\")."));
	return rc ? -1 : 0;
}

static int in_sync(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("message", p_str("Commit message replacing the generated one.", 1,
			     MESSAGE_MAX));
	return rc ? -1 : 0;
}

/* ---- conversations and documents (issue 15) ---- */

static json_t *p_uuid(const char *desc)
{
	return json_pack("{s:s,s:s,s:s}", "type", "string", "format", "uuid",
			 "description", desc);
}

static json_t *p_meta(const char *desc)
{
	return json_pack("{s:s,s:b,s:s}", "type", "object",
			 "additionalProperties", 1, "description", desc);
}

static json_t *p_vector(const char *desc)
{
	return json_pack("{s:s,s:{s:s},s:i,s:s}", "type", "array", "items",
			 "type", "number", "minItems", 1, "description", desc);
}

/* ---- experiences ---- */

static json_t *p_agent(const char *desc)
{
	return json_pack("{s:s,s:i,s:i,s:s,s:s}", "type", "string", "minLength",
			 1, "maxLength", VMEM_AGENT_ID_MAX, "pattern",
			 AGENT_ID_PATTERN, "description", desc);
}

static json_t *p_tags(const char *desc, int min)
{
	return json_pack("{s:s,s:{s:s,s:i,s:i,s:s},s:i,s:i,s:b,s:s}", "type",
			 "array", "items", "type", "string", "minLength", 1,
			 "maxLength", EXP_TAG_MAX, "pattern", AGENT_ID_PATTERN,
			 "minItems", min, "maxItems", EXP_TAGS_MAX,
			 "uniqueItems", 1, "description", desc);
}

static json_t *p_importance(const char *desc)
{
	return p_int(desc, EXP_IMPORTANCE_MIN, EXP_IMPORTANCE_MAX);
}

static json_t *p_time(const char *desc)
{
	return json_pack("{s:s,s:s,s:s}", "type", "string", "format",
			 "date-time", "description", desc);
}

static int in_remember(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("session_id", p_uuid("The conversation: a UUID. A session not "
				 "known yet is created (for user_id)."));
	SET("role",
	    json_pack("{s:s,s:[s,s,s],s:s}", "type", "string", "enum", "user",
		      "assistant", "system", "description", "Who said it."));
	SET("content", p_str("The message: at least one character, at most "
			     "1 MiB of UTF-8.",
			     1, REC_CONTENT_MAX));
	SET("metadata", p_meta("Optional facts about the message (model, "
			       "tokens, source...)."));
	SET("user_id", p_str("The user of a session this call creates "
			     "(default: this session's agent id).",
			     1, REC_USER_ID_MAX));
	return rc ? -1 : 0;
}

static int in_conversation(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("session_id", p_uuid("The conversation: a UUID."));
	SET("limit", p_limit());
	return rc ? -1 : 0;
}

static int in_search_documents(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("query_embedding",
	    p_vector("The query vector: exactly as many numbers as the "
		     "daemon's embedding_dim (1536 unless configured)."));
	SET("top_k",
	    json_pack("{s:s,s:i,s:i,s:i,s:s}", "type", "integer", "minimum", 1,
		      "maximum", MCP_PAGE_MAX, "default", 10, "description",
		      "How many documents (the most similar first)."));
	SET("metadata_filters",
	    p_meta("Only documents whose metadata contains this object "
		   "(PostgreSQL jsonb @>: nested objects, arrays contain "
		   "elements), e.g. {\"category\": \"research\"}."));
	SET("exact", p_bool("Compare with every document instead of using "
			    "the index (slower; the index's recall is "
			    "0.98 or more)."));
	return rc ? -1 : 0;
}

static int in_between(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("start", p_time("The window's start, RFC 3339 (no offset: "
			    "UTC), inclusive."));
	SET("end", p_time("The window's end, inclusive; not before start."));
	SET("metadata_filters",
	    p_meta("Only documents whose metadata contains this object "
		   "(jsonb @>)."));
	SET("limit", p_limit());
	return rc ? -1 : 0;
}

static int in_record(json_t *props, int max_x)
{
	char d[DESC_MAX];
	int rc = 0;

	(void)max_x;
	snprintf(d, sizeof(d),
		 "The situation you were in (what was asked, what you saw): "
		 "the text similar situations are found by later. Not empty "
		 "or only white space, at most %d bytes of UTF-8.",
		 EXP_TEXT_MAX);
	SET("context", p_str(d, 1, EXP_TEXT_MAX));
	snprintf(d, sizeof(d),
		 "What you did. Not empty, at most %d bytes of UTF-8.",
		 EXP_TEXT_MAX);
	SET("action", p_str(d, 1, EXP_TEXT_MAX));
	snprintf(d, sizeof(d),
		 "What came of it (success, failure, what you learned). Not "
		 "empty, at most %d bytes of UTF-8.",
		 EXP_TEXT_MAX);
	SET("outcome", p_str(d, 1, EXP_TEXT_MAX));
	SET("tags", p_tags("Categories for recall (e.g. [\"testing\", "
			   "\"flaky\"]): up to 32 distinct strings of 1..64 "
			   "bytes, order kept.",
			   0));
	SET("importance",
	    p_importance("How much this should count, 1 (trivial) to 10 "
			 "(critical); default 5."));
	SET("metadata",
	    json_pack("{s:s,s:s}", "type", "object", "description",
		      "Structured facts (a JSON object, at most 16 KB)."));
	SET("agent_id",
	    p_agent("Whose experience (default: the agent id of this "
		    "session). At most 128 bytes, no control characters."));
	SET("timeout_ms", p_timeout());
	return rc ? -1 : 0;
}

static int in_recall(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("agent_id",
	    p_agent("Whose experiences (default: the agent id of this "
		    "session)."));
	SET("tags", p_tags("Only experiences holding every one of these "
			   "tags.",
			   1));
	SET("min_importance",
	    p_importance("Only experiences of at least this importance "
			 "(default 1)."));
	SET("since", p_time("Only experiences recorded at or after this "
			    "time (RFC 3339, e.g. 2025-01-06T00:00:00Z)."));
	SET("until", p_time("Only experiences recorded at or before this "
			    "time (RFC 3339)."));
	SET("limit", p_limit());
	SET("after", json_pack("{s:s,s:s}", "type", "string", "description",
			       "Paging: the experiences older than this one "
			       "(pass next_after of the previous page)."));
	return rc ? -1 : 0;
}

static int in_similar(json_t *props, int max_x)
{
	char d[DESC_MAX];
	int rc = 0;

	(void)max_x;
	snprintf(d, sizeof(d),
		 "The situation you are in, in words: experiences whose "
		 "context (weighted most), action or outcome share its words "
		 "come first (BM25). Whole words only; a word ending in * "
		 "matches as a prefix (\"deploy*\"). Stop words (the, and, "
		 "...) are ignored; at most %d bytes.",
		 EXP_TEXT_MAX);
	SET("context", p_str(d, 1, EXP_TEXT_MAX));
	SET("agent_id", p_agent("Only this agent's experiences (default: "
				"every agent's)."));
	SET("min_importance",
	    p_importance("Only experiences of at least this importance."));
	SET("limit", p_limit());
	SET("after", json_pack("{s:s,s:s}", "type", "string", "description",
			       "Paging: the results ranked after this one "
			       "(pass next_after of the previous page)."));
	return rc ? -1 : 0;
}

static int in_exp_stats(json_t *props, int max_x)
{
	int rc = 0;

	(void)max_x;
	SET("agent_id", p_agent("One agent's statistics (default: every "
				"agent's, with the count of each)."));
	return rc ? -1 : 0;
}

#undef SET

/* ---- output schemas ---- */

/* schema (stolen) or null; anyOf rather than a type array, which the
 * single-type dialects of some model providers refuse. */
static json_t *o_nullable(json_t *schema)
{
	return json_pack("{s:[o,{s:s}]}", "anyOf", schema, "type", "null");
}

/* A nullable scalar: {"anyOf": [{"type": type}, {"type": "null"}]}. */
static json_t *o_maybe(const char *type)
{
	return o_nullable(json_pack("{s:s}", "type", type));
}

static json_t *o_coord(int max_x)
{
	return json_pack("{s:s,s:{s:{s:s,s:i,s:i},s:{s:s,s:i,s:i},s:{s:s,s:i,"
			 "s:i}},s:[s,s,s]}",
			 "type", "object", "properties", "x", "type", "integer",
			 "minimum", 1, "maximum", max_x, "y", "type", "integer",
			 "minimum", 1, "maximum", VMEM_MAX_Y, "z", "type",
			 "integer", "minimum", 1, "maximum", VMEM_MAX_Z,
			 "required", "x", "y", "z");
}

/* A decision; in a listing its content may be a preview. */
static json_t *o_decision(int max_x, bool listed)
{
	json_t *o = json_pack(
		"{s:s,s:{s:o,s:{s:s},s:{s:s},s:{s:s},s:o,s:{s:s,s:i}},"
		"s:[s,s,s,s,s,s]}",
		"type", "object", "properties", "coordinate", o_coord(max_x),
		"content", "type", "string", "timestamp", "type", "string",
		"agent_id", "type", "string", "issue_context",
		o_nullable(json_pack("{s:s,s:{s:s}}", "type", "object",
				     "additionalProperties", "type", "string")),
		"version", "type", "integer", "minimum", 1, "required",
		"coordinate", "content", "timestamp", "agent_id",
		"issue_context", "version");
	json_t *props = json_object_get(o, "properties");

	if (o && listed &&
	    (json_object_set_new(
		     props, "content_truncated",
		     json_pack("{s:s,s:s}", "type", "boolean", "description",
			       "content is a preview: get_decision shows it "
			       "whole")) < 0 ||
	     json_object_set_new(props, "content_bytes",
				 json_pack("{s:s,s:s}", "type", "integer",
					   "description",
					   "the whole content's length in "
					   "bytes")) < 0)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A page of items: {<items>: [...], count, more, next_after}. */
static json_t *o_page(const char *items, json_t *item, json_t *cursor)
{
	return json_pack("{s:s,s:{s:{s:s,s:o},s:{s:s,s:i},s:{s:s},s:o},s:[s,s,"
			 "s,s]}",
			 "type", "object", "properties", items, "type", "array",
			 "items", item, "count", "type", "integer", "minimum",
			 0, "more", "type", "boolean", "next_after", cursor,
			 "required", items, "count", "more", "next_after");
}

static json_t *o_store(int max_x)
{
	return o_decision(max_x, false);
}

static json_t *o_get(int max_x)
{
	return json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type", "object",
			 "properties", "found", "type", "boolean", "decision",
			 o_nullable(o_decision(max_x, false)), "required",
			 "found", "decision");
}

static json_t *o_delete(int max_x)
{
	(void)max_x;
	return json_pack("{s:s,s:{s:{s:s}},s:[s]}", "type", "object",
			 "properties", "deleted", "type", "boolean", "required",
			 "deleted");
}

static json_t *o_list(int max_x)
{
	return o_page("decisions", o_decision(max_x, true),
		      o_nullable(o_coord(max_x)));
}

static json_t *o_search(int max_x)
{
	json_t *d = o_decision(max_x, true);
	json_t *cur = o_coord(max_x);
	json_t *props = json_object_get(d, "properties");
	int rc = 0;

	rc |= json_object_set_new(
		props, "score",
		json_pack("{s:s,s:i}", "type", "integer", "minimum", 1));
	rc |= json_object_set_new(props, "matched_terms",
				  json_pack("{s:s,s:{s:s}}", "type", "array",
					    "items", "type", "string"));
	rc |= json_object_set_new(json_object_get(cur, "properties"), "score",
				  json_pack("{s:s}", "type", "integer"));
	rc |= json_array_append_new(json_object_get(d, "required"),
				    json_string("score"));
	if (rc) {
		json_decref(d);
		json_decref(cur);
		return NULL;
	}
	return o_page("decisions", d, o_nullable(cur));
}

static json_t *o_history(int max_x)
{
	(void)max_x;
	return o_page(
		"versions",
		json_pack("{s:s,s:{s:o,s:o,s:o,s:o,s:{s:s},s:o,s:o,s:{s:s},"
			  "s:{s:s}},s:[s,s,s,s,s,s,s]}",
			  "type", "object", "properties", "content",
			  o_maybe("string"), "agent_id", o_maybe("string"),
			  "timestamp", o_maybe("string"), "version",
			  o_maybe("integer"), "deleted", "type", "boolean",
			  "commit", o_maybe("string"), "committed_at",
			  o_maybe("string"), "content_truncated", "type",
			  "boolean", "content_bytes", "type", "integer",
			  "required", "content", "agent_id", "timestamp",
			  "version", "deleted", "commit", "committed_at"),
		o_maybe("string"));
}

static json_t *o_message(void)
{
	return json_pack(
		"{s:s,s:{s:{s:s},s:{s:s},s:{s:s,s:[s,s,s]},s:{s:s},s:{s:s},"
		"s:{s:s},s:{s:s},s:{s:s}},s:[s,s,s,s,s,s]}",
		"type", "object", "properties", "id", "type", "string",
		"session_id", "type", "string", "role", "type", "string",
		"enum", "user", "assistant", "system", "content", "type",
		"string", "created_at", "type", "string", "metadata", "type",
		"object", "content_truncated", "type", "boolean",
		"content_bytes", "type", "integer", "required", "id",
		"session_id", "role", "content", "created_at", "metadata");
}

static json_t *o_remember(int max_x)
{
	(void)max_x;
	return o_message();
}

static json_t *o_conversation(int max_x)
{
	(void)max_x;
	return json_pack("{s:s,s:{s:{s:s,s:o},s:{s:s,s:i},s:{s:s,s:s}},"
			 "s:[s,s,s]}",
			 "type", "object", "properties", "messages", "type",
			 "array", "items", o_message(), "count", "type",
			 "integer", "minimum", 0, "older", "type", "boolean",
			 "description", "older messages exist than those shown",
			 "required", "messages", "count", "older");
}

static json_t *o_document(bool scored)
{
	json_t *o = json_pack(
		"{s:s,s:{s:{s:s},s:{s:s},s:{s:s},s:{s:s},s:{s:s},s:{s:s},"
		"s:{s:s},s:{s:s}},s:[s,s,s,s,s,s]}",
		"type", "object", "properties", "id", "type", "string",
		"content", "type", "string", "metadata", "type", "object",
		"created_at", "type", "string", "updated_at", "type", "string",
		"has_embedding", "type", "boolean", "content_truncated", "type",
		"boolean", "content_bytes", "type", "integer", "required", "id",
		"content", "metadata", "created_at", "updated_at",
		"has_embedding");

	if (o && scored &&
	    (json_object_set_new(json_object_get(o, "properties"), "score",
				 json_pack("{s:s,s:s}", "type", "number",
					   "description",
					   "cosine similarity, -1..1")) < 0 ||
	     json_array_append_new(json_object_get(o, "required"),
				   json_string("score")) < 0)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *o_documents(bool scored)
{
	return json_pack("{s:s,s:{s:{s:s,s:o},s:{s:s,s:i},s:{s:s,s:s}},"
			 "s:[s,s,s]}",
			 "type", "object", "properties", "documents", "type",
			 "array", "items", o_document(scored), "count", "type",
			 "integer", "minimum", 0, "more", "type", "boolean",
			 "description", "more documents match than those shown",
			 "required", "documents", "count", "more");
}

static json_t *o_search_documents(int max_x)
{
	(void)max_x;
	return o_documents(true);
}

static json_t *o_between(int max_x)
{
	(void)max_x;
	return o_documents(false);
}

static json_t *o_sync(int max_x)
{
	(void)max_x;
	return json_pack("{s:s,s:{s:o,s:{s:s,s:i},s:{s:s},s:o},s:[s,s,s]}",
			 "type", "object", "properties", "commit",
			 o_maybe("string"), "decisions", "type", "integer",
			 "minimum", 0, "coordinates", "type", "array", "ranges",
			 o_maybe("object"), "required", "commit", "decisions",
			 "coordinates");
}

/* An experience; in a listing its texts may be previews. */
static json_t *o_experience(bool listed, bool scored)
{
	json_t *o = json_pack(
		"{s:s,s:{s:{s:s},s:{s:s},s:{s:s},s:{s:s},s:{s:s},s:{s:s},"
		"s:{s:s,s:i,s:i},s:{s:s,s:{s:s}},s:{s:s}},"
		"s:[s,s,s,s,s,s,s,s,s]}",
		"type", "object", "properties", "id", "type", "string",
		"agent_id", "type", "string", "context", "type", "string",
		"action", "type", "string", "outcome", "type", "string",
		"timestamp", "type", "string", "importance", "type", "integer",
		"minimum", EXP_IMPORTANCE_MIN, "maximum", EXP_IMPORTANCE_MAX,
		"tags", "type", "array", "items", "type", "string", "metadata",
		"type", "object", "required", "id", "agent_id", "context",
		"action", "outcome", "timestamp", "importance", "tags",
		"metadata");
	json_t *props = json_object_get(o, "properties");
	static const char *const texts[] = {"context", "action", "outcome"};
	int rc = 0;

	for (size_t i = 0; o && listed && i < 3; i++) {
		char name[32];

		snprintf(name, sizeof(name), "%s_truncated", texts[i]);
		rc |= json_object_set_new(
			props, name,
			json_pack("{s:s,s:s}", "type", "boolean", "description",
				  "the text is a preview (1 KB)"));
		snprintf(name, sizeof(name), "%s_bytes", texts[i]);
		rc |= json_object_set_new(
			props, name,
			json_pack("{s:s,s:s}", "type", "integer", "description",
				  "the whole text's length in bytes"));
	}
	if (o && scored) {
		rc |= json_object_set_new(props, "score",
					  json_pack("{s:s}", "type", "number"));
		rc |= json_object_set_new(props, "matched_terms",
					  json_pack("{s:s,s:{s:s}}", "type",
						    "array", "items", "type",
						    "string"));
		rc |= json_array_append_new(json_object_get(o, "required"),
					    json_string("score"));
		rc |= json_array_append_new(json_object_get(o, "required"),
					    json_string("matched_terms"));
	}
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *o_record(int max_x)
{
	(void)max_x;
	return o_experience(false, false);
}

static json_t *o_recall(int max_x)
{
	(void)max_x;
	return o_page("experiences", o_experience(true, false),
		      o_maybe("string"));
}

static json_t *o_similar(int max_x)
{
	(void)max_x;
	return o_page("experiences", o_experience(true, true),
		      o_maybe("string"));
}

static json_t *o_exp_stats(int max_x)
{
	(void)max_x;
	return json_pack(
		"{s:s,s:{s:o,s:{s:s,s:i},s:{s:s},s:o,s:o,s:{s:s,s:{s:s}},"
		"s:{s:s},s:{s:s,s:{s:s}},s:{s:s}},s:[s,s,s,s,s,s,s]}",
		"type", "object", "properties", "agent_id", o_maybe("string"),
		"total_count", "type", "integer", "minimum", 0,
		"avg_importance", "type", "number", "oldest", o_maybe("string"),
		"newest", o_maybe("string"), "tag_distribution", "type",
		"object", "additionalProperties", "type", "integer",
		"tags_total", "type", "integer", "agents", "type", "object",
		"additionalProperties", "type", "integer", "agents_total",
		"type", "integer", "required", "agent_id", "total_count",
		"avg_importance", "oldest", "newest", "tag_distribution",
		"tags_total");
}

/* ---- argument mapping and cursors ---- */

/* search_decisions' after {x, y, z, score}: the handler's after (a
 * coordinate) and after_score. */
static int prep_search(json_t *args, json_t *params, char *msg, size_t n)
{
	json_t *after = json_object_get(args, "after");
	json_t *coord, *score;

	if (!after || json_is_null(after))
		return 0;
	if (!json_is_object(after) ||
	    !json_is_integer(score = json_object_get(after, "score"))) {
		snprintf(msg, n,
			 "ValueError: after must be an object {x, y, "
			 "z, score} (next_after of a page)");
		return -1;
	}
	coord = json_deep_copy(after);
	if (!coord || json_object_del(coord, "score") < 0 ||
	    json_object_set_new(params, "after", coord) < 0 ||
	    json_object_set(params, "after_score", score) < 0)
		return -ENOMEM;
	return 0;
}

static json_t *cur_coord(json_t *item)
{
	return json_deep_copy(json_object_get(item, "coordinate"));
}

static json_t *cur_search(json_t *item)
{
	json_t *c = cur_coord(item);

	if (c &&
	    json_object_set(c, "score", json_object_get(item, "score")) < 0) {
		json_decref(c);
		c = NULL;
	}
	return c;
}

static json_t *cur_id(json_t *item)
{
	return json_incref(json_object_get(item, "id"));
}

static json_t *cur_history(json_t *item)
{
	json_t *commit = json_object_get(item, "commit");

	return json_is_string(commit) ? json_incref(commit)
				      : json_string("uncommitted");
}

/* Conversations and documents: the handler is asked for one item more
 * than shown (history: the limit; documents: top_k or limit), which says
 * whether more exist. */
static int prep_one_more(json_t *args, json_t *params, const char *name,
			 json_int_t def, char *msg, size_t n)
{
	json_t *v = json_object_get(args, name);

	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
		  json_integer_value(v) > MCP_PAGE_MAX)) {
		snprintf(msg, n, "ValueError: %s must be an integer in 1..%d",
			 name, MCP_PAGE_MAX);
		return -1;
	}
	return json_object_set_new(
		       params, name,
		       json_integer((v ? json_integer_value(v) : def) + 1)) < 0
		       ? -ENOMEM
		       : 0;
}

static int prep_history(json_t *args, json_t *params, char *msg, size_t n)
{
	return prep_one_more(args, params, "limit", MCP_PAGE_DEFAULT, msg, n);
}

static int prep_search_documents(json_t *args, json_t *params, char *msg,
				 size_t n)
{
	return prep_one_more(args, params, "top_k", 10, msg, n);
}

static int prep_between(json_t *args, json_t *params, char *msg, size_t n)
{
	return prep_one_more(args, params, "limit", MCP_PAGE_DEFAULT, msg, n);
}

static int preview_item(json_t *item);

/*
 * Items (a list, changed in place) cut to previews and to at most want
 * of them under MCP_PAGE_BYTES, taken from the front, or from the back
 * when newest_last (history: the most recent are kept). The kept items
 * in a new array (in their order); *more when some were left out.
 */
static json_t *bounded(json_t *list, size_t want, bool newest_last, bool *more)
{
	size_t total = json_array_size(list), kept = 0, bytes = 128, i;
	json_t *out = json_array();

	*more = total > want;
	if (!out)
		return NULL;
	for (i = 0; i < total && kept < want; i++) {
		size_t at = newest_last ? total - 1 - i : i;
		json_t *item = json_array_get(list, at);
		size_t sz;

		if (preview_item(item) < 0)
			goto fail;
		sz = json_dumpb(item, NULL, 0, JSON_COMPACT) + 1;
		if (kept > 0 && bytes + sz > MCP_PAGE_BYTES) {
			*more = true;
			break;
		}
		bytes += sz;
		if ((newest_last ? json_array_insert(out, 0, item)
				 : json_array_append(out, item)) < 0)
			goto fail;
		kept++;
	}
	return out;
fail:
	json_decref(out);
	return NULL;
}

static size_t arg_count(json_t *args, const char *name, size_t def)
{
	json_t *v = json_object_get(args, name);

	return json_is_integer(v) ? (size_t)json_integer_value(v) : def;
}

static json_t *shape_history(json_t *args, json_t *result, char *hint, size_t n)
{
	bool older;
	json_t *msgs =
		bounded(result, arg_count(args, "limit", MCP_PAGE_DEFAULT),
			true, &older);

	if (!msgs)
		return NULL;
	if (older)
		snprintf(hint, n,
			 "Showing the %zu most recent messages; older ones "
			 "exist (a larger limit shows more, up to %d).",
			 json_array_size(msgs), MCP_PAGE_MAX);
	return json_pack("{s:o,s:I,s:b}", "messages", msgs, "count",
			 (json_int_t)json_array_size(msgs), "older", older);
}

static json_t *shape_documents(json_t *args, json_t *result, char *hint,
			       size_t n, const char *name, size_t def,
			       const char *what)
{
	bool more;
	json_t *docs =
		bounded(result, arg_count(args, name, def), false, &more);

	if (!docs)
		return NULL;
	if (more)
		snprintf(hint, n, "Showing %zu documents; %s",
			 json_array_size(docs), what);
	return json_pack("{s:o,s:I,s:b}", "documents", docs, "count",
			 (json_int_t)json_array_size(docs), "more", more);
}

static json_t *shape_search_documents(json_t *args, json_t *result, char *hint,
				      size_t n)
{
	return shape_documents(args, result, hint, n, "top_k", 10,
			       "more documents match (a larger top_k shows "
			       "more, up to 200).");
}

static json_t *shape_between(json_t *args, json_t *result, char *hint, size_t n)
{
	return shape_documents(
		args, result, hint, n, "limit", MCP_PAGE_DEFAULT,
		"older ones in the window exist: call again with "
		"end set to the created_at of the last one "
		"shown, or a larger limit.");
}

/* ---- the table ---- */

static const char *const none[] = {NULL};
static const char *const store_args[] = {
	"content",    "issue_context", "agent_id", "overwrite",
	"if_version", "timeout_ms",    NULL};
static const char *const store_required[] = {"content", NULL};
static const char *const range_args[] = {"x_range", "y_range", "z_range",
					 "limit",   "after",   NULL};
static const char *const before_args[] = {
	"x_threshold", "y_threshold", "z_filter", "limit", "after", NULL};
static const char *const before_required[] = {"x_threshold", "y_threshold",
					      NULL};
static const char *const search_args[] = {"terms", "match_all", "limit",
					  "after", NULL};
static const char *const search_required[] = {"terms", NULL};
static const char *const history_args[] = {"limit", "after", NULL};
static const char *const delete_args[] = {"if_version", "timeout_ms", NULL};
static const char *const sync_args[] = {"message", NULL};
static const char *const remember_args[] = {"session_id", "role",    "content",
					    "metadata",	  "user_id", NULL};
static const char *const remember_required[] = {"session_id", "role", "content",
						NULL};
static const char *const conversation_args[] = {"session_id", "limit", NULL};
static const char *const conversation_required[] = {"session_id", NULL};
static const char *const search_documents_args[] = {
	"query_embedding", "top_k", "metadata_filters", "exact", NULL};
static const char *const search_documents_required[] = {"query_embedding",
							NULL};
static const char *const between_args[] = {"start", "end", "metadata_filters",
					   "limit", NULL};
static const char *const between_required[] = {"start", "end", NULL};
static const char *const record_args[] = {"context",  "action",	    "outcome",
					  "tags",     "importance", "metadata",
					  "agent_id", "timeout_ms", NULL};
static const char *const record_required[] = {"context", "action", "outcome",
					      NULL};
static const char *const recall_args[] = {"agent_id", "tags",  "min_importance",
					  "since",    "until", "limit",
					  "after",    NULL};
static const char *const similar_args[] = {
	"context", "agent_id", "min_importance", "limit", "after", NULL};
static const char *const similar_required[] = {"context", NULL};
static const char *const exp_stats_args[] = {"agent_id", NULL};

#define PAGING                                                                 \
	" A page holds at most 50 results by default (limit, at most 200) "    \
	"and under 64 KB of text; contents over 1 KB are cut (content_"        \
	"truncated: get_decision shows them whole). When more is true, call "  \
	"again with the same arguments and after set to next_after."

#define EXP_PAGING                                                             \
	" A page holds at most 50 results by default (limit, at most 200) "    \
	"and under 64 KB of text; context, action and outcome over 1 KB are "  \
	"cut (<field>_truncated). When more is true, call again with the "     \
	"same "                                                                \
	"arguments and after set to next_after."

/* In the order tools/list shows them; few enough for a linear search. */
static const struct mcp_tool tools[] = {
	{"store_decision", "Store a decision",
	 "Store a decision at coordinate (x, y, z) of the shared, durable "
	 "decision memory of this repository. x is the issue number, y the "
	 "cycle stage (1 architect, 2 test, 3 implement, 4 review, 5 merge), "
	 "z the layer (1 Architecture, 2 Interfaces, 3 Implementation, "
	 "4 Ephemeral). Layer 1 is write-once: once stored it can never be "
	 "changed or deleted (ImmutableLayerError). At layers 2-4 an occupied "
	 "coordinate is only replaced with overwrite: true (or a matching "
	 "if_version); otherwise CoordinateOccupiedError. Returns the stored "
	 "decision: coordinate, content, timestamp (UTC), agent_id, "
	 "issue_context, version (1, +1 per overwrite). The write is durable "
	 "when this returns; it reaches git in the next batch commit "
	 "(sync_memory commits now).",
	 decision_store, TOOL_COORD | TOOL_DESTRUCTIVE, store_args,
	 store_required, in_store, o_store, NULL, NULL, NULL, NULL},
	{"get_decision", "Get a decision",
	 "Read the decision at coordinate (x, y, z), its content whole. "
	 "Returns {found, decision}: the decision (coordinate, content, "
	 "timestamp, agent_id, issue_context, version), or found false and "
	 "decision null when nothing is stored there.",
	 decision_get, TOOL_COORD | TOOL_READ_ONLY | TOOL_IDEMPOTENT, none,
	 none, in_coord, o_get, NULL, NULL, NULL, NULL},
	{"query_decisions", "Query a range",
	 "List the decisions inside a box of coordinates, sorted by (x, y, "
	 "z). Each range is [min, max], inclusive; an omitted range means the "
	 "whole axis. Example: x_range [10, 20] and z_range [1, 1] gives the "
	 "architecture decisions of issues 10 to 20. A range with min > max "
	 "is a QueryError." PAGING,
	 decision_query_range, TOOL_READ_ONLY | TOOL_IDEMPOTENT | TOOL_LIST,
	 range_args, none, in_query, o_list, NULL, cur_coord, "decisions",
	 NULL},
	{"decisions_before", "Decisions before",
	 "List every decision made before a point of the work: those of "
	 "issues x < x_threshold, and at issue x_threshold those of stages "
	 "y < y_threshold, sorted by (x, y, z). Use it to load what earlier "
	 "work decided before starting stage y_threshold of issue "
	 "x_threshold; z_filter keeps one layer only." PAGING,
	 decision_query_partial_order,
	 TOOL_READ_ONLY | TOOL_IDEMPOTENT | TOOL_LIST, before_args,
	 before_required, in_before, o_list, NULL, cur_coord, "decisions",
	 NULL},
	{"search_decisions", "Search decisions",
	 "Full-text search of decision contents: the matching decisions, "
	 "each with score (how many distinct terms matched) and "
	 "matched_terms, best first, then by (x, y, z). Words never match "
	 "inside other words: \"post\" does not match \"PostgreSQL\", "
	 "\"post*\" does." PAGING,
	 decision_search, TOOL_READ_ONLY | TOOL_IDEMPOTENT | TOOL_LIST,
	 search_args, search_required, in_search, o_search, prep_search,
	 cur_search, "decisions", NULL},
	{"decision_history", "Decision history",
	 "The versions a coordinate has had, newest first, from git history "
	 "plus the uncommitted current state: {content, agent_id, timestamp, "
	 "version, deleted, commit, committed_at}; commit is null for the "
	 "state not committed yet." PAGING,
	 decision_history,
	 TOOL_COORD | TOOL_READ_ONLY | TOOL_IDEMPOTENT | TOOL_LIST,
	 history_args, none, in_history, o_history, NULL, cur_history,
	 "versions", NULL},
	{"delete_decision", "Delete a decision",
	 "Delete the decision at coordinate (x, y, z) of layer 2, 3 or 4 (git "
	 "history keeps it). Layer 1 cannot be deleted (ImmutableLayerError). "
	 "Returns {deleted}: true if a decision was there, false if not.",
	 decision_delete, TOOL_COORD | TOOL_DESTRUCTIVE | TOOL_IDEMPOTENT,
	 delete_args, none, in_delete, o_delete, NULL, NULL, NULL, NULL},
	{"sync_memory", "Commit to git",
	 "Commit every pending decision to git now (they are otherwise "
	 "committed in batches about a second after they are stored). "
	 "Returns {commit, decisions, coordinates, ranges}; commit is null "
	 "when nothing was pending.",
	 git_sync, TOOL_IDEMPOTENT, sync_args, none, in_sync, o_sync, NULL,
	 NULL, NULL, NULL},
	/* conversations and documents (issue 15): local, never committed */
	{"remember_message", "Remember a message",
	 "Append a message (role user, assistant or system) to a "
	 "conversation of this repository's local memory; the session is "
	 "created if it does not exist (a session id is any UUID the caller "
	 "picks). Returns the stored message with its id and created_at "
	 "(UTC). Durable when this returns; kept under .git/vmem, never "
	 "committed.",
	 message_store, 0, remember_args, remember_required, in_remember,
	 o_remember, NULL, NULL, NULL, NULL},
	{"conversation_history", "Conversation history",
	 "The most recent messages of a conversation, oldest first: "
	 "{messages, count, older}. At most limit (default 50, at most 200) "
	 "and under 64 KB; contents over 1 KB are cut (content_truncated). "
	 "An unknown session has no messages.",
	 message_history, TOOL_READ_ONLY | TOOL_IDEMPOTENT, conversation_args,
	 conversation_required, in_conversation, o_conversation, prep_history,
	 NULL, NULL, shape_history},
	{"search_documents", "Search documents",
	 "The documents most similar to a query embedding (cosine), best "
	 "first, each with its score, among those whose metadata contains "
	 "metadata_filters (PostgreSQL jsonb @> semantics): {documents, "
	 "count, more}. A filtered search always fills top_k when that many "
	 "documents match. Contents over 1 KB are cut; the page stays under "
	 "64 KB.",
	 document_semantic_search, TOOL_READ_ONLY | TOOL_IDEMPOTENT,
	 search_documents_args, search_documents_required, in_search_documents,
	 o_search_documents, prep_search_documents, NULL, NULL,
	 shape_search_documents},
	{"documents_between", "Documents between two times",
	 "The documents created in a time window [start, end] (RFC 3339, "
	 "inclusive), newest first, optionally only those whose metadata "
	 "contains metadata_filters: {documents, count, more}. At most limit "
	 "(default 50, at most 200) and under 64 KB.",
	 document_temporal_query, TOOL_READ_ONLY | TOOL_IDEMPOTENT,
	 between_args, between_required, in_between, o_between, prep_between,
	 NULL, NULL, shape_between},
	{"find_similar_experiences", "Find similar experiences",
	 "Before acting: look up what agents did in situations like yours "
	 "and what came of it. Describe your situation in context; the "
	 "experiences whose context (weighted most), action and outcome "
	 "share its words come first, ranked by BM25 relevance (ties: the "
	 "more important, then the newer), each with score and "
	 "matched_terms. Whole words only: \"post\" does not match "
	 "\"PostgreSQL\", \"post*\" does. A context of only stop words is "
	 "a QueryError." EXP_PAGING,
	 experience_find_similar, TOOL_READ_ONLY | TOOL_IDEMPOTENT | TOOL_LIST,
	 similar_args, similar_required, in_similar, o_similar, NULL, cur_id,
	 "experiences", NULL},
	{"record_experience", "Record an experience",
	 "After acting: record the situation (context), what you did "
	 "(action) and what came of it (outcome), with tags and an "
	 "importance from 1 to 10 (default 5), so that you and every other "
	 "agent of this repository (and of its clones, through git) can find "
	 "it again with find_similar_experiences or recall_experiences. "
	 "Record failures as well as successes. Returns the stored "
	 "experience with its id (time-ordered) and timestamp; it is "
	 "durable when this returns, immutable, and committed to git in the "
	 "next batch.",
	 experience_store, 0, record_args, record_required, in_record, o_record,
	 NULL, NULL, NULL, NULL},
	{"recall_experiences", "Recall experiences",
	 "An agent's experiences, newest first (default: this session's "
	 "agent), filtered by tags (all of them), minimum importance and a "
	 "time window." EXP_PAGING,
	 experience_retrieve, TOOL_READ_ONLY | TOOL_IDEMPOTENT | TOOL_LIST,
	 recall_args, none, in_recall, o_recall, NULL, cur_id, "experiences",
	 NULL},
	{"experience_stats", "Experience statistics",
	 "How many experiences an agent (or every agent) recorded, their "
	 "average importance, the oldest and newest, and how often each tag "
	 "occurs (the 1000 most frequent; tags_total counts them all). "
	 "Without agent_id: every agent's, with the count of each.",
	 experience_stats, TOOL_READ_ONLY | TOOL_IDEMPOTENT, exp_stats_args,
	 none, in_exp_stats, o_exp_stats, NULL, NULL, NULL, NULL},
};

#define N_TOOLS (sizeof(tools) / sizeof(tools[0]))

const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (size_t i = 0; i < N_TOOLS; i++)
		if (strcmp(tools[i].name, name) == 0)
			return &tools[i];
	return NULL;
}

static bool is_axis(const char *key)
{
	return !strcmp(key, "x") || !strcmp(key, "y") || !strcmp(key, "z");
}

bool mcp_tool_takes(const struct mcp_tool *tool, const char *name)
{
	if ((tool->flags & TOOL_COORD) && is_axis(name))
		return true;
	for (const char *const *a = tool->args; *a; a++)
		if (strcmp(*a, name) == 0)
			return true;
	return false;
}

/* The page size of a listing call: its limit argument, else the default.
 * The argument was checked by mcp_tool_params. */
static size_t page_size(json_t *args)
{
	json_t *v = json_object_get(args, "limit");

	return json_is_integer(v) ? (size_t)json_integer_value(v)
				  : MCP_PAGE_DEFAULT;
}

int mcp_tool_params(const struct mcp_tool *tool, json_t *args, json_t **out,
		    char *msg, size_t n)
{
	json_t *params = json_object(), *coord = NULL, *v;
	const char *key;
	int rc = -ENOMEM;

	*out = NULL;
	if (!params)
		goto out;
	if ((tool->flags & TOOL_COORD) && !(coord = json_object()))
		goto out;
	/* Arguments of the wrong name are the caller's to fix: a tool error,
	 * like every other fault of the arguments. */
	json_object_foreach(args, key, v)
	{
		if (!mcp_tool_takes(tool, key)) {
			snprintf(msg, n, "ValueError: unknown argument: %.200s",
				 key);
			rc = -1;
			goto out;
		}
		if (json_object_set(coord && is_axis(key) ? coord : params, key,
				    v) < 0)
			goto out;
	}
	for (const char *const *r = tool->required; *r; r++)
		if (!json_object_get(args, *r)) {
			snprintf(msg, n, "ValueError: missing argument: %s",
				 *r);
			rc = -1;
			goto out;
		}
	if (coord) {
		static const char *const axes[] = {"x", "y", "z"};

		for (size_t i = 0; i < 3; i++)
			if (!json_object_get(coord, axes[i])) {
				snprintf(msg, n,
					 "ValueError: missing argument: %s",
					 axes[i]);
				rc = -1;
				goto out;
			}
		rc = json_object_set_new(params, "coordinate", coord);
		coord = NULL;
		if (rc < 0) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (tool->flags & TOOL_LIST) {
		v = json_object_get(args, "limit");
		if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
			  json_integer_value(v) > MCP_PAGE_MAX)) {
			snprintf(msg, n,
				 "ValueError: limit must be an integer in "
				 "1..%d",
				 MCP_PAGE_MAX);
			rc = -1;
			goto out;
		}
		/* One more than the page: whether more exist. */
		if (json_object_set_new(
			    params, "limit",
			    json_integer((json_int_t)page_size(args) + 1)) < 0)
			goto out;
	}
	if (tool->prepare) {
		rc = tool->prepare(args, params, msg, n);
		if (rc < 0)
			goto out;
	}
	*out = params;
	params = NULL;
	rc = 0;
out:
	json_decref(params);
	json_decref(coord);
	return rc;
}

json_t *mcp_preview(const char *s, size_t len, size_t max)
{
	size_t cut = max;

	if (len <= max)
		return NULL;
	/* Back up to the first byte of a UTF-8 sequence. */
	while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
		cut--;
	return json_stringn(s, cut);
}

/* Cut an item's texts (a decision's content, an experience's context,
 * action and outcome) to previews, saying so; 0 or -1. */
static int preview_item(json_t *item)
{
	static const char *const texts[] = {"content", "context", "action",
					    "outcome"};

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		json_t *text = json_object_get(item, texts[i]);
		char name[32];
		json_t *p;

		if (!json_is_string(text))
			continue;
		p = mcp_preview(json_string_value(text),
				json_string_length(text), MCP_PREVIEW_BYTES);
		if (!p)
			continue;
		snprintf(name, sizeof(name), "%s_bytes", texts[i]);
		if (json_object_set_new(
			    item, name,
			    json_integer((json_int_t)json_string_length(
				    text))) < 0 ||
		    json_object_set_new(item, texts[i], p) < 0)
			return -1;
		snprintf(name, sizeof(name), "%s_truncated", texts[i]);
		if (json_object_set_new(item, name, json_true()) < 0)
			return -1;
	}
	return 0;
}

/* A listing's page: at most page_size items, under MCP_PAGE_BYTES. */
static json_t *page(const struct mcp_tool *t, json_t *args, json_t *result,
		    char *hint, size_t n)
{
	size_t want = page_size(args), total = json_array_size(result);
	size_t bytes = 128, i; /* the envelope */
	bool more = total > want;
	json_t *items = json_array(), *next = NULL, *out = NULL;
	char *after;

	if (!items)
		return NULL;
	for (i = 0; i < total && i < want; i++) {
		json_t *item = json_array_get(result, i);
		size_t sz;

		if (preview_item(item) < 0)
			goto out;
		sz = json_dumpb(item, NULL, 0, JSON_COMPACT) + 1;
		if (i > 0 && bytes + sz > MCP_PAGE_BYTES) {
			more = true;
			break;
		}
		bytes += sz;
		if (json_array_append(items, item) < 0)
			goto out;
	}
	if (more && i > 0) {
		next = t->cursor(json_array_get(result, i - 1));
		if (!next)
			goto out;
		after = json_dumps(next, JSON_COMPACT | JSON_ENCODE_ANY);
		snprintf(hint, n,
			 "Showing %zu results; more exist: call %s again with "
			 "the same arguments and \"after\": %s.",
			 i, t->name, after ? after : "next_after");
		free(after);
	}
	out = json_pack("{s:O,s:I,s:b,s:O}", t->items, items, "count",
			(json_int_t)i, "more", more, "next_after",
			next ? next : json_null());
out:
	json_decref(items);
	json_decref(next);
	return out;
}

json_t *mcp_tool_result(const struct mcp_tool *tool, json_t *args,
			json_t *result, char *hint, size_t n)
{
	hint[0] = '\0';
	if (tool->shape)
		return json_is_array(result)
			       ? tool->shape(args, result, hint, n)
			       : NULL;
	if (tool->flags & TOOL_LIST)
		return page(tool, args, result, hint, n);
	if (tool->handler == decision_get)
		return json_pack("{s:b,s:O}", "found", !json_is_null(result),
				 "decision", result);
	if (tool->handler == decision_delete)
		return json_pack("{s:O}", "deleted", result);
	return json_is_object(result) ? json_incref(result) : NULL;
}

static json_t *tool_json(const struct mcp_tool *t, int max_x)
{
	json_t *props = json_object();
	json_t *required = json_array();
	json_t *output = t->output(max_x);
	json_t *out = NULL;
	int rc = 0;

	if (!props || !required || !output || t->input(props, max_x) < 0)
		goto out;
	if (t->flags & TOOL_COORD) {
		rc |= json_array_append_new(required, json_string("x"));
		rc |= json_array_append_new(required, json_string("y"));
		rc |= json_array_append_new(required, json_string("z"));
	}
	for (const char *const *r = t->required; *r; r++)
		rc |= json_array_append_new(required, json_string(*r));
	if (rc)
		goto out;
	out = json_pack(
		"{s:s,s:s,s:s,s:{s:s,s:O,s:O,s:b},s:O,s:{s:s,s:b,s:b,s:b,s:b}}",
		"name", t->name, "title", t->title, "description",
		t->description, "inputSchema", "type", "object", "properties",
		props, "required", required, "additionalProperties", 0,
		"outputSchema", output, "annotations", "title", t->title,
		"readOnlyHint", (t->flags & TOOL_READ_ONLY) != 0,
		"destructiveHint", (t->flags & TOOL_DESTRUCTIVE) != 0,
		"idempotentHint", (t->flags & TOOL_IDEMPOTENT) != 0,
		"openWorldHint", 0);
out:
	json_decref(props);
	json_decref(required);
	json_decref(output);
	return out;
}

json_t *mcp_tools_json(const struct limits *lim)
{
	json_t *list = json_array();

	for (size_t i = 0; list && i < N_TOOLS; i++) {
		json_t *t = tool_json(&tools[i], lim->max_x);

		if (!t || json_array_append_new(list, t) < 0) {
			json_decref(list);
			list = NULL;
		}
	}
	return list;
}

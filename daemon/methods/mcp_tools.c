/*
 * The MCP tools: the table that maps each tool onto a protocol method,
 * and the schemas and descriptions tools/list shows. The schemas state the
 * daemon's own bounds (max_x from its limits), so a client that validates
 * before calling is refused for the same things the daemon refuses; the
 * daemon still checks every argument itself.
 */
#include "mcp_tools.h"

#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "params.h"
#include "protocol/decision.h"
#include "search.h"

#define DESC_MAX 2048

static const char *const store_args[] = {
	"content",    "issue_context", "agent_id", "overwrite",
	"if_version", "timeout_ms",    NULL};
static const char *const store_required[] = {"content", NULL};
static const char *const none[] = {NULL};
static const char *const range_args[] = {"x_range", "y_range", "z_range",
					 "limit",   "after",   NULL};
static const char *const before_args[] = {"x_threshold", "y_threshold",
					  "z_filter", NULL};
static const char *const before_required[] = {"x_threshold", "y_threshold",
					      NULL};
static const char *const search_args[] = {"terms", "match_all", "limit", NULL};
static const char *const search_required[] = {"terms", NULL};
static const char *const limit_args[] = {"limit", NULL};
static const char *const delete_args[] = {"if_version", "timeout_ms", NULL};
static const char *const sync_args[] = {"message", NULL};

/* In the order tools/list shows them; few enough for a linear search. */
static const struct mcp_tool tools[] = {
	{"store_decision", "decision.store", true, store_args, store_required},
	{"get_decision", "decision.get", true, none, none},
	{"query_decisions", "decision.query_range", false, range_args, none},
	{"decisions_before", "decision.query_partial_order", false, before_args,
	 before_required},
	{"search_decisions", "decision.search", false, search_args,
	 search_required},
	{"decision_history", "decision.history", true, limit_args, none},
	{"delete_decision", "decision.delete", true, delete_args, none},
	{"sync_memory", "git.sync", false, sync_args, none},
};

#define N_TOOLS (sizeof(tools) / sizeof(tools[0]))

const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (size_t i = 0; i < N_TOOLS; i++)
		if (strcmp(tools[i].name, name) == 0)
			return &tools[i];
	return NULL;
}

bool mcp_tool_takes(const struct mcp_tool *tool, const char *name)
{
	if (tool->coordinate &&
	    (!strcmp(name, "x") || !strcmp(name, "y") || !strcmp(name, "z")))
		return true;
	for (const char *const *a = tool->args; *a; a++)
		if (strcmp(*a, name) == 0)
			return true;
	return false;
}

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
	return p_int("Return at most this many results (default: all).", 1,
		     RESULTS_LIMIT_MAX);
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

/* Add the properties of a tool's arguments to props. */
static int tool_props(const struct mcp_tool *t, int max_x, json_t *props)
{
	char d[DESC_MAX];
	int rc = 0;

#define SET(name, val) (rc |= json_object_set_new(props, (name), (val)))
	if (t->coordinate) {
		SET("x", p_x(max_x));
		SET("y", p_y());
		SET("z", p_z());
	}
	if (t->args == store_args) {
		snprintf(d, sizeof(d),
			 "The decision text: non-empty UTF-8, at most %d "
			 "bytes.",
			 VMEM_CONTENT_MAX);
		SET("content", p_str(d, 1, VMEM_CONTENT_MAX));
		SET("issue_context",
		    json_pack("{s:s,s:{s:s,s:i},s:i,s:s}", "type", "object",
			      "additionalProperties", "type", "string",
			      "maxLength", VMEM_CONTEXT_VALUE_MAX,
			      "maxProperties", VMEM_CONTEXT_KEYS_MAX,
			      "description",
			      "Optional string-to-string facts about the "
			      "issue, e.g. {\"issue_id\": \"abc-12\", "
			      "\"issue_title\": \"Login page\"}."));
		SET("agent_id",
		    p_str("Who is writing (default: the agent id this "
			  "session gave, else the MCP client's name). No "
			  "control characters.",
			  1, VMEM_AGENT_ID_MAX));
		SET("overwrite",
		    p_bool("Replace an existing decision at layers 2-4 "
			   "(its version goes up by one). Without it a "
			   "store on an occupied coordinate fails with "
			   "CoordinateOccupiedError. Never allowed at "
			   "layer 1."));
		SET("if_version", p_if_version());
		SET("timeout_ms", p_timeout());
	} else if (t->args == range_args) {
		snprintf(d, sizeof(d),
			 "Issue numbers [min, max], inclusive (default: "
			 "1..%d).",
			 max_x);
		SET("x_range", p_range(d, max_x));
		SET("y_range", p_range("Cycle stages [min, max], inclusive "
				       "(default: 1..5).",
				       VMEM_MAX_Y));
		SET("z_range", p_range("Layers [min, max], inclusive "
				       "(default: 1..4).",
				       VMEM_MAX_Z));
		SET("limit", p_limit());
		SET("after",
		    json_pack("{s:s,s:{s:o,s:o,s:o},s:[s,s,s],s:b,s:s}", "type",
			      "object", "properties", "x", p_x(max_x), "y",
			      p_y(), "z", p_z(), "required", "x", "y", "z",
			      "additionalProperties", 0, "description",
			      "Paging: only decisions after this coordinate in "
			      "(x, y, z) order (pass the last one you got)."));
	} else if (t->args == before_args) {
		snprintf(d, sizeof(d),
			 "Issue number threshold, 1..%d: decisions of "
			 "earlier issues are returned.",
			 max_x + 1);
		SET("x_threshold", p_int(d, 1, (json_int_t)max_x + 1));
		SET("y_threshold",
		    p_int("Stage threshold, 1..6: at issue x_threshold, "
			  "decisions of earlier stages are returned.",
			  1, VMEM_MAX_Y + 1));
		SET("z_filter", p_int("Only this layer (default: every layer).",
				      1, VMEM_MAX_Z));
	} else if (t->args == search_args) {
		SET("terms",
		    json_pack("{s:s,s:{s:s,s:i},s:i,s:i,s:s}", "type", "array",
			      "items", "type", "string", "minLength", 1,
			      "minItems", 1, "maxItems", SEARCH_TERMS_MAX,
			      "description",
			      "Words or phrases. Matching is by whole words, "
			      "case-insensitive; a term of several words "
			      "matches them consecutively (\"rest api\"); a "
			      "final * matches a prefix (\"postgres*\")."));
		SET("match_all",
		    p_bool("Require every term to match (default: any "
			   "term)."));
		SET("limit", p_limit());
	} else if (t->args == limit_args) {
		SET("limit", p_int("Return at most this many versions "
				   "(default: all).",
				   1, RESULTS_LIMIT_MAX));
	} else if (t->args == delete_args) {
		SET("if_version", p_if_version());
		SET("timeout_ms", p_timeout());
	} else if (t->args == sync_args) {
		SET("message", p_str("Commit message replacing the generated "
				     "one.",
				     1, MESSAGE_MAX));
	}
#undef SET
	return rc ? -1 : 0;
}

static const char *const descriptions[N_TOOLS] = {
	"Store a decision at coordinate (x, y, z) of the shared, durable "
	"decision memory of this repository. x is the issue number, y the "
	"cycle stage (1 architect, 2 test, 3 implement, 4 review, 5 merge), "
	"z the layer (1 Architecture, 2 Interfaces, 3 Implementation, "
	"4 Ephemeral). Layer 1 is write-once: once stored it can never be "
	"changed or deleted (ImmutableLayerError). At layers 2-4 an occupied "
	"coordinate is only replaced with overwrite: true (or a matching "
	"if_version); otherwise CoordinateOccupiedError. Returns the stored "
	"decision as JSON: coordinate, content, timestamp (UTC), agent_id, "
	"issue_context, version (1, +1 per overwrite). The write is durable "
	"when this returns; it reaches git in the next batch commit "
	"(sync_memory commits now).",

	"Read the decision at coordinate (x, y, z). Returns the decision as "
	"JSON (coordinate, content, timestamp, agent_id, issue_context, "
	"version), or null when nothing is stored there.",

	"List the decisions inside a box of coordinates, sorted by (x, y, z). "
	"Each range is [min, max], inclusive; an omitted range means the "
	"whole axis, so no arguments list everything. Example: x_range "
	"[10, 20] and z_range [1, 1] gives the architecture decisions of "
	"issues 10 to 20. Returns a JSON array of decisions. A range with "
	"min > max is a QueryError.",

	"List every decision made before a point of the work: those of "
	"issues x < x_threshold, and at issue x_threshold those of stages "
	"y < y_threshold, sorted by (x, y, z). Use it to load what earlier "
	"work decided before starting stage y_threshold of issue "
	"x_threshold; z_filter keeps one layer only. Returns a JSON array "
	"of decisions.",

	"Full-text search of decision contents. Returns a JSON array of the "
	"matching decisions, each with score (how many distinct terms "
	"matched) and matched_terms, best first, then by (x, y, z). Words "
	"never match inside other words: \"post\" does not match "
	"\"PostgreSQL\", \"post*\" does.",

	"The versions a coordinate has had, newest first, from git history "
	"plus the uncommitted current state. Returns a JSON array of "
	"{content, agent_id, timestamp, version, deleted, commit, "
	"committed_at}; commit is null for the state not committed yet.",

	"Delete the decision at coordinate (x, y, z) of layer 2, 3 or 4 "
	"(git history keeps it). Layer 1 cannot be deleted "
	"(ImmutableLayerError). Returns true if a decision was there, false "
	"if not.",

	"Commit every pending decision to git now (they are otherwise "
	"committed in batches about a second after they are stored). "
	"Returns JSON {commit, decisions, coordinates, ranges}; commit is "
	"null when nothing was pending.",
};

static const char *const titles[N_TOOLS] = {
	"Store a decision",  "Get a decision",	 "Query a range",
	"Decisions before",  "Search decisions", "Decision history",
	"Delete a decision", "Commit to git",
};

static json_t *tool_json(size_t i, int max_x)
{
	const struct mcp_tool *t = &tools[i];
	bool is_store = !strcmp(t->method, "decision.store");
	bool is_delete = !strcmp(t->method, "decision.delete");
	bool is_sync = !strcmp(t->method, "git.sync");
	bool read_only = !is_store && !is_delete && !is_sync;
	json_t *props = json_object();
	json_t *required = json_array();
	json_t *out = NULL;
	int rc = 0;

	if (!props || !required || tool_props(t, max_x, props) < 0)
		goto out;
	if (t->coordinate) {
		rc |= json_array_append_new(required, json_string("x"));
		rc |= json_array_append_new(required, json_string("y"));
		rc |= json_array_append_new(required, json_string("z"));
	}
	for (const char *const *r = t->required; *r; r++)
		rc |= json_array_append_new(required, json_string(*r));
	if (rc)
		goto out;
	out = json_pack("{s:s,s:s,s:s,s:{s:s,s:O,s:O,s:b},s:{s:s,s:b,s:b,s:b,"
			"s:b}}",
			"name", t->name, "title", titles[i], "description",
			descriptions[i], "inputSchema", "type", "object",
			"properties", props, "required", required,
			"additionalProperties", 0, "annotations", "title",
			titles[i], "readOnlyHint", read_only, "destructiveHint",
			is_store || is_delete, "idempotentHint", !is_store,
			"openWorldHint", 0);
out:
	json_decref(props);
	json_decref(required);
	return out;
}

json_t *mcp_tools_json(const struct limits *lim)
{
	json_t *list = json_array();

	for (size_t i = 0; list && i < N_TOOLS; i++) {
		json_t *t = tool_json(i, lim->max_x);

		if (!t || json_array_append_new(list, t) < 0) {
			json_decref(list);
			list = NULL;
		}
	}
	return list;
}

/*
 * MCP (Model Context Protocol, 2025-06-18; 2025-03-26 and 2024-11-05
 * negotiated) on the daemon's own socket: initialize, the initialized
 * notification, ping, tools/list and tools/call. A tool call runs the
 * protocol method behind the tool (mcp_tools.h) through call_forward and
 * turns its answer into a CallToolResult: a result becomes its JSON text,
 * a domain error (ValueError and -32001..-32008) a result with isError and
 * "<Type>: <message>" as text; anything else stays a JSON-RPC error.
 *
 * The lifecycle is not enforced: tools work before (or without)
 * initialize, and MCP and the native methods mix on one connection.
 * initialize gives the connection an agent id only when it has none yet,
 * so an agent_id argument beats server.hello's, which beats the client's
 * name, in whatever order hello and initialize come.
 */
#include "methods.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "mcp_tools.h"
#include "protocol/decision.h"
#include "protocol/errors.h"

#define MCP_FALLBACK_AGENT "mcp-client"

/* Newest first: the answer to a version we do not know is the first. */
static const char *const mcp_versions[] = {"2025-06-18", "2025-03-26",
					   "2024-11-05"};

#define N_VERSIONS (sizeof(mcp_versions) / sizeof(mcp_versions[0]))

/* The agent id of an MCP client: its name when that is a valid agent id,
 * else the fallback (an empty, over-long or control-laden name is not
 * repaired: a rewritten name would be an identity nobody chose). */
static const char *client_agent(json_t *info)
{
	json_t *name = info ? json_object_get(info, "name") : NULL;
	char msg[VMEM_ERRMSG_LEN];

	if (name && json_is_string(name) &&
	    agent_id_check(json_string_value(name), json_string_length(name),
			   msg) == 0)
		return json_string_value(name);
	return MCP_FALLBACK_AGENT;
}

int mcp_initialize(struct call *call)
{
	json_t *version = json_object_get(call->params, "protocolVersion");
	json_t *caps = json_object_get(call->params, "capabilities");
	json_t *info = json_object_get(call->params, "clientInfo");
	json_t *name = info ? json_object_get(info, "name") : NULL;
	const char *answer = mcp_versions[0];
	struct conn *c = call->conn;
	char text[6144]; /* the repository path and a paragraph */

	if (!version || !json_is_string(version)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "protocolVersion must be a string");
		return CALL_DONE;
	}
	if ((caps && !json_is_object(caps)) ||
	    (info && !json_is_object(info)) ||
	    (name && !json_is_string(name))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "capabilities and clientInfo must be objects, "
			   "clientInfo.name a string");
		return CALL_DONE;
	}
	for (size_t i = 0; i < N_VERSIONS; i++)
		if (strcmp(json_string_value(version), mcp_versions[i]) == 0)
			answer = mcp_versions[i];
	if (!c->agent_id) {
		c->agent_id = strdup(client_agent(info));
		if (!c->agent_id) {
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
			return CALL_DONE;
		}
	}
	snprintf(text, sizeof(text),
		 "vmem is the shared, durable decision memory of the AI "
		 "agents working on the git repository %s. Every decision "
		 "lives at a coordinate (x, y, z): x is the issue number "
		 "(1..%d), y the cycle stage (1 architect, 2 test, "
		 "3 implement, 4 review, 5 merge) and z the layer "
		 "(1 Architecture, 2 Interfaces, 3 Implementation, "
		 "4 Ephemeral). Layer 1 is write-once; layers 2-4 are "
		 "replaced only with overwrite: true. Before working on a "
		 "stage of an issue, load what earlier work decided with "
		 "decisions_before (or query_decisions, search_decisions); "
		 "record each choice you make with store_decision at your "
		 "issue, stage and layer. Stored decisions are durable at "
		 "once and committed to git in batches (sync_memory commits "
		 "now).",
		 call->d->repo.root, call->d->limits.max_x);
	call_reply(call,
		   json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s,s:s},s:s}",
			     "protocolVersion", answer, "capabilities", "tools",
			     "listChanged", 0, "serverInfo", "name", "vmemd",
			     "title", "vmem decision memory", "version",
			     VMEMD_VERSION, "instructions", text));
	return CALL_DONE;
}

int mcp_initialized(struct call *call)
{
	call_reply(call, json_object());
	return CALL_DONE;
}

int mcp_ping(struct call *call)
{
	call_reply(call, json_object());
	return CALL_DONE;
}

int mcp_tools_list(struct call *call)
{
	json_t *tools = mcp_tools_json(&call->d->limits);

	call_reply(call, tools ? json_pack("{s:o}", "tools", tools) : NULL);
	return CALL_DONE;
}

/* Answer with a CallToolResult holding text (may be NULL: out of memory). */
static void reply_text(struct call *call, const char *text, bool is_error)
{
	if (!text) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return;
	}
	call_reply(call, json_pack("{s:[{s:s,s:s}],s:b}", "content", "type",
				   "text", "text", text, "isError", is_error));
	/* A tool error is a failed request in server.stats. */
	if (is_error)
		call->failed = true;
}

static bool is_tool_error(int code)
{
	return code == RPC_INVALID_PARAMS ||
	       (code <= RPC_COORDINATE_VALIDATION && code >= RPC_CONFLICT);
}

static void reply_tool_error(struct call *call, int code, const char *msg)
{
	char text[640];

	snprintf(text, sizeof(text), "%s: %s", rpc_code_type(code), msg);
	reply_text(call, text, true);
}

/* call_forward's transform: the method's answer as a CallToolResult. */
static void tool_answer(struct call *call, const struct call_answer *ans)
{
	char *text;

	if (ans->code == 0) {
		text = json_dumps(ans->result, JSON_ENCODE_ANY | JSON_COMPACT);
		reply_text(call, text, false);
		free(text);
	} else if (is_tool_error(ans->code)) {
		reply_tool_error(call, ans->code, ans->message);
	} else {
		call_error(call, ans->code, json_incref(ans->data), "%s",
			   ans->message);
	}
}

static bool is_axis(const char *key)
{
	return !strcmp(key, "x") || !strcmp(key, "y") || !strcmp(key, "z");
}

/* The first required argument of tool missing from args, or NULL. */
static const char *missing_arg(const struct mcp_tool *tool, json_t *args)
{
	static const char *const axes[] = {"x", "y", "z"};

	for (size_t i = 0; tool->coordinate && i < 3; i++)
		if (!json_object_get(args, axes[i]))
			return axes[i];
	for (const char *const *r = tool->required; *r; r++)
		if (!json_object_get(args, *r))
			return *r;
	return NULL;
}

int mcp_tools_call(struct call *call)
{
	json_t *name = json_object_get(call->params, "name");
	json_t *args = json_object_get(call->params, "arguments");
	json_t *params = NULL, *coord = NULL, *v;
	const struct mcp_tool *tool;
	const char *key, *missing;
	int rc = CALL_DONE;

	if (!name || !json_is_string(name)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "name must be a string naming a tool");
		goto out;
	}
	tool = mcp_tool_find(json_string_value(name));
	if (!tool) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "Unknown tool: %.200s", json_string_value(name));
		goto out;
	}
	if (args && !json_is_null(args) && !json_is_object(args)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "arguments must be an object");
		goto out;
	}
	params = json_object();
	coord = tool->coordinate ? json_object() : NULL;
	if (!params || (tool->coordinate && !coord)) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		goto out;
	}
	/* Arguments of the wrong name are the caller's to fix: a tool
	 * error, like every other fault of the arguments. */
	json_object_foreach(json_is_object(args) ? args : NULL, key, v)
	{
		if (!mcp_tool_takes(tool, key)) {
			char msg[256];

			snprintf(msg, sizeof(msg), "unknown argument: %.200s",
				 key);
			reply_tool_error(call, RPC_INVALID_PARAMS, msg);
			goto out;
		}
		if (json_object_set(coord && is_axis(key) ? coord : params, key,
				    v) < 0) {
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
			goto out;
		}
	}
	missing = missing_arg(tool, json_is_object(args) ? args : NULL);
	if (missing) {
		char msg[128];

		snprintf(msg, sizeof(msg), "missing argument: %s", missing);
		reply_tool_error(call, RPC_INVALID_PARAMS, msg);
		goto out;
	}
	if (coord) {
		rc = json_object_set_new(params, "coordinate", coord);
		coord = NULL;
		if (rc < 0) {
			rc = CALL_DONE;
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
			goto out;
		}
	}
	rc = call_forward(call, tool->method, params, tool_answer);
	params = NULL;
out:
	json_decref(params);
	json_decref(coord);
	return rc;
}

/*
 * MCP (Model Context Protocol 2025-11-25; 2025-06-18, 2025-03-26 and
 * 2024-11-05 negotiated) on the daemon's own socket: initialize, the
 * initialized notification, server/discover, ping, tools/list and
 * tools/call, notifications/cancelled, logging/setLevel (resources and
 * prompts are in methods_mcp_resources.c). A tool call runs the handler
 * behind the tool (mcp_tools.h) through call_forward and turns its
 * answer into a CallToolResult: a result becomes structuredContent and
 * its JSON text, a domain error (ValueError and -32001..-32008) a result
 * with isError and "<Type>: <message>" as text; anything else stays a
 * JSON-RPC error.
 *
 * The lifecycle is not enforced: tools work before (or without)
 * initialize, and MCP and the native methods mix on one connection.
 * initialize makes the connection an MCP session: answered out of order
 * (conn.h), sent log messages. It gives the connection an agent id only
 * when it has none yet, so an agent_id argument beats server.hello's,
 * which beats the client's name, whatever order hello and initialize
 * come in.
 */
#include "methods.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "mcp.h"
#include "mcp_tools.h"
#include "protocol/decision.h"
#include "protocol/errors.h"

#define MCP_FALLBACK_AGENT "mcp-client"

/* Newest first: the answer to a version we do not know is the first. */
static const char *const mcp_versions[] = {"2025-11-25", "2025-06-18",
					   "2025-03-26", "2024-11-05"};

#define N_VERSIONS (sizeof(mcp_versions) / sizeof(mcp_versions[0]))

static const char *const level_names[] = {
	[MCP_DEBUG] = "debug",	 [MCP_INFO] = "info",
	[MCP_NOTICE] = "notice", [MCP_WARNING] = "warning",
	[MCP_ERROR] = "error",	 [MCP_CRITICAL] = "critical",
	[MCP_ALERT] = "alert",	 [MCP_EMERGENCY] = "emergency",
};

#define N_LEVELS (sizeof(level_names) / sizeof(level_names[0]))

void mcp_log(struct conn *c, enum mcp_level level, json_t *data)
{
	json_t *msg;
	char *line;
	size_t len;

	if (!data)
		return;
	if (c->mcp_log_level < 0 || (int)level < c->mcp_log_level ||
	    c->closing) {
		json_decref(data);
		return;
	}
	msg = json_pack("{s:s,s:s,s:{s:s,s:s,s:o}}", "jsonrpc", "2.0", "method",
			"notifications/message", "params", "level",
			level_names[level], "logger", "vmemd", "data", data);
	line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
	json_decref(msg);
	if (!line) {
		log_err("out of memory sending an MCP log message");
		return;
	}
	len = strlen(line);
	line[len] = '\n'; /* json_dumps' NUL: the line ends here */
	conn_notify(c, line, len + 1);
	free(line);
}

void mcp_log_all(struct server *srv, enum mcp_level level, json_t *data)
{
	for (struct conn *c = srv->conns; c && data; c = c->next)
		mcp_log(c, level, json_incref(data));
	json_decref(data);
}

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

static json_t *capabilities(void)
{
	return json_pack("{s:{s:b},s:{s:b,s:b},s:{s:b},s:{}}", "tools",
			 "listChanged", 0, "resources", "subscribe", 1,
			 "listChanged", 1, "prompts", "listChanged", 0,
			 "logging");
}

static json_t *server_info(void)
{
	return json_pack("{s:s,s:s,s:s}", "name", "vmemd", "title",
			 "vmem decision memory", "version", VMEMD_VERSION);
}

/* The instructions: the repository, the coordinate system, how to work,
 * and the agent id this session writes as (agent may be NULL). */
static json_t *instructions(struct call *call, const char *agent)
{
	char text[8192]; /* the repository path and a paragraph */
	char who[512];

	if (agent)
		snprintf(who, sizeof(who),
			 " This session records its writes as agent \"%s\" "
			 "(vmem mcp --agent ID or VMEM_AGENT_ID choose it; "
			 "without them it is the MCP client's name).",
			 agent);
	else
		snprintf(who, sizeof(who),
			 " Writes are recorded under the agent id of the "
			 "session (vmem mcp --agent ID), else the MCP "
			 "client's name.");
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
		 "decisions_before (or query_decisions, search_decisions; "
		 "listings come in pages: follow next_after while more is "
		 "true); record each choice you make with store_decision at "
		 "your issue, stage and layer. Stored decisions are durable "
		 "at once and committed to git in batches (sync_memory "
		 "commits now). Experiences are what agents met, did and got: "
		 "before acting, look for similar situations with "
		 "find_similar_experiences; after acting, record the outcome "
		 "with record_experience (recall_experiences and "
		 "experience_stats read them back).%s",
		 call->d->repo.root, call->d->limits.max_x, who);
	return json_string(text);
}

int mcp_initialize(struct call *call)
{
	json_t *version = json_object_get(call->params, "protocolVersion");
	json_t *caps = json_object_get(call->params, "capabilities");
	json_t *info = json_object_get(call->params, "clientInfo");
	json_t *name = info ? json_object_get(info, "name") : NULL;
	const char *answer = mcp_versions[0];
	struct conn *c = call->conn;

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
	/* An MCP session from now on: answers as requests finish, and
	 * log messages from the default level up. */
	conn_set_unordered(c);
	if (c->mcp_log_level < 0)
		c->mcp_log_level = MCP_LEVEL_DEFAULT;
	call_reply(call, json_pack("{s:s,s:o,s:o,s:o}", "protocolVersion",
				   answer, "capabilities", capabilities(),
				   "serverInfo", server_info(), "instructions",
				   instructions(call, c->agent_id)));
	return CALL_DONE;
}

/*
 * server/discover (revision 2026-07-28, which newer clients try before
 * initialize): what initialize would say, without touching the
 * connection. The versions listed are the handshake revisions this daemon
 * speaks, so such a client falls back to initialize.
 */
int mcp_discover(struct call *call)
{
	json_t *versions = json_array();

	for (size_t i = 0; versions && i < N_VERSIONS; i++)
		if (json_array_append_new(versions,
					  json_string(mcp_versions[i])) < 0) {
			json_decref(versions);
			versions = NULL;
		}
	call_reply(call,
		   versions
			   ? json_pack("{s:s,s:o,s:o,s:o,s:o}", "resultType",
				       "complete", "supportedVersions",
				       versions, "capabilities", capabilities(),
				       "serverInfo", server_info(),
				       "instructions",
				       instructions(call, call->conn->agent_id))
			   : NULL);
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

int mcp_set_level(struct call *call)
{
	json_t *level = json_object_get(call->params, "level");

	for (size_t i = 0; json_is_string(level) && i < N_LEVELS; i++)
		if (strcmp(json_string_value(level), level_names[i]) == 0) {
			call->conn->mcp_log_level = (int)i;
			call_reply(call, json_object());
			return CALL_DONE;
		}
	call_error(call, RPC_INVALID_PARAMS, NULL,
		   "level must be one of debug, info, notice, warning, error, "
		   "critical, alert, emergency");
	return CALL_DONE;
}

/* notifications/cancelled {requestId, reason?}: the request named, if it
 * still waits, is given up where it can be and never answered. */
int mcp_cancelled(struct call *call)
{
	json_t *id = json_object_get(call->params, "requestId");

	if (id && (json_is_string(id) || json_is_integer(id)))
		dispatch_cancel(call->conn, id);
	call_reply(call, json_object());
	return CALL_DONE;
}

int mcp_tools_list(struct call *call)
{
	json_t *tools = mcp_tools_json(&call->d->limits);

	call_reply(call, tools ? json_pack("{s:o}", "tools", tools) : NULL);
	return CALL_DONE;
}

/* Answer with a CallToolResult: structured (stolen, may be NULL) as
 * structuredContent and as text, a hint ("" for none) as a second text,
 * or an error text. */
static void reply_result(struct call *call, json_t *structured,
			 const char *hint)
{
	char *text = structured ? json_dumps(structured, JSON_COMPACT) : NULL;
	json_t *r = NULL;

	if (text)
		r = json_pack("{s:[{s:s,s:s}],s:o,s:b}", "content", "type",
			      "text", "text", text, "structuredContent",
			      structured, "isError", 0);
	else
		json_decref(structured);
	if (r && hint[0] &&
	    json_array_append_new(
		    json_object_get(r, "content"),
		    json_pack("{s:s,s:s}", "type", "text", "text", hint)) < 0) {
		json_decref(r);
		r = NULL;
	}
	free(text);
	call_reply(call, r);
}

static void reply_tool_error(struct call *call, const char *text)
{
	call_reply(call, json_pack("{s:[{s:s,s:s}],s:b}", "content", "type",
				   "text", "text", text, "isError", 1));
	/* A tool error is a failed request in server.stats. */
	call->failed = true;
}

static bool is_tool_error(int code)
{
	return code == RPC_INVALID_PARAMS ||
	       (code <= RPC_COORDINATE_VALIDATION && code >= RPC_CONFLICT);
}

/* The tool and arguments of a tools/call, kept for its answer. */
struct tool_call {
	const struct mcp_tool *tool;
	json_t *args; /* owned; an object */
};

/* A write the client cancelled once it could no longer be given up has
 * landed: say so, since the answer is not sent. */
static void report_late(struct call *call, const struct tool_call *tc,
			json_t *structured)
{
	mcp_log(call->conn, MCP_WARNING,
		json_pack("{s:s,s:O,s:s,s:O}", "message",
			  "a cancelled tool call had already been written; it "
			  "completed",
			  "requestId", call->id, "tool", tc->tool->name,
			  "result", structured ? structured : json_null()));
}

/* call_forward's transform: the handler's answer as a CallToolResult. */
static void tool_answer(struct call *call, const struct call_answer *ans)
{
	struct tool_call *tc = ans->ctx;
	char text[640];

	if (ans->code == 0) {
		char hint[512];
		json_t *s = mcp_tool_result(tc->tool, tc->args, ans->result,
					    hint, sizeof(hint));

		if (call_cancelled(call) && !(tc->tool->flags & TOOL_READ_ONLY))
			report_late(call, tc, s);
		if (s)
			reply_result(call, s, hint);
		else
			call_error(call, RPC_INTERNAL_ERROR, NULL,
				   "out of memory");
	} else if (is_tool_error(ans->code)) {
		snprintf(text, sizeof(text), "%s: %s", rpc_code_type(ans->code),
			 ans->message);
		reply_tool_error(call, text);
	} else {
		call_error(call, ans->code, json_incref(ans->data), "%s",
			   ans->message);
	}
	json_decref(tc->args);
	free(tc);
}

int mcp_tools_call(struct call *call)
{
	json_t *name = json_object_get(call->params, "name");
	json_t *args = json_object_get(call->params, "arguments");
	json_t *params = NULL;
	const struct mcp_tool *tool;
	struct tool_call *tc;
	char msg[320];
	int rc;

	if (!name || !json_is_string(name)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "name must be a string naming a tool");
		return CALL_DONE;
	}
	tool = mcp_tool_find(json_string_value(name));
	if (!tool) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "Unknown tool: %.200s", json_string_value(name));
		return CALL_DONE;
	}
	if (args && !json_is_null(args) && !json_is_object(args)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "arguments must be an object");
		return CALL_DONE;
	}
	rc = mcp_tool_params(tool, json_is_object(args) ? args : NULL, &params,
			     msg, sizeof(msg));
	if (rc == -1) {
		reply_tool_error(call, msg);
		return CALL_DONE;
	}
	tc = rc == 0 ? calloc(1, sizeof(*tc)) : NULL;
	if (tc)
		tc->args = json_is_object(args) ? json_incref(args)
						: json_object();
	if (!tc || !tc->args) {
		if (tc)
			free(tc);
		json_decref(params);
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	tc->tool = tool;
	return call_forward(call, tool->handler, params, tool_answer, tc);
}

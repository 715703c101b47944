/*
 * The MCP tool table. One entry per tool holds everything about it: the
 * handler it runs (a method of methods.h), the arguments it takes, its
 * input schema, its output schema, and how the handler's result becomes
 * the tool's structured result. A tool's arguments map onto the
 * handler's params by name, except x, y and z, which become the
 * "coordinate" object, and a listing's limit and after (below).
 *
 * Listings (TOOL_LIST) are bounded for a model's context: at most `limit`
 * items (default MCP_PAGE_DEFAULT, at most MCP_PAGE_MAX) and at most
 * MCP_PAGE_BYTES of text, long contents cut to MCP_PREVIEW_BYTES (whole
 * only from get_decision); the result says whether more exist and the
 * `after` that continues. The handler is asked for one item more than
 * the page, which is how "more" is known without building the rest.
 *
 * To add a tool: a row in tools[] (mcp_tools.c) with its input and output
 * schema builders; nothing else changes.
 */
#ifndef VMEM_DAEMON_MCP_TOOLS_H
#define VMEM_DAEMON_MCP_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct call;
struct limits;

#define MCP_PAGE_DEFAULT  50
#define MCP_PAGE_MAX	  200
#define MCP_PAGE_BYTES	  (64 * 1024)
#define MCP_PREVIEW_BYTES 1024

enum {
	TOOL_COORD = 1 << 0,	   /* takes x, y, z (all required) */
	TOOL_READ_ONLY = 1 << 1,   /* annotations */
	TOOL_DESTRUCTIVE = 1 << 2, /* annotations */
	TOOL_IDEMPOTENT = 1 << 3,  /* annotations */
	TOOL_LIST = 1 << 4,	   /* a bounded listing: limit and after */
};

struct mcp_tool {
	const char *name;
	const char *title;
	const char *description;
	int (*handler)(struct call *call); /* what a call runs */
	unsigned flags;
	const char *const *args;     /* besides x, y, z; NULL-terminated */
	const char *const *required; /* of args, NULL-terminated */
	/* Add the properties of args to props; -1 when memory ran out. */
	int (*input)(json_t *props, int max_x);
	/* The outputSchema (new reference, NULL: out of memory). */
	json_t *(*output)(int max_x);
	/* Turn args (borrowed) into params for the handler (stolen into
	 * *params); NULL: by name. 0, or -1 with a tool error in msg. */
	int (*prepare)(json_t *args, json_t *params, char *msg, size_t n);
	/* A listing: the cursor (`after`) that continues after item. */
	json_t *(*cursor)(json_t *item);
	const char *items; /* a listing: the member holding its items */
	/* Its own structured result from the handler's (borrowed; may be
	 * changed in place) and the arguments, bounded as a page is, with
	 * hint as for mcp_tool_result; NULL: the default shaping. */
	json_t *(*shape)(json_t *args, json_t *result, char *hint, size_t n);
};

/* The tool called name, or NULL (table-owned). */
const struct mcp_tool *mcp_tool_find(const char *name);

/* Whether tool accepts an argument called name. */
bool mcp_tool_takes(const struct mcp_tool *tool, const char *name);

/*
 * The tools/list array: every tool with name, title, description,
 * inputSchema and outputSchema (bounds from lim) and annotations. New
 * reference, or NULL when memory ran out.
 */
json_t *mcp_tools_json(const struct limits *lim);

/*
 * Map a call's arguments (borrowed, an object or NULL) onto the params of
 * the tool's handler (*params, new reference). 0; or -1 with a tool error
 * ("ValueError: ...") in msg; or -ENOMEM.
 */
int mcp_tool_params(const struct mcp_tool *tool, json_t *args, json_t **params,
		    char *msg, size_t n);

/*
 * The structured result of a tool from its handler's result (borrowed;
 * a listing's items are cut to previews in place) and the call's
 * arguments (borrowed): an object; for a listing, the page with "count",
 * "more" and "next_after". New reference, or NULL (out of memory). hint
 * receives a sentence for the model when more results exist, else "".
 */
json_t *mcp_tool_result(const struct mcp_tool *tool, json_t *args,
			json_t *result, char *hint, size_t n);

/* Cut a content string to a preview at a UTF-8 boundary: a new string of
 * at most max bytes, or NULL when it fits whole. */
json_t *mcp_preview(const char *s, size_t len, size_t max);

#endif

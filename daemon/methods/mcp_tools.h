/*
 * The MCP tool table: each tool's name, the protocol method it runs, the
 * argument names it accepts, and its JSON Schema and description for
 * tools/list. A tool's arguments map onto the method's params by name,
 * except x, y and z, which become the "coordinate" object.
 */
#ifndef VMEM_DAEMON_MCP_TOOLS_H
#define VMEM_DAEMON_MCP_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

struct limits;

struct mcp_tool {
	const char *name;
	const char *method;	     /* the method a call runs */
	bool coordinate;	     /* takes x, y, z (all required) */
	const char *const *args;     /* other arguments, NULL-terminated */
	const char *const *required; /* of args, NULL-terminated */
};

/* The tool called name, or NULL (table-owned). */
const struct mcp_tool *mcp_tool_find(const char *name);

/* Whether tool accepts an argument called name. */
bool mcp_tool_takes(const struct mcp_tool *tool, const char *name);

/*
 * The tools/list array: every tool with name, title, description,
 * inputSchema (bounds from lim) and annotations. New reference, or NULL
 * when memory ran out.
 */
json_t *mcp_tools_json(const struct limits *lim);

#endif

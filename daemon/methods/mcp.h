/*
 * MCP sessions as the rest of the daemon sees them: log messages sent to
 * the sessions they concern (notifications/message, filtered by each
 * session's logging/setLevel). A connection is an MCP session once it
 * called initialize; others are never sent MCP notifications. Loop
 * thread only.
 */
#ifndef VMEM_DAEMON_MCP_H
#define VMEM_DAEMON_MCP_H

#include <jansson.h>

struct conn;
struct server;

/* The syslog levels of MCP's logging, lowest first. */
enum mcp_level {
	MCP_DEBUG,
	MCP_INFO,
	MCP_NOTICE,
	MCP_WARNING,
	MCP_ERROR,
	MCP_CRITICAL,
	MCP_ALERT,
	MCP_EMERGENCY,
};

/* The level a session starts at, before any logging/setLevel. */
#define MCP_LEVEL_DEFAULT MCP_WARNING

/* Send notifications/message {level, logger: "vmemd", data} to c when it
 * is an MCP session whose level lets it through. data is stolen. */
void mcp_log(struct conn *c, enum mcp_level level, json_t *data);

/* mcp_log to every MCP session of the server (a change that concerns
 * them all: a commit deferred, or no longer). data is stolen. */
void mcp_log_all(struct server *srv, enum mcp_level level, json_t *data);

#endif

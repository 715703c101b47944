/*
 * `vmem mcp`: a stdio MCP server for any MCP client to launch. It connects
 * to (or starts) the daemon of a working tree and relays bytes both ways
 * unchanged: stdin to the daemon's socket, the daemon's answers to stdout.
 * The daemon itself speaks MCP; stdout carries the protocol only.
 */
#ifndef VMEM_CLI_MCP_H
#define VMEM_CLI_MCP_H

struct mcp_options {
	const char *repo;     /* working tree, or NULL (libvmem's default) */
	const char *socket;   /* socket, or NULL (libvmem's default) */
	const char *agent_id; /* sent with server.hello first when not NULL */
	int autostart;	      /* as in struct vmem_options */
	/* Milliseconds for connecting (the hello) and for the answers
	 * after stdin EOF; 0: 30000 and 10000. */
	int timeout_ms;
};

/*
 * Run the bridge on stdin/stdout until stdin ends (and the daemon has
 * answered, exit status 0) or the daemon closes the connection (1).
 * Returns the exit status: 0, 1, or 2 when the daemon cannot be reached.
 * Diagnostics go to stderr. Ignores SIGPIPE for the rest of the process.
 */
int mcp_run(const struct mcp_options *opts);

#endif

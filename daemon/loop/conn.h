/*
 * One client connection. Lines are read through a framer and dispatched
 * in order: while a request waits for something (a durable write), the
 * connection dispatches nothing and reads ahead only a little (pipelined
 * input stays buffered; the kernel holds the rest). An MCP connection
 * (after initialize) may have up to CONN_MCP_INFLIGHT requests waiting at
 * once and is answered as each finishes, out of order (JSON-RPC matches
 * answers by id), so a write waiting for a lease holds up neither pings
 * nor reads, and notifications/cancelled reaches the request it names.
 * Responses are buffered and written once per pass; when the unsent output
 * passes the backlog limit the connection stops reading and dispatching until
 * the client catches up, so a client that does not read cannot grow the
 * daemon's memory.
 *
 * Lifetime: owned by the server's list; references (one for being open,
 * one per request in flight) keep the struct alive after close until the
 * last one goes.
 */
#ifndef VMEM_DAEMON_CONN_H
#define VMEM_DAEMON_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "protocol/framer.h"

struct server;
struct slices;
struct job;

/* Requests an MCP connection may have waiting at once. */
#define CONN_MCP_INFLIGHT 32

struct conn {
	uv_pipe_t pipe;
	struct server *srv;
	struct conn *prev, *next;
	struct framer in;
	struct buf out;	   /* responses not yet handed to libuv */
	size_t out_queued; /* bytes inside uv_write requests */
	uv_shutdown_t shutdown_req;
	size_t discarded; /* input bytes dropped while lingering */
	unsigned refs;
	bool reading;
	bool busy;	       /* inflight reached max_inflight */
	unsigned inflight;     /* requests (lines) waiting */
	unsigned max_inflight; /* 1: answered in order; more: MCP */
	struct job *waiting;   /* the waiting lines (dispatch.c's list) */
	bool processing;       /* inside conn_process (re-entrancy guard) */
	bool input_exhausted;  /* no complete line is buffered */
	bool eof;	       /* the client closed its side */
	bool draining;	       /* no more input: answer what is buffered */
	bool close_when_flushed;
	bool lingering; /* refused: output shut down, input discarded */
	bool closing;
	bool counted;	 /* counts against the connection limit */
	char *agent_id;	 /* from server.hello (owned) */
	size_t notified; /* notification bytes since the output was empty */
	uint64_t partial_since_ms; /* uv_now when a partial line began; 0 */
	int peer_pid;		   /* from SO_PEERCRED, for the log */
	uint64_t lines;		   /* request lines dispatched */
	uint64_t opened_ms;	   /* uv_now at accept */
	uint64_t linger_since_ms;  /* uv_now when it began to linger */
	bool flush_soon;	   /* on the server's flush list */
	struct conn *next_flush;
	struct slices *slices; /* an answer in slices (dispatch's) */
	bool slice_soon;       /* on the server's slice list */
	struct conn *next_slice;
	/* MCP state of the connection (methods_mcp.c). */
	int mcp_log_level;    /* notifications/message at or above; -1 none */
	bool mcp_list_watch;  /* wants notifications/resources/list_changed */
	bool mcp_list_queued; /* one is queued in this loop iteration */
};

/* Accept a pending connection from the listener. */
void conn_accept(struct server *srv);

/* Queue a response line (copied). Dropped when the connection is closing. */
void conn_send(struct conn *c, const char *line, size_t len);

/*
 * Queue a server notification line (copied) and write it out soon. A
 * subscriber whose notifications unsent since its output was last empty
 * would pass output_backlog, after the socket took what it could at once,
 * is disconnected (and it is logged) rather than buffered for without
 * limit.
 */
void conn_notify(struct conn *c, const char *line, size_t len);

/* Write out what conn_notify queued (the server's flush pass, once per
 * loop iteration). */
void conn_flush_notified(struct conn *c);

/* Go on with the answer in slices, when there is room for more output
 * (the server's pass, once per loop iteration). */
void conn_run_slice(struct conn *c);

/* Queue a JSON-RPC error response with a null id (a line that could not
 * be parsed as a request, or a refusal). */
void conn_send_error(struct conn *c, int code, const char *msg);

/* A request that waited has answered: continue with buffered input. */
void conn_resume(struct conn *c);

/* From now on answer as requests finish, up to CONN_MCP_INFLIGHT waiting
 * at once (MCP's initialize; JSON-RPC matches answers by id). */
void conn_set_unordered(struct conn *c);

/* Stop reading; answer complete buffered lines, then close. */
void conn_drain(struct conn *c);

/* Close it if a line begun has waited past the line deadline, or if it
 * has lingered (refused) too long without closing (the server's periodic
 * sweep); now_ms is uv_now. */
void conn_check_deadline(struct conn *c, uint64_t now_ms);

/* Close now (idempotent). */
void conn_close(struct conn *c);

void conn_ref(struct conn *c);
void conn_unref(struct conn *c);

#endif

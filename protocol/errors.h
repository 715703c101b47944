/*
 * The error table of the wire protocol: JSON-RPC 2.0 codes and the
 * server-defined domain errors with their data.type names. This file is
 * the single source of truth; docs/protocol.md mirrors it.
 */
#ifndef VMEM_PROTOCOL_ERRORS_H
#define VMEM_PROTOCOL_ERRORS_H

enum rpc_code {
	RPC_PARSE_ERROR = -32700,
	RPC_INVALID_REQUEST = -32600,
	RPC_METHOD_NOT_FOUND = -32601,
	RPC_INVALID_PARAMS = -32602, /* also the domain's ValueError */
	RPC_INTERNAL_ERROR = -32603,
	RPC_COORDINATE_VALIDATION = -32001,
	RPC_IMMUTABLE_LAYER = -32002,
	RPC_CONCURRENCY = -32003,
	RPC_STORAGE = -32004,
	RPC_QUERY = -32005,
	RPC_COORDINATE_OCCUPIED = -32006,
	RPC_UNAVAILABLE = -32007,
	RPC_CONFLICT = -32008, /* a write to a coordinate in a git conflict */
	/* A request given up on notifications/cancelled (the code LSP and
	 * MCP clients know); sent only where an answer is owed. */
	RPC_REQUEST_CANCELLED = -32800,
};

/*
 * The data.type name of a code ("ValueError", "StorageError", ...), or NULL
 * for the pure JSON-RPC codes that carry no domain type (-32700, -32600,
 * -32601, -32603).
 */
const char *rpc_code_type(int code);

/* The code whose data.type is name, or 0 when name is unknown. */
int rpc_code_from_type(const char *name);

#endif

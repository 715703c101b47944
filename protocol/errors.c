/*
 * The error table of the wire protocol (design.md sections 5 and 7). One row
 * per code; the pure JSON-RPC codes carry no data.type.
 */
#include "protocol/errors.h"

#include <stddef.h>
#include <string.h>

struct code_row {
	int code;
	const char *type;
};

static const struct code_row code_table[] = {
	{RPC_PARSE_ERROR, NULL},
	{RPC_INVALID_REQUEST, NULL},
	{RPC_METHOD_NOT_FOUND, NULL},
	{RPC_INVALID_PARAMS, "ValueError"},
	{RPC_INTERNAL_ERROR, NULL},
	{RPC_COORDINATE_VALIDATION, "CoordinateValidationError"},
	{RPC_IMMUTABLE_LAYER, "ImmutableLayerError"},
	{RPC_CONCURRENCY, "ConcurrencyError"},
	{RPC_STORAGE, "StorageError"},
	{RPC_QUERY, "QueryError"},
	{RPC_COORDINATE_OCCUPIED, "CoordinateOccupiedError"},
	{RPC_UNAVAILABLE, "UnavailableError"},
	{RPC_CONFLICT, "ConflictError"},
	{RPC_REQUEST_CANCELLED, NULL},
};

#define CODE_TABLE_LEN (sizeof(code_table) / sizeof(code_table[0]))

const char *rpc_code_type(int code)
{
	size_t i;

	for (i = 0; i < CODE_TABLE_LEN; i++)
		if (code_table[i].code == code)
			return code_table[i].type;
	return NULL;
}

int rpc_code_from_type(const char *name)
{
	size_t i;

	if (!name)
		return 0;
	for (i = 0; i < CODE_TABLE_LEN; i++)
		if (code_table[i].type && strcmp(code_table[i].type, name) == 0)
			return code_table[i].code;
	return 0;
}

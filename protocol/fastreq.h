/*
 * A recogniser for the commonest request line, a read of one coordinate:
 *
 *   {"jsonrpc":"2.0","id":7,"method":"decision.get",
 *    "params":{"coordinate":{"x":1,"y":2,"z":3}}}
 *
 * (members in any order, JSON whitespace anywhere between tokens). It
 * allocates nothing and accepts only what it is sure of: an integer id,
 * exactly these members, no escapes, no duplicates, integers without
 * fraction or exponent. Everything else, valid or not, is left to the full
 * parser (rpc_parse), which also gives every error; so using it changes
 * the cost of an answer, never the answer.
 */
#ifndef VMEM_PROTOCOL_FASTREQ_H
#define VMEM_PROTOCOL_FASTREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fastreq {
	int64_t id;
	const char *method; /* inside the line, not NUL-terminated */
	size_t method_len;
	int64_t x, y, z;
};

/* True when line[0..len) is such a request; *out is then filled. */
bool fastreq_parse(const char *line, size_t len, struct fastreq *out);

#endif

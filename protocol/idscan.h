/*
 * The id (and method) of a JSON-RPC request read in pieces, in constant
 * memory: for a line too long to hold, whose request must still be
 * answered under its own id (the MCP bridge refuses such a line itself
 * instead of losing the session). The scan follows strings, escapes and
 * nesting byte by byte and keeps the raw text of the top-level "id" and
 * "method" members wherever they stand in the object (clients put the id
 * first or last). No I/O, no allocation.
 */
#ifndef VMEM_PROTOCOL_IDSCAN_H
#define VMEM_PROTOCOL_IDSCAN_H

#include <stdbool.h>
#include <stddef.h>

/* The longest id and method kept (raw JSON text, quotes included); a
 * longer one is not kept. */
#define IDSCAN_VALUE_MAX 256

struct idscan_value {
	char text[IDSCAN_VALUE_MAX + 1];
	size_t len;
	bool seen;     /* complete and kept */
	bool overflow; /* longer than IDSCAN_VALUE_MAX */
};

struct idscan {
	unsigned depth;
	bool in_string, escape;
	bool not_object; /* the text is not a JSON object (a batch...) */
	bool started;
	bool expect_key;  /* at depth 1, the next string is a key */
	bool reading_key; /* that string is being read */
	char key[8];	  /* the key, unescaped, if short enough to be ours */
	size_t key_len;
	unsigned hex_left, hex; /* a \uXXXX escape inside the key */
	int pending;   /* the value of this member comes next: 0, 1 id, 2 method
			*/
	int capturing; /* a value being kept: 0, 1 id, 2 method */
	bool capture_string;
	struct idscan_value id, method;
};

void idscan_init(struct idscan *s);

/* Scan n more bytes of the text. */
void idscan_feed(struct idscan *s, const char *p, size_t n);

/*
 * After the whole text was fed: the raw JSON text of the top-level "id"
 * (a string, number or null as written) in *len bytes, or NULL when the
 * text is no object or has no id member kept whole.
 */
const char *idscan_id(struct idscan *s, size_t *len);

/* Likewise the "method" member's raw text (a JSON string), or NULL. */
const char *idscan_method(struct idscan *s, size_t *len);

#endif

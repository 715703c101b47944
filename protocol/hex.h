/*
 * A hexadecimal digit's value, either case: what every parser of hex
 * text here (UUIDs, experience ids, \u escapes) needs. Inline: it sits in
 * the inner loop of each of them.
 */
#ifndef VMEM_PROTOCOL_HEX_H
#define VMEM_PROTOCOL_HEX_H

/* 0..15, or -1 when c is not a hex digit. */
static inline int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif

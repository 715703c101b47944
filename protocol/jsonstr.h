/*
 * JSON strings written by hand, byte for byte as jansson's JSON_COMPACT
 * dump writes them (so a line made here and one made by json_dumps are
 * the same bytes): '"', '\\' and the control characters escaped (\b \t
 * \n \f \r, else \u00XX in upper case), every other byte as it is. The
 * input must be valid UTF-8 (checked by whoever accepted it).
 */
#ifndef VMEM_PROTOCOL_JSONSTR_H
#define VMEM_PROTOCOL_JSONSTR_H

#include <stddef.h>

/* The bytes json_str_put writes for s, quotes included. */
size_t json_str_len(const char *s, size_t len);

/* Write s as a JSON string at o (json_str_len bytes of room); returns
 * the end of what was written. */
char *json_str_put(char *o, const char *s, size_t len);

#endif

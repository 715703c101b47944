/*
 * A quick loader for the plain JSON that request lines are made of,
 * beside jansson's: one pass over the bytes, strings copied once. It
 * gives the same tree as json_loadb(JSON_REJECT_DUPLICATES |
 * JSON_DECODE_ANY) for what it accepts, and accepts only what it is sure
 * of: strings whose escapes are the one-character ones (\" \\ \/ \b \f
 * \n \r \t; keys without escapes), valid UTF-8 without control
 * characters, integers of at most 18 digits, reals of at most 63
 * characters (read by strtod, as jansson does), no duplicate keys,
 * nesting at most FASTJSON_MAX_DEPTH. Anything else, valid or not, gives NULL
 * and is left to jansson, which also gives every error; so using it changes the
 * cost of a parse, never its result. Why: jansson reads strings a character at
 * a time, so a request carrying 4 KB of content cost tens of microseconds of
 * the loop's time to parse, and a 1536-number embedding a millisecond.
 */
#ifndef VMEM_PROTOCOL_FASTJSON_H
#define VMEM_PROTOCOL_FASTJSON_H

#include <jansson.h>
#include <stddef.h>

#define FASTJSON_MAX_DEPTH 32

/* The value of text[0..len) (a new reference), or NULL: not accepted
 * here (or out of memory); then ask jansson. */
json_t *fastjson_load(const char *text, size_t len);

/*
 * json_loadb(text, len, flags, err) with the quick loader first: its tree
 * when it gives one json_loadb would give (a top level other than an
 * object or an array only with JSON_DECODE_ANY), else jansson's result
 * and err (err is set only when NULL is returned). A new reference or
 * NULL.
 */
json_t *fastjson_loadb(const char *text, size_t len, size_t flags,
		       json_error_t *err);

#endif

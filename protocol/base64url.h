/*
 * Base64url (RFC 4648 section 5): the alphabet A-Z a-z 0-9 - _, safe in
 * file names and in JSON strings without escapes. Encoding writes no
 * padding; decoding takes the '=' padding or none, and refuses anything
 * else: another character, a length no encoding has, or bits left over
 * in the last character (so each byte string has one text).
 */
#ifndef VMEM_PROTOCOL_BASE64URL_H
#define VMEM_PROTOCOL_BASE64URL_H

#include <stdbool.h>
#include <stddef.h>

/* Characters of the unpadded encoding of n bytes. */
static inline size_t base64url_len(size_t n)
{
	return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

/* Encode in[0..n) into out (base64url_len(n) + 1 bytes, NUL-terminated);
 * returns the length. */
size_t base64url_encode(const void *in, size_t n, char *out);

/*
 * The number of bytes text[0..len) decodes to, or -1 when it is not
 * base64url (padding allowed). Reads nothing but the length and the
 * padding, so a caller can bound the output before decoding.
 */
long base64url_decoded_len(const char *text, size_t len);

/* Decode text[0..len) into out (base64url_decoded_len bytes); false when
 * it is not canonical base64url. */
bool base64url_decode(const char *text, size_t len, void *out);

#endif

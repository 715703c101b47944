/*
 * Base64url, encoding and strict decoding (base64url.h).
 */
#include "protocol/base64url.h"

#include <limits.h>
#include <stdint.h>

static const char alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t base64url_encode(const void *in, size_t n, char *out)
{
	const unsigned char *u = in;
	size_t o = 0, i;

	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)u[i] << 16 | (uint32_t)u[i + 1] << 8 |
			     u[i + 2];

		out[o++] = alphabet[v >> 18];
		out[o++] = alphabet[(v >> 12) & 63];
		out[o++] = alphabet[(v >> 6) & 63];
		out[o++] = alphabet[v & 63];
	}
	if (n - i == 1) {
		out[o++] = alphabet[u[i] >> 2];
		out[o++] = alphabet[(u[i] & 3) << 4];
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)u[i] << 8 | u[i + 1];

		out[o++] = alphabet[v >> 10];
		out[o++] = alphabet[(v >> 4) & 63];
		out[o++] = alphabet[(v & 15) << 2];
	}
	out[o] = '\0';
	return o;
}

static int value_of(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

/* The length without padding; (size_t)-1 when the padding is wrong. */
static size_t unpadded(const char *text, size_t len)
{
	size_t pad = 0;

	while (pad < len && text[len - 1 - pad] == '=')
		pad++;
	if (pad == 0)
		return len;
	/* Padding fills the last group of four, and only it. */
	if (pad > 2 || len % 4 != 0)
		return (size_t)-1;
	return len - pad;
}

long base64url_decoded_len(const char *text, size_t len)
{
	size_t n = unpadded(text, len);

	if (n == (size_t)-1 || n % 4 == 1 || n / 4 > (size_t)LONG_MAX / 3)
		return -1;
	return (long)(n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0));
}

bool base64url_decode(const char *text, size_t len, void *out)
{
	unsigned char *o = out;
	size_t n = unpadded(text, len), i;
	uint32_t acc = 0;
	int bits = 0;

	if (n == (size_t)-1 || n % 4 == 1)
		return false;
	for (i = 0; i < n; i++) {
		int v = value_of((unsigned char)text[i]);

		if (v < 0)
			return false;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*o++ = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	/* Bits left in the last character must be zero: one text a value. */
	return acc == 0;
}

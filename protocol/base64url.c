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

/*
 * A character's value plus one; 0 for any byte outside the alphabet, so
 * that the value (entry - 1, unsigned) of such a byte has bits above the
 * six a value uses.
 */
static const unsigned char plus_one[256] = {
	['A'] = 1,  ['B'] = 2,	['C'] = 3,  ['D'] = 4,	['E'] = 5,  ['F'] = 6,
	['G'] = 7,  ['H'] = 8,	['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12,
	['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18,
	['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
	['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30,
	['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36,
	['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
	['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
	['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54,
	['2'] = 55, ['3'] = 56, ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60,
	['8'] = 61, ['9'] = 62, ['-'] = 63, ['_'] = 64,
};

static uint32_t value_of(unsigned char c)
{
	return (uint32_t)plus_one[c] - 1u;
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

/*
 * Four characters make three bytes; a group is checked once (plus_one), not
 * character by character: a 1536-dimension embedding is 8,192 characters,
 * decoded on the loop.
 */
bool base64url_decode(const char *text, size_t len, void *out)
{
	const unsigned char *t = (const unsigned char *)text;
	unsigned char *o = out;
	size_t n = unpadded(text, len), i, left;
	uint32_t v, a, b, c, d;

	if (n == (size_t)-1 || n % 4 == 1)
		return false;
	for (i = 0; i + 4 <= n; i += 4) {
		a = value_of(t[i]);
		b = value_of(t[i + 1]);
		c = value_of(t[i + 2]);
		d = value_of(t[i + 3]);
		if ((a | b | c | d) & ~63u)
			return false;
		v = a << 18 | b << 12 | c << 6 | d;
		o[0] = (unsigned char)(v >> 16);
		o[1] = (unsigned char)(v >> 8);
		o[2] = (unsigned char)v;
		o += 3;
	}
	left = n - i;
	if (left == 0)
		return true;
	/* Two characters make a byte, three make two; the bits left over in
	 * the last character must be zero (one text a value). */
	a = value_of(t[i]);
	b = value_of(t[i + 1]);
	c = left == 3 ? value_of(t[i + 2]) : 0;
	if ((a | b | c) & ~63u)
		return false;
	v = a << 18 | b << 12 | c << 6;
	o[0] = (unsigned char)(v >> 16);
	if (left == 3)
		o[1] = (unsigned char)(v >> 8);
	return (v & (left == 3 ? 0xffu : 0xffffu)) == 0;
}

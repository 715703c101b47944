/* JSON strings by hand (see jsonstr.h). */
#include "jsonstr.h"

#include <string.h>

/* What a byte becomes inside a JSON string: 0 as it is, else the length
 * of its escape. */
static const unsigned char esc_len[256] = {
	6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6, /* \b \t \n \f \r */
	6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, ['"'] = 2, ['\\'] = 2,
};

size_t json_str_len(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = len + 2;

	for (size_t i = 0; i < len; i++)
		if (esc_len[p[i]])
			n += esc_len[p[i]] - 1u;
	return n;
}

char *json_str_put(char *o, const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run;

	*o++ = '"';
	while (i < len) {
		for (run = i; run < len && !esc_len[p[run]]; run++)
			;
		memcpy(o, s + i, run - i);
		o += run - i;
		if (run == len)
			break;
		*o++ = '\\';
		switch (p[run]) {
		case '"':
		case '\\':
			*o++ = (char)p[run];
			break;
		case '\b':
			*o++ = 'b';
			break;
		case '\t':
			*o++ = 't';
			break;
		case '\n':
			*o++ = 'n';
			break;
		case '\f':
			*o++ = 'f';
			break;
		case '\r':
			*o++ = 'r';
			break;
		default:
			*o++ = 'u';
			*o++ = '0';
			*o++ = '0';
			*o++ = hex[p[run] >> 4];
			*o++ = hex[p[run] & 15];
		}
		i = run + 1;
	}
	*o++ = '"';
	return o;
}

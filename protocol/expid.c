/*
 * UUIDv7 experience ids (see expid.h). The 12 bits after the version
 * hold floor(us * 4096 / 1000) for the microseconds us within the
 * millisecond: strictly increasing in us (a step is 4.096), and
 * invertible by ceil(a * 1000 / 4096).
 */
#include "expid.h"

#include <string.h>

#include "protocol/hex.h"

struct expid expid_make(int64_t usec, const uint8_t rnd[EXPID_RANDOM_BYTES])
{
	struct expid id;
	uint64_t ms = (uint64_t)(usec / 1000);
	unsigned frac = (unsigned)((usec % 1000) * 4096 / 1000);

	for (int i = 0; i < 6; i++)
		id.b[i] = (uint8_t)(ms >> (8 * (5 - i)));
	id.b[6] = (uint8_t)(0x70 | (frac >> 8));
	id.b[7] = (uint8_t)(frac & 0xff);
	id.b[8] = (uint8_t)(0x80 | (rnd[0] & 0x3f));
	memcpy(id.b + 9, rnd + 1, 7);
	return id;
}

void expid_format(const struct expid *id, char out[EXPID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[id->b[i] >> 4];
		out[o++] = hex[id->b[i] & 15];
	}
	out[o] = '\0';
}

int expid_parse(const char *s, size_t len, struct expid *out)
{
	struct expid id;
	size_t i = 0;

	if (len != EXPID_LEN)
		return -1;
	for (int b = 0; b < 16; b++) {
		int hi, lo;

		if (b == 4 || b == 6 || b == 8 || b == 10) {
			if (s[i] != '-')
				return -1;
			i++;
		}
		hi = hex_value(s[i]);
		lo = hex_value(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		id.b[b] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	if ((id.b[6] & 0xf0) != 0x70 || (id.b[8] & 0xc0) != 0x80)
		return -1;
	*out = id;
	return 0;
}

int64_t expid_usec(const struct expid *id)
{
	uint64_t ms = 0;
	unsigned frac = (unsigned)(id->b[6] & 0x0f) << 8 | id->b[7];

	for (int i = 0; i < 6; i++)
		ms = ms << 8 | id->b[i];
	return (int64_t)ms * 1000 + (int64_t)((frac * 1000u + 4095) / 4096);
}

int expid_cmp(const struct expid *a, const struct expid *b)
{
	return memcmp(a->b, b->b, sizeof(a->b));
}

/* See uuid.h. */
#include "uuid.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "protocol/hex.h"

#define POOL 4096

static uint8_t pool[POOL];
static size_t pool_left;

/* Refill the pool; never fails (a clock-seeded generator stands in if
 * the kernel will not answer, which a booted Linux always does). */
static void refill(void)
{
	size_t got = 0;
	ssize_t n;

	while (got < POOL) {
		n = getrandom(pool + got, POOL - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got < POOL) {
		struct timespec ts;
		uint64_t z;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		z = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32 ^
		    (uint64_t)getpid();
		for (size_t i = got; i < POOL; i++) {
			z += 0x9e3779b97f4a7c15ull;
			pool[i] = (uint8_t)((z ^ (z >> 31)) >> 24);
		}
	}
	pool_left = POOL;
}

void uuid_new(uint8_t id[UUID_LEN])
{
	if (pool_left < UUID_LEN)
		refill();
	memcpy(id, pool + POOL - pool_left, UUID_LEN);
	memset(pool + POOL - pool_left, 0, UUID_LEN);
	pool_left -= UUID_LEN;
	id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);
	id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
}

int uuid_parse(const char *s, size_t len, uint8_t id[UUID_LEN])
{
	size_t i = 0, b = 0;
	int hi, lo;

	if (len != UUID_TEXT_LEN)
		return -1;
	while (b < UUID_LEN) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return -1;
			i++;
			continue;
		}
		hi = hex_value(s[i]);
		lo = hex_value(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		id[b++] = (uint8_t)(hi << 4 | lo);
		i += 2;
	}
	return 0;
}

void uuid_format(const uint8_t id[UUID_LEN], char out[UUID_TEXT_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	/* Where each byte's two digits go: the dashes take 8, 13, 18, 23. */
	static const uint8_t at[UUID_LEN] = {0,	 2,  4,	 6,  9,	 11, 14, 16,
					     19, 21, 24, 26, 28, 30, 32, 34};

	for (size_t b = 0; b < UUID_LEN; b++) {
		out[at[b]] = digits[id[b] >> 4];
		out[at[b] + 1] = digits[id[b] & 15];
	}
	out[8] = out[13] = out[18] = out[23] = '-';
	out[UUID_TEXT_LEN] = '\0';
}

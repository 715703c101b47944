/* FNV-1a, 64 bits (see fnv.h). */
#include "fnv.h"

#define FNV64_OFFSET 0xcbf29ce484222325ULL
#define FNV64_PRIME  0x100000001b3ULL

uint64_t fnv1a64(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	uint64_t h = FNV64_OFFSET;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= FNV64_PRIME;
	}
	return h;
}

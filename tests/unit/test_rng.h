/*
 * The unit suites' random numbers: xorshift64, one stream per suite.
 * A test sets rng_state to its seed (or the suite defines TEST_RNG_SEED
 * before including this), so a failing case repeats exactly.
 */
#ifndef VMEM_TEST_RNG_H
#define VMEM_TEST_RNG_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#endif

static uint64_t rng_state = TEST_RNG_SEED;

static inline uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

#endif

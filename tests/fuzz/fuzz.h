/*
 * Shared by the fuzz harnesses: the libFuzzer entry point (defined once per
 * harness, called by libFuzzer or by replay.c) and the check that turns a
 * broken invariant into an abort, so both drivers report it as a crash.
 */
#ifndef VMEM_TESTS_FUZZ_H
#define VMEM_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: invariant failed: %s\n",       \
				__FILE__, __LINE__, #cond);                    \
			abort();                                               \
		}                                                              \
	} while (0)

#endif

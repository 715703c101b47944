/*
 * Linked into every Check program: before main, make Check's own
 * per-case timeouts (CK_DEFAULT_TIMEOUT, tcase_set_timeout) follow
 * VMEM_TIMEOUT_SCALE, as every wait of the Python suites does, so that a
 * slow stage (ThreadSanitizer, a loaded machine) stretches them too. An
 * explicit CK_TIMEOUT_MULTIPLIER wins.
 */
#include <stdlib.h>

__attribute__((constructor)) static void timeout_scale(void)
{
	const char *scale = getenv("VMEM_TIMEOUT_SCALE");

	if (scale && *scale && !getenv("CK_TIMEOUT_MULTIPLIER"))
		setenv("CK_TIMEOUT_MULTIPLIER", scale, 0);
}

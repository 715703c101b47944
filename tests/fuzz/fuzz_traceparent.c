/*
 * Fuzz harness of the traceparent parser (daemon/service/trace.c). Oracle:
 * an independent reading of the W3C Trace Context rules (lengths,
 * dashes, lowercase hex, zero ids, versions 00 and ff); an accepted value
 * formats back to its own 55-byte prefix (version aside).
 */
#include "fuzz.h"

#include "trace.h"

#include <errno.h>
#include <string.h>

static bool lowhex(const uint8_t *p, size_t n, bool *zero)
{
	*zero = true;
	for (size_t i = 0; i < n; i++) {
		if (!((p[i] >= '0' && p[i] <= '9') ||
		      (p[i] >= 'a' && p[i] <= 'f')))
			return false;
		if (p[i] != '0')
			*zero = false;
	}
	return true;
}

static bool model(const uint8_t *s, size_t n)
{
	bool z, tz, pz;

	if (n < 55 || n > TRACEPARENT_MAX)
		return false;
	if (!lowhex(s, 2, &z) || (s[0] == 'f' && s[1] == 'f'))
		return false;
	if (s[0] == '0' && s[1] == '0' ? n != 55 : n > 55 && s[55] != '-')
		return false;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return false;
	return lowhex(s + 3, 32, &tz) && !tz && lowhex(s + 36, 16, &pz) &&
	       !pz && lowhex(s + 53, 2, &z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace_ctx c;
	char out[56];
	int rc;

	rc = traceparent_parse((const char *)data, size, &c);
	FUZZ_CHECK(rc == (model(data, size) ? 0 : -EINVAL));
	if (rc == 0) {
		traceparent_format(&c, out);
		FUZZ_CHECK(strlen(out) == 55);
		FUZZ_CHECK(memcmp(out + 2, data + 2, 53) == 0);
	}
	return 0;
}

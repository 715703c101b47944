/*
 * Start-up progress (see progress.h).
 */
#include "progress.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "sdnotify.h"

#define DEFAULT_INTERVAL_MS 1000

static uint64_t interval_ms = DEFAULT_INTERVAL_MS;
/* Said from the threads that read the local kinds at start-up too. */
static _Atomic uint64_t last_ms;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void progress_init(void)
{
	const char *s = getenv("VMEMD_PROGRESS_MS");
	char *end;
	unsigned long long v;

	interval_ms = DEFAULT_INTERVAL_MS;
	if (s && *s) {
		v = strtoull(s, &end, 10);
		if (!*end && v <= 3600000)
			interval_ms = v;
	}
	last_ms = now_ms();
}

bool progress_due(void)
{
	return now_ms() - last_ms >= interval_ms;
}

void progress_say(const char *fmt, ...)
{
	char text[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	log_info("start-up: %s", text);
	sdnotify("EXTEND_TIMEOUT_USEC=%llu\nSTATUS=starting: %s",
		 (unsigned long long)PROGRESS_EXTEND_S * 1000000, text);
	last_ms = now_ms();
}

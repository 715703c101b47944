/*
 * Logging to stderr, one write(2) per line so lines from a daemonised
 * process never interleave mid-line in its log file.
 */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum log_level log_threshold = LOGL_INFO;
static bool log_priority_prefix;

void log_init(enum log_level threshold)
{
	log_threshold = threshold;
	log_priority_prefix = getenv("JOURNAL_STREAM") != NULL;
}

void log_set_level(enum log_level threshold)
{
	if (threshold >= LOGL_ERR && threshold <= LOGL_DEBUG)
		log_threshold = threshold;
}

enum log_level log_get_level(void)
{
	return log_threshold;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const names[] = {
		[LOGL_ERR] = "error",	  [LOGL_WARNING] = "warning",
		[LOGL_NOTICE] = "notice", [LOGL_INFO] = "info",
		[LOGL_DEBUG] = "debug",
	};
	char line[2048];
	size_t n;
	va_list ap;

	if (level > log_threshold)
		return;
	if (log_priority_prefix) {
		n = (size_t)snprintf(line, sizeof(line), "<%d>", (int)level);
	} else {
		struct timeval tv;
		struct tm tm;

		gettimeofday(&tv, NULL);
		gmtime_r(&tv.tv_sec, &tm);
		n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
		n += (size_t)snprintf(
			line + n, sizeof(line) - n,
			".%03ldZ vmemd[%d] %s: ", (long)(tv.tv_usec / 1000),
			(int)getpid(), names[level]);
	}
	va_start(ap, fmt);
	if (n < sizeof(line))
		n += (size_t)vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* Nowhere left to report a failing log. */
	}
}

/* See errmsg.h. */
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

void errmsg_set(char *buf, size_t n, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !n)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, n, fmt, ap);
	va_end(ap);
}

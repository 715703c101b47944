/*
 * Human-readable failure reasons for the blocking modules (log, files),
 * written into a caller's buffer: they run on worker threads and must not
 * log themselves.
 */
#ifndef VMEM_DAEMON_ERRMSG_H
#define VMEM_DAEMON_ERRMSG_H

#include <stddef.h>

/* printf into buf (n bytes); nothing when buf is NULL or n is 0. */
void errmsg_set(char *buf, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif

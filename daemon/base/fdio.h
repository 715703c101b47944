/*
 * Writing all of a buffer to a descriptor: write(2) and pwrite(2) may
 * write less than asked (a signal, a full pipe, a disk nearly full) and
 * are retried until everything is written or one fails. The one helper
 * behind every file the daemon writes whole.
 */
#ifndef VMEM_DAEMON_FDIO_H
#define VMEM_DAEMON_FDIO_H

#include <stddef.h>
#include <stdint.h>

/* write(2) all of buf: 0, or -errno (-EIO for a write of nothing). */
int fdio_write(int fd, const void *buf, size_t len);

/* pwrite(2) all of buf at off: 0, or -errno (-EIO for a write of
 * nothing). */
int fdio_pwrite(int fd, const void *buf, size_t len, uint64_t off);

#endif

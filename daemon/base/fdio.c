/* Writing all of a buffer (see fdio.h). */
#include "fdio.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/types.h>
#include <unistd.h>

/* write(2), or pwrite(2) from off when at, until all is written. */
static int write_loop(int fd, const char *p, size_t len, bool at, uint64_t off)
{
	while (len) {
		ssize_t w =
			at ? pwrite(fd, p, len, (off_t)off) : write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

int fdio_write(int fd, const void *buf, size_t len)
{
	return write_loop(fd, buf, len, false, 0);
}

int fdio_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
	return write_loop(fd, buf, len, true, off);
}

/*
 * sd_notify and sd_listen_fds, the parts vmemd needs: a datagram to
 * $NOTIFY_SOCKET (a path, or an abstract name written with a leading '@'),
 * and file descriptor 3 when $LISTEN_PID is ours.
 */
#include "sdnotify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define LISTEN_FDS_START 3

static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static uint64_t watchdog_usec;
static int listen_fd = -1; /* from socket activation, read at init */

/* $name as a decimal number for this process: true with *out. */
static bool env_number(const char *name, unsigned long long *out)
{
	const char *s = getenv(name);
	char *end;

	if (!s || !*s)
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end;
}

static bool for_us(const char *pid_var)
{
	unsigned long long pid;

	/* No pid variable: meant for whoever reads it (systemd sets it for
	 * the watchdog only when several processes could). */
	if (!getenv(pid_var))
		return true;
	return env_number(pid_var, &pid) && pid == (unsigned long long)getpid();
}

/*
 * The socket-activation variables, read and unset here, at init: unsetenv
 * rewrites environ, which the git subprocesses' workers read from the
 * thread pool (a start-up scan runs while the server opens).
 */
static int take_listen_fd(void)
{
	unsigned long long n;
	bool ours = for_us("LISTEN_PID") && getenv("LISTEN_PID") &&
		    env_number("LISTEN_FDS", &n);
	int fd = -1;

	if (ours && n == 1)
		fd = LISTEN_FDS_START;
	else if (ours && n > 1)
		fd = -EINVAL;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (fd >= 0)
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}

void sdnotify_init(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	unsigned long long usec;
	size_t n;

	notify_len = 0;
	if (path && (path[0] == '/' || path[0] == '@') &&
	    (n = strlen(path)) < sizeof(notify_addr.sun_path)) {
		memset(&notify_addr, 0, sizeof(notify_addr));
		notify_addr.sun_family = AF_UNIX;
		memcpy(notify_addr.sun_path, path, n);
		if (path[0] == '@')
			notify_addr.sun_path[0] = '\0';
		notify_len =
			(socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
				    (path[0] == '/'));
	}
	watchdog_usec = 0;
	if (for_us("WATCHDOG_PID") && env_number("WATCHDOG_USEC", &usec))
		watchdog_usec = usec;
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	listen_fd = take_listen_fd();
}

void sdnotify(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	int fd, n;

	if (!notify_len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, (size_t)n, MSG_NOSIGNAL,
		   (struct sockaddr *)&notify_addr, notify_len) < 0) {
		/* systemd may be gone: nothing to tell anyone. */
	}
	close(fd);
}

uint64_t sdnotify_watchdog_usec(void)
{
	return watchdog_usec;
}

static void watchdog_cb(uv_timer_t *t)
{
	(void)t;
	sdnotify("WATCHDOG=1");
}

int sdnotify_watchdog_start(uv_loop_t *loop)
{
	static uv_timer_t timer;
	uint64_t ms = watchdog_usec / 2000;
	int rc;

	if (!watchdog_usec)
		return 0;
	rc = uv_timer_init(loop, &timer);
	if (rc < 0)
		return rc;
	uv_unref((uv_handle_t *)&timer);
	return uv_timer_start(&timer, watchdog_cb, ms ? ms : 1, ms ? ms : 1);
}

int sdnotify_listen_fd(void)
{
	return listen_fd;
}

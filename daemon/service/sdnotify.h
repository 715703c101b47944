/*
 * The systemd service protocols, implemented directly (no libsystemd):
 * readiness and status notification over $NOTIFY_SOCKET (sd_notify(3)
 * semantics: READY=1, STATUS=..., STOPPING=1, WATCHDOG=1), the watchdog
 * interval from $WATCHDOG_USEC / $WATCHDOG_PID, and the listening socket
 * handed over by socket activation ($LISTEN_PID / $LISTEN_FDS,
 * sd_listen_fds(3)). Outside systemd every call does nothing.
 */
#ifndef VMEM_DAEMON_SDNOTIFY_H
#define VMEM_DAEMON_SDNOTIFY_H

#include <stdint.h>
#include <uv.h>

/*
 * Read (and unset, so children do not inherit them) the notification
 * socket, watchdog and socket-activation variables. Call once at
 * start-up, after any fork and before any thread starts (unsetenv is not
 * safe while another thread reads the environment).
 */
void sdnotify_init(void);

/* Send one notification ("READY=1\nSTATUS=..."); printf-style. A lost
 * notification is not an error (systemd may be gone): nothing is
 * reported. */
void sdnotify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval systemd asked for, in microseconds (0: none). */
uint64_t sdnotify_watchdog_usec(void);

/*
 * When systemd asked for a watchdog, ping it every half interval from a
 * timer of the loop, so a loop that stops turning is restarted. The timer
 * does not keep the loop alive. 0 or a negative libuv error.
 */
int sdnotify_watchdog_start(uv_loop_t *loop);

/*
 * The listening socket passed by socket activation, as sdnotify_init
 * found it, or -1 when there is none (the variables are for another
 * process, or absent). Exactly one socket is expected: -EINVAL when
 * there are several.
 */
int sdnotify_listen_fd(void);

#endif

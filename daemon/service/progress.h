/*
 * Start-up progress. A start that replays a large write-ahead log or
 * loads many decision files says what it is doing, at most once per
 * interval: a log line, and under systemd STATUS= with the same words and
 * EXTEND_TIMEOUT_USEC=, so that a start which keeps advancing is not
 * killed by the unit's TimeoutStartSec=. A start shorter than one
 * interval says nothing.
 *
 * The interval is 1000 ms, or $VMEMD_PROGRESS_MS (0: every report; for
 * tests). Loop thread, before the loop runs.
 */
#ifndef VMEM_DAEMON_PROGRESS_H
#define VMEM_DAEMON_PROGRESS_H

#include <stdbool.h>

/* How long one report keeps systemd waiting for the next. */
#define PROGRESS_EXTEND_S 60

/* Start the clock (the process's start counts as the last report). */
void progress_init(void);

/* Is a report due now? */
bool progress_due(void);

/* Report: "start-up: <text>" logged, and told to systemd. */
void progress_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

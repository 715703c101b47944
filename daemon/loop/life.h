/*
 * When a daemon goes away by itself: its working tree or git directory
 * was removed (or replaced), or it has been idle for idle_exit_s.
 *
 * A removed tree is seen by the repository watcher (its events run
 * life_check) and by a once-a-second look at the root's and the git
 * directory's identity (device and inode, taken at start-up) and at the
 * state directory's link count: cheap stat calls, no reads. The daemon
 * then leaves at once without writing files or committing (daemon_leave):
 * there is nowhere to write them, and every acknowledged write stays in
 * the write-ahead log, which a daemon started where the tree went (if it
 * was moved) replays.
 *
 * Idle: no connection (hence no subscription and no lease), no write
 * waiting to reach its file or the log's checkpoint, no reload, nothing
 * to commit and no commit running, for idle_exit_s seconds (0: never).
 * A commit the repository's state defers (a merge in progress, a
 * detached HEAD) keeps the daemon until it is made. Loop thread only.
 */
#ifndef VMEM_DAEMON_LIFE_H
#define VMEM_DAEMON_LIFE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct daemon;

#define LIFE_TICK_MS 1000

struct life {
	struct daemon *d;
	uv_timer_t tick;
	unsigned idle_exit_s;
	uint64_t idle_since_ms; /* uv_now when the daemon last had work */
	dev_t root_dev, git_dev;
	ino_t root_ino, git_ino;
	bool gone; /* the tree went: the daemon is leaving */
	bool started;
};

/*
 * Remember the tree's identity and start the tick. 0, or -errno when the
 * root or the git directory cannot be looked at now.
 */
int life_start(struct life *l, struct daemon *d, unsigned idle_exit_s);

/* A new idle_exit_s (a configuration reload); the idle time so far
 * counts. */
void life_set_idle_exit(struct life *l, unsigned idle_exit_s);

/*
 * Is the tree still there? When it is gone, log why once, mark l->gone
 * and make the daemon leave (daemon_leave). Returns l->gone.
 */
bool life_check(struct life *l);

/* Stop the tick (idempotent); the loop must run to close it. */
void life_stop(struct life *l);

#endif

/*
 * Which x-NNN directories nothing touched since a scan last found them
 * whole: inotify on each, so a probe after a git command (a user's git
 * status) neither lists nor even stats the directories nobody wrote in.
 *
 * Events are not read as they come: the kernel queues them, and the
 * scan that wants them drains the queue first (xwatch_begin). Anything
 * git did before it gave the tree back is queued by then (inotify queues
 * an event within the call that causes it). A queue that overflowed, a
 * watch the kernel dropped, an event of a watch not known yet or a
 * different .vector-memory (the same names, other directories) makes
 * the directories concerned unknown again: they are looked at as if
 * there were no watch (their stamps; vmdir.h).
 *
 * A scan is numbered by xwatch_begin. A directory is clean for scan N
 * when its watch was added by a scan before the last one that found it
 * whole (xwatch_end with whole), and no event of it came after that
 * scan began. Events carry any change: a file created, removed, renamed
 * or written in place.
 *
 * Threads: xwatch_begin and xwatch_end on the loop, one scan at a time;
 * xwatch_look on the scan's thread between them (it reads what begin
 * left and adds watches, recording them in the scan's own list).
 */
#ifndef VMEM_DAEMON_XWATCH_H
#define VMEM_DAEMON_XWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What a scan knows of a directory before it looks. */
enum xwatch_state {
	XWATCH_UNKNOWN, /* no watch to go by: its stamp decides */
	XWATCH_CLEAN,	/* nothing touched it: neither stat nor list it */
	XWATCH_TOUCHED, /* something did: list it, whatever its stamp */
};

struct xwatch {
	int fd; /* the inotify instance; -1: none (everything unknown) */
	int max_x;
	uint32_t scan;	   /* the number of the last scan begun */
	uint32_t overflow; /* the last scan that lost events */
	int *wd_of;	   /* per x: its watch, -1 none */
	uint32_t *added;   /* per x: the scan that added the watch */
	uint32_t *touched; /* per x: the last scan an event came in */
	uint32_t *whole;   /* per x: the last scan that found it whole */
	int *x_of;	   /* per watch descriptor: its x, -1 none */
	size_t n_wd;	   /* entries of x_of */
	dev_t top_dev;	   /* .vector-memory as the last whole scan saw */
	ino_t top_ino;
	bool full; /* a watch was refused (the user's limit) */
};

/* The watches one scan added (the scan's thread fills it). */
struct xwatch_scan {
	uint32_t n;	/* the scan's number */
	uint8_t *state; /* per x: enum xwatch_state at begin */
	uint8_t *seen;	/* per x: looked at (xwatch_look) */
	struct xwatch_added {
		int x, wd;
	} * added;
	size_t n_added, cap_added;
	dev_t top_dev; /* the .vector-memory it listed */
	ino_t top_ino; /* 0: not looked at yet */
	bool top_same; /* the one the last whole scan listed */
	bool full;     /* a watch was refused */
};

/* Set up for x in 0..max_x. Without inotify everything stays unknown.
 * 0 or -ENOMEM. */
int xwatch_init(struct xwatch *w, int max_x);
void xwatch_done(struct xwatch *w);

/* Loop: drain the queued events, number a new scan and say what it
 * knows of each directory (into s; xwatch_scan_done frees it). 0 or
 * -ENOMEM. */
int xwatch_begin(struct xwatch *w, struct xwatch_scan *s);

/*
 * The scan's thread: what is known of x's directory, named name in vfd
 * (the .vector-memory the scan lists; another one than the last whole
 * scan saw makes every directory unknown). A directory that is not clean
 * is watched from now on if it is not yet (the watch counts from a later
 * scan).
 */
enum xwatch_state xwatch_look(const struct xwatch *w, struct xwatch_scan *s,
			      int vfd, int x, const char *name);

/* The scan's thread: what xwatch_look answers for x (unknown before the
 * scan's first look, or in another .vector-memory). */
enum xwatch_state xwatch_said(const struct xwatch_scan *s, int x);

/*
 * Loop: the scan ended; whole: it found every directory as the caller
 * knows it (nothing changed, nothing failed), so each watched one it
 * looked at is clean from this scan on until an event comes, and the
 * watch of one it did not see is dropped. The watches it added are taken
 * either way.
 */
void xwatch_end(struct xwatch *w, struct xwatch_scan *s, bool whole);

void xwatch_scan_done(struct xwatch_scan *s);

#endif

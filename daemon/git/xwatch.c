/*
 * inotify on the x-NNN directories (xwatch.h). The kernel queues the
 * events; a scan drains them first and numbers itself, so "an event came
 * after scan N began" is touched[x] >= N.
 */
#include "xwatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* Any change of the directory's entries, a file written in place (one
 * event when it is closed, not one a write), and the directory itself
 * going. */
#define XWATCH_MASK                                                            \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |                 \
	 IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR |         \
	 IN_DONT_FOLLOW)

int xwatch_init(struct xwatch *w, int max_x)
{
	size_t n = (size_t)max_x + 1;

	memset(w, 0, sizeof(*w));
	w->fd = -1; /* until inotify_init1: xwatch_done closes it */
	w->max_x = max_x;
	w->wd_of = malloc(n * sizeof(*w->wd_of));
	w->added = calloc(n, sizeof(*w->added));
	w->touched = calloc(n, sizeof(*w->touched));
	w->whole = calloc(n, sizeof(*w->whole));
	if (!w->wd_of || !w->added || !w->touched || !w->whole) {
		xwatch_done(w);
		return -ENOMEM;
	}
	for (size_t x = 0; x < n; x++)
		w->wd_of[x] = -1;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0)
		log_warn("inotify is not available (%s): a look after a git "
			 "command stats every x-NNN directory",
			 strerror(errno));
	return 0;
}

void xwatch_done(struct xwatch *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	free(w->wd_of);
	free(w->added);
	free(w->touched);
	free(w->whole);
	free(w->x_of);
	w->wd_of = NULL;
	w->added = w->touched = w->whole = NULL;
	w->x_of = NULL;
	w->n_wd = 0;
}

/* The x of a watch descriptor, -1 if none (a watch since dropped). */
static int x_of(const struct xwatch *w, int wd)
{
	return wd >= 0 && (size_t)wd < w->n_wd ? w->x_of[wd] : -1;
}

static void event(struct xwatch *w, const struct inotify_event *ev)
{
	int x;

	if (ev->mask & IN_Q_OVERFLOW) {
		w->overflow = w->scan;
		return;
	}
	x = x_of(w, ev->wd);
	if (x < 0)
		return; /* a watch we replaced or the kernel dropped */
	w->touched[x] = w->scan;
	if (ev->mask & IN_IGNORED) {
		/* the directory is gone: watched again when seen again */
		w->x_of[ev->wd] = -1;
		w->wd_of[x] = -1;
	}
}

/* Every queued event (the queue is bounded by the kernel: 16,384 by
 * default, then one overflow event). */
static void drain(struct xwatch *w)
{
	char buf[16384]
		__attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t got;

	while ((got = read(w->fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + got;) {
			const struct inotify_event *ev = (const void *)p;

			event(w, ev);
			p += sizeof(*ev) + ev->len;
		}
	}
}

static enum xwatch_state state_of(const struct xwatch *w, int x)
{
	uint32_t whole = w->whole[x];

	if (w->wd_of[x] < 0)
		return XWATCH_UNKNOWN;
	/* an event since the last scan that found it whole began (or since
	 * the watch, if none has yet) */
	if (w->touched[x] && w->touched[x] >= whole)
		return XWATCH_TOUCHED;
	if (whole > w->added[x] && whole > w->overflow)
		return XWATCH_CLEAN;
	return XWATCH_UNKNOWN;
}

int xwatch_begin(struct xwatch *w, struct xwatch_scan *s)
{
	memset(s, 0, sizeof(*s));
	s->state = calloc((size_t)w->max_x + 1, 1);
	s->seen = calloc((size_t)w->max_x + 1, 1);
	if (!s->state || !s->seen) {
		xwatch_scan_done(s);
		return -ENOMEM;
	}
	if (w->fd < 0)
		return 0; /* every directory unknown */
	drain(w);
	s->n = ++w->scan;
	for (int x = 0; x <= w->max_x; x++)
		s->state[x] = (uint8_t)state_of(w, x);
	return 0;
}

enum xwatch_state xwatch_look(const struct xwatch *w, struct xwatch_scan *s,
			      int vfd, int x, const char *name)
{
	enum xwatch_state st;
	char path[64];
	int wd;

	if (w->fd < 0 || x < 0 || x > w->max_x)
		return XWATCH_UNKNOWN;
	if (!s->top_ino) {
		struct stat top;

		if (fstat(vfd, &top) < 0)
			return XWATCH_UNKNOWN;
		s->top_dev = top.st_dev;
		s->top_ino = top.st_ino;
		s->top_same = w->top_ino && top.st_ino == w->top_ino &&
			      top.st_dev == w->top_dev;
	}
	s->seen[x] = 1;
	st = xwatch_said(s, x);
	if (st == XWATCH_CLEAN || s->full || (s->top_same && w->wd_of[x] >= 0))
		return st;
	/* The directory vfd holds, not whatever the path names now. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", vfd, name);
	wd = inotify_add_watch(w->fd, path, XWATCH_MASK);
	if (wd < 0) {
		if (errno == ENOSPC)
			s->full = true; /* the user's limit of watches */
		return st;
	}
	if (s->n_added == s->cap_added) {
		size_t cap = s->cap_added ? s->cap_added * 2 : 64;
		struct xwatch_added *a =
			realloc(s->added, cap * sizeof(*s->added));

		if (!a) {
			/* not recorded: its events are dropped until a
			 * later scan adds it again (it stays unknown) */
			inotify_rm_watch(w->fd, wd);
			return st;
		}
		s->added = a;
		s->cap_added = cap;
	}
	s->added[s->n_added++] = (struct xwatch_added){x, wd};
	return st;
}

enum xwatch_state xwatch_said(const struct xwatch_scan *s, int x)
{
	/* another .vector-memory than the last whole scan's: its
	 * directories are others, whatever their names */
	return s->top_same ? (enum xwatch_state)s->state[x] : XWATCH_UNKNOWN;
}

/* Room in x_of for wd. */
static int grow_wd(struct xwatch *w, int wd)
{
	size_t n = w->n_wd ? w->n_wd : 64;
	int *p;

	if ((size_t)wd < w->n_wd)
		return 0;
	while (n <= (size_t)wd)
		n *= 2;
	p = realloc(w->x_of, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = w->n_wd; i < n; i++)
		p[i] = -1;
	w->x_of = p;
	w->n_wd = n;
	return 0;
}

void xwatch_end(struct xwatch *w, struct xwatch_scan *s, bool whole)
{
	if (w->fd < 0)
		return;
	for (size_t i = 0; i < s->n_added; i++) {
		int x = s->added[i].x, wd = s->added[i].wd, old = w->wd_of[x];

		if (grow_wd(w, wd) < 0) {
			inotify_rm_watch(w->fd, wd);
			continue;
		}
		if (old >= 0 && old != wd) {
			/* the directory of a .vector-memory replaced */
			w->x_of[old] = -1;
			inotify_rm_watch(w->fd, old);
		}
		if (w->x_of[wd] >= 0 && w->x_of[wd] != x)
			w->wd_of[w->x_of[wd]] = -1;
		w->x_of[wd] = x;
		w->wd_of[x] = wd;
		w->added[x] = s->n;
	}
	if (s->full && !w->full)
		log_warn("cannot watch more x-NNN directories "
			 "(fs.inotify.max_user_watches): a look after a git "
			 "command stats the others");
	w->full |= s->full;
	if (!whole || !s->top_ino)
		return;
	for (int x = 0; x <= w->max_x; x++) {
		int wd = w->wd_of[x];

		if (wd < 0)
			continue;
		if (s->seen[x]) {
			w->whole[x] = s->n;
			continue;
		}
		/* Not in the .vector-memory listed (gone, or of one since
		 * replaced): a directory of that name later is another. */
		w->x_of[wd] = -1;
		w->wd_of[x] = -1;
		inotify_rm_watch(w->fd, wd);
	}
	w->top_dev = s->top_dev;
	w->top_ino = s->top_ino;
}

void xwatch_scan_done(struct xwatch_scan *s)
{
	free(s->state);
	free(s->seen);
	free(s->added);
	memset(s, 0, sizeof(*s));
}

/*
 * Repository watcher. inotify (through uv_fs_event) on the git directory
 * sees HEAD, index and packed-refs being renamed into place; a second
 * watch follows the directory of the current branch's loose ref, re-armed
 * whenever HEAD names another branch. The signature is read on the loop
 * thread: a few tiny files and one stat.
 */
#include "watch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEBOUNCE_MS 100

/* Up to n-1 bytes of a small file, NUL-terminated ("" if absent). */
static void read_small(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t got = fd >= 0 ? read(fd, buf, n - 1) : -1;

	buf[got > 0 ? got : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

static void append_stat(char *sig, size_t n, const char *path)
{
	struct stat st;
	size_t len = strlen(sig);

	if (stat(path, &st) < 0)
		memset(&st, 0, sizeof(st));
	snprintf(sig + len, n - len, "|%llu:%lld:%lld.%ld:%lld.%ld",
		 (unsigned long long)st.st_ino, (long long)st.st_size,
		 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
		 (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

/* HEAD's bytes, the branch ref's bytes, packed-refs' and index's stat;
 * also where the branch's loose ref lives (ref_dir). */
static void signature(struct watch *w, char *sig, size_t n, char *ref_dir,
		      size_t rn)
{
	char path[4096], head[256], ref[128];

	snprintf(path, sizeof(path), "%s/HEAD", w->gitdir);
	read_small(path, head, sizeof(head));
	ref[0] = '\0';
	ref_dir[0] = '\0';
	if (strncmp(head, "ref: ", 5) == 0) {
		char *name = head + 5, *slash;

		name[strcspn(name, "\r\n")] = '\0';
		snprintf(path, sizeof(path), "%s/%s", w->commondir, name);
		read_small(path, ref, sizeof(ref));
		snprintf(ref_dir, rn, "%s", path);
		slash = strrchr(ref_dir, '/');
		if (slash)
			*slash = '\0';
	}
	snprintf(sig, n, "%s|%s", head, ref);
	snprintf(path, sizeof(path), "%s/packed-refs", w->commondir);
	append_stat(sig, n, path);
	snprintf(path, sizeof(path), "%s/index", w->gitdir);
	append_stat(sig, n, path);
}

static void event_cb(uv_fs_event_t *h, const char *file, int events,
		     int status);

/* Follow the branch's ref directory (it changes with HEAD). */
static void arm_ref(struct watch *w, const char *ref_dir)
{
	if (w->ref_armed && strcmp(ref_dir, w->ref_dir) == 0)
		return;
	if (w->ref_armed) {
		uv_fs_event_stop(&w->ref_ev);
		w->ref_armed = false;
	}
	if (!ref_dir[0])
		return;
	snprintf(w->ref_dir, sizeof(w->ref_dir), "%s", ref_dir);
	if (uv_fs_event_start(&w->ref_ev, event_cb, w->ref_dir, 0) == 0)
		w->ref_armed = true;
}

static void debounce_cb(uv_timer_t *t)
{
	struct watch *w = t->data;
	char sig[WATCH_SIG_MAX], ref_dir[sizeof(w->ref_dir)];

	/* A state file of git (MERGE_HEAD, rebase-merge/, index.lock)
	 * came or went: git may have taken or given back the tree. */
	if (w->touched)
		w->touched(w->ctx);
	signature(w, sig, sizeof(sig), ref_dir, sizeof(ref_dir));
	arm_ref(w, ref_dir);
	if (strcmp(sig, w->sig) == 0)
		return;
	memcpy(w->sig, sig, sizeof(sig));
	w->changed(w->ctx);
}

static void lock_check_cb(uv_check_t *c)
{
	struct watch *w = c->data;

	uv_check_stop(c);
	w->lock_pending = false;
	if (w->lock_event)
		w->lock_event(w->ctx);
}

static bool is_lock(const char *file)
{
	size_t len = file ? strlen(file) : 0;

	return len > 5 && strcmp(file + len - 5, ".lock") == 0;
}

static void event_cb(uv_fs_event_t *h, const char *file, int events, int status)
{
	struct watch *w = h->data;

	(void)events;
	if (status < 0)
		return;
	/* Reported after this iteration's events (uv_check), so a burst of
	 * them is looked at once, as the tree is then. */
	if (w->lock_event && !w->lock_pending && is_lock(file)) {
		w->lock_pending = true;
		uv_check_start(&w->lock_check, lock_check_cb);
	}
	uv_timer_start(&w->debounce, debounce_cb, DEBOUNCE_MS, 0);
}

void watch_settle(struct watch *w)
{
	char ref_dir[sizeof(w->ref_dir)];

	if (!w->started)
		return;
	signature(w, w->sig, sizeof(w->sig), ref_dir, sizeof(ref_dir));
	arm_ref(w, ref_dir);
}

int watch_start(struct watch *w, uv_loop_t *loop, const char *gitdir,
		const char *commondir, watch_fn changed, void *ctx)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->loop = loop;
	w->changed = changed;
	w->ctx = ctx;
	w->gitdir = strdup(gitdir);
	w->commondir = strdup(commondir);
	if (!w->gitdir || !w->commondir) {
		free(w->gitdir);
		free(w->commondir);
		return -ENOMEM;
	}
	uv_timer_init(loop, &w->debounce);
	uv_check_init(loop, &w->lock_check);
	uv_fs_event_init(loop, &w->gitdir_ev);
	uv_fs_event_init(loop, &w->ref_ev);
	w->debounce.data = w->gitdir_ev.data = w->ref_ev.data = w;
	w->lock_check.data = w;
	w->started = true;
	rc = uv_fs_event_start(&w->gitdir_ev, event_cb, w->gitdir, 0);
	watch_settle(w);
	return rc < 0 ? rc : 0;
}

void watch_stop(struct watch *w)
{
	if (!w->started)
		return;
	w->started = false;
	uv_close((uv_handle_t *)&w->gitdir_ev, NULL);
	uv_close((uv_handle_t *)&w->ref_ev, NULL);
	uv_close((uv_handle_t *)&w->debounce, NULL);
	uv_close((uv_handle_t *)&w->lock_check, NULL);
	free(w->gitdir);
	free(w->commondir);
	w->gitdir = w->commondir = NULL;
}

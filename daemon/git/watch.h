/*
 * Watching the repository for changes made under the daemon: HEAD, the
 * current branch's ref (loose or packed) and the index. Events are
 * debounced, then a signature of those three (their bytes or stat) is
 * compared with the last one the daemon settled on; only a difference is
 * reported. The daemon settles after its own commits and reloads, so its
 * own changes are not reported back to it. A lock file coming or going is
 * also reported at once (lock_event): git gives the working tree back
 * when it removes its lock, and a debounce would keep the daemon waiting
 * 100 ms more. Loop thread only.
 */
#ifndef VMEM_DAEMON_WATCH_H
#define VMEM_DAEMON_WATCH_H

#include <stdbool.h>
#include <uv.h>

#define WATCH_SIG_MAX 1024

typedef void (*watch_fn)(void *ctx);

struct watch {
	uv_loop_t *loop;
	char *gitdir, *commondir;
	uv_fs_event_t gitdir_ev; /* HEAD, index, packed-refs */
	uv_fs_event_t ref_ev;	 /* the directory of the branch's ref */
	bool ref_armed;
	char ref_dir[4096];
	uv_timer_t debounce;
	char sig[WATCH_SIG_MAX]; /* as last settled */
	watch_fn changed;
	watch_fn touched; /* after any event settles, changed or not (may be
			     NULL; set after watch_start) */
	/* A lock file ("*.lock": index.lock, a ref's lock) came or went:
	 * at once, once per loop iteration that saw one, not after the
	 * debounce (may be NULL; set after watch_start). */
	watch_fn lock_event;
	uv_check_t lock_check;
	bool lock_pending;
	void *ctx;
	bool started;
};

/* Start watching; changed(ctx) runs after a change settles. 0 or -errno. */
int watch_start(struct watch *w, uv_loop_t *loop, const char *gitdir,
		const char *commondir, watch_fn changed, void *ctx);

/* Take the repository as it is now as known (after our own change). */
void watch_settle(struct watch *w);

/* Stop and close the handles (idempotent). */
void watch_stop(struct watch *w);

#endif

/*
 * A daemon's own end (see life.h): a removed tree, or idleness.
 */
#include "life.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"
#include "log.h"

/*
 * Why path no longer is the directory (dev, ino) we started with, in why;
 * false when it still is. Only an absent path or another inode counts:
 * any other failure (EIO, ESTALE) may pass and is not a removal.
 */
static bool vanished(const char *what, const char *path, dev_t dev, ino_t ino,
		     char *why, size_t n)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			return false;
		snprintf(why, n, "%s %s was removed", what, path);
		return true;
	}
	if (st.st_dev == dev && st.st_ino == ino)
		return false;
	snprintf(why, n, "%s %s was replaced by another directory", what, path);
	return true;
}

bool life_check(struct life *l)
{
	struct daemon *d = l->d;
	char why[4200];

	if (l->gone || !l->started)
		return l->gone;
	if (!vanished("the working tree", d->repo.root, l->root_dev,
		      l->root_ino, why, sizeof(why)) &&
	    !vanished("the git directory", d->repo.gitdir, l->git_dev,
		      l->git_ino, why, sizeof(why))) {
		if (!statedir_removed(&d->repo.state))
			return false;
		snprintf(why, sizeof(why), "the state directory %s was removed",
			 d->repo.state.path);
	}
	l->gone = true;
	log_notice("%s: exiting (acknowledged writes not yet in files stay in "
		   "the write-ahead log)",
		   why);
	daemon_leave(d);
	return true;
}

/* Nothing that a stop would lose or cut short. */
static bool idle(const struct daemon *d)
{
	return server_connections(&d->server) == 0 && d->subs.n == 0 &&
	       store_pending(&d->store) == 0 &&
	       !store_jobs_running(&d->store) && !d->store.reloading &&
	       gitq_pending(&d->gitq) == 0 && !d->gitq.busy;
}

static void tick_cb(uv_timer_t *t)
{
	struct life *l = t->data;
	struct daemon *d = l->d;
	uint64_t now = uv_now(d->loop);

	if (life_check(l) || d->stopping)
		return;
	if (!idle(d)) {
		l->idle_since_ms = now;
		return;
	}
	if (l->idle_exit_s &&
	    now - l->idle_since_ms >= (uint64_t)l->idle_exit_s * 1000) {
		log_info("idle for %u s (no connection, nothing to write or "
			 "commit): exiting (idle_exit_s)",
			 l->idle_exit_s);
		daemon_stop(d);
	}
}

int life_start(struct life *l, struct daemon *d, unsigned idle_exit_s)
{
	struct stat root, git;

	memset(l, 0, sizeof(*l));
	l->d = d;
	l->idle_exit_s = idle_exit_s;
	if (stat(d->repo.root, &root) < 0 || stat(d->repo.gitdir, &git) < 0)
		return -errno;
	l->root_dev = root.st_dev;
	l->root_ino = root.st_ino;
	l->git_dev = git.st_dev;
	l->git_ino = git.st_ino;
	l->idle_since_ms = uv_now(d->loop);
	uv_timer_init(d->loop, &l->tick);
	l->tick.data = l;
	/* The loop has other reasons to live; this timer is not one. */
	uv_unref((uv_handle_t *)&l->tick);
	uv_timer_start(&l->tick, tick_cb, LIFE_TICK_MS, LIFE_TICK_MS);
	l->started = true;
	return 0;
}

void life_set_idle_exit(struct life *l, unsigned idle_exit_s)
{
	l->idle_exit_s = idle_exit_s;
}

void life_stop(struct life *l)
{
	if (!l->started)
		return;
	l->started = false;
	uv_close((uv_handle_t *)&l->tick, NULL);
}

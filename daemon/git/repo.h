/*
 * The working tree a daemon serves: discovery through libgit2 (worktrees
 * and ownership checks included), the daemon's private directory in the
 * tree's own git directory (<gitdir>/vmem, mode 0700), and the
 * single-instance lock held for the daemon's whole life.
 */
#ifndef VMEM_DAEMON_REPO_H
#define VMEM_DAEMON_REPO_H

#include <stddef.h>

struct repo {
	char *root;	  /* canonical working-tree root, no trailing slash */
	char *gitdir;	  /* the tree's own git directory, no trailing slash */
	char *commondir;  /* where refs live (differs for a worktree) */
	char *statedir;	  /* <gitdir>/vmem */
	char *wal_path;	  /* <statedir>/wal */
	char *quarantine; /* <statedir>/quarantine */
	int lock_fd;	  /* -1 until repo_lock succeeds */
};

/*
 * Find the working tree containing path (path itself or a parent).
 * Returns 0, -ENOENT when there is none, -EINVAL for a bare repository,
 * -EPERM when libgit2 refuses its ownership, other -errno. errmsg says why.
 */
int repo_open(struct repo *r, const char *path, char *errmsg, size_t errn);

/*
 * Create the state directory and take the exclusive lock without waiting.
 * Returns 0, -EBUSY when another daemon holds it, or -errno.
 */
int repo_lock(struct repo *r, char *errmsg, size_t errn);

/* Release everything (the lock goes with its fd). Safe to call twice. */
void repo_done(struct repo *r);

#endif

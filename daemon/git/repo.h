/*
 * The working tree a daemon serves: discovery through libgit2 (worktrees
 * and ownership checks included), how the repository shares its files
 * (core.sharedRepository), the daemon's private directory in the tree's
 * own git directory (<gitdir>/vmem, see statedir.h), and the
 * single-instance lock held for the daemon's whole life.
 */
#ifndef VMEM_DAEMON_REPO_H
#define VMEM_DAEMON_REPO_H

#include <stddef.h>
#include <sys/types.h>

#include "statedir.h"

struct repo {
	char *root;	 /* canonical working-tree root, no trailing slash */
	char *gitdir;	 /* the tree's own git directory, no trailing slash */
	char *commondir; /* where refs live (differs for a worktree) */
	/* core.sharedRepository as git reads it: 0 (umask), 0660 (group),
	 * 0664 (everybody), or -MODE for an explicit mode such as 0640. */
	int shared;
	/* What the daemon creates in the working tree gets these modes
	 * (repo_tree_modes under the umask at repo_open); 0: the umask's. */
	mode_t file_mode, dir_mode;
	struct statedir state; /* <gitdir>/vmem, once repo_lock succeeded */
	int lock_fd;	       /* -1 until repo_lock succeeds */
};

/*
 * Find the working tree containing path (path itself or a parent), and
 * how it shares files. Reads the process umask (call it before threads
 * start). Returns 0, -ENOENT when there is none, -EINVAL for a bare
 * repository or a core.sharedRepository git refuses too, -EPERM when
 * libgit2 refuses its ownership, other -errno. errmsg says why.
 */
int repo_open(struct repo *r, const char *path, char *errmsg, size_t errn);

/*
 * Open and check the state directory (statedir_init: what it tightened
 * goes to note) and take the exclusive lock without waiting. Returns 0,
 * -EBUSY when another daemon holds it, or -errno (the state directory
 * refused: -EPERM, -ELOOP, -ENOTDIR).
 */
int repo_lock(struct repo *r, char *note, size_t noten, char *errmsg,
	      size_t errn);

/*
 * The modes of what the daemon creates in the working tree, as git
 * creates the files of a repository with r's core.sharedRepository under
 * the process umask um: 0666 & ~um (0777 for directories) widened for a
 * shared repository (0664 and 02775 for group sharing under umask 022),
 * or the configured mode. 0 when the umask alone decides (no sharing).
 */
void repo_tree_modes(const struct repo *r, mode_t um, mode_t *file,
		     mode_t *dir);

/* Release everything (the lock goes with its fd). Safe to call twice. */
void repo_done(struct repo *r);

#endif

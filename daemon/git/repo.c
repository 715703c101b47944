/*
 * Working-tree discovery and the single-instance lock. libgit2 is used only
 * here, at start-up, to find the tree and its git directory; it knows
 * worktrees (a .git file) and enforces safe-directory ownership.
 */
#include "repo.h"

#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* A malloc'd copy of a directory path without its trailing slash. */
static char *dir_dup(const char *path)
{
	size_t n = strlen(path);
	char *s;

	while (n > 1 && path[n - 1] == '/')
		n--;
	s = malloc(n + 1);
	if (s) {
		memcpy(s, path, n);
		s[n] = '\0';
	}
	return s;
}

static char *path_join(const char *dir, const char *name)
{
	char *s;

	if (asprintf(&s, "%s/%s", dir, name) < 0)
		return NULL;
	return s;
}

int repo_open(struct repo *r, const char *path, char *errmsg, size_t errn)
{
	git_repository *repo = NULL;
	char canon[PATH_MAX];
	int rc;

	memset(r, 0, sizeof(*r));
	r->lock_fd = -1;
	if (!realpath(path, canon)) {
		rc = -errno;
		snprintf(errmsg, errn, "%s: %s", path, strerror(errno));
		goto out;
	}
	rc = git_repository_open_ext(&repo, canon, 0, NULL);
	if (rc < 0) {
		const git_error *e = git_error_last();

		/* libgit2 1.5 reports a repository of another owner as a
		 * safe.directory value not found (a config error); later
		 * versions as GIT_EOWNER. */
		if (rc == GIT_EOWNER || (rc == GIT_ENOTFOUND && e &&
					 e->klass == GIT_ERROR_CONFIG)) {
			snprintf(errmsg, errn,
				 "the repository of %s is owned by another "
				 "user: refusing it, as git does (list it in "
				 "safe.directory if you trust it)",
				 canon);
			rc = -EPERM;
		} else if (rc == GIT_ENOTFOUND) {
			snprintf(errmsg, errn,
				 "%s is not inside a git working tree", canon);
			rc = -ENOENT;
		} else {
			snprintf(errmsg, errn,
				 "cannot open repository at %s: %s", canon,
				 e ? e->message : "unknown error");
			rc = e && e->klass == GIT_ERROR_CONFIG ? -EPERM : -EIO;
		}
		goto out;
	}
	if (git_repository_is_bare(repo)) {
		snprintf(errmsg, errn,
			 "%s is a bare repository (no working tree)", canon);
		rc = -EINVAL;
		goto out;
	}
	if (!realpath(git_repository_workdir(repo), canon)) {
		rc = -errno;
		snprintf(errmsg, errn, "working tree: %s", strerror(errno));
		goto out;
	}
	r->root = dir_dup(canon);
	r->gitdir = dir_dup(git_repository_path(repo));
	r->commondir = dir_dup(git_repository_commondir(repo));
	r->statedir = r->gitdir ? path_join(r->gitdir, "vmem") : NULL;
	r->wal_path = r->statedir ? path_join(r->statedir, "wal") : NULL;
	r->quarantine =
		r->statedir ? path_join(r->statedir, "quarantine") : NULL;
	if (!r->root || !r->quarantine || !r->wal_path || !r->commondir) {
		snprintf(errmsg, errn, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	rc = 0;
out:
	git_repository_free(repo);
	if (rc < 0)
		repo_done(r);
	return rc;
}

int repo_lock(struct repo *r, char *errmsg, size_t errn)
{
	char *lock_path = NULL;
	struct stat st;
	int fd = -1;
	int rc;

	if (mkdir(r->statedir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(errmsg, errn, "cannot create %s: %s", r->statedir,
			 strerror(errno));
		goto out;
	}
	if (lstat(r->statedir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		rc = -ENOTDIR;
		snprintf(errmsg, errn, "%s is not a directory", r->statedir);
		goto out;
	}
	lock_path = path_join(r->statedir, "lock");
	if (!lock_path) {
		rc = -ENOMEM;
		snprintf(errmsg, errn, "out of memory");
		goto out;
	}
	fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		snprintf(errmsg, errn, "cannot open %s: %s", lock_path,
			 strerror(errno));
		goto out;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(errmsg, errn,
			 rc == -EBUSY ? "already running for %s (lock %s held)"
				      : "cannot lock %s (%s)",
			 rc == -EBUSY ? r->root : lock_path,
			 rc == -EBUSY ? lock_path : strerror(-rc));
		goto out;
	}
	r->lock_fd = fd;
	fd = -1;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(lock_path);
	return rc;
}

void repo_done(struct repo *r)
{
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	r->lock_fd = -1;
	free(r->root);
	free(r->gitdir);
	free(r->commondir);
	free(r->statedir);
	free(r->wal_path);
	free(r->quarantine);
	r->root = r->gitdir = r->commondir = r->statedir = r->wal_path =
		r->quarantine = NULL;
}

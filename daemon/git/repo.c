/*
 * Working-tree discovery and the single-instance lock. libgit2 is used only
 * here, at start-up, to find the tree, its git directory and its sharing
 * mode; it knows worktrees (a .git file) and enforces safe-directory
 * ownership.
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

#define PERM_GROUP     0660
#define PERM_EVERYBODY 0664

/*
 * core.sharedRepository as git's own parser reads it (a missing value is
 * true): 0, PERM_GROUP, PERM_EVERYBODY, -MODE; -1 with why for a value
 * git refuses too.
 */
static int shared_parse(const char *v, const char **why)
{
	char *end;
	long i;
	int b;

	if (!v)
		return PERM_GROUP;
	if (!strcmp(v, "umask"))
		return 0;
	if (!strcmp(v, "group"))
		return PERM_GROUP;
	if (!strcmp(v, "all") || !strcmp(v, "world") || !strcmp(v, "everybody"))
		return PERM_EVERYBODY;
	errno = 0;
	i = strtol(v, &end, 8);
	if (*end) {
		if (git_config_parse_bool(&b, v) < 0) {
			*why = "neither a boolean, a word git knows nor an "
			       "octal mode";
			return -1;
		}
		return b ? PERM_GROUP : 0;
	}
	if (errno || i < 0 || i > 07777) {
		*why = "not a file mode";
		return -1;
	}
	if (i == 0 || i == 1 || i == 2) /* git's older spellings */
		return i == 0 ? 0 : i == 1 ? PERM_GROUP : PERM_EVERYBODY;
	if ((i & 0600) != 0600) {
		*why = "the owner must be able to read and write";
		return -1;
	}
	return -(int)(i & 0666);
}

/* Read core.sharedRepository of repo into r->shared. */
static int read_shared(struct repo *r, git_repository *repo, char *errmsg,
		       size_t errn)
{
	git_config *cfg = NULL;
	git_config_entry *e = NULL;
	const char *why = NULL;
	int rc = 0, v;

	r->shared = 0;
	if (git_repository_config_snapshot(&cfg, repo) < 0) {
		const git_error *ge = git_error_last();

		snprintf(errmsg, errn,
			 "cannot read the configuration of %s: %s", r->root,
			 ge ? ge->message : "unknown error");
		return -EIO;
	}
	if (git_config_get_entry(&e, cfg, "core.sharedRepository") == 0) {
		v = shared_parse(e->value, &why);
		if (v == -1) {
			snprintf(errmsg, errn,
				 "core.sharedRepository = %s in %s: %s (git "
				 "refuses it too)",
				 e->value ? e->value : "", r->gitdir, why);
			rc = -EINVAL;
		} else {
			r->shared = v;
		}
	}
	git_config_entry_free(e);
	git_config_free(cfg);
	return rc;
}

/* git's calc_shared_perm: widen mode as the repository shares files. */
static mode_t shared_mode(int shared, mode_t mode)
{
	mode_t tweak = (mode_t)(shared < 0 ? -shared : shared);

	if (!(mode & S_IWUSR))
		tweak &= ~(mode_t)0222;
	if (mode & S_IXUSR)
		tweak |= (tweak & 0444) >> 2;
	return shared < 0 ? (mode & ~(mode_t)0777) | tweak : mode | tweak;
}

void repo_tree_modes(const struct repo *r, mode_t um, mode_t *file, mode_t *dir)
{
	mode_t d;

	*file = *dir = 0;
	if (!r->shared)
		return;
	*file = shared_mode(r->shared, 0666 & ~um);
	d = shared_mode(r->shared, 0777 & ~um);
	d |= (d & 0444) >> 2;
	/* as git does for its directories: new files keep the group */
	if (d & 060)
		d |= S_ISGID;
	*dir = d;
}

int repo_open(struct repo *r, const char *path, char *errmsg, size_t errn)
{
	git_repository *repo = NULL;
	char canon[PATH_MAX];
	int rc;

	memset(r, 0, sizeof(*r));
	r->lock_fd = -1;
	r->state.fd = -1;
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
	if (!r->root || !r->gitdir || !r->commondir) {
		snprintf(errmsg, errn, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	rc = read_shared(r, repo, errmsg, errn);
	if (rc == 0) {
		mode_t um = umask(0);

		umask(um);
		repo_tree_modes(r, um, &r->file_mode, &r->dir_mode);
	}
out:
	git_repository_free(repo);
	if (rc < 0)
		repo_done(r);
	return rc;
}

int repo_lock(struct repo *r, char *note, size_t noten, char *errmsg,
	      size_t errn)
{
	int fd = -1;
	int rc;

	rc = statedir_init(&r->state, r->gitdir, note, noten, errmsg, errn);
	if (rc < 0)
		goto out;
	fd = statedir_open(&r->state, "lock", O_RDWR | O_CREAT, 0600, errmsg,
			   errn);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (rc == -EBUSY)
			snprintf(errmsg, errn,
				 "already running for %s (lock %s/lock held)",
				 r->root, r->state.path);
		else
			snprintf(errmsg, errn, "cannot lock %s/lock (%s)",
				 r->state.path, strerror(-rc));
		goto out;
	}
	r->lock_fd = fd;
	fd = -1;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

void repo_done(struct repo *r)
{
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	r->lock_fd = -1;
	statedir_done(&r->state);
	free(r->root);
	free(r->gitdir);
	free(r->commondir);
	r->root = r->gitdir = r->commondir = NULL;
}

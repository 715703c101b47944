/*
 * The state directory (see statedir.h). Everything goes through *at()
 * calls on the checked directory descriptor; the path is kept only to
 * name things in messages.
 */
#include "statedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errmsg.h"

/* Group or other may write: refused. May read or search: tightened. */
#define FOREIGN_WRITE (S_IWGRP | S_IWOTH)
#define FOREIGN_ANY   (S_IRWXG | S_IRWXO)

/* "alice (uid 1000)", or "uid 1000" for a uid without a name. */
static void owner_str(uid_t uid, char *buf, size_t n)
{
	struct passwd pw, *found = NULL;
	char tmp[1024];

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &found) == 0 && found)
		snprintf(buf, n, "%s (uid %u)", found->pw_name, (unsigned)uid);
	else
		snprintf(buf, n, "uid %u", (unsigned)uid);
}

/*
 * Why the entry at path (stat st) is not ours to use, in errmsg: its
 * owner and its mode, then what to do. Returns the -errno to report.
 */
static int refuse(const char *path, const struct stat *st, const char *why,
		  int err, char *errmsg, size_t errn)
{
	char owner[320], me[320];

	if (!errmsg || !errn)
		return err; /* no names to look up (NSS may be slow) */
	owner_str(st->st_uid, owner, sizeof(owner));
	owner_str(geteuid(), me, sizeof(me));
	errmsg_set(errmsg, errn,
		   "%s: owner %s, mode %04o: %s; refusing it (it must be "
		   "owned by %s, with no access for group or other: look at "
		   "what is there, then remove it or fix its owner and mode)",
		   path, owner, (unsigned)(st->st_mode & 07777), why, me);
	return err;
}

/* Why an entry (stat st) is not ours to use, or NULL when it is. */
static const char *unsafe(const struct stat *st, int *err)
{
	*err = -EPERM;
	if (S_ISLNK(st->st_mode)) {
		*err = -ELOOP;
		return "a symbolic link";
	}
	if (st->st_uid != geteuid())
		return "owned by another user";
	if (st->st_mode & FOREIGN_WRITE)
		return "writable by group or other";
	return NULL;
}

/*
 * Check an entry (stat st, named path, open as fd) below a checked
 * directory, or that directory itself: refuse it, or tighten it to want
 * when it is ours and only readable by others. Returns 0 (*tightened set
 * when it changed the mode) or the -errno of a refusal.
 */
static int check_entry(int fd, const char *path, const struct stat *st,
		       mode_t want, bool *tightened, char *errmsg, size_t errn)
{
	int err;
	const char *why = unsafe(st, &err);

	*tightened = false;
	if (why)
		return refuse(path, st, why, err, errmsg, errn);
	if (!(st->st_mode & FOREIGN_ANY))
		return 0;
	if (fchmod(fd, want) < 0) {
		err = -errno;
		errmsg_set(errmsg, errn, "%s: cannot make it private: %s", path,
			   strerror(-err));
		return err;
	}
	*tightened = true;
	return 0;
}

/* The entry name of dfd (dir_path) as a malloc'd path, for messages. */
static char *join(const char *dir_path, const char *name)
{
	char *s;

	if (asprintf(&s, "%s/%s", dir_path, name) < 0)
		return NULL;
	return s;
}

/* One path component: no slash, not "." or "..". */
static bool component_ok(const char *name)
{
	return name && *name && !strchr(name, '/') && strcmp(name, ".") &&
	       strcmp(name, "..");
}

static void note_add(char *note, size_t noten, const char *path, mode_t was)
{
	size_t len;

	if (!note || !noten)
		return;
	len = strlen(note);
	snprintf(note + len, noten - len, "%s%s (was %04o)", len ? ", " : "",
		 path, (unsigned)(was & 07777));
}

/*
 * Open directory name of dfd (creating it 0700 when create), check it,
 * and keep it in out. made says whether we created it.
 */
static int open_dir(int dfd, const char *dir_path, const char *name,
		    bool create, struct statedir *out, char *note, size_t noten,
		    char *errmsg, size_t errn)
{
	struct stat st;
	bool made = false, tightened;
	char *path = join(dir_path, name);
	int fd = -1, err;

	memset(out, 0, sizeof(*out));
	out->fd = -1;
	if (!path) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	if (create && mkdirat(dfd, name, 0700) == 0)
		made = true;
	else if (create && errno != EEXIST) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot create %s: %s", path,
			   strerror(-err));
		goto out;
	}
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		if ((err == -ELOOP || err == -ENOTDIR) &&
		    fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			err = S_ISLNK(st.st_mode)
				      ? refuse(path, &st, "a symbolic link",
					       -ELOOP, errmsg, errn)
				      : refuse(path, &st, "not a directory",
					       -ENOTDIR, errmsg, errn);
		} else {
			errmsg_set(errmsg, errn, "cannot open %s: %s", path,
				   strerror(-err));
		}
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot stat %s: %s", path,
			   strerror(-err));
		goto out;
	}
	/* Ours from birth: exactly 0700, whatever the umask (which may have
	 * taken our own bits) or a setgid parent of a shared repository
	 * (whose bit it inherited). */
	if (made && (st.st_mode & 07777) != 0700) {
		if (fchmod(fd, 0700) < 0) {
			err = -errno;
			errmsg_set(errmsg, errn, "cannot chmod %s: %s", path,
				   strerror(-err));
			goto out;
		}
		st.st_mode = (st.st_mode & ~(mode_t)07777) | 0700;
	}
	err = check_entry(fd, path, &st, 0700, &tightened, errmsg, errn);
	if (err < 0)
		goto out;
	if (tightened)
		note_add(note, noten, path, st.st_mode);
	out->fd = fd;
	out->path = path;
	fd = -1;
	path = NULL;
	err = 0;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return err;
}

/* Check every entry of a freshly opened state directory. */
static int scan(const struct statedir *sd, char *note, size_t noten,
		char *errmsg, size_t errn)
{
	struct dirent *de;
	struct stat st;
	const char *why;
	bool tightened;
	char *path = NULL;
	int dfd, fd, bad, err = 0;
	DIR *dir;

	dfd = openat(sd->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || !(dir = fdopendir(dfd))) {
		err = -errno;
		if (dfd >= 0)
			close(dfd);
		errmsg_set(errmsg, errn, "cannot list %s: %s", sd->path,
			   strerror(-err));
		return err;
	}
	while (err == 0 && (errno = 0, de = readdir(dir))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		free(path);
		path = join(sd->path, de->d_name);
		if (!path) {
			errmsg_set(errmsg, errn, "out of memory");
			err = -ENOMEM;
			break;
		}
		if (fstatat(sd->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			err = -errno;
			errmsg_set(errmsg, errn, "cannot stat %s: %s", path,
				   strerror(-err));
			break;
		}
		why = unsafe(&st, &bad);
		if (why) {
			err = refuse(path, &st, why, bad, errmsg, errn);
			break;
		}
		if (!(st.st_mode & FOREIGN_ANY) ||
		    !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
			continue;
		/* Ours, readable by others: tighten it through a descriptor,
		 * so what is changed is what was checked. */
		fd = openat(sd->fd, de->d_name,
			    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0) {
			err = -errno;
			errmsg_set(errmsg, errn, "cannot open %s: %s", path,
				   strerror(-err));
			break;
		}
		if (fstat(fd, &st) < 0)
			err = -errno;
		if (err == 0)
			err = check_entry(fd, path, &st,
					  S_ISDIR(st.st_mode) ? 0700 : 0600,
					  &tightened, errmsg, errn);
		else
			errmsg_set(errmsg, errn, "cannot stat %s: %s", path,
				   strerror(-err));
		close(fd);
		if (err == 0 && tightened)
			note_add(note, noten, path, st.st_mode);
	}
	if (err == 0 && errno) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot list %s: %s", sd->path,
			   strerror(-err));
	}
	free(path);
	closedir(dir);
	return err;
}

int statedir_init(struct statedir *sd, const char *gitdir, char *note,
		  size_t noten, char *errmsg, size_t errn)
{
	int gfd, err;

	memset(sd, 0, sizeof(*sd));
	sd->fd = -1;
	if (note && noten)
		note[0] = '\0';
	gfd = open(gitdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (gfd < 0) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot open %s: %s", gitdir,
			   strerror(-err));
		return err;
	}
	err = open_dir(gfd, gitdir, STATEDIR_NAME, true, sd, note, noten,
		       errmsg, errn);
	close(gfd);
	if (err == 0)
		err = scan(sd, note, noten, errmsg, errn);
	if (err < 0)
		statedir_done(sd);
	return err;
}

int statedir_sub(const struct statedir *sd, const char *name, bool create,
		 struct statedir *out, char *errmsg, size_t errn)
{
	if (!component_ok(name)) {
		memset(out, 0, sizeof(*out));
		out->fd = -1;
		errmsg_set(errmsg, errn, "%s: bad name", sd->path);
		return -EINVAL;
	}
	return open_dir(sd->fd, sd->path, name, create, out, NULL, 0, errmsg,
			errn);
}

int statedir_open(const struct statedir *sd, const char *name, int flags,
		  mode_t mode, char *errmsg, size_t errn)
{
	struct stat st;
	bool tightened;
	char *path = NULL;
	int fd = -1, err;

	if (!component_ok(name)) {
		errmsg_set(errmsg, errn, "%s: bad name", sd->path);
		return -EINVAL;
	}
	path = join(sd->path, name);
	if (!path) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	fd = openat(sd->fd, name,
		    (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
		    mode);
	if (fd < 0) {
		err = -errno;
		if (err == -ELOOP &&
		    fstatat(sd->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			err = refuse(path, &st, "a symbolic link", -ELOOP,
				     errmsg, errn);
		else
			errmsg_set(errmsg, errn, "cannot open %s: %s", path,
				   strerror(-err));
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot stat %s: %s", path,
			   strerror(-err));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		err = refuse(path, &st, "not a regular file", -EINVAL, errmsg,
			     errn);
		goto out;
	}
	err = check_entry(fd, path, &st, 0600, &tightened, errmsg, errn);
	if (err < 0)
		goto out;
	if (!(flags & O_NONBLOCK) &&
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot set up %s: %s", path,
			   strerror(-err));
		goto out;
	}
	if ((flags & O_TRUNC) && ftruncate(fd, 0) < 0) {
		err = -errno;
		errmsg_set(errmsg, errn, "cannot truncate %s: %s", path,
			   strerror(-err));
		goto out;
	}
	err = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return err;
}

int statedir_rename(const struct statedir *sd, const char *from, const char *to)
{
	if (!component_ok(from) || !component_ok(to))
		return -EINVAL;
	return renameat(sd->fd, from, sd->fd, to) < 0 ? -errno : 0;
}

int statedir_unlink(const struct statedir *sd, const char *name)
{
	if (!component_ok(name))
		return -EINVAL;
	return unlinkat(sd->fd, name, 0) < 0 ? -errno : 0;
}

int statedir_stat(const struct statedir *sd, const char *name, struct stat *st)
{
	if (!component_ok(name))
		return -EINVAL;
	return fstatat(sd->fd, name, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

int statedir_sync(const struct statedir *sd)
{
	return fsync(sd->fd) < 0 ? -errno : 0;
}

bool statedir_removed(const struct statedir *sd)
{
	struct stat st;

	return sd->path && fstat(sd->fd, &st) == 0 && st.st_nlink == 0;
}

void statedir_done(struct statedir *sd)
{
	if (!sd)
		return;
	if (sd->path && sd->fd >= 0)
		close(sd->fd);
	free(sd->path);
	sd->path = NULL;
	sd->fd = -1;
}

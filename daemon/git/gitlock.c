/*
 * Git lock files and the commit marker (see gitlock.h). The marker is a
 * few lines of text, rewritten whole each time it changes:
 *
 *   vmemd-commit 1
 *   pid 1234
 *   start 5678901
 *   lock DEV INO BIRTH-SEC BIRTH-NSEC PATH   (BIRTH-SEC -1: none kept)
 *
 * It is written before the lock it names exists: a lock file is made
 * under a private name, recorded, and only then hard-linked into place,
 * so whenever a lock of ours exists the marker proves it ours. What the
 * marker does not prove ours, start-up reports and leaves alone.
 */
#include "gitlock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MARKER_MAGIC "vmemd-commit 1\n"
#define MARKER	     "committing"
#define MARKER_NEW   "committing.new"

/* The lock files this process holds now (gitlock_ours, any thread). */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t dev, ino;
} held[GITMARK_MAX_LOCKS];
static size_t n_held;

static void held_add(const struct gitmark_lock *id)
{
	pthread_mutex_lock(&held_mu);
	if (n_held < GITMARK_MAX_LOCKS) {
		held[n_held].dev = id->dev;
		held[n_held].ino = id->ino;
		n_held++;
	}
	pthread_mutex_unlock(&held_mu);
}

static void held_del(const struct gitmark_lock *id)
{
	pthread_mutex_lock(&held_mu);
	for (size_t i = 0; i < n_held; i++) {
		if (held[i].dev == id->dev && held[i].ino == id->ino) {
			held[i] = held[--n_held];
			break;
		}
	}
	pthread_mutex_unlock(&held_mu);
}

bool gitlock_ours(const struct stat *st)
{
	bool ours = false;

	pthread_mutex_lock(&held_mu);
	for (size_t i = 0; i < n_held && !ours; i++)
		ours = held[i].dev == (uint64_t)st->st_dev &&
		       held[i].ino == (uint64_t)st->st_ino;
	pthread_mutex_unlock(&held_mu);
	return ours;
}

int gitlock_proc_stat(long pid, long *ppid, unsigned long long *start)
{
	char path[64], buf[1024], *p, *end;
	ssize_t r;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	r = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (r <= 0)
		return -1;
	buf[r] = '\0';
	/* The command name may hold spaces and parentheses: fields are
	 * counted from after its last ')' (that is field 3 on). */
	p = strrchr(buf, ')');
	if (!p)
		return -1;
	for (field = 2; *p && field < 22; p++) {
		if (*p != ' ')
			continue;
		field++;
		if (field == 4 && ppid)
			*ppid = strtol(p + 1, NULL, 10);
	}
	if (field != 22)
		return -1;
	*start = strtoull(p, &end, 10);
	return end == p ? -1 : 0;
}

unsigned long long gitlock_proc_start(long pid)
{
	unsigned long long start;

	return gitlock_proc_stat(pid, NULL, &start) == 0 ? start : 0;
}

int gitmark_init(struct gitmark *m, const struct statedir *sd)
{
	memset(m, 0, sizeof(*m));
	m->sd = sd;
	m->pid = (long)getpid();
	m->start = gitlock_proc_start(m->pid);
	return m->start ? 0 : -EIO;
}

/* Write the marker's whole content. */
static int mark_write(struct gitmark *m)
{
	char *buf = NULL;
	size_t len = 0, off = 0;
	FILE *f = open_memstream(&buf, &len);
	int fd = -1, rc = 0;
	ssize_t w;

	if (!f)
		return -ENOMEM;
	fprintf(f, MARKER_MAGIC "pid %ld\nstart %llu\n", m->pid, m->start);
	for (size_t i = 0; i < m->n; i++)
		fprintf(f, "lock %llu %llu %lld %u %s\n",
			(unsigned long long)m->locks[i].dev,
			(unsigned long long)m->locks[i].ino,
			(long long)m->locks[i].btime_sec,
			m->locks[i].btime_nsec, m->locks[i].path);
	if (fclose(f) != 0) {
		free(buf);
		return -ENOMEM;
	}
	/* Replaced whole by a rename: a kill in the middle leaves the old
	 * marker or the new one, never a part that forgets a lock. */
	fd = statedir_open(m->sd, MARKER_NEW, O_WRONLY | O_CREAT | O_TRUNC,
			   0600, NULL, 0);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	while (off < len) {
		w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			goto out;
		}
		off += (size_t)w;
	}
out:
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = -errno;
	if (fd >= 0 && rc == 0)
		rc = statedir_rename(m->sd, MARKER_NEW, MARKER);
	if (rc == 0)
		m->on = true;
	free(buf);
	return rc;
}

/* The identity of the file open as fd (or at path when fd < 0). */
static int identify(int fd, const char *path, struct gitmark_lock *id)
{
	struct statx sx;

	if (statx(fd >= 0 ? fd : AT_FDCWD, fd >= 0 ? "" : path,
		  (fd >= 0 ? AT_EMPTY_PATH : 0) | AT_SYMLINK_NOFOLLOW,
		  STATX_INO | STATX_BTIME, &sx) < 0)
		return -errno;
	id->dev = (uint64_t)makedev(sx.stx_dev_major, sx.stx_dev_minor);
	id->ino = sx.stx_ino;
	id->btime_sec = -1;
	id->btime_nsec = 0;
	if (sx.stx_mask & STATX_BTIME) {
		id->btime_sec = sx.stx_btime.tv_sec;
		id->btime_nsec = sx.stx_btime.tv_nsec;
	}
	return 0;
}

static bool same_id(const struct gitmark_lock *a, const struct gitmark_lock *b)
{
	return a->dev == b->dev && a->ino == b->ino &&
	       a->btime_sec == b->btime_sec && a->btime_nsec == b->btime_nsec;
}

int gitmark_begin(struct gitmark *m)
{
	m->n = 0;
	return mark_write(m);
}

void gitmark_end(struct gitmark *m)
{
	if (!m->on)
		return;
	(void)statedir_unlink(m->sd, MARKER);
	m->on = false;
	m->n = 0;
}

/* Record a lock file's identity (in place of an earlier record of the
 * same path). */
static int mark_add(struct gitmark *m, const char *path,
		    const struct gitmark_lock *id)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		if (strcmp(m->locks[i].path, path) == 0)
			break;
	if (i == m->n) {
		if (m->n == GITMARK_MAX_LOCKS)
			return -ENOSPC;
		m->n++;
	}
	m->locks[i] = *id;
	snprintf(m->locks[i].path, sizeof(m->locks[i].path), "%s", path);
	return mark_write(m);
}

/* Forget the record of path (its lock was never made). */
static void mark_del(struct gitmark *m, const char *path)
{
	for (size_t i = 0; i < m->n; i++) {
		if (strcmp(m->locks[i].path, path) != 0)
			continue;
		m->locks[i] = m->locks[--m->n];
		mark_write(m);
		return;
	}
}

/* The private name a lock file is made under, in the state directory. */
static void new_name(size_t k, char *out, size_t n)
{
	snprintf(out, n, "newlock-%zu", k);
}

int gitlock_take(struct gitlock *l, const char *target, struct gitmark *m)
{
	char tmp[32];
	int rc;

	gitlock_init(l);
	if ((size_t)snprintf(l->target, sizeof(l->target), "%s", target) >=
		    sizeof(l->target) ||
	    (size_t)snprintf(l->path, sizeof(l->path), "%s.lock", target) >=
		    sizeof(l->path))
		return -ENAMETOOLONG;
	if (m->n == GITMARK_MAX_LOCKS)
		return -ENOSPC;
	/* The file is made under a private name and recorded before it
	 * becomes the lock by link(2), which fails if the lock exists, as
	 * O_EXCL does: no instant exists at which the lock is there and
	 * the marker does not prove it ours. */
	new_name(m->n, tmp, sizeof(tmp));
	(void)statedir_unlink(m->sd, tmp);
	/* (mode 0666 less the umask, as git makes its locks: this file
	 * becomes the index or the ref) */
	l->fd = openat(m->sd->fd, tmp,
		       O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		       0666);
	if (l->fd < 0)
		return -errno;
	rc = identify(l->fd, NULL, &l->id);
	if (rc == 0)
		rc = mark_add(m, l->path, &l->id);
	if (rc < 0)
		goto fail;
	held_add(&l->id); /* (before anyone can see it as the lock) */
	if (linkat(m->sd->fd, tmp, AT_FDCWD, l->path, 0) < 0) {
		rc = -errno;
		mark_del(m, l->path);
		held_del(&l->id);
		if (rc != -EXDEV && rc != -EPERM)
			goto fail;
		/* No hard link across these directories: the lock is made
		 * in place, and recorded as soon as it exists. */
		(void)statedir_unlink(m->sd, tmp);
		close(l->fd);
		l->fd = open(l->path,
			     O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			     0666);
		if (l->fd < 0)
			return -errno;
		rc = identify(l->fd, NULL, &l->id);
		if (rc == 0)
			rc = mark_add(m, l->path, &l->id);
		if (rc < 0) {
			unlink(l->path);
			close(l->fd);
			l->fd = -1;
			return rc;
		}
		held_add(&l->id);
		return 0;
	}
	(void)statedir_unlink(m->sd, tmp);
	return 0;
fail:
	(void)statedir_unlink(m->sd, tmp);
	close(l->fd);
	l->fd = -1;
	return rc;
}

int gitlock_replace(struct gitlock *l, const char *name, struct gitmark *m)
{
	struct gitmark_lock id;
	int fd, rc;

	fd = openat(m->sd->fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = identify(fd, NULL, &id);
	/* Both the old and the new file are recorded until the rename is
	 * done: a crash in between leaves one of them, provably ours. */
	if (rc == 0 && m->n == GITMARK_MAX_LOCKS)
		rc = -ENOSPC;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	m->locks[m->n] = id;
	snprintf(m->locks[m->n].path, sizeof(m->locks[m->n].path), "%s",
		 l->path);
	m->n++;
	rc = mark_write(m);
	if (rc == 0)
		held_add(&id);
	if (rc == 0 && renameat(m->sd->fd, name, AT_FDCWD, l->path) < 0) {
		rc = -errno;
		held_del(&id);
	}
	if (rc < 0) {
		m->n--;
		close(fd);
		return rc;
	}
	held_del(&l->id);
	close(l->fd);
	l->fd = fd;
	l->id = id;
	return 0;
}

/* fsync the directory holding path. */
static int sync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	char *slash;
	int fd, rc = 0;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int gitlock_commit(struct gitlock *l, bool sync)
{
	if (l->fd < 0)
		return -EBADF;
	if (sync && fsync(l->fd) < 0)
		return -errno;
	if (rename(l->path, l->target) < 0)
		return -errno;
	held_del(&l->id);
	close(l->fd);
	l->fd = -1;
	return sync ? sync_dir_of(l->target) : 0;
}

/* Is the file at path the one with this identity? */
static bool same_file(const char *path, const struct gitmark_lock *id)
{
	struct gitmark_lock now = {0};

	return identify(-1, path, &now) == 0 && same_id(&now, id);
}

void gitlock_release(struct gitlock *l)
{
	if (l->fd < 0)
		return;
	if (same_file(l->path, &l->id))
		unlink(l->path);
	held_del(&l->id);
	close(l->fd);
	l->fd = -1;
}

static void list_add(char *list, size_t n, const char *path)
{
	size_t len = strlen(list);

	snprintf(list + len, n - len, "%s%s", len ? ", " : "", path);
}

/* Parse a marker's text into m's lock list, pid and start time. */
static int mark_parse(struct gitmark *m, char *text, long *pid,
		      unsigned long long *start)
{
	char *line, *save = NULL;

	if (strncmp(text, MARKER_MAGIC, strlen(MARKER_MAGIC)) != 0)
		return -EINVAL;
	m->n = 0;
	*pid = 0;
	*start = 0;
	for (line = strtok_r(text + strlen(MARKER_MAGIC), "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long dev, ino;
		long long bsec;
		unsigned bnsec;
		int off = 0;

		if (sscanf(line, "pid %ld", pid) == 1)
			continue;
		if (sscanf(line, "start %llu", start) == 1)
			continue;
		if (sscanf(line, "lock %llu %llu %lld %u %n", &dev, &ino, &bsec,
			   &bnsec, &off) == 4 &&
		    off > 0 && m->n < GITMARK_MAX_LOCKS) {
			m->locks[m->n].dev = dev;
			m->locks[m->n].ino = ino;
			m->locks[m->n].btime_sec = bsec;
			m->locks[m->n].btime_nsec = bnsec;
			snprintf(m->locks[m->n].path,
				 sizeof(m->locks[m->n].path), "%s", line + off);
			m->n++;
		}
	}
	return *pid > 0 ? 0 : -EINVAL;
}

int gitlock_clear_stale(struct gitmark *m, const char *const *extra,
			struct gitlock_stale *out)
{
	char text[GITMARK_MAX_LOCKS * (PATH_MAX + 64) + 128];
	unsigned long long start;
	struct gitmark old;
	ssize_t r;
	long pid;
	int fd, rc;

	memset(out, 0, sizeof(*out));
	fd = statedir_open(m->sd, MARKER, O_RDONLY, 0, NULL, 0);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	out->marker = true;
	r = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (r < 0)
		return -errno;
	text[r] = '\0';
	old = *m;
	rc = mark_parse(&old, text, &pid, &start);
	if (rc == 0 && gitlock_proc_start(pid) == start &&
	    !(pid == m->pid && start == m->start)) {
		/* Its writer still runs: nothing of it is stale. */
		out->owner_alive = true;
		return 0;
	}
	for (size_t i = 0; rc == 0 && i < old.n; i++) {
		const char *path = old.locks[i].path;
		bool seen = false, ours = false;
		struct gitmark_lock now = {0};

		/* A path may be recorded twice (gitlock_replace): any of
		 * its records proves it ours. */
		for (size_t j = 0; j < i; j++)
			seen |= strcmp(old.locks[j].path, path) == 0;
		if (seen || identify(-1, path, &now) < 0)
			continue; /* done, or gone (committed or removed) */
		for (size_t j = i; j < old.n; j++)
			ours |= strcmp(old.locks[j].path, path) == 0 &&
				same_id(&now, &old.locks[j]);
		if (ours && unlink(path) == 0) {
			list_add(out->removed, sizeof(out->removed), path);
			out->n_removed++;
		} else {
			list_add(out->kept, sizeof(out->kept), path);
			out->n_kept++;
		}
	}
	for (size_t k = 0; k < GITMARK_MAX_LOCKS; k++) {
		char tmp[32];

		new_name(k, tmp, sizeof(tmp));
		(void)statedir_unlink(m->sd, tmp);
	}
	for (size_t i = 0; extra && extra[i]; i++)
		(void)statedir_unlink(m->sd, extra[i]);
	(void)statedir_unlink(m->sd, MARKER_NEW);
	(void)statedir_unlink(m->sd, MARKER);
	return 0;
}

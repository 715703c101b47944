/*
 * The .vector-memory directory (see vmdir.h). Every path below the
 * working-tree root is reached with *at() calls on directory fds opened
 * with O_NOFOLLOW, so a symlink planted anywhere under .vector-memory is
 * never followed: it is refused (the directory itself, an x-NNN entry on
 * write) or quarantined (on load).
 *
 * Durability of a write: temp file, fdatasync, rename over the target,
 * then one fsync per touched directory (and of the parent of any directory
 * we created).
 */
#include "vmdir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errmsg.h"
#include "fdio.h"
#include "markers.h"

#define FILE_MAX       (1024 * 1024)
#define TMP_PREFIX     VMDIR_TMP_PREFIX
#define METADATA       "metadata.json"
#define METADATA_TEXT  "{\n  \"format\": 1\n}\n"
#define SEED_INDEX     "index.json" /* the seed library's optional index */
#define MOVE_DEPTH_MAX 8

static atomic_ulong tmp_counter;

#define NS 1000000000LL

/*
 * vmdir_apply asks whether git took the tree before every file: its locks
 * and state files (a few lstat calls, about what writing a file costs)
 * each time; its processes (a scan of /proc: 0.5 ms for 65 processes,
 * more with more) after PROC_FILES files, or sooner once PROC_GAP_NS and
 * three times the last scan's duration have passed since it (so scans
 * take at most a quarter of a slow pass). A scan before every file made
 * a pass of 10 files take 10 ms instead of 1, and one of 200 files (16
 * writers) spend most of its time in /proc.
 */
#define PROC_FILES  64
#define PROC_GAP_NS 2000000LL

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * NS + t.tv_nsec;
}

static int64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * NS + t.tv_nsec;
}

/* When vmdir_apply next looks thoroughly (see PROC_FILES). */
struct pace {
	int64_t next_ns; /* not before */
	size_t files;	 /* files written since the last thorough look */
};

/* Has git taken the tree? Thoroughly when the pace allows it. */
static bool interrupted(const struct vmdir *d, struct pace *p)
{
	int64_t t0 = mono_ns(), t1, gap;
	bool thorough = p->files >= PROC_FILES || t0 >= p->next_ns, r;

	if (!thorough) {
		p->files++;
		return d->interrupt(d->interrupt_ctx, false);
	}
	r = d->interrupt(d->interrupt_ctx, true);
	t1 = mono_ns();
	gap = 3 * (t1 - t0);
	p->next_ns = t1 + (gap > PROC_GAP_NS ? gap : PROC_GAP_NS);
	p->files = 0;
	return r;
}

/*
 * From this many files on, vmdir_apply writes them all and then flushes
 * the file system once (syncfs) instead of syncing each file and
 * directory: per-file fsyncs cannot keep up with the write-ahead log's
 * group commit.
 */
#define VMDIR_BULK_MIN 8
/* x directories a bulk pass keeps open at once: 1,000,000 decisions over
 * 50,000 directories would pass the limit on open files. */
#define XDIR_OPEN_MAX 256

struct load {
	struct vmdir *d;
	struct vmdir_load_report *rep;
	struct vmdir_scan_hooks h;
	const struct unmerged_set *unmerged; /* files in a git conflict */
	struct vmdir_quarantine qc; /* where bad files go, and the report */
	char *buf; /* FILE_MAX + 1 bytes, reused for every file */
	char *errmsg;
	size_t errn;
};

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* The file type of a directory entry without following symlinks. */
static int entry_type(int dfd, const struct dirent *de)
{
	struct stat st;

	switch (de->d_type) {
	case DT_REG:
		return S_IFREG;
	case DT_DIR:
		return S_IFDIR;
	case DT_LNK:
		return S_IFLNK;
	case DT_UNKNOWN:
		break;
	default:
		return S_IFIFO; /* anything else is just "not ours" */
	}
	if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return (int)(st.st_mode & S_IFMT);
}

/* Parse an "x-NNN" directory name exactly as coord_path writes it. */
static int xdir_parse(const char *name, int max_x, int *x)
{
	struct coord c;

	if (coord_from_path(name, "y-1-z-1.json", max_x, &c) < 0)
		return -1;
	*x = c.x;
	return 0;
}

/*
 * Read a regular file of expect bytes (as fstat said; at most FILE_MAX)
 * into buf, -EFBIG if it turns out longer than FILE_MAX. Stopping at the
 * expected size saves the read that would only see EOF: our files are
 * replaced by rename, never rewritten in place.
 */
static int read_file(int fd, char *buf, size_t expect, size_t *len)
{
	size_t got = 0;
	ssize_t r;

	while (got <= FILE_MAX && (got < expect || expect == 0)) {
		r = read(fd, buf + got, FILE_MAX + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got > FILE_MAX)
		return -EFBIG;
	*len = got;
	return 0;
}

/* Copy a regular file sfd -> new file name in qfd. */
static int copy_file(int sdfd, const char *name, int qfd, const char *qname)
{
	char buf[65536];
	int in = -1, out = -1, ret;
	ssize_t r;

	in = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (in < 0) {
		ret = -errno;
		goto out;
	}
	out = openat(qfd, qname,
		     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		     0600);
	if (out < 0) {
		ret = -errno;
		goto out;
	}
	for (;;) {
		r = read(in, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			goto out;
		}
		if (r == 0)
			break;
		ret = fdio_write(out, buf, (size_t)r);
		if (ret < 0)
			goto out;
	}
	if (fsync(out) < 0) {
		ret = -errno;
		goto out;
	}
	ret = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0) {
		close(out);
		if (ret < 0)
			unlinkat(qfd, qname, 0);
	}
	return ret;
}

/*
 * Move entry name of sdfd to qname in qfd across file systems: files are
 * copied, symlinks recreated, directories moved entry by entry; other
 * kinds (fifos, sockets) carry no data and are only removed.
 */
static int move_across(int sdfd, const char *name, int qfd, const char *qname,
		       int depth)
{
	struct stat st;
	DIR *dir = NULL;
	struct dirent *de;
	char target[4096];
	int sub = -1, qsub = -1, ret;
	ssize_t n;

	if (depth > MOVE_DEPTH_MAX)
		return -ELOOP;
	if (fstatat(sdfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (S_ISREG(st.st_mode)) {
		ret = copy_file(sdfd, name, qfd, qname);
		if (ret == 0 && unlinkat(sdfd, name, 0) < 0)
			ret = -errno;
		return ret;
	}
	if (S_ISLNK(st.st_mode)) {
		n = readlinkat(sdfd, name, target, sizeof(target) - 1);
		if (n < 0)
			return -errno;
		target[n] = '\0';
		if (symlinkat(target, qfd, qname) < 0)
			return -errno;
		if (unlinkat(sdfd, name, 0) < 0)
			return -errno;
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return unlinkat(sdfd, name, 0) < 0 ? -errno : 0;

	if (mkdirat(qfd, qname, 0700) < 0)
		return -errno;
	qsub = openat(qfd, qname,
		      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (qsub < 0) {
		ret = -errno;
		goto out;
	}
	sub = openat(sdfd, name,
		     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0) {
		ret = -errno;
		goto out;
	}
	dir = fdopendir(sub);
	if (!dir) {
		ret = -errno;
		goto out;
	}
	sub = -1;
	while ((errno = 0, de = readdir(dir))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		ret = move_across(dirfd(dir), de->d_name, qsub, de->d_name,
				  depth + 1);
		if (ret < 0)
			goto out;
	}
	if (errno) {
		ret = -errno;
		goto out;
	}
	if (fsync(qsub) < 0 || unlinkat(sdfd, name, AT_REMOVEDIR) < 0) {
		ret = -errno;
		goto out;
	}
	ret = 0;
out:
	if (dir)
		closedir(dir);
	if (sub >= 0)
		close(sub);
	if (qsub >= 0)
		close(qsub);
	return ret;
}

static void copy_trunc(char *dst, size_t n, const char *src)
{
	size_t len = strnlen(src, n - 1);

	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* Add a report entry; the strings are truncated to their fields. */
static int report_add(struct vmdir_load_report *rep, const char *path,
		      const char *moved_to, const char *reason)
{
	struct vmdir_quarantined *q;
	size_t cap = rep->n_quarantined;

	/* capacity is the next power of two at or above the count */
	if ((cap & (cap - 1)) == 0) {
		q = realloc(rep->quarantined, sizeof(*q) * (cap ? cap * 2 : 4));
		if (!q)
			return -ENOMEM;
		rep->quarantined = q;
	}
	q = &rep->quarantined[rep->n_quarantined++];
	copy_trunc(q->path, sizeof(q->path), path);
	copy_trunc(q->moved_to, sizeof(q->moved_to), moved_to);
	copy_trunc(q->reason, sizeof(q->reason), reason);
	return 0;
}

/* Report a decision file in a git conflict (neither loaded nor moved). */
static int conflicted(struct load *l, const struct coord *c, const char *reason)
{
	struct vmdir_load_report *rep = l->rep;
	struct vmdir_conflicted *e;
	size_t cap = rep->n_conflicted;

	if ((cap & (cap - 1)) == 0) {
		e = realloc(rep->conflicted, sizeof(*e) * (cap ? cap * 2 : 4));
		if (!e) {
			errmsg_set(l->errmsg, l->errn, "out of memory");
			return -ENOMEM;
		}
		rep->conflicted = e;
	}
	e = &rep->conflicted[rep->n_conflicted++];
	e->coord = *c;
	copy_trunc(e->reason, sizeof(e->reason), reason);
	return 0;
}

void vmdir_quarantine_init(struct vmdir_quarantine *qc,
			   const struct statedir *state,
			   struct vmdir_load_report *rep, char *errmsg,
			   size_t errn)
{
	memset(qc, 0, sizeof(*qc));
	qc->state = state;
	qc->q.fd = -1;
	qc->now = time(NULL);
	qc->rep = rep;
	qc->errmsg = errmsg;
	qc->errn = errn;
}

void vmdir_quarantine_done(struct vmdir_quarantine *qc)
{
	statedir_done(&qc->q);
}

/* Open quarantine/ on first use. */
static int quarantine_open(struct vmdir_quarantine *qc, const char *rel)
{
	if (!qc->state) {
		errmsg_set(qc->errmsg, qc->errn,
			   "cannot quarantine %s: no state directory", rel);
		return -EINVAL;
	}
	if (qc->q.path)
		return 0;
	return statedir_sub(qc->state, VMDIR_QUARANTINE, true, &qc->q,
			    qc->errmsg, qc->errn);
}

/* The quarantine name of rel (its '/' made '_'), try-th variant. */
static void quarantine_name(const struct vmdir_quarantine *qc, const char *rel,
			    int tries, char *qname, size_t n)
{
	char flat[NAME_MAX + 1];

	snprintf(flat, sizeof(flat), "%s", rel);
	for (size_t i = 0; flat[i]; i++)
		if (flat[i] == '/')
			flat[i] = '_';
	if (tries == 0)
		snprintf(qname, n, "%lld-%.200s", (long long)qc->now, flat);
	else
		snprintf(qname, n, "%lld-%.200s-%d", (long long)qc->now, flat,
			 tries);
}

/* Sync quarantine/ and report what went there. */
static int quarantine_report(struct vmdir_quarantine *qc, const char *path,
			     const char *qname, const char *reason)
{
	char moved[4096];
	int ret;

	if (fsync(qc->q.fd) < 0) {
		ret = -errno;
		errmsg_set(qc->errmsg, qc->errn,
			   "cannot sync after quarantining %s: %s", path,
			   strerror(-ret));
		return ret;
	}
	snprintf(moved, sizeof(moved), "%s/%s", qc->q.path, qname);
	ret = report_add(qc->rep, path, moved, reason);
	if (ret < 0)
		errmsg_set(qc->errmsg, qc->errn, "out of memory");
	return ret;
}

/* May rel be quarantined now? 0: yes; 1: no, it is only counted (a
 * probe); -EAGAIN: no, git has the working tree (errmsg). */
static int quarantine_may(struct vmdir_quarantine *qc, const char *rel)
{
	if (qc->mode == VMDIR_PROBE) {
		qc->rep->unusable++;
		return 1;
	}
	if (qc->mode == VMDIR_RELOAD && qc->interrupt &&
	    qc->interrupt(qc->interrupt_ctx, true)) {
		errmsg_set(qc->errmsg, qc->errn,
			   "git took the working tree before %s/%s could be "
			   "quarantined: nothing moved",
			   VMDIR_DIRNAME, rel);
		return -EAGAIN;
	}
	return 0;
}

int vmdir_quarantine_move(struct vmdir_quarantine *qc, int sdfd,
			  const char *name, const char *rel, const char *reason)
{
	char qname[NAME_MAX + 1], path[4096];
	int ret, tries;

	ret = quarantine_may(qc, rel);
	if (ret != 0)
		return ret < 0 ? ret : 0;

	ret = quarantine_open(qc, rel);
	if (ret < 0)
		return ret;
	snprintf(path, sizeof(path), VMDIR_DIRNAME "/%s", rel);
	for (tries = 0;; tries++) {
		quarantine_name(qc, rel, tries, qname, sizeof(qname));
		ret = renameat2(sdfd, name, qc->q.fd, qname, RENAME_NOREPLACE);
		if (ret < 0 && errno == EINVAL) {
			/* no RENAME_NOREPLACE here: check, then rename */
			if (faccessat(qc->q.fd, qname, F_OK,
				      AT_SYMLINK_NOFOLLOW) == 0)
				errno = EEXIST;
			else
				ret = renameat(sdfd, name, qc->q.fd, qname);
		}
		if (ret == 0)
			break;
		if (errno == EEXIST && tries < 1000)
			continue;
		if (errno == EXDEV) {
			ret = move_across(sdfd, name, qc->q.fd, qname, 0);
			if (ret == -EEXIST && tries < 1000)
				continue;
			if (ret == 0)
				break;
		} else {
			ret = -errno;
		}
		errmsg_set(qc->errmsg, qc->errn,
			   "cannot quarantine %s (%s): %s", path, reason,
			   strerror(-ret));
		return ret;
	}
	if (fsync(sdfd) < 0) {
		ret = -errno;
		errmsg_set(qc->errmsg, qc->errn,
			   "cannot sync after quarantining %s: %s", path,
			   strerror(-ret));
		return ret;
	}
	return quarantine_report(qc, path, qname, reason);
}

int vmdir_quarantine_write(struct vmdir_quarantine *qc, const char *rel,
			   const void *data, size_t len, const char *reason)
{
	char qname[NAME_MAX + 1], path[4096];
	int fd = -1, ret, tries;

	ret = quarantine_may(qc, rel);
	if (ret != 0)
		return ret;
	ret = quarantine_open(qc, rel);
	if (ret < 0)
		return ret;
	snprintf(path, sizeof(path), VMDIR_DIRNAME "/%s", rel);
	for (tries = 0;; tries++) {
		quarantine_name(qc, rel, tries, qname, sizeof(qname));
		fd = openat(qc->q.fd, qname,
			    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
				    O_CLOEXEC,
			    0600);
		if (fd >= 0 || errno != EEXIST || tries >= 1000)
			break;
	}
	if (fd < 0) {
		ret = -errno;
		errmsg_set(qc->errmsg, qc->errn,
			   "cannot quarantine lines of %s: %s", path,
			   strerror(-ret));
		return ret;
	}
	ret = fdio_write(fd, data, len);
	if (ret == 0 && fsync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret < 0) {
		unlinkat(qc->q.fd, qname, 0);
		errmsg_set(qc->errmsg, qc->errn,
			   "cannot quarantine lines of %s: %s", path,
			   strerror(-ret));
		return ret;
	}
	return quarantine_report(qc, path, qname, reason);
}

/*
 * Move entry name (rel is its path below .vector-memory) of directory sdfd
 * into the quarantine directory under a fresh name, and report it.
 */
static int quarantine(struct load *l, int sdfd, const char *name,
		      const char *rel, const char *reason)
{
	return vmdir_quarantine_move(&l->qc, sdfd, name, rel, reason);
}

/* A temporary name this process made (write_durable's pattern). */
static bool temp_is_ours(const char *name)
{
	char mine[32];

	snprintf(mine, sizeof(mine), TMP_PREFIX "%ld-", (long)getpid());
	return has_prefix(name, mine);
}

static int remove_temp(struct load *l, int dfd, const char *name,
		       const char *rel, bool *dirty)
{
	/* A rescan may run while the file writer is at work: a temporary
	 * file of this process is a write in progress (a failed write
	 * removes its own), not a leftover of a crash. */
	if (l->qc.mode != VMDIR_LOAD && temp_is_ours(name))
		return 0;
	if (l->qc.mode == VMDIR_PROBE)
		return 0; /* a look changes nothing; the next reload may */
	if (unlinkat(dfd, name, 0) < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == EISDIR || errno == EPERM)
			return quarantine(l, dfd, name, rel,
					  "temporary name on a directory");
		errmsg_set(l->errmsg, l->errn, "cannot remove %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(errno));
		return -errno;
	}
	l->rep->temp_removed++;
	*dirty = true;
	return 0;
}

/*
 * Load one candidate decision file. Returns 0 when it was loaded or
 * quarantined, negative on a hard error.
 */
static int load_file(struct load *l, int xfd, const char *xname,
		     const char *name, const char *rel)
{
	char reason[VMEM_ERRMSG_LEN], msg[VMEM_ERRMSG_LEN];
	struct decision dec;
	struct coord c;
	struct stat st;
	size_t len = 0;
	int fd = -1, ret;

	memset(&dec, 0, sizeof(dec));
	if (coord_from_path(xname, name, l->d->max_x, &c) < 0) {
		snprintf(reason, sizeof(reason), "not a decision file name");
		goto bad;
	}
	/* Unmerged: a conflict whatever the file holds (even one git left
	 * as it was, which a known stamp would skip). */
	if (unmerged_find(l->unmerged, &c))
		return conflicted(
			l, &c,
			unmerged_describe(
				unmerged_find(l->unmerged, &c)->stages));
	if (l->h.known && fstatat(xfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISREG(st.st_mode)) {
		struct vmdir_stamp stamp = vmdir_stamp_of(&st);

		if (l->h.known(l->h.ctx, &c, &stamp))
			return 0;
	}
	fd = openat(xfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ELOOP) {
			snprintf(reason, sizeof(reason), "symbolic link");
			goto bad;
		}
		if (errno == ENOENT)
			return 0; /* gone meanwhile */
		ret = -errno;
		errmsg_set(l->errmsg, l->errn, "cannot open %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		errmsg_set(l->errmsg, l->errn, "cannot stat %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-ret));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(reason, sizeof(reason), "not a regular file");
		goto bad;
	}
	if (st.st_size > FILE_MAX) {
		snprintf(reason, sizeof(reason), "larger than %d bytes",
			 FILE_MAX);
		goto bad;
	}
	ret = read_file(fd, l->buf, (size_t)st.st_size, &len);
	if (ret == -EFBIG) {
		snprintf(reason, sizeof(reason), "larger than %d bytes",
			 FILE_MAX);
		goto bad;
	}
	if (ret < 0) {
		errmsg_set(l->errmsg, l->errn, "cannot read %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-ret));
		goto out;
	}
	close(fd);
	fd = -1;
	if (len == 0) {
		snprintf(reason, sizeof(reason), "empty file");
		goto bad;
	}
	msg[0] = '\0';
	if (markers_found(l->buf, len))
		return conflicted(l, &c, "conflict markers");
	if (decision_parse(l->buf, len, l->d->max_x, &dec, msg) != 0) {
		snprintf(reason, sizeof(reason), "%s",
			 msg[0] ? msg : "invalid decision");
		decision_done(&dec);
		goto bad;
	}
	if (coord_cmp(&dec.coord, &c) != 0) {
		snprintf(reason, sizeof(reason),
			 "coordinate (%d, %d, %d) does not match its path",
			 dec.coord.x, dec.coord.y, dec.coord.z);
		decision_done(&dec);
		goto bad;
	}
	if (l->h.loaded) {
		struct vmdir_stamp stamp = vmdir_stamp_of(&st);

		ret = l->h.loaded(l->h.ctx, &dec, &stamp);
	} else {
		decision_done(&dec);
		ret = 0;
	}
	if (ret < 0) {
		decision_done(&dec);
		errmsg_set(l->errmsg, l->errn, "loading %s/%s stopped (%d)",
			   VMDIR_DIRNAME, rel, ret);
		goto out;
	}
	l->rep->loaded++;
	ret = 0;
	goto out;
bad:
	if (fd >= 0) {
		close(fd);
		fd = -1;
	}
	ret = quarantine(l, xfd, name, rel, reason);
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

static int not_dots(const struct dirent *de)
{
	return strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
}

/*
 * The entries of a directory, sorted in version order ("x-999" before
 * "x-1000") so decisions load in (x, y, z) order and the search index
 * only ever appends; unsorted (the directory's own order) for a probe,
 * which loads nothing (sorting 50,000 x-NNN names by version took a tenth
 * of a probe after a git status at 1,000,000 decisions). Returns the
 * count (*list: free each entry and the array) or -errno.
 */
static int list_dir(int dfd, struct dirent ***list, bool sorted)
{
	int n = scandirat(dfd, ".", list, not_dots,
			  sorted ? versionsort : NULL);

	return n < 0 ? -errno : n;
}

static void list_free(struct dirent **list, int n)
{
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

/*
 * Has directory x (name in vfd) kept its stamp since its caller last
 * looked, so a probe need not open it? Its stamp goes to the dir hook
 * either way, taken before any entry is listed (a file created after it
 * changes it).
 */
static bool xdir_known(struct load *l, int vfd, const char *name, int x)
{
	struct stat st;
	struct vmdir_stamp stamp;
	int64_t before = now_ns() - l->d->settled_ns;
	bool known;

	if (!l->h.dir || fstatat(vfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISDIR(st.st_mode))
		return false; /* opened: what fails will fail there */
	stamp = vmdir_stamp_of(&st);
	known = l->h.dir(l->h.ctx, x, &stamp,
			 stamp.mtime_ns < before && stamp.ctime_ns < before);
	/* git's unmerged files are reported whatever their directory */
	return known && l->qc.mode == VMDIR_PROBE &&
	       !(l->unmerged && l->unmerged->n);
}

/* Load the x-NNN directory whose fd is xfd (consumed). */
static int load_xdir(struct load *l, int xfd, const char *xname)
{
	struct dirent **list = NULL, *de;
	char rel[NAME_MAX * 2 + 2];
	bool dirty = false;
	int n, type, ret = 0;

	n = list_dir(xfd, &list, true);
	if (n < 0) {
		ret = n;
		errmsg_set(l->errmsg, l->errn, "cannot read %s/%s: %s",
			   VMDIR_DIRNAME, xname, strerror(-ret));
		close(xfd);
		return ret;
	}
	for (int i = 0; i < n; i++) {
		de = list[i];
		snprintf(rel, sizeof(rel), "%s/%s", xname, de->d_name);
		type = entry_type(xfd, de);
		if (type == -ENOENT)
			continue;
		if (type < 0) {
			ret = type;
			errmsg_set(l->errmsg, l->errn, "cannot stat %s/%s: %s",
				   VMDIR_DIRNAME, rel, strerror(-ret));
			goto out;
		}
		if (has_prefix(de->d_name, TMP_PREFIX))
			ret = remove_temp(l, xfd, de->d_name, rel, &dirty);
		else if (type == S_IFREG)
			ret = load_file(l, xfd, xname, de->d_name, rel);
		else
			ret = quarantine(l, xfd, de->d_name, rel,
					 type == S_IFLNK ? "symbolic link"
					 : type == S_IFDIR
						 ? "unexpected directory"
						 : "not a regular file");
		if (ret < 0)
			goto out;
	}
	if (dirty && fsync(xfd) < 0) {
		ret = -errno;
		errmsg_set(l->errmsg, l->errn, "cannot sync %s/%s: %s",
			   VMDIR_DIRNAME, xname, strerror(-ret));
		goto out;
	}
	ret = 0;
out:
	list_free(list, n);
	close(xfd);
	return ret;
}

/* One entry at the top of .vector-memory. */
static int load_top_entry(struct load *l, int vfd, const struct dirent *de,
			  bool *dirty)
{
	const char *name = de->d_name;
	int type, x, xfd;

	type = entry_type(vfd, de);
	if (type == -ENOENT)
		return 0;
	if (type < 0) {
		errmsg_set(l->errmsg, l->errn, "cannot stat %s/%s: %s",
			   VMDIR_DIRNAME, name, strerror(-type));
		return type;
	}
	if (!strcmp(name, METADATA) || !strcmp(name, SEED_INDEX)) {
		/* Ours, or a seed library's index of its files: never read,
		 * kept as it is. */
		if (type == S_IFREG)
			return 0;
		return quarantine(
			l, vfd, name, name,
			!strcmp(name, METADATA)
				? "metadata.json is not a regular file"
				: "index.json is not a regular file");
	}
	if (!strcmp(name, VMDIR_EXPERIENCES))
		return 0; /* kinds/experience's, which checks it itself */
	if (has_prefix(name, TMP_PREFIX))
		return remove_temp(l, vfd, name, name, dirty);
	if (type == S_IFLNK)
		return quarantine(l, vfd, name, name, "symbolic link");
	if (type != S_IFDIR)
		return quarantine(l, vfd, name, name, "unexpected file");
	if (xdir_parse(name, l->d->max_x, &x) < 0) {
		/* Valid decisions of a larger configured space are refused,
		 * never quarantined: a smaller max_x must not move data. */
		if (xdir_parse(name, INT_MAX, &x) == 0) {
			errmsg_set(l->errmsg, l->errn,
				   "%s/%s holds decisions of issue %d, beyond "
				   "max_x %d: start with max_x %d or more",
				   VMDIR_DIRNAME, name, x, l->d->max_x, x);
			return -ERANGE;
		}
		return quarantine(l, vfd, name, name,
				  "not an issue directory x-NNN");
	}
	/* git's unmerged files are reported whatever their directory */
	if (l->h.clean && l->qc.mode == VMDIR_PROBE &&
	    !(l->unmerged && l->unmerged->n) &&
	    l->h.clean(l->h.ctx, vfd, x, name))
		return 0;
	if (xdir_known(l, vfd, name, x))
		return 0;
	xfd = openat(vfd, name,
		     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (xfd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == ELOOP || errno == ENOTDIR)
			return quarantine(l, vfd, name, name,
					  "not a directory");
		errmsg_set(l->errmsg, l->errn, "cannot open %s/%s: %s",
			   VMDIR_DIRNAME, name, strerror(errno));
		return -errno;
	}
	return load_xdir(l, xfd, name);
}

/* Open root/.vector-memory without following a symlink there. */
static int open_vmdir(int rootfd, char *errmsg, size_t errn)
{
	struct stat st;
	int fd, err;

	fd = openat(rootfd, VMDIR_DIRNAME,
		    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	err = errno;
	if (err == ELOOP || err == ENOTDIR) {
		if (fstatat(rootfd, VMDIR_DIRNAME, &st, AT_SYMLINK_NOFOLLOW) ==
			    0 &&
		    S_ISLNK(st.st_mode))
			err = ELOOP;
		else
			err = ENOTDIR;
		errmsg_set(errmsg, errn, "%s is %s; refusing to use it",
			   VMDIR_DIRNAME,
			   err == ELOOP ? "a symbolic link"
					: "not a directory");
	} else if (err != ENOENT) {
		errmsg_set(errmsg, errn, "cannot open %s: %s", VMDIR_DIRNAME,
			   strerror(err));
	}
	return -err;
}

int vmdir_init(struct vmdir *d, const char *root, const struct statedir *state,
	       int max_x)
{
	memset(d, 0, sizeof(*d));
	d->root = strdup(root);
	d->state = state;
	d->max_x = max_x;
	d->started_ns = now_ns();
	d->settled_ns = VMDIR_SETTLED_NS;
	if (!d->root) {
		vmdir_done(d);
		return -ENOMEM;
	}
	return 0;
}

void vmdir_done(struct vmdir *d)
{
	if (!d)
		return;
	free(d->root);
	d->root = NULL;
}

void vmdir_load_report_done(struct vmdir_load_report *rep)
{
	if (!rep)
		return;
	free(rep->quarantined);
	free(rep->conflicted);
	memset(rep, 0, sizeof(*rep));
}

int vmdir_load_report_merge(struct vmdir_load_report *all,
			    const struct vmdir_load_report *rep)
{
	struct vmdir_quarantined *q;
	struct vmdir_conflicted *c;
	size_t cap;

	/* Both arrays grown first (as report_add and conflicted() grow
	 * them: a power of two at or above), so a failure changes nothing
	 * but their room. */
	if (rep->n_quarantined) {
		for (cap = 1; cap < all->n_quarantined + rep->n_quarantined;)
			cap *= 2;
		q = realloc(all->quarantined, cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		all->quarantined = q;
	}
	if (rep->n_conflicted) {
		for (cap = 4; cap < all->n_conflicted + rep->n_conflicted;)
			cap *= 2;
		c = realloc(all->conflicted, cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		all->conflicted = c;
	}
	if (rep->n_quarantined)
		memcpy(all->quarantined + all->n_quarantined, rep->quarantined,
		       rep->n_quarantined * sizeof(*q));
	if (rep->n_conflicted)
		memcpy(all->conflicted + all->n_conflicted, rep->conflicted,
		       rep->n_conflicted * sizeof(*c));
	all->n_quarantined += rep->n_quarantined;
	all->n_conflicted += rep->n_conflicted;
	all->loaded += rep->loaded;
	all->temp_removed += rep->temp_removed;
	return 0;
}

struct vmdir_stamp vmdir_stamp_of(const struct stat *st)
{
	struct vmdir_stamp s = {
		.ino = (uint64_t)st->st_ino,
		.size = (uint64_t)st->st_size,
		.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 +
			    st->st_mtim.tv_nsec,
		.ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 +
			    st->st_ctim.tv_nsec,
	};

	return s;
}

int vmdir_load(struct vmdir *d, vmdir_load_fn cb, void *ctx,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn)
{
	const struct vmdir_scan_hooks h = {.loaded = cb, .ctx = ctx};

	return vmdir_scan(d, VMDIR_LOAD, &h, NULL, rep, errmsg, errn);
}

int vmdir_scan(struct vmdir *d, enum vmdir_scan_mode mode,
	       const struct vmdir_scan_hooks *hooks,
	       const struct unmerged_set *unmerged,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn)
{
	struct load l = {
		.d = d,
		.rep = rep,
		.h = *hooks,
		.unmerged = unmerged,
		.errmsg = errmsg,
		.errn = errn,
	};
	struct vmdir_load_report local;
	struct dirent **list = NULL;
	bool dirty = false;
	int rootfd = -1, vfd = -1, n = 0, ret;

	if (!rep)
		rep = l.rep = &local;
	memset(rep, 0, sizeof(*rep));
	vmdir_quarantine_init(&l.qc, d->state, rep, errmsg, errn);
	l.qc.mode = mode;
	l.qc.interrupt = d->interrupt;
	l.qc.interrupt_ctx = d->interrupt_ctx;
	rootfd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "cannot open %s: %s", d->root,
			   strerror(-ret));
		goto out;
	}
	vfd = open_vmdir(rootfd, errmsg, errn);
	if (vfd == -ENOENT) {
		ret = 0;
		goto out;
	}
	if (vfd < 0) {
		ret = vfd;
		goto out;
	}
	l.buf = malloc(FILE_MAX + 1);
	if (!l.buf) {
		ret = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	n = list_dir(vfd, &list, mode != VMDIR_PROBE);
	if (n < 0) {
		ret = n;
		n = 0;
		errmsg_set(errmsg, errn, "cannot read %s: %s", VMDIR_DIRNAME,
			   strerror(-ret));
		goto out;
	}
	for (int i = 0; i < n; i++) {
		ret = load_top_entry(&l, vfd, list[i], &dirty);
		if (ret < 0)
			goto out;
		if (d->progress)
			d->progress(d->progress_ctx, (uint64_t)i + 1,
				    (uint64_t)n, rep->loaded);
	}
	if (dirty && fsync(vfd) < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "cannot sync %s: %s", VMDIR_DIRNAME,
			   strerror(-ret));
		goto out;
	}
	ret = 0;
out:
	list_free(list, n);
	if (vfd >= 0)
		close(vfd);
	if (rootfd >= 0)
		close(rootfd);
	vmdir_quarantine_done(&l.qc);
	free(l.buf);
	if (rep == &local)
		vmdir_load_report_done(&local);
	return ret;
}

/* An x-NNN directory touched by vmdir_apply. */
struct xdir {
	int x;
	int fd; /* -1: absent (nothing to delete there) */
	bool dirty;
	bool removed; /* a file of it was deleted: it may be empty now */
};

struct apply {
	int rootfd, vfd;
	bool root_dirty, v_dirty;
	struct xdir *xs;
	size_t nx, capx;
	char *buf; /* FILE_MAX + 1 bytes, for guarded ops (on first use) */
	int *rm_x; /* x directories with deletions, closed since */
	size_t n_rm, cap_rm;
	mode_t dir_mode; /* of the directories created (0: the umask's) */
};

/* A bulk pass, which syncs no directory by itself: close the x
 * directories it holds (opened again when needed), keeping which had
 * deletions for the end. 0 or -ENOMEM. */
static int xdirs_close(struct apply *a)
{
	for (size_t i = 0; i < a->nx; i++) {
		if (a->xs[i].removed) {
			if (a->n_rm == a->cap_rm) {
				size_t ncap = a->cap_rm ? a->cap_rm * 2 : 64;
				int *r = realloc(a->rm_x, ncap * sizeof(*r));

				if (!r)
					return -ENOMEM;
				a->rm_x = r;
				a->cap_rm = ncap;
			}
			a->rm_x[a->n_rm++] = a->xs[i].x;
		}
		if (a->xs[i].fd >= 0)
			close(a->xs[i].fd);
	}
	a->nx = 0;
	return 0;
}

static bool stamp_same(const struct vmdir_stamp *a, const struct vmdir_stamp *b)
{
	return a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

/* Does the decision in a->buf (len bytes) at op's coordinate bear an
 * earlier timestamp than op's text? */
static bool first_writer(struct apply *a, size_t len, const struct vmdir_op *op)
{
	struct decision there, ours;
	char msg[VMEM_ERRMSG_LEN];
	bool earlier = false;

	if (decision_parse(a->buf, len, INT_MAX, &there, msg) != 0)
		return false;
	if (decision_parse(op->text, op->len, INT_MAX, &ours, msg) == 0) {
		earlier = coord_cmp(&there.coord, &op->coord) == 0 &&
			  strcmp(there.timestamp, ours.timestamp) < 0;
		decision_done(&ours);
	}
	decision_done(&there);
	return earlier;
}

/*
 * A guarded op's check, when the file name in dfd was written by someone
 * else (its stamp is not op->expect): 1 when it holds conflict markers,
 * so it must be left alone; 2 when it is a write-once decision with an
 * earlier timestamp than op's (the first writer keeps it); 0 to go on;
 * -errno.
 */
static int guard_conflict(struct apply *a, int dfd, const char *name,
			  const struct vmdir_op *op)
{
	struct vmdir_stamp now;
	struct stat st;
	size_t len = 0;
	int fd, ret;

	if (!op->guard || dfd < 0)
		return 0;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	now = vmdir_stamp_of(&st);
	if (!S_ISREG(st.st_mode) || stamp_same(&now, &op->expect) ||
	    st.st_size > FILE_MAX)
		return 0;
	if (!a->buf) {
		a->buf = malloc(FILE_MAX + 1);
		if (!a->buf)
			return -ENOMEM;
	}
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	ret = read_file(fd, a->buf, (size_t)st.st_size, &len);
	close(fd);
	if (ret == -EFBIG)
		return 0;
	if (ret < 0)
		return ret;
	if (markers_found(a->buf, len))
		return 1;
	return op->coord.z == 1 && op->text && first_writer(a, len, op) ? 2 : 0;
}

int vmdir_open_subdir(int dfd, const char *name, bool create, mode_t mode,
		      bool *made)
{
	struct stat st;
	int fd;

	*made = false;
	for (int i = 0; i < 2; i++) {
		fd = openat(dfd, name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && *made && mode && fchmod(fd, mode) < 0) {
			int err = -errno;

			close(fd);
			return err;
		}
		if (fd >= 0)
			return fd;
		if (errno == ELOOP || errno == ENOTDIR) {
			if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				return -ELOOP;
			return -ENOTDIR;
		}
		if (errno != ENOENT || !create || i)
			return -errno;
		if (mkdirat(dfd, name, 0777) < 0 && errno != EEXIST)
			return -errno;
		*made = true;
	}
	return -ENOENT;
}

/*
 * Racy git. git trusts an index entry's stat data only while the file's
 * mtime is older than the index file's own (in whole seconds in Debian's
 * git): a file written in the second its index entry is written is
 * "racily clean", and the user's next git status reads it again and
 * rewrites the whole index. So a file we write (fd, about to replace
 * name in dfd) is dated one second before the kernel stamped its write:
 * the commit that follows leaves it clean for git. No later change can
 * hide behind that date (docs/architecture.md, "Racy git"): any later
 * write, ours or anyone's, is dated at its own time, after ours; and only
 * a path that nobody changed in the last two seconds is back-dated (the
 * ctime of the file it replaces, which nobody can set; when there is
 * none, our own last write or removal of it, changed_ns, and our start),
 * so no two versions of a path share a back-dated second. A path found
 * gone that the caller believed present (VMDIR_CHANGED_UNKNOWN) was
 * removed at a time nobody knows: not back-dated.
 */
static void backdate(int fd, int dfd, const char *name, int64_t changed_ns,
		     int64_t started_ns)
{
	struct timespec ts[2];
	struct stat st, old;
	int64_t recent;

	if (fstat(fd, &st) < 0)
		return;
	recent = (int64_t)st.st_mtim.tv_sec - 1;
	if (fstatat(dfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0) {
		if ((int64_t)old.st_ctim.tv_sec >= recent)
			return;
	} else if (errno != ENOENT || changed_ns / NS >= recent ||
		   started_ns / NS >= recent) {
		return;
	}
	ts[0].tv_sec = 0;
	ts[0].tv_nsec = UTIME_OMIT;
	ts[1].tv_sec = st.st_mtim.tv_sec - 1;
	ts[1].tv_nsec = st.st_mtim.tv_nsec;
	/* A date that cannot be set only costs git a second look. */
	(void)futimens(fd, ts);
}

/*
 * The stamp of what write_durable put at a path: the file after the
 * rename (which changes its ctime), when it is still ours, the same size
 * and mtime as written; else someone wrote it in place since the rename,
 * and the stamp is ours as it was before the rename, which matches no
 * later stat: the next look reads the file and judges it. (A stamp taken
 * by the path alone would take their change for ours.)
 */
static struct vmdir_stamp written_stamp(int fd, const struct stat *before)
{
	struct stat after;

	if (fstat(fd, &after) == 0 && after.st_size == before->st_size &&
	    after.st_mtim.tv_sec == before->st_mtim.tv_sec &&
	    after.st_mtim.tv_nsec == before->st_mtim.tv_nsec)
		return vmdir_stamp_of(&after);
	return vmdir_stamp_of(before);
}

/* Write text to name in dfd through a unique temp file (of mode, unless
 * 0), back-dated (see backdate); with sync, the data is on disk before
 * the rename makes it visible. */
static int write_durable(int dfd, const char *name, const char *tag,
			 const char *text, size_t len, bool sync, mode_t mode,
			 int64_t changed_ns, int64_t started_ns,
			 struct vmdir_stamp *stamp, char *tmp, size_t tmpn)
{
	struct stat st;
	int fd = -1, ret = 0;

	snprintf(tmp, tmpn, TMP_PREFIX "%ld-%lu-%s", (long)getpid(),
		 atomic_fetch_add(&tmp_counter, 1) + 1, tag);
	fd = openat(dfd, tmp,
		    O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0)
		return -errno;
	if (mode && fchmod(fd, mode) < 0)
		ret = -errno;
	if (ret == 0)
		ret = fdio_write(fd, text, len);
	if (ret == 0)
		backdate(fd, dfd, name, changed_ns, started_ns);
	if (ret == 0 && sync && fdatasync(fd) < 0)
		ret = -errno;
	if (ret == 0 && fstat(fd, &st) < 0)
		ret = -errno;
	if (ret == 0 && renameat(dfd, tmp, dfd, name) < 0)
		ret = -errno;
	if (ret == 0 && stamp)
		*stamp = written_stamp(fd, &st);
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret < 0) {
		unlinkat(dfd, tmp, 0);
		return ret;
	}
	return 0;
}

/* The x directory named name (as coord_path wrote it), opened once. */
static struct xdir *xdir_get(struct apply *a, int x, const char *name,
			     bool create, int *err)
{
	struct xdir *xs;
	bool made;
	int fd;

	for (size_t i = 0; i < a->nx; i++) {
		if (a->xs[i].x == x) {
			if (a->xs[i].fd >= 0 || !create)
				return &a->xs[i];
			/* known absent, now needed: create below */
			a->nx--;
			a->xs[i] = a->xs[a->nx];
			break;
		}
	}
	if (a->nx == a->capx) {
		xs = realloc(a->xs, sizeof(*xs) * (a->capx ? a->capx * 2 : 8));
		if (!xs) {
			*err = -ENOMEM;
			return NULL;
		}
		a->xs = xs;
		a->capx = a->capx ? a->capx * 2 : 8;
	}
	fd = vmdir_open_subdir(a->vfd, name, create, a->dir_mode, &made);
	if (fd == -ENOENT && !create)
		fd = -1;
	else if (fd < 0) {
		*err = fd;
		return NULL;
	}
	if (made)
		a->v_dirty = true;
	xs = &a->xs[a->nx++];
	xs->x = x;
	xs->fd = fd;
	xs->dirty = false;
	xs->removed = false;
	return xs;
}

int vmdir_apply(struct vmdir *d, struct vmdir_op *ops, size_t n, bool sync,
		char *errmsg, size_t errn)
{
	struct apply a = {.rootfd = -1, .vfd = -1, .dir_mode = d->dir_mode};
	bool bulk = n >= VMDIR_BULK_MIN || !sync;
	char rel[64], xname[64], tag[48], tmp[128];
	const char *file;
	struct xdir *xd;
	struct pace pace;
	struct stat st;
	bool made;
	size_t i;
	int ret;

	a.rootfd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a.rootfd < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "cannot open %s: %s", d->root,
			   strerror(-ret));
		goto out;
	}
	ret = vmdir_open_subdir(a.rootfd, VMDIR_DIRNAME, true, d->dir_mode,
				&made);
	if (ret < 0) {
		errmsg_set(errmsg, errn, "cannot open %s: %s%s", VMDIR_DIRNAME,
			   strerror(-ret),
			   ret == -ELOOP ? " (symbolic link refused)" : "");
		goto out;
	}
	a.vfd = ret;
	a.root_dirty = made;
	if (fstatat(a.vfd, METADATA, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT) {
			ret = -errno;
			errmsg_set(errmsg, errn, "cannot stat %s/%s: %s",
				   VMDIR_DIRNAME, METADATA, strerror(-ret));
			goto out;
		}
		ret = write_durable(a.vfd, METADATA, METADATA, METADATA_TEXT,
				    strlen(METADATA_TEXT), !bulk, d->file_mode,
				    0, d->started_ns, NULL, tmp, sizeof(tmp));
		if (ret < 0) {
			errmsg_set(errmsg, errn, "cannot write %s/%s: %s",
				   VMDIR_DIRNAME, METADATA, strerror(-ret));
			goto out;
		}
		a.v_dirty = true;
	}
	for (i = 0; i < n; i++)
		ops[i].interrupted = false;
	pace.next_ns = mono_ns() + PROC_GAP_NS; /* the caller just looked */
	pace.files = 0;
	for (i = 0; i < n; i++) {
		/* Has git taken the tree meanwhile? */
		if (d->interrupt && interrupted(d, &pace)) {
			for (size_t k = i; k < n; k++)
				ops[k].interrupted = true;
			break;
		}
		if (!coord_valid(&ops[i].coord, d->max_x) ||
		    coord_path(&ops[i].coord, rel, sizeof(rel)) < 0) {
			ret = -EINVAL;
			errmsg_set(errmsg, errn, "bad coordinate (%d, %d, %d)",
				   ops[i].coord.x, ops[i].coord.y,
				   ops[i].coord.z);
			goto out;
		}
		file = strchr(rel, '/');
		if (!file) {
			ret = -EINVAL;
			errmsg_set(errmsg, errn, "bad decision path %s", rel);
			goto out;
		}
		snprintf(xname, sizeof(xname), "%.*s", (int)(file - rel), rel);
		file++;
		if (bulk && a.nx >= XDIR_OPEN_MAX &&
		    (ret = xdirs_close(&a)) < 0) {
			errmsg_set(errmsg, errn, "out of memory");
			goto out;
		}
		xd = xdir_get(&a, ops[i].coord.x, xname, ops[i].text != NULL,
			      &ret);
		if (!xd) {
			errmsg_set(errmsg, errn, "cannot open %s/%s: %s%s",
				   VMDIR_DIRNAME, xname, strerror(-ret),
				   ret == -ELOOP ? " (symbolic link refused)"
						 : "");
			goto out;
		}
		ops[i].skipped = ops[i].superseded = false;
		ret = guard_conflict(&a, xd->fd, file, &ops[i]);
		if (ret < 0) {
			errmsg_set(errmsg, errn, "cannot check %s/%s: %s",
				   VMDIR_DIRNAME, rel, strerror(-ret));
			goto out;
		}
		if (ret == 1) {
			ops[i].skipped = true;
			continue;
		}
		if (ret == 2) {
			ops[i].superseded = true;
			continue;
		}
		if (!ops[i].text) {
			/* The removal's time: the path is not back-dated
			 * for two seconds (backdate). */
			memset(&ops[i].stamp, 0, sizeof(ops[i].stamp));
			ops[i].stamp.ctime_ns = now_ns();
			if (xd->fd < 0)
				continue;
			if (unlinkat(xd->fd, file, 0) < 0) {
				if (errno == ENOENT)
					continue;
				ret = -errno;
				errmsg_set(errmsg, errn,
					   "cannot remove %s/%s: %s",
					   VMDIR_DIRNAME, rel, strerror(-ret));
				goto out;
			}
			xd->dirty = true;
			xd->removed = true;
			continue;
		}
		snprintf(tag, sizeof(tag), "%s", file);
		ret = write_durable(xd->fd, file, tag, ops[i].text, ops[i].len,
				    !bulk, d->file_mode, ops[i].changed_ns,
				    d->started_ns, &ops[i].stamp, tmp,
				    sizeof(tmp));
		if (ret < 0) {
			errmsg_set(errmsg, errn, "cannot write %s/%s: %s",
				   VMDIR_DIRNAME, rel, strerror(-ret));
			goto out;
		}
		xd->dirty = true;
	}
	/* A directory its deletions left empty goes too, as git keeps no
	 * empty directory (one still holding a file is refused: kept). */
	for (i = 0; i < a.nx; i++) {
		char name[24];

		if (!a.xs[i].removed)
			continue;
		snprintf(name, sizeof(name), "x-%03d", a.xs[i].x);
		if (unlinkat(a.vfd, name, AT_REMOVEDIR) == 0) {
			a.xs[i].dirty = false;
			a.v_dirty = true;
		}
	}
	for (i = 0; i < a.n_rm; i++) {
		char name[24];

		snprintf(name, sizeof(name), "x-%03d", a.rm_x[i]);
		if (unlinkat(a.vfd, name, AT_REMOVEDIR) == 0)
			a.v_dirty = true;
	}
	if (bulk) {
		/* One flush of the file system instead of one per file. */
		if (sync && syncfs(a.vfd) < 0) {
			ret = -errno;
			errmsg_set(errmsg, errn, "cannot sync %s: %s",
				   VMDIR_DIRNAME, strerror(-ret));
			goto out;
		}
		ret = 0;
		goto out;
	}
	/* each touched directory once, parents after the x directories */
	for (i = 0; i < a.nx; i++) {
		if (a.xs[i].dirty && fsync(a.xs[i].fd) < 0) {
			ret = -errno;
			errmsg_set(errmsg, errn, "cannot sync %s/x-%03d: %s",
				   VMDIR_DIRNAME, a.xs[i].x, strerror(-ret));
			goto out;
		}
	}
	if (a.v_dirty && fsync(a.vfd) < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "cannot sync %s: %s", VMDIR_DIRNAME,
			   strerror(-ret));
		goto out;
	}
	if (a.root_dirty && fsync(a.rootfd) < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "cannot sync %s: %s", d->root,
			   strerror(-ret));
		goto out;
	}
	ret = 0;
out:
	for (i = 0; i < a.nx; i++)
		if (a.xs[i].fd >= 0)
			close(a.xs[i].fd);
	free(a.xs);
	free(a.buf);
	free(a.rm_x);
	if (a.vfd >= 0)
		close(a.vfd);
	if (a.rootfd >= 0)
		close(a.rootfd);
	return ret;
}

int vmdir_sync(struct vmdir *d, char *errmsg, size_t errn)
{
	int rootfd, vfd, ret = 0;

	rootfd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "cannot open %s: %s", d->root,
			   strerror(-ret));
		return ret;
	}
	vfd = openat(rootfd, VMDIR_DIRNAME,
		     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0) {
		ret = errno == ENOENT ? 0 : -errno;
		if (ret < 0)
			errmsg_set(errmsg, errn, "cannot open %s: %s",
				   VMDIR_DIRNAME, strerror(-ret));
	} else {
		if (syncfs(vfd) < 0) {
			ret = -errno;
			errmsg_set(errmsg, errn, "cannot sync %s: %s",
				   VMDIR_DIRNAME, strerror(-ret));
		}
		close(vfd);
	}
	close(rootfd);
	return ret;
}

/*
 * The experiences' shard files (see shards.h).
 */
#include "shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"
#include "fdio.h"
#include "protocol/fnv.h"

static atomic_ulong tmp_counter;

int shards_init(struct shards *s, const char *root,
		const struct statedir *state)
{
	memset(s, 0, sizeof(*s));
	s->state = state;
	s->root = strdup(root);
	return s->root ? 0 : -ENOMEM;
}

void shards_done(struct shards *s)
{
	free(s->root);
	s->root = NULL;
}

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* The working tree, .vector-memory and experiences/ (made when create;
 * -ENOENT otherwise when absent); *made: a directory was created. */
static int open_tree(const struct shards *s, bool create, int fds[3],
		     bool *made, char *errmsg, size_t errn)
{
	static const char *const names[] = {VMDIR_DIRNAME, VMDIR_EXPERIENCES};
	bool m;

	*made = false;
	fds[0] = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fds[1] = fds[2] = -1;
	if (fds[0] < 0) {
		errmsg_set(errmsg, errn, "cannot open %s: %s", s->root,
			   strerror(errno));
		return -errno;
	}
	for (int i = 0; i < 2; i++) {
		fds[i + 1] = vmdir_open_subdir(fds[i], names[i], create,
					       s->dir_mode, &m);
		if (fds[i + 1] < 0) {
			int rc = fds[i + 1];

			if (rc != -ENOENT || create)
				errmsg_set(errmsg, errn,
					   "cannot open %s%s%s: %s%s",
					   VMDIR_DIRNAME, i ? "/" : "",
					   i ? VMDIR_EXPERIENCES : "",
					   strerror(-rc),
					   rc == -ELOOP ? " (symbolic link "
							  "refused)"
							: "");
			return rc;
		}
		*made = *made || m;
	}
	return 0;
}

static void close_tree(int fds[3])
{
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* pread(2) all of n bytes at off. 0 or -errno (-EIO when short). */
static int pread_all(int fd, char *buf, size_t n, off_t off)
{
	while (n > 0) {
		ssize_t r = pread(fd, buf, n, off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		buf += r;
		off += r;
		n -= (size_t)r;
	}
	return 0;
}

/* ---- appending ---- */

/* Does any line of data begin with tail[0..n)? */
static bool begins_a_line(const char *data, size_t len, const char *tail,
			  size_t n)
{
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(data + i, '\n', len - i);
		size_t end = nl ? (size_t)(nl - data) : len;

		if (end - i >= n && memcmp(data + i, tail, n) == 0)
			return true;
		i = end + 1;
	}
	return false;
}

/*
 * A last line without its newline: cut it off (*size shrinks) when a
 * line of data begins with it, else *newline: the append must start
 * with one.
 */
static int fix_tail(int fd, off_t *size, const char *data, size_t len,
		    bool *newline)
{
	off_t from;
	size_t n, tail;
	char last, *buf, *nl;
	int rc;

	*newline = false;
	if (*size == 0)
		return 0;
	rc = pread_all(fd, &last, 1, *size - 1);
	if (rc < 0 || last == '\n')
		return rc;
	from = *size > (off_t)EXP_LINE_MAX + 1 ? *size - (off_t)EXP_LINE_MAX - 1
					       : 0;
	n = (size_t)(*size - from);
	buf = malloc(n);
	if (!buf)
		return -ENOMEM;
	rc = pread_all(fd, buf, n, from);
	if (rc < 0)
		goto out;
	nl = memrchr(buf, '\n', n);
	if (!nl && from > 0) {
		*newline = true; /* longer than any line of ours */
		goto out;
	}
	tail = nl ? n - (size_t)(nl + 1 - buf) : n;
	if (begins_a_line(data, len, buf + n - tail, tail)) {
		if (ftruncate(fd, *size - (off_t)tail) < 0) {
			rc = -errno;
			goto out;
		}
		*size -= (off_t)tail;
	} else {
		*newline = true;
	}
out:
	free(buf);
	return rc;
}

struct line_ref {
	uint64_t hash;
	size_t off, len;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct line_ref *x = a, *y = b;

	return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/*
 * The lines of data that the shard's first size bytes do not hold, into
 * *out (malloc'd, *out_len).
 */
static int dedupe(int fd, off_t size, const char *data, size_t len, char **out,
		  size_t *out_len)
{
	char *file = NULL, *keep = malloc(len ? len : 1);
	struct line_ref *refs = NULL;
	size_t n_refs = 0, k = 0;
	int rc = -ENOMEM;

	if (!keep)
		goto out;
	if (size > 0) {
		size_t lines = 1;

		file = malloc((size_t)size);
		if (!file)
			goto out;
		rc = pread_all(fd, file, (size_t)size, 0);
		if (rc < 0)
			goto out;
		rc = -ENOMEM;
		for (size_t i = 0; i < (size_t)size; i++)
			lines += file[i] == '\n';
		refs = malloc(lines * sizeof(*refs));
		if (!refs)
			goto out;
		for (size_t i = 0; i < (size_t)size;) {
			char *nl = memchr(file + i, '\n', (size_t)size - i);
			size_t end = nl ? (size_t)(nl - file) : (size_t)size;

			refs[n_refs++] = (struct line_ref){
				fnv1a64(file + i, end - i), i, end - i};
			i = end + 1;
		}
		qsort(refs, n_refs, sizeof(*refs), ref_cmp);
	}
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(data + i, '\n', len - i);
		size_t end = nl ? (size_t)(nl - data) + 1 : len, l = end - i;
		struct line_ref key = {fnv1a64(data + i, l - (nl != NULL)), 0,
				       0};
		struct line_ref *r = n_refs ? bsearch(&key, refs, n_refs,
						      sizeof(*refs), ref_cmp)
					    : NULL;
		bool found = false;

		/* bsearch lands on one of the equal hashes: look both ways. */
		while (r && r > refs && r[-1].hash == key.hash)
			r--;
		for (; r && r < refs + n_refs && r->hash == key.hash; r++)
			if (r->len == l - (nl != NULL) &&
			    memcmp(file + r->off, data + i, r->len) == 0)
				found = true;
		if (!found) {
			memcpy(keep + k, data + i, l);
			k += l;
		}
		i = end;
	}
	*out = keep;
	*out_len = k;
	keep = NULL;
	rc = 0;
out:
	free(keep);
	free(file);
	free(refs);
	return rc;
}

/* One shard's append; 0 or -errno with errmsg. */
static int append_one(const struct shards *s, int efd, struct shard_append *op,
		      bool dedup, bool sync, char *errmsg, size_t errn)
{
	char seg[EXP_SEGMENT_MAX + 1];
	const char *slash = strchr(op->path, '/');
	const char *data = op->data;
	char *kept = NULL;
	size_t len = op->len;
	bool made_dir = false, made_file = false, newline;
	struct stat st;
	off_t size;
	int segfd = -1, fd = -1, rc;

	if (!slash || (size_t)(slash - op->path) > EXP_SEGMENT_MAX ||
	    !exp_shard_name_valid(slash + 1)) {
		errmsg_set(errmsg, errn, "bad shard path %s", op->path);
		return -EINVAL;
	}
	snprintf(seg, sizeof(seg), "%.*s", (int)(slash - op->path), op->path);
	segfd = vmdir_open_subdir(efd, seg, true, s->dir_mode, &made_dir);
	if (segfd < 0) {
		rc = segfd;
		errmsg_set(errmsg, errn, "cannot open %s/%s/%s: %s%s",
			   VMDIR_DIRNAME, VMDIR_EXPERIENCES, seg, strerror(-rc),
			   rc == -ELOOP ? " (symbolic link refused)" : "");
		return rc;
	}
	fd = openat(segfd, slash + 1,
		    O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(segfd, slash + 1,
			    O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW |
				    O_CLOEXEC,
			    0666);
		made_file = fd >= 0;
		if (made_file && s->file_mode && fchmod(fd, s->file_mode) < 0) {
			rc = -errno;
			goto fail;
		}
	}
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		goto fail;
	}
	op->before = made_file ? (struct vmdir_stamp){0} : vmdir_stamp_of(&st);
	size = st.st_size;
	rc = fix_tail(fd, &size, data, len, &newline);
	if (rc == 0 && dedup) {
		rc = dedupe(fd, size, data, len, &kept, &len);
		data = kept;
	}
	if (rc < 0)
		goto fail;
	if (newline && len > 0)
		rc = fdio_write(fd, "\n", 1);
	if (rc == 0)
		rc = fdio_write(fd, data, len);
	if (rc == 0 && sync && fdatasync(fd) < 0)
		rc = -errno;
	if (rc == 0 && sync && (made_file || made_dir) && fsync(segfd) < 0)
		rc = -errno;
	if (rc == 0 && sync && made_dir && fsync(efd) < 0)
		rc = -errno;
	if (rc < 0) {
		/* Nothing of this append stays; the caller tries again. */
		if (ftruncate(fd, size) < 0) {
			/* Its next append cuts the torn line (fix_tail). */
		}
		goto fail;
	}
	/* Another writer's bytes beside ours would pass for ours. */
	if (fstat(fd, &st) == 0 &&
	    st.st_size == size + (off_t)(newline && len > 0) + (off_t)len)
		op->stamp = vmdir_stamp_of(&st);
	else
		op->stamp = (struct vmdir_stamp){0};
	close(fd);
	close(segfd);
	free(kept);
	return 0;
fail:
	errmsg_set(errmsg, errn, "cannot append to %s/%s/%s: %s", VMDIR_DIRNAME,
		   VMDIR_EXPERIENCES, op->path,
		   rc == -EINVAL ? "not a regular file" : strerror(-rc));
	if (fd >= 0)
		close(fd);
	close(segfd);
	free(kept);
	return rc;
}

int shards_append(struct shards *s, struct shard_append *ops, size_t n,
		  bool dedupe, bool sync, char *errmsg, size_t errn)
{
	char msg[512];
	int fds[3], rc, first = 0;
	bool made;

	rc = open_tree(s, true, fds, &made, errmsg, errn);
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			ops[i].rc = rc;
		close_tree(fds);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		ops[i].rc = append_one(s, fds[2], &ops[i], dedupe, sync, msg,
				       sizeof(msg));
		if (ops[i].rc < 0 && first == 0) {
			first = ops[i].rc;
			errmsg_set(errmsg, errn, "%s", msg);
		}
	}
	/* Directories made along the way, down from the tree. */
	if (first == 0 && sync && made &&
	    (fsync(fds[1]) < 0 || fsync(fds[0]) < 0)) {
		first = -errno;
		errmsg_set(errmsg, errn, "cannot sync %s: %s", VMDIR_DIRNAME,
			   strerror(errno));
	}
	close_tree(fds);
	return first;
}

int shards_sync(struct shards *s, char *errmsg, size_t errn)
{
	int fds[3], rc;
	bool made;

	rc = open_tree(s, false, fds, &made, errmsg, errn);
	if (rc == 0 && syncfs(fds[2]) < 0) {
		rc = -errno;
		errmsg_set(errmsg, errn, "cannot sync %s/%s: %s", VMDIR_DIRNAME,
			   VMDIR_EXPERIENCES, strerror(-rc));
	}
	close_tree(fds);
	return rc == -ENOENT ? 0 : rc;
}

/* ---- scanning ---- */

struct scan {
	struct shards *s;
	const struct shards_visit *v;
	struct vmdir_quarantine qc;
	char *errmsg;
	size_t errn;
};

static int not_dots(const struct dirent *de)
{
	return strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
}

/* The entries of a directory, sorted. The count (free with list_free)
 * or -errno. */
static int list_sorted(int dfd, struct dirent ***list)
{
	int n = scandirat(dfd, ".", list, not_dots, alphasort);

	return n < 0 ? -errno : n;
}

static void list_free(struct dirent **list, int n)
{
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static int entry_type(int dfd, const char *name)
{
	struct stat st;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return (int)(st.st_mode & S_IFMT);
}

/* A temporary file of a rewrite that a crash left: removed. */
static int remove_temp(struct scan *sc, int dfd, const char *name,
		       const char *rel)
{
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) {
		if (errno == EISDIR || errno == EPERM)
			return vmdir_quarantine_move(&sc->qc, dfd, name, rel,
						     "temporary name on a "
						     "directory");
		errmsg_set(sc->errmsg, sc->errn, "cannot remove %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(errno));
		return -errno;
	}
	sc->qc.rep->temp_removed++;
	return 0;
}

/* Read a whole regular file (size bytes as fstat said). */
static int read_whole(int fd, size_t size, char **out)
{
	char *buf = malloc(size + 1);
	int rc;

	if (!buf)
		return -ENOMEM;
	rc = size ? pread_all(fd, buf, size, 0) : 0;
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[size] = '\0';
	*out = buf;
	return 0;
}

/* Replace the shard by its good lines: a temporary file renamed over it,
 * synced. The new stamp into *st. */
static int rewrite(struct scan *sc, int segfd, const char *name,
		   const char *rel, const char *text, size_t len,
		   struct vmdir_stamp *stamp)
{
	char tmp[NAME_MAX + 1];
	struct stat st;
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), VMDIR_TMP_PREFIX "%ld-%lu-%.100s",
		 (long)getpid(), atomic_fetch_add(&tmp_counter, 1) + 1, name);
	fd = openat(segfd, tmp,
		    O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0)
		rc = -errno;
	if (rc == 0 && sc->s->file_mode && fchmod(fd, sc->s->file_mode) < 0)
		rc = -errno;
	if (rc == 0)
		rc = fdio_write(fd, text, len);
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(segfd, tmp, segfd, name) < 0)
		rc = -errno;
	if (rc == 0 && fsync(segfd) < 0)
		rc = -errno;
	if (rc == 0 && fstatat(segfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		*stamp = vmdir_stamp_of(&st);
	if (rc < 0) {
		if (fd >= 0)
			unlinkat(segfd, tmp, 0);
		errmsg_set(sc->errmsg, sc->errn,
			   "cannot take bad lines out of %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-rc));
	}
	return rc;
}

/* What a shard's bad lines become: the lines, and the good ones. */
struct sorting {
	char *bad, *good;
	size_t n_bad_bytes, n_good_bytes;
	size_t n_bad;
	char first[VMEM_ERRMSG_LEN + 32];
};

static bool blank_line(const char *p, size_t n)
{
	return n == 0 || (n == 1 && p[0] == '\r');
}

/* Read one shard and hand its good lines over; quarantine bad ones. */
static int read_shard(struct scan *sc, int segfd, const char *name,
		      const char *path, const char *rel)
{
	char *text = NULL, msg[VMEM_ERRMSG_LEN];
	struct sorting so = {0};
	struct vmdir_stamp stamp;
	struct stat st;
	size_t lineno = 0;
	int fd, rc;

	fd = openat(segfd, name,
		    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* gone meanwhile */
		if (errno == ELOOP)
			return vmdir_quarantine_move(&sc->qc, segfd, name, rel,
						     "symbolic link");
		rc = -errno;
		errmsg_set(sc->errmsg, sc->errn, "cannot open %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		close(fd);
		errmsg_set(sc->errmsg, sc->errn, "cannot stat %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size > SHARDS_FILE_MAX) {
		close(fd);
		return vmdir_quarantine_move(&sc->qc, segfd, name, rel,
					     S_ISREG(st.st_mode)
						     ? "shard larger than 1 GiB"
						     : "not a regular file");
	}
	stamp = vmdir_stamp_of(&st);
	rc = read_whole(fd, (size_t)st.st_size, &text);
	close(fd);
	if (rc < 0) {
		errmsg_set(sc->errmsg, sc->errn, "cannot read %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-rc));
		return rc;
	}
	so.bad = malloc((size_t)st.st_size + 1);
	so.good = malloc((size_t)st.st_size + 1);
	if (!so.bad || !so.good) {
		rc = -ENOMEM;
		errmsg_set(sc->errmsg, sc->errn, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < (size_t)st.st_size;) {
		char *nl = memchr(text + i, '\n', (size_t)st.st_size - i);
		size_t end = nl ? (size_t)(nl - text) : (size_t)st.st_size;
		size_t n = end - i;
		struct exp_line l;
		int prc;

		lineno++;
		if (blank_line(text + i, n)) {
			i = end + 1;
			continue;
		}
		prc = exp_parse_line(text + i, n, &l, msg);
		if (prc == 0) {
			memcpy(so.good + so.n_good_bytes, text + i, n);
			so.n_good_bytes += n;
			so.good[so.n_good_bytes++] = '\n';
			rc = sc->v->line(sc->v->ctx, &l, text + i, n);
			if (rc < 0) {
				exp_line_done(&l);
				errmsg_set(sc->errmsg, sc->errn,
					   "loading %s/%s stopped (%s)",
					   VMDIR_DIRNAME, rel, strerror(-rc));
				goto out;
			}
		} else {
			exp_line_done(&l);
			if (so.n_bad++ == 0)
				snprintf(so.first, sizeof(so.first),
					 "line %zu: %s", lineno, msg);
			memcpy(so.bad + so.n_bad_bytes, text + i, n);
			so.n_bad_bytes += n;
			so.bad[so.n_bad_bytes++] = '\n';
		}
		i = end + 1;
	}
	if (so.n_bad) {
		char reason[VMEM_ERRMSG_LEN];

		snprintf(reason, sizeof(reason),
			 "%zu line%s taken out (the shard's other lines "
			 "stay): %.80s",
			 so.n_bad, so.n_bad == 1 ? "" : "s", so.first);
		rc = vmdir_quarantine_write(&sc->qc, rel, so.bad,
					    so.n_bad_bytes, reason);
		if (rc == 0)
			rc = rewrite(sc, segfd, name, rel, so.good,
				     so.n_good_bytes, &stamp);
		if (rc < 0)
			goto out;
	}
	rc = sc->v->shard(sc->v->ctx, path, &stamp);
	if (rc < 0)
		errmsg_set(sc->errmsg, sc->errn, "loading %s/%s stopped (%s)",
			   VMDIR_DIRNAME, rel, strerror(-rc));
	else
		sc->qc.rep->loaded++;
out:
	free(text);
	free(so.bad);
	free(so.good);
	return rc;
}

/* One entry of a segment directory. */
static int scan_entry(struct scan *sc, int segfd, const char *seg,
		      const char *name)
{
	char path[2 * NAME_MAX + 2], rel[sizeof(path) + 16];
	struct stat st;
	int type;

	snprintf(path, sizeof(path), "%s/%s", seg, name);
	snprintf(rel, sizeof(rel), VMDIR_EXPERIENCES "/%s", path);
	if (has_prefix(name, VMDIR_TMP_PREFIX))
		return sc->v->line ? remove_temp(sc, segfd, name, rel) : 0;
	type = entry_type(segfd, name);
	if (type == -ENOENT)
		return 0;
	if (type < 0) {
		errmsg_set(sc->errmsg, sc->errn, "cannot stat %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-type));
		return type;
	}
	if (type != S_IFREG || !exp_shard_name_valid(name))
		return vmdir_quarantine_move(
			&sc->qc, segfd, name, rel,
			type == S_IFLNK	  ? "symbolic link"
			: type != S_IFREG ? "not a regular file"
					  : "not a shard name "
					    "(YYYY-MM-DD[.N].jsonl)");
	if (fstatat(segfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	{
		struct vmdir_stamp stamp = vmdir_stamp_of(&st);

		if (sc->v->known && sc->v->known(sc->v->ctx, path, &stamp))
			return 0;
		if (!sc->v->line)
			return sc->v->shard(sc->v->ctx, path, &stamp);
	}
	return read_shard(sc, segfd, name, path, rel);
}

/* One entry of experiences/: a segment directory. */
static int scan_segment(struct scan *sc, int efd, const char *seg)
{
	char agent[VMEM_AGENT_ID_MAX + 1], rel[NAME_MAX + 32];
	struct dirent **list = NULL;
	size_t alen;
	bool made;
	int segfd, n, rc = 0;

	snprintf(rel, sizeof(rel), VMDIR_EXPERIENCES "/%s", seg);
	if (has_prefix(seg, VMDIR_TMP_PREFIX))
		return sc->v->line ? remove_temp(sc, efd, seg, rel) : 0;
	if (exp_segment_decode(seg, agent, sizeof(agent), &alen) < 0)
		return vmdir_quarantine_move(&sc->qc, efd, seg, rel,
					     "not an agent's directory");
	segfd = vmdir_open_subdir(efd, seg, false, 0, &made);
	if (segfd == -ENOENT)
		return 0;
	if (segfd == -ELOOP || segfd == -ENOTDIR)
		return vmdir_quarantine_move(
			&sc->qc, efd, seg, rel,
			segfd == -ELOOP ? "symbolic link" : "not a directory");
	if (segfd < 0) {
		errmsg_set(sc->errmsg, sc->errn, "cannot open %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-segfd));
		return segfd;
	}
	n = list_sorted(segfd, &list);
	if (n < 0) {
		rc = n;
		n = 0;
		errmsg_set(sc->errmsg, sc->errn, "cannot read %s/%s: %s",
			   VMDIR_DIRNAME, rel, strerror(-rc));
	}
	for (int i = 0; i < n && rc == 0; i++)
		rc = scan_entry(sc, segfd, seg, list[i]->d_name);
	list_free(list, n);
	close(segfd);
	return rc;
}

int shards_scan(struct shards *s, const struct shards_visit *v,
		struct vmdir_load_report *rep, char *errmsg, size_t errn)
{
	struct scan sc = {s, v, {0}, errmsg, errn};
	struct dirent **list = NULL;
	int fds[3], n = 0, rc;
	bool made;

	memset(rep, 0, sizeof(*rep));
	vmdir_quarantine_init(&sc.qc, s->state, rep, errmsg, errn);
	sc.qc.mode = v->line ? v->mode : VMDIR_PROBE;
	sc.qc.interrupt = v->interrupt;
	sc.qc.interrupt_ctx = v->interrupt_ctx;
	rc = open_tree(s, false, fds, &made, errmsg, errn);
	if (rc == -ENOENT) {
		rc = 0;
		goto out;
	}
	if ((rc == -ELOOP || rc == -ENOTDIR) && fds[1] >= 0) {
		/* experiences/ itself is no directory of ours. */
		rc = vmdir_quarantine_move(
			&sc.qc, fds[1], VMDIR_EXPERIENCES, VMDIR_EXPERIENCES,
			rc == -ELOOP ? "symbolic link" : "not a directory");
		goto out;
	}
	if (rc < 0)
		goto out;
	n = list_sorted(fds[2], &list);
	if (n < 0) {
		rc = n;
		n = 0;
		errmsg_set(errmsg, errn, "cannot read %s/%s: %s", VMDIR_DIRNAME,
			   VMDIR_EXPERIENCES, strerror(-rc));
		goto out;
	}
	for (int i = 0; i < n && rc == 0; i++)
		rc = scan_segment(&sc, fds[2], list[i]->d_name);
out:
	list_free(list, n);
	close_tree(fds);
	vmdir_quarantine_done(&sc.qc);
	return rc;
}

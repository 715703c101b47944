/*
 * The write-ahead log (see wal.h for the record format and the rules).
 *
 * Invariants: w->end is the offset just past the last valid record, and
 * every byte of the file below it is a valid record; batch numbers never
 * decrease along the file, so bytes left behind by a failed append (whose
 * batch number is never reused) are rejected by replay.
 */
#include "wal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "errmsg.h"
#include "fdio.h"

#define WAL_MAGIC 0x32574d56u /* "VMW2" */
/* Records of version 0.1.0, before batches had an end mark: each counts as
 * a whole batch, so a log left by a crashed older daemon still replays. */
#define WAL_MAGIC_V1	0x4c574d56u /* "VMWL" */
#define WAL_HDR		20u
#define WAL_MAX_PAYLOAD (64u * 1024 * 1024)
/* The file grows ahead of the log by zero-filled steps of this size. */
#define WAL_GROW (1u << 20)
/* What a cut of the log's head copies at a time. */
#define WAL_COPY_CHUNK (1u << 20)
/* In the length field: the last record of its batch. */
#define WAL_LAST 0x80000000u

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Fill the header of a record whose payload is already at p + WAL_HDR. */
static void rec_header(unsigned char *p, uint64_t batch, uint32_t len,
		       bool last)
{
	put32(p, WAL_MAGIC);
	put64(p + 4, batch);
	put32(p + 12, len | (last ? WAL_LAST : 0));
	put32(p + 16, crc32c(crc32c(0, p + 4, 12), p + WAL_HDR, len));
}

/*
 * Is there a valid record at buf[off..size)? Its total length goes to *rl,
 * its batch to *batch and whether it ends the batch to *last.
 */
static bool rec_valid(const unsigned char *buf, size_t size, size_t off,
		      size_t *rl, uint64_t *batch, bool *last)
{
	uint32_t len, crc, magic;

	if (size - off < WAL_HDR)
		return false;
	magic = get32(buf + off);
	if (magic != WAL_MAGIC && magic != WAL_MAGIC_V1)
		return false;
	len = get32(buf + off + 12) & ~WAL_LAST;
	if (len > WAL_MAX_PAYLOAD || len > size - off - WAL_HDR)
		return false;
	crc = crc32c(crc32c(0, buf + off + 4, 12), buf + off + WAL_HDR, len);
	if (crc != get32(buf + off + 16))
		return false;
	*rl = WAL_HDR + len;
	*batch = get64(buf + off + 4);
	*last = magic == WAL_MAGIC_V1 || (get32(buf + off + 12) & WAL_LAST);
	return true;
}

/*
 * After the first invalid record at off: does a valid record follow that
 * proves a later batch was completed (so the bad bytes had been durable)?
 * Only the last batch written can be torn, so the valid records after a
 * torn point all belong to that one batch, numbered last or last + 1.
 */
static bool later_batch_follows(const unsigned char *buf, size_t size,
				size_t off, bool have_last, uint64_t last)
{
	bool seen = false;
	bool hdr_ok =
		size - off >= WAL_HDR && (get32(buf + off) == WAL_MAGIC ||
					  get32(buf + off) == WAL_MAGIC_V1);
	uint64_t bad_batch = hdr_ok ? get64(buf + off + 4) : 0;
	uint64_t first = 0, b;
	size_t p, rl;
	bool end;

	for (p = off + 1; p + WAL_HDR <= size;) {
		if (!rec_valid(buf, size, p, &rl, &b, &end)) {
			p++;
			continue;
		}
		if (have_last && b < last) {
			p += rl; /* stale bytes of a failed append */
			continue;
		}
		if (have_last && b >= last + 2)
			return true;
		/* The bad record's header names its batch: a complete later
		 * batch means it was synced before, so it is damage, not a
		 * torn write. */
		if (hdr_ok && b > bad_batch)
			return true;
		if (seen && b != first)
			return true;
		if (!seen) {
			seen = true;
			first = b;
		}
		p += rl;
	}
	return false;
}

/* Read the whole file into a malloc'd buffer. */
static int read_all(int fd, unsigned char **out, size_t *outlen)
{
	struct stat st;
	unsigned char *buf = NULL;
	size_t size, got = 0;
	ssize_t r;
	int ret;

	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out;
	}
	if ((uint64_t)st.st_size > SIZE_MAX - 1) {
		ret = -EFBIG;
		goto out;
	}
	size = (size_t)st.st_size;
	buf = malloc(size ? size : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	while (got < size) {
		r = pread(fd, buf + got, size - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			goto out;
		}
		if (r == 0)
			break; /* shrank under us: replay what is there */
		got += (size_t)r;
	}
	*out = buf;
	*outlen = got;
	buf = NULL;
	ret = 0;
out:
	free(buf);
	return ret;
}

void wal_init(struct wal *w)
{
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->next_batch = 1;
}

/* The name of the log's cut copy, <name>.tmp. */
static void tmp_name(const struct wal *w, char *buf, size_t n)
{
	snprintf(buf, n, "%s.tmp", w->name);
}

static bool all_zero(const unsigned char *p, size_t n)
{
	while (n--)
		if (*p++)
			return false;
	return true;
}

/* Replay the records of one complete batch, buf[from..to). */
static int replay_batch(const unsigned char *buf, size_t from, size_t to,
			const struct wal_replay *replay, struct wal_report *rep,
			char *why, size_t whyn)
{
	wal_replay_fn cb = replay ? replay->record : NULL;
	size_t rl;
	uint64_t b;
	bool end;

	while (from < to) {
		rec_valid(buf, to, from, &rl, &b, &end);
		if (cb) {
			int ret = cb(replay->ctx,
				     (const char *)buf + from + WAL_HDR,
				     rl - WAL_HDR, why, whyn);

			if (ret < 0)
				return ret;
		}
		rep->records++;
		from += rl;
	}
	return 0;
}

int wal_open(struct wal *w, const struct statedir *dir, const char *name,
	     const struct wal_replay *replay, struct wal_report *rep,
	     char *errmsg, size_t errn)
{
	wal_progress_fn progress = replay ? replay->progress : NULL;
	struct wal_report local;
	unsigned char *buf = NULL;
	size_t size = 0, off = 0, rl, batch_start = 0, reported = 0;
	uint64_t b, last = 0;
	bool have_last = false, created = false, end, cut = false;
	char tmp[WAL_NAME_MAX + 8];
	char why[256];
	int fd = -1, ret;

	wal_init(w);
	if (!rep)
		rep = &local;
	memset(rep, 0, sizeof(*rep));
	if (strlen(name) >= sizeof(w->name)) {
		errmsg_set(errmsg, errn, "%s: log name too long", name);
		return -ENAMETOOLONG;
	}
	w->dir = dir;
	snprintf(w->name, sizeof(w->name), "%s", name);
	tmp_name(w, tmp, sizeof(tmp));
	/* The log itself is intact when a cut stopped before its rename. */
	(void)statedir_unlink(dir, tmp);
	fd = statedir_open(dir, name, O_RDWR, 0, errmsg, errn);
	if (fd == -ENOENT) {
		fd = statedir_open(dir, name, O_RDWR | O_CREAT | O_EXCL, 0600,
				   errmsg, errn);
		created = fd >= 0;
		if (fd == -EEXIST)
			fd = statedir_open(dir, name, O_RDWR, 0, errmsg, errn);
	}
	if (fd < 0) {
		ret = fd;
		fd = -1;
		goto out;
	}
	if (fd == 0) {
		/* fd 0 means "never opened" to wal_close: move it. */
		ret = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		close(fd);
		fd = ret;
		if (fd < 0) {
			ret = -errno;
			errmsg_set(errmsg, errn, "cannot dup %s/%s: %s",
				   dir->path, name, strerror(-ret));
			goto out;
		}
	}
	if (created) {
		ret = statedir_sync(dir);
		if (ret < 0) {
			errmsg_set(errmsg, errn, "cannot sync %s: %s",
				   dir->path, strerror(-ret));
			goto out;
		}
	}
	ret = read_all(fd, &buf, &size);
	if (ret < 0) {
		errmsg_set(errmsg, errn, "cannot read %s/%s: %s", dir->path,
			   name, strerror(-ret));
		goto out;
	}
	if (progress && size)
		progress(replay->ctx, 0, size, 0);
	/* A batch is replayed once its last record is seen, so a batch cut
	 * short by a crash (never acknowledged) is dropped whole. */
	while (off < size) {
		if (!rec_valid(buf, size, off, &rl, &b, &end) ||
		    (have_last && b < last) ||
		    (off > batch_start && b != get64(buf + batch_start + 4)))
			break;
		off += rl;
		if (!end)
			continue;
		why[0] = '\0';
		ret = replay_batch(buf, batch_start, off, replay, rep, why,
				   sizeof(why));
		if (ret < 0) {
			errmsg_set(errmsg, errn,
				   "%s/%s: replay stopped in the batch at "
				   "offset %zu: %s",
				   dir->path, name, batch_start,
				   why[0] ? why : strerror(-ret));
			goto out;
		}
		batch_start = off;
		last = b;
		have_last = true;
		if (progress && off - reported >= WAL_PROGRESS_BYTES) {
			progress(replay->ctx, off, size, rep->records);
			reported = off;
		}
	}
	/*
	 * Past the last complete batch: the zeros the log grows into, a
	 * batch cut short by a crash (cut off), or damage in synced data if
	 * the record that stopped the replay is a valid record of a later
	 * batch inside an unfinished one, or a later complete batch follows
	 * the bad record.
	 */
	if (batch_start < size &&
	    !all_zero(buf + batch_start, size - batch_start)) {
		bool later = off < size && off > batch_start &&
			     rec_valid(buf, size, off, &rl, &b, &end) &&
			     b > get64(buf + batch_start + 4);

		if (later ||
		    (off < size &&
		     later_batch_follows(buf, size, off, have_last, last))) {
			ret = -EBADMSG;
			errmsg_set(
				errmsg, errn,
				"%s/%s: corrupt record at offset %zu followed "
				"by a later complete batch",
				dir->path, name, off);
			goto out;
		}
		if (ftruncate(fd, (off_t)batch_start) < 0 ||
		    fdatasync(fd) < 0) {
			ret = -errno;
			errmsg_set(errmsg, errn,
				   "cannot cut torn tail of %s/%s: %s",
				   dir->path, name, strerror(-ret));
			goto out;
		}
		rep->torn_bytes = size - batch_start;
		cut = true;
	}
	w->fd = fd;
	fd = -1;
	w->end = batch_start;
	w->size = cut ? batch_start : size;
	w->next_batch = have_last ? last + 1 : 1;
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

/* Zero-fill the file from from to the next WAL_GROW boundary. */
static int grow(struct wal *w, uint64_t from)
{
	static const unsigned char zeros[64 * 1024];
	uint64_t to = (from / WAL_GROW + 1) * WAL_GROW;

	for (uint64_t off = from; off < to;) {
		size_t n = to - off < sizeof(zeros) ? (size_t)(to - off)
						    : sizeof(zeros);
		int ret = fdio_pwrite(w->fd, zeros, n, off);

		if (ret < 0)
			return ret;
		off += n;
	}
	w->size = to;
	return 0;
}

int wal_append(struct wal *w, const struct iovec *payloads, size_t n)
{
	unsigned char *buf = NULL, *p;
	size_t total = 0, i;
	uint64_t batch = w->next_batch;
	int ret;

	if (w->fd < 0)
		return -EBADF;
	if (n == 0)
		return 0;
	for (i = 0; i < n; i++) {
		if (payloads[i].iov_len > WAL_MAX_PAYLOAD)
			return -EMSGSIZE;
		if (total > SIZE_MAX - WAL_HDR - payloads[i].iov_len)
			return -EMSGSIZE;
		total += WAL_HDR + payloads[i].iov_len;
	}
	buf = malloc(total);
	if (!buf)
		return -ENOMEM;
	/* A failed batch's number is never reused: see the file comment. */
	w->next_batch++;
	for (p = buf, i = 0; i < n; i++) {
		if (payloads[i].iov_len)
			memcpy(p + WAL_HDR, payloads[i].iov_base,
			       payloads[i].iov_len);
		rec_header(p, batch, (uint32_t)payloads[i].iov_len, i == n - 1);
		p += WAL_HDR + payloads[i].iov_len;
	}
	ret = fdio_pwrite(w->fd, buf, total, w->end);
	if (ret == 0 && w->end + total > w->size)
		ret = grow(w, w->end + total);
	if (ret < 0)
		goto fail;
	if (fdatasync(w->fd) < 0) {
		ret = -errno;
		goto fail;
	}
	w->end += total;
	ret = 0;
	goto out;
fail:
	if (ftruncate(w->fd, (off_t)w->end) == 0)
		(void)fdatasync(w->fd);
	w->size = w->end;
out:
	free(buf);
	return ret;
}

/* Copy len bytes of from, starting at off, to the start of to, a chunk
 * at a time (the tail of a log can be hundreds of megabytes). */
static int copy_range(int from, uint64_t off, int to, uint64_t len)
{
	unsigned char *buf = malloc(WAL_COPY_CHUNK);
	uint64_t done = 0;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	while (ret == 0 && done < len) {
		size_t want = len - done < WAL_COPY_CHUNK ? (size_t)(len - done)
							  : WAL_COPY_CHUNK;
		ssize_t n = pread(from, buf, want, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		ret = fdio_pwrite(to, buf, (size_t)n, done);
		done += (uint64_t)n;
	}
	free(buf);
	return ret;
}

int wal_cut_head(struct wal *w, uint64_t head)
{
	char tmp[WAL_NAME_MAX + 8];
	uint64_t len;
	int fd, ret;

	if (w->fd < 0)
		return -EBADF;
	if (head > w->end)
		return -EINVAL;
	if (head == 0)
		return 0;
	if (head == w->end)
		return wal_truncate(w);
	len = w->end - head;
	tmp_name(w, tmp, sizeof(tmp));
	fd = statedir_open(w->dir, tmp, O_RDWR | O_CREAT | O_TRUNC, 0600, NULL,
			   0);
	if (fd < 0)
		return fd;
	ret = copy_range(w->fd, head, fd, len);
	if (ret == 0 && fdatasync(fd) < 0)
		ret = -errno;
	if (ret == 0)
		ret = statedir_rename(w->dir, tmp, w->name);
	if (ret < 0) {
		(void)statedir_unlink(w->dir, tmp);
		close(fd);
		return ret;
	}
	/* The new log is in place but maybe not its name: keep it. */
	ret = statedir_sync(w->dir);
	close(w->fd);
	w->fd = fd;
	w->end = w->size = len;
	return ret;
}

int wal_truncate(struct wal *w)
{
	if (w->fd < 0)
		return -EBADF;
	if (ftruncate(w->fd, 0) < 0 || fdatasync(w->fd) < 0)
		return -errno;
	w->end = w->size = 0;
	return 0;
}

void wal_close(struct wal *w)
{
	if (!w)
		return;
	if (w->fd > 0)
		close(w->fd);
	w->fd = -1;
}

/*
 * The index's snapshot (see indexsnap.h). Saving streams through a
 * buffer; loading maps the file once, checks its length and checksum
 * before it trusts any field, then copies each record out of the map.
 */
#include "indexsnap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "errmsg.h"

static const char magic[8] = {'V', 'M', 'S', 'N', 'A', 'P', '1', '\n'};

/* One entry's fixed part; the JSON follows it. */
struct entry_head {
	int32_t x, y, z;
	uint32_t json_len;
	int64_t version;
	uint64_t ino, size;
	int64_t mtime_ns, ctime_ns;
};

#define HEAD_LEN    (sizeof(magic) + 2 * sizeof(uint64_t))
#define TRAILER_LEN (sizeof(uint64_t) + sizeof(uint32_t))
/* No record of ours comes near it (content is at most 100 KiB). */
#define JSON_MAX (16u << 20)

struct writer {
	int fd;
	char *buf;
	size_t len, cap;
	uint32_t crc;
};

static int w_flush(struct writer *w)
{
	size_t off = 0;

	while (off < w->len) {
		ssize_t r = write(w->fd, w->buf + off, w->len - off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		off += (size_t)r;
	}
	w->len = 0;
	return 0;
}

static int w_put(struct writer *w, const void *p, size_t n)
{
	int rc;

	w->crc = crc32c(w->crc, p, n);
	if (n > w->cap - w->len) {
		rc = w_flush(w);
		if (rc < 0)
			return rc;
		if (n > w->cap) {
			ssize_t r;
			size_t off = 0;

			while (off < n) {
				r = write(w->fd, (const char *)p + off,
					  n - off);
				if (r < 0 && errno == EINTR)
					continue;
				if (r < 0)
					return -errno;
				off += (size_t)r;
			}
			return 0;
		}
	}
	memcpy(w->buf + w->len, p, n);
	w->len += n;
	return 0;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int indexsnap_remove(const struct statedir *sd)
{
	int rc = statedir_unlink(sd, INDEXSNAP_NAME);
	int rc2 = statedir_unlink(sd, INDEXSNAP_TMP_NAME);

	if (rc == -ENOENT)
		rc = 0;
	if (rc2 == -ENOENT)
		rc2 = 0;
	return rc < 0 ? rc : rc2;
}

/* Whether slot's record can be saved: its file known and settled. */
static bool savable(const struct index *ix, const struct vmdir_stamp *st,
		    const uint8_t *dirty, size_t slot, int64_t settled)
{
	return ix->slots[slot] && (!dirty || !dirty[slot]) && st->ino &&
	       st->ctime_ns < settled && st->mtime_ns < settled;
}

long indexsnap_save(const struct statedir *sd, const struct index *ix,
		    const struct vmdir_stamp *stamps, const uint8_t *dirty,
		    char *errmsg, size_t errn)
{
	struct writer w = {.fd = -1, .cap = 1 << 20};
	int64_t made = now_ns(), settled = made - INDEXSNAP_RACY_NS;
	uint64_t count = 0;
	int rc;

	for (size_t i = 0; i < ix->n_slots; i++)
		count += savable(ix, &stamps[i], dirty, i, settled);
	w.buf = malloc(w.cap);
	if (!w.buf) {
		rc = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	rc = statedir_open(sd, INDEXSNAP_TMP_NAME, O_WRONLY | O_CREAT | O_TRUNC,
			   0600, errmsg, errn);
	if (rc < 0)
		goto out;
	w.fd = rc;
	rc = w_put(&w, magic, sizeof(magic));
	if (rc == 0)
		rc = w_put(&w, &count, sizeof(count));
	if (rc == 0)
		rc = w_put(&w, &made, sizeof(made));
	for (size_t i = 0; rc == 0 && i < ix->n_slots; i++) {
		const struct record *r = ix->slots[i];
		struct entry_head h;

		if (!savable(ix, &stamps[i], dirty, i, settled))
			continue;
		memset(&h, 0, sizeof(h));
		h.x = r->coord.x;
		h.y = r->coord.y;
		h.z = r->coord.z;
		h.json_len = (uint32_t)r->json_len;
		h.version = r->version;
		h.ino = stamps[i].ino;
		h.size = stamps[i].size;
		h.mtime_ns = stamps[i].mtime_ns;
		h.ctime_ns = stamps[i].ctime_ns;
		rc = w_put(&w, &h, sizeof(h));
		if (rc == 0)
			rc = w_put(&w, r->json, r->json_len);
	}
	if (rc == 0)
		rc = w_put(&w, &count, sizeof(count));
	if (rc == 0) {
		uint32_t crc = w.crc;

		rc = w_put(&w, &crc, sizeof(crc));
	}
	if (rc == 0)
		rc = w_flush(&w);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "cannot write %s: %s",
			   INDEXSNAP_TMP_NAME, strerror(-rc));
		goto out;
	}
	if (close(w.fd) < 0) {
		w.fd = -1;
		rc = -errno;
		errmsg_set(errmsg, errn, "cannot write %s: %s",
			   INDEXSNAP_TMP_NAME, strerror(-rc));
		goto out;
	}
	w.fd = -1;
	rc = statedir_rename(sd, INDEXSNAP_TMP_NAME, INDEXSNAP_NAME);
	if (rc < 0)
		errmsg_set(errmsg, errn, "cannot rename %s: %s",
			   INDEXSNAP_TMP_NAME, strerror(-rc));
out:
	if (w.fd >= 0)
		close(w.fd);
	free(w.buf);
	if (rc < 0) {
		indexsnap_remove(sd);
		return rc;
	}
	return (long)count;
}

static int bad(char *errmsg, size_t errn, const char *why)
{
	errmsg_set(errmsg, errn, "%s", why);
	return -EBADMSG;
}

/*
 * Parse the mapped file p (len bytes) into s; the checksum is good. An
 * entry whose file changed at or after the snapshot's own mtime (racy
 * on a file system whose timestamps are coarser than the window the save
 * left out) is dropped, as git treats an entry not older than its index.
 */
static int parse(struct indexsnap *s, const struct index *ix, const char *p,
		 size_t len, int64_t made_ns, char *errmsg, size_t errn)
{
	uint64_t count, count2;
	size_t off = HEAD_LEN, end = len - TRAILER_LEN;

	memcpy(&count, p + sizeof(magic), sizeof(count));
	memcpy(&count2, p + end, sizeof(count2));
	if (count != count2)
		return bad(errmsg, errn, "its entry counts differ");
	for (uint64_t i = 0; i < count; i++) {
		struct entry_head h;
		struct coord c;
		struct record *r;
		size_t slot;

		if (end - off < sizeof(h))
			return bad(errmsg, errn, "it ends inside an entry");
		memcpy(&h, p + off, sizeof(h));
		off += sizeof(h);
		if (h.json_len == 0 || h.json_len > JSON_MAX ||
		    end - off < h.json_len)
			return bad(errmsg, errn, "an entry has a bad length");
		c = (struct coord){h.x, h.y, h.z};
		if (!coord_valid(&c, ix->max_x) || h.ctime_ns >= made_ns ||
		    h.mtime_ns >= made_ns) {
			/* Racy, or saved under a larger max_x: not ours
			 * to serve (the load refuses those directories). */
			off += h.json_len;
			continue;
		}
		slot = index_slot(ix, &c);
		if (s->slots[slot].rec)
			return bad(errmsg, errn, "a coordinate appears twice");
		r = record_from_compact(&c, h.version, p + off, h.json_len);
		if (!r) {
			errmsg_set(
				errmsg, errn,
				"an entry is not a record, or out of memory");
			return -EBADMSG;
		}
		off += h.json_len;
		s->slots[slot].rec = r;
		s->slots[slot].stamp = (struct vmdir_stamp){
			.ino = h.ino,
			.size = h.size,
			.mtime_ns = h.mtime_ns,
			.ctime_ns = h.ctime_ns,
		};
		s->count++;
	}
	if (off != end)
		return bad(errmsg, errn, "bytes follow its last entry");
	return 0;
}

int indexsnap_load(struct indexsnap *s, const struct statedir *sd,
		   const struct index *ix, char *errmsg, size_t errn)
{
	struct stat st;
	char *p = MAP_FAILED;
	size_t len = 0;
	uint32_t crc;
	int fd, rc;

	fd = statedir_open(sd, INDEXSNAP_NAME, O_RDONLY, 0, errmsg, errn);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		errmsg_set(errmsg, errn, "cannot stat it: %s", strerror(-rc));
		goto out;
	}
	len = (size_t)st.st_size;
	if (len < HEAD_LEN + TRAILER_LEN) {
		rc = bad(errmsg, errn, "it is too short");
		goto out;
	}
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		errmsg_set(errmsg, errn, "cannot map it: %s", strerror(-rc));
		goto out;
	}
	if (memcmp(p, magic, sizeof(magic)) != 0) {
		rc = bad(errmsg, errn, "it is not a snapshot of this format");
		goto out;
	}
	memcpy(&crc, p + len - sizeof(crc), sizeof(crc));
	if (crc32c(0, p, len - sizeof(crc)) != crc) {
		rc = bad(errmsg, errn, "its checksum does not match");
		goto out;
	}
	s->slots = calloc(ix->n_slots, sizeof(*s->slots));
	if (!s->slots) {
		rc = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	s->n_slots = ix->n_slots;
	rc = parse(s, ix, p, len,
		   (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
		   errmsg, errn);
out:
	if (rc < 0)
		indexsnap_done(s);
	if (p != MAP_FAILED)
		munmap(p, len);
	close(fd);
	return rc;
}

struct record *indexsnap_take(struct indexsnap *s, size_t slot,
			      const struct vmdir_stamp *stamp)
{
	struct indexsnap_entry *e;
	struct record *r;

	if (slot >= s->n_slots)
		return NULL;
	e = &s->slots[slot];
	if (!e->rec || e->stamp.ino != stamp->ino ||
	    e->stamp.size != stamp->size ||
	    e->stamp.mtime_ns != stamp->mtime_ns ||
	    e->stamp.ctime_ns != stamp->ctime_ns)
		return NULL;
	r = e->rec;
	e->rec = NULL;
	s->taken++;
	return r;
}

void indexsnap_done(struct indexsnap *s)
{
	if (!s)
		return;
	for (size_t i = 0; s->slots && i < s->n_slots; i++)
		record_free(s->slots[i].rec);
	free(s->slots);
	memset(s, 0, sizeof(*s));
}

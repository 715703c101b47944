/*
 * A pack and its index written by hand (see gitpack.h).
 *
 * The pack: "PACK", version 2, the object count, each object as its type
 * and size header followed by its zlib stream, then the SHA-1 of all of
 * that. The index (version 2): a magic and the version, 256 cumulative
 * counts by the ids' first byte, the ids in order, the CRC-32 of each
 * object's bytes in the pack, their offsets (31 bits, or a pointer into
 * a table of 64-bit offsets), the pack's SHA-1 and the index's own.
 *
 * One deflate stream serves every object (deflateReset): setting one up
 * costs ten times what a 500-byte decision takes to compress.
 *
 * The count is not known until the last object (a commit writes each
 * file's blob as it reads the file, holding no bytes): the header is
 * written with none, patched at the end, and the pack's hash computed
 * then by reading the file back (from the page cache: a tenth of a
 * second for 300 MB). A hash set of the ids added keeps each object once.
 */
#include "gitpack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "errmsg.h"
#include "fdio.h"
#include "grow.h"

#define CHUNK	  (1 << 20) /* bytes written at a time */
#define PACK_MODE 0444	    /* as git leaves its packs */
/* Offsets above this go to the 64-bit table (a test lowers it). */
#ifndef GITPACK_OFF31_MAX
#define GITPACK_OFF31_MAX 0x7fffffffu
#endif
#define IDX_MAGIC "\377tOc"
#define TMP_PACK  "tmp_pack_XXXXXX" /* git gc prunes stale tmp_* */
#define TMP_IDX	  "tmp_idx_XXXXXX"

/* A file written through a buffer and hashed as it goes, or once written
 * (read_back). */
struct out {
	int fd;
	char path[PATH_MAX]; /* its temporary name, "" once linked away */
	EVP_MD_CTX *sha;
	bool read_back;
	unsigned char *buf;
	size_t n;
	uint64_t off; /* bytes put so far */
};

struct entry {
	git_oid id;
	uint32_t crc;
	uint64_t off;
};

struct gitpack {
	char *packdir;
	struct out pack, idx;
	z_stream z;
	bool z_ready;
	unsigned char *zout; /* deflate output (grown as needed) */
	size_t zcap;
	struct entry *e; /* in the order added, sorted at the end */
	size_t count, cap;
	uint32_t *set; /* open addressing: index in e + 1, 0 free */
	size_t nset;   /* a power of two, over twice count */
};

static int os_fail(const char *what, const char *path, char *errmsg,
		   size_t errn)
{
	int e = errno ? errno : EIO;

	errmsg_set(errmsg, errn, "%s %s: %s", what, path, strerror(e));
	return -e;
}

static int out_open(struct out *o, const char *dir, const char *name,
		    char *errmsg, size_t errn)
{
	if ((size_t)snprintf(o->path, sizeof(o->path), "%s/%s", dir, name) >=
	    sizeof(o->path)) {
		o->path[0] = '\0';
		errmsg_set(errmsg, errn, "%s: path too long", dir);
		return -ENAMETOOLONG;
	}
	o->buf = malloc(CHUNK);
	o->sha = EVP_MD_CTX_new();
	if (!o->buf || !o->sha ||
	    EVP_DigestInit_ex(o->sha, EVP_sha1(), NULL) != 1) {
		o->path[0] = '\0';
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	o->fd = mkostemp(o->path, O_CLOEXEC);
	if (o->fd < 0) {
		int rc = os_fail("creating", o->path, errmsg, errn);

		o->path[0] = '\0';
		return rc;
	}
	return 0;
}

static int write_all(struct out *o, const unsigned char *d, size_t len,
		     char *errmsg, size_t errn)
{
	int rc = fdio_write(o->fd, d, len);

	if (rc < 0)
		errmsg_set(errmsg, errn, "writing %s: %s", o->path,
			   strerror(-rc));
	return rc;
}

static int out_flush(struct out *o, char *errmsg, size_t errn)
{
	int rc;

	if (!o->n)
		return 0;
	if (!o->read_back && EVP_DigestUpdate(o->sha, o->buf, o->n) != 1) {
		errmsg_set(errmsg, errn, "hashing %s", o->path);
		return -EIO;
	}
	rc = write_all(o, o->buf, o->n, errmsg, errn);
	o->n = 0;
	return rc;
}

static int out_put(struct out *o, const void *data, size_t len, char *errmsg,
		   size_t errn)
{
	const unsigned char *d = data;

	o->off += len;
	while (len) {
		size_t k = CHUNK - o->n < len ? CHUNK - o->n : len;
		int rc;

		memcpy(o->buf + o->n, d, k);
		o->n += k;
		d += k;
		len -= k;
		if (o->n == CHUNK && (rc = out_flush(o, errmsg, errn)) < 0)
			return rc;
	}
	return 0;
}

static int out_put32(struct out *o, uint32_t v, char *errmsg, size_t errn)
{
	unsigned char b[4] = {(unsigned char)(v >> 24),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 8),
			      (unsigned char)v};

	return out_put(o, b, sizeof(b), errmsg, errn);
}

/* Hash the file as it is on disk (all o->off bytes of it). */
static int out_hash_file(struct out *o, char *errmsg, size_t errn)
{
	for (uint64_t at = 0; at < o->off;) {
		size_t want =
			o->off - at < CHUNK ? (size_t)(o->off - at) : CHUNK;
		ssize_t r = pread(o->fd, o->buf, want, (off_t)at);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EIO;
			return os_fail("reading back", o->path, errmsg, errn);
		}
		if (EVP_DigestUpdate(o->sha, o->buf, (size_t)r) != 1) {
			errmsg_set(errmsg, errn, "hashing %s", o->path);
			return -EIO;
		}
		at += (uint64_t)r;
	}
	return 0;
}

/* Flush, append the SHA-1 of everything put (into md), fsync, and make
 * the file read-only as git's are. */
static int out_finish(struct out *o, unsigned char md[20], char *errmsg,
		      size_t errn)
{
	unsigned int mdlen = 0;
	int rc = out_flush(o, errmsg, errn);

	if (rc == 0 && o->read_back)
		rc = out_hash_file(o, errmsg, errn);
	if (rc < 0)
		return rc;
	if (EVP_DigestFinal_ex(o->sha, md, &mdlen) != 1 || mdlen != 20) {
		errmsg_set(errmsg, errn, "hashing %s", o->path);
		return -EIO;
	}
	rc = write_all(o, md, 20, errmsg, errn);
	if (rc < 0)
		return rc;
	if (fsync(o->fd) < 0)
		return os_fail("syncing", o->path, errmsg, errn);
	if (fchmod(o->fd, PACK_MODE) < 0)
		return os_fail("setting the mode of", o->path, errmsg, errn);
	return 0;
}

/* Give the temporary file its final name; one already there holds the
 * same bytes (the name is their hash). *made: whether ours is it. */
static int out_link(struct out *o, const char *final, bool *made, char *errmsg,
		    size_t errn)
{
	*made = false;
	if (link(o->path, final) == 0)
		*made = true;
	else if (errno != EEXIST)
		return os_fail("naming", final, errmsg, errn);
	unlink(o->path);
	o->path[0] = '\0';
	return 0;
}

static void out_done(struct out *o)
{
	if (o->fd >= 0)
		close(o->fd);
	if (o->path[0])
		unlink(o->path);
	EVP_MD_CTX_free(o->sha);
	free(o->buf);
}

int gitpack_begin(struct gitpack **out, const char *packdir, char *errmsg,
		  size_t errn)
{
	struct gitpack *p = calloc(1, sizeof(*p));
	unsigned char hdr[8] = {'P', 'A', 'C', 'K', 0, 0, 0, 2};
	int rc = -ENOMEM;

	*out = NULL;
	if (!p) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	p->pack.fd = p->idx.fd = -1;
	p->pack.read_back = true; /* its count is patched in at the end */
	p->packdir = strdup(packdir);
	if (!p->packdir) {
		errmsg_set(errmsg, errn, "out of memory");
		goto fail;
	}
	if (deflateInit(&p->z, Z_BEST_SPEED) != Z_OK) {
		errmsg_set(errmsg, errn, "starting zlib");
		goto fail;
	}
	p->z_ready = true;
	rc = out_open(&p->pack, packdir, TMP_PACK, errmsg, errn);
	if (rc == 0)
		rc = out_put(&p->pack, hdr, sizeof(hdr), errmsg, errn);
	if (rc == 0)
		rc = out_put32(&p->pack, 0, errmsg, errn);
	if (rc < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	gitpack_free(p);
	return rc;
}

/* The slot of id in the set: where it is, or the free one to take. */
static size_t set_slot(const struct gitpack *p, const git_oid *id)
{
	uint32_t h;
	size_t i;

	memcpy(&h, id->id, sizeof(h)); /* ids are hashes already */
	for (i = h & (p->nset - 1);
	     p->set[i] && !git_oid_equal(&p->e[p->set[i] - 1].id, id);
	     i = (i + 1) & (p->nset - 1))
		;
	return i;
}

/* Room for one more entry, the set kept under half full. */
static int make_room(struct gitpack *p)
{
	if (p->count == UINT32_MAX - 1)
		return -EFBIG;
	if (p->count + 1 > p->nset / 2) {
		size_t n = p->nset ? p->nset * 2 : 1024;
		uint32_t *old = p->set;
		size_t oldn = p->nset;

		p->set = table_alloc(n, sizeof(*p->set));
		if (!p->set) {
			p->set = old;
			return -ENOMEM;
		}
		p->nset = n;
		for (size_t i = 0; i < oldn; i++)
			if (old[i])
				p->set[set_slot(p, &p->e[old[i] - 1].id)] =
					old[i];
		free(old);
	}
	return grow_array((void **)&p->e, &p->cap, p->count + 1, sizeof(*p->e));
}

int gitpack_add(struct gitpack *p, git_object_t type, const git_oid *id,
		const void *data, size_t len, char *errmsg, size_t errn)
{
	unsigned char hdr[16];
	size_t h = 0, size = len, slot;
	uLong bound;
	struct entry *e;
	int rc;

	rc = make_room(p);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "%s",
			   rc == -EFBIG ? "too many objects for one pack"
					: "out of memory");
		return rc;
	}
	slot = set_slot(p, id);
	if (p->set[slot])
		return 1;
	if (len > UINT32_MAX) {
		errmsg_set(errmsg, errn, "an object of %zu bytes", len);
		return -EFBIG;
	}
	/* type and size: 3 bits of type, the size 4 + 7k bits */
	hdr[h] = (unsigned char)((type & 7) << 4 | (size & 15));
	size >>= 4;
	while (size) {
		hdr[h++] |= 0x80;
		hdr[h] = (unsigned char)(size & 0x7f);
		size >>= 7;
	}
	h++;
	bound = deflateBound(&p->z, (uLong)len);
	if (bound > p->zcap) {
		unsigned char *z = realloc(p->zout, bound);

		if (!z) {
			errmsg_set(errmsg, errn, "out of memory");
			return -ENOMEM;
		}
		p->zout = z;
		p->zcap = bound;
	}
	if (deflateReset(&p->z) != Z_OK) {
		errmsg_set(errmsg, errn, "compressing an object");
		return -EIO;
	}
	p->z.next_in = (Bytef *)data;
	p->z.avail_in = (uInt)len;
	p->z.next_out = p->zout;
	p->z.avail_out = (uInt)p->zcap;
	if (deflate(&p->z, Z_FINISH) != Z_STREAM_END) {
		errmsg_set(errmsg, errn, "compressing an object");
		return -EIO;
	}
	e = &p->e[p->count];
	e->id = *id;
	e->off = p->pack.off;
	e->crc = (uint32_t)crc32(crc32(0, hdr, (uInt)h), p->zout,
				 (uInt)p->z.total_out);
	rc = out_put(&p->pack, hdr, h, errmsg, errn);
	if (rc == 0)
		rc = out_put(&p->pack, p->zout, p->z.total_out, errmsg, errn);
	if (rc == 0)
		p->set[slot] = (uint32_t)++p->count;
	return rc;
}

size_t gitpack_count(const struct gitpack *p)
{
	return p->count;
}

static int entry_cmp(const void *a, const void *b)
{
	return git_oid_cmp(&((const struct entry *)a)->id,
			   &((const struct entry *)b)->id);
}

/* The index of the (sorted) entries, for the pack whose hash is md. */
static int write_index(struct gitpack *p, const unsigned char pack_md[20],
		       unsigned char md[20], char *errmsg, size_t errn)
{
	struct out *o = &p->idx;
	uint32_t fan = 0, big = 0;
	size_t i = 0;
	int rc;

	rc = out_open(o, p->packdir, TMP_IDX, errmsg, errn);
	if (rc == 0)
		rc = out_put(o, IDX_MAGIC, 4, errmsg, errn);
	if (rc == 0)
		rc = out_put32(o, 2, errmsg, errn);
	for (unsigned b = 0; b < 256 && rc == 0; b++) {
		while (i < p->count && p->e[i].id.id[0] == b)
			i++, fan++;
		rc = out_put32(o, fan, errmsg, errn);
	}
	for (i = 0; i < p->count && rc == 0; i++)
		rc = out_put(o, p->e[i].id.id, GIT_OID_RAWSZ, errmsg, errn);
	for (i = 0; i < p->count && rc == 0; i++)
		rc = out_put32(o, p->e[i].crc, errmsg, errn);
	for (i = 0; i < p->count && rc == 0; i++) {
		if (p->e[i].off <= GITPACK_OFF31_MAX)
			rc = out_put32(o, (uint32_t)p->e[i].off, errmsg, errn);
		else
			rc = out_put32(o, 0x80000000u | big++, errmsg, errn);
	}
	for (i = 0; i < p->count && rc == 0; i++)
		if (p->e[i].off > GITPACK_OFF31_MAX) {
			rc = out_put32(o, (uint32_t)(p->e[i].off >> 32), errmsg,
				       errn);
			if (rc == 0)
				rc = out_put32(o, (uint32_t)p->e[i].off, errmsg,
					       errn);
		}
	if (rc == 0)
		rc = out_put(o, pack_md, 20, errmsg, errn);
	if (rc == 0)
		rc = out_finish(o, md, errmsg, errn);
	return rc;
}

int gitpack_commit(struct gitpack *p, char *errmsg, size_t errn)
{
	unsigned char pack_md[20], idx_md[20];
	char hex[GIT_OID_HEXSZ + 1], final[PATH_MAX];
	bool made = false, made_idx;
	git_oid name;
	int rc;
	unsigned char count[4] = {(unsigned char)(p->count >> 24),
				  (unsigned char)(p->count >> 16),
				  (unsigned char)(p->count >> 8),
				  (unsigned char)p->count};

	if (p->count == 0) {
		errmsg_set(errmsg, errn, "an empty pack");
		return -EINVAL;
	}
	qsort(p->e, p->count, sizeof(*p->e), entry_cmp);
	rc = out_flush(&p->pack, errmsg, errn);
	if (rc < 0)
		return rc;
	rc = fdio_pwrite(p->pack.fd, count, sizeof(count), 8);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "writing %s: %s", p->pack.path,
			   strerror(-rc));
		return rc;
	}
	rc = out_finish(&p->pack, pack_md, errmsg, errn);
	if (rc == 0)
		rc = write_index(p, pack_md, idx_md, errmsg, errn);
	if (rc < 0)
		return rc;
	git_oid_fromraw(&name, pack_md);
	git_oid_tostr(hex, sizeof(hex), &name);
	/* The pack first: an index names a pack that is there. */
	snprintf(final, sizeof(final), "%s/pack-%s.pack", p->packdir, hex);
	rc = out_link(&p->pack, final, &made, errmsg, errn);
	if (rc < 0)
		return rc;
	snprintf(final, sizeof(final), "%s/pack-%s.idx", p->packdir, hex);
	rc = out_link(&p->idx, final, &made_idx, errmsg, errn);
	if (rc < 0 && made) {
		snprintf(final, sizeof(final), "%s/pack-%s.pack", p->packdir,
			 hex);
		unlink(final);
	}
	return rc;
}

void gitpack_free(struct gitpack *p)
{
	if (!p)
		return;
	out_done(&p->pack);
	out_done(&p->idx);
	if (p->z_ready)
		deflateEnd(&p->z);
	free(p->zout);
	free(p->e);
	free(p->set);
	free(p->packdir);
	free(p);
}

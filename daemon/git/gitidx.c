/*
 * The index sync of a commit (see gitidx.h). The on-disk format is git's
 * Documentation/gitformat-index.txt: a 12-byte header ("DIRC", version,
 * entry count), the entries sorted by (name, stage), extensions (a 4-byte
 * signature, a 4-byte size, the data), and the SHA-1 of all that.
 *
 * Our writer never parses what it does not change: spans of entries are
 * copied as they are (for version 4, only the entry right after a change
 * is re-encoded, its name being prefix-compressed against the one before
 * it), the TREE extension is copied node by node with the directories
 * above each change invalidated, REUC is copied. Anything else sends the
 * index to git's own plumbing, which keeps what it knows.
 */
#include "gitidx.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "errmsg.h"
#include "fdio.h"
#include "gitproc.h"

#define ENTRY_FIXED 62 /* stat data, oid, flags */
#define F_EXTENDED  0x4000
#define F_STAGE	    0x3000
#define F_NAMEMASK  0x0fff
#define MODE_FILE   0100644
#define WORK_NAME   "index.next"
#define OUT_BUF	    (1 << 16)

const char *const gitidx_private_files[] = {WORK_NAME, WORK_NAME ".lock", NULL};

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* git's varint of index v4 (varint.c). */
static int decode_varint(const unsigned char **p, const unsigned char *end,
			 size_t *out)
{
	const unsigned char *b = *p;
	size_t val;
	unsigned char c;

	if (b >= end)
		return -1;
	c = *b++;
	val = c & 127;
	while (c & 128) {
		val += 1;
		if (b >= end || val >> (sizeof(val) * 8 - 8))
			return -1;
		c = *b++;
		val = (val << 7) + (c & 127);
	}
	*p = b;
	*out = val;
	return 0;
}

static size_t encode_varint(size_t value, unsigned char *buf)
{
	unsigned char v[16];
	size_t pos = sizeof(v) - 1;

	v[pos] = value & 127;
	while (value >>= 7)
		v[--pos] = (unsigned char)(128 | (--value & 127));
	memcpy(buf, v + pos, sizeof(v) - pos);
	return sizeof(v) - pos;
}

/* ---- reading ---- */

struct idx {
	const unsigned char *p;
	size_t len; /* without the trailer */
	unsigned version;
	uint32_t count;
	size_t ext_off;
	int64_t mtime; /* the file's, in seconds; -1 for no file */
};

/* A decoded entry. */
struct ent {
	size_t off, end; /* its bytes */
	size_t name_off; /* v4: where the varint starts; else the name */
	uint16_t flags;
	const char *name; /* full name (v4: in the caller's buffer) */
	size_t namelen;
};

/* A growable name buffer for version 4. */
struct nbuf {
	char *s;
	size_t len, cap;
};

static int nbuf_set(struct nbuf *b, size_t keep, const char *add, size_t n)
{
	if (keep + n + 1 > b->cap) {
		size_t cap = (keep + n + 1) * 2;
		char *s = realloc(b->s, cap);

		if (!s)
			return -ENOMEM;
		b->s = s;
		b->cap = cap;
	}
	memmove(b->s + keep, add, n);
	b->len = keep + n;
	b->s[b->len] = '\0';
	return 0;
}

/*
 * Decode the entry at off. For v4, prev holds the previous name and is
 * replaced by this one. 0 or -EINVAL on a malformed entry.
 */
static int entry_at(const struct idx *x, size_t off, struct nbuf *prev,
		    struct ent *e)
{
	const unsigned char *p = x->p + off, *end = x->p + x->len;
	size_t fixed = ENTRY_FIXED;

	if (off + ENTRY_FIXED > x->len)
		return -EINVAL;
	e->off = off;
	e->flags = (uint16_t)(p[60] << 8 | p[61]);
	if (e->flags & F_EXTENDED) {
		if (x->version < 3)
			return -EINVAL;
		fixed += 2;
		if (off + fixed > x->len)
			return -EINVAL;
	}
	e->name_off = off + fixed;
	if (x->version == 4) {
		const unsigned char *q = p + fixed;
		const char *suffix;
		size_t strip, slen;

		if (decode_varint(&q, end, &strip) < 0 || strip > prev->len)
			return -EINVAL;
		suffix = (const char *)q;
		slen = strnlen(suffix, (size_t)(end - q));
		if (q + slen >= end)
			return -EINVAL;
		if (nbuf_set(prev, prev->len - strip, suffix, slen) < 0)
			return -ENOMEM;
		e->name = prev->s;
		e->namelen = prev->len;
		e->end = (size_t)(q + slen + 1 - x->p);
		return 0;
	}
	e->name = (const char *)p + fixed;
	e->namelen = e->flags & F_NAMEMASK;
	if (e->namelen == F_NAMEMASK) {
		e->namelen = strnlen(e->name, x->len - off - fixed);
		if (off + fixed + e->namelen >= x->len)
			return -EINVAL;
	}
	e->end = off + ((fixed + e->namelen + 8) & ~(size_t)7);
	if (e->end > x->len)
		return -EINVAL;
	return 0;
}

/* git's order of names (cache_name_compare without the stage). */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : (alen > blen ? 1 : 0);
}

/* Walk to the extensions; x->ext_off. */
static int find_extensions(struct idx *x)
{
	struct nbuf prev = {0};
	struct ent e;
	size_t off = 12;
	int rc = 0;

	for (uint32_t i = 0; i < x->count; i++) {
		rc = entry_at(x, off, &prev, &e);
		if (rc < 0)
			break;
		off = e.end;
	}
	free(prev.s);
	x->ext_off = off;
	return rc;
}

/*
 * Which way the index must go: 0 for ours, or 1 with why for git's, or
 * -EINVAL for an index that is not one.
 */
static int judge(struct idx *x, char *why, size_t whyn)
{
	size_t off;

	if (x->len < 12 || memcmp(x->p, "DIRC", 4) != 0)
		return -EINVAL;
	x->version = be32(x->p + 4);
	x->count = be32(x->p + 8);
	if (x->version < 2 || x->version > 4) {
		snprintf(why, whyn, "index version %u", x->version);
		return 1;
	}
	if (find_extensions(x) < 0)
		return -EINVAL;
	for (off = x->ext_off; off + 8 <= x->len;) {
		const unsigned char *s = x->p + off;
		uint32_t size = be32(s + 4);

		if (size > x->len - off - 8)
			return -EINVAL;
		if (memcmp(s, "TREE", 4) != 0 && memcmp(s, "REUC", 4) != 0) {
			static const struct {
				const char *sig, *why;
			} names[] = {
				{"link", "split index"},
				{"UNTR", "untracked cache"},
				{"FSMN", "fsmonitor"},
				{"sdir", "sparse index"},
				{"EOIE", "end of index entries"},
				{"IEOT", "index entry offsets"},
			};
			snprintf(why, whyn, "extension %.4s", (const char *)s);
			for (size_t i = 0; i < sizeof(names) / sizeof(*names);
			     i++)
				if (memcmp(s, names[i].sig, 4) == 0)
					snprintf(why, whyn, "%s", names[i].why);
			return 1;
		}
		off += 8 + size;
	}
	if (off != x->len)
		return -EINVAL;
	return 0;
}

/* ---- writing ---- */

struct out {
	int fd;
	unsigned char buf[OUT_BUF];
	size_t n;
	int err;
};

static void out_flush(struct out *o)
{
	if (o->err || !o->n)
		return;
	o->err = fdio_write(o->fd, o->buf, o->n);
	o->n = 0;
}

static void out_put(struct out *o, const void *p, size_t len)
{
	if (o->err || len == 0)
		return;
	if (len >= OUT_BUF / 2) {
		out_flush(o);
		if (!o->err)
			o->err = fdio_write(o->fd, p, len);
		return;
	}
	if (o->n + len > OUT_BUF)
		out_flush(o);
	memcpy(o->buf + o->n, p, len);
	o->n += len;
}

/* Our entry for u, after the name prev (v4). */
static void put_entry(struct out *o, unsigned version, const struct nbuf *prev,
		      const struct gitidx_update *u)
{
	unsigned char h[ENTRY_FIXED + 16];
	size_t namelen = strlen(u->path), common = 0;
	const struct gitidx_stat *st = &u->st;
	static const unsigned char zeros[8];

	put32(h, (uint32_t)st->ctime_sec);
	put32(h + 4, st->ctime_nsec);
	put32(h + 8, (uint32_t)st->mtime_sec);
	put32(h + 12, st->mtime_nsec);
	put32(h + 16, (uint32_t)st->dev);
	put32(h + 20, (uint32_t)st->ino);
	put32(h + 24, MODE_FILE);
	put32(h + 28, st->uid);
	put32(h + 32, st->gid);
	put32(h + 36, (uint32_t)st->size);
	memcpy(h + 40, u->oid, 20);
	h[60] = (unsigned char)((namelen < F_NAMEMASK ? namelen : F_NAMEMASK) >>
				8);
	h[61] = (unsigned char)(namelen < F_NAMEMASK ? namelen : F_NAMEMASK);
	out_put(o, h, ENTRY_FIXED);
	if (version == 4) {
		unsigned char v[16];

		while (common < prev->len && common < namelen &&
		       prev->s[common] == u->path[common])
			common++;
		out_put(o, v, encode_varint(prev->len - common, v));
		out_put(o, u->path + common, namelen - common + 1);
		return;
	}
	out_put(o, u->path, namelen);
	out_put(o, zeros,
		((ENTRY_FIXED + namelen + 8) & ~(size_t)7) - ENTRY_FIXED -
			namelen);
}

/*
 * Is entry e "racily clean" as git says: written no earlier than the
 * index it is in (at git's one-second granularity)? Its stat data then
 * proves nothing until its content is checked again. A new index makes it
 * look older than it is, so, as git's own writer does, it is smudged
 * (its size set to 0) to keep it checked.
 */
static bool racy(const struct idx *x, const struct ent *e)
{
	const unsigned char *p = x->p + e->off;

	return x->mtime >= 0 && be32(p + 36) != 0 &&
	       (int64_t)be32(p + 8) >= x->mtime;
}

/* Entry e as it is, but smudged if racy and (v4) re-encoded after prev
 * when reencode. */
static void put_copy(struct out *o, const struct idx *x, const struct ent *e,
		     bool smudge, bool reencode, const struct nbuf *prev)
{
	static const unsigned char zeros[4];
	size_t common = 0;
	unsigned char v[16];

	if (smudge) {
		out_put(o, x->p + e->off, 36);
		out_put(o, zeros, 4);
		out_put(o, x->p + e->off + 40, e->name_off - e->off - 40);
	} else {
		out_put(o, x->p + e->off, e->name_off - e->off);
	}
	if (!reencode) {
		out_put(o, x->p + e->name_off, e->end - e->name_off);
		return;
	}
	while (common < prev->len && common < e->namelen &&
	       prev->s[common] == e->name[common])
		common++;
	out_put(o, v, encode_varint(prev->len - common, v));
	out_put(o, e->name + common, e->namelen - common + 1);
}

/* Is the stage-0 entry e already exactly u? */
static bool entry_same(const struct idx *x, const struct ent *e,
		       const struct gitidx_update *u)
{
	const unsigned char *p = x->p + e->off;
	const struct gitidx_stat *st = &u->st;

	return (e->flags & ~F_NAMEMASK) == 0 &&
	       be32(p) == (uint32_t)st->ctime_sec &&
	       be32(p + 4) == st->ctime_nsec &&
	       be32(p + 8) == (uint32_t)st->mtime_sec &&
	       be32(p + 12) == st->mtime_nsec &&
	       be32(p + 16) == (uint32_t)st->dev &&
	       be32(p + 20) == (uint32_t)st->ino && be32(p + 24) == MODE_FILE &&
	       be32(p + 28) == st->uid && be32(p + 32) == st->gid &&
	       be32(p + 36) == (uint32_t)st->size &&
	       memcmp(p + 40, u->oid, 20) == 0;
}

/* Does some update path lie under directory dir ("a/b/", "" for all)? */
static bool under(const struct gitidx_update *const *u, size_t n,
		  const char *dir, size_t dlen)
{
	size_t lo = 0, hi = n;

	if (dlen == 0)
		return n > 0;
	while (lo < hi) { /* first path >= dir */
		size_t mid = (lo + hi) / 2;

		if (strncmp(u[mid]->path, dir, dlen) < 0 &&
		    strcmp(u[mid]->path, dir) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && strncmp(u[lo]->path, dir, dlen) == 0;
}

/*
 * The TREE extension (data, len) with every directory above an update
 * invalidated (entry count -1, no id), into a malloc'd buffer.
 */
static int tree_rewrite(const unsigned char *data, size_t len,
			const struct gitidx_update *const *u, size_t n,
			unsigned char **outp, size_t *outn)
{
	/* Per depth: the directory path so far and the children left. */
	struct level {
		size_t pathlen;
		long left;
	} *stack = NULL;
	size_t depth = 0, cap = 0, off = 0;
	struct nbuf path = {0};
	char *buf = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&buf, &blen);
	int rc = 0;

	if (!f)
		return -ENOMEM;
	while (off < len) {
		const char *name = (const char *)data + off;
		size_t nlen = strnlen(name, len - off);
		const char *p = name + nlen + 1,
			   *end = (const char *)data + len;
		long entries, subtrees;
		char *e;

		if (name + nlen >= end) {
			rc = -EINVAL;
			break;
		}
		/* Leave the directories whose children are all done. */
		while (depth > 0 && stack[depth - 1].left == 0)
			depth--;
		if (depth > 0)
			stack[depth - 1].left--;
		entries = strtol(p, &e, 10);
		if (e == p || *e != ' ') {
			rc = -EINVAL;
			break;
		}
		p = e + 1;
		subtrees = strtol(p, &e, 10);
		if (e == p || *e != '\n' || subtrees < 0) {
			rc = -EINVAL;
			break;
		}
		p = e + 1;
		if (entries >= 0) {
			if (end - p < 20) {
				rc = -EINVAL;
				break;
			}
			p += 20;
		}
		/* This node's directory: parent's path + name + "/". */
		if (nbuf_set(&path, depth ? stack[depth - 1].pathlen : 0, name,
			     nlen) < 0 ||
		    (nlen && nbuf_set(&path, path.len, "/", 1) < 0)) {
			rc = -ENOMEM;
			break;
		}
		if (entries >= 0 && under(u, n, path.s, path.len))
			fprintf(f, "%s%c%d %ld\n", name, 0, -1, subtrees);
		else
			fwrite(name, 1, (size_t)(p - name), f);
		if (depth == cap) {
			struct level *s;

			cap = cap ? cap * 2 : 16;
			s = realloc(stack, cap * sizeof(*s));
			if (!s) {
				rc = -ENOMEM;
				break;
			}
			stack = s;
		}
		stack[depth].pathlen = path.len;
		stack[depth].left = subtrees;
		depth++;
		off = (size_t)(p - (const char *)data);
	}
	if (fclose(f) != 0 && rc == 0)
		rc = -ENOMEM;
	free(stack);
	free(path.s);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*outp = (unsigned char *)buf;
	*outn = blen;
	return 0;
}

/*
 * Our writer: x (the index now, or count 0 with no bytes for none) with
 * the updates, into o; the header's entry count is patched in place at
 * the end (the trailer is computed afterwards over the file). *changed
 * false when every update is already there. res->conflict when a path of
 * ours has unmerged entries (nothing of use is written then).
 */
static int own_write(const struct idx *x, const struct gitidx_update *const *u,
		     size_t n, struct out *o, bool *changed,
		     struct gitidx_result *res)
{
	struct nbuf in_prev = {0}, out_prev = {0}, in_last = {0};
	unsigned char hdr[12];
	size_t off = 12, span = 12, j = 0;
	uint32_t i = 0, written = 0;
	bool synced = true; /* v4: out_prev is what the next entry's
			       encoding is relative to */
	bool have = false;  /* e holds entry i, decoded */
	struct ent e = {0};
	int rc = 0;

	*changed = false;
	memcpy(hdr, "DIRC", 4);
	put32(hdr + 4, x->version);
	put32(hdr + 8, 0);
	out_put(o, hdr, 12);
	for (;;) {
		int c;

		if (i < x->count && !have) {
			rc = entry_at(x, off, &in_prev, &e);
			if (rc < 0)
				goto out;
			have = true;
		}
		if (i >= x->count && j >= n)
			break;
		if (i >= x->count)
			c = 1;
		else if (j >= n)
			c = -1;
		else
			c = name_cmp(e.name, e.namelen, u[j]->path,
				     strlen(u[j]->path));
		if (c < 0) {
			/* Not ours: copied (v4: re-encoded once after a
			 * change, its predecessor being another; smudged if
			 * racily clean). */
			bool smudge = racy(x, &e);

			if (smudge || (x->version == 4 && !synced)) {
				out_put(o, x->p + span, off - span);
				put_copy(o, x, &e, smudge,
					 x->version == 4 && !synced, &out_prev);
				span = e.end;
				synced = true;
				*changed |= smudge;
			}
			if (x->version == 4 &&
			    (nbuf_set(&out_prev, 0, e.name, e.namelen) < 0 ||
			     nbuf_set(&in_last, 0, e.name, e.namelen) < 0)) {
				rc = -ENOMEM;
				goto out;
			}
			written++;
			off = e.end;
			i++;
			have = false;
			continue;
		}
		/* u[j] goes here, in place of its entries if it has any. */
		out_put(o, x->p + span, off - span);
		bool had = false, same = false;

		while (i < x->count && c == 0) {
			if ((e.flags & F_STAGE) != 0) {
				res->conflict = true;
				snprintf(res->conflict_path,
					 sizeof(res->conflict_path), "%s",
					 u[j]->path);
				goto out;
			}
			same = !had && u[j]->present && entry_same(x, &e, u[j]);
			had = true;
			off = e.end;
			i++;
			have = false;
			if (i < x->count) {
				rc = entry_at(x, off, &in_prev, &e);
				if (rc < 0)
					goto out;
				have = true;
				c = name_cmp(e.name, e.namelen, u[j]->path,
					     strlen(u[j]->path));
			}
		}
		if (had != u[j]->present || (had && !same))
			*changed = true;
		if (u[j]->present) {
			put_entry(o, x->version, &out_prev, u[j]);
			if (x->version == 4 &&
			    nbuf_set(&out_prev, 0, u[j]->path,
				     strlen(u[j]->path)) < 0) {
				rc = -ENOMEM;
				goto out;
			}
			written++;
		}
		/* v4: the next input entry is encoded against the last name
		 * read (u[j]'s if it had entries); it can be copied as it is
		 * only if that is also the last name written. */
		if (x->version == 4 && had &&
		    nbuf_set(&in_last, 0, u[j]->path, strlen(u[j]->path)) < 0) {
			rc = -ENOMEM;
			goto out;
		}
		synced = out_prev.len == in_last.len &&
			 (!in_last.len ||
			  memcmp(out_prev.s, in_last.s, in_last.len) == 0);
		span = off;
		j++;
	}
	out_put(o, x->p + span, off - span);
	/* Extensions: TREE rewritten, the rest (REUC) copied. */
	for (off = x->ext_off; off + 8 <= x->len;) {
		const unsigned char *s = x->p + off;
		uint32_t size = be32(s + 4);

		if (memcmp(s, "TREE", 4) == 0) {
			unsigned char *t = NULL, h[8];
			size_t tn = 0;

			rc = tree_rewrite(s + 8, size, u, n, &t, &tn);
			if (rc < 0)
				goto out;
			memcpy(h, "TREE", 4);
			put32(h + 4, (uint32_t)tn);
			out_put(o, h, 8);
			out_put(o, t, tn);
			free(t);
		} else {
			out_put(o, s, 8 + size);
		}
		off += 8 + size;
	}
	out_flush(o);
	rc = o->err;
	if (rc == 0 && *changed) {
		put32(hdr + 8, written);
		if (pwrite(o->fd, hdr, 12, 0) != 12)
			rc = errno ? -errno : -EIO;
	}
out:
	free(in_prev.s);
	free(out_prev.s);
	free(in_last.s);
	return rc;
}

/* SHA-1 of the first len bytes of fd, appended at len. */
static int seal(int fd, size_t len)
{
	EVP_MD_CTX *sha = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	void *map = MAP_FAILED;
	int rc = 0;

	if (!sha)
		return -ENOMEM;
	if (len)
		map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (len && map == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	if (EVP_DigestInit_ex(sha, EVP_sha1(), NULL) != 1 ||
	    EVP_DigestUpdate(sha, len ? map : "", len) != 1 ||
	    EVP_DigestFinal_ex(sha, md, &mdlen) != 1 || mdlen != 20) {
		rc = -EIO;
		goto out;
	}
	if (pwrite(fd, md, 20, (off_t)len) != 20)
		rc = errno ? -errno : -EIO;
out:
	if (map != MAP_FAILED)
		munmap(map, len);
	EVP_MD_CTX_free(sha);
	return rc;
}

/* Map the index at path (x->p NULL and count 0 when there is none). */
static int map_index(const char *path, struct idx *x, void **map,
		     size_t *maplen)
{
	struct stat st;
	int fd, rc = 0;

	memset(x, 0, sizeof(*x));
	*map = MAP_FAILED;
	*maplen = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (st.st_size < 32) {
		rc = -EINVAL;
		goto out;
	}
	*maplen = (size_t)st.st_size;
	*map = mmap(NULL, *maplen, PROT_READ, MAP_PRIVATE, fd, 0);
	if (*map == MAP_FAILED) {
		rc = -errno;
		goto out;
	}
	x->p = *map;
	x->len = *maplen - 20;
	x->mtime = (int64_t)st.st_mtim.tv_sec;
out:
	close(fd);
	return rc;
}

static int own_sync(const struct gitidx_ctx *c, const struct idx *x,
		    struct gitlock *lock, const struct gitidx_update *const *u,
		    size_t n, struct gitidx_result *res, char *errmsg,
		    size_t errn)
{
	struct idx empty = {0};
	struct out *o = calloc(1, sizeof(*o));
	bool changed = false;
	off_t end;
	int rc;

	if (!o)
		return -ENOMEM;
	if (!x->p) {
		empty.version = c->new_version;
		empty.mtime = -1;
		x = &empty;
	}
	o->fd = lock->fd;
	rc = own_write(x, u, n, o, &changed, res);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "writing the index: %s",
			   rc == -EINVAL ? "the index is malformed"
					 : strerror(-rc));
		goto out;
	}
	if (res->conflict || !changed) {
		res->changed = false;
		goto out;
	}
	end = lseek(lock->fd, 0, SEEK_END);
	rc = end < 0 ? -errno : seal(lock->fd, (size_t)end);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "writing the index: %s",
			   strerror(-rc));
		goto out;
	}
	res->changed = true;
out:
	free(o);
	return rc;
}

/* ---- git's plumbing ---- */

/* Is the file at path still the one whose stat is st (or still absent)? */
static bool unchanged(const char *workdir, const struct gitidx_update *u)
{
	char full[PATH_MAX];
	struct stat st;
	struct gitidx_stat now;
	int r;

	snprintf(full, sizeof(full), "%s%s", workdir, u->path);
	r = lstat(full, &st);
	if (!u->present)
		return r < 0 && errno == ENOENT;
	if (r < 0)
		return false;
	gitidx_stat_of(&st, &now);
	return now.ino == u->st.ino && now.size == u->st.size &&
	       now.mtime_sec == u->st.mtime_sec &&
	       now.mtime_nsec == u->st.mtime_nsec &&
	       now.ctime_sec == u->st.ctime_sec &&
	       now.ctime_nsec == u->st.ctime_nsec;
}

static int git_sync(const struct gitidx_ctx *c, struct gitlock *lock,
		    struct gitmark *m, const struct gitidx_update *const *u,
		    size_t n, struct gitidx_result *res, char *errmsg,
		    size_t errn)
{
	static const char *const update[] = {
		"update-index", "--add", "--remove", "-z", "--stdin", NULL};
	static const char *const info[] = {"update-index", "-z", "--index-info",
					   NULL};
	char work[PATH_MAX], index[PATH_MAX];
	struct gitproc gp = {c->git, c->gitdir, c->workdir, work, false, NULL};
	struct stat before, after;
	bool had_index;
	char *in = NULL, *fix = NULL;
	size_t inlen = 0, fixlen = 0;
	FILE *f = NULL;
	int rc, copy = -1;

	/* (git is handed the copy by path: the state directory's, checked
	 * at start-up; our own calls go through its descriptor) */
	snprintf(work, sizeof(work), "%s/" WORK_NAME, c->state->path);
	snprintf(index, sizeof(index), "%sindex", c->gitdir);
	(void)statedir_unlink(c->state, WORK_NAME);
	(void)statedir_unlink(c->state, WORK_NAME ".lock");
	/* The copy is made now, under the lock, as a file of our own (a
	 * hard link would share the index's inode, and so its mode, with a
	 * file in our private directory). copy_file_range stays in the
	 * kernel; for a split index the file is the small split part. */
	had_index = lstat(index, &before) == 0;
	if (had_index) {
		int src = open(index, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

		/* The copy stays open until git is done: git replaces it
		 * by rename, once per run, and a freed inode number is
		 * soon given again, so a second run's file could carry the
		 * copy's number and be taken for it (its changes, and the
		 * commit's paths, left out of the index). */
		copy = statedir_open(c->state, WORK_NAME,
				     O_WRONLY | O_CREAT | O_EXCL, 0600, NULL,
				     0);
		rc = src < 0 ? -errno : copy < 0 ? copy : 0;
		while (rc == 0) {
			ssize_t k = copy_file_range(src, NULL, copy, NULL,
						    1 << 30, 0);

			if (k < 0)
				rc = -errno;
			if (k <= 0)
				break;
		}
		if (src >= 0)
			close(src);
		if (rc == 0)
			rc = statedir_stat(c->state, WORK_NAME, &before);
		if (rc < 0) {
			errmsg_set(errmsg, errn, "copying the index: %s",
				   strerror(-rc));
			goto out;
		}
	}
	f = open_memstream(&in, &inlen);
	if (!f) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		fwrite(u[i]->path, 1, strlen(u[i]->path) + 1, f);
	if (fclose(f) != 0) {
		f = NULL;
		rc = -ENOMEM;
		goto out;
	}
	f = NULL;
	rc = gitproc_run(&gp, update, in, inlen, NULL, NULL, errmsg, errn);
	if (rc < 0)
		goto out;
	/* git staged what it found in the files: if one changed since its
	 * bytes were committed, stage the committed blob instead (no stat
	 * data: git checks that file again, as it must). */
	f = open_memstream(&fix, &fixlen);
	if (!f) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char hex[41];

		if (unchanged(c->workdir, u[i]))
			continue;
		for (int b = 0; b < 20; b++)
			snprintf(hex + 2 * b, 3, "%02x", u[i]->oid[b]);
		if (u[i]->present)
			fprintf(f, "100644 %s\t%s%c", hex, u[i]->path, 0);
		else
			fprintf(f, "0 %040d\t%s%c", 0, u[i]->path, 0);
	}
	if (fclose(f) != 0) {
		f = NULL;
		rc = -ENOMEM;
		goto out;
	}
	f = NULL;
	if (fixlen) {
		rc = gitproc_run(&gp, info, fix, fixlen, NULL, NULL, errmsg,
				 errn);
		if (rc < 0)
			goto out;
	}
	rc = statedir_stat(c->state, WORK_NAME, &after);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "git update-index left no index");
		goto out;
	}
	/* git writes a new file (by rename) only when something changed */
	res->changed = !had_index || after.st_ino != before.st_ino;
	if (res->changed) {
		rc = gitlock_replace(lock, WORK_NAME, m);
		if (rc < 0)
			errmsg_set(errmsg, errn, "installing the index: %s",
				   strerror(-rc));
	}
out:
	if (copy >= 0)
		close(copy);
	(void)statedir_unlink(c->state, WORK_NAME);
	free(in);
	free(fix);
	return rc;
}

void gitidx_stat_of(const struct stat *st, struct gitidx_stat *out)
{
	out->ctime_sec = (int64_t)st->st_ctim.tv_sec;
	out->ctime_nsec = (uint32_t)st->st_ctim.tv_nsec;
	out->mtime_sec = (int64_t)st->st_mtim.tv_sec;
	out->mtime_nsec = (uint32_t)st->st_mtim.tv_nsec;
	out->dev = (uint64_t)st->st_dev;
	out->ino = (uint64_t)st->st_ino;
	out->size = (uint64_t)st->st_size;
	out->uid = (uint32_t)st->st_uid;
	out->gid = (uint32_t)st->st_gid;
}

int gitidx_sync(const struct gitidx_ctx *c, struct gitlock *lock,
		struct gitmark *m, const struct gitidx_update *const *u,
		size_t n, struct gitidx_result *res, char *errmsg, size_t errn)
{
	char path[PATH_MAX];
	void *map = MAP_FAILED;
	size_t maplen = 0;
	struct idx x;
	int rc, way;

	memset(res, 0, sizeof(*res));
	snprintf(path, sizeof(path), "%sindex", c->gitdir);
	rc = map_index(path, &x, &map, &maplen);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "reading the index: %s",
			   rc == -EINVAL ? "the index is malformed"
					 : strerror(-rc));
		goto out;
	}
	if (x.p) {
		way = judge(&x, res->why, sizeof(res->why));
		if (way < 0) {
			rc = way;
			errmsg_set(errmsg, errn,
				   "reading the index: the index is malformed");
			goto out;
		}
	} else {
		way = c->force_git ? 1 : 0;
		if (way)
			snprintf(res->why, sizeof(res->why),
				 "new index, by the repository's settings");
	}
	if (c->forced) {
		way = c->force_way == GITIDX_GIT;
		if (way)
			snprintf(res->why, sizeof(res->why), "forced");
	}
	if (way == 0) {
		res->way = GITIDX_OWN;
		rc = own_sync(c, &x, lock, u, n, res, errmsg, errn);
		if (rc == 0 && !res->changed &&
		    (ftruncate(lock->fd, 0) < 0 ||
		     lseek(lock->fd, 0, SEEK_SET) < 0))
			rc = -errno;
	} else {
		res->way = GITIDX_GIT;
		if (map != MAP_FAILED) {
			munmap(map, maplen);
			map = MAP_FAILED;
		}
		rc = git_sync(c, lock, m, u, n, res, errmsg, errn);
	}
out:
	if (map != MAP_FAILED)
		munmap(map, maplen);
	return rc;
}

int gitidx_describe(const char *path, unsigned *version, char *exts,
		    size_t extn)
{
	void *map = MAP_FAILED;
	size_t maplen = 0, off, len = 0;
	struct idx x;
	char why[64];
	int rc;

	exts[0] = '\0';
	*version = 0;
	rc = map_index(path, &x, &map, &maplen);
	if (rc < 0 || !x.p)
		return rc < 0 ? rc : -ENOENT;
	rc = judge(&x, why, sizeof(why));
	if (rc < 0)
		goto out;
	rc = 0;
	*version = x.version;
	for (off = x.ext_off; off + 8 <= x.len;
	     off += 8 + be32(x.p + off + 4)) {
		snprintf(exts + len, extn - len, "%s%.4s", len ? " " : "",
			 (const char *)x.p + off);
		len = strlen(exts);
	}
out:
	munmap(map, maplen);
	return rc;
}

/* See segment.h. */
#include "segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "grow.h"
#include "errmsg.h"
#include "fdio.h"
#include "statedir.h"

#define SEG_MAGIC   0x47534d56u /* "VMSG" */
#define REC_MAGIC   0x52534d56u /* "VMSR" */
#define SEG_VERSION 1u
#define F_TOMB	    1u
/* The last record of a sealed segment: key zero, payload its offset. */
#define F_SEAL	 2u
#define SEAL_LEN 8u

struct seg {
	uint64_t id;
	uint64_t replaces;
	int fd;
	uint64_t size; /* bytes of header and whole records */
	uint64_t dead; /* of which superseded records and idle tombstones */
	bool sealed;   /* ends with its seal: nothing is appended to it */
};

/* A key's latest record; kept for a tombstone while it shadows any. */
struct entry {
	uint8_t key[SEG_KEY];
	uint64_t seq;
	uint64_t seg; /* segment id */
	uint64_t off;
	uint32_t len;	  /* record bytes */
	uint32_t shadows; /* older records of the key still on disk */
	uint8_t used, tomb;
};

struct segstore {
	const struct statedir *sd; /* borrowed */
	struct seg_opts o;
	struct seg *segs;
	size_t nsegs, capsegs;
	uint64_t active; /* id of the segment appended to */
	struct entry *tab;
	size_t cap, used;
	uint64_t next_seq, next_id, compactions;
	bool dir_dirty, compacting;
};

/* A record of the compacted segment, for finishing. */
struct crec {
	uint8_t key[SEG_KEY];
	uint64_t seq, newoff;
	uint32_t len;
	bool kept;
};

struct seg_compact {
	const struct statedir *sd;
	int fd, out_fd;
	uint64_t victim, out, size;
	uint64_t *keep; /* offsets of records to keep, ascending */
	size_t nkeep;
	struct crec *recs;
	size_t nrecs;
	uint64_t out_size, seal_seq;
	bool renamed;
	int err;
};

/* ---- little-endian helpers ---- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void seg_name(char *buf, size_t n, uint64_t id, bool tmp)
{
	snprintf(buf, n, "seg-%016" PRIx64 "%s", id, tmp ? ".tmp" : "");
}

static void make_header(uint8_t *h, uint64_t id, uint64_t replaces,
			uint64_t seq_floor)
{
	put32(h, SEG_MAGIC);
	put32(h + 4, SEG_VERSION);
	put64(h + 8, id);
	put64(h + 16, replaces);
	put64(h + 24, seq_floor);
	put32(h + 32, crc32c(0, h, 32));
	put32(h + 36, 0);
}

static bool header_ok(const uint8_t *h, uint64_t id)
{
	return get32(h) == SEG_MAGIC && get32(h + 4) == SEG_VERSION &&
	       get64(h + 8) == id && get32(h + 32) == crc32c(0, h, 32) &&
	       get32(h + 36) == 0;
}

/* The record at off, if whole and valid: its total length, else 0. */
static uint64_t record_at(const uint8_t *b, uint64_t size, uint64_t off)
{
	uint32_t len, crc, flags;

	if (size - off < SEG_REC_HDR || get32(b + off) != REC_MAGIC)
		return 0;
	len = get32(b + off + 32);
	flags = get32(b + off + 4);
	if (len > SEG_PAYLOAD_MAX || size - off - SEG_REC_HDR < len ||
	    flags > F_SEAL || get64(b + off + 8) == 0 ||
	    (flags == F_TOMB && len != 0) ||
	    (flags == F_SEAL && len != SEAL_LEN))
		return 0;
	crc = crc32c(crc32c(0, b + off + 4, 32), b + off + SEG_REC_HDR, len);
	if (crc != get32(b + off + 36))
		return 0;
	return SEG_REC_HDR + (uint64_t)len;
}

/* The length of a record record_at accepted before (no checks). */
static uint64_t record_len(const uint8_t *b, uint64_t off)
{
	return SEG_REC_HDR + (uint64_t)get32(b + off + 32);
}

static void make_record(uint8_t *p, uint64_t seq, const uint8_t *key,
			uint32_t flags, const void *payload, uint32_t len)
{
	put32(p, REC_MAGIC);
	put32(p + 4, flags);
	put64(p + 8, seq);
	memcpy(p + 16, key, SEG_KEY);
	put32(p + 32, len);
	if (len)
		memcpy(p + SEG_REC_HDR, payload, len);
	put32(p + 36, crc32c(crc32c(0, p + 4, 32), p + SEG_REC_HDR, len));
}

/* ---- files ---- */

/* ---- the key table: open addressing, linear probing ---- */

static uint64_t key_hash(const uint8_t *k)
{
	uint64_t a, b;

	memcpy(&a, k, 8);
	memcpy(&b, k + 8, 8);
	a = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
	return a ^ (a >> 32);
}

static struct entry *find(const struct segstore *s, const uint8_t *key)
{
	size_t i = key_hash(key) & (s->cap - 1);

	for (;; i = (i + 1) & (s->cap - 1))
		if (!s->tab[i].used || memcmp(s->tab[i].key, key, SEG_KEY) == 0)
			return &s->tab[i];
}

/* Reading a segment looks up every key in a table far larger than the
 * caches: the slot of the key a few records ahead is fetched while this
 * one is handled. off is a record's offset in b[0..size), or past it. */
#define PREFETCH_AHEAD 8

static void prefetch_key(const struct segstore *s, const uint8_t *b,
			 uint64_t size, uint64_t off)
{
	if (off < size && size - off >= SEG_REC_HDR)
		__builtin_prefetch(
			&s->tab[key_hash(b + off + 16) & (s->cap - 1)]);
}

/* The offset of the record after the one at off, or size when there is
 * none that fits (for prefetching only: not checked). */
static uint64_t next_record(const uint8_t *b, uint64_t size, uint64_t off)
{
	uint64_t len;

	if (off >= size || size - off < SEG_REC_HDR)
		return size;
	len = get32(b + off + 32);
	return size - off - SEG_REC_HDR < len ? size : off + SEG_REC_HDR + len;
}

/* How many records b[0..size) seems to hold, walking their lengths
 * without checking them (a torn tail counts as one): enough to size the
 * key table before reading. */
static size_t count_records(const uint8_t *b, uint64_t size)
{
	size_t n = 0;

	for (uint64_t off = SEG_HDR; off < size;
	     off = next_record(b, size, off))
		n++;
	return n;
}

static int grow_table(struct segstore *s)
{
	struct entry *old = s->tab, *e;
	size_t oldcap = s->cap, i;

	s->tab = table_alloc(oldcap * 2, sizeof(*s->tab));
	if (!s->tab) {
		s->tab = old;
		return -ENOMEM;
	}
	s->cap = oldcap * 2;
	for (i = 0; i < oldcap; i++) {
		if (!old[i].used)
			continue;
		e = find(s, old[i].key);
		*e = old[i];
	}
	free(old);
	return 0;
}

/* The entry for key, created (unused fields zero) if missing. */
static struct entry *find_or_add(struct segstore *s, const uint8_t *key)
{
	struct entry *e;

	if ((s->used + 1) * 4 > s->cap * 3 && grow_table(s) < 0)
		return NULL;
	e = find(s, key);
	if (!e->used) {
		memset(e, 0, sizeof(*e));
		memcpy(e->key, key, SEG_KEY);
		e->used = 1;
		s->used++;
	}
	return e;
}

static void drop_entry(struct segstore *s, struct entry *e)
{
	size_t i = (size_t)(e - s->tab), j = i, home;

	for (;;) {
		j = (j + 1) & (s->cap - 1);
		if (!s->tab[j].used)
			break;
		home = key_hash(s->tab[j].key) & (s->cap - 1);
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			s->tab[i] = s->tab[j];
			i = j;
		}
	}
	memset(&s->tab[i], 0, sizeof(s->tab[i]));
	s->used--;
}

static struct seg *seg_by_id(const struct segstore *s, uint64_t id)
{
	for (size_t i = 0; i < s->nsegs; i++)
		if (s->segs[i].id == id)
			return &s->segs[i];
	return NULL;
}

static int add_seg(struct segstore *s, const struct seg *g)
{
	struct seg *p;

	if (s->nsegs == s->capsegs) {
		size_t cap = s->capsegs ? s->capsegs * 2 : 8;

		p = realloc(s->segs, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->segs = p;
		s->capsegs = cap;
	}
	s->segs[s->nsegs++] = *g;
	return 0;
}

static void remove_seg(struct segstore *s, uint64_t id)
{
	struct seg *g = seg_by_id(s, id);

	if (!g)
		return;
	if (g->fd >= 0)
		close(g->fd);
	*g = s->segs[--s->nsegs];
}

/*
 * A record became superseded (by a newer one of its key) or a tombstone
 * became idle: its bytes are dead in its segment.
 */
static void add_dead(struct segstore *s, uint64_t seg, uint32_t len)
{
	struct seg *g = seg_by_id(s, seg);

	if (g)
		g->dead += len;
}

/* Account for a new latest record of e's key (e is its entry). */
static void supersede(struct segstore *s, struct entry *e, uint64_t seq,
		      uint64_t seg, uint64_t off, uint32_t len, bool tomb)
{
	if (e->seq) {
		/* An idle tombstone was counted dead already. */
		if (!(e->tomb && e->shadows == 0))
			add_dead(s, e->seg, e->len);
		e->shadows++;
	}
	e->seq = seq;
	e->seg = seg;
	e->off = off;
	e->len = len;
	e->tomb = tomb;
}

/* ---- creating segments ---- */

static int create_segment(struct segstore *s, uint64_t id, char *msg,
			  size_t msglen)
{
	uint8_t h[SEG_HDR];
	char name[32];
	struct seg g = {.id = id, .fd = -1, .size = SEG_HDR};
	int ret;

	seg_name(name, sizeof(name), id, false);
	g.fd = statedir_open(s->sd, name, O_RDWR | O_CREAT | O_EXCL, 0600, msg,
			     msglen);
	if (g.fd < 0)
		return g.fd;
	make_header(h, id, 0, s->next_seq);
	ret = fdio_pwrite(g.fd, h, SEG_HDR, 0);
	if (ret == 0 && fdatasync(g.fd) < 0)
		ret = -errno;
	if (ret == 0)
		ret = statedir_sync(s->sd);
	if (ret == 0)
		ret = add_seg(s, &g);
	if (ret < 0) {
		errmsg_set(msg, msglen, "create %s: %s", name, strerror(-ret));
		close(g.fd);
		statedir_unlink(s->sd, name);
		return ret;
	}
	s->active = id;
	return 0;
}

/*
 * The seal record at off (payload: off itself), so that a sealed segment
 * cut short, even at a record boundary, is told from a whole one.
 */
static void make_seal(uint8_t *p, uint64_t seq, uint64_t off)
{
	static const uint8_t zero[SEG_KEY];
	uint8_t v[SEAL_LEN];

	put64(v, off);
	make_record(p, seq, zero, F_SEAL, v, SEAL_LEN);
}

/* Seal the active segment (synced) and start a new one. */
static int rotate(struct segstore *s, char *msg, size_t msglen)
{
	struct seg *a = seg_by_id(s, s->active);
	uint8_t seal[SEG_REC_HDR + SEAL_LEN];
	int ret;

	if (a && !a->sealed) {
		make_seal(seal, s->next_seq, a->size);
		ret = fdio_pwrite(a->fd, seal, sizeof(seal), a->size);
		if (ret == 0 && fdatasync(a->fd) < 0)
			ret = -errno;
		if (ret < 0) {
			errmsg_set(msg, msglen, "seal segment: %s",
				   strerror(-ret));
			if (ftruncate(a->fd, (off_t)a->size) < 0)
				errmsg_set(msg, msglen,
					   "seal segment: %s; cut back: %s",
					   strerror(-ret), strerror(errno));
			return ret;
		}
		s->next_seq++;
		a->size += sizeof(seal);
		a->dead += sizeof(seal);
		a->sealed = true;
	}
	return create_segment(s, s->next_id++, msg, msglen);
}

/* ---- opening ---- */

struct loaded {
	struct seg g;
	uint8_t *map;
	size_t map_len;
	bool superseded; /* a compacted segment's replacement exists */
};

static int cmp_loaded(const void *a, const void *b)
{
	const struct loaded *x = a, *y = b;

	return x->g.id < y->g.id ? -1 : x->g.id > y->g.id;
}

static bool parse_name(const char *n, uint64_t *id, bool *tmp)
{
	size_t len = strlen(n);
	char *end;

	if (strncmp(n, "seg-", 4) != 0 || (len != 20 && len != 24))
		return false;
	if (len == 24 && strcmp(n + 20, ".tmp") != 0)
		return false;
	for (size_t i = 4; i < 20; i++)
		if (!((n[i] >= '0' && n[i] <= '9') ||
		      (n[i] >= 'a' && n[i] <= 'f')))
			return false;
	*id = strtoull(n + 4, &end, 16);
	*tmp = len == 24;
	return *id != 0;
}

/* The segment files, temporaries removed, sorted by id. */
static int list_segments(struct segstore *s, struct loaded **out, size_t *n,
			 struct seg_report *rep, char *msg, size_t msglen)
{
	struct loaded *l = NULL, *p;
	size_t cap = 0, cnt = 0;
	struct dirent *de;
	DIR *d = NULL;
	uint64_t id;
	bool tmp;
	int fd, ret = 0;

	fd = dup(s->sd->fd);
	if (fd < 0 || !(d = fdopendir(fd))) {
		ret = -errno;
		if (fd >= 0)
			close(fd);
		errmsg_set(msg, msglen, "list segments: %s", strerror(-ret));
		return ret;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!parse_name(de->d_name, &id, &tmp)) {
			rep->unknown++;
			continue;
		}
		if (tmp) {
			/* A compaction that never reached its rename. */
			ret = statedir_unlink(s->sd, de->d_name);
			if (ret < 0) {
				errmsg_set(msg, msglen, "remove %s: %s",
					   de->d_name, strerror(-ret));
				goto out;
			}
			rep->tmp_removed++;
			s->dir_dirty = true;
			continue;
		}
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			p = realloc(l, cap * sizeof(*l));
			if (!p) {
				ret = -ENOMEM;
				goto out;
			}
			l = p;
		}
		memset(&l[cnt], 0, sizeof(l[cnt]));
		l[cnt].g.id = id;
		l[cnt].g.fd = -1;
		cnt++;
	}
	if (cnt)
		qsort(l, cnt, sizeof(*l), cmp_loaded);
out:
	closedir(d);
	if (ret < 0) {
		free(l);
		return ret;
	}
	*out = l;
	*n = cnt;
	return 0;
}

/* Is there a valid record anywhere in b[from, size)? Its offset. */
static bool valid_after(const uint8_t *b, uint64_t size, uint64_t from,
			uint64_t *at)
{
	for (uint64_t o = from; o + SEG_REC_HDR <= size; o++)
		if (b[o] == 0x56 && record_at(b, size, o)) {
			*at = o;
			return true;
		}
	return false;
}

/* Read one segment's records (mapped at b) into the table. */
static int read_segment(struct segstore *s, struct seg *g, const uint8_t *b,
			bool may_tear, struct seg_report *rep, char *msg,
			size_t msglen)
{
	uint64_t off = SEG_HDR, ahead = SEG_HDR, rl, at, seq;
	char name[32];
	struct entry *e;
	int ret;

	seg_name(name, sizeof(name), g->id, false);
	for (int k = 0; k < PREFETCH_AHEAD; k++)
		ahead = next_record(b, g->size, ahead);
	while (off < g->size) {
		prefetch_key(s, b, g->size, ahead);
		ahead = next_record(b, g->size, ahead);
		rl = record_at(b, g->size, off);
		if (!rl) {
			if (!may_tear ||
			    valid_after(b, g->size, off + 1, &at)) {
				errmsg_set(msg, msglen,
					   "corrupt record in %s at offset "
					   "%" PRIu64,
					   name, off);
				return -EBADMSG;
			}
			/* The torn tail of the last append: never acked. */
			if (ftruncate(g->fd, (off_t)off) < 0 ||
			    fdatasync(g->fd) < 0) {
				ret = -errno;
				errmsg_set(msg, msglen, "cut %s: %s", name,
					   strerror(errno));
				return ret;
			}
			rep->torn_bytes = g->size - off;
			rep->torn_offset = off;
			snprintf(rep->torn_file, sizeof(rep->torn_file), "%s",
				 name);
			g->size = off;
			break;
		}
		seq = get64(b + off + 8);
		if (seq >= s->next_seq)
			s->next_seq = seq + 1;
		if (get32(b + off + 4) == F_SEAL) {
			/* Only ever the last record, naming its own offset. */
			if (off + rl != g->size ||
			    get64(b + off + SEG_REC_HDR) != off) {
				errmsg_set(msg, msglen,
					   "corrupt record in %s at offset "
					   "%" PRIu64 " (a misplaced seal)",
					   name, off);
				return -EBADMSG;
			}
			g->sealed = true;
			g->dead += rl;
			rep->records++;
			off += rl;
			continue;
		}
		e = find_or_add(s, b + off + 16);
		if (!e)
			return -ENOMEM;
		if (e->seq == seq) {
			errmsg_set(msg, msglen,
				   "record %" PRIu64 " in %s at offset %" PRIu64
				   " appears twice",
				   seq, name, off);
			return -EBADMSG;
		}
		if (e->seq > seq) {
			/* An older record of the key: dead, a shadow. */
			g->dead += rl;
			e->shadows++;
		} else {
			/* Idle tombstones are settled once all is read. */
			if (e->seq) {
				add_dead(s, e->seg, e->len);
				e->shadows++;
			}
			e->seq = seq;
			e->seg = g->id;
			e->off = off;
			e->len = (uint32_t)rl;
			e->tomb = get32(b + off + 4) & F_TOMB;
		}
		rep->records++;
		off += rl;
	}
	if (!g->sealed && !may_tear) {
		errmsg_set(msg, msglen,
			   "corrupt segment %s: cut short at offset %" PRIu64
			   " (no seal)",
			   name, g->size);
		return -EBADMSG;
	}
	return 0;
}

static int open_loaded(struct segstore *s, struct loaded *l, char *msg,
		       size_t msglen)
{
	char name[32];
	struct stat st;
	int ret;

	seg_name(name, sizeof(name), l->g.id, false);
	l->g.fd = statedir_open(s->sd, name, O_RDWR, 0, msg, msglen);
	if (l->g.fd < 0)
		return l->g.fd;
	if (fstat(l->g.fd, &st) < 0) {
		ret = -errno;
		errmsg_set(msg, msglen, "stat %s: %s", name, strerror(errno));
		return ret;
	}
	l->g.size = (uint64_t)st.st_size;
	if (l->g.size >= SEG_HDR) {
		l->map_len = l->g.size;
		l->map = mmap(NULL, l->map_len, PROT_READ, MAP_PRIVATE, l->g.fd,
			      0);
		/* Every byte will be read (checked, then handed over): the
		 * kernel is asked for all of every segment now, so that a
		 * cold start's reads run while the first segments are
		 * handled. Advice only. */
		if (l->map != MAP_FAILED)
			(void)madvise(l->map, l->map_len, MADV_WILLNEED);
		if (l->map == MAP_FAILED) {
			l->map = NULL;
			ret = -errno;
			errmsg_set(msg, msglen, "map %s: %s", name,
				   strerror(errno));
			return ret;
		}
	}
	return 0;
}

int segstore_open(const struct statedir *sd, const struct seg_opts *o,
		  seg_load_fn load, void *ctx, struct segstore **out,
		  struct seg_report *rep, char *msg, size_t msglen)
{
	struct loaded *l = NULL;
	struct segstore *s;
	struct seg_report dummy;
	uint64_t last_append = 0, off, rl;
	size_t n = 0, i, j, total;
	struct entry *e;
	char name[32];
	int ret;

	*out = NULL;
	rep = rep ? rep : &dummy;
	memset(rep, 0, sizeof(*rep));
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->o = *o;
	if (s->o.segment_max < 4096)
		s->o.segment_max = SEG_SIZE_DEFAULT;
	s->next_seq = 1;
	s->next_id = 1;
	s->cap = 1024;
	s->tab = table_alloc(s->cap, sizeof(*s->tab));
	s->sd = sd;
	if (!s->tab) {
		ret = -ENOMEM;
		errmsg_set(msg, msglen, "out of memory");
		goto fail;
	}
	ret = list_segments(s, &l, &n, rep, msg, msglen);
	if (ret < 0)
		goto fail;
	for (i = 0; i < n; i++) {
		ret = open_loaded(s, &l[i], msg, msglen);
		if (ret < 0)
			goto fail;
		if (l[i].g.id >= s->next_id)
			s->next_id = l[i].g.id + 1;
		seg_name(name, sizeof(name), l[i].g.id, false);
		if (!l[i].map || !header_ok(l[i].map, l[i].g.id)) {
			/* Only the newest file can be a creation cut short. */
			if (i + 1 == n && l[i].g.size <= SEG_HDR) {
				ret = statedir_unlink(s->sd, name);
				if (ret < 0) {
					errmsg_set(msg, msglen, "remove %s: %s",
						   name, strerror(-ret));
					goto fail;
				}
				rep->torn_bytes += l[i].g.size;
				snprintf(rep->torn_file, sizeof(rep->torn_file),
					 "%s", name);
				s->dir_dirty = true;
				close(l[i].g.fd);
				if (l[i].map)
					munmap(l[i].map, l[i].map_len);
				n--;
				break;
			}
			errmsg_set(msg, msglen,
				   "corrupt segment header in %s at offset 0",
				   name);
			ret = -EBADMSG;
			goto fail;
		}
		l[i].g.replaces = get64(l[i].map + 16);
		if (get64(l[i].map + 24) > s->next_seq)
			s->next_seq = get64(l[i].map + 24);
		if (l[i].g.replaces == 0)
			last_append = l[i].g.id;
	}
	/* A compacted segment whose removal a crash interrupted. */
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++)
			if (l[j].g.replaces == l[i].g.id)
				l[i].superseded = true;
	for (i = 0; i < n; i++) {
		if (l[i].superseded)
			continue;
		ret = add_seg(s, &l[i].g);
		if (ret < 0)
			goto fail;
	}
	/* The key table sized once for every record (each doubling while
	 * reading would move every entry again). */
	for (i = 0, total = 0; i < n; i++)
		if (!l[i].superseded && l[i].map)
			total += count_records(l[i].map, l[i].g.size);
	while (total * 4 > s->cap * 3)
		if (grow_table(s) < 0) {
			ret = -ENOMEM;
			errmsg_set(msg, msglen, "out of memory");
			goto fail;
		}
	/* s->segs is complete: pointers into it stay valid while reading. */
	for (i = 0; i < n; i++) {
		struct seg *g = seg_by_id(s, l[i].g.id);

		if (l[i].superseded)
			continue;
		ret = read_segment(s, g, l[i].map, g->id == last_append, rep,
				   msg, msglen);
		if (ret < 0)
			goto fail;
		l[i].g.size = g->size;
	}
	/* Idle tombstones (shadowing nothing) are dead. */
	for (i = 0; i < s->cap; i++) {
		e = &s->tab[i];
		if (e->used && e->tomb && e->shadows == 0)
			add_dead(s, e->seg, e->len);
	}
	/* Hand over each key's current payload (every record was checked
	 * by read_segment, which cut the file after the last good one). */
	for (i = 0; i < n; i++) {
		uint64_t ahead = SEG_HDR;

		if (l[i].superseded)
			continue;
		for (int k = 0; k < PREFETCH_AHEAD; k++)
			ahead = next_record(l[i].map, l[i].g.size, ahead);
		for (off = SEG_HDR; off < l[i].g.size; off += rl) {
			prefetch_key(s, l[i].map, l[i].g.size, ahead);
			ahead = next_record(l[i].map, l[i].g.size, ahead);
			rl = record_len(l[i].map, off);
			e = find(s, l[i].map + off + 16);
			if (e->seq != get64(l[i].map + off + 8) || e->tomb)
				continue;
			ret = load(ctx, e->key, l[i].map + off + SEG_REC_HDR,
				   rl - SEG_REC_HDR);
			if (ret < 0) {
				errmsg_set(msg, msglen, "loading a record: %s",
					   strerror(-ret));
				goto fail;
			}
		}
	}
	for (i = 0; i < n; i++) {
		if (!l[i].superseded)
			continue;
		seg_name(name, sizeof(name), l[i].g.id, false);
		ret = statedir_unlink(s->sd, name);
		if (ret < 0) {
			errmsg_set(msg, msglen, "remove %s: %s", name,
				   strerror(-ret));
			goto fail;
		}
		rep->replaced++;
		s->dir_dirty = true;
	}
	for (i = 0; i < n; i++) {
		if (l[i].map)
			munmap(l[i].map, l[i].map_len);
		l[i].map = NULL;
		if (l[i].superseded)
			close(l[i].g.fd);
		l[i].g.fd = -1;
	}
	free(l);
	l = NULL;
	if (last_append && seg_by_id(s, last_append) &&
	    !seg_by_id(s, last_append)->sealed) {
		s->active = last_append;
	} else {
		ret = create_segment(s, s->next_id++, msg, msglen);
		if (ret < 0)
			goto fail;
	}
	if (s->dir_dirty && statedir_sync(s->sd) == 0)
		s->dir_dirty = false;
	*out = s;
	return 0;
fail:
	for (i = 0; l && i < n; i++) {
		if (l[i].map)
			munmap(l[i].map, l[i].map_len);
		/* Those handed to s are closed with it. */
		if (l[i].g.fd >= 0 && !seg_by_id(s, l[i].g.id))
			close(l[i].g.fd);
	}
	free(l);
	segstore_close(s);
	return ret;
}

void segstore_close(struct segstore *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nsegs; i++)
		if (s->segs[i].fd >= 0)
			close(s->segs[i].fd);
	free(s->segs);
	free(s->tab);
	free(s);
}

/* ---- writing ---- */

/* Whether key has a current put, counting the batch's earlier ops. */
static bool has_put(const struct segstore *s, const struct seg_op *ops,
		    size_t upto)
{
	const struct entry *e;

	for (size_t i = upto; i-- > 0;)
		if (memcmp(ops[i].key, ops[upto].key, SEG_KEY) == 0)
			return !ops[i].del;
	e = find(s, ops[upto].key);
	return e->used && !e->tomb;
}

int segstore_apply(struct segstore *s, const struct seg_op *ops, size_t n,
		   char *msg, size_t msglen)
{
	uint64_t total = 0, off, at;
	bool *skip = NULL;
	uint8_t *buf = NULL;
	struct seg *a;
	struct entry *e;
	size_t i;
	int ret = 0;

	if (n == 0)
		return 0;
	skip = calloc(n, sizeof(*skip));
	if (!skip)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (!ops[i].del && ops[i].len > SEG_PAYLOAD_MAX) {
			errmsg_set(msg, msglen,
				   "record of %zu bytes (at most %u)",
				   ops[i].len, SEG_PAYLOAD_MAX);
			ret = -EINVAL;
			goto out;
		}
		skip[i] = ops[i].del && !has_put(s, ops, i);
		if (!skip[i])
			total += SEG_REC_HDR + (ops[i].del ? 0 : ops[i].len);
	}
	if (total == 0)
		goto out;
	/* Room in the table first, so nothing can fail after the write. */
	while ((s->used + n) * 4 > s->cap * 3)
		if (grow_table(s) < 0) {
			ret = -ENOMEM;
			goto out;
		}
	a = seg_by_id(s, s->active);
	if (a->size > SEG_HDR && a->size + total > s->o.segment_max) {
		ret = rotate(s, msg, msglen);
		if (ret < 0)
			goto out;
		a = seg_by_id(s, s->active);
	}
	buf = malloc(total);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0, off = 0; i < n; i++) {
		if (skip[i])
			continue;
		make_record(buf + off, s->next_seq + i, ops[i].key,
			    ops[i].del ? F_TOMB : 0, ops[i].payload,
			    ops[i].del ? 0 : (uint32_t)ops[i].len);
		off += SEG_REC_HDR + (ops[i].del ? 0 : ops[i].len);
	}
	ret = fdio_pwrite(a->fd, buf, total, a->size);
	if (ret < 0) {
		errmsg_set(msg, msglen, "append to segment: %s",
			   strerror(-ret));
		/* Cut back what part of the batch reached the file. */
		if (ftruncate(a->fd, (off_t)a->size) < 0)
			errmsg_set(msg, msglen,
				   "append to segment: %s; cut back: %s",
				   strerror(-ret), strerror(errno));
		goto out;
	}
	for (i = 0, at = a->size; i < n; i++) {
		uint32_t rl;

		if (skip[i])
			continue;
		rl = SEG_REC_HDR + (ops[i].del ? 0 : (uint32_t)ops[i].len);
		e = find_or_add(s, ops[i].key);
		supersede(s, e, s->next_seq + i, a->id, at, rl, ops[i].del);
		/* A tombstone shadowing nothing is dead at once. */
		if (ops[i].del && e->shadows == 0)
			a->dead += rl;
		at += rl;
	}
	a->size += total;
	s->next_seq += n;
out:
	free(skip);
	free(buf);
	return ret;
}

int segstore_sync(struct segstore *s, char *msg, size_t msglen)
{
	struct seg *a = seg_by_id(s, s->active);

	if (fdatasync(a->fd) < 0) {
		errmsg_set(msg, msglen, "sync segment: %s", strerror(errno));
		return -errno;
	}
	if (s->dir_dirty) {
		int ret = statedir_sync(s->sd);

		if (ret < 0) {
			errmsg_set(msg, msglen, "sync segment directory: %s",
				   strerror(-ret));
			return ret;
		}
		s->dir_dirty = false;
	}
	return 0;
}

bool segstore_has(const struct segstore *s, const uint8_t key[SEG_KEY])
{
	const struct entry *e = find(s, key);

	return e->used && !e->tomb;
}

void segstore_stats(const struct segstore *s, struct seg_stats *st)
{
	size_t i;

	memset(st, 0, sizeof(*st));
	for (i = 0; i < s->nsegs; i++) {
		st->disk_bytes += s->segs[i].size;
		st->dead_bytes += s->segs[i].dead;
	}
	for (i = 0; i < s->cap; i++) {
		const struct entry *e = &s->tab[i];

		if (!e->used)
			continue;
		if (!e->tomb) {
			st->keys++;
			st->live_bytes += e->len;
		} else if (e->shadows) {
			st->tombstones++;
		}
	}
	st->segments = (uint32_t)s->nsegs;
	st->compactions = s->compactions;
}

/* ---- compaction ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int segstore_compact_plan(struct segstore *s, struct seg_compact **out,
			  char *msg, size_t msglen)
{
	struct seg_stats st;
	struct seg *g, *best = NULL;
	struct seg_compact *c;
	bool pressure;
	size_t i, cap = 0;
	int ret;

	*out = NULL;
	if (s->compacting)
		return 0;
	segstore_stats(s, &st);
	pressure = st.disk_bytes * 10 > (st.live_bytes + SEG_HDR) * 13;
	for (i = 0; i < s->nsegs; i++) {
		g = &s->segs[i];
		if (g->dead == 0)
			continue;
		/* More than half dead, or the most dead under pressure. */
		if (g->dead * 2 <= g->size - SEG_HDR && !pressure)
			continue;
		if (!best || g->dead > best->dead)
			best = g;
	}
	if (!best)
		return 0;
	if (best->id == s->active) {
		uint64_t id = best->id;

		ret = rotate(s, msg, msglen);
		if (ret < 0)
			return ret;
		best = seg_by_id(s, id);
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = c->out_fd = -1;
	c->sd = s->sd;
	c->victim = best->id;
	c->size = best->size;
	c->out = s->next_id++;
	c->seal_seq = s->next_seq++;
	/* Keep current puts and tombstones that still shadow something. */
	for (i = 0; i < s->cap; i++) {
		struct entry *e = &s->tab[i];

		if (!e->used || e->seg != c->victim || (e->tomb && !e->shadows))
			continue;
		if (c->nkeep == cap) {
			uint64_t *p;

			cap = cap ? cap * 2 : 256;
			p = realloc(c->keep, cap * sizeof(*p));
			if (!p) {
				ret = -ENOMEM;
				goto fail;
			}
			c->keep = p;
		}
		c->keep[c->nkeep++] = e->off;
	}
	if (c->nkeep)
		qsort(c->keep, c->nkeep, sizeof(*c->keep), cmp_u64);
	c->fd = fcntl(best->fd, F_DUPFD_CLOEXEC, 3);
	if (c->fd < 0) {
		ret = -errno;
		errmsg_set(msg, msglen, "compaction: %s", strerror(errno));
		goto fail;
	}
	s->compacting = true;
	*out = c;
	return 1;
fail:
	if (c->fd >= 0)
		close(c->fd);
	free(c->keep);
	free(c);
	return ret;
}

int segcompact_run(struct seg_compact *c, char *msg, size_t msglen)
{
	char name[32], tmp[32], vname[32];
	uint8_t h[SEG_HDR], *map = NULL;
	uint64_t off, rl, pos = SEG_HDR;
	size_t k = 0, cap = 0;
	struct crec *p;
	int ret = 0;

	seg_name(name, sizeof(name), c->out, false);
	seg_name(tmp, sizeof(tmp), c->out, true);
	seg_name(vname, sizeof(vname), c->victim, false);
	map = mmap(NULL, c->size, PROT_READ, MAP_PRIVATE, c->fd, 0);
	if (map == MAP_FAILED) {
		map = NULL;
		ret = -errno;
		errmsg_set(msg, msglen, "map %s: %s", vname, strerror(errno));
		goto out;
	}
	c->out_fd = statedir_open(c->sd, tmp, O_RDWR | O_CREAT | O_EXCL, 0600,
				  msg, msglen);
	if (c->out_fd < 0) {
		ret = c->out_fd;
		c->out_fd = -1;
		goto out;
	}
	make_header(h, c->out, c->victim, 0);
	ret = fdio_pwrite(c->out_fd, h, SEG_HDR, 0);
	for (off = SEG_HDR; ret == 0 && off < c->size; off += rl) {
		rl = record_at(map, c->size, off);
		if (!rl) {
			errmsg_set(msg, msglen,
				   "corrupt record in %s at offset %" PRIu64,
				   vname, off);
			ret = -EBADMSG;
			goto out;
		}
		if (get32(map + off + 4) == F_SEAL)
			continue; /* the new segment gets its own */
		if (c->nrecs == cap) {
			cap = cap ? cap * 2 : 1024;
			p = realloc(c->recs, cap * sizeof(*p));
			if (!p) {
				ret = -ENOMEM;
				goto out;
			}
			c->recs = p;
		}
		p = &c->recs[c->nrecs++];
		memcpy(p->key, map + off + 16, SEG_KEY);
		p->seq = get64(map + off + 8);
		p->len = (uint32_t)rl;
		while (k < c->nkeep && c->keep[k] < off)
			k++;
		p->kept = k < c->nkeep && c->keep[k] == off;
		if (!p->kept)
			continue;
		p->newoff = pos;
		ret = fdio_pwrite(c->out_fd, map + off, rl, pos);
		pos += rl;
	}
	if (ret == 0) {
		uint8_t seal[SEG_REC_HDR + SEAL_LEN];

		make_seal(seal, c->seal_seq, pos);
		ret = fdio_pwrite(c->out_fd, seal, sizeof(seal), pos);
		pos += sizeof(seal);
	}
	if (ret < 0) {
		errmsg_set(msg, msglen, "write %s: %s", tmp, strerror(-ret));
		goto out;
	}
	c->out_size = pos;
	ret = fdatasync(c->out_fd) < 0 ? -errno : 0;
	if (ret == 0)
		ret = statedir_rename(c->sd, tmp, name);
	if (ret < 0) {
		errmsg_set(msg, msglen, "install %s: %s", name, strerror(-ret));
		goto out;
	}
	c->renamed = true;
	/* From here on the new segment is the truth; the old one goes. */
	ret = statedir_sync(c->sd);
	if (ret == 0)
		ret = statedir_unlink(c->sd, vname);
	if (ret == 0)
		ret = statedir_sync(c->sd);
	if (ret < 0)
		errmsg_set(msg, msglen,
			   "remove %s: %s (the next start removes it)", vname,
			   strerror(-ret));
out:
	if (map)
		munmap(map, c->size);
	if (!c->renamed && c->out_fd >= 0) {
		close(c->out_fd);
		c->out_fd = -1;
		statedir_unlink(c->sd, tmp);
	}
	c->err = ret;
	return ret;
}

static void compact_free(struct seg_compact *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->out_fd >= 0)
		close(c->out_fd);
	free(c->keep);
	free(c->recs);
	free(c);
}

int segstore_compact_finish(struct segstore *s, struct seg_compact *c,
			    char *msg, size_t msglen)
{
	struct seg g = {.id = c->out,
			.replaces = c->victim,
			.fd = c->out_fd,
			.size = c->out_size};
	struct entry *e;
	struct crec *r;
	size_t i;
	int ret = c->err;

	s->compacting = false;
	if (!c->renamed) {
		errmsg_set(msg, msglen, "compaction failed; nothing changed");
		compact_free(c);
		return ret ? ret : -EIO;
	}
	if (add_seg(s, &g) < 0) {
		/* Keep serving: the new file is whole; the next start reads it.
		 */
		compact_free(c);
		return -ENOMEM;
	}
	c->out_fd = -1;
	remove_seg(s, c->victim);
	/* Kept records move; their dead bytes are counted below. */
	for (i = 0; i < c->nrecs; i++) {
		r = &c->recs[i];
		e = find(s, r->key);
		if (r->kept && e->used && e->seq == r->seq) {
			e->seg = c->out;
			e->off = r->newoff;
		}
	}
	/* Dropped records: one shadow fewer; a tombstone may idle now. */
	for (i = 0; i < c->nrecs; i++) {
		r = &c->recs[i];
		if (r->kept)
			continue;
		e = find(s, r->key);
		if (!e->used)
			continue;
		if (e->seq == r->seq) {
			drop_entry(s, e); /* an idle tombstone, gone */
			continue;
		}
		if (e->shadows)
			e->shadows--;
		if (e->tomb && e->shadows == 0 && e->seg != c->out)
			add_dead(s, e->seg, e->len);
	}
	/* The new segment's dead: kept records superseded or idle since. */
	for (i = 0; i < c->nrecs; i++) {
		r = &c->recs[i];
		if (!r->kept)
			continue;
		e = find(s, r->key);
		if (!e->used || e->seq != r->seq || (e->tomb && !e->shadows))
			add_dead(s, c->out, r->len);
	}
	s->compactions++;
	compact_free(c);
	if (ret < 0)
		errmsg_set(msg, msglen, "compaction done, but %s",
			   "the old segment could not be removed");
	return 0;
}

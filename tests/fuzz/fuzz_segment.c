/*
 * Fuzz harness of segment storage (daemon/write/segment.c) on real files.
 * Input: a mode byte (bits 0-1: damage none / truncate / flip a byte /
 * garbage appended; bit 2: two segments, the first sealed; bit 3: damage
 * the sealed one), two bytes of damage position, then records, each an
 * op byte (bit 0 tombstone, bits 1-3 the key), a length byte and the
 * payload. The harness writes the files with valid checksums, damages
 * them, opens the store and checks against a model: damage in the last
 * record of the active segment (or a cut inside it, or garbage after it)
 * loses exactly that tail; damage anywhere else is -EBADMSG; the loaded
 * keys are the model's latest puts. Then it writes, compacts everything
 * and reopens, and the model still holds.
 */
#include "fuzz.h"

#include "crc32c.h"
#include "segment.h"
#include "statedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEYS 8
#define RECS 64

struct rec {
	bool tomb;
	unsigned key;
	uint64_t seq;
	const uint8_t *p;
	size_t len;
	size_t off; /* in its file */
	int file;
};

static char gitdir[64], dir[96];
static struct statedir root, SD;
static int dfd = -1;
static struct {
	const uint8_t *p[KEYS];
	size_t len[KEYS];
	bool seen[KEYS], has[KEYS];
} M;

static void p32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void p64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void key_of(unsigned k, uint8_t *key)
{
	memset(key, 0x5a, SEG_KEY);
	key[0] = (uint8_t)k;
}

static int load(void *ctx, const uint8_t key[SEG_KEY], const void *p,
		size_t len)
{
	(void)ctx;
	FUZZ_CHECK(key[0] < KEYS && !M.seen[key[0]] && M.has[key[0]]);
	FUZZ_CHECK(len == M.len[key[0]]);
	FUZZ_CHECK(len == 0 || memcmp(p, M.p[key[0]], len) == 0);
	M.seen[key[0]] = true;
	return 0;
}

static void clean(void)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			unlinkat(dfd, de->d_name, 0);
	if (d)
		closedir(d);
}

static void write_file(const char *name, const uint8_t *b, size_t n)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, b, n) == (ssize_t)n);
	close(fd);
}

static bool has_magic(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i + 4 <= n; i++)
		if (!memcmp(b + i, "VMSR", 4))
			return true;
	return false;
}

static void reopen_check(struct segstore **s)
{
	struct seg_opts o = {4096};
	char msg[256];

	segstore_close(*s);
	memset(M.seen, 0, sizeof(M.seen));
	FUZZ_CHECK(segstore_open(&SD, &o, load, NULL, s, NULL, msg,
				 sizeof(msg)) == 0);
	for (int k = 0; k < KEYS; k++)
		FUZZ_CHECK(M.seen[k] == M.has[k]);
}

/* Append a record (valid checksum) to file b at *len. */
static void emit(uint8_t *b, size_t *len, uint32_t flags, uint64_t seq,
		 const uint8_t *key, const uint8_t *p, size_t n)
{
	uint8_t *r = b + *len;

	p32(r, 0x52534d56u);
	p32(r + 4, flags);
	p64(r + 8, seq);
	memcpy(r + 16, key, SEG_KEY);
	p32(r + 32, (uint32_t)n);
	memcpy(r + SEG_REC_HDR, p, n);
	p32(r + 36, crc32c(crc32c(0, r + 4, 32), r + SEG_REC_HDR, n));
	*len += SEG_REC_HDR + n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t files[2][SEG_HDR + (RECS + 1) * (SEG_REC_HDR + 255)];
	static struct rec r[RECS];
	static const uint8_t zero[SEG_KEY];
	size_t flen[2] = {SEG_HDR, SEG_HDR}, nr = 0, i, pos, start = 0, n;
	uint8_t key[SEG_KEY], mode, seal[8];
	struct segstore *s = NULL;
	struct seg_opts o = {4096};
	struct seg_compact *c;
	int damaged, rc, fail = 0, nfiles;
	bool damage = false, chance = false;
	char msg[256];

	if (size < 3)
		return 0;
	if (dfd < 0) {
		snprintf(gitdir, sizeof(gitdir), "/tmp/vmem-fuzz-seg-XXXXXX");
		FUZZ_CHECK(mkdtemp(gitdir) != NULL);
		FUZZ_CHECK(statedir_init(&root, gitdir, NULL, 0, NULL, 0) == 0);
		FUZZ_CHECK(statedir_sub(&root, "segments", true, &SD, NULL,
					0) == 0);
		snprintf(dir, sizeof(dir), "%s/vmem/segments", gitdir);
		dfd = SD.fd;
	}
	clean();
	memset(&M, 0, sizeof(M));
	mode = data[0];
	pos = (size_t)data[1] | (size_t)data[2] << 8;
	nfiles = mode & 4 ? 2 : 1;
	for (i = 3; i + 2 <= size && nr < RECS;) {
		n = data[i + 1];
		if (i + 2 + n > size)
			n = size - i - 2;
		r[nr].tomb = data[i] & 1;
		r[nr].key = (data[i] >> 1) & 7;
		r[nr].seq = nr + 1;
		r[nr].p = data + i + 2;
		r[nr].len = r[nr].tomb ? 0 : n;
		nr++;
		i += 2 + n;
	}
	for (int f = 0; f < 2; f++) {
		uint8_t *h = files[f];

		p32(h, 0x47534d56u);
		p32(h + 4, 1);
		p64(h + 8, (uint64_t)f + 1);
		p64(h + 16, 0);
		p64(h + 24, 0);
		p32(h + 32, crc32c(0, h, 32));
		p32(h + 36, 0);
	}
	/* The first half in a sealed file when there are two. */
	for (i = 0; i < nr; i++) {
		int f = nfiles == 2 && i >= nr / 2 ? 1 : 0;

		r[i].file = f;
		r[i].off = flen[f];
		key_of(r[i].key, key);
		emit(files[f], &flen[f], r[i].tomb, r[i].seq, key, r[i].p,
		     r[i].len);
	}
	if (nfiles == 2) {
		p64(seal, flen[0]);
		emit(files[0], &flen[0], 2, nr + 1, zero, seal, 8);
	}
	damaged = nfiles == 2 && !(mode & 8) ? 1 : 0;
	switch (mode & 3) {
	case 1: /* cut */
		if (pos % (flen[damaged] + 1) < flen[damaged]) {
			start = pos % (flen[damaged] + 1);
			chance = has_magic(files[damaged] + start,
					   flen[damaged] - start);
			flen[damaged] = start;
			damage = true;
		}
		break;
	case 2: /* flip a bit */
		start = pos % flen[damaged];
		files[damaged][start] ^= (uint8_t)(1u << (data[0] >> 5));
		chance = has_magic(files[damaged] + start,
				   flen[damaged] - start);
		damage = true;
		break;
	case 3: /* garbage after the last record */
		start = flen[damaged];
		n = pos % 64 + 1;
		for (i = 0; i < n; i++)
			files[damaged][flen[damaged] + i] =
				(uint8_t)(pos * 31 + i * 7);
		chance = has_magic(files[damaged] + start, n);
		flen[damaged] += n;
		damage = true;
		break;
	}
	/* What must happen, and which records survive. */
	if (damage && damaged == 0 && nfiles == 2) {
		fail = 1; /* anything wrong in a sealed segment */
	} else if (damage && (mode & 3) == 2) {
		bool last = true;

		for (i = 0; i < nr; i++)
			if (r[i].file == damaged && r[i].off > start)
				last = false;
		/* A damaged header with records, or a record before others. */
		if (start < SEG_HDR ? flen[damaged] > SEG_HDR : !last)
			fail = 1;
	}
	for (i = 0; i < nr; i++) {
		bool lost = damage && r[i].file == damaged &&
			    ((mode & 3) != 3) &&
			    (start < SEG_HDR ||
			     r[i].off + SEG_REC_HDR + r[i].len > start);

		if (lost)
			continue;
		M.has[r[i].key] = !r[i].tomb;
		M.p[r[i].key] = r[i].p;
		M.len[r[i].key] = r[i].len;
	}
	write_file("seg-0000000000000001", files[0], flen[0]);
	if (nfiles == 2)
		write_file("seg-0000000000000002", files[1], flen[1]);
	memset(M.seen, 0, sizeof(M.seen));
	rc = segstore_open(&SD, &o, load, NULL, &s, NULL, msg, sizeof(msg));
	if (fail) {
		FUZZ_CHECK(rc == -EBADMSG);
		FUZZ_CHECK(strstr(msg, "seg-000000000000000") != NULL);
		return 0;
	}
	if (rc != 0) {
		/* Only an embedded record could make a tail look like more. */
		FUZZ_CHECK(rc == -EBADMSG && chance);
		return 0;
	}
	for (int k = 0; k < KEYS; k++)
		FUZZ_CHECK(M.seen[k] == M.has[k]);
	/* Write, compact everything, reopen. */
	key_of(3, key);
	{
		struct seg_op op = {key, data, size > 40 ? 40 : size, false};

		FUZZ_CHECK(segstore_apply(s, &op, 1, msg, sizeof(msg)) == 0);
		M.has[3] = true;
		M.p[3] = data;
		M.len[3] = op.len;
	}
	FUZZ_CHECK(segstore_sync(s, msg, sizeof(msg)) == 0);
	while (segstore_compact_plan(s, &c, msg, sizeof(msg)) == 1) {
		FUZZ_CHECK(segcompact_run(c, msg, sizeof(msg)) == 0);
		FUZZ_CHECK(segstore_compact_finish(s, c, msg, sizeof(msg)) ==
			   0);
	}
	reopen_check(&s);
	segstore_close(s);
	return 0;
}

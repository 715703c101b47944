/*
 * Unit tests of daemon/write/wal.c: append and replay, torn tails cut at every
 * byte, corruption in the middle refused, batch numbering across reopen.
 * Every test works in its own temporary directory, removed afterwards.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wal.h"

#define MAXREC 64

struct seen {
	size_t n;
	char *rec[MAXREC];
	size_t len[MAXREC];
	int fail_at; /* return an error on this record (1-based), 0: never */
};

static char tmpdir[64]; /* stands for a git directory */
static char logpath[128];
static struct statedir sd; /* tmpdir/vmem */

static void setup(void)
{
	char msg[512] = "";

	strcpy(tmpdir, "/tmp/vmem-test-wal-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	ck_assert_msg(statedir_init(&sd, tmpdir, NULL, 0, msg, sizeof(msg)) ==
			      0,
		      "%s", msg);
	snprintf(logpath, sizeof(logpath), "%s/wal", sd.path);
}

static void teardown(void)
{
	char other[160];

	statedir_done(&sd);
	unlink(logpath);
	snprintf(other, sizeof(other), "%s.tmp", logpath);
	unlink(other);
	snprintf(other, sizeof(other), "%s/target", tmpdir);
	unlink(other);
	snprintf(other, sizeof(other), "%s/vmem", tmpdir);
	rmdir(other);
	rmdir(tmpdir);
}

static int collect_cb(void *ctx, const char *p, size_t len, char *errmsg,
		      size_t errn)
{
	struct seen *s = ctx;

	if (s->fail_at && (int)s->n + 1 == s->fail_at) {
		snprintf(errmsg, errn, "record %zu refused", s->n + 1);
		return -ECANCELED;
	}
	ck_assert_uint_lt(s->n, MAXREC);
	s->rec[s->n] = malloc(len + 1);
	ck_assert_ptr_nonnull(s->rec[s->n]);
	memcpy(s->rec[s->n], p, len);
	s->rec[s->n][len] = '\0';
	s->len[s->n] = len;
	s->n++;
	return 0;
}

static void seen_free(struct seen *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->rec[i]);
	memset(s, 0, sizeof(*s));
}

/* Append one batch of NUL-terminated strings (NULL-terminated list). */
static void append(struct wal *w, const char *const *strs)
{
	struct iovec iov[16];
	size_t n = 0;

	for (; strs[n]; n++) {
		iov[n].iov_base = (void *)strs[n];
		iov[n].iov_len = strlen(strs[n]);
	}
	ck_assert_int_eq(wal_append(w, iov, n), 0);
}

static off_t file_size(void)
{
	struct stat st;

	ck_assert_int_eq(stat(logpath, &st), 0);
	return st.st_size;
}

/* The end of the records when the log was last closed by close_log. */
static size_t log_end;

/* Close, remembering where the records end: the file goes on with the
 * zeros the log grows into, which slurp leaves out. */
static void close_log(struct wal *w)
{
	log_end = w->end;
	wal_close(w);
}

/* The log's records, as close_log left them. */
static unsigned char *slurp(size_t *len)
{
	FILE *f = fopen(logpath, "rb");
	unsigned char *buf;
	long n;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	ck_assert_uint_ge((size_t)n, log_end);
	*len = log_end;
	return buf;
}

static void spit(const unsigned char *buf, size_t len)
{
	FILE *f = fopen(logpath, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static int reopen(struct wal *w, struct seen *s, struct wal_report *rep,
		  char *msg, size_t msgn)
{
	seen_free(s);
	const struct wal_replay replay = {.record = collect_cb, .ctx = s};

	return wal_open(w, &sd, "wal", &replay, rep, msg, msgn);
}

START_TEST(test_append_replay)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	char msg[256] = "";
	struct stat st;
	uint64_t end;

	ck_assert_int_eq(reopen(&w, &s, &rep, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_uint_eq(rep.records, 0);
	ck_assert_uint_eq(w.next_batch, 1);
	ck_assert_int_eq(stat(logpath, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);

	append(&w, (const char *const[]){"alpha", "beta", NULL});
	append(&w, (const char *const[]){"gamma", NULL});
	append(&w, (const char *const[]){"", "{\"x\":1}", "delta", NULL});
	ck_assert_uint_eq(w.next_batch, 4);
	end = w.end;
	/* The file runs ahead of the records, in zeros. */
	ck_assert_uint_eq(file_size(), 1 << 20);
	wal_close(&w);
	ck_assert_int_eq(w.fd, -1);

	ck_assert_int_eq(reopen(&w, &s, &rep, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(rep.records, 6);
	ck_assert_uint_eq(rep.torn_bytes, 0);
	ck_assert_uint_eq(s.n, 6);
	ck_assert_str_eq(s.rec[0], "alpha");
	ck_assert_str_eq(s.rec[1], "beta");
	ck_assert_str_eq(s.rec[2], "gamma");
	ck_assert_uint_eq(s.len[3], 0);
	ck_assert_str_eq(s.rec[4], "{\"x\":1}");
	ck_assert_str_eq(s.rec[5], "delta");
	ck_assert_uint_eq(w.next_batch, 4);
	ck_assert_uint_eq(w.end, end); /* the zeros are not a torn tail */
	ck_assert_uint_eq(file_size(), 1 << 20);
	wal_close(&w);
	wal_close(&w); /* twice is fine */
	seen_free(&s);
}
END_TEST

START_TEST(test_binary_payload)
{
	struct wal w;
	struct seen s = {0};
	unsigned char big[70000];
	struct iovec iov = {big, sizeof(big)};

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 7 + 3);
	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	ck_assert_int_eq(wal_append(&w, &iov, 1), 0);
	wal_close(&w);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_uint_eq(s.len[0], sizeof(big));
	ck_assert_int_eq(memcmp(s.rec[0], big, sizeof(big)), 0);
	wal_close(&w);
	seen_free(&s);
}
END_TEST

START_TEST(test_oversized_refused)
{
	struct wal w;
	char c = 'x';
	struct iovec iov = {&c, 64u * 1024 * 1024 + 1};

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	ck_assert_int_eq(wal_append(&w, &iov, 1), -EMSGSIZE);
	ck_assert_uint_eq(w.end, 0);
	ck_assert_int_eq(file_size(), 0);
	wal_close(&w);
}
END_TEST

START_TEST(test_truncate)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"one", NULL});
	append(&w, (const char *const[]){"two", NULL});
	ck_assert_int_eq(wal_truncate(&w), 0);
	ck_assert_uint_eq(w.end, 0);
	ck_assert_uint_eq(w.next_batch, 3);
	ck_assert_int_eq(file_size(), 0);
	wal_close(&w);

	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_uint_eq(rep.records, 0);
	ck_assert_uint_eq(rep.torn_bytes, 0);
	append(&w, (const char *const[]){"three", NULL});
	wal_close(&w);
	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(s.rec[0], "three");
	wal_close(&w);
	seen_free(&s);
}
END_TEST

START_TEST(test_torn_every_offset)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	unsigned char *orig;
	size_t len, last_start;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"first", "second", NULL});
	last_start = w.end;
	/* The last batch holds several records: a cut anywhere in it, on a
	 * record boundary too, drops it whole (all or nothing). */
	append(&w, (const char *const[]){"the last batch, torn", "and its",
					 "end", NULL});
	close_log(&w);
	orig = slurp(&len);
	ck_assert_uint_gt(len, last_start);

	for (size_t cut = last_start; cut < len; cut++) {
		spit(orig, cut);
		ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
		ck_assert_uint_eq(s.n, 2);
		ck_assert_str_eq(s.rec[0], "first");
		ck_assert_str_eq(s.rec[1], "second");
		ck_assert_uint_eq(rep.records, 2);
		ck_assert_uint_eq(rep.torn_bytes, cut - last_start);
		ck_assert_uint_eq(w.end, last_start);
		ck_assert_int_eq(file_size(), (off_t)last_start);
		ck_assert_uint_eq(w.next_batch, 2);
		wal_close(&w);
	}
	free(orig);
	seen_free(&s);
}
END_TEST

START_TEST(test_garbage_tail)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	unsigned char *orig, *buf;
	size_t len, good;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"kept", NULL});
	append(&w, (const char *const[]){"kept too", NULL});
	close_log(&w);
	orig = slurp(&len);
	good = len;
	buf = malloc(len + 4096);
	ck_assert_ptr_nonnull(buf);
	memcpy(buf, orig, len);
	for (size_t i = 0; i < 4096; i++)
		buf[len + i] = (unsigned char)(i * 31 + 17);
	/* Begin the garbage with a copy of a valid header to make it harder. */
	memcpy(buf + len, orig, 16);
	spit(buf, len + 4096);

	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_str_eq(s.rec[1], "kept too");
	ck_assert_uint_eq(rep.torn_bytes, 4096);
	ck_assert_int_eq(file_size(), (off_t)good);
	/* Appending after the cut works and replays. */
	append(&w, (const char *const[]){"after", NULL});
	wal_close(&w);
	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 3);
	ck_assert_str_eq(s.rec[2], "after");
	ck_assert_uint_eq(rep.torn_bytes, 0);
	wal_close(&w);
	free(orig);
	free(buf);
	seen_free(&s);
}
END_TEST

/* A byte flipped in a middle record, a later complete batch after it. */
START_TEST(test_middle_corruption)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	unsigned char *orig;
	char msg[256] = "";
	size_t len, mid, offs[3];
	char expect[64];

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"batch one", NULL});
	mid = w.end;
	append(&w, (const char *const[]){"batch two", NULL});
	append(&w, (const char *const[]){"batch three", NULL});
	close_log(&w);
	orig = slurp(&len);

	/* payload byte, crc byte, length byte of record two */
	offs[0] = mid + 22;
	offs[1] = mid + 17;
	offs[2] = mid + 12;
	for (int i = 0; i < 3; i++) {
		orig[offs[i]] ^= 0x5a;
		spit(orig, len);
		msg[0] = '\0';
		ck_assert_int_eq(reopen(&w, &s, &rep, msg, sizeof(msg)),
				 -EBADMSG);
		ck_assert_int_eq(w.fd, -1);
		snprintf(expect, sizeof(expect), "offset %zu", mid);
		ck_assert_ptr_nonnull(strstr(msg, expect));
		/* Nothing was cut. */
		ck_assert_int_eq(file_size(), (off_t)len);
		orig[offs[i]] ^= 0x5a;
	}
	/* The same damage to the very first record is refused too. */
	orig[2] ^= 1;
	spit(orig, len);
	ck_assert_int_eq(reopen(&w, &s, &rep, msg, sizeof(msg)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(msg, "offset 0"));
	free(orig);
	seen_free(&s);
}
END_TEST

/* A batch torn inside the zeros the log grows into: the records written
 * before the crash, then zeros. Cut whole, like any torn batch. */
START_TEST(test_torn_before_zeros)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	unsigned char *orig, *buf;
	size_t len, last_start, size = 1 << 20;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"kept", NULL});
	last_start = w.end;
	append(&w, (const char *const[]){"torn 1", "torn 2", NULL});
	close_log(&w);
	orig = slurp(&len);
	buf = calloc(1, size);
	ck_assert_ptr_nonnull(buf);
	for (size_t cut = last_start + 1; cut < len; cut += 7) {
		memset(buf, 0, size);
		memcpy(buf, orig, cut);
		spit(buf, size);
		ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
		ck_assert_uint_eq(s.n, 1);
		ck_assert_uint_eq(rep.torn_bytes, size - last_start);
		ck_assert_int_eq(file_size(), (off_t)last_start);
		wal_close(&w);
	}
	free(orig);
	free(buf);
	seen_free(&s);
}
END_TEST

/* CRC-32C as the log computes it, to forge records of the old format. */
static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n)
{
	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
	}
	return ~crc;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* A log of version 0.1.0 ("VMWL", no batch end marks) left by a crash:
 * every record is replayed, none is taken for a torn batch. */
START_TEST(test_old_format_replays)
{
	static const char *const payloads[] = {"one", "two", "three"};
	unsigned char buf[256], *p = buf;
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};

	for (int i = 0; i < 3; i++) {
		size_t n = strlen(payloads[i]);

		put_le(p, 0x4c574d56u, 4);
		put_le(p + 4, 5, 8); /* one batch */
		put_le(p + 12, n, 4);
		memcpy(p + 20, payloads[i], n);
		put_le(p + 16, crc32c(crc32c(0, p + 4, 12), p + 20, n), 4);
		p += 20 + n;
	}
	spit(buf, (size_t)(p - buf));
	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 3);
	ck_assert_str_eq(s.rec[2], "three");
	ck_assert_uint_eq(rep.torn_bytes, 0);
	ck_assert_uint_eq(w.next_batch, 6);
	append(&w, (const char *const[]){"new", NULL});
	wal_close(&w);
	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 4);
	ck_assert_str_eq(s.rec[3], "new");
	wal_close(&w);
	seen_free(&s);
}
END_TEST

/* Batch N lost its last record, batch N+1 follows it whole: damage in
 * synced data (a crash cannot make this), so corrupt. */
START_TEST(test_unfinished_batch_before_later_one)
{
	struct wal w;
	struct seen s = {0};
	unsigned char *orig;
	size_t len, second;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"a1", "a2", NULL});
	second = w.end - (20 + 2);
	append(&w, (const char *const[]){"b1", NULL});
	close_log(&w);
	orig = slurp(&len);
	memmove(orig + second, orig + second + 22, len - second - 22);
	spit(orig, len - 22);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), -EBADMSG);
	ck_assert_uint_eq(s.n, 0);
	free(orig);
	seen_free(&s);
}
END_TEST

/* A record of batch N damaged, batch N+1 complete after it: corrupt. */
START_TEST(test_damage_in_batch_before_last)
{
	struct wal w;
	struct seen s = {0};
	unsigned char *orig;
	size_t len, second;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"a1", "a2", NULL});
	second = w.end - (20 + 2);
	append(&w, (const char *const[]){"b1", NULL});
	close_log(&w);
	orig = slurp(&len);
	orig[second + 20] ^= 0xff; /* payload of a2 */
	spit(orig, len);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), -EBADMSG);
	free(orig);
	seen_free(&s);
}
END_TEST

/* Damage in the very first record, a later complete batch after it: the
 * damaged record's own header proves it was synced before, so this is
 * corruption even with no valid record before it. */
START_TEST(test_damage_in_first_record)
{
	struct wal w;
	struct seen s = {0};
	unsigned char *orig;
	size_t len;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"first", NULL});
	append(&w, (const char *const[]){"second", NULL});
	close_log(&w);
	orig = slurp(&len);
	orig[20 + 2] ^= 0x01; /* payload of "first" */
	spit(orig, len);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), -EBADMSG);
	ck_assert_uint_eq(s.n, 0);
	free(orig);
	seen_free(&s);
}
END_TEST

/* Cutting the head keeps the later records, and appends go on after them. */
START_TEST(test_cut_head)
{
	struct wal w;
	struct seen s = {0};
	char tmp[4200];
	uint64_t head;
	FILE *f;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"a1", "a2", NULL});
	head = w.end;
	append(&w, (const char *const[]){"b1", NULL});
	append(&w, (const char *const[]){"c1", "c2", NULL});
	ck_assert_int_eq(wal_cut_head(&w, w.end + 1), -EINVAL);
	ck_assert_int_eq(wal_cut_head(&w, head), 0);
	append(&w, (const char *const[]){"d1", NULL});
	wal_close(&w);

	/* a leftover copy of an interrupted cut is removed at open */
	snprintf(tmp, sizeof(tmp), "%s.tmp", logpath);
	f = fopen(tmp, "w");
	ck_assert_ptr_nonnull(f);
	fputs("half a copy", f);
	fclose(f);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), 0);
	ck_assert_int_eq(access(tmp, F_OK), -1);
	ck_assert_uint_eq(s.n, 4);
	ck_assert_str_eq(s.rec[0], "b1");
	ck_assert_str_eq(s.rec[1], "c1");
	ck_assert_str_eq(s.rec[2], "c2");
	ck_assert_str_eq(s.rec[3], "d1");
	ck_assert_uint_eq(w.next_batch, 5);
	/* cutting everything empties the log */
	ck_assert_int_eq(wal_cut_head(&w, w.end), 0);
	ck_assert_uint_eq(w.end, 0);
	ck_assert_int_eq(file_size(), 0);
	wal_close(&w);
	seen_free(&s);
}
END_TEST

/* A tail of several megabytes is copied a chunk at a time, byte for
 * byte (records that straddle the chunks included). */
START_TEST(test_cut_head_big_tail)
{
	enum { N = 24, LEN = 300001 };
	static char text[N][LEN + 1];
	struct wal w;
	struct seen s = {0};
	uint64_t head;

	for (int i = 0; i < N; i++) {
		for (int k = 0; k < LEN; k++)
			text[i][k] = (char)('a' + (k * 7 + i) % 26);
		text[i][LEN] = '\0';
	}
	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"first", NULL});
	head = w.end;
	for (int i = 0; i < N; i++)
		append(&w, (const char *const[]){text[i], NULL});
	ck_assert_int_eq(wal_cut_head(&w, head), 0);
	ck_assert_uint_gt(w.end, 6u << 20);
	wal_close(&w);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), 0);
	ck_assert_uint_eq(s.n, N);
	for (int i = 0; i < N; i++)
		ck_assert_str_eq(s.rec[i], text[i]);
	wal_close(&w);
	seen_free(&s);
}
END_TEST

/* A flipped byte in the last batch (several records) counts as torn: the
 * batch goes whole. */
START_TEST(test_last_batch_flip_is_torn)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	unsigned char *orig;
	size_t len, last_start, second;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"old", NULL});
	last_start = w.end;
	append(&w, (const char *const[]){"n1", "n2", "n3", NULL});
	close_log(&w);
	orig = slurp(&len);
	second = last_start + 20 + 2;
	orig[second + 21] ^= 0x01; /* payload of n2 */
	spit(orig, len);

	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(s.rec[0], "old");
	ck_assert_uint_eq(rep.torn_bytes, len - last_start);
	ck_assert_int_eq(file_size(), (off_t)last_start);
	wal_close(&w);
	free(orig);
	seen_free(&s);
}
END_TEST

/* Records of a lower batch after a higher one: leftovers, cut as torn. */
START_TEST(test_stale_batch_is_torn)
{
	struct wal w;
	struct wal_report rep;
	struct seen s = {0};
	unsigned char *orig, *buf;
	size_t len, e1, e2;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"b1", NULL});
	e1 = w.end;
	append(&w, (const char *const[]){"b2 b2 b2", "b2 again", NULL});
	e2 = w.end;
	append(&w, (const char *const[]){"b3", NULL});
	close_log(&w);
	orig = slurp(&len);
	buf = malloc(len);
	ck_assert_ptr_nonnull(buf);
	/* b1, b3, then b2's records */
	memcpy(buf, orig, e1);
	memcpy(buf + e1, orig + e2, len - e2);
	memcpy(buf + e1 + (len - e2), orig + e1, e2 - e1);
	spit(buf, len);

	ck_assert_int_eq(reopen(&w, &s, &rep, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_str_eq(s.rec[0], "b1");
	ck_assert_str_eq(s.rec[1], "b3");
	ck_assert_uint_eq(rep.torn_bytes, e2 - e1);
	ck_assert_uint_eq(w.next_batch, 4);
	wal_close(&w);
	free(orig);
	free(buf);
	seen_free(&s);
}
END_TEST

START_TEST(test_next_batch_continues)
{
	struct wal w;
	struct seen s = {0};
	unsigned char *buf;
	size_t len, e;

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"1", NULL});
	append(&w, (const char *const[]){"2", NULL});
	append(&w, (const char *const[]){"3", NULL});
	wal_close(&w);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), 0);
	ck_assert_uint_eq(w.next_batch, 4);
	e = w.end;
	append(&w, (const char *const[]){"4", NULL});
	ck_assert_uint_eq(w.next_batch, 5);
	close_log(&w);
	/* The new record carries batch 4 on disk (little-endian at +4). */
	buf = slurp(&len);
	ck_assert_uint_eq(buf[e + 4], 4);
	for (int i = 5; i < 12; i++)
		ck_assert_uint_eq(buf[e + i], 0);
	free(buf);
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 4);
	ck_assert_str_eq(s.rec[3], "4");
	wal_close(&w);
	seen_free(&s);
}
END_TEST

START_TEST(test_callback_error_aborts)
{
	struct wal w;
	struct seen s = {0};
	const struct wal_replay collect = {.record = collect_cb, .ctx = &s};
	char msg[256] = "";

	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	append(&w, (const char *const[]){"a", "b", "c", NULL});
	wal_close(&w);
	s.fail_at = 2;
	ck_assert_int_eq(
		wal_open(&w, &sd, "wal", &collect, NULL, msg, sizeof(msg)),
		-ECANCELED);
	ck_assert_int_eq(w.fd, -1);
	ck_assert_uint_eq(s.n, 1);
	/* The callback's reason is in the message. */
	ck_assert_ptr_nonnull(strstr(msg, "record 2 refused"));
	/* The log is untouched. */
	s.fail_at = 0;
	ck_assert_int_eq(reopen(&w, &s, NULL, NULL, 0), 0);
	ck_assert_uint_eq(s.n, 3);
	wal_close(&w);
	seen_free(&s);
}
END_TEST

START_TEST(test_close_safe_and_errors)
{
	struct wal w;
	char msg[256] = "";
	char bad[200];
	struct iovec iov = {(void *)"x", 1};

	memset(&w, 0, sizeof(w));
	wal_close(&w); /* zeroed: must not close fd 0 */
	ck_assert_int_ne(fcntl(0, F_GETFD), -1);
	wal_close(NULL);
	wal_init(&w);
	ck_assert_int_eq(w.fd, -1);
	wal_close(&w);
	ck_assert_int_eq(wal_append(&w, &iov, 1), -EBADF);
	ck_assert_int_eq(wal_truncate(&w), -EBADF);
	ck_assert_int_eq(
		wal_open(&w, &sd, "no/such", NULL, NULL, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_int_eq(w.fd, -1);
	ck_assert_ptr_nonnull(strstr(msg, sd.path));
	memset(bad, 'n', sizeof(bad) - 1);
	bad[sizeof(bad) - 1] = '\0';
	ck_assert_int_eq(wal_open(&w, &sd, bad, NULL, NULL, NULL, 0),
			 -ENAMETOOLONG);
}
END_TEST

/* A log planted as a symbolic link is refused, and its target is left
 * exactly as it was (neither truncated nor written). */
START_TEST(test_symlink_refused)
{
	struct wal w;
	char msg[512] = "", target[128], got[64] = "";
	FILE *f;

	snprintf(target, sizeof(target), "%s/target", tmpdir);
	f = fopen(target, "w");
	ck_assert_ptr_nonnull(f);
	fputs("precious", f);
	fclose(f);
	ck_assert_int_eq(symlink(target, logpath), 0);
	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, msg, sizeof(msg)),
			 -ELOOP);
	ck_assert_int_eq(w.fd, -1);
	ck_assert_ptr_nonnull(strstr(msg, "symbolic link"));
	ck_assert_ptr_nonnull(strstr(msg, logpath));
	f = fopen(target, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(got, sizeof(got), f));
	fclose(f);
	ck_assert_str_eq(got, "precious");
}
END_TEST

/* A fifo in the log's place is refused without blocking; so is a log
 * that group or other may write. */
START_TEST(test_not_regular_or_open_refused)
{
	struct wal w;
	char msg[512] = "";

	ck_assert_int_eq(mkfifo(logpath, 0600), 0);
	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "not a regular file"));
	ck_assert_int_eq(unlink(logpath), 0);
	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, NULL, 0), 0);
	wal_close(&w);
	ck_assert_int_eq(chmod(logpath, 0620), 0);
	ck_assert_int_eq(wal_open(&w, &sd, "wal", NULL, NULL, msg, sizeof(msg)),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(msg, "mode 0620"));
	ck_assert_int_eq(w.fd, -1);
}
END_TEST

struct progress_seen {
	unsigned calls;
	uint64_t last_done, total, records;
	bool monotonic;
};

static void progress_cb(void *ctx, uint64_t done, uint64_t total,
			uint64_t records)
{
	struct progress_seen *p = ctx;

	if (p->calls && (done < p->last_done || records < p->records))
		p->monotonic = false;
	p->calls++;
	p->last_done = done;
	p->total = total;
	p->records = records;
}

/* Replay reports its progress: once at the start, then every
 * WAL_PROGRESS_BYTES, never backwards, out of the file's size. */
START_TEST(test_replay_progress)
{
	struct wal w;
	struct progress_seen p = {.monotonic = true};
	const struct wal_replay replay = {.progress = progress_cb, .ctx = &p};
	static char big[256 * 1024];
	struct iovec iov = {big, sizeof(big)};

	memset(big, 'x', sizeof(big));
	ck_assert_int_eq(wal_open(&w, &sd, "wal", &replay, NULL, NULL, 0), 0);
	ck_assert_uint_eq(p.calls, 0); /* an empty log: nothing to say */
	for (int i = 0; i < 12; i++)
		ck_assert_int_eq(wal_append(&w, &iov, 1), 0);
	wal_close(&w);
	ck_assert_int_eq(wal_open(&w, &sd, "wal", &replay, NULL, NULL, 0), 0);
	ck_assert(p.monotonic);
	ck_assert_uint_eq(p.total, (uint64_t)file_size());
	/* 3 MiB of records: the start, then at least two steps */
	ck_assert_uint_ge(p.calls, 3);
	ck_assert_uint_le(p.last_done, p.total);
	/* each report counts whole records of 256 KiB + header */
	ck_assert_uint_eq(p.last_done, p.records * (sizeof(big) + 20));
	ck_assert_uint_ge(p.records, 8);
	wal_close(&w);
}
END_TEST

static Suite *wal_suite(void)
{
	Suite *s = suite_create("wal");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_append_replay);
	tcase_add_test(tc, test_binary_payload);
	tcase_add_test(tc, test_oversized_refused);
	tcase_add_test(tc, test_truncate);
	tcase_add_test(tc, test_torn_every_offset);
	tcase_add_test(tc, test_garbage_tail);
	tcase_add_test(tc, test_middle_corruption);
	tcase_add_test(tc, test_damage_in_batch_before_last);
	tcase_add_test(tc, test_unfinished_batch_before_later_one);
	tcase_add_test(tc, test_old_format_replays);
	tcase_add_test(tc, test_torn_before_zeros);
	tcase_add_test(tc, test_damage_in_first_record);
	tcase_add_test(tc, test_cut_head);
	tcase_add_test(tc, test_cut_head_big_tail);
	tcase_add_test(tc, test_last_batch_flip_is_torn);
	tcase_add_test(tc, test_stale_batch_is_torn);
	tcase_add_test(tc, test_next_batch_continues);
	tcase_add_test(tc, test_callback_error_aborts);
	tcase_add_test(tc, test_close_safe_and_errors);
	tcase_add_test(tc, test_symlink_refused);
	tcase_add_test(tc, test_not_regular_or_open_refused);
	tcase_add_test(tc, test_replay_progress);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wal_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

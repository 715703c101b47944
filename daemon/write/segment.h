/*
 * Local segment storage: the records that stay on this machine (sessions,
 * messages, documents) as append-only segment files of checksummed
 * records in one directory of the state directory (statedir_sub of
 * <gitdir>/vmem), keyed by 16-byte ids.
 *
 * Files, little-endian, opened through statedir (relative to the checked
 * directory, O_NOFOLLOW | O_CLOEXEC, created 0600, refused unless regular,
 * ours and writable by no one else):
 *
 *   seg-<16 hex digits id>   header: magic "VMSG", version, id, replaces
 *                            (the id of the segment this one compacted,
 *                            0 if none), seq floor, crc32c; then records
 *   record: magic "VMSR" u32 | flags u32 (bit 0: tombstone) | seq u64 |
 *           key[16] | length u32 | crc32c u32 (over bytes 4..35 and the
 *           payload) | payload
 *
 * Every record carries a sequence number that only grows; the record of a
 * key with the highest number is its state (a put, or a tombstone once it
 * is deleted). Puts and tombstones are appended to the active segment,
 * which is sealed (synced) and replaced by a new one past segment_max.
 *
 * Opening reads every segment sequentially and hands each key's current
 * payload to a callback. A torn tail of the active segment (a record cut
 * short or garbage after the last good one, with no valid record after
 * it) is cut off and reported; damage anywhere else, or with a valid
 * record after it, is a hard error naming the file and the offset.
 *
 * Compaction rewrites a sealed segment whose records are more than half
 * dead (superseded, or tombstones shadowing nothing), or the most dead one
 * while the files hold over 1.3 times the live records: its live records
 * and the tombstones still shadowing older records elsewhere go to a new
 * segment (written as seg-<id>.tmp, synced, renamed, directory synced),
 * then the old file is removed. The new header names the segment it
 * replaces, so a crash between the rename and the removal is finished at
 * the next open (the old file removed), and records are never doubled;
 * a crash before the rename leaves a .tmp that the next open deletes.
 *
 * Blocking: every function does file I/O and belongs on the thread pool.
 * The store has one owner at a time (segstore_* functions);
 * segcompact_run touches only its plan and may run on another thread
 * while the owner appends.
 */
#ifndef VMEM_DAEMON_SEGMENT_H
#define VMEM_DAEMON_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "statedir.h"

#define SEG_KEY		 16
#define SEG_HDR		 40u
#define SEG_REC_HDR	 40u
#define SEG_PAYLOAD_MAX	 (16u << 20)
#define SEG_SIZE_DEFAULT (64ull << 20)

struct segstore;
struct seg_compact;

struct seg_opts {
	uint64_t segment_max; /* bytes before the active segment is sealed */
};

/* What opening found (for the log and server.health). */
struct seg_report {
	uint64_t records;     /* records read */
	uint64_t torn_bytes;  /* cut from the active segment's tail */
	uint64_t torn_offset; /* where the cut was */
	char torn_file[32];   /* which file ("" if none) */
	unsigned tmp_removed; /* compaction leftovers deleted */
	unsigned replaced;    /* compacted segments whose removal a crash
				 interrupted, removed now */
	unsigned unknown;     /* other entries in the directory, left */
};

struct seg_stats {
	uint64_t disk_bytes; /* all segment files */
	uint64_t live_bytes; /* current puts (headers and payloads) */
	uint64_t dead_bytes; /* superseded records, idle tombstones */
	uint64_t keys;	     /* keys with a current put */
	uint64_t tombstones; /* tombstones still shadowing older records */
	uint32_t segments;
	uint64_t compactions;
};

/* One write of a batch: a put (payload, len) or a tombstone (del). */
struct seg_op {
	const uint8_t *key;
	const void *payload;
	size_t len;
	bool del;
};

/* A key's current payload at open (borrowed for the call). 0 or -errno. */
typedef int (*seg_load_fn)(void *ctx, const uint8_t key[SEG_KEY],
			   const void *payload, size_t len);

/*
 * Open the store in the directory sd (borrowed: it must outlive the
 * store), creating the first segment if there is none, and call load for
 * each key's current payload (in no particular order). 0, or negative
 * errno with msg (corruption: -EBADMSG naming file and offset; an unsafe
 * file: -EPERM, -ELOOP, -EINVAL as statedir_open says).
 */
int segstore_open(const struct statedir *sd, const struct seg_opts *o,
		  seg_load_fn load, void *ctx, struct segstore **out,
		  struct seg_report *rep, char *msg, size_t msglen);

/* Close every file (no sync). NULL-safe. */
void segstore_close(struct segstore *s);

/*
 * Append a batch with one write (tombstones only for keys that have a
 * put; others are skipped). Not durable until segstore_sync. -EINVAL
 * (with msg) for a payload over SEG_PAYLOAD_MAX; on an I/O error nothing
 * of the batch counts and the segment is cut back.
 */
int segstore_apply(struct segstore *s, const struct seg_op *ops, size_t n,
		   char *msg, size_t msglen);

/* Make everything appended durable (fdatasync; the directory if new). */
int segstore_sync(struct segstore *s, char *msg, size_t msglen);

/* Whether key has a current put. */
bool segstore_has(const struct segstore *s, const uint8_t key[SEG_KEY]);

void segstore_stats(const struct segstore *s, struct seg_stats *st);

/*
 * Owner: pick a segment to compact (sealing the active one first if it is
 * the one); 1 with a plan in *out, 0 when none is due or one is running.
 */
int segstore_compact_plan(struct segstore *s, struct seg_compact **out,
			  char *msg, size_t msglen);

/* Any thread: write the compacted segment and remove the old one. */
int segcompact_run(struct seg_compact *c, char *msg, size_t msglen);

/*
 * Owner: account for the result of a run (or a failed run: nothing
 * changed on disk that matters, the old segment stays) and free the plan.
 */
int segstore_compact_finish(struct segstore *s, struct seg_compact *c,
			    char *msg, size_t msglen);

#endif

/*
 * The write-ahead log: the durability point of every acknowledged write.
 * Records are appended in batches; one batch is one write followed by one
 * fdatasync (group commit). Payloads are opaque bytes to this module.
 *
 * On-disk record: magic u32 | batch u64 | length u32 | crc32c u32 | payload,
 * little-endian; the top bit of length marks the last record of its batch,
 * and the crc covers batch, length and payload. Replay hands over a batch
 * only once its last record is read, so a batch is replayed whole or not at
 * all (decision.store_many relies on it). It stops at the first invalid
 * record: when no valid record of a later, complete batch follows it, the
 * rest from the unfinished batch on is a torn tail (cut off and reported);
 * otherwise the log is corrupt in the middle and opening fails (never
 * silently skipped).
 *
 * The log is a file of the state directory (statedir.h): opened, cut and
 * renamed only relative to its checked descriptor, never by path.
 *
 * Blocking: called at start-up and from the thread pool, one call at a
 * time per log.
 */
#ifndef VMEM_DAEMON_WAL_H
#define VMEM_DAEMON_WAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "statedir.h"

#define WAL_NAME_MAX 32

struct wal {
	int fd;
	const struct statedir *dir; /* where it lives (borrowed) */
	char name[WAL_NAME_MAX];    /* its name there; the cut copy: .tmp */
	uint64_t end;		    /* bytes of valid records */
	uint64_t size;		    /* of the file: the records, then zeros */
	uint64_t next_batch;	    /* sequence number of the next batch */
};

struct wal_report {
	uint64_t records;    /* valid records replayed */
	uint64_t torn_bytes; /* bytes cut off the tail */
};

/* Called for each valid record in log order; a negative return aborts,
 * with a reason in errmsg (errn bytes; may be NULL). */
typedef int (*wal_replay_fn)(void *ctx, const char *payload, size_t len,
			     char *errmsg, size_t errn);

/* Called before the replay of a non-empty log and then after every
 * WAL_PROGRESS_BYTES or so of it: bytes replayed so far out of the file's
 * size, and the records replayed so far. */
typedef void (*wal_progress_fn)(void *ctx, uint64_t done, uint64_t total,
				uint64_t records);

#define WAL_PROGRESS_BYTES (1u << 20)

/* What wal_open does with the records it finds; any member may be NULL. */
struct wal_replay {
	wal_replay_fn record;
	wal_progress_fn progress;
	void *ctx;
};

/* Mark a wal closed (fd -1, next_batch 1); wal_close is then a no-op. */
void wal_init(struct wal *w);

/*
 * Open or create the log name in dir (mode 0600; dir must outlive w, name
 * is copied), replay it through replay (may be NULL), cut a torn tail
 * (and fdatasync that). A <name>.tmp left by a cut cut short is removed.
 * Returns 0, -EBADMSG for corruption in the middle, the callback's
 * negative value, or another negative errno (a symbolic link or a file
 * that is not ours is refused: statedir_open). A human reason goes into
 * errmsg (errn bytes) on failure. *w need not be initialised; after a
 * failure it is closed (fd -1). The record callback's payload pointer is
 * only valid during the call.
 */
int wal_open(struct wal *w, const struct statedir *dir, const char *name,
	     const struct wal_replay *replay, struct wal_report *rep,
	     char *errmsg, size_t errn);

/*
 * Append n payloads as one batch, then fdatasync. Returns 0 once durable.
 * The file is grown ahead of the records in zero-filled steps, so most
 * appends overwrite blocks the file already has and their fdatasync needs
 * no metadata (no file-system journal commit, which would also carry
 * every other file's pending changes).
 *
 * On failure nothing of the batch counts: the log is cut back to its
 * previous end (best effort) and a negative errno returned; the batch
 * number is burnt either way, so leftovers of a failed batch never replay.
 * Payloads larger than 64 MiB are refused (-EMSGSIZE).
 */
int wal_append(struct wal *w, const struct iovec *payloads, size_t n);

/*
 * Drop the first head bytes of the log (whole records, head <= end)
 * durably: the records after them are copied to <name>.tmp, synced, and
 * renamed over the log, then the directory is synced. Records appended
 * later go to the new file. 0 or -errno (the old log stays in use on
 * failure).
 */
int wal_cut_head(struct wal *w, uint64_t head);

/* Empty the log durably (ftruncate to 0, fdatasync). 0 or -errno. */
int wal_truncate(struct wal *w);

/* Close. Safe on a closed or zeroed wal (fd -1 or 0 after wal_open
 * failed is handled). */
void wal_close(struct wal *w);

#endif

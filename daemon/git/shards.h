/*
 * The experiences' shard files: .vector-memory/experiences/<agent
 * segment>/<YYYY-MM-DD>.jsonl (protocol/experience.h names them), one
 * compact JSON record or tombstone per line, only ever appended to by the
 * daemon; git merges them line by line (merge=union).
 *
 * Every path is reached through directory descriptors opened with
 * O_NOFOLLOW: a symlink anywhere below .vector-memory is refused or
 * quarantined, never followed.
 *
 * Crash safety: appends are not synced (a checkpoint's syncfs makes them
 * durable, the write-ahead log holding them meanwhile), so after a crash
 * a shard may end inside a line. Before anything is appended to a shard
 * whose last line has no newline, that line is cut off when it is the
 * beginning of a line about to be appended (a torn append of ours, which
 * the log completes), and otherwise ended with a newline (not ours: it
 * stays, and the next load judges it). At start-up the log's lines are
 * appended with dedupe: those the shard already holds byte for byte are
 * not appended twice.
 *
 * Bad lines: a line that does not parse is taken out of its shard (the
 * shard rewritten without it, atomically) and kept in the state
 * directory's quarantine/, with one report entry per shard; the shard's
 * good lines load. An entry that is not a shard where a shard or a
 * segment directory belongs is moved to quarantine/ whole.
 *
 * Blocking: at start-up and on the thread pool, one call at a time per
 * struct shards (read-only after shards_init).
 */
#ifndef VMEM_DAEMON_SHARDS_H
#define VMEM_DAEMON_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "protocol/experience.h"
#include "statedir.h"
#include "vmdir.h"

/* A shard larger than this is quarantined whole, unread. */
#define SHARDS_FILE_MAX ((size_t)1 << 30)

struct shards {
	char *root;		      /* the working tree (owned) */
	const struct statedir *state; /* quarantine/ (borrowed) */
	/* Modes of the files and directories created (repo_tree_modes);
	 * 0: as the umask makes them. */
	mode_t file_mode, dir_mode;
};

/* One shard's appends, and how they went. */
struct shard_append {
	const char *path; /* below experiences/: "<segment>/<date>.jsonl" */
	const char *data; /* whole lines, each ending in '\n' */
	size_t len;
	int rc; /* out: 0 or -errno */
	/* Out, when rc is 0: the shard before the append (all zero when the
	 * append made it) and after it. A stamp after that is all zero
	 * says someone else wrote to the shard while it was appended to. */
	struct vmdir_stamp before, stamp;
};

/* Copies root; state must outlive s. 0 or -ENOMEM. */
int shards_init(struct shards *s, const char *root,
		const struct statedir *state);
void shards_done(struct shards *s);

/*
 * Append each op's lines to its shard, creating what is missing (see
 * above for a last line without its newline). With dedupe, lines the
 * shard already holds byte for byte are left out. With sync, everything
 * is durable on return (files and the directories made). A shard whose
 * append fails is cut back to its size before it, and the other shards
 * still get theirs: each op has its rc; the call returns 0, or the first
 * failure with errmsg.
 */
int shards_append(struct shards *s, struct shard_append *ops, size_t n,
		  bool dedupe, bool sync, char *errmsg, size_t errn);

/* Make every earlier append durable (syncfs of the tree's file system).
 * 0 or -errno with errmsg. */
int shards_sync(struct shards *s, char *errmsg, size_t errn);

/* What shards_scan tells its caller, in path order. */
struct shards_visit {
	/* A shard with this stamp is known as it is: not read. NULL:
	 * nothing is known. */
	bool (*known)(void *ctx, const char *path,
		      const struct vmdir_stamp *st);
	/* One good line of the shard being read (l is the caller's from
	 * then on, raw its bytes without the newline, borrowed). 0, or a
	 * negative errno that stops the scan. NULL: shards are not read,
	 * only stat'ed (a probe). */
	int (*line)(void *ctx, struct exp_line *l, const char *raw, size_t len);
	/* A shard not known, after its lines (if read), with its stamp
	 * (after a rewrite that took bad lines out). 0 or -errno. */
	int (*shard)(void *ctx, const char *path, const struct vmdir_stamp *st);
	void *ctx;
	/* What the scan may change (vmdir.h): a load or a reload (which
	 * asks interrupt first) quarantines; a probe (line NULL) only
	 * counts. */
	enum vmdir_scan_mode mode;
	bool (*interrupt)(void *interrupt_ctx, bool thorough);
	void *interrupt_ctx;
};

/*
 * Walk the shards (absent directory: none), reading those not known;
 * bad entries and bad lines are quarantined into rep (zeroed first).
 * 0, or -errno with errmsg when something cannot be read or quarantined
 * (or a callback's error).
 */
int shards_scan(struct shards *s, const struct shards_visit *v,
		struct vmdir_load_report *rep, char *errmsg, size_t errn);

#endif

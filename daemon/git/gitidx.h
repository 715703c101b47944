/*
 * Bringing the user's index in line after a commit of ours, for our paths
 * only, under index.lock (held by the caller), in whatever format the
 * user's git keeps it.
 *
 * Two ways, picked per index by its features:
 * - our own writer, for index versions 2, 3 and 4 whose extensions are
 *   TREE (the cache-tree: the directories above each changed path are
 *   invalidated, as git update-index does) and REUC (kept as is): it
 *   copies the index around the changed entries, writes each of ours with
 *   the stat data of the file whose bytes were committed, and the SHA-1
 *   trailer; its cost is one pass over the file;
 * - git's own plumbing, `git update-index --add --remove -z --stdin`, on a
 *   private copy of the index (GIT_INDEX_FILE, a hard link made after the
 *   lock was taken) for everything else: a split index (libgit2 1.5 cannot
 *   read one), the untracked cache, fsmonitor bits, a sparse index, end of
 *   index entries, extensions we do not know. git keeps them all; the copy
 *   is then renamed over the lock.
 * Either way the new index is left in the lock file for the caller to
 * commit (rename over the index) once the branch has moved.
 *
 * Blocking: runs on the commit job's thread.
 */
#ifndef VMEM_DAEMON_GITIDX_H
#define VMEM_DAEMON_GITIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "gitlock.h"
#include "statedir.h"

/* What the index keeps of a file's stat, and what tells the file again:
 * a third of a struct stat, for a commit that holds one per path (a
 * first commit of 1,000,000 decisions). */
struct gitidx_stat {
	int64_t ctime_sec, mtime_sec;
	uint32_t ctime_nsec, mtime_nsec;
	uint64_t dev, ino, size;
	uint32_t uid, gid;
};

/* st as the index keeps it. */
void gitidx_stat_of(const struct stat *st, struct gitidx_stat *out);

/* One path of ours, as it must be in the index. */
struct gitidx_update {
	const char *path; /* in the working tree: ".vector-memory/x-005/..." */
	bool present;	  /* false: no entry for the path */
	unsigned char oid[20]; /* the committed blob */
	struct gitidx_stat st; /* of the file whose bytes make oid */
};

enum gitidx_way {
	GITIDX_OWN, /* our writer */
	GITIDX_GIT, /* git update-index on a copy */
};

struct gitidx_ctx {
	const char *gitdir;  /* the tree's git directory, trailing slash */
	const char *workdir; /* the working tree, trailing slash */
	const struct statedir *state; /* for the private copy (borrowed) */
	const char *git;	      /* the git program ("git": from PATH) */
	unsigned new_version;	      /* index version for a new index (2..4) */
	bool force_git;		      /* the repository wants what git writes
					 (core.splitIndex, core.untrackedCache) */
	enum gitidx_way force_way;    /* for tests and benchmarks: */
	bool forced;		      /* use force_way whatever the index */
};

struct gitidx_result {
	enum gitidx_way way;
	char why[64];  /* why git was used ("split index", ...) */
	bool changed;  /* the lock holds a new index to commit */
	bool conflict; /* one of our paths has unmerged entries */
	char conflict_path[256];
};

/* Names of the files gitidx may leave in statedir after a crash. */
extern const char *const gitidx_private_files[];

/*
 * Write into lock (index.lock, held and empty) the index as it is now on
 * disk with each update applied, the n updates (pointers, so a caller's
 * records can hold them) sorted by path (byte order) and distinct; record what
 * the lock then is in the marker m. On return 0, res says whether the lock
 * holds a changed index (if not, the caller releases it: the index stays as it
 * is). res->conflict (return 0, lock unchanged): a path of ours has unmerged
 * entries, nothing was written. -errno with errmsg when the index cannot be
 * brought in line.
 */
int gitidx_sync(const struct gitidx_ctx *c, struct gitlock *lock,
		struct gitmark *m, const struct gitidx_update *const *u,
		size_t n, struct gitidx_result *res, char *errmsg, size_t errn);

/*
 * What the index at path is, for reports and the benchmark: its version
 * and the signatures of its extensions ("TREE UNTR link"). 0 or -errno.
 */
int gitidx_describe(const char *path, unsigned *version, char *exts,
		    size_t extn);

#endif

/*
 * Git's lockfile protocol, and the proof of which locks are ours.
 *
 * A lock is "<target>.lock" created with O_CREAT | O_EXCL, exactly as git
 * takes index.lock and a ref's lock: whoever creates it owns the target
 * until the lock is renamed over the target (commit) or removed
 * (rollback). A lock that exists already belongs to someone else
 * (-EEXIST), and is never touched.
 *
 * The commit marker, <gitdir>/vmem/committing, exists while a commit of
 * ours may hold git locks. It records our pid, our process start time
 * (from /proc/self/stat, so a reused pid is told apart) and the device,
 * inode and birth time of every lock file we create, written before the lock
 * could be left behind by a crash. At start-up a lock is removed only when the
 * marker proves it ours: its device, inode and birth time match, and the
 * process that recorded it is gone. Anything else stays and is reported.
 *
 * Blocking; one thread at a time per marker.
 */
#ifndef VMEM_DAEMON_GITLOCK_H
#define VMEM_DAEMON_GITLOCK_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "statedir.h"

#define GITMARK_MAX_LOCKS 8

/* What identifies one lock file: its device and inode, and its birth
 * time where the file system keeps one (an inode number is reused as soon
 * as a file is gone; the birth time of its next file differs). */
struct gitmark_lock {
	uint64_t dev, ino;
	int64_t btime_sec; /* -1: the file system keeps none */
	uint32_t btime_nsec;
	char path[PATH_MAX];
};

/* The marker of a commit in progress (embedded; gitmark_init). */
struct gitmark {
	const struct statedir *sd; /* <gitdir>/vmem, holding "committing" */
	long pid;
	unsigned long long start; /* process start time, clock ticks */
	struct gitmark_lock locks[GITMARK_MAX_LOCKS];
	size_t n;
	bool on; /* the marker file exists */
};

/* A lock file held by us (embedded; fd -1 when not held). */
struct gitlock {
	char target[PATH_MAX];
	char path[PATH_MAX]; /* target + ".lock" */
	int fd;
	struct gitmark_lock id; /* (path unused) */
};

/*
 * Set the marker up in the state directory sd (borrowed, outlives m):
 * our pid and start time. No I/O but /proc/self/stat. 0 or -errno.
 */
int gitmark_init(struct gitmark *m, const struct statedir *sd);

/* Write the marker with no lock yet (a commit begins). 0 or -errno. */
int gitmark_begin(struct gitmark *m);

/* Remove the marker (no lock of ours is left). */
void gitmark_end(struct gitmark *m);

/*
 * Any thread: is the file of st (a lock file found in the git directory)
 * one this process holds now? What looks for git's operations in the
 * tree (gitop) must not take our own index.lock for a git command's.
 */
bool gitlock_ours(const struct stat *st);

/* The parent (field 4 of /proc/PID/stat; ppid may be NULL) and the start
 * time (field 22, in clock ticks since boot) of process pid: 0, or -1 when
 * the process does not exist. */
int gitlock_proc_stat(long pid, long *ppid, unsigned long long *start);

/* The start time of process pid (as above); 0 when it does not exist. */
unsigned long long gitlock_proc_start(long pid);

static inline void gitlock_init(struct gitlock *l)
{
	l->fd = -1;
	l->target[0] = l->path[0] = '\0';
}

/*
 * Take target's lock: make target.lock exclusively (it must not exist, as
 * with git's O_CREAT | O_EXCL; mode 0666 less the umask), recorded in the
 * marker m (which must be begun) before it exists under that name: it is
 * made under a private name in the state directory and hard-linked into
 * place. -EEXIST when someone holds it, other -errno otherwise.
 */
int gitlock_take(struct gitlock *l, const char *target, struct gitmark *m);

/*
 * Replace the lock file's content by the file name in the marker's state
 * directory (a rename over the lock: the lock stays held throughout). The
 * new file is recorded in the marker before the rename. 0 or -errno (the
 * lock is still held).
 */
int gitlock_replace(struct gitlock *l, const char *name, struct gitmark *m);

/*
 * Commit: optionally fsync the lock file, then rename it over the target
 * (and fsync the directory when sync). The lock is released either way
 * on success; on failure it is still held. 0 or -errno.
 */
int gitlock_commit(struct gitlock *l, bool sync);

/* Give the lock up without committing: its file is removed if it is still
 * the one we created. Safe on a lock not held. */
void gitlock_release(struct gitlock *l);

/* What start-up found of a previous run's commit. */
struct gitlock_stale {
	bool marker;	    /* a marker was there */
	bool owner_alive;   /* the process that wrote it still runs */
	char removed[2048]; /* lock files removed (ours), comma-separated */
	char kept[2048];    /* lock files left alone (not provably ours) */
	int n_removed, n_kept;
};

/*
 * At start-up: if a marker is there and the process that wrote it is gone,
 * remove each lock it lists whose identity still matches, leave any
 * other (a git command's, made since) alone and list it in kept, remove
 * the files of ours in the state directory that a crash may leave (names
 * in extra, NULL-terminated; they are private), then the marker. 0 or
 * -errno.
 */
int gitlock_clear_stale(struct gitmark *m, const char *const *extra,
			struct gitlock_stale *out);

#endif

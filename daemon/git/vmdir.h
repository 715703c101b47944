/*
 * The .vector-memory directory of a working tree: loading every decision
 * file at start-up, and materialising writes durably. All file access goes
 * through directory fds opened with O_NOFOLLOW, so a symlink anywhere
 * under .vector-memory is refused rather than followed.
 *
 * Invariants: only decision files (x-NNN/y-Y-z-Z.json), metadata.json,
 * the seed library's optional index.json (left as it is) and the
 * experiences' directory (VMDIR_EXPERIENCES, left to git/shards) live
 * there;
 * temporary files are ".tmp-*" names that are never committed
 * and are removed at start-up; a file that does not parse or validate is
 * moved to the quarantine directory, never skipped silently or emptied;
 * a decision file in a git conflict (unmerged entries, or conflict
 * markers) is neither loaded nor quarantined but reported as conflicted,
 * and never overwritten by vmdir_apply.
 *
 * Blocking: called at start-up and from the thread pool, one call at a time.
 */
#ifndef VMEM_DAEMON_VMDIR_H
#define VMEM_DAEMON_VMDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "protocol/decision.h"
#include "statedir.h"
#include "unmerged.h"

#define VMDIR_DIRNAME	 ".vector-memory"
#define VMDIR_QUARANTINE "quarantine" /* in the state directory */
/* Below VMDIR_DIRNAME: the experiences' shards (git/shards.h). */
#define VMDIR_EXPERIENCES "experiences"
/* The prefix of temporary files, never committed, removed at start-up. */
#define VMDIR_TMP_PREFIX ".tmp-"

struct vmdir {
	char *root;		      /* working-tree root (owned) */
	const struct statedir *state; /* holds quarantine/ (borrowed) */
	int max_x;
	/* Asked before every file by vmdir_apply, and by a reload's scan
	 * before it quarantines (may be NULL): true stops it there (git
	 * took the tree; see struct vmdir_op, VMDIR_RELOAD). thorough:
	 * also what is slow to look at (git's processes, gitop.h); without
	 * it only git's locks and state files. vmdir_apply asks thoroughly
	 * after 64 files, or sooner once 2 ms and three times its last
	 * thorough look have passed (its caller has just looked
	 * thoroughly); a scan always. Called on the thread that
	 * applies or scans. */
	bool (*interrupt)(void *ctx, bool thorough);
	void *interrupt_ctx;
	/* Modes of the files and directories written (repo_tree_modes);
	 * 0: as the umask makes them. */
	mode_t file_mode, dir_mode;
	/* Start-up progress, NULL otherwise (it runs on the caller's thread,
	 * so it is cleared before writes go to the thread pool): after each
	 * entry of .vector-memory a load handles (done and total entries,
	 * and the decision files loaded so far). A caller applying many
	 * files in several calls reports them through it too (done and
	 * total files, files = done). */
	void (*progress)(void *ctx, uint64_t done, uint64_t total,
			 uint64_t files);
	void *progress_ctx;
	int64_t started_ns; /* vmdir_init's wall-clock time */
	/* How long a directory must have kept its stamp for a scan to call
	 * it settled (vmdir_dir_fn): VMDIR_SETTLED_NS (tests shorten it). */
	int64_t settled_ns;
};

/* One quarantined file, reported by vmdir_load. */
struct vmdir_quarantined {
	char path[256]; /* relative to the working tree root */
	char moved_to[4096];
	char reason[VMEM_ERRMSG_LEN];
};

/* One decision file in a git conflict, reported by a load or scan. */
struct vmdir_conflicted {
	struct coord coord;
	char reason[VMEM_ERRMSG_LEN]; /* "unmerged", "conflict markers" */
};

struct vmdir_load_report {
	size_t loaded;
	size_t temp_removed;
	/* what a look-only scan (VMDIR_PROBE) found that a reload would
	 * quarantine, left where it is */
	size_t unusable;
	struct vmdir_quarantined *quarantined; /* malloc'd array (owned) */
	size_t n_quarantined;
	struct vmdir_conflicted *conflicted; /* malloc'd array (owned) */
	size_t n_conflicted;
};

/*
 * What identifies a version of a file without reading it: a file whose
 * stamp is unchanged has not been written since (any write through a
 * rename or in place changes the inode, the size, or the ctime).
 */
struct vmdir_stamp {
	uint64_t ino;
	uint64_t size;
	int64_t mtime_ns;
	int64_t ctime_ns;
};

/* The stamp of a stat result. */
struct vmdir_stamp vmdir_stamp_of(const struct stat *st);

/* Called for each valid decision with its file's stamp; takes ownership
 * of *d on return 0. */
typedef int (*vmdir_load_fn)(void *ctx, struct decision *d,
			     const struct vmdir_stamp *stamp);

/* For a rescan (vmdir_scan): true when the file at c with this stamp is known,
 * so it need not be read. */
typedef bool (*vmdir_known_fn)(void *ctx, const struct coord *c,
			       const struct vmdir_stamp *stamp);

/*
 * For a scan (vmdir_scan): the stamp of directory x-NNN, taken before its
 * entries are listed. Whoever creates, removes or renames a file there
 * changes it, git included (it writes a file by removing it and creating
 * it anew); an edit in place does not. settled: it had not changed for
 * struct vmdir's settled_ns when the stamp was taken, so any later change
 * shows in it (a file system dates a change by a clock coarser than
 * ours: a tick, up to two seconds on some); only a settled stamp is
 * worth keeping. A probe skips the directory, its files taken as known,
 * when this returns true; other scans ignore the answer.
 */
typedef bool (*vmdir_dir_fn)(void *ctx, int x, const struct vmdir_stamp *stamp,
			     bool settled);

/*
 * For a probe (VMDIR_PROBE, no unmerged files; other scans do not ask):
 * directory x, named name in vfd (the .vector-memory being listed), is
 * about to be looked at. true when the caller knows by other means than
 * its stamp (inotify, xwatch.h) that nothing touched it since a scan found
 * it whole: it is then neither statted nor listed, its files taken as
 * known.
 */
typedef bool (*vmdir_clean_fn)(void *ctx, int vfd, int x, const char *name);

#define VMDIR_SETTLED_NS 2000000000LL

/* What a scan calls back with ctx; NULL: not called (known: every file
 * is read; dir: every directory is listed). */
struct vmdir_scan_hooks {
	vmdir_load_fn loaded; /* a decision read */
	vmdir_known_fn known;
	vmdir_dir_fn dir;
	vmdir_clean_fn clean;
	void *ctx;
};

#define VMDIR_CHANGED_UNKNOWN INT64_MAX

/*
 * One materialisation: text NULL means delete the coordinate's file. With
 * guard, a file there whose stamp is not expect (someone else wrote it)
 * and which holds conflict markers is left as it is and the op skipped;
 * at z=1, one that holds a decision of an earlier timestamp (the first
 * writer, which a merge keeps) is left as it is and the op superseded.
 */
struct vmdir_op {
	struct coord coord;
	const char *text; /* exact file bytes (decision_dump_file) */
	size_t len;
	/* When this daemon last wrote or removed the file (the ctime_ns of
	 * the stamp it got back), 0 if it has not since it started, or
	 * VMDIR_CHANGED_UNKNOWN when the caller believes a file is there (if
	 * it is gone, someone removed it at a time we do not know): a file
	 * changed in the last two seconds is not back-dated (vmdir.c). */
	int64_t changed_ns;
	bool guard;
	struct vmdir_stamp expect; /* with guard: the file as we know it */
	/* out: the written file's stamp; for a removal, ctime_ns is the
	 * time of the removal and the rest 0 */
	struct vmdir_stamp stamp;
	bool skipped;	  /* out: left alone (conflict markers) */
	bool interrupted; /* out: not applied (interrupt said stop) */
	bool superseded;  /* out: left alone: a write-once (z=1) decision
			     someone else put there wrote it first */
};

/*
 * Set up (no I/O). Copies root; state (which must outlive d) receives
 * quarantine/ (statedir_sub: a symlink or a directory that is not ours is
 * refused, never followed); it may be NULL for a vmdir that only writes
 * (a load then refuses to quarantine). The modes are left 0. 0 or
 * -ENOMEM.
 */
int vmdir_init(struct vmdir *d, const char *root, const struct statedir *state,
	       int max_x);
void vmdir_done(struct vmdir *d);

/*
 * Load every decision under root/.vector-memory (absent: nothing to load).
 * Removes temp files, quarantines bad files (wrong name, wrong place,
 * unparsable, invalid, coordinate not matching its path, symlinks), calls
 * cb for the rest. Returns 0, or a negative errno when the directory
 * cannot be read at all or a bad file cannot be quarantined (errmsg says
 * why): -ELOOP / -ENOTDIR when .vector-memory is a symlink / not a
 * directory, cb's own negative value when it aborts (d is then freed by
 * us). The report is filled even on failure; release it with
 * vmdir_load_report_done. rep and cb may be NULL.
 */
int vmdir_load(struct vmdir *d, vmdir_load_fn cb, void *ctx,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn);
void vmdir_load_report_done(struct vmdir_load_report *rep);

/*
 * How a scan may change the tree. A load at start-up quarantines what it
 * cannot use; a reload too, unless git has taken the working tree (then
 * nothing moves and the scan fails with -EAGAIN: git may be writing the
 * very file, an empty or half-written one for a moment); a probe only
 * looks, whatever git does, and counts what a reload would quarantine.
 */
enum vmdir_scan_mode { VMDIR_LOAD, VMDIR_RELOAD, VMDIR_PROBE };

/*
 * Where a load moves what it cannot use: quarantine/ of the state
 * directory (opened on first use, refusing what statedir refuses), named
 * "<unix time>-<path with '/' made '_'>[-N]", each move reported in rep.
 * Blocking; one user at a time.
 */
struct vmdir_quarantine {
	const struct statedir *state; /* borrowed; NULL: nothing can move */
	struct statedir q;
	time_t now;
	struct vmdir_load_report *rep; /* borrowed */
	char *errmsg;
	size_t errn;
	enum vmdir_scan_mode mode; /* VMDIR_LOAD unless set after init */
	/* VMDIR_RELOAD: asked (thoroughly) before anything moves; true
	 * when git has the working tree (any thread) */
	bool (*interrupt)(void *ctx, bool thorough);
	void *interrupt_ctx;
};

void vmdir_quarantine_init(struct vmdir_quarantine *qc,
			   const struct statedir *state,
			   struct vmdir_load_report *rep, char *errmsg,
			   size_t errn);
void vmdir_quarantine_done(struct vmdir_quarantine *qc);

/*
 * Move entry name of directory dfd (a file, a symlink, a directory with
 * what it holds; rel is its path below .vector-memory) into quarantine/,
 * and report it with reason. 0 or -errno (errmsg). With VMDIR_PROBE it
 * only counts the entry (rep->unusable) and returns 0; with VMDIR_RELOAD
 * while git has the tree it moves nothing and returns -EAGAIN.
 */
int vmdir_quarantine_move(struct vmdir_quarantine *qc, int dfd,
			  const char *name, const char *rel,
			  const char *reason);

/*
 * Keep data (bytes that were part of rel, e.g. lines taken out of it) in
 * a new file of quarantine/ named after rel, durably, and report it with
 * reason. 0 or -errno (errmsg); the modes as for vmdir_quarantine_move,
 * but a probe's count returns 1: only after 0 may the caller take the
 * data out of rel.
 */
int vmdir_quarantine_write(struct vmdir_quarantine *qc, const char *rel,
			   const void *data, size_t len, const char *reason);

/* Add rep's counts and a copy of its quarantined and conflicted entries
 * to all (one report for several loads). 0, or -ENOMEM with all
 * unchanged. */
int vmdir_load_report_merge(struct vmdir_load_report *all,
			    const struct vmdir_load_report *rep);

/*
 * vmdir_load knowing git's unmerged decision files (unmerged may be
 * NULL): a file listed there, whatever it holds, and a file with conflict
 * markers are reported in rep->conflicted, neither passed to loaded nor
 * quarantined. For a directory loaded before (a rescan), a decision file
 * for which known(ctx, coord, stamp) is true is only stat'ed, never read,
 * and loaded is not called for it. A probe skips a directory dir says it
 * knows (never while unmerged lists a file). mode says what it may change
 * (a reload asks d->interrupt before it does; a probe changes nothing:
 * temporary files stay too).
 */
int vmdir_scan(struct vmdir *d, enum vmdir_scan_mode mode,
	       const struct vmdir_scan_hooks *hooks,
	       const struct unmerged_set *unmerged,
	       struct vmdir_load_report *rep, char *errmsg, size_t errn);

/*
 * Apply ops in order: each file written to a unique temp name in its
 * directory and renamed over the target (or the target unlinked). A file
 * is dated one second before its write unless its path changed in the
 * last two seconds (so a commit right after leaves it clean for git:
 * vmdir.c, "racy git").
 * Creates .vector-memory, its x-NNN directories and metadata.json
 * ({"format": 1}) as needed. Deleting an absent file is not an error.
 * With sync, everything is durable on return: each file is fsynced before
 * its rename and every touched directory after, or, from VMDIR_BULK_MIN
 * ops on (see vmdir.c), the file system is flushed once with syncfs().
 * Without sync nothing is flushed (vmdir_sync does it later): a crash may
 * then leave incomplete files, so the caller's log must still hold those
 * writes. A guarded op whose file is in conflict is skipped (see struct
 * vmdir_op). Returns 0 or -errno (errmsg).
 */
int vmdir_apply(struct vmdir *d, struct vmdir_op *ops, size_t n, bool sync,
		char *errmsg, size_t errn);

/*
 * Open directory name of dfd with O_NOFOLLOW (a symlink: -ELOOP, not a
 * directory: -ENOTDIR), creating it when create and absent (with mode,
 * unless 0; *made then says so). The descriptor, or -errno.
 */
int vmdir_open_subdir(int dfd, const char *name, bool create, mode_t mode,
		      bool *made);

/* Make every earlier vmdir_apply durable (syncfs). 0 or -errno. */
int vmdir_sync(struct vmdir *d, char *errmsg, size_t errn);

#endif

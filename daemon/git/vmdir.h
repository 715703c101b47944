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
 * moved to the quarantine directory, never skipped silently or emptied.
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
	/* Modes of the files and directories written (repo_tree_modes);
	 * 0: as the umask makes them. */
	mode_t file_mode, dir_mode;
	/* Start-up progress, NULL otherwise (it runs on the caller's thread,
	 * so it is cleared before writes go to the thread pool): after each
	 * entry of .vector-memory a load handles (done and total entries,
	 * and the decision files loaded so far), and every
	 * VMDIR_PROGRESS_FILES files an apply writes (done and total files,
	 * files = done). */
	void (*progress)(void *ctx, uint64_t done, uint64_t total,
			 uint64_t files);
	void *progress_ctx;
};

#define VMDIR_PROGRESS_FILES 1024

/* One quarantined file, reported by vmdir_load. */
struct vmdir_quarantined {
	char path[256]; /* relative to the working tree root */
	char moved_to[4096];
	char reason[VMEM_ERRMSG_LEN];
};

struct vmdir_load_report {
	size_t loaded;
	size_t temp_removed;
	struct vmdir_quarantined *quarantined; /* malloc'd array (owned) */
	size_t n_quarantined;
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

/* For vmdir_rescan: true when the file at c with this stamp is known, so
 * it need not be read. */
typedef bool (*vmdir_known_fn)(void *ctx, const struct coord *c,
			       const struct vmdir_stamp *stamp);

/* One materialisation: text NULL means delete the coordinate's file. */
struct vmdir_op {
	struct coord coord;
	const char *text; /* exact file bytes (decision_dump_file) */
	size_t len;
	struct vmdir_stamp stamp; /* out: the written file's stamp */
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
};

void vmdir_quarantine_init(struct vmdir_quarantine *qc,
			   const struct statedir *state,
			   struct vmdir_load_report *rep, char *errmsg,
			   size_t errn);
void vmdir_quarantine_done(struct vmdir_quarantine *qc);

/*
 * Move entry name of directory dfd (a file, a symlink, a directory with
 * what it holds; rel is its path below .vector-memory) into quarantine/,
 * and report it with reason. 0 or -errno (errmsg).
 */
int vmdir_quarantine_move(struct vmdir_quarantine *qc, int dfd,
			  const char *name, const char *rel, const char *reason);

/*
 * Keep data (bytes that were part of rel, e.g. lines taken out of it) in
 * a new file of quarantine/ named after rel, durably, and report it with
 * reason. 0 or -errno (errmsg).
 */
int vmdir_quarantine_write(struct vmdir_quarantine *qc, const char *rel,
			   const void *data, size_t len, const char *reason);

/* Add rep's counts and a copy of its quarantined entries to all (one
 * report for several loads). 0, or -ENOMEM with all unchanged. */
int vmdir_load_report_merge(struct vmdir_load_report *all,
			    const struct vmdir_load_report *rep);

/*
 * vmdir_load for a directory loaded before: a decision file for which
 * known(ctx, coord, stamp) is true is only stat'ed, never read, and cb is
 * not called for it. Everything else is handled as vmdir_load does.
 */
int vmdir_rescan(struct vmdir *d, vmdir_known_fn known, vmdir_load_fn cb,
		 void *ctx, struct vmdir_load_report *rep, char *errmsg,
		 size_t errn);

/*
 * Apply ops in order: each file written to a unique temp name in its
 * directory and renamed over the target (or the target unlinked).
 * Creates .vector-memory, its x-NNN directories and metadata.json
 * ({"format": 1}) as needed. Deleting an absent file is not an error.
 * With sync, everything is durable on return: each file is fsynced before
 * its rename and every touched directory after, or, from VMDIR_BULK_MIN
 * ops on (see vmdir.c), the file system is flushed once with syncfs().
 * Without sync nothing is flushed (vmdir_sync does it later): a crash may
 * then leave incomplete files, so the caller's log must still hold those
 * writes. Returns 0 or -errno (errmsg).
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

/* write(2) all of buf, going on after EINTR and short writes. 0 or
 * -errno. */
int vmdir_write_all(int fd, const char *buf, size_t len);

/* Make every earlier vmdir_apply durable (syncfs). 0 or -errno. */
int vmdir_sync(struct vmdir *d, char *errmsg, size_t errn);

#endif

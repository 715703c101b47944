/*
 * Git for the memory, through libgit2 (and git's own plumbing where
 * libgit2 cannot keep the user's index as git writes it, see gitidx.h):
 * commits of .vector-memory on the current branch, and the read side of
 * its history. A commit commits the bytes that are in the working tree at
 * the paths it is given (or their absence), under git's lock protocol:
 * index.lock is held from reading the index, through moving the branch
 * (under the branch's own ref lock, a compare-and-swap against the tip
 * the commit was built on, rebuilt on the new tip if it moved), to
 * writing the new index. Only our paths change in the index, with the
 * stat data of the files committed; the user's other staged and unstaged
 * changes stay exactly as they were, and so does the index's format.
 *
 * Blocking; a struct gitc is used by one thread at a time (the daemon's
 * one git job).
 */
#ifndef VMEM_DAEMON_GITC_H
#define VMEM_DAEMON_GITC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gitlock.h"
#include "protocol/decision.h"
#include "statedir.h"

struct gitc;

/* One path of a commit. */
struct gitc_change {
	const char *path; /* relative to .vector-memory: "x-005/y-2-z-1.json",
			     "experiences/a/2025-01-06.jsonl" (borrowed) */
	bool present;	  /* set by gitc_commit: the file was there */
	bool changed;	  /* set by gitc_commit: it differed from HEAD and
			     is in the commit made */
};

/* How the index was brought in line. */
enum { GITC_INDEX_OWN = 0, GITC_INDEX_GIT = 1 };

struct gitc_result {
	char commit[41];      /* hex id of the new commit, "" if none */
	int64_t committed_at; /* seconds since the epoch */
	char deferred[160];   /* why nothing was committed, "" if it was */
	bool index_error;     /* the index could not be brought in line
				 (errmsg says why); see gitc_commit */
	bool index_written;   /* the index changed */
	int index_way;	      /* GITC_INDEX_OWN or GITC_INDEX_GIT */
	char index_why[64];   /* why git's plumbing was used */
	/* The index the new one replaced, held open, or -1: the caller of
	 * gitc_commit_as closes it (gitc_commit closes it itself). The
	 * last close frees its pages (25-55 ms for 100 MB), which a rename
	 * over it would do before returning: on the sync's path. */
	int replaced_fd;
};

/*
 * Open the repository of a working tree (its root; no search upwards).
 * state (borrowed, outlives the handle) holds the commit marker and the
 * files a commit keeps there for a moment (gitlock.h, gitidx.h).
 * 0 or -errno (errmsg).
 */
int gitc_open(struct gitc **out, const char *workdir,
	      const struct statedir *state, char *errmsg, size_t errn);
void gitc_free(struct gitc *g);

/* One line of a generated message: a path relative to .vector-memory. */
struct gitc_msgline {
	const char *path;
	char *agent; /* who wrote a decision (NULL: "unknown") */
	bool deleted;
};

/* The paths a generated message names; the rest are counted. */
#define GITC_MESSAGE_PATHS 100

/*
 * The generated message for a batch: subject
 * "vector-memory: N decisions (x A-B, y C-D, z E-F)" (N counts the
 * decision files, the ranges are over them; a single value prints as
 * "x 5"), followed by ", K experience shards" when the batch holds some
 * (a batch of shards only: "vector-memory: K experience shards"), a
 * blank line, then one line per path for the first GITC_MESSAGE_PATHS
 * of them: "x-005/y-2-z-1.json by AGENT", another path as itself,
 * either with " deleted" for a deletion; then "and M more" for the
 * others (their agents are not read). malloc'd, caller frees; NULL on
 * allocation failure.
 */
char *gitc_message(const struct gitc_msgline *l, size_t n);

/*
 * Commit the working tree's bytes at the changes' paths (a missing file:
 * a deletion) on the current branch with message (NULL: the generated
 * one), and bring the index in line for those paths. metadata.json is
 * added when the tree lacks it and the file is there. Paths equal to
 * HEAD's are left out of the commit and of the generated message; each
 * change's changed says which went in. Returns 0 with res->commit set (""
 * when nothing differed from the tip: the index may still have been
 * brought in line); 1 when the commit must wait (res->deferred says why: a
 * merge, rebase, cherry-pick, revert or bisect in progress, a detached
 * HEAD, index.lock held by someone else, a conflict at one of our paths)
 * — then no ref and no index was written; or -errno with errmsg, and
 * res->index_error when the index could not be brought in line (then the
 * branch was not moved either). If the branch moved but the prepared
 * index could not be installed, 0 is returned with the commit,
 * res->index_error and errmsg. An unborn branch gets a root commit.
 * Author and committer: user.name and user.email from the repository's
 * config, else "vmemd <vmemd@localhost>".
 */
int gitc_commit(struct gitc *g, struct gitc_change *ch, size_t n,
		const char *message, struct gitc_result *res, char *errmsg,
		size_t errn);

#define GITC_IDENT_MAX 200

/* A commit identity, held by value so a job owns its own copy. */
struct gitc_ident {
	char name[GITC_IDENT_MAX + 1];	/* "" : the default identity */
	char email[GITC_IDENT_MAX + 1]; /* "" : the default identity */
};

/*
 * gitc_commit with who as author and committer when who is non-NULL and
 * both its name and email are non-empty; otherwise as gitc_commit, but
 * for res->replaced_fd, which the caller closes (when the sync it serves
 * is answered).
 */
int gitc_commit_as(struct gitc *g, const struct gitc_ident *who,
		   struct gitc_change *ch, size_t n, const char *message,
		   struct gitc_result *res, char *errmsg, size_t errn);

/* The steps of a commit, for tests (gitc_set_hook). */
enum gitc_step {
	GITC_STEP_LOCKED,      /* index.lock taken */
	GITC_STEP_INDEX_READY, /* the new index prepared in the lock */
	GITC_STEP_BEFORE_CAS,  /* the commit written, the branch not moved
				  (at every attempt) */
	GITC_STEP_MOVED,       /* the branch moved, the index not renamed */
};

/* For tests: fn(ctx, step) runs at each step of a commit. NULL clears. */
void gitc_set_hook(struct gitc *g, void (*fn)(void *ctx, enum gitc_step step),
		   void *ctx);

/* For tests and benchmarks: bring the index in line this way
 * (GITC_INDEX_OWN or GITC_INDEX_GIT) whatever its format; -1: by its
 * format. */
void gitc_force_index_way(struct gitc *g, int way);

/* One version of a decision in history, newest first: text NULL for a
 * deletion, else NUL-terminated (borrowed for the call). A non-zero
 * return stops the walk and is returned. */
typedef int (*gitc_version_fn)(void *ctx, const char *commit,
			       int64_t committed_at, const char *text,
			       size_t len);

/*
 * Walk HEAD's first-parent line, newest first, and report every commit
 * where the coordinate's file differs from the commit's first parent
 * (added, changed or deleted), at most limit (0: all). An unborn HEAD has
 * no history. 0, the callback's value, or -errno (errmsg).
 */
int gitc_history(struct gitc *g, const struct coord *c, size_t limit,
		 gitc_version_fn cb, void *ctx, char *errmsg, size_t errn);

/*
 * The newest commit on HEAD's first-parent line whose .vector-memory holds
 * only decisions with (x, y) < (x_threshold, y_threshold) in the partial
 * order (x < xt, or x == xt and y < yt); an empty or absent
 * .vector-memory qualifies. Returns 1 with commit/subject/committed_at
 * filled, 0 when no commit qualifies, or -errno (errmsg).
 */
int gitc_rollback_point(struct gitc *g, int x_threshold, int y_threshold,
			char commit[41], char *subject, size_t subjn,
			int64_t *committed_at, char *errmsg, size_t errn);

/* One commit of the memory's log, newest first. */
typedef int (*gitc_commit_fn)(void *ctx, const char *commit,
			      int64_t committed_at, const char *subject);

/*
 * The commits on HEAD's first-parent line that changed .vector-memory,
 * newest first, at most limit (0: all). 0, the callback's value, or
 * -errno (errmsg).
 */
int gitc_log(struct gitc *g, size_t limit, gitc_commit_fn cb, void *ctx,
	     char *errmsg, size_t errn);

typedef int (*gitc_coord_fn)(void *ctx, const struct coord *c);

/*
 * Call cb for every decision file in HEAD's .vector-memory (a negative
 * return stops the walk and is returned). 0 without a HEAD or a memory.
 */
int gitc_head_coords(struct gitc *g, int max_x, gitc_coord_fn cb, void *ctx);

/*
 * At start-up, before any commit: if the previous run died while
 * committing (its marker is there and its process is gone), remove the git
 * lock files the marker proves it made (same device and inode), and the
 * private files it left; any other lock stays and is listed in out->kept.
 * 0 or -errno.
 */
int gitc_clear_stale_locks(struct gitc *g, struct gitlock_stale *out);

/* The committable paths of HEAD's .vector-memory that a git status
 * reports different (see gitc_scan). */
typedef int (*gitc_path_fn)(void *ctx, const char *path);

/*
 * What may differ from HEAD under .vector-memory, as git sees it: `git
 * status` of that directory (stat data against the index, the index
 * against HEAD, untracked files), without taking index.lock. cb gets each
 * path, relative to .vector-memory. cancel_fd (NULL: none) given up as in
 * gitproc. 0 or -errno (errmsg; -ECANCELED when given up).
 */
int gitc_scan(struct gitc *g, const int *cancel_fd, gitc_path_fn cb, void *ctx,
	      char *errmsg, size_t errn);

#endif

/*
 * Git for the memory, through libgit2 only (never the git program):
 * commits of .vector-memory on the current branch, and the read side of
 * its history. A commit's tree is the branch tip's tree with the
 * .vector-memory subtree rebuilt from the tip's one plus the changes
 * (treebuilders, never the repository index); the repository index is
 * then updated for the changed .vector-memory paths only, so every other
 * staged or unstaged change of the user stays as it was. The branch is
 * moved with a compare-and-swap against the tip the commit was built on;
 * if the tip moved meanwhile, the commit is rebuilt on the new tip, so
 * nobody's commit is ever overwritten.
 *
 * Blocking; a struct gitc is used by one thread at a time (the daemon's
 * one git job).
 */
#ifndef VMEM_DAEMON_GITC_H
#define VMEM_DAEMON_GITC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/decision.h"
#include "statedir.h"

struct gitc;

/* One coordinate of a commit: its file bytes, or a deletion. */
struct gitc_change {
	struct coord coord;
	const char *text; /* exact file bytes; NULL: the file is deleted */
	size_t len;
	const char *agent_id; /* who wrote it, for the message body; may be
				 NULL for a deletion */
	bool changed;	      /* set by gitc_commit: it differs from HEAD */
};

struct gitc_result {
	char commit[41];      /* hex id of the new commit, "" if none */
	int64_t committed_at; /* seconds since the epoch */
	char deferred[160];   /* why nothing was committed, "" if it was */
};

/*
 * Open the repository of a working tree (its root; no search upwards).
 * state (borrowed, outlives the handle) holds the marker of a commit in
 * progress. Also turns libgit2's gitdir fsync option on (process-wide).
 * 0 or -errno (errmsg).
 */
int gitc_open(struct gitc **out, const char *workdir,
	      const struct statedir *state, char *errmsg, size_t errn);
void gitc_free(struct gitc *g);

/*
 * The generated message for a batch: subject
 * "vector-memory: N decisions (x A-B, y C-D, z E-F)" (N = n, ranges over
 * the batch; a single value prints as "x 5"), a blank line, then one line
 * per change "x-005/y-2-z-1.json by AGENT" (or "... deleted").
 * malloc'd, caller frees; NULL on allocation failure.
 */
char *gitc_message(const struct gitc_change *ch, size_t n);

/*
 * Commit the changes on the current branch with message (NULL: the
 * generated one). Changes equal to HEAD's content (the same bytes, or a
 * deletion of an absent file) are left out, and counted out of the
 * generated message; each change's `changed` says which were kept. Returns 0
 * with res->commit set; 1 when the commit must wait (res->deferred says why: a
 * merge, rebase, cherry-pick, revert or bisect in progress, a detached HEAD,
 * index.lock held by someone else) — then nothing was written; or -errno with
 * errmsg. An unborn branch (empty repository) gets a root commit. Author and
 * committer: user.name and user.email from the repository's config, else "vmemd
 * <vmemd@localhost>". When the commit was made but the index could not
 * be updated (index.lock taken meanwhile), 0 is returned and errmsg says
 * so (errmsg is "" otherwise). The changes' coordinates are assumed valid.
 * n == 0, or changes that leave the tip's tree as it is, commit nothing:
 * 0 with res->commit "".
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
 * both its name and email are non-empty; otherwise as gitc_commit.
 */
int gitc_commit_as(struct gitc *g, const struct gitc_ident *who,
		   struct gitc_change *ch, size_t n, const char *message,
		   struct gitc_result *res, char *errmsg, size_t errn);

/*
 * For tests: fn(ctx) runs at every attempt after the commit object is
 * written and the last deferral check, before the branch is moved (e.g.
 * to move the branch under us). NULL clears it.
 */
void gitc_set_hook(struct gitc *g, void (*fn)(void *ctx), void *ctx);

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
 * committing (its marker is still there), remove the git lock files it
 * left (index.lock, the branch's ref lock, packed-refs.lock) — only those
 * made within a few seconds after that commit began, so a lock of a git
 * command started since is left alone — and make the index's entries
 * under .vector-memory HEAD's again (the commit may have moved the branch
 * without staging). Their paths go to removed (n bytes,
 * comma-separated). Returns how many were removed.
 */
int gitc_clear_stale_locks(struct gitc *g, char *removed, size_t n);

#endif

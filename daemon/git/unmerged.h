/*
 * Unmerged paths under .vector-memory, through the git program: libgit2
 * 1.5 cannot read a split index, git reads every index format it writes.
 * Listing (`git ls-files -u`), reading one side (`git cat-file`), and
 * staging a resolution (`git update-index`, which takes git's own
 * index.lock exactly as `git add` does).
 *
 * Every call runs git with --git-dir and --work-tree of the tree, in its
 * root, without the caller's GIT_DIR, GIT_WORK_TREE or GIT_INDEX_FILE,
 * and with GIT_OPTIONAL_LOCKS=0 (a listing never rewrites the index).
 * Blocking: the thread pool, or start-up.
 */
#ifndef VMEM_DAEMON_UNMERGED_H
#define VMEM_DAEMON_UNMERGED_H

#include <stdbool.h>
#include <stddef.h>

#include "protocol/decision.h"

#define UNMERGED_OID_LEN 64 /* hex of SHA-1 (40) or SHA-256 (64) */

/* One decision file with unmerged entries. */
struct unmerged_entry {
	struct coord coord;
	unsigned stages; /* bit s set: stage s present (1 base, 2 ours, 3
			    theirs) */
	char oid[4][UNMERGED_OID_LEN + 1]; /* blob of each stage, "" if none */
};

struct unmerged_set {
	struct unmerged_entry *e; /* sorted by coordinate (owned) */
	size_t n;
	size_t n_other;	 /* unmerged paths under .vector-memory that are
			    not decision files */
	char other[256]; /* the first of them, for a message */
};

/*
 * List the unmerged decision files of the tree at root (git directory
 * gitdir). 0 or -errno with errmsg; *out is then empty. Release with
 * unmerged_set_done.
 */
int unmerged_list(const char *root, const char *gitdir, int max_x,
		  struct unmerged_set *out, char *errmsg, size_t errn);
void unmerged_set_done(struct unmerged_set *s);

/* What the stages say, in git status's words ("unmerged: both modified",
 * "unmerged: deleted by us", ...). */
const char *unmerged_describe(unsigned stages);

/* The entry of c, or NULL. */
const struct unmerged_entry *unmerged_find(const struct unmerged_set *s,
					   const struct coord *c);

/*
 * The bytes of blob oid (at most max bytes), malloc'd and NUL-terminated
 * in *out (caller frees), length in *len. 0 or -errno with errmsg.
 */
int unmerged_blob(const char *root, const char *gitdir, const char *oid,
		  size_t max, char **out, size_t *len, char *errmsg,
		  size_t errn);

/*
 * Stage the working tree's state of path (relative to root): its file
 * when present, its absence otherwise; any unmerged entries of the path
 * go. -EBUSY when index.lock stays held by another process for the
 * second and a half it is waited for. 0 or -errno with errmsg. Blocking
 * (it sleeps between attempts): the thread pool's.
 */
int unmerged_stage(const char *root, const char *gitdir, const char *path,
		   bool present, char *errmsg, size_t errn);

/* Is the merge driver registered (merge.vmem.driver set in the
 * repository's configuration)? */
bool unmerged_driver_registered(const char *root, const char *gitdir);

#endif

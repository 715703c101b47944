/*
 * Running the git program on the pool (the commit job, conflicts) or at
 * start-up: git's own plumbing for what libgit2 cannot do as git does
 * (update-index on every index format, status with git's own stat rules,
 * unmerged entries with ls-files). The child gets the repository, the
 * working tree and (optionally) an index file of our choosing, and none
 * of the variables of our own environment that would point it elsewhere;
 * it runs no hooks. Its output goes to memory files, so it never blocks
 * on us, and is handed back whole. gitproc_run_program runs another
 * program of ours the same way (vmem init, at a first start).
 *
 * Blocking; safe from any thread (posix_spawn).
 */
#ifndef VMEM_DAEMON_GITPROC_H
#define VMEM_DAEMON_GITPROC_H

#include <stdbool.h>
#include <stddef.h>

struct gitproc {
	const char *git;     /* the program ("git": from PATH) */
	const char *gitdir;  /* GIT_DIR */
	const char *workdir; /* GIT_WORK_TREE, and the child's directory */
	const char *index;   /* GIT_INDEX_FILE, NULL for the repository's */
	bool no_locks;	     /* GIT_OPTIONAL_LOCKS=0 (a status that must not
				rewrite the index) */
};

/*
 * Run git ARGS... with input on its standard input. On exit status 0,
 * returns 0 with its standard output in *out (malloc'd, NUL-terminated,
 * *outlen bytes; out may be NULL to discard it); otherwise -EIO (or
 * -errno) with errmsg naming the command and git's first line of
 * complaint.
 */
int gitproc_run(const struct gitproc *p, const char *const *args,
		const char *input, size_t inlen, char **out, size_t *outlen,
		char *errmsg, size_t errn);

/*
 * Run prog (looked up in PATH unless it holds a slash) with args
 * (NULL-ended) in directory cwd, with our own environment and an empty
 * standard input; what it returns is as for gitproc_run.
 */
int gitproc_run_program(const char *prog, const char *const *args,
			const char *cwd, char **out, size_t *outlen,
			char *errmsg, size_t errn);

#endif

/*
 * Running a helper program (git) and collecting what it prints: its
 * standard output up to a cap fixed by the caller, the head of its
 * standard error for messages, and its exit status. stdin is /dev/null.
 *
 * Blocking: for the thread pool and start-up only. The child is started
 * with posix_spawn, which is safe from any thread of a multi-threaded
 * process; every descriptor of ours is close-on-exec, so the child sees
 * only its three standard ones.
 */
#ifndef VMEM_DAEMON_CHILD_H
#define VMEM_DAEMON_CHILD_H

#include <stddef.h>

#define CHILD_ERR_MAX 512 /* bytes of stderr kept for messages */

struct child_result {
	char *out;  /* stdout, NUL-terminated (malloc'd, owned: free) */
	size_t len; /* bytes of out, without the NUL */
	int status; /* exit status, or 128 + signal number */
	char err[CHILD_ERR_MAX + 1]; /* head of stderr, NUL-terminated */
};

/*
 * Run argv[0] (looked up in PATH) with argv, in directory cwd (NULL: ours),
 * with our environment changed by env (NULL-ended, may be NULL): an entry
 * "NAME=value" sets NAME, an entry "-NAME" removes it. stdout beyond
 * max_out bytes is an error (-EFBIG, the child is killed). Returns 0 once the
 * child has exited (whatever its status; see res->status) or -errno, with
 * errmsg saying why. child_result_done releases res.
 */
int child_run(const char *const *argv, const char *cwd, const char *const *env,
	      size_t max_out, struct child_result *res, char *errmsg,
	      size_t errn);

void child_result_done(struct child_result *res);

#endif

/*
 * The git program as a child (see gitproc.h). Standard output and error
 * are memory files (memfd), read once the child has exited; standard
 * input is a pipe written whole before waiting, which cannot deadlock as
 * the child's own writes never block.
 */
#include "gitproc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "errmsg.h"
#include "fdio.h"

#define ARGS_MAX 24
#define OURS	 5 /* variables child_env may add */

extern char **environ;

/* Ours without what would redirect git, plus the repository, the working
 * tree, the index and the C locale (its messages are logged). The
 * variables we add come after *first (theirs are borrowed). */
static char **child_env(const struct gitproc *p, size_t *first)
{
	static const char *const drop[] = {"GIT_DIR=",
					   "GIT_WORK_TREE=",
					   "GIT_INDEX_FILE=",
					   "GIT_OBJECT_DIRECTORY=",
					   "GIT_ALTERNATE_OBJECT_DIRECTORIES=",
					   "GIT_COMMON_DIR=",
					   "GIT_NAMESPACE=",
					   "GIT_PREFIX=",
					   "GIT_INDEX_VERSION=",
					   "GIT_OPTIONAL_LOCKS=",
					   "LC_ALL=",
					   NULL};
	size_t n = 0, k = 0;
	char **env;
	int bad = 0;

	while (environ[n])
		n++;
	env = calloc(n + OURS + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool skip = false;

		for (size_t d = 0; drop[d]; d++)
			skip |= strncmp(environ[i], drop[d], strlen(drop[d])) ==
				0;
		if (!skip)
			env[k++] = environ[i];
	}
	*first = k;
	bad |= asprintf(&env[k++], "GIT_DIR=%s", p->gitdir) < 0;
	bad |= asprintf(&env[k++], "GIT_WORK_TREE=%s", p->workdir) < 0;
	bad |= asprintf(&env[k++], "GIT_OPTIONAL_LOCKS=%d",
			p->no_locks ? 0 : 1) < 0;
	bad |= asprintf(&env[k++], "LC_ALL=C") < 0;
	if (p->index)
		bad |= asprintf(&env[k++], "GIT_INDEX_FILE=%s", p->index) < 0;
	if (bad) {
		/* asprintf leaves its pointer undefined on failure */
		for (size_t i = *first; i < k; i++)
			env[i] = NULL;
		free(env);
		return NULL;
	}
	return env;
}

static void env_free(char **env, size_t first)
{
	if (!env)
		return;
	for (size_t i = first; env[i]; i++)
		free(env[i]);
	free(env);
}

/* The content of a memory file, NUL-terminated (malloc'd). */
static char *slurp(int fd, size_t *len)
{
	struct stat st;
	char *buf;
	size_t got = 0;

	if (fstat(fd, &st) < 0)
		return NULL;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return NULL;
	while (got < (size_t)st.st_size) {
		ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got,
				  (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	buf[got] = '\0';
	*len = got;
	return buf;
}

/*
 * Wait until the child pid has exited (0: reap it next) or cancel_fd is
 * readable: then kill it and return -ECANCELED. The child is not reaped
 * here unless killed, so its pid cannot have been reused when the signal
 * goes.
 */
static int wait_or_cancel(pid_t pid, int cancel_fd)
{
	struct pollfd fds[2];
	int pfd = pidfd_open(pid, 0), rc = 0;

	if (pfd < 0)
		return 0; /* no pidfd: wait without the cancel */
	fds[0] = (struct pollfd){.fd = pfd, .events = POLLIN};
	fds[1] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
	for (;;) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break; /* wait without the cancel */
		}
		if (fds[0].revents)
			break;
		if (fds[1].revents) {
			kill(pid, SIGKILL);
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
			rc = -ECANCELED;
			break;
		}
	}
	close(pfd);
	return rc;
}

/*
 * Run prog with argv (argv[0] is prog) and env in directory cwd, input on
 * its standard input; see gitproc_run for what it returns (cancel_fd as
 * there, NULL: none). name and what name the command in messages ("git",
 * "update-index").
 */
static int run(const char *prog, const char *const *argv, char *const *env,
	       const char *cwd, const char *input, size_t inlen,
	       const int *cancel_fd, char **out, size_t *outlen,
	       const char *name, const char *what, char *errmsg, size_t errn)
{
	posix_spawn_file_actions_t fa;
	int in[2] = {-1, -1}, ofd = -1, efd = -1, st, rc = 0;
	bool fa_ok = false;
	pid_t pid = -1;
	size_t len = 0;

	if (out)
		*out = NULL;
	ofd = memfd_create("vmem-git-out", MFD_CLOEXEC);
	efd = memfd_create("vmem-git-err", MFD_CLOEXEC);
	if (ofd < 0 || efd < 0 || pipe2(in, O_CLOEXEC) < 0) {
		rc = -errno;
		errmsg_set(errmsg, errn, "running %s: %s", name,
			   strerror(errno));
		goto out;
	}
	if (posix_spawn_file_actions_init(&fa) != 0) {
		rc = -ENOMEM;
		goto out;
	}
	fa_ok = true;
	if (posix_spawn_file_actions_adddup2(&fa, in[0], 0) ||
	    posix_spawn_file_actions_adddup2(&fa, ofd, 1) ||
	    posix_spawn_file_actions_adddup2(&fa, efd, 2) ||
	    posix_spawn_file_actions_addchdir_np(&fa, cwd)) {
		rc = -ENOMEM;
		goto out;
	}
	rc = posix_spawnp(&pid, prog, &fa, NULL, (char *const *)argv, env);
	if (rc != 0) {
		errmsg_set(errmsg, errn, "cannot run %s: %s", prog,
			   strerror(rc));
		rc = -rc;
		pid = -1;
		goto out;
	}
	close(in[0]);
	in[0] = -1;
	/* A child that exits early makes this fail with EPIPE (SIGPIPE is
	 * ignored by the daemon); its exit status says what went wrong. */
	(void)fdio_write(in[1], input ? input : "", inlen);
	close(in[1]);
	in[1] = -1;
	if (cancel_fd) {
		rc = wait_or_cancel(pid, *cancel_fd);
		if (rc < 0) {
			pid = -1; /* reaped */
			errmsg_set(errmsg, errn, "%s %s: %s", name, what,
				   rc == -ECANCELED ? "given up"
						    : strerror(-rc));
			goto out;
		}
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			rc = -errno;
			goto out;
		}
	}
	pid = -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char *msg = slurp(efd, &len);

		if (msg)
			msg[strcspn(msg, "\n")] = '\0';
		errmsg_set(errmsg, errn, "%s %s failed (%s %d): %s", name, what,
			   WIFEXITED(st) ? "exit status" : "signal",
			   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
			   msg && msg[0] ? msg : "no message");
		free(msg);
		rc = -EIO;
		goto out;
	}
	if (out) {
		*out = slurp(ofd, outlen ? outlen : &len);
		if (!*out) {
			rc = -ENOMEM;
			errmsg_set(errmsg, errn, "out of memory");
		}
	}
out:
	if (pid > 0)
		waitpid(pid, &st, 0);
	if (fa_ok)
		posix_spawn_file_actions_destroy(&fa);
	for (int i = 0; i < 2; i++)
		if (in[i] >= 0)
			close(in[i]);
	if (ofd >= 0)
		close(ofd);
	if (efd >= 0)
		close(efd);
	return rc;
}

int gitproc_run(const struct gitproc *p, const char *const *args,
		const char *input, size_t inlen, char **out, size_t *outlen,
		char *errmsg, size_t errn)
{
	size_t first = 0;
	char **env = child_env(p, &first);
	const char *argv[ARGS_MAX + 4];
	size_t k = 0;
	int rc;

	if (out)
		*out = NULL;
	if (!env) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	argv[k++] = p->git;
	argv[k++] = "-c";
	argv[k++] = "core.hooksPath=/dev/null";
	for (size_t i = 0; args[i] && i < ARGS_MAX; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	rc = run(p->git, argv, env, p->workdir, input, inlen, p->cancel_fd, out,
		 outlen, "git", args[0], errmsg, errn);
	env_free(env, first);
	return rc;
}

int gitproc_run_program(const char *prog, const char *const *args,
			const char *cwd, char **out, size_t *outlen,
			char *errmsg, size_t errn)
{
	const char *argv[ARGS_MAX + 2];
	char what[256] = "";
	size_t k = 0, w = 0;

	argv[k++] = prog;
	for (size_t i = 0; args[i] && i < ARGS_MAX; i++) {
		argv[k++] = args[i];
		if (w < sizeof(what))
			w += (size_t)snprintf(what + w, sizeof(what) - w,
					      "%s%s", i ? " " : "", args[i]);
	}
	argv[k] = NULL;
	return run(prog, argv, environ, cwd, NULL, 0, NULL, out, outlen, prog,
		   what, errmsg, errn);
}

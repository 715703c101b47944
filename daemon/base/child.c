/*
 * Running a helper program (see child.h). Both pipes are drained together
 * with poll, so a child that fills its stderr pipe while we wait on stdout
 * (or the reverse) never deadlocks; the child is always reaped.
 */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "errmsg.h"

extern char **environ;

#define ENV_MAX 4096 /* entries of our environment we pass on */

/* Does environment entry e name the variable of spec ("NAME=..." or
 * "-NAME")? */
static bool same_name(const char *e, const char *spec)
{
	size_t n;

	if (spec[0] == '-')
		spec++;
	n = strcspn(spec, "=");
	return strncmp(e, spec, n) == 0 && e[n] == '=';
}

/* Our environment with env's changes (a malloc'd array of borrowed
 * strings), or NULL. */
static char **make_env(const char *const *env)
{
	size_t n = 0, extra = 0, k = 0;
	char **out;

	while (environ[n] && n < ENV_MAX)
		n++;
	while (env && env[extra])
		extra++;
	out = calloc(n + extra + 1, sizeof(*out));
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool drop = false;

		for (size_t j = 0; j < extra && !drop; j++)
			drop = same_name(environ[i], env[j]);
		if (!drop)
			out[k++] = environ[i];
	}
	for (size_t j = 0; j < extra; j++)
		if (env[j][0] != '-')
			out[k++] = (char *)env[j];
	out[k] = NULL;
	return out;
}

/* Append what fd has to *buf (growing it up to max bytes). 1 at EOF, 0
 * for more to come, -errno; -EFBIG past max. With keep false the bytes
 * past max are read and dropped. */
static int drain(int fd, char **buf, size_t *len, size_t *cap, size_t max,
		 bool keep)
{
	char tmp[65536];
	ssize_t r = read(fd, tmp, sizeof(tmp));

	if (r < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -errno;
	if (r == 0)
		return 1;
	if (*len + (size_t)r > max) {
		if (keep)
			return -EFBIG;
		r = (ssize_t)(max - *len);
	}
	if (*len + (size_t)r + 1 > *cap) {
		size_t ncap = *cap ? *cap : 4096;
		char *nb;

		while (ncap < *len + (size_t)r + 1)
			ncap *= 2;
		nb = realloc(*buf, ncap);
		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = ncap;
	}
	memcpy(*buf + *len, tmp, (size_t)r);
	*len += (size_t)r;
	(*buf)[*len] = '\0';
	return 0;
}

int child_run(const char *const *argv, const char *cwd, const char *const *env,
	      size_t max_out, struct child_result *res, char *errmsg,
	      size_t errn)
{
	posix_spawn_file_actions_t fa;
	int out[2] = {-1, -1}, err[2] = {-1, -1};
	char **envp = NULL, *ebuf = NULL;
	size_t elen = 0, ecap = 0, ocap = 0;
	bool fa_ok = false, out_open, err_open;
	pid_t pid = -1;
	int rc, st;

	memset(res, 0, sizeof(*res));
	envp = make_env(env);
	if (!envp) {
		rc = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
		rc = -errno;
		errmsg_set(errmsg, errn, "pipe: %s", strerror(-rc));
		goto out;
	}
	rc = posix_spawn_file_actions_init(&fa);
	if (rc == 0) {
		fa_ok = true;
		rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO,
						      "/dev/null", O_RDONLY, 0);
	}
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(&fa, out[1],
						      STDOUT_FILENO);
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(&fa, err[1],
						      STDERR_FILENO);
	if (rc == 0 && cwd)
		rc = posix_spawn_file_actions_addchdir_np(&fa, cwd);
	if (rc == 0)
		rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv,
				  envp);
	if (rc != 0) {
		pid = -1;
		errmsg_set(errmsg, errn, "cannot run %s: %s", argv[0],
			   strerror(rc));
		rc = -rc;
		goto out;
	}
	close(out[1]);
	close(err[1]);
	out[1] = err[1] = -1;
	out_open = err_open = true;
	rc = 0;
	while (rc == 0 && (out_open || err_open)) {
		struct pollfd p[2] = {{out_open ? out[0] : -1, POLLIN, 0},
				      {err_open ? err[0] : -1, POLLIN, 0}};
		int r;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (out_open && p[0].revents) {
			r = drain(out[0], &res->out, &res->len, &ocap, max_out,
				  true);
			if (r < 0)
				rc = r;
			else if (r == 1)
				out_open = false;
		}
		if (rc == 0 && err_open && p[1].revents) {
			r = drain(err[0], &ebuf, &elen, &ecap, CHILD_ERR_MAX,
				  false);
			if (r < 0)
				rc = r;
			else if (r == 1)
				err_open = false;
		}
	}
	if (rc < 0) {
		kill(pid, SIGKILL);
		errmsg_set(errmsg, errn, "%s: %s", argv[0],
			   rc == -EFBIG ? "more output than expected"
					: strerror(-rc));
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			if (rc == 0) {
				rc = -errno;
				errmsg_set(errmsg, errn, "waitpid: %s",
					   strerror(-rc));
			}
			st = 0;
			break;
		}
	}
	res->status = WIFEXITED(st)	? WEXITSTATUS(st)
		      : WIFSIGNALED(st) ? 128 + WTERMSIG(st)
					: 255;
	if (ebuf)
		snprintf(res->err, sizeof(res->err), "%s", ebuf);
	if (!res->out && rc == 0) {
		res->out = calloc(1, 1);
		if (!res->out) {
			rc = -ENOMEM;
			errmsg_set(errmsg, errn, "out of memory");
		}
	}
out:
	if (fa_ok)
		posix_spawn_file_actions_destroy(&fa);
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
	}
	free(envp);
	free(ebuf);
	if (rc < 0)
		child_result_done(res);
	return rc;
}

void child_result_done(struct child_result *res)
{
	if (!res)
		return;
	free(res->out);
	res->out = NULL;
	res->len = 0;
}

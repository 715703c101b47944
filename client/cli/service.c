/*
 * vmem service (see service.h). Files are written whole through a temp
 * file and a rename, and only when their text changes, so a second
 * install is a no-op that says so.
 */
#include "service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "protocol/sockpath.h"
#include "units.h"

extern char **environ;

enum { ST_OK = 0, ST_FAILED = 1, ST_ENV = 2 };

struct paths {
	char key[17];
	char unit_dir[PATH_MAX];
	char trees_dir[PATH_MAX];
	char env_file[PATH_MAX];
	char socket_unit[64];
	char service_unit[64];
};

/* $XDG_CONFIG_HOME, else ~/.config. */
static int config_home(char *out, size_t n)
{
	const char *x = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

	if (x && x[0] == '/')
		return snprintf(out, n, "%s", x) < (int)n ? 0 : -ENAMETOOLONG;
	if (!home || home[0] != '/') {
		fputs("vmem: neither XDG_CONFIG_HOME nor HOME is an absolute "
		      "path\n",
		      stderr);
		return -EINVAL;
	}
	return snprintf(out, n, "%s/.config", home) < (int)n ? 0
							     : -ENAMETOOLONG;
}

static int get_paths(const char *root, struct paths *p)
{
	char home[PATH_MAX];

	if (config_home(home, sizeof(home)) < 0)
		return -EINVAL;
	sockpath_key(root, p->key);
	snprintf(p->socket_unit, sizeof(p->socket_unit), "vmemd@%s.socket",
		 p->key);
	snprintf(p->service_unit, sizeof(p->service_unit), "vmemd@%s.service",
		 p->key);
	if (snprintf(p->unit_dir, sizeof(p->unit_dir), "%s/systemd/user",
		     home) >= (int)sizeof(p->unit_dir) ||
	    snprintf(p->trees_dir, sizeof(p->trees_dir), "%s/vmem/trees",
		     home) >= (int)sizeof(p->trees_dir) ||
	    snprintf(p->env_file, sizeof(p->env_file), "%s/%s.env",
		     p->trees_dir, p->key) >= (int)sizeof(p->env_file)) {
		fputs("vmem: configuration path too long\n", stderr);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* mkdir -p with mode for the directories it creates. */
static int make_dirs(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Does path hold exactly text? */
static bool same_text(const char *path, const char *text)
{
	size_t n = strlen(text);
	char *buf = malloc(n + 2);
	FILE *f = fopen(path, "rb");
	bool same = false;

	if (buf && f)
		same = fread(buf, 1, n + 1, f) == n &&
		       memcmp(buf, text, n) == 0;
	if (f)
		fclose(f);
	free(buf);
	return same;
}

/* Write text to path (temp + rename) unless it is there already; say
 * which. */
static int put_file(const char *path, const char *text, mode_t mode)
{
	char tmp[PATH_MAX + 8];
	FILE *f;
	int rc = 0;

	if (same_text(path, text)) {
		printf("up to date: %s\n", path);
		return 0;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f || fputs(text, f) < 0 || fchmod(fileno(f), mode) < 0)
		rc = -errno;
	if (f && fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		fprintf(stderr, "vmem: cannot write %s: %s\n", path,
			strerror(-rc));
		return rc;
	}
	printf("wrote %s\n", path);
	return 0;
}

/* text with every @VMEMD@ replaced; malloc'd. */
static char *fill(const char *text, const char *vmemd)
{
	static const char mark[] = "@VMEMD@";
	const char *at = strstr(text, mark);
	size_t n = strlen(text), vn = strlen(vmemd);
	char *out;

	if (!at) {
		out = strdup(text);
		return out;
	}
	out = malloc(n - (sizeof(mark) - 1) + vn + 1);
	if (!out)
		return NULL;
	memcpy(out, text, (size_t)(at - text));
	memcpy(out + (at - text), vmemd, vn);
	strcpy(out + (at - text) + vn, at + sizeof(mark) - 1);
	return out;
}

/* Run systemctl --user ARGS..., echoing the command; its exit status. */
static int systemctl(const char *a1, const char *a2, const char *a3,
		     const char *a4)
{
	char *argv[] = {"systemctl", "--user",	 (char *)a1, (char *)a2,
			(char *)a3,  (char *)a4, NULL};
	pid_t pid;
	int rc, status;

	fputs("$ systemctl --user", stdout);
	for (int i = 2; argv[i]; i++)
		printf(" %s", argv[i]);
	putchar('\n');
	fflush(stdout);
	rc = posix_spawnp(&pid, "systemctl", NULL, NULL, argv, environ);
	if (rc) {
		fprintf(stderr, "vmem: cannot run systemctl: %s\n",
			strerror(rc));
		return 127;
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 127;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int service_manager_reachable(void)
{
	char *argv[] = {"systemctl", "--user", "show-environment", NULL};
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int rc, status;

	/* Quietly: only whether systemctl reaches the user manager. */
	if (posix_spawn_file_actions_init(&fa))
		return -ENOMEM;
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null",
					 O_WRONLY, 0);
	rc = posix_spawnp(&pid, "systemctl", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		return -rc;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ENOTCONN;
}

/* The absolute path of the daemon program (ExecStart needs one). */
static int absolute_vmemd(const char *vmemd, char *out, size_t n)
{
	const char *path = getenv("PATH");
	char cand[PATH_MAX];

	if (strchr(vmemd, '/'))
		return realpath(vmemd, out) && strlen(out) < n ? 0 : -ENOENT;
	while (path && *path) {
		size_t len = strcspn(path, ":");

		if (len > 0 &&
		    snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, path,
			     vmemd) < (int)sizeof(cand) &&
		    access(cand, X_OK) == 0)
			return realpath(cand, out) ? 0 : -errno;
		path += len + (path[len] == ':');
	}
	return -ENOENT;
}

/* VMEM_REPO="root" in the syntax of EnvironmentFile=. */
static char *env_text(const char *root)
{
	size_t n = strlen(root);
	char *out = malloc(2 * n + 16), *o = out;

	if (!out)
		return NULL;
	o += sprintf(o, "VMEM_REPO=\"");
	for (const char *s = root; *s; s++) {
		if (*s == '"' || *s == '\\' || *s == '$' || *s == '`')
			*o++ = '\\';
		*o++ = *s;
	}
	strcpy(o, "\"\n");
	return out;
}

static int install(const char *root, const char *vmemd, const struct paths *p)
{
	char exe[PATH_MAX];
	char *socket_text = NULL, *service_text = NULL, *env = NULL;
	int status = ST_OK;

	if (strpbrk(root, "\n\r")) {
		fputs("vmem: a working tree whose path holds a line break "
		      "cannot be described to systemd\n",
		      stderr);
		return ST_ENV;
	}
	if (absolute_vmemd(vmemd, exe, sizeof(exe)) < 0) {
		fprintf(stderr,
			"vmem: cannot find %s (set VMEMD to the vmemd to "
			"run)\n",
			vmemd);
		return ST_ENV;
	}
	if (!getenv("XDG_RUNTIME_DIR") || getenv("VMEM_SOCKET"))
		fputs("vmem: note: the unit listens under $XDG_RUNTIME_DIR; "
		      "clients find it there when XDG_RUNTIME_DIR is set and "
		      "VMEM_SOCKET is not\n",
		      stderr);
	socket_text = fill(socket_unit, exe);
	service_text = fill(service_unit, exe);
	env = env_text(root);
	if (!socket_text || !service_text || !env) {
		fputs("vmem: out of memory\n", stderr);
		status = ST_ENV;
		goto out;
	}
	if (make_dirs(p->unit_dir, 0755) < 0 ||
	    make_dirs(p->trees_dir, 0700) < 0) {
		fprintf(stderr, "vmem: cannot create %s or %s: %s\n",
			p->unit_dir, p->trees_dir, strerror(errno));
		status = ST_FAILED;
		goto out;
	}
	{
		char sock_path[PATH_MAX + 32], serv_path[PATH_MAX + 32];

		snprintf(sock_path, sizeof(sock_path), "%s/vmemd@.socket",
			 p->unit_dir);
		snprintf(serv_path, sizeof(serv_path), "%s/vmemd@.service",
			 p->unit_dir);
		if (put_file(sock_path, socket_text, 0644) < 0 ||
		    put_file(serv_path, service_text, 0644) < 0 ||
		    put_file(p->env_file, env, 0600) < 0) {
			status = ST_FAILED;
			goto out;
		}
	}
	if (systemctl("daemon-reload", NULL, NULL, NULL) != 0 ||
	    systemctl("enable", "--now", p->socket_unit, NULL) != 0) {
		fputs("vmem: systemctl failed; see above\n", stderr);
		status = ST_FAILED;
		goto out;
	}
	printf("%s serves %s; vmemd starts on the first connection\n",
	       p->socket_unit, root);
out:
	free(socket_text);
	free(service_text);
	free(env);
	return status;
}

/* Does another tree still have an environment file? The directory goes
 * when it is empty. */
static bool trees_left(const char *dir)
{
	return rmdir(dir) < 0 && errno != ENOENT;
}

static int uninstall(const struct paths *p)
{
	int status = ST_OK;

	if (systemctl("disable", "--now", p->socket_unit, NULL) != 0)
		status = ST_FAILED;
	if (systemctl("stop", p->service_unit, NULL, NULL) != 0)
		status = ST_FAILED;
	if (unlink(p->env_file) == 0)
		printf("removed %s\n", p->env_file);
	else if (errno != ENOENT)
		fprintf(stderr, "vmem: cannot remove %s: %s\n", p->env_file,
			strerror(errno));
	if (!trees_left(p->trees_dir)) {
		char path[PATH_MAX + 32];

		for (int i = 0; i < 2; i++) {
			snprintf(path, sizeof(path), "%s/vmemd@.%s",
				 p->unit_dir, i ? "service" : "socket");
			if (unlink(path) == 0)
				printf("removed %s (no tree uses it)\n", path);
		}
	}
	if (systemctl("daemon-reload", NULL, NULL, NULL) != 0)
		status = ST_FAILED;
	return status;
}

static int status_of(const char *root, const struct paths *p)
{
	int rc;

	printf("tree:      %s\nkey:       %s\nenv file:  %s%s\n", root, p->key,
	       p->env_file, access(p->env_file, F_OK) == 0 ? "" : " (absent)");
	rc = systemctl("status", "--no-pager", p->socket_unit, p->service_unit);
	return rc == 0 ? ST_OK : ST_FAILED;
}

int service_command(const char *sub, const char *root, const char *vmemd)
{
	struct paths p;

	if (get_paths(root, &p) < 0)
		return ST_ENV;
	if (strcmp(sub, "install") == 0)
		return install(root, vmemd, &p);
	if (strcmp(sub, "uninstall") == 0)
		return uninstall(&p);
	return status_of(root, &p);
}

/*
 * The merge driver of decision files and its registration (see merge.h).
 * The rules are symmetric in the two sides, so a merge, a rebase, a
 * cherry-pick or a stash pop of the same two versions keeps the same one,
 * in every clone.
 */
#include "merge.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol/conflict.h"
#include "protocol/decision.h"

extern char **environ;

#define FILE_MAX   (1 << 20)
#define ANY_X	   1000000 /* the largest max_x a daemon may be given */
#define VM_PREFIX  ".vector-memory/"
#define ATTR_FILE  ".gitattributes"
#define DRIVER_KEY "merge.vmem.driver"
#define NAME_KEY   "merge.vmem.name"
#define NAME_VALUE "vmem: layer-aware merge of decision files"

static const char *const attr_lines[] = {
	".vector-memory/** merge=vmem",
	".vector-memory/experiences/** merge=union",
};

/* A regular file's bytes (at most FILE_MAX), NUL-terminated; NULL with
 * errno. */
static char *read_all(const char *path, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode) || st.st_size > FILE_MAX) {
		errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
		goto fail;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		goto fail;
	while (got < (size_t)st.st_size) {
		r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	buf[got] = '\0';
	*len = got;
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * Run git with argv (argv[0] "git") in cwd, its stdout (at most 64 KiB,
 * trailing newline cut) in out when out is not NULL. The exit status, or
 * -errno.
 */
static int run_git(const char *cwd, const char *const *argv, char *out,
		   size_t n)
{
	posix_spawn_file_actions_t fa;
	int pfd[2], st = 0, rc;
	size_t got = 0;
	pid_t pid;
	ssize_t r;
	char buf[65536];

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null",
					 O_RDONLY, 0);
	if (cwd)
		posix_spawn_file_actions_addchdir_np(&fa, cwd);
	rc = posix_spawnp(&pid, "git", &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc != 0) {
		close(pfd[0]);
		return -rc;
	}
	for (;;) {
		r = read(pfd[0], buf + got, sizeof(buf) - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(buf) - 1) {
			/* more than we want: drain the rest */
			char sink[4096];

			while (read(pfd[0], sink, sizeof(sink)) > 0)
				;
			break;
		}
	}
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	buf[got] = '\0';
	while (got && buf[got - 1] == '\n')
		buf[--got] = '\0';
	if (out && n) {
		if (got >= n)
			got = n - 1;
		memcpy(out, buf, got);
		out[got] = '\0';
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* mkdir name in dfd (0700) if absent, then open it without following a
 * symlink: an fd or -errno. */
static int subdir(int dfd, const char *name)
{
	if (mkdirat(dfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	dfd = openat(dfd, name,
		     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return dfd < 0 ? -errno : dfd;
}

/* Write a conflict record durably in gitdir/vmem/conflicts; its path in
 * where. 0 or -errno. */
static int write_record(const char *gitdir, const struct coord *c,
			const char *kept, const char *lost, const char *reason,
			char *where, size_t wn)
{
	struct timespec ts;
	int64_t usec;
	char name[CONFLICT_NAME_MAX], tmp[CONFLICT_NAME_MAX + 32];
	char *text = NULL;
	size_t len = 0;
	int gfd = -1, sfd = -1, cfd = -1, fd = -1, rc;

	clock_gettime(CLOCK_REALTIME, &ts);
	usec = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	text = conflict_record_text(CONFLICT_KIND_DRIVER, c, usec, reason, kept,
				    lost, &len);
	if (!text || conflict_record_name(CONFLICT_KIND_DRIVER, c, usec, name,
					  sizeof(name)) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	gfd = open(gitdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (gfd < 0) {
		rc = -errno;
		goto out;
	}
	sfd = subdir(gfd, "vmem");
	if (sfd < 0) {
		rc = sfd;
		goto out;
	}
	cfd = subdir(sfd, CONFLICT_DIRNAME);
	if (cfd < 0) {
		rc = cfd;
		goto out;
	}
	snprintf(tmp, sizeof(tmp), ".tmp-%ld-%s", (long)getpid(), name);
	fd = openat(cfd, tmp,
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	rc = write_all(fd, text, len);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	fd = -1;
	if (rc == 0 && renameat(cfd, tmp, cfd, name) < 0)
		rc = -errno;
	if (rc == 0 && fsync(cfd) < 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(cfd, tmp, 0);
	else
		snprintf(where, wn, "%s/vmem/%s/%s", gitdir, CONFLICT_DIRNAME,
			 name);
out:
	free(text);
	if (cfd >= 0)
		close(cfd);
	if (sfd >= 0)
		close(sfd);
	if (gfd >= 0)
		close(gfd);
	return rc;
}

/* The coordinate of a path git names (".vector-memory/x-007/y-2-z-1.json"
 * from the top of the tree). */
static int path_coord(const char *path, struct coord *c)
{
	const char *rel, *slash;
	char dir[32];

	if (strncmp(path, VM_PREFIX, strlen(VM_PREFIX)) != 0)
		return -1;
	rel = path + strlen(VM_PREFIX);
	slash = strchr(rel, '/');
	if (!slash || (size_t)(slash - rel) >= sizeof(dir))
		return -1;
	memcpy(dir, rel, (size_t)(slash - rel));
	dir[slash - rel] = '\0';
	return coord_from_path(dir, slash + 1, ANY_X, c);
}

/* A side of the merge as a decision at c; msg says why not. */
static int side(const char *file, const char *which, const struct coord *c,
		struct decision *d, char **text, size_t *len, char *msg,
		size_t n)
{
	char why[VMEM_ERRMSG_LEN];

	*text = read_all(file, len);
	if (!*text) {
		snprintf(msg, n, "cannot read %s (%s): %s", which, file,
			 strerror(errno));
		return -1;
	}
	if (decision_parse(*text, *len, ANY_X, d, why) != 0) {
		snprintf(msg, n, "%s is not a decision: %s", which, why);
		return -1;
	}
	if (coord_cmp(&d->coord, c) != 0) {
		snprintf(msg, n, "%s is a decision of (%d, %d, %d)", which,
			 d->coord.x, d->coord.y, d->coord.z);
		return -1;
	}
	return 0;
}

/*
 * Does a win over b? z=1: the earlier timestamp (first writer); z=2..4:
 * the higher version, then the later timestamp. Equal on those, the
 * greater compact text, so that both clones choose alike.
 */
static bool a_wins(const struct decision *a, const struct decision *b,
		   const char *ca, const char *cb, char *why, size_t n)
{
	int t = strcmp(a->timestamp, b->timestamp);
	const struct decision *w;
	bool first;

	if (a->coord.z == 1) {
		first = t != 0 ? t < 0 : strcmp(ca, cb) > 0;
		w = first ? a : b;
		snprintf(why, n,
			 "layer z=1 is write-once: both sides wrote it; the "
			 "first writer (%s by %s) is kept",
			 w->timestamp, w->agent_id);
		return first;
	}
	if (a->version != b->version) {
		w = a->version > b->version ? a : b;
		snprintf(why, n, "the higher version (%lld by %s) is kept",
			 (long long)w->version, w->agent_id);
		return a->version > b->version;
	}
	first = t != 0 ? t > 0 : strcmp(ca, cb) > 0;
	w = first ? a : b;
	snprintf(why, n,
		 "both sides hold version %lld: the later write (%s by %s) is "
		 "kept",
		 (long long)a->version, w->timestamp, w->agent_id);
	return first;
}

int merge_driver(const char *o, const char *a, const char *b, const char *path)
{
	static const char *const rev_parse[] = {"git", "rev-parse",
						"--absolute-git-dir", NULL};
	struct decision da, db;
	char msg[400], why[CONFLICT_REASON_MAX], gitdir[PATH_MAX];
	char where[PATH_MAX + 128];
	char *ta = NULL, *tb = NULL, *ca = NULL, *cb = NULL;
	size_t la = 0, lb = 0, n;
	struct coord c;
	bool keep_a;
	int status = 1, fd, rc;

	(void)o; /* the rules need no ancestor */
	memset(&da, 0, sizeof(da));
	memset(&db, 0, sizeof(db));
	if (path_coord(path, &c) < 0) {
		fprintf(stderr,
			"vmem merge-driver: %s is not a decision file: leaving "
			"the conflict to you\n",
			path);
		return 1;
	}
	if (side(a, "ours", &c, &da, &ta, &la, msg, sizeof(msg)) < 0 ||
	    side(b, "theirs", &c, &db, &tb, &lb, msg, sizeof(msg)) < 0) {
		fprintf(stderr,
			"vmem merge-driver: %s: %s: leaving the "
			"conflict to you\n",
			path, msg);
		goto out;
	}
	ca = decision_dump_compact(&da, &n);
	cb = decision_dump_compact(&db, &n);
	if (!ca || !cb) {
		fprintf(stderr, "vmem merge-driver: out of memory\n");
		status = 2;
		goto out;
	}
	if (strcmp(ca, cb) == 0) {
		status = 0; /* the same decision: ours stands */
		goto out;
	}
	keep_a = a_wins(&da, &db, ca, cb, why, sizeof(why));
	if (run_git(NULL, rev_parse, gitdir, sizeof(gitdir)) != 0 ||
	    !gitdir[0]) {
		fprintf(stderr,
			"vmem merge-driver: %s: cannot find the git directory "
			"for the conflict record: leaving the conflict to "
			"you\n",
			path);
		goto out;
	}
	rc = write_record(gitdir, &c, keep_a ? ca : cb, keep_a ? cb : ca, why,
			  where, sizeof(where));
	if (rc < 0) {
		fprintf(stderr,
			"vmem merge-driver: %s: cannot keep the other version "
			"in a conflict record (%s): leaving the conflict to "
			"you\n",
			path, strerror(-rc));
		goto out;
	}
	if (!keep_a) {
		fd = open(a, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 || write_all(fd, tb, lb) < 0 || close(fd) < 0) {
			fprintf(stderr,
				"vmem merge-driver: cannot write %s: %s\n", a,
				strerror(errno));
			status = 2;
			goto out;
		}
	}
	fprintf(stderr,
		"vmem merge-driver: %s: %s; the other version is in %s\n", path,
		why, where);
	status = 0;
out:
	decision_done(&da);
	decision_done(&db);
	free(ta);
	free(tb);
	free(ca);
	free(cb);
	return status;
}

/* ---- vmem init ---- */

/* Does text hold line (exactly, but for trailing blanks and CR)? */
static bool has_line(const char *text, size_t len, const char *line)
{
	size_t n = strlen(line), off = 0;

	while (off < len) {
		const char *p = text + off, *nl = memchr(p, '\n', len - off);
		size_t l = nl ? (size_t)(nl - p) : len - off;

		off += l + 1;
		while (l && (p[l - 1] == '\r' || p[l - 1] == ' ' ||
			     p[l - 1] == '\t'))
			l--;
		if (l == n && memcmp(p, line, n) == 0)
			return true;
	}
	return false;
}

/* The driver's command line for git: this program, quoted for sh. */
static int driver_command(char *out, size_t n)
{
	char exe[PATH_MAX], q[PATH_MAX * 4 + 3];
	size_t k = 0;

	if (!realpath("/proc/self/exe", exe))
		return -errno;
	q[k++] = '\'';
	for (const char *p = exe; *p; p++) {
		if (*p == '\'') {
			memcpy(q + k, "'\\''", 4);
			k += 4;
		} else {
			q[k++] = *p;
		}
	}
	q[k++] = '\'';
	q[k] = '\0';
	if ((size_t)snprintf(out, n, "%s merge-driver %%O %%A %%B %%P", q) >= n)
		return -ENAMETOOLONG;
	return 0;
}

/* Append the lines the root's .gitattributes lacks; the lines appended
 * go to added. The last matching line of the file wins, so once one line
 * is appended every line after it in attr_lines is appended too (a file
 * that had only the experiences' line keeps merge=union for them).
 * 0 or -errno. */
static int attributes(const char *root, json_t *added)
{
	char path[PATH_MAX + 32], *text;
	size_t len = 0;
	bool nl_needed, appending = false;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", root, ATTR_FILE);
	text = read_all(path, &len);
	if (!text && errno != ENOENT)
		return -errno;
	nl_needed = text && len && text[len - 1] != '\n';
	for (size_t i = 0; i < sizeof(attr_lines) / sizeof(attr_lines[0]);
	     i++) {
		appending |= !text || !has_line(text, len, attr_lines[i]);
		if (appending)
			json_array_append_new(added,
					      json_string(attr_lines[i]));
	}
	free(text);
	if (json_array_size(added) == 0)
		return 0;
	/* Appended, never rewritten: the user's lines stay as they are. */
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
		  0666);
	if (fd < 0)
		return -errno;
	if (nl_needed)
		rc = write_all(fd, "\n", 1);
	for (size_t i = 0; rc == 0 && i < json_array_size(added); i++) {
		const char *line = json_string_value(json_array_get(added, i));

		rc = write_all(fd, line, strlen(line));
		if (rc == 0)
			rc = write_all(fd, "\n", 1);
	}
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* Set key to value in the repository's configuration unless it is so;
 * what was set goes to set. 0 or -errno. */
static int config(const char *root, const char *key, const char *value,
		  json_t *set)
{
	const char *get[] = {"git", "config", "--get", key, NULL};
	const char *put[] = {"git", "config", key, value, NULL};
	char now[PATH_MAX * 4 + 64];

	if (run_git(root, get, now, sizeof(now)) == 0 &&
	    strcmp(now, value) == 0)
		return 0;
	if (run_git(root, put, NULL, 0) != 0)
		return -EIO;
	json_object_set_new(set, key, json_string(value));
	return 0;
}

int merge_init(const char *root, bool json)
{
	char cmd[PATH_MAX * 4 + 64];
	json_t *added = json_array(), *set = json_object(), *res;
	const char *key;
	json_t *v;
	size_t i;
	int rc, status = 2;
	char *text;

	if (!added || !set) {
		fputs("vmem: out of memory\n", stderr);
		goto out;
	}
	rc = driver_command(cmd, sizeof(cmd));
	if (rc < 0) {
		fprintf(stderr, "vmem: cannot find this program's path: %s\n",
			strerror(-rc));
		goto out;
	}
	rc = attributes(root, added);
	if (rc < 0) {
		fprintf(stderr, "vmem: cannot update %s/%s: %s\n", root,
			ATTR_FILE, strerror(-rc));
		goto out;
	}
	if (config(root, NAME_KEY, NAME_VALUE, set) < 0 ||
	    config(root, DRIVER_KEY, cmd, set) < 0) {
		fprintf(stderr, "vmem: git config failed in %s\n", root);
		goto out;
	}
	status = 0;
	if (json) {
		res = json_pack("{s:O,s:O}", "gitattributes", added, "config",
				set);
		text = res ? json_dumps(res, JSON_COMPACT) : NULL;
		if (text)
			puts(text);
		free(text);
		json_decref(res);
		goto out;
	}
	json_array_foreach(added, i, v) printf("appended to %s/%s: %s\n", root,
					       ATTR_FILE, json_string_value(v));
	json_object_foreach(set, key, v)
		printf("set %s = %s\n", key, json_string_value(v));
	if (json_array_size(added))
		printf("%s is a file of your tree: commit it so that every "
		       "clone merges decisions alike\n",
		       ATTR_FILE);
	if (!json_array_size(added) && !json_object_size(set))
		printf("the merge driver is registered in %s already\n", root);
out:
	json_decref(added);
	json_decref(set);
	return status;
}

/*
 * Git operations in progress (see gitop.h): the names git gives its
 * state files, in the order a message should prefer them (a rebase that
 * stopped on a conflicted cherry-pick is a rebase to the user).
 */
#include "gitop.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gitlock.h"

static const struct {
	const char *name;
	const char *why;
} states[] = {
	{"rebase-merge", "rebase in progress"},
	{"rebase-apply", "rebase or am in progress"},
	{"CHERRY_PICK_HEAD", "cherry-pick in progress"},
	{"REVERT_HEAD", "revert in progress"},
	{"sequencer", "cherry-pick or revert in progress"},
	{"MERGE_HEAD", "merge in progress"},
	{"BISECT_LOG", "bisect in progress"},
	/* not AUTO_MERGE: git 2.39 leaves it after operations that ended */
	{"index.lock", "index.lock is held by another process"},
};

/*
 * One listing of the git directory finds every state file: it costs
 * about what one lstat does, where the states took eight before each
 * file the writer puts in the tree. `git stash` (and the stash of rebase
 * --autostash) also reads the working tree into a temporary index,
 * index.stash.<pid>, before it resets the files it stashed: a file
 * written meanwhile could be reset without being stashed.
 */
bool gitop_busy(const char *gitdir, char *why, size_t n)
{
	enum { N_STATES = sizeof(states) / sizeof(states[0]) };
	bool present[N_STATES] = {false}, stash = false;
	char path[4096];
	size_t len = strlen(gitdir);
	struct dirent *de;
	DIR *dir;
	int e;

	while (len > 1 && gitdir[len - 1] == '/')
		len--;
	if (len + 32 >= sizeof(path)) {
		snprintf(why, n, "git directory path too long");
		return true;
	}
	snprintf(path, sizeof(path), "%.*s", (int)len, gitdir);
	dir = opendir(path);
	if (!dir) {
		snprintf(why, n, "cannot read %s: %s", path, strerror(errno));
		return true;
	}
	errno = 0;
	while ((de = readdir(dir))) {
		stash |= strncmp(de->d_name, "index.stash.", 12) == 0;
		for (size_t i = 0; i < N_STATES; i++)
			present[i] |= strcmp(de->d_name, states[i].name) == 0;
	}
	e = errno;
	closedir(dir);
	if (e) {
		snprintf(why, n, "cannot read %s: %s", path, strerror(e));
		return true;
	}
	for (size_t i = 0; i < N_STATES; i++) {
		struct stat st;

		if (!present[i])
			continue;
		snprintf(path + len, sizeof(path) - len, "/%s", states[i].name);
		if (lstat(path, &st) < 0) {
			if (errno == ENOENT)
				continue; /* gone since the listing */
			snprintf(why, n, "cannot check %s: %s", path,
				 strerror(errno));
			return true;
		}
		if (gitlock_ours(&st))
			continue; /* our own commit's index.lock */
		snprintf(why, n, "%s", states[i].why);
		return true;
	}
	if (stash) {
		snprintf(why, n, "stash in progress");
		return true;
	}
	if (n)
		why[0] = '\0';
	return false;
}

/* A small file of /proc into buf (NUL-terminated); its length or -1. */
static ssize_t proc_read(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -1;
	r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -1;
	buf[r] = '\0';
	return r;
}

/* Seconds since boot, as /proc's start times count. */
static double uptime_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Does the NUL-separated command line of pid hold the argument arg? */
static bool has_arg(long pid, const char *arg)
{
	char path[64], cmd[1024];
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	len = proc_read(path, cmd, sizeof(cmd));
	/* (the first string is the program itself) */
	for (const char *p = cmd; len > 0 && p < cmd + len; p += strlen(p) + 1)
		if (p != cmd && strcmp(p, arg) == 0)
			return true;
	return false;
}

const char *const gitop_tree_changers[] = {
	"rebase", "stash",   "merge", "pull",	     "checkout", "switch",
	"reset",  "restore", "am",    "cherry-pick", "revert",	 NULL};

/* Does pid's command line hold one of args (NULL-terminated)? */
static bool has_any_arg(long pid, const char *const *args)
{
	for (; *args; args++)
		if (has_arg(pid, *args))
			return true;
	return false;
}

/* Is pid a git process (git, or one of its helpers: git-upload-pack...)?
 * Its name is read from /proc/PID/comm, which costs the kernel nothing
 * beyond the copy, where /proc/PID/stat adds up the times and memory of
 * every thread: the file writer asks before every pass, of every process
 * on the host. */
static bool is_git(long pid)
{
	char path[64], comm[32];
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
	len = proc_read(path, comm, sizeof(comm));
	if (len < 4 || strncmp(comm, "git", 3) != 0)
		return false;
	return comm[3] == '\n' || comm[3] == '-';
}

bool gitop_git_in_tree(const char *root, double max_age_s,
		       const char *const *subcommands, long *pid_out)
{
	char path[64], cwd[PATH_MAX];
	size_t rlen = strlen(root);
	pid_t self = getpid();
	double now = uptime_s(), hz = (double)sysconf(_SC_CLK_TCK);
	struct dirent *de;
	bool found = false;
	DIR *proc;

	while (rlen > 1 && root[rlen - 1] == '/')
		rlen--;
	proc = opendir("/proc");
	if (!proc)
		return false;
	while (!found && (de = readdir(proc))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10), ppid = 0;
		unsigned long long start;
		ssize_t len;

		if (*end || pid <= 0 || pid == self || !is_git(pid))
			continue;
		if (gitlock_proc_stat(pid, &ppid, &start) < 0)
			continue;
		if (ppid == self) /* our own git ls-files, update-index */
			continue;
		if (max_age_s > 0 && hz > 0 &&
		    now - (double)start / hz > max_age_s)
			continue;
		if (subcommands && !has_any_arg(pid, subcommands))
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/cwd", pid);
		len = readlink(path, cwd, sizeof(cwd) - 1);
		if (len < 0)
			continue;
		cwd[len] = '\0';
		found = strncmp(cwd, root, rlen) == 0 &&
			(cwd[rlen] == '\0' || cwd[rlen] == '/');
		if (found && pid_out)
			*pid_out = pid;
	}
	closedir(proc);
	return found;
}

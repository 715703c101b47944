/*
 * Git operations in progress (see gitop.h): the names git gives its
 * state files, in the order a message should prefer them (a rebase that
 * stopped on a conflicted cherry-pick is a rebase to the user).
 */
#include "gitop.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
 * `git stash` (and the stash of rebase --autostash) reads the working
 * tree into a temporary index, index.stash.<pid>, before it resets the
 * files it stashed: a file written meanwhile could be reset without being
 * stashed.
 */
static bool stash_busy(const char *gitdir, size_t len, char *why, size_t n)
{
	char path[4096];
	struct dirent *de;
	DIR *dir;

	snprintf(path, sizeof(path), "%.*s", (int)len, gitdir);
	dir = opendir(path);
	if (!dir) {
		snprintf(why, n, "cannot read %s: %s", path, strerror(errno));
		return true;
	}
	bool found = false;

	while (!found && (de = readdir(dir)))
		found = strncmp(de->d_name, "index.stash.", 12) == 0;
	closedir(dir);
	if (found) {
		snprintf(why, n, "stash in progress");
		return true;
	}
	if (n)
		why[0] = '\0';
	return false;
}

bool gitop_busy(const char *gitdir, char *why, size_t n)
{
	char path[4096];
	struct stat st;
	size_t len = strlen(gitdir);

	while (len > 1 && gitdir[len - 1] == '/')
		len--;
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		if ((size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)len,
				     gitdir, states[i].name) >= sizeof(path)) {
			snprintf(why, n, "git directory path too long");
			return true;
		}
		if (lstat(path, &st) == 0) {
			snprintf(why, n, "%s", states[i].why);
			return true;
		}
		if (errno != ENOENT && errno != ENOTDIR) {
			snprintf(why, n, "cannot check %s: %s", path,
				 strerror(errno));
			return true;
		}
	}
	return stash_busy(gitdir, len, why, n);
}

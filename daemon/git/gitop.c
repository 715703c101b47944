/*
 * Git operations in progress (see gitop.h): the names git gives its
 * state files, in the order a message should prefer them (a rebase that
 * stopped on a conflicted cherry-pick is a rebase to the user).
 */
#include "gitop.h"

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
	/* left by a conflicted merge of any of the above */
	{"AUTO_MERGE", "merge in progress"},
	{"index.lock", "index.lock is held by another process"},
};

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
	if (n)
		why[0] = '\0';
	return false;
}

/*
 * vmem-index-bench: one index sync of the commit path (daemon/git/gitidx.c)
 * on a real repository, timed, for vmem-commit-bench.py: the index as it
 * is now brought in line with the working files at the given paths, by our
 * own writer or by git update-index, under index.lock; the new index is
 * then committed, or (--dry) the lock rolled back so the index stays.
 *
 * usage: vmem-index-bench WORKTREE own|git [--dry] PATH...
 * prints: "<way> <ms> <why>"
 */
#include <errno.h>
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gitidx.h"
#include "gitlock.h"
#include "statedir.h"

static int cmp(const void *a, const void *b)
{
	return strcmp((*(const struct gitidx_update *const *)a)->path,
		      (*(const struct gitidx_update *const *)b)->path);
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	char gitdir[4096], workdir[4096], index[4200];
	char full[8192];
	char errmsg[512] = "";
	struct gitidx_ctx c = {0};
	struct gitidx_result res;
	struct gitidx_update *u;
	const struct gitidx_update **up;
	struct statedir sd;
	struct gitmark m;
	struct gitlock l;
	bool dry = false;
	int first = 3, n, rc;
	double t0, t1;

	if (argc < 4) {
		fprintf(stderr, "usage: vmem-index-bench WORKTREE own|git "
				"[--dry] PATH...\n");
		return 2;
	}
	if (strcmp(argv[3], "--dry") == 0) {
		dry = true;
		first = 4;
	}
	git_libgit2_init();
	snprintf(workdir, sizeof(workdir), "%s/", argv[1]);
	snprintf(gitdir, sizeof(gitdir), "%s/.git/", argv[1]);
	snprintf(index, sizeof(index), "%sindex", gitdir);
	if (statedir_init(&sd, gitdir, NULL, 0, errmsg, sizeof(errmsg)) < 0) {
		fprintf(stderr, "%s\n", errmsg);
		return 1;
	}
	n = argc - first;
	u = calloc((size_t)n, sizeof(*u));
	up = calloc((size_t)n, sizeof(*up));
	if (!u || !up) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct stat st;
		git_oid id;

		u[i].path = argv[first + i];
		up[i] = &u[i];
		snprintf(full, sizeof(full), "%s%s", workdir, u[i].path);
		u[i].present = lstat(full, &st) == 0;
		if (u[i].present)
			gitidx_stat_of(&st, &u[i].st);
		if (u[i].present) {
			if (git_odb_hashfile(&id, full, GIT_OBJECT_BLOB) < 0) {
				fprintf(stderr, "cannot hash %s\n", full);
				return 1;
			}
			memcpy(u[i].oid, id.id, 20);
		}
	}
	qsort(up, (size_t)n, sizeof(*up), cmp);
	c.gitdir = gitdir;
	c.workdir = workdir;
	c.state = &sd;
	c.git = "git";
	c.new_version = 2;
	c.forced = true;
	c.force_way = strcmp(argv[2], "git") == 0 ? GITIDX_GIT : GITIDX_OWN;
	if (gitmark_init(&m, &sd) < 0 || gitmark_begin(&m) < 0) {
		fprintf(stderr, "marker: %s\n", strerror(errno));
		return 1;
	}
	t0 = now_ms();
	rc = gitlock_take(&l, index, &m);
	if (rc == 0)
		rc = gitidx_sync(&c, &l, &m, up, (size_t)n, &res, errmsg,
				 sizeof(errmsg));
	if (rc == 0 && !dry && res.changed)
		rc = gitlock_commit(&l, false);
	t1 = now_ms();
	gitlock_release(&l);
	gitmark_end(&m);
	if (rc < 0) {
		fprintf(stderr, "sync: %s (%s)\n", errmsg, strerror(-rc));
		return 1;
	}
	printf("%s %.2f %s\n", res.way == GITIDX_GIT ? "git" : "own", t1 - t0,
	       res.why[0] ? res.why : "-");
	free(up);
	free(u);
	statedir_done(&sd);
	git_libgit2_shutdown();
	return 0;
}

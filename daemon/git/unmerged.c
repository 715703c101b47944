/*
 * Unmerged paths through the git program (see unmerged.h).
 *
 * `git ls-files -u -z` prints one line per unmerged entry:
 * "<mode> SP <object> SP <stage> TAB <path> NUL".
 */
#include "unmerged.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "child.h"

#define VM_DIR "/.vector-memory/" /* a path's prefix, after the root */
/* A listing of every decision with three stages and long names. */
#define LIST_MAX ((size_t)256 << 20)

/* The environment changes of every git we run. */
static const char *const git_env[] = {
	"-GIT_DIR",
	"-GIT_WORK_TREE",
	"-GIT_INDEX_FILE",
	"-GIT_OBJECT_DIRECTORY",
	"-GIT_COMMON_DIR",
	"-GIT_NAMESPACE",
	"GIT_OPTIONAL_LOCKS=0",
	"GIT_TERMINAL_PROMPT=0",
	NULL,
};

/* Run git with args after --git-dir/--work-tree; 0 with *res filled
 * (any exit status) or -errno. */
static int run_git(const char *root, const char *gitdir,
		   const char *const *args, size_t max_out,
		   struct child_result *res, char *errmsg, size_t errn)
{
	const char *argv[16];
	char gd[4200], wt[4200];
	size_t n = 0;

	if ((size_t)snprintf(gd, sizeof(gd), "--git-dir=%s", gitdir) >=
		    sizeof(gd) ||
	    (size_t)snprintf(wt, sizeof(wt), "--work-tree=%s", root) >=
		    sizeof(wt)) {
		errmsg_set(errmsg, errn, "path too long");
		return -ENAMETOOLONG;
	}
	argv[n++] = "git";
	argv[n++] = gd;
	argv[n++] = wt;
	while (*args && n < sizeof(argv) / sizeof(argv[0]) - 1)
		argv[n++] = *args++;
	argv[n] = NULL;
	return child_run(argv, root, git_env, max_out, res, errmsg, errn);
}

static int entry_cmp(const void *a, const void *b)
{
	return coord_cmp(&((const struct unmerged_entry *)a)->coord,
			 &((const struct unmerged_entry *)b)->coord);
}

/* Parse "x-NNN/y-Y-z-Z.json" below .vector-memory. */
static int decision_path(const char *rel, int max_x, struct coord *c)
{
	const char *slash = strchr(rel, '/');
	char dir[32];

	if (!slash || (size_t)(slash - rel) >= sizeof(dir) ||
	    strchr(slash + 1, '/'))
		return -1;
	memcpy(dir, rel, (size_t)(slash - rel));
	dir[slash - rel] = '\0';
	return coord_from_path(dir, slash + 1, max_x, c);
}

/* Add (or complete) the entry of c with stage st and its object. */
static int add_stage(struct unmerged_set *s, size_t *cap, const struct coord *c,
		     int st, const char *oid, size_t oid_len)
{
	struct unmerged_entry *e = NULL;

	/* git lists a path's stages together: only the last can match */
	if (s->n && coord_cmp(&s->e[s->n - 1].coord, c) == 0)
		e = &s->e[s->n - 1];
	if (!e) {
		if (s->n == *cap) {
			size_t ncap = *cap ? *cap * 2 : 16;
			struct unmerged_entry *ne =
				realloc(s->e, ncap * sizeof(*ne));

			if (!ne)
				return -ENOMEM;
			s->e = ne;
			*cap = ncap;
		}
		e = &s->e[s->n++];
		memset(e, 0, sizeof(*e));
		e->coord = *c;
	}
	e->stages |= 1u << st;
	memcpy(e->oid[st], oid, oid_len);
	e->oid[st][oid_len] = '\0';
	return 0;
}

int unmerged_list(const char *root, const char *gitdir, int max_x,
		  struct unmerged_set *out, char *errmsg, size_t errn)
{
	static const char *const args[] = {"ls-files",	     "-u", "-z", "--",
					   ".vector-memory", NULL};
	struct child_result res;
	const char *last_other = NULL;
	size_t cap = 0, off = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = run_git(root, gitdir, args, LIST_MAX, &res, errmsg, errn);
	if (rc < 0)
		return rc;
	if (res.status != 0) {
		errmsg_set(errmsg, errn, "git ls-files -u exited with %d: %s",
			   res.status, res.err);
		rc = -EIO;
		goto out;
	}
	while (off < res.len) {
		char *line = res.out + off, *sp1, *sp2, *tab, *path;
		size_t llen = strnlen(line, res.len - off);
		struct coord c;
		int st;

		off += llen + 1;
		sp1 = memchr(line, ' ', llen);
		sp2 = sp1 ? memchr(sp1 + 1, ' ',
				   llen - (size_t)(sp1 + 1 - line))
			  : NULL;
		tab = sp2 ? memchr(sp2 + 1, '\t',
				   llen - (size_t)(sp2 + 1 - line))
			  : NULL;
		if (!tab || tab != sp2 + 2 ||
		    sp2 - sp1 - 1 > UNMERGED_OID_LEN || sp2[1] < '1' ||
		    sp2[1] > '3') {
			errmsg_set(errmsg, errn,
				   "unexpected line from git ls-files -u: "
				   "%.80s",
				   line);
			rc = -EIO;
			goto out;
		}
		st = sp2[1] - '0';
		path = tab + 1;
		if (strncmp(path, VM_DIR + 1, strlen(VM_DIR) - 1) == 0 &&
		    decision_path(path + strlen(VM_DIR) - 1, max_x, &c) == 0) {
			rc = add_stage(out, &cap, &c, st, sp1 + 1,
				       (size_t)(sp2 - sp1 - 1));
			if (rc < 0) {
				errmsg_set(errmsg, errn, "out of memory");
				goto out;
			}
		} else if (!last_other || strcmp(last_other, path) != 0) {
			/* each path once: git lists its stages together */
			last_other = path;
			if (out->n_other++ == 0)
				snprintf(out->other, sizeof(out->other), "%s",
					 path);
		}
	}
	if (out->n) /* (e is NULL without entries) */
		qsort(out->e, out->n, sizeof(*out->e), entry_cmp);
	rc = 0;
out:
	child_result_done(&res);
	if (rc < 0)
		unmerged_set_done(out);
	return rc;
}

void unmerged_set_done(struct unmerged_set *s)
{
	if (!s)
		return;
	free(s->e);
	memset(s, 0, sizeof(*s));
}

const char *unmerged_describe(unsigned stages)
{
	switch (stages & 0xc) {
	case 1u << 2 | 1u << 3:
		return stages & 2 ? "unmerged: both modified"
				  : "unmerged: both added";
	case 1u << 2:
		return stages & 2 ? "unmerged: deleted by them"
				  : "unmerged: added by us";
	case 1u << 3:
		return stages & 2 ? "unmerged: deleted by us"
				  : "unmerged: added by them";
	default:
		return "unmerged: both deleted";
	}
}

const struct unmerged_entry *unmerged_find(const struct unmerged_set *s,
					   const struct coord *c)
{
	struct unmerged_entry key = {.coord = *c};

	if (!s || !s->n)
		return NULL;
	return bsearch(&key, s->e, s->n, sizeof(*s->e), entry_cmp);
}

int unmerged_blob(const char *root, const char *gitdir, const char *oid,
		  size_t max, char **out, size_t *len, char *errmsg,
		  size_t errn)
{
	const char *args[] = {"cat-file", "blob", oid, NULL};
	struct child_result res;
	int rc;

	*out = NULL;
	rc = run_git(root, gitdir, args, max, &res, errmsg, errn);
	if (rc < 0)
		return rc;
	if (res.status != 0) {
		errmsg_set(errmsg, errn, "git cat-file blob %s: %s", oid,
			   res.err);
		child_result_done(&res);
		return -EIO;
	}
	*out = res.out;
	*len = res.len;
	return 0;
}

int unmerged_stage(const char *root, const char *gitdir, const char *path,
		   bool present, char *errmsg, size_t errn)
{
	const char *args[] = {"update-index",
			      present ? "--add" : "--force-remove", "--", path,
			      NULL};
	struct child_result res;
	int rc;

	rc = run_git(root, gitdir, args, 1 << 16, &res, errmsg, errn);
	if (rc < 0)
		return rc;
	if (res.status != 0) {
		rc = strstr(res.err, "index.lock") ? -EBUSY : -EIO;
		errmsg_set(errmsg, errn, "git update-index %s: %s", path,
			   res.err);
	}
	child_result_done(&res);
	return rc;
}

bool unmerged_driver_registered(const char *root, const char *gitdir)
{
	static const char *const args[] = {"config", "--get",
					   "merge.vmem.driver", NULL};
	struct child_result res;
	bool yes;

	if (run_git(root, gitdir, args, 1 << 16, &res, NULL, 0) < 0)
		return false;
	yes = res.status == 0 && res.len > 0;
	child_result_done(&res);
	return yes;
}

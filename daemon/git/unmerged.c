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
#include <unistd.h>

#include "errmsg.h"
#include "gitproc.h"

#define VM_DIR "/.vector-memory/" /* a path's prefix, after the root */
/* A listing of every decision with three stages and long names. */
#define LIST_MAX       ((size_t)256 << 20)
#define STAGE_ATTEMPTS 7 /* 25 ms apart, doubling, up to 400 ms */

/*
 * Run git with args in the tree (gitproc.h), its output (at most max_out
 * bytes) in *out (malloc'd) and *len. Reads take no optional lock. 0, or
 * -errno with errmsg (-EIO: git failed, errmsg has its complaint).
 */
static int run_git(const char *root, const char *gitdir,
		   const char *const *args, bool read_only, size_t max_out,
		   char **out, size_t *len, char *errmsg, size_t errn)
{
	const struct gitproc p = {
		.git = "git",
		.gitdir = gitdir,
		.workdir = root,
		.no_locks = read_only,
	};
	int rc = gitproc_run(&p, args, NULL, 0, out, len, errmsg, errn);

	if (rc == 0 && *len > max_out) {
		errmsg_set(errmsg, errn, "git %s: more than %zu bytes", args[0],
			   max_out);
		free(*out);
		*out = NULL;
		rc = -EFBIG;
	}
	return rc;
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
	const char *last_other = NULL;
	size_t cap = 0, off = 0, len = 0;
	char *text = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = run_git(root, gitdir, args, true, LIST_MAX, &text, &len, errmsg,
		     errn);
	if (rc < 0)
		return rc;
	while (off < len) {
		char *line = text + off, *sp1, *sp2, *tab, *path;
		size_t llen = strnlen(line, len - off);
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
	free(text);
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

	return run_git(root, gitdir, args, true, max, out, len, errmsg, errn);
}

int unmerged_stage(const char *root, const char *gitdir, const char *path,
		   bool present, char *errmsg, size_t errn)
{
	const char *args[] = {"update-index",
			      present ? "--add" : "--force-remove", "--", path,
			      NULL};
	char *text = NULL;
	size_t len = 0;
	int rc;

	/* git does not wait for index.lock: another git command (or a
	 * resolution of ours beside this one) holding it for a moment is
	 * waited out here, about 1.5 s at most, before -EBUSY. */
	for (int attempt = 0;; attempt++) {
		rc = run_git(root, gitdir, args, false, 1 << 16, &text, &len,
			     errmsg, errn);
		free(text);
		text = NULL;
		/* git says so when someone else holds the index */
		if (rc == -EIO && errmsg && strstr(errmsg, "index.lock"))
			rc = -EBUSY;
		if (rc != -EBUSY || attempt == STAGE_ATTEMPTS - 1)
			return rc;
		usleep(25000u << (attempt < 4 ? attempt : 4));
	}
}

bool unmerged_driver_registered(const char *root, const char *gitdir)
{
	static const char *const args[] = {"config", "--get",
					   "merge.vmem.driver", NULL};
	char *text = NULL;
	size_t len = 0;
	bool yes;

	/* (git config --get exits with 1 when the key is not set) */
	yes = run_git(root, gitdir, args, true, 1 << 16, &text, &len, NULL,
		      0) == 0 &&
	      len > 0;
	free(text);
	return yes;
}

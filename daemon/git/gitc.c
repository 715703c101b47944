/*
 * Git for the memory through libgit2: batched commits of .vector-memory on
 * the current branch and the read side of its history.
 *
 * A commit is built from the branch tip with treebuilders only (the tip's
 * tree, its .vector-memory subtree and the touched x-NNN subtrees), so the
 * user's index plays no part in it; the branch is then moved with a
 * compare-and-swap against that tip, and rebuilt on the new tip when it
 * moved. Only afterwards is the index updated, for our paths only, from a
 * fresh read of the index file, so the user's other staged and unstaged
 * changes stay exactly as they were.
 */
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"
#include "gitc.h"
#include "gitop.h"

#define VM_DIR	       ".vector-memory"
#define METADATA       "metadata.json"
#define METADATA_TEXT  "{\n  \"format\": 1\n}\n"
#define REFLOG_MSG     "vector-memory: commit"
#define FALLBACK_NAME  "vmemd"
#define FALLBACK_EMAIL "vmemd@localhost"
#define MAX_TRIES      5
#define PATH_MAX_VM    64 /* ".vector-memory/x-NNN.../y-Y-z-Z.json" */
#define ANY_X	       1000000
/* A git command running longer than this is a reader (a pager), no
 * operation about to move the branch: commits do not wait for it. */
#define GIT_RUNNING_MAX_AGE_S 5.0
/* A lock of ours is made within this long after its commit began. */
#define STALE_LOCK_WINDOW_S 5

struct gitc {
	git_repository *repo;
	char *gitdir;  /* with a trailing slash, as libgit2 gives it */
	char *workdir; /* likewise */
	const struct statedir *state; /* holds the marker (borrowed) */
	void (*hook)(void *ctx);
	void *hook_ctx;
};

#define MARKER "committing"

/*
 * The marker of a commit in progress, <gitdir>/vmem/committing: present
 * (and fresh) while a commit may hold git's lock files, removed after.
 * Failures are ignored: without it a crash's locks are only not cleaned.
 */
static void marker_set(struct gitc *g, bool on)
{
	int fd;

	if (!on) {
		(void)statedir_unlink(g->state, MARKER);
		return;
	}
	fd = statedir_open(g->state, MARKER, O_WRONLY | O_CREAT | O_TRUNC, 0600,
			   NULL, 0);
	if (fd >= 0)
		close(fd);
}

/* One x-NNN directory being rebuilt. */
struct xdir {
	int x;
	git_treebuilder *b;
};

/* libgit2 error code to -errno. */
static int git2errno(int e)
{
	switch (e) {
	case GIT_ENOTFOUND:
	case GIT_EUNBORNBRANCH:
		return -ENOENT;
	case GIT_EEXISTS:
		return -EEXIST;
	case GIT_ELOCKED:
		return -EBUSY;
	case GIT_EOWNER:
		return -EPERM;
	case GIT_EBAREREPO:
		return -EINVAL;
	case GIT_EMODIFIED:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* Translate a libgit2 failure: errmsg "what: libgit2's message". */
static int git_fail(int e, const char *what, char *errmsg, size_t errn)
{
	const git_error *ge = git_error_last();

	errmsg_set(errmsg, errn, "%s: %s", what,
		   ge && ge->message ? ge->message : "libgit2 error");
	return git2errno(e);
}

static void hex(const git_oid *id, char out[41])
{
	git_oid_tostr(out, 41, id);
}

int gitc_open(struct gitc **out, const char *workdir,
	      const struct statedir *state, char *errmsg, size_t errn)
{
	struct gitc *g = NULL;
	const char *p;
	int ret, e;

	*out = NULL;
	e = git_libgit2_init();
	if (e < 0)
		return git_fail(e, "libgit2 init", errmsg, errn);
	/* Durable commits: objects, refs and the index are fsynced. */
	git_libgit2_opts(GIT_OPT_ENABLE_FSYNC_GITDIR, 1);
	g = calloc(1, sizeof(*g));
	if (!g) {
		ret = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	e = git_repository_open_ext(&g->repo, workdir,
				    GIT_REPOSITORY_OPEN_NO_SEARCH, NULL);
	if (e < 0) {
		ret = git_fail(e, workdir, errmsg, errn);
		goto out;
	}
	p = git_repository_workdir(g->repo);
	if (!p) {
		ret = -EINVAL;
		errmsg_set(errmsg, errn, "%s: a bare repository", workdir);
		goto out;
	}
	g->workdir = strdup(p);
	g->gitdir = strdup(git_repository_path(g->repo));
	g->state = state;
	if (!g->workdir || !g->gitdir) {
		ret = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	*out = g;
	g = NULL;
	ret = 0;
out:
	if (g) {
		gitc_free(g);
		return ret;
	}
	if (ret < 0)
		git_libgit2_shutdown();
	return ret;
}

void gitc_free(struct gitc *g)
{
	if (!g)
		return;
	git_repository_free(g->repo);
	free(g->gitdir);
	free(g->workdir);
	free(g);
	git_libgit2_shutdown();
}

void gitc_set_hook(struct gitc *g, void (*fn)(void *ctx), void *ctx)
{
	g->hook = fn;
	g->hook_ctx = ctx;
}

static void range(FILE *f, const char *axis, int lo, int hi)
{
	if (lo == hi)
		fprintf(f, "%s %d", axis, lo);
	else
		fprintf(f, "%s %d-%d", axis, lo, hi);
}

char *gitc_message(const struct gitc_change *ch, size_t n)
{
	struct coord lo, hi;
	char path[PATH_MAX_VM];
	char *buf = NULL;
	size_t len = 0, i;
	FILE *f;

	f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fprintf(f, "vector-memory: %zu decisions", n);
	if (n > 0) {
		lo = hi = ch[0].coord;
		for (i = 1; i < n; i++) {
			const struct coord *c = &ch[i].coord;

			lo.x = c->x < lo.x ? c->x : lo.x;
			lo.y = c->y < lo.y ? c->y : lo.y;
			lo.z = c->z < lo.z ? c->z : lo.z;
			hi.x = c->x > hi.x ? c->x : hi.x;
			hi.y = c->y > hi.y ? c->y : hi.y;
			hi.z = c->z > hi.z ? c->z : hi.z;
		}
		fputs(" (", f);
		range(f, "x", lo.x, hi.x);
		fputs(", ", f);
		range(f, "y", lo.y, hi.y);
		fputs(", ", f);
		range(f, "z", lo.z, hi.z);
		fputs(")", f);
	}
	fputs("\n", f);
	for (i = 0; i < n; i++) {
		if (i == 0)
			fputs("\n", f);
		if (coord_path(&ch[i].coord, path, sizeof(path)) < 0)
			strcpy(path, "?");
		if (!ch[i].text)
			fprintf(f, "%s deleted\n", path);
		else
			fprintf(f, "%s by %s\n", path,
				ch[i].agent_id ? ch[i].agent_id : "unknown");
	}
	if (ferror(f)) {
		fclose(f);
		free(buf);
		return NULL;
	}
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* 1 with why when a commit must wait, 0 when it may go, or -errno. */
static int deferral(struct gitc *g, char *why, size_t whyn, char *errmsg,
		    size_t errn)
{
	const char *reason = NULL;
	char lock[PATH_MAX];
	struct stat st;
	int e;

	switch (git_repository_state(g->repo)) {
	case GIT_REPOSITORY_STATE_NONE:
		break;
	case GIT_REPOSITORY_STATE_MERGE:
		reason = "merge in progress";
		break;
	case GIT_REPOSITORY_STATE_REVERT:
	case GIT_REPOSITORY_STATE_REVERT_SEQUENCE:
		reason = "revert in progress";
		break;
	case GIT_REPOSITORY_STATE_CHERRYPICK:
	case GIT_REPOSITORY_STATE_CHERRYPICK_SEQUENCE:
		reason = "cherry-pick in progress";
		break;
	case GIT_REPOSITORY_STATE_BISECT:
		reason = "bisect in progress";
		break;
	case GIT_REPOSITORY_STATE_REBASE:
	case GIT_REPOSITORY_STATE_REBASE_INTERACTIVE:
	case GIT_REPOSITORY_STATE_REBASE_MERGE:
		reason = "rebase in progress";
		break;
	case GIT_REPOSITORY_STATE_APPLY_MAILBOX:
	case GIT_REPOSITORY_STATE_APPLY_MAILBOX_OR_REBASE:
		reason = "am or rebase in progress";
		break;
	default:
		reason = "a git operation is in progress";
		break;
	}
	if (!reason) {
		e = git_repository_head_detached(g->repo);
		if (e < 0)
			return git_fail(e, "HEAD", errmsg, errn);
		if (e == 1)
			reason = "HEAD is detached";
	}
	if (!reason) {
		if ((size_t)snprintf(lock, sizeof(lock), "%sindex.lock",
				     g->gitdir) >= sizeof(lock)) {
			errmsg_set(errmsg, errn, "git directory path too long");
			return -ENAMETOOLONG;
		}
		if (lstat(lock, &st) == 0)
			reason = "index.lock is held by another process";
	}
	/* A git command that has read HEAD but taken no lock yet. */
	if (!reason &&
	    gitop_git_running(g->workdir, GIT_RUNNING_MAX_AGE_S, why, whyn))
		return 1;
	if (!reason)
		return 0;
	errmsg_set(why, whyn, "%s", reason);
	return 1;
}

/* The builder of directory x-NNN, made from the existing one if any. */
static int xdir_get(git_repository *repo, git_treebuilder *vb, struct xdir *xs,
		    size_t *nx, int x, git_treebuilder **out)
{
	const git_tree_entry *e;
	git_tree *t = NULL;
	char name[32];
	size_t i;
	int rc;

	for (i = 0; i < *nx; i++) {
		if (xs[i].x == x) {
			*out = xs[i].b;
			return 0;
		}
	}
	snprintf(name, sizeof(name), "x-%03d", x);
	e = git_treebuilder_get(vb, name);
	if (e && git_tree_entry_type(e) == GIT_OBJECT_TREE) {
		rc = git_tree_lookup(&t, repo, git_tree_entry_id(e));
		if (rc < 0)
			return rc;
	}
	rc = git_treebuilder_new(&xs[*nx].b, repo, t);
	git_tree_free(t);
	if (rc < 0)
		return rc;
	xs[*nx].x = x;
	*out = xs[(*nx)++].b;
	return 0;
}

/* The subtree named name of tree (NULL when absent or not a tree). */
static int subtree(git_repository *repo, const git_tree *tree, const char *name,
		   git_tree **out)
{
	const git_tree_entry *e;

	*out = NULL;
	if (!tree)
		return 0;
	e = git_tree_entry_byname(tree, name);
	if (!e || git_tree_entry_type(e) != GIT_OBJECT_TREE)
		return 0;
	return git_tree_lookup(out, repo, git_tree_entry_id(e));
}

/*
 * The root tree of root (NULL: empty) with .vector-memory rebuilt from its
 * own plus the changes (blob ids in ids[]). *meta_added when metadata.json
 * had to be added. Returns 0 or a libgit2 error.
 */
static int build_tree(git_repository *repo, const git_tree *root,
		      const struct gitc_change *ch, const git_oid *ids,
		      size_t n, const git_oid *meta_id, git_oid *out,
		      bool *meta_added)
{
	git_treebuilder *vb = NULL, *rb = NULL, *b;
	struct xdir *xs = NULL;
	git_tree *vm = NULL;
	char path[PATH_MAX_VM], name[32];
	size_t nx = 0, i;
	git_oid id;
	int rc;

	*meta_added = false;
	xs = calloc(n ? n : 1, sizeof(*xs));
	if (!xs) {
		git_error_set_oom();
		rc = GIT_ERROR;
		goto out;
	}
	rc = subtree(repo, root, VM_DIR, &vm);
	if (rc < 0)
		goto out;
	rc = git_treebuilder_new(&vb, repo, vm);
	if (rc < 0)
		goto out;
	for (i = 0; i < n; i++) {
		const char *file;

		if (coord_path(&ch[i].coord, path, sizeof(path)) < 0) {
			git_error_set_str(GIT_ERROR_INVALID, "bad coordinate");
			rc = GIT_EINVALID;
			goto out;
		}
		file = strchr(path, '/') + 1;
		rc = xdir_get(repo, vb, xs, &nx, ch[i].coord.x, &b);
		if (rc < 0)
			goto out;
		if (ch[i].text) {
			rc = git_treebuilder_insert(NULL, b, file, &ids[i],
						    GIT_FILEMODE_BLOB);
		} else if (git_treebuilder_get(b, file)) {
			rc = git_treebuilder_remove(b, file);
		}
		if (rc < 0)
			goto out;
	}
	for (i = 0; i < nx; i++) {
		snprintf(name, sizeof(name), "x-%03d", xs[i].x);
		if (git_treebuilder_entrycount(xs[i].b) == 0) {
			if (git_treebuilder_get(vb, name))
				rc = git_treebuilder_remove(vb, name);
		} else {
			rc = git_treebuilder_write(&id, xs[i].b);
			if (rc == 0)
				rc = git_treebuilder_insert(NULL, vb, name, &id,
							    GIT_FILEMODE_TREE);
		}
		if (rc < 0)
			goto out;
	}
	if (!git_treebuilder_get(vb, METADATA)) {
		rc = git_treebuilder_insert(NULL, vb, METADATA, meta_id,
					    GIT_FILEMODE_BLOB);
		if (rc < 0)
			goto out;
		*meta_added = true;
	}
	rc = git_treebuilder_new(&rb, repo, root);
	if (rc < 0)
		goto out;
	if (git_treebuilder_entrycount(vb) == 0) {
		if (git_treebuilder_get(rb, VM_DIR))
			rc = git_treebuilder_remove(rb, VM_DIR);
	} else {
		rc = git_treebuilder_write(&id, vb);
		if (rc == 0)
			rc = git_treebuilder_insert(NULL, rb, VM_DIR, &id,
						    GIT_FILEMODE_TREE);
	}
	if (rc < 0)
		goto out;
	rc = git_treebuilder_write(out, rb);
out:
	for (i = 0; i < nx; i++)
		git_treebuilder_free(xs[i].b);
	free(xs);
	git_treebuilder_free(vb);
	git_treebuilder_free(rb);
	git_tree_free(vm);
	return rc;
}

/*
 * Objects are written without an fsync each (objects_fsync(false)); before
 * the branch may point to them, one syncfs() of the object directory's file
 * system makes them all durable at once: a commit of 1,000 decisions costs
 * one flush, not 1,000. Refs and the index keep libgit2's own fsync.
 */
static void objects_fsync(bool on)
{
	git_libgit2_opts(GIT_OPT_ENABLE_FSYNC_GITDIR, on ? 1 : 0);
}

static int objects_durable(struct gitc *g)
{
	char path[PATH_MAX];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%sobjects",
		 git_repository_commondir(g->repo));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || syncfs(fd) < 0) {
		git_error_set(GIT_ERROR_OS, "cannot sync %s: %s", path,
			      strerror(errno));
		rc = GIT_ERROR;
	}
	if (fd >= 0)
		close(fd);
	objects_fsync(true);
	return rc;
}

/*
 * One attempt: build on the current tip and move the branch. 0 with *cid
 * (all zero when the tree did not change), 1 with why when HEAD became
 * detached, -EAGAIN when the tip moved under us, or -errno.
 */
static int commit_once(struct gitc *g, const struct gitc_change *ch,
		       const git_oid *ids, size_t n, const git_oid *meta_id,
		       const char *message, const git_signature *sig,
		       git_oid *cid, bool *meta_added, char *why, size_t whyn,
		       char *errmsg, size_t errn)
{
	git_reference *head = NULL, *ref = NULL;
	git_commit *tip = NULL;
	git_tree *tip_tree = NULL, *tree = NULL;
	const git_commit *parents[1];
	char *branch = NULL;
	git_oid tip_id, tree_id;
	bool unborn = false;
	int rc, e;

	memset(cid, 0, sizeof(*cid));
	e = git_reference_lookup(&head, g->repo, "HEAD");
	if (e < 0) {
		rc = git_fail(e, "HEAD", errmsg, errn);
		goto out;
	}
	if (git_reference_type(head) != GIT_REFERENCE_SYMBOLIC) {
		errmsg_set(why, whyn, "HEAD is detached");
		rc = 1;
		goto out;
	}
	branch = strdup(git_reference_symbolic_target(head));
	if (!branch) {
		errmsg_set(errmsg, errn, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	e = git_reference_name_to_id(&tip_id, g->repo, branch);
	if (e == GIT_ENOTFOUND) {
		unborn = true;
	} else if (e < 0) {
		rc = git_fail(e, branch, errmsg, errn);
		goto out;
	} else {
		e = git_commit_lookup(&tip, g->repo, &tip_id);
		if (e == 0)
			e = git_commit_tree(&tip_tree, tip);
		if (e < 0) {
			rc = git_fail(e, "branch tip", errmsg, errn);
			goto out;
		}
	}
	e = build_tree(g->repo, tip_tree, ch, ids, n, meta_id, &tree_id,
		       meta_added);
	if (e < 0) {
		rc = git_fail(e, "building the tree", errmsg, errn);
		goto out;
	}
	if (tip_tree && git_oid_equal(&tree_id, git_tree_id(tip_tree))) {
		rc = 0;
		goto out;
	}
	e = git_tree_lookup(&tree, g->repo, &tree_id);
	if (e == 0) {
		parents[0] = tip;
		e = git_commit_create(cid, g->repo, NULL, sig, sig, NULL,
				      message, tree, unborn ? 0 : 1, parents);
	}
	if (e == 0)
		e = objects_durable(g);
	if (e < 0) {
		rc = git_fail(e, "creating the commit", errmsg, errn);
		goto out;
	}
	/* A git operation that began while the commit was built owns the
	 * branch now (a rebase would fail to move it at its end), as does a
	 * git command that has read HEAD but created no lock yet. */
	rc = deferral(g, why, whyn, errmsg, errn);
	if (rc != 0) {
		memset(cid, 0, sizeof(*cid));
		goto out;
	}
	/* (The test hook: git starting between this check and the CAS.) */
	if (g->hook)
		g->hook(g->hook_ctx);
	if (unborn)
		e = git_reference_create(&ref, g->repo, branch, cid, 0,
					 REFLOG_MSG);
	else
		e = git_reference_create_matching(&ref, g->repo, branch, cid, 1,
						  &tip_id, REFLOG_MSG);
	if (e == GIT_EMODIFIED || e == GIT_EEXISTS) {
		memset(cid, 0, sizeof(*cid));
		rc = -EAGAIN;
		goto out;
	}
	if (e < 0) {
		memset(cid, 0, sizeof(*cid));
		rc = git_fail(e, branch, errmsg, errn);
		goto out;
	}
	rc = 0;
out:
	git_reference_free(ref);
	git_reference_free(head);
	git_tree_free(tree);
	git_tree_free(tip_tree);
	git_commit_free(tip);
	free(branch);
	return rc;
}

/*
 * Fill an index entry's stat data from the working file when it holds
 * exactly text; otherwise leave it zero so that git re-hashes the file.
 */
static void entry_stat(struct gitc *g, const char *path, const char *text,
		       size_t len, git_index_entry *ie)
{
	char full[PATH_MAX];
	struct stat st;
	char *buf = NULL;
	ssize_t r;
	size_t got = 0;
	int fd;

	if ((size_t)snprintf(full, sizeof(full), "%s%s", g->workdir, path) >=
	    sizeof(full))
		return;
	fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size != len)
		goto out;
	buf = malloc(len + 1);
	if (!buf)
		goto out;
	while (got <= len) {
		r = read(fd, buf + got, len + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got != len || memcmp(buf, text, len) != 0)
		goto out;
	ie->ctime.seconds = (int32_t)st.st_ctim.tv_sec;
	ie->ctime.nanoseconds = (uint32_t)st.st_ctim.tv_nsec;
	ie->mtime.seconds = (int32_t)st.st_mtim.tv_sec;
	ie->mtime.nanoseconds = (uint32_t)st.st_mtim.tv_nsec;
	ie->dev = (uint32_t)st.st_dev;
	ie->ino = (uint32_t)st.st_ino;
	ie->uid = (uint32_t)st.st_uid;
	ie->gid = (uint32_t)st.st_gid;
out:
	free(buf);
	close(fd);
}

static int index_put(struct gitc *g, git_index *idx, const char *path,
		     const git_oid *id, const char *text, size_t len)
{
	git_index_entry ie;

	memset(&ie, 0, sizeof(ie));
	ie.path = path;
	ie.id = *id;
	ie.mode = GIT_FILEMODE_BLOB;
	ie.file_size = (uint32_t)len;
	entry_stat(g, path, text, len, &ie);
	return git_index_add(idx, &ie);
}

/*
 * Stage our committed paths, and only them, in the repository index as
 * it is on disk now. 0 or -errno (errmsg).
 */
static int update_index(struct gitc *g, const struct gitc_change *ch,
			const git_oid *ids, size_t n, const git_oid *meta_id,
			bool meta_added, char *errmsg, size_t errn)
{
	char path[PATH_MAX_VM + 16], rel[PATH_MAX_VM];
	git_index *idx = NULL;
	size_t i;
	int e, rc;

	e = git_repository_index(&idx, g->repo);
	if (e == 0)
		e = git_index_read(idx, 1);
	if (e < 0) {
		rc = git_fail(e, "reading the index", errmsg, errn);
		goto out;
	}
	for (i = 0; i < n; i++) {
		coord_path(&ch[i].coord, rel, sizeof(rel));
		snprintf(path, sizeof(path), VM_DIR "/%s", rel);
		if (ch[i].text) {
			e = index_put(g, idx, path, &ids[i], ch[i].text,
				      ch[i].len);
		} else {
			e = git_index_remove_bypath(idx, path);
			if (e == GIT_ENOTFOUND)
				e = 0;
		}
		if (e < 0) {
			rc = git_fail(e, path, errmsg, errn);
			goto out;
		}
	}
	if (meta_added) {
		e = index_put(g, idx, VM_DIR "/" METADATA, meta_id,
			      METADATA_TEXT, strlen(METADATA_TEXT));
		if (e < 0) {
			rc = git_fail(e, METADATA, errmsg, errn);
			goto out;
		}
	}
	e = git_index_write(idx);
	if (e < 0) {
		rc = git_fail(e, "writing the index", errmsg, errn);
		goto out;
	}
	rc = 0;
out:
	git_index_free(idx);
	return rc;
}

static int blob_at(const git_commit *c, const char *path, git_oid *id,
		   bool *found);
static int head_commit(git_repository *repo, git_commit **out);

/*
 * Keep only the changes that differ from HEAD, compacting ch and ids in
 * place (changed set on the kept ones). Returns how many are kept, or a
 * libgit2 error.
 */
static int keep_changed(git_repository *repo, struct gitc_change *ch,
			git_oid *ids, size_t n, size_t *kept)
{
	git_commit *head = NULL;
	char rel[64], path[96];
	size_t i, k = 0;
	int e = head_commit(repo, &head);

	for (i = 0; e == 0 && i < n; i++) {
		git_oid id;
		bool found = false;

		ch[i].changed = ch[i].text != NULL;
		if (head) {
			coord_path(&ch[i].coord, rel, sizeof(rel));
			snprintf(path, sizeof(path), VM_DIR "/%s", rel);
			e = blob_at(head, path, &id, &found);
			ch[i].changed =
				ch[i].text
					? !found || !git_oid_equal(&id, &ids[i])
					: found;
		}
	}
	git_commit_free(head);
	if (e < 0)
		return e;
	*kept = 0;
	for (i = 0; i < n; i++)
		if (ch[i].changed)
			k++;
	*kept = k;
	return 0;
}

int gitc_commit(struct gitc *g, struct gitc_change *ch, size_t n,
		const char *message, struct gitc_result *res, char *errmsg,
		size_t errn)
{
	return gitc_commit_as(g, NULL, ch, n, message, res, errmsg, errn);
}

/* The configured identity, else the repository's, else the fallback. */
static int signature(git_signature **sig, git_repository *repo,
		     const struct gitc_ident *who)
{
	if (who && who->name[0] && who->email[0])
		return git_signature_now(sig, who->name, who->email);
	if (git_signature_default(sig, repo) == 0)
		return 0;
	return git_signature_now(sig, FALLBACK_NAME, FALLBACK_EMAIL);
}

int gitc_commit_as(struct gitc *g, const struct gitc_ident *who,
		   struct gitc_change *ch, size_t n, const char *message,
		   struct gitc_result *res, char *errmsg, size_t errn)
{
	git_signature *sig = NULL;
	git_oid *ids = NULL, *idk = NULL, meta_id, cid;
	struct gitc_change *chk = NULL;
	size_t kept = 0, k;
	char *msg = NULL;
	bool meta_added = false;
	int rc, e, tries;
	size_t i;

	memset(res, 0, sizeof(*res));
	if (errmsg && errn)
		errmsg[0] = '\0';
	if (n == 0)
		return 0; /* nothing to commit */
	rc = deferral(g, res->deferred, sizeof(res->deferred), errmsg, errn);
	if (rc != 0)
		goto out;
	objects_fsync(false); /* until objects_durable(), see there */
	ids = calloc(n ? n : 1, sizeof(*ids));
	if (!ids) {
		errmsg_set(errmsg, errn, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (!ch[i].text)
			continue;
		e = git_blob_create_from_buffer(&ids[i], g->repo, ch[i].text,
						ch[i].len);
		if (e < 0) {
			rc = git_fail(e, "writing a blob", errmsg, errn);
			goto out;
		}
	}
	e = git_blob_create_from_buffer(&meta_id, g->repo, METADATA_TEXT,
					strlen(METADATA_TEXT));
	if (e < 0) {
		rc = git_fail(e, "writing a blob", errmsg, errn);
		goto out;
	}
	e = keep_changed(g->repo, ch, ids, n, &kept);
	if (e < 0) {
		rc = git_fail(e, "comparing with HEAD", errmsg, errn);
		goto out;
	}
	if (kept == 0) {
		rc = 0; /* the files already match HEAD: nothing to commit */
		goto out;
	}
	if (kept < n) {
		/* Commit (and describe) only the real differences. */
		chk = calloc(kept, sizeof(*chk));
		idk = calloc(kept, sizeof(*idk));
		if (!chk || !idk) {
			errmsg_set(errmsg, errn, "out of memory");
			rc = -ENOMEM;
			goto out;
		}
		for (i = 0, k = 0; i < n; i++) {
			if (!ch[i].changed)
				continue;
			chk[k] = ch[i];
			idk[k++] = ids[i];
		}
		ch = chk;
		n = kept;
		free(ids);
		ids = idk;
		idk = NULL;
	}
	if (!message) {
		msg = gitc_message(ch, n);
		if (!msg) {
			errmsg_set(errmsg, errn, "out of memory");
			rc = -ENOMEM;
			goto out;
		}
	}
	e = signature(&sig, g->repo, who);
	if (e < 0) {
		rc = git_fail(e, "signature", errmsg, errn);
		goto out;
	}
	/* From here on git's lock files may be ours for a moment: a marker
	 * says so, for a start-up after a crash (gitc_clear_stale_locks). */
	marker_set(g, true);
	rc = -EAGAIN;
	for (tries = 0; tries < MAX_TRIES && rc == -EAGAIN; tries++)
		rc = commit_once(g, ch, ids, n, &meta_id,
				 message ? message : msg, sig, &cid,
				 &meta_added, res->deferred,
				 sizeof(res->deferred), errmsg, errn);
	if (rc == -EAGAIN)
		errmsg_set(errmsg, errn,
			   "the branch kept moving during %d attempts",
			   MAX_TRIES);
	if (rc != 0 || git_oid_is_zero(&cid))
		goto out;
	hex(&cid, res->commit);
	res->committed_at = (int64_t)sig->when.time;
	/* The commit exists: an index failure is reported, not returned. */
	update_index(g, ch, ids, n, &meta_id, meta_added, errmsg, errn);
out:
	marker_set(g, false);
	objects_fsync(true);
	git_signature_free(sig);
	free(ids);
	free(idk);
	free(chk);
	free(msg);
	return rc;
}

/* The id of the entry of the given type at path in a commit's tree;
 * *found false when there is none. */
static int entry_at(const git_commit *c, const char *path, git_object_t type,
		    git_oid *id, bool *found)
{
	git_tree_entry *e = NULL;
	git_tree *t = NULL;
	int rc;

	*found = false;
	rc = git_commit_tree(&t, c);
	if (rc < 0)
		return rc;
	rc = git_tree_entry_bypath(&e, t, path);
	if (rc == GIT_ENOTFOUND) {
		rc = 0;
	} else if (rc == 0 && git_tree_entry_type(e) == type) {
		*id = *git_tree_entry_id(e);
		*found = true;
	}
	git_tree_entry_free(e);
	git_tree_free(t);
	return rc;
}

static int blob_at(const git_commit *c, const char *path, git_oid *id,
		   bool *found)
{
	return entry_at(c, path, GIT_OBJECT_BLOB, id, found);
}

/* HEAD's commit, or NULL with 0 when HEAD is unborn. */
static int head_commit(git_repository *repo, git_commit **out)
{
	git_oid id;
	int e;

	*out = NULL;
	e = git_reference_name_to_id(&id, repo, "HEAD");
	if (e == GIT_ENOTFOUND || e == GIT_EUNBORNBRANCH)
		return 0;
	if (e < 0)
		return e;
	return git_commit_lookup(out, repo, &id);
}

/* A commit whose entry changed, with the entry's id (found false: the
 * entry went away). A non-zero return stops the walk. */
typedef int (*change_fn)(struct gitc *g, void *ctx, git_commit *c,
			 const git_oid *id, bool found);

/*
 * Walk HEAD's first-parent line, newest first, calling fn for each commit
 * whose entry at path (of type) differs from its first parent's, at most
 * limit times (0: no limit). Returns 0, fn's value, or -errno (errmsg).
 */
static int walk_changes(struct gitc *g, const char *path, git_object_t type,
			size_t limit, change_fn fn, void *ctx, char *errmsg,
			size_t errn)
{
	git_commit *cur = NULL, *par = NULL;
	git_oid id, pid;
	bool found = false, pfound;
	size_t n = 0;
	int rc = 0, e;

	memset(&pid, 0, sizeof(pid));
	e = head_commit(g->repo, &cur);
	if (e == 0 && cur)
		e = entry_at(cur, path, type, &id, &found);
	while (e == 0 && cur && (!limit || n < limit)) {
		pfound = false;
		if (git_commit_parentcount(cur) > 0) {
			e = git_commit_parent(&par, cur, 0);
			if (e == 0)
				e = entry_at(par, path, type, &pid, &pfound);
			if (e < 0)
				break;
		}
		if (found != pfound || (found && !git_oid_equal(&id, &pid))) {
			n++;
			rc = fn(g, ctx, cur, &id, found);
			if (rc != 0)
				goto out;
		}
		git_commit_free(cur);
		cur = par;
		par = NULL;
		id = pid;
		found = pfound;
	}
	if (e < 0)
		rc = git_fail(e, path, errmsg, errn);
out:
	git_commit_free(cur);
	git_commit_free(par);
	return rc;
}

struct history_walk {
	gitc_version_fn cb;
	void *ctx;
};

/* A version of the decision: its file's text, or NULL for a deletion. */
static int history_change(struct gitc *g, void *ctx, git_commit *c,
			  const git_oid *id, bool found)
{
	struct history_walk *h = ctx;
	git_blob *blob = NULL;
	char commit[41], *text = NULL;
	size_t len = 0;
	int rc;

	if (found) {
		rc = git_blob_lookup(&blob, g->repo, id);
		if (rc < 0)
			return -EIO;
		len = (size_t)git_blob_rawsize(blob);
		text = malloc(len + 1);
		if (!text) {
			git_blob_free(blob);
			return -ENOMEM;
		}
		memcpy(text, git_blob_rawcontent(blob), len);
		text[len] = '\0';
		git_blob_free(blob);
	}
	hex(git_commit_id(c), commit);
	rc = h->cb(h->ctx, commit, (int64_t)git_commit_time(c), text, len);
	free(text);
	return rc;
}

int gitc_history(struct gitc *g, const struct coord *c, size_t limit,
		 gitc_version_fn cb, void *ctx, char *errmsg, size_t errn)
{
	struct history_walk h = {cb, ctx};
	char path[PATH_MAX_VM + 16], rel[PATH_MAX_VM];

	if (coord_path(c, rel, sizeof(rel)) < 0) {
		errmsg_set(errmsg, errn, "bad coordinate");
		return -EINVAL;
	}
	snprintf(path, sizeof(path), VM_DIR "/%s", rel);
	return walk_changes(g, path, GIT_OBJECT_BLOB, limit, history_change, &h,
			    errmsg, errn);
}

/*
 * Whether the .vector-memory tree vm holds only decisions below (xt, yt).
 * 1 yes, 0 no, or a libgit2 error. Names that are not decision files
 * (metadata.json) are ignored.
 */
static int below(git_repository *repo, const git_tree *vm, int xt, int yt)
{
	const git_tree_entry *e, *f;
	git_tree *xtree = NULL;
	struct coord c;
	size_t i, j, nx, nf;
	int rc, x;
	char *end;
	long v;

	nx = git_tree_entrycount(vm);
	for (i = 0; i < nx; i++) {
		const char *name;

		e = git_tree_entry_byindex(vm, i);
		name = git_tree_entry_name(e);
		if (git_tree_entry_type(e) != GIT_OBJECT_TREE ||
		    strncmp(name, "x-", 2) != 0 || name[2] < '0' ||
		    name[2] > '9')
			continue;
		v = strtol(name + 2, &end, 10);
		if (*end || v > ANY_X)
			continue;
		x = (int)v;
		if (x < xt)
			continue; /* every decision of it is below */
		rc = git_tree_lookup(&xtree, repo, git_tree_entry_id(e));
		if (rc < 0)
			return rc;
		nf = git_tree_entrycount(xtree);
		for (j = 0; j < nf; j++) {
			f = git_tree_entry_byindex(xtree, j);
			if (git_tree_entry_type(f) != GIT_OBJECT_BLOB ||
			    coord_from_path(name, git_tree_entry_name(f), ANY_X,
					    &c) < 0)
				continue;
			if (c.x > xt || c.y >= yt) {
				git_tree_free(xtree);
				return 0;
			}
		}
		git_tree_free(xtree);
		xtree = NULL;
	}
	return 1;
}

int gitc_rollback_point(struct gitc *g, int x_threshold, int y_threshold,
			char commit[41], char *subject, size_t subjn,
			int64_t *committed_at, char *errmsg, size_t errn)
{
	git_commit *cur = NULL, *par = NULL;
	git_tree *root = NULL, *vm = NULL;
	git_oid last_vm;
	bool have_last = false;
	int last_ok = 0, ok, rc, e;
	const char *s;

	commit[0] = '\0';
	if (subject && subjn)
		subject[0] = '\0';
	e = head_commit(g->repo, &cur);
	if (e < 0) {
		rc = git_fail(e, "HEAD", errmsg, errn);
		goto out;
	}
	rc = 0;
	while (cur) {
		e = git_commit_tree(&root, cur);
		if (e == 0)
			e = subtree(g->repo, root, VM_DIR, &vm);
		if (e < 0) {
			rc = git_fail(e, "history", errmsg, errn);
			goto out;
		}
		if (!vm) {
			ok = 1;
		} else if (have_last &&
			   git_oid_equal(&last_vm, git_tree_id(vm))) {
			ok = last_ok;
		} else {
			ok = below(g->repo, vm, x_threshold, y_threshold);
			if (ok < 0) {
				rc = git_fail(ok, "history", errmsg, errn);
				goto out;
			}
			last_vm = *git_tree_id(vm);
			last_ok = ok;
			have_last = true;
		}
		if (ok) {
			hex(git_commit_id(cur), commit);
			s = git_commit_summary(cur);
			if (subject && subjn)
				snprintf(subject, subjn, "%s", s ? s : "");
			if (committed_at)
				*committed_at = (int64_t)git_commit_time(cur);
			rc = 1;
			goto out;
		}
		git_tree_free(vm);
		git_tree_free(root);
		vm = NULL;
		root = NULL;
		if (git_commit_parentcount(cur) == 0)
			break;
		e = git_commit_parent(&par, cur, 0);
		if (e < 0) {
			rc = git_fail(e, "history", errmsg, errn);
			goto out;
		}
		git_commit_free(cur);
		cur = par;
		par = NULL;
	}
out:
	git_tree_free(vm);
	git_tree_free(root);
	git_commit_free(cur);
	git_commit_free(par);
	return rc;
}

struct log_walk {
	gitc_commit_fn cb;
	void *ctx;
};

static int log_change(struct gitc *g, void *ctx, git_commit *c,
		      const git_oid *id, bool found)
{
	struct log_walk *l = ctx;
	const char *subject = git_commit_summary(c);
	char commit[41];

	(void)g;
	(void)id;
	(void)found;
	hex(git_commit_id(c), commit);
	return l->cb(l->ctx, commit, (int64_t)git_commit_time(c),
		     subject ? subject : "");
}

int gitc_log(struct gitc *g, size_t limit, gitc_commit_fn cb, void *ctx,
	     char *errmsg, size_t errn)
{
	struct log_walk l = {cb, ctx};

	return walk_changes(g, VM_DIR, GIT_OBJECT_TREE, limit, log_change, &l,
			    errmsg, errn);
}

/* Remove lock at path if it was made within the window after since. */
static bool remove_if_ours(const char *path, const struct timespec *since,
			   char *removed, size_t n)
{
	struct stat st;
	size_t len = strlen(removed);

	if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_mtim.tv_sec < since->tv_sec - 1 ||
	    st.st_mtim.tv_sec > since->tv_sec + STALE_LOCK_WINDOW_S ||
	    unlink(path) < 0)
		return false;
	snprintf(removed + len, n - len, "%s%s", len ? ", " : "", path);
	return true;
}

struct restage {
	struct gitc *g;
	git_index *idx;
	int rc;
};

static int restage_cb(const char *root, const git_tree_entry *te, void *arg)
{
	struct restage *r = arg;
	char path[PATH_MAX_VM + 16];
	git_blob *blob = NULL;
	int e;

	if (git_tree_entry_type(te) != GIT_OBJECT_BLOB)
		return 0;
	snprintf(path, sizeof(path), VM_DIR "/%s%s", root,
		 git_tree_entry_name(te));
	e = git_blob_lookup(&blob, r->g->repo, git_tree_entry_id(te));
	if (e == 0)
		e = index_put(r->g, r->idx, path, git_tree_entry_id(te),
			      git_blob_rawcontent(blob),
			      (size_t)git_blob_rawsize(blob));
	git_blob_free(blob);
	r->rc = e;
	return e < 0 ? -1 : 0;
}

/*
 * A commit cut short between moving the branch and staging its paths
 * leaves the index behind HEAD for our directory: make its entries there
 * HEAD's again (nothing else of the index is touched).
 */
static int restage_ours(struct gitc *g)
{
	struct restage r = {g, NULL, 0};
	git_object *obj = NULL;
	int e;

	e = git_repository_index(&r.idx, g->repo);
	if (e == 0)
		e = git_index_read(r.idx, 1);
	if (e == 0)
		e = git_index_remove_directory(r.idx, VM_DIR, 0);
	if (e == 0) {
		e = git_revparse_single(&obj, g->repo, "HEAD:" VM_DIR);
		if (e == GIT_ENOTFOUND || e == GIT_EUNBORNBRANCH)
			e = 0; /* no memory in HEAD: none in the index */
		else if (e == 0 && git_object_type(obj) == GIT_OBJECT_TREE &&
			 git_tree_walk((git_tree *)obj, GIT_TREEWALK_PRE,
				       restage_cb, &r) < 0)
			e = r.rc < 0 ? r.rc : -1;
	}
	if (e == 0)
		e = git_index_write(r.idx);
	git_object_free(obj);
	git_index_free(r.idx);
	return e < 0 ? git2errno(e) : 0;
}

int gitc_clear_stale_locks(struct gitc *g, char *removed, size_t n)
{
	const char *common = git_repository_commondir(g->repo);
	char path[PATH_MAX];
	git_reference *head = NULL;
	struct stat st;
	int count = 0;

	removed[0] = '\0';
	if (statedir_stat(g->state, MARKER, &st) < 0)
		return 0;
	snprintf(path, sizeof(path), "%sindex.lock", g->gitdir);
	count += remove_if_ours(path, &st.st_mtim, removed, n);
	snprintf(path, sizeof(path), "%spacked-refs.lock", common);
	count += remove_if_ours(path, &st.st_mtim, removed, n);
	if (git_reference_lookup(&head, g->repo, "HEAD") == 0 &&
	    git_reference_type(head) == GIT_REFERENCE_SYMBOLIC &&
	    (size_t)snprintf(path, sizeof(path), "%s%s.lock", common,
			     git_reference_symbolic_target(head)) <
		    sizeof(path))
		count += remove_if_ours(path, &st.st_mtim, removed, n);
	git_reference_free(head);
	/* Only once no lock of ours is in the way. */
	if (restage_ours(g) == 0)
		(void)statedir_unlink(g->state, MARKER);
	return count;
}

int gitc_head_coords(struct gitc *g, int max_x, gitc_coord_fn cb, void *ctx)
{
	git_object *obj = NULL;
	git_tree *vm = NULL;
	int e, rc = 0;

	e = git_revparse_single(&obj, g->repo, "HEAD:" VM_DIR);
	if (e == GIT_ENOTFOUND || e == GIT_EUNBORNBRANCH)
		return 0; /* no commit, or no memory in it yet */
	if (e < 0)
		return git2errno(e);
	if (git_object_type(obj) != GIT_OBJECT_TREE) {
		git_object_free(obj);
		return 0;
	}
	vm = (git_tree *)obj;
	for (size_t i = 0; i < git_tree_entrycount(vm) && rc == 0; i++) {
		const git_tree_entry *xe = git_tree_entry_byindex(vm, i);
		git_tree *xt = NULL;

		if (git_tree_entry_type(xe) != GIT_OBJECT_TREE)
			continue;
		if (git_tree_lookup(&xt, g->repo, git_tree_entry_id(xe)) < 0)
			continue;
		for (size_t j = 0; j < git_tree_entrycount(xt) && rc == 0;
		     j++) {
			const git_tree_entry *fe =
				git_tree_entry_byindex(xt, j);
			struct coord c;

			if (coord_from_path(git_tree_entry_name(xe),
					    git_tree_entry_name(fe), max_x,
					    &c) == 0)
				rc = cb(ctx, &c);
		}
		git_tree_free(xt);
	}
	git_tree_free(vm);
	return rc;
}

/*
 * Git for the memory through libgit2: batched commits of .vector-memory on
 * the current branch and the read side of its history.
 *
 * A commit follows git's lock protocol end to end. The files of the batch
 * are read from the working tree and written as blobs first (no lock
 * needed). Then index.lock is taken (O_EXCL; held by someone else: the
 * commit is deferred), and held while the new index is prepared from the
 * index as it is now (gitidx.c), the commit is built on the branch tip
 * with treebuilders (the big .vector-memory tree kept in memory between
 * commits), the branch is moved under its own ref lock with a
 * compare-and-swap against that tip (rebuilt on the new tip when it
 * moved), and finally the prepared index is renamed over the index. A
 * user's git command meanwhile fails on the lock as it would against any
 * other git process, and nothing of it is lost; an index that cannot be
 * prepared stops the commit before the branch moves.
 *
 * Every lock we create is recorded in the commit marker (gitlock.h), so
 * that start-up after a crash removes ours and only ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <git2/sys/odb_backend.h>
#include <jansson.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "errmsg.h"
#include "gitc.h"
#include "gitidx.h"
#include "gitlock.h"
#include "gitop.h"
#include "gitpack.h"
#include "gitproc.h"
#include "protocol/fastjson.h"
#include "vmdir.h"

#define VM_DIR	       ".vector-memory"
#define VM_PREFIX      VM_DIR "/"
#define METADATA       "metadata.json"
#define REFLOG_MSG     "vector-memory: commit"
#define FALLBACK_NAME  "vmemd"
#define FALLBACK_EMAIL "vmemd@localhost"
/* Pack files libgit2 may keep open at once. */
#define GITC_PACK_FDS 32
#define MAX_TRIES     5
#define PATH_MAX_VM   64 /* ".vector-memory/x-NNN.../y-Y-z-Z.json" */
#define ANY_X	      1000000
#define FILE_MAX      (256u << 20) /* the largest file we commit */
#define READ_TRIES    5
/* Loose objects are written at zlib's fastest level: the big trees of a
 * commit are SHA-1 ids that hardly compress, and gc packs them anyway. */
#define LOOSE_LEVEL    1 /* Z_BEST_SPEED */
#define LOOSE_PRIORITY 3 /* above libgit2's own loose (1) and pack (2) */
/* From this many paths in a batch on, its new blobs go into one pack. */
#define PACK_MIN 256
/* A git command running longer than this is a reader (a pager), no
 * operation about to take index.lock or move the branch: commits do not
 * wait for it. */
#define GIT_RUNNING_MAX_AGE_S 5.0

struct gitc {
	git_repository *repo;
	char *gitdir;	 /* with a trailing slash, as libgit2 gives it */
	char *workdir;	 /* likewise */
	char *commondir; /* likewise */
	const struct statedir
		*state; /* ours: the marker, the lock files
			   made there, the index copy (borrowed) */
	int workfd;	/* the working tree, for openat2 */
	struct gitmark mark;
	void (*hook)(void *ctx, enum gitc_step step);
	void *hook_ctx;
	bool way_forced;
	enum gitidx_way way;
	/* The .vector-memory tree of the last commit, kept for the next. */
	git_treebuilder *vm;
	git_oid vm_id;
	bool vm_valid;
};

/* One path of a commit, as read from the working tree. A first commit
 * holds one per file until the index is written: no more than that
 * needs. */
struct item {
	/* As the index must have it: u.path is ".vector-memory/" + path
	 * (owned), u.present and u.st are the file's, u.oid is id once the
	 * index is brought in line. */
	struct gitidx_update u;
	struct gitc_change *ch; /* NULL for metadata.json added by us */
	/* A decision's agent_id for the message (owned; NULL: none), read
	 * only for the paths a message may name (agent_read). */
	char *agent;
	bool agent_read;
	git_oid id;
	bool changed;
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

static void hook(struct gitc *g, enum gitc_step step)
{
	if (g->hook)
		g->hook(g->hook_ctx, step);
}

int gitc_open(struct gitc **out, const char *workdir,
	      const struct statedir *state, char *errmsg, size_t errn)
{
	struct gitc *g = NULL;
	git_odb *odb = NULL;
	git_odb_backend *fast = NULL;
	char objects[PATH_MAX];
	const char *p;
	int ret, e;

	*out = NULL;
	e = git_libgit2_init();
	if (e < 0)
		return git_fail(e, "libgit2 init", errmsg, errn);
	/* Durability is ours: objects are flushed with one syncfs() before
	 * a branch may point to them (never a ref to a missing object); the
	 * ref and the index are renamed into place unsynced, as git does by
	 * default: after a power loss they may be older, never broken, and
	 * the start-up scan finds what HEAD lacks. */
	git_libgit2_opts(GIT_OPT_ENABLE_FSYNC_GITDIR, 0);
	/* libgit2 keeps every pack it has read open (no limit by default);
	 * big commits add a pack each, so bound the descriptors it holds. */
	git_libgit2_opts(GIT_OPT_SET_MWINDOW_FILE_LIMIT, (size_t)GITC_PACK_FDS);
	/* Every id our trees take is of an object we have just written or
	 * of an entry already in a tree: libgit2's check that it exists
	 * (a header read for each, of a loose file or from a pack) would
	 * read a first commit's every blob back, and leave its packs mapped
	 * and resident (30 MB after 100,000 decisions). */
	git_libgit2_opts(GIT_OPT_ENABLE_STRICT_OBJECT_CREATION, 0);
	g = calloc(1, sizeof(*g));
	if (!g) {
		ret = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	g->workfd = -1;
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
	g->commondir = strdup(git_repository_commondir(g->repo));
	g->state = state;
	if (!g->workdir || !g->gitdir || !g->commondir) {
		ret = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	ret = gitmark_init(&g->mark, state);
	if (ret < 0) {
		errmsg_set(errmsg, errn, "our own process start time: %s",
			   strerror(-ret));
		goto out;
	}
	g->workfd = open(g->workdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (g->workfd < 0) {
		ret = -errno;
		errmsg_set(errmsg, errn, "%s: %s", g->workdir, strerror(errno));
		goto out;
	}
	snprintf(objects, sizeof(objects), "%sobjects", g->commondir);
	e = git_repository_odb(&odb, g->repo);
	if (e == 0)
		e = git_odb_backend_loose(&fast, objects, LOOSE_LEVEL, 0, 0, 0);
	if (e == 0) {
		e = git_odb_add_backend(odb, fast, LOOSE_PRIORITY);
		if (e < 0)
			fast->free(fast);
	}
	git_odb_free(odb);
	if (e < 0) {
		ret = git_fail(e, "the object database", errmsg, errn);
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
	git_treebuilder_free(g->vm);
	git_repository_free(g->repo);
	if (g->workfd >= 0)
		close(g->workfd);
	free(g->gitdir);
	free(g->workdir);
	free(g->commondir);
	free(g);
	git_libgit2_shutdown();
}

void gitc_set_hook(struct gitc *g, void (*fn)(void *ctx, enum gitc_step step),
		   void *ctx)
{
	g->hook = fn;
	g->hook_ctx = ctx;
}

void gitc_force_index_way(struct gitc *g, int way)
{
	g->way_forced = way >= 0;
	g->way = way == GITC_INDEX_GIT ? GITIDX_GIT : GITIDX_OWN;
}

static void range(FILE *f, const char *axis, int lo, int hi)
{
	if (lo == hi)
		fprintf(f, "%s %d", axis, lo);
	else
		fprintf(f, "%s %d-%d", axis, lo, hi);
}

/* The paths of the experiences' shards. */
#define EXPERIENCES_PREFIX VMDIR_EXPERIENCES "/"

/* The decision a path names ("x-005/y-2-z-1.json"), if it names one. */
static bool path_coord(const char *path, struct coord *c)
{
	char dir[32];
	const char *slash = strchr(path, '/');

	if (!slash || (size_t)(slash - path) >= sizeof(dir) ||
	    strchr(slash + 1, '/'))
		return false;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return coord_from_path(dir, slash + 1, ANY_X, c) == 0;
}

char *gitc_message(const struct gitc_msgline *l, size_t n)
{
	struct coord lo = {0}, hi = {0}, c;
	char *buf = NULL;
	size_t len = 0, i, nd = 0, ns = 0;
	FILE *f;

	f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	for (i = 0; i < n; i++) {
		if (!path_coord(l[i].path, &c))
			continue;
		if (nd++ == 0) {
			lo = hi = c;
			continue;
		}
		lo.x = c.x < lo.x ? c.x : lo.x;
		lo.y = c.y < lo.y ? c.y : lo.y;
		lo.z = c.z < lo.z ? c.z : lo.z;
		hi.x = c.x > hi.x ? c.x : hi.x;
		hi.y = c.y > hi.y ? c.y : hi.y;
		hi.z = c.z > hi.z ? c.z : hi.z;
	}
	for (i = 0; i < n; i++)
		ns += strncmp(l[i].path, EXPERIENCES_PREFIX,
			      strlen(EXPERIENCES_PREFIX)) == 0;
	if (nd > 0 || ns == 0)
		fprintf(f, "vector-memory: %zu decisions", nd);
	if (nd > 0) {
		fputs(" (", f);
		range(f, "x", lo.x, hi.x);
		fputs(", ", f);
		range(f, "y", lo.y, hi.y);
		fputs(", ", f);
		range(f, "z", lo.z, hi.z);
		fputs(")", f);
	}
	if (ns > 0)
		fprintf(f, "%s%zu experience shard%s",
			nd > 0 ? ", " : "vector-memory: ", ns,
			ns == 1 ? "" : "s");
	fputs("\n", f);
	for (i = 0; i < n && i < GITC_MESSAGE_PATHS; i++) {
		if (i == 0)
			fputs("\n", f);
		if (l[i].deleted)
			fprintf(f, "%s deleted\n", l[i].path);
		else if (path_coord(l[i].path, &c))
			fprintf(f, "%s by %s\n", l[i].path,
				l[i].agent ? l[i].agent : "unknown");
		else
			fprintf(f, "%s\n", l[i].path);
	}
	if (n > GITC_MESSAGE_PATHS)
		fprintf(f, "and %zu more\n", n - GITC_MESSAGE_PATHS);
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

/*
 * Is a user's `git commit` in progress here? git takes no lock while its
 * editor is open (a commit of the index as it is releases index.lock
 * first), but it moves the branch afterwards with a compare-and-swap
 * against the tip it started from, which a commit of ours meanwhile would
 * make fail. It writes COMMIT_EDITMSG before the editor starts: only when
 * that file is newer than HEAD's last move (its reflog) are processes
 * looked at. The pid goes to *pid.
 */
static bool commit_in_progress(struct gitc *g, long *pid)
{
	static const char *const commit[] = {"commit", NULL};
	char path[PATH_MAX];
	struct stat msg, moved;

	snprintf(path, sizeof(path), "%sCOMMIT_EDITMSG", g->gitdir);
	if (stat(path, &msg) < 0)
		return false;
	snprintf(path, sizeof(path), "%slogs/HEAD", g->gitdir);
	if (stat(path, &moved) == 0 &&
	    (moved.st_mtim.tv_sec > msg.st_mtim.tv_sec ||
	     (moved.st_mtim.tv_sec == msg.st_mtim.tv_sec &&
	      moved.st_mtim.tv_nsec >= msg.st_mtim.tv_nsec)))
		return false;
	return gitop_git_in_tree(g->workdir, 0, commit, pid);
}

/* 1 with why when a commit must wait, 0 when it may go, or -errno. */
static int deferral(struct gitc *g, char *why, size_t whyn, char *errmsg,
		    size_t errn)
{
	const char *reason = NULL;
	char lock[PATH_MAX];
	struct stat st;
	long pid = 0;
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
		/* A cheap look before the files are read; the lock itself
		 * is what decides (gitlock_take). */
		snprintf(lock, sizeof(lock), "%sindex.lock", g->gitdir);
		if (lstat(lock, &st) == 0)
			reason = "index.lock is held by another process";
	}
	if (!reason && commit_in_progress(g, &pid)) {
		errmsg_set(why, whyn,
			   "a git commit is in progress (pid %ld: its editor "
			   "may be open)",
			   pid);
		return 1;
	}
	/* A git command that has read HEAD or the index but taken no lock
	 * yet: our index.lock would make it fail. */
	if (!reason &&
	    gitop_git_in_tree(g->workdir, GIT_RUNNING_MAX_AGE_S, NULL, &pid)) {
		errmsg_set(why, whyn,
			   "a git command runs in the tree (pid %ld)", pid);
		return 1;
	}
	if (!reason)
		return 0;
	errmsg_set(why, whyn, "%s", reason);
	return 1;
}

/* open(2) of a path under the working tree that follows no symlink. */
static int open_beneath(struct gitc *g, const char *rel)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
	};
	long fd = syscall(SYS_openat2, g->workfd, rel, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(g->workfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return (int)fd;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev &&
	       a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * The bytes of the working file of it into b (or its absence), with the
 * stat of exactly those bytes: read again if the file changed while
 * being read.
 */
static int read_item(struct gitc *g, struct item *it, struct buf *b,
		     char *errmsg, size_t errn)
{
	struct stat st, after;
	int fd = -1, rc = 0;

	for (int tries = 0; tries < READ_TRIES; tries++) {
		size_t got = 0;

		b->len = 0;
		it->u.present = false;
		fd = open_beneath(g, it->u.path);
		if (fd < 0) {
			if (errno == ENOENT)
				return 0;
			rc = -errno;
			errmsg_set(errmsg, errn, "%s: %s", it->u.path,
				   errno == ELOOP || errno == EXDEV
					   ? "a symbolic link is in the way"
					   : strerror(errno));
			return rc;
		}
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (size_t)st.st_size > FILE_MAX) {
			rc = S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
			errmsg_set(errmsg, errn, "%s: %s", it->u.path,
				   rc == -EFBIG ? "too large to commit"
						: "not a regular file");
			goto out;
		}
		if (!buf_reserve(b, (size_t)st.st_size + 1)) {
			rc = -ENOMEM;
			errmsg_set(errmsg, errn, "out of memory");
			goto out;
		}
		while (got <= (size_t)st.st_size) {
			ssize_t r = read(fd, b->data + got,
					 (size_t)st.st_size + 1 - got);

			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				rc = -errno;
				errmsg_set(errmsg, errn, "%s: %s", it->u.path,
					   strerror(errno));
				goto out;
			}
			if (r == 0)
				break;
			got += (size_t)r;
		}
		if (fstat(fd, &after) < 0) {
			rc = -errno;
			goto out;
		}
		close(fd);
		fd = -1;
		if (got == (size_t)st.st_size && same_stat(&st, &after)) {
			gitidx_stat_of(&st, &it->u.st);
			b->len = got;
			it->u.present = true;
			return 0;
		}
	}
	rc = -EAGAIN;
	errmsg_set(errmsg, errn, "%s kept changing while it was read",
		   it->u.path);
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* ---- trees ---- */

/* A builder of tree id (NULL or absent: empty). */
static int builder_of(git_repository *repo, const git_oid *id,
		      git_treebuilder **out)
{
	git_tree *t = NULL;
	int rc;

	if (id) {
		rc = git_tree_lookup(&t, repo, id);
		if (rc < 0)
			return rc;
	}
	rc = git_treebuilder_new(out, repo, t);
	git_tree_free(t);
	return rc;
}

/*
 * Apply its[0..n) (sorted; paths from off on relative to b's tree) to b,
 * setting each item's changed. Directories are rebuilt recursively, and
 * dropped when they end up empty (git keeps no empty tree).
 */
static int edit(git_repository *repo, git_treebuilder *b, struct item **its,
		size_t n, size_t off)
{
	size_t i = 0;
	int rc = 0;

	while (i < n && rc == 0) {
		const char *p = its[i]->u.path + off, *slash = strchr(p, '/');
		size_t clen = slash ? (size_t)(slash - p) : strlen(p), k;
		char name[NAME_MAX + 1];
		const git_tree_entry *e;

		if (clen == 0 || clen > NAME_MAX) {
			git_error_set_str(GIT_ERROR_INVALID, "bad path");
			return GIT_EINVALID;
		}
		memcpy(name, p, clen);
		name[clen] = '\0';
		e = git_treebuilder_get(b, name);
		if (!slash) {
			struct item *it = its[i++];

			if (it->u.present) {
				it->changed =
					!e ||
					git_tree_entry_filemode(e) !=
						GIT_FILEMODE_BLOB ||
					!git_oid_equal(git_tree_entry_id(e),
						       &it->id);
				if (it->changed)
					rc = git_treebuilder_insert(
						NULL, b, name, &it->id,
						GIT_FILEMODE_BLOB);
			} else {
				it->changed = e != NULL;
				if (e)
					rc = git_treebuilder_remove(b, name);
			}
			continue;
		}
		/* The run of items inside directory name. */
		for (k = i; k < n; k++) {
			const char *q = its[k]->u.path + off;

			if (strncmp(q, name, clen) != 0 || q[clen] != '/')
				break;
		}
		{
			git_treebuilder *sub = NULL;
			bool any = false;
			git_oid id;

			rc = builder_of(repo,
					e && git_tree_entry_type(e) ==
								GIT_OBJECT_TREE
						? git_tree_entry_id(e)
						: NULL,
					&sub);
			if (rc == 0)
				rc = edit(repo, sub, its + i, k - i,
					  off + clen + 1);
			for (size_t j = i; j < k; j++)
				any |= its[j]->changed;
			if (rc == 0 && any) {
				if (git_treebuilder_entrycount(sub) == 0) {
					if (e)
						rc = git_treebuilder_remove(
							b, name);
				} else {
					rc = git_treebuilder_write(&id, sub);
					if (rc == 0)
						rc = git_treebuilder_insert(
							NULL, b, name, &id,
							GIT_FILEMODE_TREE);
				}
			}
			git_treebuilder_free(sub);
		}
		i = k;
	}
	return rc;
}

/*
 * The root tree of root (NULL: empty) with .vector-memory edited by the
 * items. The .vector-memory level is kept in g->vm between commits (its
 * entries grow with the memory; the trees below stay small), reused when
 * the tip's .vector-memory is the one we last wrote. *any: an item
 * changed. Returns 0 or a libgit2 error.
 */
static int build_tree(struct gitc *g, const git_tree *root, struct item **its,
		      size_t n, git_oid *out, bool *any)
{
	const git_tree_entry *ve =
		root ? git_tree_entry_byname(root, VM_DIR) : NULL;
	const git_oid *vm_id = ve && git_tree_entry_type(ve) == GIT_OBJECT_TREE
				       ? git_tree_entry_id(ve)
				       : NULL;
	git_treebuilder *rb = NULL;
	git_oid id;
	int rc;

	*any = false;
	if (!g->vm || !g->vm_valid || !vm_id ||
	    !git_oid_equal(vm_id, &g->vm_id)) {
		git_treebuilder_free(g->vm);
		g->vm = NULL;
		g->vm_valid = false;
		rc = builder_of(g->repo, vm_id, &g->vm);
		if (rc < 0)
			return rc;
	}
	g->vm_valid = false; /* until written again */
	rc = edit(g->repo, g->vm, its, n, strlen(VM_PREFIX));
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		*any |= its[i]->changed;
	if (!*any) {
		/* The builder still holds the tip's tree, unwritten. */
		if (vm_id) {
			g->vm_id = *vm_id;
			g->vm_valid = true;
		}
		return 0;
	}
	rc = git_treebuilder_new(&rb, g->repo, root);
	if (rc < 0)
		return rc;
	if (git_treebuilder_entrycount(g->vm) == 0) {
		if (ve)
			rc = git_treebuilder_remove(rb, VM_DIR);
	} else {
		rc = git_treebuilder_write(&id, g->vm);
		if (rc == 0) {
			g->vm_id = id;
			g->vm_valid = true;
			rc = git_treebuilder_insert(NULL, rb, VM_DIR, &id,
						    GIT_FILEMODE_TREE);
		}
	}
	if (rc == 0)
		rc = git_treebuilder_write(out, rb);
	git_treebuilder_free(rb);
	return rc;
}

/* Objects are written unsynced; one syncfs() of their file system makes
 * them all durable before a branch may point to them. */
static int objects_durable(struct gitc *g)
{
	char path[PATH_MAX];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%sobjects", g->commondir);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || syncfs(fd) < 0) {
		git_error_set(GIT_ERROR_OS, "cannot sync %s: %s", path,
			      strerror(errno));
		rc = GIT_ERROR;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* ---- the branch ---- */

/* mkdir -p of the directory part of path (for a new ref or log). */
static void make_parents(const char *path)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", path);
	for (char *s = strchr(dir + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		mkdir(dir, 0777);
		*s = '/';
	}
}

/* Should ref updates of this repository be logged (core.logAllRefUpdates,
 * true by default in a repository with a working tree)? 1 always, 0 only
 * where a log exists. */
static int log_all(git_repository *repo)
{
	git_config *cfg = NULL;
	git_buf v = {0};
	int on = 1, b;

	if (git_repository_config_snapshot(&cfg, repo) < 0)
		return 1;
	if (git_config_get_string_buf(&v, cfg, "core.logAllRefUpdates") == 0) {
		if (strcasecmp(v.ptr, "always") == 0)
			on = 1;
		else if (git_config_parse_bool(&b, v.ptr) == 0)
			on = b;
	}
	git_buf_dispose(&v);
	git_config_free(cfg);
	return on;
}

/* Append one reflog line to the log at path, as git writes them. */
static void reflog_append(const char *path, bool create, const char *line)
{
	int fd;

	if (create)
		make_parents(path);
	fd = open(path,
		  O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
			  (create ? O_CREAT : 0),
		  0666);
	if (fd < 0)
		return; /* a log we may not keep is no reason to fail */
	if (write(fd, line, strlen(line)) < 0) {
		/* likewise */
	}
	close(fd);
}

/*
 * Move branch (e.g. "refs/heads/main") from old (NULL: it must not exist)
 * to new, as git does: take the ref's lock, check under it that the
 * branch is still at old (compare-and-swap), write the lock,
 * append to the branch's and HEAD's reflogs, rename the lock over the
 * ref. -EAGAIN when the branch moved, -EBUSY when its lock is held by
 * another process, or -errno.
 */
static int move_branch(struct gitc *g, const char *branch, const git_oid *old,
		       const git_oid *new, const git_signature *sig,
		       char *errmsg, size_t errn)
{
	char path[PATH_MAX], line[1024], oh[41], nh[41];
	struct gitlock rl;
	git_oid cur;
	bool create;
	int rc, e;

	gitlock_init(&rl);
	if ((size_t)snprintf(path, sizeof(path), "%s%s", g->commondir,
			     branch) >= sizeof(path)) {
		errmsg_set(errmsg, errn, "%s: path too long", branch);
		return -ENAMETOOLONG;
	}
	if (!old)
		make_parents(path);
	rc = gitlock_take(&rl, path, &g->mark);
	if (rc == -EEXIST)
		return -EBUSY; /* another process moves it right now */
	if (rc < 0) {
		errmsg_set(errmsg, errn, "%s.lock: %s", path, strerror(-rc));
		return rc;
	}
	e = git_reference_name_to_id(&cur, g->repo, branch);
	if ((old && (e < 0 || !git_oid_equal(&cur, old))) ||
	    (!old && e != GIT_ENOTFOUND)) {
		rc = e < 0 && e != GIT_ENOTFOUND
			     ? git_fail(e, branch, errmsg, errn)
			     : -EAGAIN;
		goto out;
	}
	hex(new, nh);
	if (old)
		hex(old, oh);
	else
		memset(oh, '0', 40), oh[40] = '\0';
	snprintf(line, sizeof(line), "%s\n", nh);
	if (pwrite(rl.fd, line, 41, 0) != 41) {
		rc = -errno;
		errmsg_set(errmsg, errn, "%s.lock: %s", path, strerror(errno));
		goto out;
	}
	snprintf(line, sizeof(line), "%s %s %s <%s> %lld %c%02d%02d\t%s\n", oh,
		 nh, sig->name, sig->email, (long long)sig->when.time,
		 sig->when.offset < 0 ? '-' : '+', abs(sig->when.offset) / 60,
		 abs(sig->when.offset) % 60, REFLOG_MSG);
	create = log_all(g->repo) == 1;
	snprintf(path, sizeof(path), "%slogs/%s", g->commondir, branch);
	reflog_append(path, create, line);
	snprintf(path, sizeof(path), "%slogs/HEAD", g->gitdir);
	reflog_append(path, create, line);
	rc = gitlock_commit(&rl, false);
	if (rc < 0)
		errmsg_set(errmsg, errn, "%s: %s", branch, strerror(-rc));
out:
	gitlock_release(&rl);
	return rc;
}

/* ---- a commit ---- */

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

/* The agent a decision's bytes name (malloc'd), or NULL. */
static char *agent_of(const char *bytes, size_t len)
{
	json_t *doc = fastjson_loadb(bytes, len, 0, NULL);
	const char *a = json_string_value(json_object_get(doc, "agent_id"));
	char *r = a ? strdup(a) : NULL;

	json_decref(doc);
	return r;
}

/* Does the message name its agent: a present decision with a change? */
static bool agent_wanted(const struct item *it)
{
	return it->ch && it->u.present &&
	       path_coord(it->u.path + strlen(VM_PREFIX), &(struct coord){0});
}

/* The generated message for the changed items (malloc'd). */
static char *message_of(git_repository *repo, struct item **its, size_t n)
{
	struct gitc_msgline *l = calloc(n ? n : 1, sizeof(*l));
	size_t k = 0;
	char *m = NULL;

	if (!l)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		struct item *it = its[i];

		if (!it->changed || !it->ch)
			continue;
		/* Read from the files for the first paths of the batch; a
		 * path named here after unchanged ones may lack it: its
		 * blob is read back (rare: a pack stays mapped after). */
		if (k < GITC_MESSAGE_PATHS && !it->agent_read &&
		    agent_wanted(it)) {
			git_blob *blob = NULL;

			if (git_blob_lookup(&blob, repo, &it->id) == 0)
				it->agent = agent_of(
					git_blob_rawcontent(blob),
					(size_t)git_blob_rawsize(blob));
			git_blob_free(blob);
			it->agent_read = true;
		}
		l[k].path = it->u.path + strlen(VM_PREFIX);
		l[k].deleted = !it->u.present;
		l[k].agent = it->agent; /* borrowed */
		k++;
	}
	m = gitc_message(l, k);
	free(l);
	return m;
}

static int item_cmp(const void *a, const void *b)
{
	return strcmp((*(struct item *const *)a)->u.path,
		      (*(struct item *const *)b)->u.path);
}

/* The version of a new index, as git would pick it. */
static unsigned new_index_version(git_repository *repo, bool *want_git)
{
	git_config *cfg = NULL;
	int32_t v = 0;
	int b = 0;
	unsigned version = 2;

	*want_git = false;
	if (git_repository_config_snapshot(&cfg, repo) < 0)
		return version;
	if (git_config_get_bool(&b, cfg, "feature.manyFiles") == 0 && b)
		version = 4;
	if (git_config_get_int32(&v, cfg, "index.version") == 0 && v >= 2 &&
	    v <= 4)
		version = (unsigned)v;
	if ((git_config_get_bool(&b, cfg, "core.splitIndex") == 0 && b) ||
	    (git_config_get_bool(&b, cfg, "core.untrackedCache") == 0 && b))
		*want_git = true;
	git_config_free(cfg);
	return version;
}

/*
 * Under index.lock: build on the tip and move the branch, rebuilt when the
 * tip moved. 0 with *cid (zero when the tree stays as it is), 1 with why,
 * or -errno.
 */
static int commit_tries(struct gitc *g, struct item **its, size_t n,
			const char *message, const git_signature *sig,
			git_oid *cid, char *why, size_t whyn, char *errmsg,
			size_t errn)
{
	git_reference *head = NULL;
	git_commit *tip = NULL;
	git_tree *tip_tree = NULL, *tree = NULL;
	const git_commit *parents[1];
	char *branch = NULL, *msg = NULL;
	git_oid tip_id, tree_id;
	bool unborn, any;
	int rc = -EAGAIN, e, tries;

	memset(cid, 0, sizeof(*cid));
	for (tries = 0; tries < MAX_TRIES && rc == -EAGAIN; tries++) {
		git_reference_free(head);
		git_commit_free(tip);
		git_tree_free(tip_tree);
		git_tree_free(tree);
		free(branch);
		free(msg);
		head = NULL, tip = NULL, tip_tree = NULL, tree = NULL;
		branch = NULL, msg = NULL;
		unborn = false;
		e = git_reference_lookup(&head, g->repo, "HEAD");
		if (e < 0) {
			rc = git_fail(e, "HEAD", errmsg, errn);
			break;
		}
		if (git_reference_type(head) != GIT_REFERENCE_SYMBOLIC) {
			errmsg_set(why, whyn, "HEAD is detached");
			rc = 1;
			break;
		}
		branch = strdup(git_reference_symbolic_target(head));
		if (!branch) {
			errmsg_set(errmsg, errn, "out of memory");
			rc = -ENOMEM;
			break;
		}
		e = git_reference_name_to_id(&tip_id, g->repo, branch);
		if (e == GIT_ENOTFOUND) {
			unborn = true;
		} else if (e < 0) {
			rc = git_fail(e, branch, errmsg, errn);
			break;
		} else {
			e = git_commit_lookup(&tip, g->repo, &tip_id);
			if (e == 0)
				e = git_commit_tree(&tip_tree, tip);
			if (e < 0) {
				rc = git_fail(e, "branch tip", errmsg, errn);
				break;
			}
		}
		e = build_tree(g, tip_tree, its, n, &tree_id, &any);
		if (e < 0) {
			rc = git_fail(e, "building the tree", errmsg, errn);
			break;
		}
		if (!any || (tip_tree &&
			     git_oid_equal(&tree_id, git_tree_id(tip_tree)))) {
			rc = 0; /* nothing differs from the tip */
			break;
		}
		if (!message) {
			msg = message_of(g->repo, its, n);
			if (!msg) {
				errmsg_set(errmsg, errn, "out of memory");
				rc = -ENOMEM;
				break;
			}
		}
		e = git_tree_lookup(&tree, g->repo, &tree_id);
		if (e == 0) {
			parents[0] = tip;
			e = git_commit_create(cid, g->repo, NULL, sig, sig,
					      NULL, message ? message : msg,
					      tree, unborn ? 0 : 1, parents);
		}
		if (e == 0)
			e = objects_durable(g);
		if (e < 0) {
			rc = git_fail(e, "creating the commit", errmsg, errn);
			break;
		}
		hook(g, GITC_STEP_BEFORE_CAS);
		rc = move_branch(g, branch, unborn ? NULL : &tip_id, cid, sig,
				 errmsg, errn);
		if (rc == -EBUSY) {
			/* Held by someone else: wait, as for index.lock. */
			errmsg_set(why, whyn,
				   "%s.lock is held by another process",
				   branch);
			rc = 1;
		}
	}
	if (rc == -EAGAIN)
		errmsg_set(errmsg, errn,
			   "the branch kept moving during %d attempts",
			   MAX_TRIES);
	if (rc != 0)
		memset(cid, 0, sizeof(*cid));
	git_reference_free(head);
	git_commit_free(tip);
	git_tree_free(tip_tree);
	git_tree_free(tree);
	free(branch);
	free(msg);
	return rc;
}

static void items_free(struct item *its, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free((char *)its[i].u.path); /* owned: see struct item */
		free(its[i].agent);
	}
	free(its);
}

/*
 * Where a commit's blobs go, each as its file is read (no file's bytes
 * are held after): loose objects, or for a big batch one pack of those
 * the repository lacks, each content once.
 */
struct blobs {
	git_odb *odb;	      /* the packs as they were at the start */
	struct gitpack *pack; /* NULL: loose objects */
	size_t agents;	      /* decisions whose agent is still to read */
};

static int blobs_begin(struct gitc *g, struct blobs *b, bool packed,
		       char *errmsg, size_t errn)
{
	char packdir[PATH_MAX];
	int e;

	memset(b, 0, sizeof(*b));
	b->agents = GITC_MESSAGE_PATHS;
	if (!packed)
		return 0;
	e = git_repository_odb(&b->odb, g->repo);
	if (e < 0)
		return git_fail(e, "the object database", errmsg, errn);
	/* The packs as they are now, once: an object missing is no reason
	 * to read the pack directory again (libgit2 does that for each
	 * miss, and in a first commit every object misses). A pack someone
	 * adds meanwhile costs at most a copy of its objects in ours. */
	e = git_odb_refresh(b->odb);
	if (e < 0)
		return git_fail(e, "the object database", errmsg, errn);
	snprintf(packdir, sizeof(packdir), "%sobjects/pack", g->commondir);
	return gitpack_begin(&b->pack, packdir, errmsg, errn);
}

/* The blob of it, whose bytes are data (len). 0 or -errno (errmsg). */
static int blob_write(struct gitc *g, struct blobs *b, struct item *it,
		      const char *data, size_t len, char *errmsg, size_t errn)
{
	int e;

	if (b->agents && agent_wanted(it)) {
		it->agent = agent_of(data, len);
		it->agent_read = true;
		b->agents--;
	}
	if (!b->pack) {
		e = git_blob_create_from_buffer(&it->id, g->repo, data, len);
		return e < 0 ? git_fail(e, "writing a blob", errmsg, errn) : 0;
	}
	e = git_odb_hash(&it->id, data, len, GIT_OBJECT_BLOB);
	if (e < 0)
		return git_fail(e, "hashing a blob", errmsg, errn);
	if (git_odb_exists_ext(b->odb, &it->id, GIT_ODB_LOOKUP_NO_REFRESH))
		return 0;
	e = gitpack_add(b->pack, GIT_OBJECT_BLOB, &it->id, data, len, errmsg,
			errn);
	return e < 0 ? e : 0;
}

/* Finish (ok) or give up the pack; the odb sees it. 0 or -errno. */
static int blobs_end(struct blobs *b, bool ok, char *errmsg, size_t errn)
{
	int rc = 0;

	if (ok && b->pack && gitpack_count(b->pack)) {
		rc = gitpack_commit(b->pack, errmsg, errn);
		if (rc == 0 && git_odb_refresh(b->odb) < 0)
			rc = git_fail(GIT_ERROR, "the new pack", errmsg, errn);
	}
	gitpack_free(b->pack);
	git_odb_free(b->odb);
	memset(b, 0, sizeof(*b));
	return rc;
}

int gitc_commit_as(struct gitc *g, const struct gitc_ident *who,
		   struct gitc_change *ch, size_t n, const char *message,
		   struct gitc_result *res, char *errmsg, size_t errn)
{
	struct gitidx_ctx ic = {0};
	struct gitidx_result ir;
	const struct gitidx_update **up = NULL;
	struct item *its = NULL, **sorted = NULL;
	git_signature *sig = NULL;
	struct gitlock il;
	char index[PATH_MAX];
	bool have_meta = false;
	struct blobs blobs;
	struct buf bytes = {0};
	size_t ni = 0;
	git_oid cid;
	int rc, e;

	gitlock_init(&il);
	memset(res, 0, sizeof(*res));
	res->replaced_fd = -1;
	if (errmsg && errn)
		errmsg[0] = '\0';
	if (n == 0)
		return 0; /* nothing to commit */
	rc = deferral(g, res->deferred, sizeof(res->deferred), errmsg, errn);
	if (rc != 0)
		goto out;
	/* The files as they are now: read, and written as blobs. */
	its = calloc(n + 1, sizeof(*its));
	sorted = calloc(n + 1, sizeof(*sorted));
	if (!its || !sorted) {
		rc = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	for (size_t i = 0; i <= n; i++) {
		const char *path = i < n ? ch[i].path : METADATA;
		char *full;

		if (i == n && have_meta)
			break;
		have_meta |= strcmp(path, METADATA) == 0;
		if (asprintf(&full, VM_PREFIX "%s", path) < 0) {
			rc = -ENOMEM;
			errmsg_set(errmsg, errn, "out of memory");
			goto out;
		}
		its[ni].u.path = full;
		its[ni].ch = i < n ? &ch[i] : NULL;
		sorted[ni] = &its[ni];
		ni++;
	}
	qsort(sorted, ni, sizeof(*sorted), item_cmp);
	for (size_t i = 1; i < ni; i++)
		if (strcmp(sorted[i - 1]->u.path, sorted[i]->u.path) == 0) {
			rc = -EINVAL;
			errmsg_set(errmsg, errn, "%s named twice",
				   sorted[i]->u.path);
			goto out;
		}
	/* Each file read and its blob written in turn: a first commit of
	 * the whole memory holds one file's bytes at a time. */
	rc = blobs_begin(g, &blobs, ni >= PACK_MIN, errmsg, errn);
	for (size_t i = 0; i < ni && rc == 0; i++) {
		rc = read_item(g, sorted[i], &bytes, errmsg, errn);
		if (rc == 0 && sorted[i]->u.present)
			rc = blob_write(g, &blobs, sorted[i], bytes.data,
					bytes.len, errmsg, errn);
	}
	if (rc < 0)
		(void)blobs_end(&blobs, false, NULL, 0);
	else
		rc = blobs_end(&blobs, true, errmsg, errn);
	buf_done(&bytes);
	if (rc < 0)
		goto out;
	/* metadata.json is added when there, never removed by us */
	{
		size_t k = 0;

		for (size_t i = 0; i < ni; i++)
			if (sorted[i]->ch || sorted[i]->u.present)
				sorted[k++] = sorted[i];
		ni = k;
	}
	e = signature(&sig, g->repo, who);
	if (e < 0) {
		rc = git_fail(e, "signature", errmsg, errn);
		goto out;
	}
	/* git's lock, held from reading the index to writing it. */
	rc = gitmark_begin(&g->mark);
	if (rc < 0) {
		errmsg_set(errmsg, errn, "%s/committing: %s", g->state->path,
			   strerror(-rc));
		goto out;
	}
	snprintf(index, sizeof(index), "%sindex", g->gitdir);
	rc = gitlock_take(&il, index, &g->mark);
	if (rc == -EEXIST) {
		errmsg_set(res->deferred, sizeof(res->deferred),
			   "index.lock is held by another process");
		rc = 1;
		goto out;
	}
	if (rc < 0) {
		errmsg_set(errmsg, errn, "%s.lock: %s", index, strerror(-rc));
		res->index_error = true;
		goto out;
	}
	hook(g, GITC_STEP_LOCKED);
	up = calloc(ni ? ni : 1, sizeof(*up));
	if (!up) {
		rc = -ENOMEM;
		errmsg_set(errmsg, errn, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ni; i++) {
		memcpy(sorted[i]->u.oid, sorted[i]->id.id, 20);
		up[i] = &sorted[i]->u;
	}
	ic.gitdir = g->gitdir;
	ic.workdir = g->workdir;
	ic.state = g->state;
	ic.git = "git";
	ic.new_version = new_index_version(g->repo, &ic.force_git);
	ic.forced = g->way_forced;
	ic.force_way = g->way;
	rc = gitidx_sync(&ic, &il, &g->mark, up, ni, &ir, errmsg, errn);
	res->index_way = ir.way == GITIDX_GIT ? GITC_INDEX_GIT : GITC_INDEX_OWN;
	snprintf(res->index_why, sizeof(res->index_why), "%s", ir.why);
	if (rc < 0) {
		res->index_error = true;
		goto out;
	}
	if (ir.conflict) {
		errmsg_set(res->deferred, sizeof(res->deferred),
			   "conflict in %s", ir.conflict_path);
		rc = 1;
		goto out;
	}
	/* Its writeback starts now and runs while the commit is built,
	 * not inside the syncfs() that makes the commit's objects durable
	 * (the whole index: 10 MB at 100,000 decisions). Best effort. */
	if (ir.changed)
		(void)sync_file_range(il.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	hook(g, GITC_STEP_INDEX_READY);
	rc = commit_tries(g, sorted, ni, message, sig, &cid, res->deferred,
			  sizeof(res->deferred), errmsg, errn);
	if (rc != 0)
		goto out;
	if (!git_oid_is_zero(&cid)) {
		hex(&cid, res->commit);
		res->committed_at = (int64_t)sig->when.time;
		hook(g, GITC_STEP_MOVED);
	}
	if (ir.changed) {
		/* The index about to be replaced, held open: the rename
		 * would otherwise free its pages before returning (17-19
		 * ms at 1,000,000 decisions); the caller closes it once the
		 * syncs are answered. None (-1) is no harm. */
		res->replaced_fd = open(index, O_RDONLY | O_NOFOLLOW |
						       O_NONBLOCK | O_CLOEXEC);
		rc = gitlock_commit(&il, false);
		if (rc < 0) {
			/* The branch moved; the index could not follow. The
			 * caller syncs it again (its paths stay ours). */
			errmsg_set(errmsg, errn, "writing the index: %s",
				   strerror(-rc));
			res->index_error = true;
			rc = res->commit[0] ? 0 : rc;
		}
		res->index_written = rc == 0 && !res->index_error;
	}
	for (size_t i = 0; i < ni; i++)
		if (its[i].ch) {
			its[i].ch->present = its[i].u.present;
			its[i].ch->changed = res->commit[0] && its[i].changed;
		}
out:
	gitlock_release(&il);
	gitmark_end(&g->mark);
	git_signature_free(sig);
	free(up);
	free(sorted);
	if (its)
		items_free(its, n + 1);
	return rc;
}

int gitc_commit(struct gitc *g, struct gitc_change *ch, size_t n,
		const char *message, struct gitc_result *res, char *errmsg,
		size_t errn)
{
	int rc = gitc_commit_as(g, NULL, ch, n, message, res, errmsg, errn);

	if (res->replaced_fd >= 0)
		close(res->replaced_fd);
	res->replaced_fd = -1;
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

int gitc_clear_stale_locks(struct gitc *g, struct gitlock_stale *out)
{
	return gitlock_clear_stale(&g->mark, gitidx_private_files, out);
}

/* The path of a porcelain v2 record: after the given number of fields. */
static const char *record_path(const char *rec, int fields)
{
	for (; fields > 0 && rec; fields--) {
		rec = strchr(rec, ' ');
		if (rec)
			rec++;
	}
	return rec;
}

int gitc_scan(struct gitc *g, const int *cancel_fd, gitc_path_fn cb, void *ctx,
	      char *errmsg, size_t errn)
{
	static const char *const args[] = {"status",
					   "--porcelain=v2",
					   "-z",
					   "--no-renames",
					   "--untracked-files=all",
					   "--ignore-submodules=all",
					   "--",
					   VM_DIR,
					   NULL};
	struct gitproc gp = {"git", g->gitdir, g->workdir,
			     NULL,  true,      cancel_fd};
	char *out = NULL;
	size_t len = 0, off = 0;
	int rc;

	rc = gitproc_run(&gp, args, NULL, 0, &out, &len, errmsg, errn);
	if (rc < 0)
		return rc;
	while (off < len && rc == 0) {
		const char *rec = out + off, *path = NULL;

		off += strlen(rec) + 1;
		switch (rec[0]) {
		case '1':
			path = record_path(rec, 8);
			break;
		case 'u':
			path = record_path(rec, 10);
			break;
		case '?':
		case '!':
			path = record_path(rec, 1);
			break;
		case '2': /* a rename (not asked for): its origin follows */
			path = record_path(rec, 9);
			off += strlen(out + off) + 1;
			break;
		default:
			break;
		}
		if (path && strncmp(path, VM_PREFIX, strlen(VM_PREFIX)) == 0)
			rc = cb(ctx, path + strlen(VM_PREFIX));
	}
	free(out);
	return rc;
}

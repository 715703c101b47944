/*
 * The commit queue: which paths under .vector-memory changed since the
 * last commit, and the one background git job at a time that commits them
 * (gitc.h) after commit_delay_ms, once commit_max_batch are pending, on
 * git.sync and at a stop. A job commits what the working tree holds at its
 * paths once the file writer has caught up (never bytes rendered from
 * memory), so any kind of record whose files live under .vector-memory
 * commits through it by marking their paths. A deferred commit (merge in
 * progress, detached HEAD, index.lock held) keeps its batch pending and is
 * retried with backoff; the reason is kept for server.health. A commit
 * whose index cannot be brought in line stops commits (health says so)
 * until a retry succeeds. At start-up a scan (git status of
 * .vector-memory, on the thread pool) marks what differs from HEAD.
 * Loop thread only; a job gets its paths copied, handed over whole.
 */
#ifndef VMEM_DAEMON_GITQ_H
#define VMEM_DAEMON_GITQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gitc.h"
#include "index.h"
#include "store.h"

struct gitq_path;

/* What one commit job committed. */
struct gitq_batch {
	char commit[41]; /* "" when nothing had to be committed */
	int64_t committed_at;
	size_t n;
	struct coord *coords; /* its decisions (owned by the queue; valid
				 during done) */
	struct coord min, max;
};

struct gitq_sync;

/* code 0 with the batch, or an RPC domain code with a message. */
typedef void (*gitq_sync_fn)(struct gitq_sync *w, int code, const char *msg,
			     const struct gitq_batch *b);

/* A git.sync waiting for the commit of everything written before it. */
struct gitq_sync {
	gitq_sync_fn done;
	void *data;
	/* private */
	uint64_t need_seq;
	uint64_t need_pass; /* the file writer's pass holding its writes */
	struct gitq_sync *next;
};

typedef void (*gitq_idle_fn)(void *arg);

struct gitq {
	uv_loop_t *loop;
	struct store *store;	   /* commits wait for its files */
	const struct index *index; /* the decisions' (borrowed) */
	struct gitc *gitc;
	/* Paths not committed yet: a hash set of entries, and the list of
	 * those pending (marked since the last job took them). */
	struct gitq_path **table;
	size_t table_cap, table_used; /* used: live entries and tombstones */
	struct gitq_path **pending_list;
	size_t n_pending, pending_cap;
	unsigned delay_ms, max_batch, retry_ms;
	uint64_t wait_pass; /* the file writer's pass the next job waits for */
	uv_timer_t timer;
	bool busy;
	bool scanning;	  /* the start-up scan runs */
	size_t in_flight; /* paths inside the running job */
	uint64_t seq;	  /* jobs started */
	char *message;	  /* a git.sync's message for the next job */
	struct gitq_sync *waiters;
	gitq_idle_fn idle_cb;
	void *idle_arg;
	void (*committed)(void *ctx); /* after each commit we made */
	void *committed_ctx;
	/* When commits start or stop being deferred: the reason, or ""
	 * once a commit succeeds again (MCP sessions are told). */
	void (*deferral)(void *ctx, const char *reason);
	void *deferral_ctx;
	/* Asked before each job: true with why when commits must wait
	 * (a conflict in the memory, git having the tree). Health asks it
	 * too, so its reason is not kept in deferred. */
	bool (*defer)(void *ctx, char *why, size_t n);
	void *defer_ctx;
	char hook_deferred[160]; /* its last reason, logged once */
	char last_commit[41];
	int64_t last_commit_at;
	char deferred[160]; /* why commits wait now, "" if they do not */
	char stopped[400];  /* why commits are stopped (the index cannot be
			       brought in line), "" if they are not */
	char last_error[400];
	char foreign_locks[2048]; /* git locks found at start-up that are not
				     provably ours (left alone) */
	struct gitc_ident ident;  /* of the next job's commit ("": default) */
	bool closed;
};

/*
 * Open the repository (blocking, at start-up; state holds the commit
 * marker, see gitc_open) and clear what a crashed commit of ours left
 * (gitc_clear_stale_locks). 0 or -errno (errmsg).
 */
int gitq_init(struct gitq *q, uv_loop_t *loop, struct store *store,
	      const struct index *index, const char *workdir,
	      const struct statedir *state, unsigned delay_ms,
	      unsigned max_batch, char *errmsg, size_t errn);

/*
 * Change commit_delay_ms and commit_max_batch (a reload): they apply from
 * now on, to what is pending too; a running job is left alone.
 */
void gitq_set_timing(struct gitq *q, unsigned delay_ms, unsigned max_batch);

/*
 * The identity of the next commits: name and email (both copied), or
 * NULL/"" for the repository's user.name/user.email. The jobs get a copy.
 */
void gitq_set_ident(struct gitq *q, const char *name, const char *email);

/*
 * Start committing: scan what differs from HEAD (on the thread pool; no
 * file is hashed: git compares the index's stat data), mark it, and
 * commit it. Marks made before or meanwhile are kept.
 */
void gitq_start(struct gitq *q);

/* The file at path (relative to .vector-memory, e.g. "x-005/y-2-z-1.json")
 * changed: it belongs in the next commit. */
void gitq_mark(struct gitq *q, const char *path);

/* gitq_mark of a decision's file. */
void gitq_mark_coord(struct gitq *q, const struct coord *c);

/* Is the path's state not in HEAD yet (pending, or in the commit being
 * made)? */
bool gitq_uncommitted(const struct gitq *q, const char *path);

/* gitq_uncommitted of a decision's file. */
bool gitq_uncommitted_coord(const struct gitq *q, const struct coord *c);

/* Start a commit job now rather than after the delay. */
void gitq_commit_soon(struct gitq *q);

/* Paths not committed yet: pending, or inside the running job. */
size_t gitq_pending(const struct gitq *q);

/*
 * git.sync: w->done runs once a commit job that started after this call
 * has finished (with its batch), at once with an empty batch when nothing
 * is pending, or with StorageError when the commit is deferred by the
 * repository's state or fails. message (copied; NULL: generated) replaces
 * the next commit's subject and body.
 */
void gitq_sync(struct gitq *q, struct gitq_sync *w, const char *message);

/* Commit what is pending, then call cb (also when deferred or failing:
 * a stop must not hang; what stays pending is committed after restart). */
void gitq_flush(struct gitq *q, gitq_idle_fn cb, void *arg);

/* Release everything; waiting syncs get UnavailableError. The loop must
 * run afterwards to close the timer. */
void gitq_close(struct gitq *q);

#endif

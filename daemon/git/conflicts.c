/*
 * Conflicts as a state, and the tree yielded to git (see conflicts.h).
 *
 * Invariants: flag[slot] is set exactly for the slots in list; a
 * conflicted slot's held version is on disk once the writer has passed
 * over it (the store marks it dirty when it becomes conflicted); record
 * files change one job at a time, in the order the loop asked for them.
 */
#include "conflicts.h"

#include <errno.h>
#include <git2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errmsg.h"
#include "gitop.h"
#include "log.h"
#include "markers.h"
#include "protocol/errors.h"
#include "records.h"

#define YIELD_CHECK_MS 1000
#define HELD_REASON                                                            \
	"the version vmemd serves while the file is in a git conflict"
#define DROP_REASON                                                            \
	"a resolution of a git conflict dropped the acknowledged version"
#define REPLACED_REASON                                                        \
	"a git command replaced the acknowledged version in the tree before "  \
	"it was committed"

enum job_kind { JOB_REMOVE_HELD, JOB_DROP, JOB_REPLACED };

/* A change of record files, handed over whole to the thread pool. */
struct conflicts_job {
	uv_work_t req;
	struct conflicts *cf;
	struct conflicts_job *next;
	enum job_kind kind;
	struct coord coord;
	int64_t at_usec;
	char *held;   /* compact JSON of the dropped version (JOB_DROP) */
	char *now;    /* compact JSON of what replaced it, or NULL */
	bool written; /* its record is on disk (worker) */
	int rc;
	char errmsg[256];
};

static int64_t now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ".vector-memory/x-007/y-2-z-2.json" */
static void vm_path(const struct coord *c, char *buf, size_t n)
{
	char rel[64];

	if (coord_path(c, rel, sizeof(rel)) < 0)
		snprintf(rel, sizeof(rel), "?");
	snprintf(buf, n, ".vector-memory/%s", rel);
}

/* The slot of a valid coordinate, as the index numbers them. */
static size_t slot_of(const struct conflicts *cf, const struct coord *c)
{
	(void)cf;
	return index_slot(NULL, c);
}

static void yield_timer_cb(uv_timer_t *t);

int conflicts_init(struct conflicts *cf, uv_loop_t *loop, size_t n_slots,
		   int max_x, const struct repo *r)
{
	memset(cf, 0, sizeof(*cf));
	cf->loop = loop;
	cf->n_slots = n_slots;
	cf->max_x = max_x;
	cf->root = strdup(r->root);
	cf->gitdir = strdup(r->gitdir);
	cf->statedir = strdup(r->state.path ? r->state.path : "");
	cf->state = &r->state;
	cf->file_mode = r->file_mode;
	cf->dir_mode = r->dir_mode;
	cf->flag = calloc(n_slots, 1);
	cf->z1 = calloc(n_slots, 1);
	if (!cf->root || !cf->gitdir || !cf->statedir || !cf->flag || !cf->z1) {
		conflicts_done(cf);
		return -ENOMEM;
	}
	uv_timer_init(loop, &cf->yield_timer);
	cf->yield_timer.data = cf;
	return 0;
}

void conflicts_close(struct conflicts *cf)
{
	if (cf->closed)
		return;
	cf->closed = true;
	if (cf->loop)
		uv_close((uv_handle_t *)&cf->yield_timer, NULL);
}

static void job_free(struct conflicts_job *j)
{
	free(j->held);
	free(j->now);
	free(j);
}

void conflicts_done(struct conflicts *cf)
{
	while (cf->jobs) {
		struct conflicts_job *j = cf->jobs;

		cf->jobs = j->next;
		job_free(j);
	}
	free(cf->root);
	free(cf->gitdir);
	free(cf->statedir);
	free(cf->flag);
	free(cf->z1);
	free(cf->list);
	cf->root = cf->gitdir = cf->statedir = NULL;
	cf->flag = cf->z1 = NULL;
	cf->list = NULL;
	cf->n = cf->cap = 0;
}

const struct conflict *conflicts_get(const struct conflicts *cf, size_t slot)
{
	if (!cf || !cf->flag[slot])
		return NULL;
	for (size_t i = 0; i < cf->n; i++)
		if (cf->list[i].slot == slot)
			return &cf->list[i];
	return NULL;
}

int conflicts_refuse(const struct conflicts *cf, size_t slot,
		     const struct coord *c, bool occupied, bool is_delete,
		     char *msg, size_t n)
{
	const struct conflict *k = conflicts_get(cf, slot);
	char path[96];

	if (k) {
		vm_path(c, path, sizeof(path));
		snprintf(msg, n,
			 "(%d, %d, %d) is in a git conflict (%s, %s): resolve "
			 "it, then write again",
			 c->x, c->y, c->z, path, k->reason);
		return RPC_CONFLICT;
	}
	if (cf && c->z == 1 && !occupied && !is_delete && cf->z1[slot]) {
		snprintf(msg, n,
			 "layer z=1 is write-once: (%d, %d, %d) held a "
			 "decision acknowledged earlier, which a git command "
			 "took out of the tree",
			 c->x, c->y, c->z);
		return RPC_IMMUTABLE_LAYER;
	}
	return 0;
}

void conflicts_acknowledged(struct conflicts *cf, size_t slot)
{
	if (cf && index_coord(NULL, slot).z == 1)
		cf->z1[slot] = 1;
}

bool conflicts_yield_check(const struct conflicts *cf, char *why, size_t n)
{
	long pid = 0;

	if (gitop_busy(cf->gitdir, why, n))
		return true;
	/* One that has made no state file or lock yet (gitop.h). */
	if (!gitop_git_in_tree(cf->root, 0, gitop_tree_changers, &pid))
		return false;
	snprintf(why, n, "a git command changing the tree runs (pid %ld)", pid);
	return true;
}

bool conflicts_interrupt(void *cf, bool thorough)
{
	const struct conflicts *c = cf;
	char why[CONFLICTS_YIELD_LEN];

	if (!c)
		return false;
	return thorough ? conflicts_yield_check(c, why, sizeof(why))
			: gitop_busy(c->gitdir, why, sizeof(why));
}

int conflicts_unmerged(const struct conflicts *cf, struct unmerged_set *out,
		       char *errmsg, size_t errn)
{
	return unmerged_list(cf->root, cf->gitdir, cf->max_x, out, errmsg,
			     errn);
}

int conflicts_hold(const struct conflicts *cf, const struct coord *c,
		   const char *json, char *errmsg, size_t errn)
{
	char name[CONFLICT_NAME_MAX], *text;
	size_t len = 0;
	int rc;

	if (conflict_record_name(CONFLICT_KIND_HELD, c, 0, name, sizeof(name)) <
	    0)
		return -EINVAL;
	text = conflict_record_text(CONFLICT_KIND_HELD, c, now_usec(),
				    HELD_REASON, json, NULL, &len);
	if (!text) {
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	rc = records_write(cf->state, name, text, len, errmsg, errn);
	free(text);
	return rc;
}

/* ---- yielding ---- */

void conflicts_fail(struct conflicts *cf, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cf->last_error, sizeof(cf->last_error), fmt, ap);
	va_end(ap);
	log_err("%s", cf->last_error);
}

void conflicts_set_yield(struct conflicts *cf, const char *why)
{
	if (cf->closed)
		return;
	if (!why || !*why) {
		if (!cf->yield[0])
			return;
		log_info("git is done with the working tree (%s): writing "
			 "decision files again",
			 cf->yield);
		cf->yield[0] = '\0';
		uv_timer_stop(&cf->yield_timer);
		if (cf->resumed)
			cf->resumed(cf->resumed_ctx);
		return;
	}
	if (strcmp(cf->yield, why) != 0)
		log_info("leaving the working tree to git (%s): acknowledged "
			 "writes wait in the log",
			 why);
	snprintf(cf->yield, sizeof(cf->yield), "%s", why);
	if (!uv_is_active((uv_handle_t *)&cf->yield_timer))
		uv_timer_start(&cf->yield_timer, yield_timer_cb, YIELD_CHECK_MS,
			       YIELD_CHECK_MS);
}

void conflicts_check_yield(struct conflicts *cf)
{
	char why[CONFLICTS_YIELD_LEN];

	if (cf->closed)
		return;
	if (!conflicts_yield_check(cf, why, sizeof(why)))
		why[0] = '\0';
	conflicts_set_yield(cf, why);
}

static void yield_timer_cb(uv_timer_t *t)
{
	conflicts_check_yield(t->data);
}

/* ---- the state ---- */

static struct conflict *add(struct conflicts *cf, const struct coord *c)
{
	struct conflict *k;

	if (cf->n == cf->cap) {
		size_t cap = cf->cap ? cf->cap * 2 : 8;

		k = realloc(cf->list, cap * sizeof(*k));
		if (!k)
			return NULL;
		cf->list = k;
		cf->cap = cap;
	}
	k = &cf->list[cf->n++];
	memset(k, 0, sizeof(*k));
	k->coord = *c;
	k->slot = slot_of(cf, c);
	k->since_usec = now_usec();
	cf->flag[k->slot] = 1;
	return k;
}

static void remove_at(struct conflicts *cf, size_t i)
{
	cf->flag[cf->list[i].slot] = 0;
	cf->list[i] = cf->list[--cf->n];
}

/* Does the scan (u, rep) show c? Its stages and reason when it does. */
static bool scan_shows(const struct unmerged_set *u,
		       const struct vmdir_load_report *rep,
		       const struct coord *c, const struct unmerged_entry **ue,
		       const char **reason)
{
	*ue = unmerged_find(u, c);
	if (*ue) {
		*reason = unmerged_describe((*ue)->stages);
		return true;
	}
	for (size_t i = 0; rep && i < rep->n_conflicted; i++) {
		if (coord_cmp(&rep->conflicted[i].coord, c) == 0) {
			*reason = rep->conflicted[i].reason;
			return true;
		}
	}
	return false;
}

static void auto_resolve(struct conflicts *cf, const struct conflict *k);

/* Take a scan's view of one conflicted coordinate. */
static void note(struct conflicts *cf, const struct coord *c,
		 const struct unmerged_entry *ue, const char *reason,
		 size_t *fresh, size_t *n_fresh)
{
	struct conflict *k =
		(struct conflict *)conflicts_get(cf, slot_of(cf, c));
	char path[96];

	if (!k) {
		k = add(cf, c);
		if (!k) {
			log_err("out of memory: cannot track the conflict at "
				"(%d, %d, %d)",
				c->x, c->y, c->z);
			return;
		}
		vm_path(c, path, sizeof(path));
		log_warn("conflict in %s (%s): writes there are refused and "
			 "its acknowledged version is kept until it is "
			 "resolved",
			 path, reason);
		if (cf->appeared)
			cf->appeared(cf->appeared_ctx, path, reason);
		if (fresh)
			fresh[(*n_fresh)++] = k->slot;
	}
	snprintf(k->reason, sizeof(k->reason), "%s", reason);
	k->ended = false;
	k->stages = ue ? ue->stages : 0;
	for (int s = 0; s < 4; s++)
		snprintf(k->oid[s], sizeof(k->oid[s]), "%s",
			 ue ? ue->oid[s] : "");
	if (fresh && ((k->stages & 0xe) == 0x6 || (k->stages & 0xe) == 0xa))
		auto_resolve(cf, k);
}

bool conflicts_update(struct conflicts *cf, const struct unmerged_set *u,
		      const struct vmdir_load_report *rep, bool apply,
		      size_t *fresh, size_t *n_fresh, size_t *ended,
		      size_t *n_ended)
{
	const struct unmerged_entry *ue;
	const char *reason;
	bool any_ended = false;
	char path[96];

	*n_fresh = 0;
	*n_ended = 0;
	for (size_t i = 0; u && i < u->n; i++)
		note(cf, &u->e[i].coord, &u->e[i],
		     unmerged_describe(u->e[i].stages), fresh, n_fresh);
	for (size_t i = 0; rep && i < rep->n_conflicted; i++)
		if (!unmerged_find(u, &rep->conflicted[i].coord))
			note(cf, &rep->conflicted[i].coord, NULL,
			     rep->conflicted[i].reason, fresh, n_fresh);
	for (size_t i = 0; i < cf->n;) {
		struct conflict *k = &cf->list[i];

		if (scan_shows(u, rep, &k->coord, &ue, &reason)) {
			i++;
			continue;
		}
		any_ended = true;
		if (!apply) {
			if (!k->ended) {
				vm_path(&k->coord, path, sizeof(path));
				log_info(
					"the conflict in %s is resolved in "
					"git; the daemon takes the file at its "
					"next reload",
					path);
			}
			k->ended = true;
			i++;
			continue;
		}
		ended[(*n_ended)++] = k->slot;
		remove_at(cf, i);
	}
	return any_ended;
}

void conflicts_markers_found(struct conflicts *cf, size_t slot)
{
	struct coord c = index_coord(NULL, slot);

	note(cf, &c, NULL, "conflict markers", NULL, NULL);
}

bool conflicts_defer(struct conflicts *cf, char *why, size_t n)
{
	char path[96];

	if (cf->n) {
		vm_path(&cf->list[0].coord, path, sizeof(path));
		if (cf->n == 1)
			snprintf(why, n, "conflict in %s", path);
		else
			snprintf(why, n, "conflict in %s and %zu more", path,
				 cf->n - 1);
		return true;
	}
	if (cf->yield[0])
		conflicts_check_yield(cf);
	if (cf->yield[0]) {
		snprintf(why, n, "%s", cf->yield);
		return true;
	}
	return false;
}

/* ---- record jobs ---- */

static void job_work_cb(uv_work_t *req)
{
	struct conflicts_job *j = req->data;
	char name[CONFLICT_NAME_MAX], *text;
	size_t len = 0;

	const char *kind = j->kind == JOB_REPLACED ? CONFLICT_KIND_REPLACED
						   : CONFLICT_KIND_RESOLVE;

	j->rc = 0;
	if (j->kind != JOB_REMOVE_HELD) {
		text = conflict_record_text(
			kind, &j->coord, j->at_usec,
			j->kind == JOB_REPLACED ? REPLACED_REASON : DROP_REASON,
			j->now, j->held, &len);
		if (!text || conflict_record_name(kind, &j->coord, j->at_usec,
						  name, sizeof(name)) < 0) {
			free(text);
			j->rc = -ENOMEM;
			snprintf(j->errmsg, sizeof(j->errmsg), "out of memory");
			return;
		}
		j->rc = records_write(j->cf->state, name, text, len, j->errmsg,
				      sizeof(j->errmsg));
		free(text);
		j->written = j->rc == 0;
		if (j->rc < 0 || j->kind == JOB_REPLACED)
			return; /* the held record stays: nothing is lost */
	}
	conflict_record_name(CONFLICT_KIND_HELD, &j->coord, 0, name,
			     sizeof(name));
	j->rc = records_remove(j->cf->state, name, j->errmsg,
			       sizeof(j->errmsg));
}

static void job_next(struct conflicts *cf);
static void drop_note(struct conflicts *cf, const struct coord *c,
		      const char *held, int64_t at, const char *record);

/*
 * A version that was acknowledged and is not served any more is logged
 * and listed in health once its record is on disk (so that the record
 * health names can be read), or said lost when it could not be written.
 */
static void announce(struct conflicts *cf, const struct conflicts_job *j)
{
	char path[96], name[CONFLICT_NAME_MAX];
	bool drop = j->kind == JOB_DROP;

	if (j->kind == JOB_REMOVE_HELD)
		return;
	vm_path(&j->coord, path, sizeof(path));
	conflict_record_name(drop ? CONFLICT_KIND_RESOLVE
				  : CONFLICT_KIND_REPLACED,
			     &j->coord, j->at_usec, name, sizeof(name));
	if (!j->written) {
		log_err("%s: the acknowledged version %s could not be kept in "
			"a record (%s)%s",
			path,
			drop ? "a resolution dropped"
			     : "a git command replaced",
			j->errmsg, drop ? "; its held record stays" : "");
		return;
	}
	drop_note(cf, &j->coord, j->held, j->at_usec, name);
	if (drop)
		log_warn("the conflict in %s was resolved without the "
			 "acknowledged version (%s); it is kept in "
			 "%s/%s/%s",
			 path, j->now ? "another version won" : "the file went",
			 cf->statedir, CONFLICT_DIRNAME, name);
	else
		log_warn("%s: a git command %s the acknowledged version "
			 "before it was committed; it is kept in %s/%s/%s",
			 path, j->now ? "replaced" : "removed", cf->statedir,
			 CONFLICT_DIRNAME, name);
}

static void job_after_cb(uv_work_t *req, int status)
{
	struct conflicts_job *j = req->data;
	struct conflicts *cf = j->cf;

	cf->job_running = false;
	if (status < 0 && j->rc == 0) {
		j->rc = status;
		snprintf(j->errmsg, sizeof(j->errmsg), "cancelled");
	}
	if (j->rc < 0) {
		cf->records_failed++;
		conflicts_fail(cf, "conflict records: %s", j->errmsg);
	}
	announce(cf, j);
	job_free(j);
	job_next(cf);
}

static void job_next(struct conflicts *cf)
{
	struct conflicts_job *j;

	/* (after conflicts_close too: the loop's last run writes the
	 * records still queued) */
	while (!cf->job_running && cf->jobs) {
		j = cf->jobs;
		cf->jobs = j->next;
		if (!cf->jobs)
			cf->jobs_tail = NULL;
		/* A coordinate conflicted again has a new held version on
		 * its way: keep the file. */
		if (j->kind == JOB_REMOVE_HELD &&
		    cf->flag[slot_of(cf, &j->coord)]) {
			job_free(j);
			continue;
		}
		j->req.data = j;
		if (uv_queue_work(cf->loop, &j->req, job_work_cb,
				  job_after_cb) < 0) {
			log_err("cannot start a conflict record job");
			job_free(j);
			continue;
		}
		cf->job_running = true;
	}
}

static void job_queue(struct conflicts *cf, struct conflicts_job *j)
{
	j->cf = cf;
	j->next = NULL;
	if (cf->jobs_tail)
		cf->jobs_tail->next = j;
	else
		cf->jobs = j;
	cf->jobs_tail = j;
	job_next(cf);
}

/* Remember a drop for health: the version, timestamp and agent of the
 * held decision. */
static void drop_note(struct conflicts *cf, const struct coord *c,
		      const char *held, int64_t at, const char *record)
{
	struct conflict_drop *dr =
		&cf->drops[cf->drops_seen % CONFLICTS_DROPS_MAX];
	struct decision d;
	char msg[VMEM_ERRMSG_LEN];

	memset(dr, 0, sizeof(*dr));
	dr->coord = *c;
	dr->at_usec = at;
	snprintf(dr->record, sizeof(dr->record), "%s", record);
	if (decision_parse(held, strlen(held), cf->max_x, &d, msg) == 0) {
		dr->version = d.version;
		snprintf(dr->timestamp, sizeof(dr->timestamp), "%s",
			 d.timestamp);
		snprintf(dr->agent_id, sizeof(dr->agent_id), "%s", d.agent_id);
		decision_done(&d);
	}
	cf->drops_seen++;
	if (cf->n_drops < CONFLICTS_DROPS_MAX)
		cf->n_drops++;
}

void conflicts_ended(struct conflicts *cf, const struct coord *c,
		     const char *held_json, const struct record *now)
{
	struct conflicts_job *j = calloc(1, sizeof(*j));
	bool same = held_json ? now && strcmp(held_json, now->json) == 0
			      : now == NULL;
	char path[96];

	vm_path(c, path, sizeof(path));
	if (!j) {
		log_err("out of memory: the held record of %s stays", path);
		return;
	}
	j->coord = *c;
	j->at_usec = now_usec();
	j->kind = same || !held_json ? JOB_REMOVE_HELD : JOB_DROP;
	if (j->kind == JOB_DROP) {
		j->held = strdup(held_json);
		j->now = now ? strdup(now->json) : NULL;
		if (!j->held || (now && !j->now)) {
			log_err("out of memory: the held record of %s stays",
				path);
			job_free(j);
			return;
		}
		/* logged and listed once its record is written */
	} else {
		log_info("the conflict in %s is over (%s)", path,
			 same ? "the acknowledged version stays"
			      : "a decision arrived where none was");
	}
	job_queue(cf, j);
}

void conflicts_replaced(struct conflicts *cf, const struct coord *c,
			const char *held_json, const struct record *now)
{
	struct conflicts_job *j = calloc(1, sizeof(*j));
	char path[96];

	vm_path(c, path, sizeof(path));
	if (j) {
		j->coord = *c;
		j->at_usec = now_usec();
		j->kind = JOB_REPLACED;
		j->held = strdup(held_json);
		j->now = now ? strdup(now->json) : NULL;
	}
	if (!j || !j->held || (now && !j->now)) {
		log_err("out of memory: the acknowledged version of %s that a "
			"git command replaced is not kept",
			path);
		if (j)
			job_free(j);
		return;
	}
	/* logged and listed once its record is written */
	job_queue(cf, j);
}

bool conflicts_in_head(const struct conflicts *cf, const char *json)
{
	git_repository *repo = NULL;
	git_object *obj = NULL;
	char msg[VMEM_ERRMSG_LEN], rel[64], spec[96], *file = NULL;
	struct decision d;
	git_oid id;
	size_t len = 0;
	bool same = false;

	if (decision_parse(json, strlen(json), cf->max_x, &d, msg) != 0)
		return false;
	coord_path(&d.coord, rel, sizeof(rel));
	decision_done(&d);
	snprintf(spec, sizeof(spec), "HEAD:.vector-memory/%s", rel);
	file = decision_file_from_compact(json, strlen(json), &len);
	if (file && git_odb_hash(&id, file, len, GIT_OBJECT_BLOB) == 0 &&
	    git_repository_open_ext(&repo, cf->root,
				    GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) == 0 &&
	    git_revparse_single(&obj, repo, spec) == 0)
		same = git_oid_equal(&id, git_object_id(obj));
	git_object_free(obj);
	git_repository_free(repo);
	free(file);
	return same;
}

void conflicts_z1_restored(struct conflicts *cf, const struct coord *c)
{
	char path[96];

	(void)cf;
	vm_path(c, path, sizeof(path));
	log_warn("%s is write-once (z=1) and HEAD still holds its acknowledged "
		 "version, but a git command changed or removed its file: "
		 "the file is written again",
		 path);
}

/* ---- start-up ---- */

/* Git's "ours" side of a conflict: the stage-2 blob, or the markers'
 * first side of the file. NULL when there is none or it is not a
 * decision at c (then *why says so). */
static struct record *ours_side(struct conflicts *cf, const struct conflict *k,
				char *why, size_t whyn)
{
	char msg[VMEM_ERRMSG_LEN], rel[64], path[4200];
	char *text = NULL, *side = NULL;
	struct record *r = NULL;
	struct decision d;
	size_t len = 0, slen = 0;
	FILE *f;

	why[0] = '\0';
	if (k->stages) {
		if (!(k->stages & 4)) {
			snprintf(why, whyn, "ours deleted it");
			return NULL;
		}
		if (unmerged_blob(cf->root, cf->gitdir, k->oid[2], 1 << 20,
				  &text, &len, why, whyn) < 0)
			return NULL;
		side = text;
		slen = len;
	} else {
		coord_path(&k->coord, rel, sizeof(rel));
		snprintf(path, sizeof(path), "%s/.vector-memory/%s", cf->root,
			 rel);
		f = fopen(path, "rbe");
		if (f) {
			text = malloc((1 << 20) + 1);
			if (text)
				len = fread(text, 1, 1 << 20, f);
			fclose(f);
		}
		if (!text) {
			snprintf(why, whyn, "cannot read the file");
			return NULL;
		}
		side = markers_side(text, len, MARKERS_OURS, &slen);
		if (!side) {
			snprintf(why, whyn, "malformed conflict markers");
			goto out;
		}
	}
	if (decision_parse(side, slen, cf->max_x, &d, msg) != 0) {
		snprintf(why, whyn, "ours is not a decision: %s", msg);
		goto out;
	}
	if (coord_cmp(&d.coord, &k->coord) == 0)
		r = record_new(&d);
	else
		snprintf(why, whyn, "ours is a decision of another coordinate");
	decision_done(&d);
out:
	if (side != text)
		free(side);
	free(text);
	return r;
}

/* The kept version of a held record file, as a record (NULL: none);
 * *found false when there is no held record. */
static int held_record(struct conflicts *cf, const struct coord *c,
		       const char *name, struct record **out, bool *found,
		       char *errmsg, size_t errn)
{
	char msg[VMEM_ERRMSG_LEN], *text = NULL;
	json_t *rec = NULL, *kept;
	struct coord rc_coord;
	struct decision d;
	size_t len = 0;
	int rc;

	*out = NULL;
	*found = false;
	rc = records_read(cf->state, name, &text, &len, errmsg, errn);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	rec = conflict_record_parse(text, len, cf->max_x, msg);
	free(text);
	if (rec && (coord_from_json(json_object_get(rec, "coordinate"),
				    cf->max_x, &rc_coord, msg) != 0 ||
		    coord_cmp(c, &rc_coord) != 0)) {
		snprintf(msg, sizeof(msg), "another coordinate");
		json_decref(rec);
		rec = NULL;
	}
	if (!rec) {
		errmsg_set(errmsg, errn, "%s/%s/%s is not a held record: %s",
			   cf->statedir, CONFLICT_DIRNAME, name, msg);
		return -EINVAL;
	}
	*found = true;
	kept = json_object_get(rec, "kept");
	if (json_is_object(kept)) {
		if (decision_from_json(kept, cf->max_x, &d, msg) == 0) {
			*out = record_new(&d);
			decision_done(&d);
			if (!*out)
				rc = -ENOMEM;
		}
	}
	json_decref(rec);
	return rc;
}

struct stale {
	struct conflicts *cf;
	struct index *ix;
};

/* A held record: if its coordinate is no longer conflicted, the conflict
 * ended while no daemon ran. */
static int settle_one(void *ctx, const char *name)
{
	struct stale *st = ctx;
	struct conflicts *cf = st->cf;
	char errmsg[320];
	struct record *held = NULL;
	struct coord c;
	bool found;

	if (sscanf(name, "held-x-%d-y-%d-z-%d.json", &c.x, &c.y, &c.z) != 3 ||
	    !coord_valid(&c, cf->max_x) || cf->flag[slot_of(cf, &c)])
		return 0;
	if (held_record(cf, &c, name, &held, &found, errmsg, sizeof(errmsg)) <
	    0) {
		log_err("%s (left as it is)", errmsg);
		return 0;
	}
	conflicts_ended(cf, &c, held ? held->json : NULL,
			index_get(st->ix, &c));
	record_free(held);
	return 0;
}

int conflicts_start(struct conflicts *cf, struct index *ix,
		    const struct unmerged_set *u,
		    const struct vmdir_load_report *rep, char *errmsg,
		    size_t errn)
{
	size_t *fresh, *ended, n_fresh = 0, n_ended = 0;
	char why[200], name[CONFLICT_NAME_MAX], path[96];
	int rc = 0;

	cf->ix = ix;
	fresh = calloc(cf->n_slots, sizeof(*fresh));
	ended = calloc(cf->n_slots, sizeof(*ended));
	if (!fresh || !ended) {
		free(fresh);
		free(ended);
		errmsg_set(errmsg, errn, "out of memory");
		return -ENOMEM;
	}
	conflicts_update(cf, u, rep, true, fresh, &n_fresh, ended, &n_ended);
	for (size_t i = 0; i < cf->n; i++) {
		struct conflict *k = &cf->list[i];
		struct record *r = NULL;
		bool found = false;

		vm_path(&k->coord, path, sizeof(path));
		conflict_record_name(CONFLICT_KIND_HELD, &k->coord, 0, name,
				     sizeof(name));
		rc = held_record(cf, &k->coord, name, &r, &found, errmsg, errn);
		if (rc < 0)
			goto out;
		if (index_get(ix, &k->coord)) {
			/* the log's replay: newer than any held record, and
			 * already held by the replay's writer */
			record_free(r);
			continue;
		}
		if (!found) {
			r = ours_side(cf, k, why, sizeof(why));
			if (!r && why[0])
				log_warn("%s is in conflict and no version of "
					 "it was acknowledged here: serving "
					 "none (%s)",
					 path, why);
			rc = conflicts_hold(cf, &k->coord, r ? r->json : NULL,
					    errmsg, errn);
			if (rc < 0) {
				record_free(r);
				goto out;
			}
		}
		if (r)
			index_put(ix, r);
	}
	rc = records_scan(cf->state, "held-", settle_one,
			  &(struct stale){cf, ix}, errmsg, errn);
out:
	free(fresh);
	free(ended);
	return rc;
}

/* ---- resolution ---- */

/* A resolution, handed over whole to the thread pool. */
struct resolve_job {
	uv_work_t req;
	struct conflicts *cf; /* only its fixed paths in the worker */
	struct conflict k;    /* a copy */
	enum conflicts_keep keep;
	bool automatic;
	char *held;	      /* the acknowledged version, or NULL */
	char *kept, *dropped; /* compact JSON (worker) */
	conflicts_resolved_fn cb;
	void *arg;
	int rc, code;
	char msg[320];
};

static void resolve_job_free(struct resolve_job *j)
{
	free(j->held);
	free(j->kept);
	free(j->dropped);
	free(j);
}

/* The text of the side to keep (NULL with 0: the side has no file). */
static int side_text(struct resolve_job *j, char **text, size_t *len)
{
	struct conflicts *cf = j->cf;
	int st = j->keep == CONFLICTS_KEEP_OURS ? 2 : 3;
	char rel[64], path[4200], *file = NULL;
	size_t flen = 0;
	FILE *f;

	*text = NULL;
	*len = 0;
	if (j->keep == CONFLICTS_KEEP_ACKNOWLEDGED) {
		if (!j->held)
			return 0;
		*text = decision_file_from_compact(j->held, strlen(j->held),
						   len);
		return *text ? 0 : -ENOMEM;
	}
	if (j->k.stages) {
		if (!(j->k.stages & (1u << st)))
			return 0;
		return unmerged_blob(cf->root, cf->gitdir, j->k.oid[st],
				     1 << 20, text, len, j->msg,
				     sizeof(j->msg));
	}
	coord_path(&j->k.coord, rel, sizeof(rel));
	snprintf(path, sizeof(path), "%s/.vector-memory/%s", cf->root, rel);
	f = fopen(path, "rbe");
	if (f) {
		file = malloc((1 << 20) + 1);
		if (file)
			flen = fread(file, 1, 1 << 20, f);
		fclose(f);
	}
	if (!file) {
		snprintf(j->msg, sizeof(j->msg), "cannot read %.200s", path);
		return -EIO;
	}
	*text = markers_side(file, flen,
			     st == 2 ? MARKERS_OURS : MARKERS_THEIRS, len);
	free(file);
	if (!*text) {
		snprintf(j->msg, sizeof(j->msg),
			 "the conflict markers of %.200s are not well formed",
			 path);
		return -EINVAL;
	}
	return 0;
}

static void resolve_work_cb(uv_work_t *req)
{
	struct resolve_job *j = req->data;
	struct conflicts *cf = j->cf;
	char rel[64], path[96], emsg[VMEM_ERRMSG_LEN], *text = NULL;
	struct vmdir_op op = {.coord = j->k.coord};
	struct vmdir vd = {0};
	struct decision d;
	size_t len = 0;

	j->code = RPC_STORAGE;
	if (j->automatic && !unmerged_driver_registered(cf->root, cf->gitdir)) {
		j->rc = 1;
		return;
	}
	j->rc = side_text(j, &text, &len);
	if (j->rc < 0)
		goto out;
	if (text) {
		int prc;

		memset(&d, 0, sizeof(d));
		emsg[0] = '\0';
		prc = decision_parse(text, len, cf->max_x, &d, emsg);
		if (prc != 0 || coord_cmp(&d.coord, &j->k.coord) != 0) {
			if (prc == 0)
				snprintf(emsg, sizeof(emsg),
					 "a decision of another coordinate");
			decision_done(&d);
			snprintf(j->msg, sizeof(j->msg),
				 "the version to keep is not a decision of "
				 "(%d, %d, %d): %s",
				 j->k.coord.x, j->k.coord.y, j->k.coord.z,
				 emsg);
			j->code = RPC_INVALID_PARAMS;
			j->rc = -EINVAL;
			goto out;
		}
		j->kept = decision_dump_compact(&d, &len);
		decision_done(&d);
		if (!j->kept) {
			j->rc = -ENOMEM;
			goto out;
		}
		op.text = text;
		op.len = strlen(text);
	}
	if (j->held && (!j->kept || strcmp(j->held, j->kept) != 0)) {
		j->dropped = strdup(j->held);
		if (!j->dropped) {
			j->rc = -ENOMEM;
			goto out;
		}
	}
	if (j->automatic) {
		/* the merge driver's rule, reported as the driver does */
		char name[CONFLICT_NAME_MAX], *rec;
		int64_t at = now_usec();
		size_t rlen = 0;

		rec = conflict_record_text(
			CONFLICT_KIND_DRIVER, &j->k.coord, at,
			"deleted on one side and modified on the other: the "
			"modification is kept",
			j->kept, NULL, &rlen);
		if (!rec ||
		    conflict_record_name(CONFLICT_KIND_DRIVER, &j->k.coord, at,
					 name, sizeof(name)) < 0) {
			free(rec);
			j->rc = -ENOMEM;
			goto out;
		}
		j->rc = records_write(cf->state, name, rec, rlen, j->msg,
				      sizeof(j->msg));
		free(rec);
		if (j->rc < 0)
			goto out;
	}
	j->rc = vmdir_init(&vd, cf->root, cf->state, cf->max_x);
	vd.file_mode = cf->file_mode;
	vd.dir_mode = cf->dir_mode;
	if (j->rc == 0)
		j->rc = vmdir_apply(&vd, &op, 1, true, j->msg, sizeof(j->msg));
	vmdir_done(&vd);
	if (j->rc < 0 || !j->k.stages)
		goto out;
	coord_path(&j->k.coord, rel, sizeof(rel));
	snprintf(path, sizeof(path), ".vector-memory/%s", rel);
	j->rc = unmerged_stage(cf->root, cf->gitdir, path, text != NULL, j->msg,
			       sizeof(j->msg));
	if (j->rc == -EBUSY)
		j->code = RPC_CONCURRENCY;
out:
	if (j->rc == -ENOMEM)
		snprintf(j->msg, sizeof(j->msg), "out of memory");
	free(text);
}

static void resolve_after_cb(uv_work_t *req, int status)
{
	struct resolve_job *j = req->data;

	j->cf->resolving--;
	if (status < 0 && j->rc == 0) {
		j->rc = status;
		snprintf(j->msg, sizeof(j->msg), "cancelled");
	}
	j->cb(j->arg, j->rc, j->code, j->msg, j->kept, j->dropped);
	resolve_job_free(j);
}

int conflicts_resolve(struct conflicts *cf, size_t slot,
		      enum conflicts_keep keep, const char *held_json,
		      bool automatic, conflicts_resolved_fn cb, void *arg)
{
	const struct conflict *k = conflicts_get(cf, slot);
	struct resolve_job *j;

	if (!k)
		return -ENOENT;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->cf = cf;
	j->k = *k;
	j->keep = keep;
	j->automatic = automatic;
	j->cb = cb;
	j->arg = arg;
	j->req.data = j;
	if (held_json) {
		j->held = strdup(held_json);
		if (!j->held) {
			resolve_job_free(j);
			return -ENOMEM;
		}
	}
	if (uv_queue_work(cf->loop, &j->req, resolve_work_cb,
			  resolve_after_cb) < 0) {
		resolve_job_free(j);
		return -EAGAIN;
	}
	cf->resolving++;
	return 0;
}

/* The end of an automatic resolution: say what happened, look again. */
static void auto_done(void *arg, int rc, int code, const char *msg,
		      const char *kept, const char *dropped)
{
	struct conflicts *cf = arg;

	(void)code;
	(void)kept;
	(void)dropped;
	if (rc == 1)
		log_info("a decision file deleted on one side and modified on "
			 "the other is left to you: the merge driver is not "
			 "registered (vmem init)");
	else if (rc < 0)
		log_warn("keeping the modification of a file deleted on one "
			 "side failed: %s (left to you)",
			 msg);
	else
		log_notice("kept the modification of a decision file deleted "
			   "on the other side (the merge driver's rule; "
			   "vmem conflicts lists it)");
	if (rc == 0 && cf->touched)
		cf->touched(cf->touched_ctx);
}

/* The merge driver's rule for a file deleted on one side and modified on
 * the other: keep the modification. */
static void auto_resolve(struct conflicts *cf, const struct conflict *k)
{
	const struct record *held = cf->ix ? cf->ix->slots[k->slot] : NULL;
	enum conflicts_keep keep =
		k->stages & 4 ? CONFLICTS_KEEP_OURS : CONFLICTS_KEEP_THEIRS;

	if (conflicts_resolve(cf, k->slot, keep, held ? held->json : NULL, true,
			      auto_done, cf) < 0)
		log_err("cannot start keeping the modification of a file "
			"deleted on one side");
}

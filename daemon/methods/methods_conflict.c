/*
 * conflict.* methods: the memory's git conflicts (conflict.list, with the
 * conflict records kept on disk) and their resolution (conflict.resolve),
 * plus what server.health says about them. Answers are bounded: at most
 * `limit` conflicts and records, each version summarised (version,
 * timestamp, agent, the start of its content); the record files hold the
 * whole versions.
 */
#include "methods.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dispatch.h"
#include "log.h"
#include "params.h"
#include "protocol/errors.h"
#include "records.h"

#define LIST_DEFAULT 100
#define LIST_MAX     RECORDS_LIST_MAX
#define PREVIEW_MAX  120 /* bytes of content in a summary */

static json_t *when_json(int64_t usec)
{
	char when[VMEM_TIMESTAMP_LEN + 1];

	timestamp_format(usec, when);
	return json_string(when);
}

/* {version, timestamp, agent_id, preview} of a decision object (or
 * null): its first line, at most PREVIEW_MAX bytes, cut at a character. */
static json_t *summary_json(const json_t *dec)
{
	const char *content;
	size_t n;

	if (!json_is_object(dec))
		return json_null();
	content = json_string_value(json_object_get(dec, "content"));
	content = content ? content : "";
	n = strcspn(content, "\n");
	if (n > PREVIEW_MAX) {
		n = PREVIEW_MAX;
		while (n > 0 && ((unsigned char)content[n] & 0xc0) == 0x80)
			n--;
	}
	return json_pack("{s:O,s:O,s:O,s:s%}", "version",
			 json_object_get(dec, "version"), "timestamp",
			 json_object_get(dec, "timestamp"), "agent_id",
			 json_object_get(dec, "agent_id"), "preview", content,
			 n);
}

static json_t *record_summary(const struct record *r)
{
	json_t *dec, *s;

	if (!r)
		return json_null();
	dec = json_loadb(r->json, r->json_len, 0, NULL);
	s = summary_json(dec);
	json_decref(dec);
	return s;
}

json_t *conflicts_json(const struct daemon *d, size_t limit)
{
	const struct conflicts *cf = &d->conflicts;
	json_t *list = json_array();
	char rel[64], path[96];

	for (size_t i = 0; list && i < cf->n && i < limit; i++) {
		const struct conflict *k = &cf->list[i];

		coord_path(&k->coord, rel, sizeof(rel));
		snprintf(path, sizeof(path), ".vector-memory/%s", rel);
		json_array_append_new(
			list,
			json_pack("{s:s,s:o,s:s,s:o,s:b,s:o}", "path", path,
				  "coordinate", coord_to_json(&k->coord),
				  "reason", k->reason, "since",
				  when_json(k->since_usec), "resolved_in_git",
				  k->ended, "acknowledged",
				  record_summary(
					  d->decisions.index.slots[k->slot])));
	}
	return list;
}

json_t *drops_json(const struct daemon *d)
{
	const struct conflicts *cf = &d->conflicts;
	json_t *list = json_array();
	char rel[64], path[96], file[4300];

	/* newest first: the ring's last entry is drops_seen - 1 */
	for (size_t i = 0; list && i < cf->n_drops; i++) {
		const struct conflict_drop *dr =
			&cf->drops[(cf->drops_seen - 1 - i) %
				   CONFLICTS_DROPS_MAX];

		coord_path(&dr->coord, rel, sizeof(rel));
		snprintf(path, sizeof(path), ".vector-memory/%s", rel);
		snprintf(file, sizeof(file), "%s/%s/%s", cf->statedir,
			 CONFLICT_DIRNAME, dr->record);
		json_array_append_new(
			list,
			json_pack("{s:s,s:o,s:o,s:I,s:s,s:s,s:s}", "path", path,
				  "coordinate", coord_to_json(&dr->coord), "at",
				  when_json(dr->at_usec), "version",
				  (json_int_t)dr->version, "timestamp",
				  dr->timestamp, "agent_id", dr->agent_id,
				  "record", file));
	}
	return list;
}

/* ---- conflict.list ---- */

struct list_job {
	uv_work_t req;
	struct call *call;
	const struct statedir *state; /* the daemon's (read-only) */
	int max_x;
	size_t limit;
	json_t *records; /* built by the worker */
	size_t total;
	int rc;
	char errmsg[320];
};

/* A record as listed: its summaries instead of the whole versions. */
static void summarise_record(json_t *rec)
{
	json_t *kept = json_object_get(rec, "kept");
	json_t *lost = json_object_get(rec, "lost");

	if (kept)
		json_object_set_new(rec, "kept", summary_json(kept));
	if (lost)
		json_object_set_new(rec, "lost", summary_json(lost));
}

static void list_work_cb(uv_work_t *req)
{
	struct list_job *j = req->data;
	size_t i;
	json_t *rec;

	j->rc = records_list(j->state, j->max_x, j->limit, &j->records,
			     &j->total, j->errmsg, sizeof(j->errmsg));
	json_array_foreach(j->records, i, rec) summarise_record(rec);
}

static void list_after_cb(uv_work_t *req, int status)
{
	struct list_job *j = req->data;
	struct call *call = j->call;
	int rc = status < 0 ? status : j->rc;

	if (rc < 0) {
		if (!j->errmsg[0])
			snprintf(j->errmsg, sizeof(j->errmsg), "%s",
				 strerror(-rc));
		call_error(call, RPC_STORAGE,
			   json_pack("{s:s}", "reason", j->errmsg),
			   "reading the conflict records: %s", j->errmsg);
		json_decref(j->records);
	} else {
		call_reply(call,
			   json_pack("{s:o,s:I,s:o,s:I,s:o}", "conflicts",
				     conflicts_json(call->d, j->limit),
				     "conflicts_total",
				     (json_int_t)call->d->conflicts.n,
				     "records", j->records, "records_total",
				     (json_int_t)j->total, "dropped",
				     drops_json(call->d)));
	}
	free(j);
	call_complete(call);
}

int conflict_list(struct call *call)
{
	static const char *const allowed[] = {"limit", NULL};
	int64_t limit = LIST_DEFAULT;
	struct list_job *j;

	if (!param_only(call, allowed) ||
	    !param_int(call, "limit", 1, LIST_MAX, &limit))
		return CALL_DONE;
	j = calloc(1, sizeof(*j));
	if (!j) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	j->call = call;
	j->state = &call->d->repo.state;
	j->max_x = call->d->limits.max_x;
	j->limit = (size_t)limit;
	j->req.data = j;
	if (uv_queue_work(call->d->loop, &j->req, list_work_cb, list_after_cb) <
	    0) {
		free(j);
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "cannot start reading the conflict records");
		return CALL_DONE;
	}
	return CALL_ASYNC;
}

/* ---- conflict.resolve ---- */

struct resolve_call {
	struct call *call;
	struct coord coord;
	const char *keep; /* static */
};

static json_t *decision_or_null(const char *compact)
{
	json_t *v = compact ? json_loads(compact, 0, NULL) : NULL;

	return v ? v : json_null();
}

static void resolved_cb(void *arg, int rc, int code, const char *msg,
			const char *kept, const char *dropped)
{
	struct resolve_call *rc_ = arg;
	struct call *call = rc_->call;
	char rel[64], path[96];

	coord_path(&rc_->coord, rel, sizeof(rel));
	snprintf(path, sizeof(path), ".vector-memory/%s", rel);
	if (rc < 0) {
		if (code == RPC_STORAGE)
			call_error(call, code,
				   json_pack("{s:s}", "reason", msg),
				   "resolving %s: %s", path, msg);
		else
			call_error(call, code, NULL, "resolving %s: %s", path,
				   msg);
	} else {
		if (dropped)
			log_warn("vmem resolve %s --%s drops the acknowledged "
				 "version; the daemon keeps it in a conflict "
				 "record when it takes the file",
				 path, rc_->keep);
		else
			log_info("vmem resolve %s --%s", path, rc_->keep);
		call_reply(call,
			   json_pack("{s:o,s:s,s:s,s:o,s:o}", "coordinate",
				     coord_to_json(&rc_->coord), "path", path,
				     "keep", rc_->keep, "kept",
				     decision_or_null(kept), "dropped",
				     decision_or_null(dropped)));
		/* The file changed, and maybe the index: take them now. */
		store_check_files(&call->d->store);
	}
	free(rc_);
	call_complete(call);
}

int conflict_resolve(struct call *call)
{
	static const char *const allowed[] = {"coordinate", "keep", NULL};
	static const char *const keeps[] = {"ours", "theirs", "acknowledged"};
	json_t *keep = json_object_get(call->params, "keep");
	struct daemon *d = call->d;
	struct resolve_call *rc_;
	const struct record *held;
	struct coord c;
	size_t slot, k;
	int rc;

	if (!param_only(call, allowed) || !param_coord(call, &c))
		return CALL_DONE;
	for (k = 0; k < 3; k++)
		if (json_is_string(keep) &&
		    strcmp(json_string_value(keep), keeps[k]) == 0)
			break;
	if (k == 3) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "keep must be \"ours\", \"theirs\" or "
			   "\"acknowledged\"");
		return CALL_DONE;
	}
	slot = index_slot(&d->decisions.index, &c);
	if (!conflicts_has(&d->conflicts, slot)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "(%d, %d, %d) is not in a git conflict", c.x, c.y,
			   c.z);
		return CALL_DONE;
	}
	rc_ = calloc(1, sizeof(*rc_));
	if (!rc_) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	rc_->call = call;
	rc_->coord = c;
	rc_->keep = keeps[k];
	held = d->decisions.index.slots[slot];
	rc = conflicts_resolve(&d->conflicts, slot, (enum conflicts_keep)k,
			       held ? held->json : NULL, false, resolved_cb,
			       rc_);
	if (rc < 0) {
		free(rc_);
		call_error(call, RPC_INTERNAL_ERROR, NULL,
			   "cannot start the resolution: %s", strerror(-rc));
		return CALL_DONE;
	}
	return CALL_ASYNC;
}

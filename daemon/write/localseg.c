/*
 * See localseg.h. Invariants: items hold, oldest first, every applied
 * payload not yet appended by a pass that succeeded; at most one
 * compaction plan exists at a time (compacting), made by a pass, run by
 * one pool job, finished by the next pass after that job (or at close).
 */
#include "localseg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "localrec.h"

/* What a pass takes and brings back (handed over whole). */
struct lsnap {
	struct localseg_item *items;
	size_t n;
	/* A compaction to finish first (run and done). */
	struct seg_compact *finish;
	bool had_finish;
	unsigned finish_store;
	int finish_rc;
	char finish_msg[160];
	bool may_plan;
	/* Filled by the pass. */
	struct seg_compact *plan;
	unsigned plan_store;
	bool have_stats;
	struct seg_stats stats[LOCALSEG_STORES];
};

int localseg_open(struct localseg *ls, uv_loop_t *loop,
		  const struct statedir *state, const char *name,
		  const char *const *stores, unsigned n, uint8_t tag,
		  const struct seg_opts *o, const seg_load_fn *load, void *ctx,
		  char *msg, size_t msglen)
{
	int ret;

	memset(ls, 0, sizeof(*ls));
	ls->dir.fd = -1;
	for (unsigned i = 0; i < LOCALSEG_STORES; i++)
		ls->sub[i].fd = -1;
	ls->loop = loop;
	ls->tag = tag;
	ls->opts.segment_max = o ? o->segment_max : SEG_SIZE_DEFAULT;
	if (n == 0 || n > LOCALSEG_STORES) {
		errmsg_set(msg, msglen, "%u segment stores", n);
		return -EINVAL;
	}
	ret = statedir_sub(state, name, true, &ls->dir, msg, msglen);
	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		ret = statedir_sub(&ls->dir, stores[i], true, &ls->sub[i], msg,
				   msglen);
		if (ret < 0)
			return ret;
		ls->n_stores = i + 1;
		ret = segstore_open(&ls->sub[i], &ls->opts, load[i], ctx,
				    &ls->st[i], &ls->report[i], msg, msglen);
		if (ret < 0)
			return ret;
		segstore_stats(ls->st[i], &ls->stats[i]);
		if (ls->report[i].torn_bytes)
			/* Never acknowledged (the log has it, or never had). */
			snprintf(
				ls->last_error, sizeof(ls->last_error),
				"cut a torn tail of %llu bytes off %s/%s/%s at "
				"offset %llu",
				(unsigned long long)ls->report[i].torn_bytes,
				name, stores[i], ls->report[i].torn_file,
				(unsigned long long)ls->report[i].torn_offset);
	}
	return 0;
}

static void items_free(struct localseg_item *it, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(it[i].payload);
}

void localseg_close(struct localseg *ls)
{
	char msg[160];

	if (ls->plan && ls->plan_store < ls->n_stores && ls->st[ls->plan_store])
		segstore_compact_finish(ls->st[ls->plan_store], ls->plan, msg,
					sizeof(msg));
	ls->plan = NULL;
	for (unsigned i = 0; i < LOCALSEG_STORES; i++) {
		segstore_close(ls->st[i]);
		ls->st[i] = NULL;
		statedir_done(&ls->sub[i]);
	}
	statedir_done(&ls->dir);
	items_free(ls->items, ls->n_items);
	free(ls->items);
	ls->items = NULL;
	ls->n_items = ls->cap_items = 0;
}

bool localseg_take(struct localseg *ls, uint8_t *payload, size_t len)
{
	if (ls->n_items == ls->cap_items) {
		size_t cap = ls->cap_items ? ls->cap_items * 2 : 64;
		struct localseg_item *p = realloc(ls->items, cap * sizeof(*p));

		if (!p) {
			free(payload);
			return false;
		}
		ls->items = p;
		ls->cap_items = cap;
	}
	ls->items[ls->n_items++] = (struct localseg_item){payload, len};
	return true;
}

bool localseg_copy(struct localseg *ls, const void *payload, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	if (!p)
		return false;
	memcpy(p, payload, len);
	return localseg_take(ls, p, len);
}

size_t localseg_pending(const struct localseg *ls)
{
	return ls->n_items + (ls->compact_done ? 1 : 0);
}

int localseg_snapshot(struct localseg *ls, void **out)
{
	struct lsnap *sn = calloc(1, sizeof(*sn));

	if (!sn)
		return -ENOMEM;
	sn->items = ls->items;
	sn->n = ls->n_items;
	ls->items = NULL;
	ls->n_items = ls->cap_items = 0;
	if (ls->compact_done) {
		sn->finish = ls->plan;
		sn->had_finish = true;
		sn->finish_store = ls->plan_store;
		sn->finish_rc = ls->compact_rc;
		memcpy(sn->finish_msg, ls->compact_msg, sizeof(sn->finish_msg));
		ls->plan = NULL;
		ls->compact_done = false;
	}
	sn->may_plan = !ls->compacting || sn->finish;
	*out = sn;
	return 0;
}

/* The operations of the pass, by store. */
struct opsets {
	struct seg_op *ops[LOCALSEG_STORES];
	size_t n[LOCALSEG_STORES], cap[LOCALSEG_STORES];
};

static int collect_cb(void *ctx, const struct logop *op)
{
	struct opsets *o = ctx;
	unsigned s = op->store;

	if (o->n[s] == o->cap[s]) {
		size_t cap = o->cap[s] ? o->cap[s] * 2 : 64;
		struct seg_op *p = realloc(o->ops[s], cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		o->ops[s] = p;
		o->cap[s] = cap;
	}
	o->ops[s][o->n[s]++] = (struct seg_op){
		.key = op->key,
		.payload = op->payload,
		.len = op->len,
		.del = op->op == LOGOP_DEL,
	};
	return 0;
}

int localseg_write(struct localseg *ls, void *snap, bool sync, char *msg,
		   size_t msglen)
{
	struct lsnap *sn = snap;
	struct opsets o = {{NULL}, {0}, {0}};
	int ret = 0;
	unsigned s;

	if (sn->finish) {
		/* The compaction ran; account for it before appending. */
		int rc = segstore_compact_finish(ls->st[sn->finish_store],
						 sn->finish, sn->finish_msg,
						 sizeof(sn->finish_msg));

		if (rc < 0 && sn->finish_rc == 0)
			sn->finish_rc = rc;
		sn->finish = NULL;
	}
	for (size_t i = 0; i < sn->n && ret == 0; i++) {
		ret = logpay_parse(sn->items[i].payload, sn->items[i].len,
				   ls->tag, ls->n_stores, collect_cb, &o, msg,
				   msglen);
		if (ret == -ENOMEM)
			errmsg_set(msg, msglen, "out of memory");
	}
	for (s = 0; s < ls->n_stores && ret == 0; s++)
		ret = segstore_apply(ls->st[s], o.ops[s], o.n[s], msg, msglen);
	for (s = 0; s < ls->n_stores && ret == 0 && sync; s++)
		ret = segstore_sync(ls->st[s], msg, msglen);
	/* One compaction at a time, never during the start. */
	for (s = 0;
	     s < ls->n_stores && ret == 0 && sn->may_plan && !sync && !sn->plan;
	     s++) {
		char why[160];

		if (segstore_compact_plan(ls->st[s], &sn->plan, why,
					  sizeof(why)) == 1)
			sn->plan_store = s;
	}
	for (s = 0; s < ls->n_stores; s++)
		segstore_stats(ls->st[s], &sn->stats[s]);
	sn->have_stats = true;
	for (s = 0; s < LOCALSEG_STORES; s++)
		free(o.ops[s]);
	return ret;
}

static void compact_work_cb(uv_work_t *req)
{
	struct localseg *ls = req->data;

	ls->compact_rc = segcompact_run(ls->plan, ls->compact_msg,
					sizeof(ls->compact_msg));
}

static void compact_after_cb(uv_work_t *req, int status)
{
	struct localseg *ls = req->data;

	if (status < 0 && ls->compact_rc == 0) {
		ls->compact_rc = status;
		snprintf(ls->compact_msg, sizeof(ls->compact_msg),
			 "compaction job: %s", uv_strerror(status));
	}
	/* The next pass takes it back (pending says so). */
	ls->compact_done = true;
}

void localseg_written(struct localseg *ls, void *snap, int rc)
{
	struct lsnap *sn = snap;

	if (sn->finish) {
		/* The pass never ran: the next one takes it back. */
		ls->plan = sn->finish;
		ls->plan_store = sn->finish_store;
		ls->compact_rc = sn->finish_rc;
		ls->compact_done = true;
	} else if (sn->had_finish) {
		ls->compacting = false;
		if (sn->finish_rc < 0)
			snprintf(ls->last_error, sizeof(ls->last_error),
				 "compacting segments: %s", sn->finish_msg);
	}
	if (rc < 0) {
		/* Written again by the next pass, before newer payloads. */
		size_t n = sn->n + ls->n_items;
		struct localseg_item *all = malloc((n ? n : 1) * sizeof(*all));

		if (all) {
			/* Either list may be empty (NULL): no memcpy from it.
			 */
			if (sn->n)
				memcpy(all, sn->items, sn->n * sizeof(*all));
			if (ls->n_items)
				memcpy(all + sn->n, ls->items,
				       ls->n_items * sizeof(*all));
			free(ls->items);
			ls->items = all;
			ls->n_items = ls->cap_items = n;
			free(sn->items);
			sn->items = NULL;
			sn->n = 0;
		} else {
			snprintf(ls->last_error, sizeof(ls->last_error),
				 "out of memory keeping %zu unwritten "
				 "records: the log keeps them until a "
				 "restart",
				 sn->n);
		}
	}
	items_free(sn->items, sn->n);
	free(sn->items);
	if (sn->have_stats)
		memcpy(ls->stats, sn->stats, sizeof(ls->stats));
	if (sn->plan) {
		ls->plan = sn->plan;
		ls->plan_store = sn->plan_store;
		ls->compacting = true;
		ls->compact_rc = 0;
		ls->compact_msg[0] = '\0';
		ls->compact_req.data = ls;
		if (uv_queue_work(ls->loop, &ls->compact_req, compact_work_cb,
				  compact_after_cb) < 0) {
			/* Given back unrun at the next pass. */
			ls->compact_rc = -EAGAIN;
			snprintf(ls->compact_msg, sizeof(ls->compact_msg),
				 "cannot start a compaction job");
			ls->compact_done = true;
		} else {
			ls->compactions++;
		}
	}
	free(sn);
}

int localseg_sync(struct localseg *ls, char *msg, size_t msglen)
{
	for (unsigned s = 0; s < ls->n_stores; s++) {
		int ret = segstore_sync(ls->st[s], msg, msglen);

		if (ret < 0)
			return ret;
	}
	return 0;
}

void localseg_stats(const struct localseg *ls, struct seg_stats *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (unsigned s = 0; s < ls->n_stores; s++) {
		const struct seg_stats *st = &ls->stats[s];

		sum->disk_bytes += st->disk_bytes;
		sum->live_bytes += st->live_bytes;
		sum->dead_bytes += st->dead_bytes;
		sum->keys += st->keys;
		sum->tombstones += st->tombstones;
		sum->segments += st->segments;
		sum->compactions += st->compactions;
	}
}

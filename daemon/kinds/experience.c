/*
 * Experiences as a record kind (see experience.h; the table's contract is
 * in kind.h).
 *
 * Invariants: the index holds only what the log made durable or the
 * shards hold; a doc's rec_refs and tomb_refs count the lines of the
 * shards (as read, or as the writer will append them) that hold its
 * record and its deletion, and each shard lists those docs; a doc is
 * live exactly when it has a record, rec_refs > 0 and tomb_refs == 0. A
 * shard's stamp is the file as we last read or appended to it, so a
 * rescan reads only the shards someone else changed.
 */
#include "experience.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "conflicts.h"
#include "errmsg.h"
#include "grow.h"
#include "log.h"
#include "progress.h"
#include "protocol/errors.h"
#include "protocol/fnv.h"

struct exp_shard {
	char *path; /* below experiences/ */
	struct vmdir_stamp stamp;
	uint32_t *recs; /* docs whose record line it holds */
	size_t n_recs, cap_recs;
	uint32_t *tombs; /* docs whose tombstone it holds */
	size_t n_tombs, cap_tombs;
};

/* A line for the writer: the line with its newline, then the path. */
struct exp_pending {
	struct exp_pending *next;
	const char *path;
	size_t len;
	bool written; /* set by the writer's worker */
	char line[];
};

static struct experiences *of(struct store_kind *k)
{
	return KIND_CONTAINER(k, struct experiences, sk);
}

static struct experience_write *write_of(struct store_write *w)
{
	return KIND_CONTAINER(w, struct experience_write, w);
}

/* ---- shards ---- */

static int shard_table_grow(struct experiences *xs)
{
	size_t cap = xs->shard_table_cap ? xs->shard_table_cap * 2 : 256;
	uint32_t *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t n = 0; n < xs->n_shards; n++) {
		size_t i = fnv1a64(xs->shards[n]->path,
				   strlen(xs->shards[n]->path)) &
			   (cap - 1);

		while (t[i])
			i = (i + 1) & (cap - 1);
		t[i] = (uint32_t)n + 1;
	}
	free(xs->shard_table);
	xs->shard_table = t;
	xs->shard_table_cap = cap;
	return 0;
}

/* The shard of path, or NULL; with create, made when absent (NULL: no
 * memory). */
static struct exp_shard *shard_get(struct experiences *xs, const char *path,
				   bool create)
{
	struct exp_shard *sh;
	size_t i, mask = xs->shard_table_cap - 1;

	if (xs->shard_table_cap)
		for (i = fnv1a64(path, strlen(path)) & mask; xs->shard_table[i];
		     i = (i + 1) & mask)
			if (!strcmp(xs->shards[xs->shard_table[i] - 1]->path,
				    path))
				return xs->shards[xs->shard_table[i] - 1];
	if (!create)
		return NULL;
	if ((xs->n_shards + 1) * 2 > xs->shard_table_cap &&
	    shard_table_grow(xs) < 0)
		return NULL;
	if (grow_array((void **)&xs->shards, &xs->cap_shards, xs->n_shards + 1,
		       sizeof(*xs->shards)) < 0)
		return NULL;
	sh = calloc(1, sizeof(*sh));
	if (sh)
		sh->path = strdup(path);
	if (!sh || !sh->path) {
		free(sh);
		return NULL;
	}
	mask = xs->shard_table_cap - 1;
	for (i = fnv1a64(path, strlen(path)) & mask; xs->shard_table[i];
	     i = (i + 1) & mask)
		;
	xs->shard_table[i] = (uint32_t)xs->n_shards + 1;
	xs->shards[xs->n_shards++] = sh;
	return sh;
}

static void shard_free(struct exp_shard *sh)
{
	free(sh->path);
	free(sh->recs);
	free(sh->tombs);
	free(sh);
}

/* Forget a shard that is gone (its lists were counted out). */
static void shard_drop(struct experiences *xs, struct exp_shard *sh)
{
	size_t at = 0;

	while (xs->shards[at] != sh)
		at++;
	shard_free(sh);
	xs->shards[at] = xs->shards[--xs->n_shards];
	/* Rebuild the table (shards vanish rarely: a checkout). */
	free(xs->shard_table);
	xs->shard_table = NULL;
	xs->shard_table_cap = 0;
	if (shard_table_grow(xs) < 0)
		log_err("out of memory: experience shards are looked up "
			"slowly until the next reload");
}

static int push(uint32_t **v, size_t *n, size_t *cap, uint32_t doc)
{
	if (grow_array((void **)v, cap, *n + 1, sizeof(**v)) < 0)
		return -ENOMEM;
	(*v)[(*n)++] = doc;
	return 0;
}

/* ---- the open shard of each agent's day ---- */

struct exp_open {
	unsigned seq;	/* of the shard taking new lines */
	uint64_t bytes; /* it holds, as read or appended, and prepared for it */
	char day[];	/* "<segment>/<YYYY-MM-DD>": a shard path's start */
};

/* The length of the day of a shard path ("<segment>/<YYYY-MM-DD>..."). */
static size_t day_len(const char *path)
{
	return (size_t)(strrchr(path, '/') - path) + 1 + 10;
}

static size_t open_slot(struct exp_open **tab, size_t cap, const char *day,
			size_t len)
{
	size_t i = fnv1a64(day, len) & (cap - 1);

	while (tab[i] && (strncmp(tab[i]->day, day, len) || tab[i]->day[len]))
		i = (i + 1) & (cap - 1);
	return i;
}

/* The open shard of the day of path (any of its shards): NULL when there
 * is no memory for a new one, which begins at the first shard. */
static struct exp_open *open_of(struct experiences *xs, const char *path)
{
	size_t len = day_len(path), i;
	struct exp_open *o;

	if (xs->opens_cap) {
		i = open_slot(xs->opens, xs->opens_cap, path, len);
		if (xs->opens[i])
			return xs->opens[i];
	}
	if ((xs->n_opens + 1) * 2 > xs->opens_cap) {
		size_t cap = xs->opens_cap ? xs->opens_cap * 2 : 64;
		struct exp_open **t = calloc(cap, sizeof(*t));

		if (!t)
			return NULL;
		for (size_t j = 0; j < xs->opens_cap; j++)
			if (xs->opens[j])
				t[open_slot(t, cap, xs->opens[j]->day,
					    strlen(xs->opens[j]->day))] =
					xs->opens[j];
		free(xs->opens);
		xs->opens = t;
		xs->opens_cap = cap;
	}
	o = malloc(sizeof(*o) + len + 1);
	if (!o)
		return NULL;
	o->seq = 1;
	o->bytes = 0;
	memcpy(o->day, path, len);
	o->day[len] = '\0';
	xs->opens[open_slot(xs->opens, xs->opens_cap, path, len)] = o;
	xs->n_opens++;
	return o;
}

static void opens_clear(struct experiences *xs)
{
	for (size_t i = 0; i < xs->opens_cap; i++)
		free(xs->opens[i]);
	free(xs->opens);
	xs->opens = NULL;
	xs->n_opens = xs->opens_cap = 0;
}

/* A shard read with size bytes: the latest of its day is the open one.
 * (Without memory the day's next line may go to an earlier shard: still
 * a shard of its day.) */
static void open_saw(struct experiences *xs, const char *path, uint64_t size)
{
	unsigned seq = exp_shard_name_seq(strrchr(path, '/') + 1);
	struct exp_open *o = open_of(xs, path);

	if (!o)
		return;
	if (seq > o->seq) {
		o->seq = seq;
		o->bytes = size;
	} else if (seq == o->seq && size > o->bytes) {
		o->bytes = size;
	}
}

/* The shard number for a line of len bytes (its newline included) of
 * agent's day of usec: the open shard's, or the next when it is full. 0,
 * or -ENOMEM; -EINVAL when the day has no shard name. */
static int open_take(struct experiences *xs, const char *agent, size_t alen,
		     int64_t usec, size_t len, unsigned *seq)
{
	char path[EXP_SHARD_PATH_MAX];
	struct exp_open *o;

	if (exp_shard_path(agent, alen, usec, 1, path, sizeof(path)) < 0)
		return -EINVAL;
	o = open_of(xs, path);
	if (!o)
		return -ENOMEM;
	if (o->bytes > 0 && o->bytes + len > xs->shard_max &&
	    o->seq < EXP_SHARD_SEQ_MAX) {
		o->seq++;
		o->bytes = 0;
	}
	o->bytes += len;
	*seq = o->seq;
	return 0;
}

/* ---- reporting ---- */

static void report(struct experiences *xs, enum kind_change_type type,
		   uint32_t doc, const char *path)
{
	struct experience_change ch = {doc, NULL, 0, NULL, NULL, 0, path};
	char *json = NULL;

	if (doc != UINT32_MAX) {
		const struct exp_doc *d = &xs->ix.docs[doc];

		ch.id = &d->id;
		if (d->buf)
			ch.agent = expindex_agent(&xs->ix, doc, &ch.agent_len);
		if (d->live) {
			ch.json_len = expindex_json_len(&xs->ix, doc);
			json = malloc(ch.json_len);
			if (json) {
				expindex_json(&xs->ix, doc, json);
				ch.json = json;
			} else {
				/* Its shard is still marked for the
				 * commit; only watchers miss it. */
				log_err("out of memory: subscribers are not "
					"told of a change of an experience");
				ch.id = NULL;
				ch.json_len = 0;
			}
		}
	}
	store_changed(&xs->sk, type, &ch);
	free(json);
}

/* ---- pending lines ---- */

static int pending_add(struct experiences *xs, const char *path,
		       const char *json, size_t len)
{
	size_t plen = strlen(path);
	struct exp_pending *p = malloc(sizeof(*p) + len + 1 + plen + 1);

	if (!p)
		return -ENOMEM;
	memcpy(p->line, json, len);
	p->line[len] = '\n';
	p->len = len + 1;
	memcpy(p->line + len + 1, path, plen + 1);
	p->path = p->line + len + 1;
	p->next = NULL;
	if (xs->pending_tail)
		xs->pending_tail->next = p;
	else
		xs->pending = p;
	xs->pending_tail = p;
	xs->n_pending++;
	return 0;
}

static void pending_free(struct exp_pending *p)
{
	while (p) {
		struct exp_pending *next = p->next;

		free(p);
		p = next;
	}
}

/* Shard seq of agent's day of usec. */
static int shard_path(const char *agent, size_t len, int64_t usec, unsigned seq,
		      char *out)
{
	return exp_shard_path(agent, len, usec, seq, out, EXP_SHARD_PATH_MAX) <
			       0
		       ? -EINVAL
		       : 0;
}

/* ---- a write ---- */

const struct exp_doc *experiences_get(const struct experiences *xs,
				      const struct expid *id)
{
	long doc = expindex_lookup(&xs->ix, id);

	return doc >= 0 && xs->ix.docs[doc].live ? &xs->ix.docs[doc] : NULL;
}

static int lock(struct store_kind *k, const struct store_write *w,
		struct kind_lock *out)
{
	struct experience_write *ew =
		KIND_CONTAINER(w, struct experience_write, w);

	(void)k;
	if (!ew->is_delete)
		return 0;
	expid_format(&ew->id, ew->key);
	out->key = ew->key;
	out->key_len = EXPID_LEN;
	return 1;
}

/* Random bits for an id, refilled from the kernel. */
static int random_bits(struct experiences *xs, uint8_t out[EXPID_RANDOM_BYTES])
{
	if (xs->rnd_left < EXPID_RANDOM_BYTES) {
		if (getrandom(xs->rnd, sizeof(xs->rnd), 0) !=
		    (ssize_t)sizeof(xs->rnd))
			return -errno;
		xs->rnd_left = sizeof(xs->rnd);
	}
	xs->rnd_left -= EXPID_RANDOM_BYTES;
	memcpy(out, xs->rnd + xs->rnd_left, EXPID_RANDOM_BYTES);
	return 0;
}

/* The log payload of ew's line: its tag before, its shard after. 0 or
 * -ENOMEM (ew->buf left to unprepare). */
static int payload(struct store_write *w, struct experience_write *ew)
{
	char nth[16];
	int n = snprintf(nth, sizeof(nth), "\n%u", ew->seq);
	char *buf = realloc(ew->buf, 1 + ew->len + (size_t)n);

	if (!buf)
		return -ENOMEM;
	buf[0] = EXPERIENCE_LOG_TAG;
	memcpy(buf + 1 + ew->len, nth, (size_t)n);
	ew->buf = buf;
	w->payload = buf;
	w->payload_len = 1 + ew->len + (size_t)n;
	return 0;
}

/*
 * A store gets its id and timestamp and is serialised once (after the
 * log tag: the payload, and what the index keeps); a delete of a live
 * record becomes its tombstone line, of nothing a no-op. Either takes
 * its place in the open shard of its record's agent and day.
 */
static int prepare(struct store_kind *k, struct store_write *w, char *msg,
		   size_t n)
{
	struct experiences *xs = of(k);
	struct experience_write *ew = write_of(w);
	uint8_t rnd[EXPID_RANDOM_BYTES];
	const char *agent;
	size_t alen;
	int64_t day;
	int rc;

	ew->json = NULL;
	ew->existed = false;
	if (ew->is_delete) {
		const struct exp_doc *d = experiences_get(xs, &ew->id);
		struct exp_tombstone t = {0};

		if (!d)
			return KIND_NOOP;
		agent = expindex_agent(&xs->ix, (uint32_t)(d - xs->ix.docs),
				       &alen);
		day = expid_usec(&ew->id);
		t.id = ew->id;
		t.agent_id = (char *)agent;
		t.timestamp = store_timestamp(k);
		t.deleted_by = (char *)ew->by;
		ew->buf = exp_dump_tombstone(&t, 1, &ew->len);
	} else {
		if (random_bits(xs, rnd) < 0) {
			snprintf(msg, n, "cannot get random bits for an id: %s",
				 strerror(errno));
			return RPC_INTERNAL_ERROR;
		}
		ew->e.timestamp = store_timestamp(k);
		ew->e.id = expid_make(ew->e.timestamp, rnd);
		agent = ew->e.agent_id;
		alen = strlen(agent);
		day = ew->e.timestamp;
		ew->buf = exp_dump(&ew->e, 1, &ew->len);
	}
	rc = ew->buf ? open_take(xs, agent, alen, day, ew->len + 1, &ew->seq)
		     : -ENOMEM;
	if (rc == 0)
		rc = payload(w, ew);
	if (rc == -EINVAL) {
		snprintf(msg, n, "no shard for an experience of that time");
		return RPC_INVALID_PARAMS;
	}
	if (rc < 0) {
		snprintf(msg, n, "out of memory");
		return RPC_INTERNAL_ERROR;
	}
	return KIND_LOG;
}

static void unprepare(struct store_kind *k, struct store_write *w)
{
	struct experience_write *ew = write_of(w);

	(void)k;
	free(ew->buf);
	ew->buf = NULL;
}

void experience_write_done(struct experience_write *ew)
{
	experience_done(&ew->e);
	free(ew->buf);
	ew->buf = NULL;
}

/* The shard a write's line goes to, into path: its agent's day's shard
 * that prepare chose. */
static int write_shard(struct experiences *xs, uint32_t doc,
		       const struct experience_write *ew, char *path)
{
	size_t alen;
	const char *agent = expindex_agent(&xs->ix, doc, &alen);

	return shard_path(agent, alen,
			  ew->is_delete ? expid_usec(&ew->id) : ew->e.timestamp,
			  ew->seq, path);
}

static void apply_store(struct experiences *xs, struct experience_write *ew)
{
	char path[EXP_SHARD_PATH_MAX];
	struct exp_shard *sh;
	long doc = expindex_intern(&xs->ix, &ew->e.id);
	int rc;

	/* The payload stays the write's: its line is the answer. */
	rc = doc < 0 ? (int)doc : 0;
	if (rc == 0)
		rc = expindex_set_record(&xs->ix, (uint32_t)doc, ew->buf + 1,
					 ew->len, &ew->e);
	if (rc == 0)
		rc = write_shard(xs, (uint32_t)doc, ew, path);
	if (rc == 0) {
		sh = shard_get(xs, path, true);
		rc = !sh ? -ENOMEM
			 : push(&sh->recs, &sh->n_recs, &sh->cap_recs,
				(uint32_t)doc);
		if (rc == 0)
			rc = pending_add(xs, path, ew->buf + 1, ew->len);
	}
	if (rc == 0) {
		xs->ix.docs[doc].rec_refs++;
		rc = expindex_activate(&xs->ix, (uint32_t)doc, &ew->e);
	}
	if (rc < 0) {
		/* Durable in the log, which the next start replays. */
		log_err("out of memory: an acknowledged experience is served "
			"and written to its shard only after a restart");
		return;
	}
	ew->json = ew->buf + 1;
	ew->json_len = ew->len;
	report(xs, KIND_STORED, (uint32_t)doc, path);
}

static void apply_delete(struct experiences *xs, struct experience_write *ew)
{
	char path[EXP_SHARD_PATH_MAX];
	long doc = expindex_lookup(&xs->ix, &ew->id);
	struct exp_shard *sh = NULL;
	int rc;

	/* The lock held since prepare: still live. */
	rc = doc < 0 ? -ENOENT : write_shard(xs, (uint32_t)doc, ew, path);
	if (rc == 0) {
		sh = shard_get(xs, path, true);
		rc = !sh ? -ENOMEM
			 : push(&sh->tombs, &sh->n_tombs, &sh->cap_tombs,
				(uint32_t)doc);
	}
	if (rc == 0)
		rc = pending_add(xs, path, ew->buf + 1, ew->len);
	free(ew->buf);
	ew->buf = NULL;
	if (rc < 0) {
		log_err("out of memory: an acknowledged deletion of an "
			"experience takes effect only after a restart");
		return;
	}
	xs->ix.docs[doc].tomb_refs++;
	expindex_deactivate(&xs->ix, (uint32_t)doc);
	ew->existed = true;
	report(xs, KIND_DELETED, (uint32_t)doc, path);
}

static void apply(struct store_kind *k, struct store_write *w)
{
	struct experience_write *ew = write_of(w);

	if (ew->is_delete)
		apply_delete(of(k), ew);
	else
		apply_store(of(k), ew);
}

/* ---- start-up ---- */

/* The line of a log payload (after its tag) and its shard number: 0, or
 * -EBADMSG for a number that is none. */
static int payload_split(const char *payload, size_t len, size_t *line,
			 unsigned *seq)
{
	const char *nl = memchr(payload + 1, '\n', len - 1);
	unsigned v = 0;

	*line = nl ? (size_t)(nl - payload) - 1 : len - 1;
	*seq = 1;
	if (!nl)
		return 0;
	for (const char *p = nl + 1; p < payload + len; p++) {
		if (*p < '0' || *p > '9' || v > EXP_SHARD_SEQ_MAX / 10)
			return -EBADMSG;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v < 1 || v > EXP_SHARD_SEQ_MAX)
		return -EBADMSG;
	*seq = v;
	return 0;
}

/* A log payload: its line goes to its shard (the load then reads it). */
static int replay(struct store_kind *k, const char *payload, size_t len,
		  char *msg, size_t n)
{
	struct experiences *xs = of(k);
	char why[VMEM_ERRMSG_LEN], path[EXP_SHARD_PATH_MAX];
	struct exp_line l;
	unsigned seq;
	size_t line;
	int rc;

	if (payload_split(payload, len, &line, &seq) < 0) {
		errmsg_set(msg, n,
			   "an experience: no shard number after "
			   "its line");
		return -EBADMSG;
	}
	rc = exp_parse_line(payload + 1, line, &l, why);
	if (rc != 0) {
		exp_line_done(&l);
		errmsg_set(msg, n, "an experience: %s", why);
		return rc == RPC_INTERNAL_ERROR ? -ENOMEM : -EBADMSG;
	}
	rc = l.is_tombstone
		     ? shard_path(l.tomb.agent_id, strlen(l.tomb.agent_id),
				  expid_usec(&l.tomb.id), seq, path)
		     : shard_path(l.rec.agent_id, strlen(l.rec.agent_id),
				  l.rec.timestamp, seq, path);
	exp_line_done(&l);
	if (rc == 0)
		rc = pending_add(xs, path, payload + 1, line);
	if (rc < 0)
		errmsg_set(msg, n, "an experience: %s",
			   rc == -ENOMEM ? "out of memory" : "no shard path");
	return rc;
}

/* The lines of the shard being read, until shard() takes them. */
struct reading {
	struct experiences *xs;
	uint32_t *recs, *tombs;
	size_t n_recs, cap_recs, n_tombs, cap_tombs;
	uint64_t lines;
};

/* A record or tombstone line of a read shard: counted, the record kept
 * when new, the doc settled (no report: the start). */
static long take_line(struct experiences *xs, struct exp_line *l,
		      const char *raw, size_t len)
{
	const struct expid *id = l->is_tombstone ? &l->tomb.id : &l->rec.id;
	long doc = expindex_intern(&xs->ix, id);
	struct exp_doc *d;

	if (doc < 0)
		return doc;
	d = &xs->ix.docs[doc];
	if (l->is_tombstone) {
		d->tomb_refs++;
		return doc;
	}
	if (!d->buf) {
		int rc = expindex_set_record(&xs->ix, (uint32_t)doc, raw, len,
					     &l->rec);

		if (rc < 0)
			return rc;
	}
	xs->ix.docs[doc].rec_refs++;
	return doc;
}

/* Make a doc live or not as its counts say; a change is reported when
 * asked. parsed: its record, when at hand. */
static int settle(struct experiences *xs, uint32_t doc,
		  const struct experience *parsed, bool tell)
{
	struct exp_doc *d = &xs->ix.docs[doc];
	bool want = d->buf && d->rec_refs > 0 && d->tomb_refs == 0;
	int rc;

	if (want == d->live)
		return 0;
	if (want) {
		rc = expindex_activate(&xs->ix, doc, parsed);
		if (rc < 0)
			return rc;
	} else {
		expindex_deactivate(&xs->ix, doc);
	}
	if (tell)
		report(xs, KIND_RELOADED, doc, NULL);
	return 0;
}

/* The record a line brought, for its doc's activation: NULL when the
 * doc had its record already (from another line, maybe different). */
static const struct experience *brought(const struct experiences *xs,
					const struct exp_line *l)
{
	long doc;

	if (l->is_tombstone)
		return NULL;
	doc = expindex_lookup(&xs->ix, &l->rec.id);
	return doc >= 0 && xs->ix.docs[doc].buf ? NULL : &l->rec;
}

static int load_line_cb(void *ctx, struct exp_line *l, const char *raw,
			size_t len)
{
	struct reading *r = ctx;
	const struct experience *rec = brought(r->xs, l);
	long doc = take_line(r->xs, l, raw, len);
	int rc = doc < 0 ? (int)doc : 0;

	if (rc == 0)
		rc = l->is_tombstone ? push(&r->tombs, &r->n_tombs,
					    &r->cap_tombs, (uint32_t)doc)
				     : push(&r->recs, &r->n_recs, &r->cap_recs,
					    (uint32_t)doc);
	if (rc == 0)
		rc = settle(r->xs, (uint32_t)doc, rec, false);
	exp_line_done(l);
	r->lines++;
	if (progress_due())
		progress_say("loading the experience shards: %llu lines",
			     (unsigned long long)r->lines);
	return rc;
}

/* The shard's lists become what was read. */
static int load_shard_cb(void *ctx, const char *path,
			 const struct vmdir_stamp *st)
{
	struct reading *r = ctx;
	struct exp_shard *sh = shard_get(r->xs, path, true);

	if (!sh)
		return -ENOMEM;
	open_saw(r->xs, path, (uint64_t)st->size);
	free(sh->recs);
	free(sh->tombs);
	sh->stamp = *st;
	sh->recs = r->recs;
	sh->n_recs = r->n_recs;
	sh->cap_recs = r->cap_recs;
	sh->tombs = r->tombs;
	sh->n_tombs = r->n_tombs;
	sh->cap_tombs = r->cap_tombs;
	r->recs = r->tombs = NULL;
	r->n_recs = r->cap_recs = r->n_tombs = r->cap_tombs = 0;
	return 0;
}

static int load(struct store_kind *k, struct vmdir_load_report *rep,
		char *errmsg, size_t n)
{
	struct experiences *xs = of(k);
	struct reading r = {.xs = xs};
	const struct shards_visit v = {
		.line = load_line_cb,
		.shard = load_shard_cb,
		.ctx = &r,
	};
	int rc;

	/* What the replay's writes recorded is read again whole. */
	for (size_t i = 0; i < xs->n_shards; i++)
		shard_free(xs->shards[i]);
	xs->n_shards = 0;
	free(xs->shard_table);
	xs->shard_table = NULL;
	xs->shard_table_cap = 0;
	opens_clear(xs);
	rc = shards_scan(&xs->files, &v, rep, errmsg, n);
	free(r.recs);
	free(r.tombs);
	expindex_trim(&xs->ix);
	malloc_trim(0);
	return rc;
}

/* ---- materialisation ---- */

/* A writer pass: the lines taken (in apply order), then, filled by the
 * worker, one append per shard. */
struct snapshot {
	struct exp_pending **items;
	size_t n;
	struct shard_append *ops;
	char **bufs;
	size_t n_ops;
	bool appended; /* the ops ran (their rc and stamp are set) */
};

static void snapshot_free(struct snapshot *sn)
{
	for (size_t i = 0; i < sn->n_ops; i++)
		free(sn->bufs[i]);
	free(sn->bufs);
	free(sn->ops);
	for (size_t i = 0; i < sn->n; i++)
		free(sn->items[i]);
	free(sn->items);
	free(sn);
}

static size_t pending(const struct store_kind *k)
{
	return KIND_CONTAINER(k, struct experiences, sk)->n_pending;
}

static int snapshot(struct store_kind *k, void **out)
{
	struct experiences *xs = of(k);
	struct snapshot *sn = calloc(1, sizeof(*sn));
	size_t i = 0;

	if (sn)
		sn->items = malloc((xs->n_pending ? xs->n_pending : 1) *
				   sizeof(*sn->items));
	if (!sn || !sn->items) {
		free(sn);
		return -ENOMEM;
	}
	for (struct exp_pending *p = xs->pending; p; p = p->next) {
		p->written = false;
		sn->items[i++] = p;
	}
	sn->n = i;
	xs->pending = xs->pending_tail = NULL;
	xs->n_pending = 0;
	*out = sn;
	return 0;
}

/* Sorting lines by shard, keeping their order within one. */
struct keyed {
	const char *path;
	size_t i;
};

static int keyed_cmp(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	int c = strcmp(x->path, y->path);

	if (c)
		return c;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* Blocking: group the lines by shard and append each group. With sync
 * (the start-up's replay) the appends skip the lines a shard holds
 * already (shards_append's dedupe). While git runs an operation in the
 * tree nothing is appended: the lines are left (KIND_LEFT) for a later
 * pass, as decisions' files are. */
static int write_files(struct store_kind *k, void *snap, bool sync,
		       char *errmsg, size_t errn)
{
	struct experiences *xs = of(k);
	struct snapshot *sn = snap;
	size_t cap = sn->n ? sn->n : 1;
	struct keyed *keys;
	char why[256];
	int rc = -ENOMEM;

	/* (Not the start-up's replay: the load that follows reads the
	 * shards, so its lines must be in them, deduplicated.) */
	if (!sync && xs->conflicts &&
	    conflicts_yield_check(xs->conflicts, why, sizeof(why))) {
		for (size_t i = 0; i < sn->n; i++)
			sn->items[i]->written = false;
		return KIND_LEFT;
	}
	keys = malloc(cap * sizeof(*keys));

	sn->ops = calloc(cap, sizeof(*sn->ops));
	sn->bufs = calloc(cap, sizeof(*sn->bufs));
	if (!keys || !sn->ops || !sn->bufs)
		goto out;
	for (size_t i = 0; i < sn->n; i++)
		keys[i] = (struct keyed){sn->items[i]->path, i};
	qsort(keys, sn->n, sizeof(*keys), keyed_cmp);
	for (size_t i = 0; i < sn->n;) {
		size_t j = i, len = 0, o = 0;
		char *buf;

		while (j < sn->n && !strcmp(keys[j].path, keys[i].path))
			len += sn->items[keys[j++].i]->len;
		buf = malloc(len);
		if (!buf)
			goto out;
		for (size_t m = i; m < j; m++) {
			const struct exp_pending *p = sn->items[keys[m].i];

			memcpy(buf + o, p->line, p->len);
			o += p->len;
		}
		sn->bufs[sn->n_ops] = buf;
		sn->ops[sn->n_ops++] = (struct shard_append){
			.path = keys[i].path, .data = buf, .len = len};
		i = j;
	}
	rc = shards_append(&xs->files, sn->ops, sn->n_ops, sync, sync, errmsg,
			   errn);
	sn->appended = true;
	for (size_t i = 0, op = 0; i < sn->n; i++) {
		struct exp_pending *p = sn->items[keys[i].i];

		while (strcmp(sn->ops[op].path, p->path) != 0)
			op++;
		p->written = sn->ops[op].rc == 0;
	}
out:
	if (!sn->appended)
		errmsg_set(errmsg, errn, "out of memory");
	free(keys);
	return rc;
}

static bool stamp_eq(const struct vmdir_stamp *a, const struct vmdir_stamp *b)
{
	return a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

/* The pass is over: shards appended to have a new stamp, unless someone
 * else changed them since we last knew them (then the old stamp stays,
 * and the next rescan reads what they wrote); the lines of those that
 * failed or were left to git are pending again, before any newer ones. */
static void written(struct store_kind *k, void *snap, int rc)
{
	struct experiences *xs = of(k);
	struct snapshot *sn = snap;
	struct exp_pending *head = NULL, *last = NULL;
	size_t again = 0;

	for (size_t i = 0; sn->appended && i < sn->n_ops; i++) {
		struct exp_shard *sh;

		if (sn->ops[i].rc != 0)
			continue;
		sh = shard_get(xs, sn->ops[i].path, false);
		if (sh && stamp_eq(&sh->stamp, &sn->ops[i].before))
			sh->stamp = sn->ops[i].stamp;
	}
	for (size_t i = 0; i < sn->n; i++) {
		struct exp_pending *p = sn->items[i];

		if (rc == 0 || p->written)
			continue;
		sn->items[i] = NULL;
		p->next = NULL;
		if (last)
			last->next = p;
		else
			head = p;
		last = p;
		again++;
	}
	if (head) {
		last->next = xs->pending;
		if (!xs->pending)
			xs->pending_tail = last;
		xs->pending = head;
		xs->n_pending += again;
	}
	snapshot_free(sn);
}

static int sync_files(struct store_kind *k, char *errmsg, size_t n)
{
	return shards_sync(&of(k)->files, errmsg, n);
}

/* ---- reload ---- */

/* A shard as the loop knew it when the rescan began. */
struct known {
	char *path;
	struct vmdir_stamp stamp;
	bool seen;    /* found on disk (worker) */
	bool changed; /* with another stamp: read again, or a probe's */
};

/* A shard the worker read (or, in a probe, only found changed). */
struct found_line {
	struct exp_line l;
	char *raw; /* a record's bytes (malloc'd) */
	size_t len;
};

struct found {
	char *path;
	struct vmdir_stamp stamp;
	struct found_line *lines;
	size_t n;
};

struct rescan_job {
	struct experiences *xs; /* its files only, in the worker */
	bool probe;
	struct known *known; /* sorted by path */
	size_t n_known;
	struct found *found;
	size_t n_found, cap_found;
	struct found_line *cur; /* lines of the shard being read */
	size_t n_cur, cap_cur;
	char **moved; /* files below experiences/ that a quarantine changed
			 or took away (to commit) */
	size_t n_moved;
};

static void found_lines_free(struct found_line *lines, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		exp_line_done(&lines[i].l);
		free(lines[i].raw);
	}
	free(lines);
}

static void rescan_job_free(struct rescan_job *j)
{
	for (size_t i = 0; i < j->n_known; i++)
		free(j->known[i].path);
	free(j->known);
	for (size_t i = 0; i < j->n_found; i++) {
		free(j->found[i].path);
		found_lines_free(j->found[i].lines, j->found[i].n);
	}
	free(j->found);
	found_lines_free(j->cur, j->n_cur);
	for (size_t i = 0; i < j->n_moved; i++)
		free(j->moved[i]);
	free(j->moved);
	free(j);
}

static int known_cmp(const void *a, const void *b)
{
	return strcmp(((const struct known *)a)->path,
		      ((const struct known *)b)->path);
}

/* Every shard is looked at whatever the mode: they are few. */
static int rescan_begin(struct store_kind *k, enum rescan_mode mode, void **out)
{
	struct experiences *xs = of(k);
	struct rescan_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->xs = xs;
	j->probe = mode != RESCAN_RELOAD;
	j->known = calloc(xs->n_shards ? xs->n_shards : 1, sizeof(*j->known));
	if (!j->known) {
		free(j);
		return -ENOMEM;
	}
	for (size_t i = 0; i < xs->n_shards; i++) {
		j->known[i].path = strdup(xs->shards[i]->path);
		j->known[i].stamp = xs->shards[i]->stamp;
		j->n_known++;
		if (!j->known[i].path) {
			rescan_job_free(j);
			return -ENOMEM;
		}
	}
	qsort(j->known, j->n_known, sizeof(*j->known), known_cmp);
	*out = j;
	return 0;
}

static struct known *known_find(struct rescan_job *j, const char *path)
{
	struct known key = {(char *)path, {0}, false, false};

	return j->n_known ? bsearch(&key, j->known, j->n_known,
				    sizeof(*j->known), known_cmp)
			  : NULL;
}

static bool rescan_known_cb(void *ctx, const char *path,
			    const struct vmdir_stamp *st)
{
	struct known *kn = known_find(ctx, path);

	if (!kn || !stamp_eq(&kn->stamp, st))
		return false;
	kn->seen = true;
	return true;
}

static int rescan_line_cb(void *ctx, struct exp_line *l, const char *raw,
			  size_t len)
{
	struct rescan_job *j = ctx;
	struct found_line *fl;

	if (grow_array((void **)&j->cur, &j->cap_cur, j->n_cur + 1,
		       sizeof(*j->cur)) < 0)
		return -ENOMEM;
	fl = &j->cur[j->n_cur];
	memset(fl, 0, sizeof(*fl));
	if (!l->is_tombstone) {
		fl->raw = malloc(len + 1);
		if (!fl->raw)
			return -ENOMEM;
		memcpy(fl->raw, raw, len);
		fl->raw[len] = '\0';
		fl->len = len;
	}
	fl->l = *l;
	j->n_cur++;
	return 0;
}

static int rescan_shard_cb(void *ctx, const char *path,
			   const struct vmdir_stamp *st)
{
	struct rescan_job *j = ctx;
	struct known *kn = known_find(j, path);
	struct found *f;

	if (kn)
		kn->seen = kn->changed = true;
	if (grow_array((void **)&j->found, &j->cap_found, j->n_found + 1,
		       sizeof(*j->found)) < 0)
		return -ENOMEM;
	f = &j->found[j->n_found];
	f->path = strdup(path);
	if (!f->path)
		return -ENOMEM;
	f->stamp = *st;
	f->lines = j->cur;
	f->n = j->n_cur;
	j->cur = NULL;
	j->n_cur = j->cap_cur = 0;
	j->n_found++;
	return 0;
}

/* Blocking: stat every shard, read those whose stamp changed (a probe
 * reads none). */
static int rescan(struct store_kind *k, void *job,
		  struct vmdir_load_report *rep, char *errmsg, size_t n)
{
	struct rescan_job *j = job;
	const struct shards_visit v = {
		.known = rescan_known_cb,
		.line = j->probe ? NULL : rescan_line_cb,
		.shard = rescan_shard_cb,
		.ctx = j,
		.mode = j->probe ? VMDIR_PROBE : VMDIR_RELOAD,
		.interrupt = conflicts_interrupt,
		.interrupt_ctx = of(k)->conflicts,
	};

	static const char prefix[] = VMDIR_DIRNAME "/" VMDIR_EXPERIENCES "/";
	int rc = shards_scan(&of(k)->files, &v, rep, errmsg, n);

	/* What a quarantine changed in the tree goes into the next commit. */
	j->moved = calloc(rep->n_quarantined ? rep->n_quarantined : 1,
			  sizeof(*j->moved));
	for (size_t i = 0; j->moved && i < rep->n_quarantined; i++) {
		const char *path = rep->quarantined[i].path;

		if (strncmp(path, prefix, sizeof(prefix) - 1) == 0 &&
		    (j->moved[j->n_moved] = strdup(path + sizeof(prefix) - 1)))
			j->n_moved++;
	}
	return rc;
}

/* Docs whose counts a reload changed, each with its record as read
 * when a line brought it (for its activation), else NULL. */
struct touched {
	uint32_t *v;
	const struct experience **rec;
	size_t n, cap, cap_rec;
};

static int touch(struct touched *t, uint32_t doc, const struct experience *rec)
{
	if (grow_array((void **)&t->rec, &t->cap_rec, t->n + 1,
		       sizeof(*t->rec)) < 0)
		return -ENOMEM;
	t->rec[t->n] = rec;
	return push(&t->v, &t->n, &t->cap, doc);
}

/* A shard's lines counted out (it changed or went). */
static int count_out(struct experiences *xs, struct exp_shard *sh,
		     struct touched *t)
{
	for (size_t i = 0; i < sh->n_recs; i++) {
		xs->ix.docs[sh->recs[i]].rec_refs--;
		if (touch(t, sh->recs[i], NULL) < 0)
			return -ENOMEM;
	}
	for (size_t i = 0; i < sh->n_tombs; i++) {
		xs->ix.docs[sh->tombs[i]].tomb_refs--;
		if (touch(t, sh->tombs[i], NULL) < 0)
			return -ENOMEM;
	}
	sh->n_recs = sh->n_tombs = 0;
	return 0;
}

/* A shard read anew: its lines counted in. */
static int count_in(struct experiences *xs, struct found *f, struct touched *t)
{
	struct exp_shard *sh = shard_get(xs, f->path, true);

	if (!sh)
		return -ENOMEM;
	sh->stamp = f->stamp;
	open_saw(xs, f->path, (uint64_t)f->stamp.size);
	for (size_t i = 0; i < f->n; i++) {
		struct found_line *fl = &f->lines[i];
		const struct experience *rec = brought(xs, &fl->l);
		long doc = take_line(xs, &fl->l, fl->raw, fl->len);
		int rc = doc < 0 ? (int)doc : 0;

		if (rc == 0)
			rc = fl->l.is_tombstone
				     ? push(&sh->tombs, &sh->n_tombs,
					    &sh->cap_tombs, (uint32_t)doc)
				     : push(&sh->recs, &sh->n_recs,
					    &sh->cap_recs, (uint32_t)doc);
		if (rc == 0)
			rc = touch(t, (uint32_t)doc, rec);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* A probe's verdict: a shard changed, appeared or went. */
static bool probe_changed(const struct rescan_job *j)
{
	if (j->n_found)
		return true;
	for (size_t i = 0; i < j->n_known; i++)
		if (!j->known[i].seen)
			return true;
	return false;
}

/*
 * A reload: every changed or vanished shard counted out, every read one
 * counted in, then every doc touched made live or not as its counts say
 * (reported). Shards whose bad lines were taken out are reported as
 * changed files (for the next commit).
 */
static int reload_apply(struct experiences *xs, struct rescan_job *j)
{
	struct touched t = {0};
	int rc = 0;

	for (size_t i = 0; i < j->n_known && rc == 0; i++) {
		struct exp_shard *sh = shard_get(xs, j->known[i].path, false);

		if (!sh || (j->known[i].seen && !j->known[i].changed))
			continue;
		rc = count_out(xs, sh, &t);
		if (rc == 0 && !j->known[i].seen)
			shard_drop(xs, sh); /* gone */
	}
	for (size_t i = 0; i < j->n_found && rc == 0; i++)
		rc = count_in(xs, &j->found[i], &t);
	for (size_t i = 0; i < t.n; i++) {
		int src = settle(xs, t.v[i], t.rec[i], true);

		if (src < 0 && rc == 0)
			rc = src;
	}
	free(t.v);
	free(t.rec);
	if (rc < 0)
		log_err("out of memory while reloading the experiences: the "
			"index may differ from the shards until the next "
			"reload");
	return rc;
}

static int rescan_end(struct store_kind *k, void *job, int rc, bool probe,
		      const struct vmdir_load_report *rep)
{
	struct experiences *xs = of(k);
	struct rescan_job *j = job;
	int changed = 0;

	if (rc == 0 && probe)
		changed = probe_changed(j) || rep->unusable > 0;
	else if (rc == 0)
		reload_apply(xs, j);
	for (size_t i = 0; i < j->n_moved; i++)
		report(xs, KIND_RELOADED, UINT32_MAX, j->moved[i]);
	rescan_job_free(j);
	return changed;
}

const struct kind experience_kind = {
	.name = "experience",
	.committed = true,
	.log_tag = EXPERIENCE_LOG_TAG,
	.lock = lock,
	.prepare = prepare,
	.unprepare = unprepare,
	.apply = apply,
	.replay = replay,
	.load = load,
	.pending = pending,
	.snapshot = snapshot,
	.write = write_files,
	.written = written,
	.sync = sync_files,
	.rescan_begin = rescan_begin,
	.rescan = rescan,
	.rescan_end = rescan_end,
};

/* ---- set-up ---- */

int experiences_init(struct experiences *xs, const char *root,
		     const struct statedir *state)
{
	int rc;

	memset(xs, 0, sizeof(*xs));
	xs->sk.kind = &experience_kind;
	xs->shard_max = EXPERIENCE_SHARD_MAX_DEFAULT;
	rc = expindex_init(&xs->ix);
	if (rc < 0)
		return rc;
	return shards_init(&xs->files, root, state);
}

void experiences_done(struct experiences *xs)
{
	expindex_done(&xs->ix);
	shards_done(&xs->files);
	for (size_t i = 0; i < xs->n_shards; i++)
		shard_free(xs->shards[i]);
	free(xs->shards);
	free(xs->shard_table);
	opens_clear(xs);
	pending_free(xs->pending);
	memset(xs, 0, sizeof(*xs));
}

/*
 * Documents as a record kind (see document.h; the table's contract is in
 * kind.h).
 *
 * Invariants: the index holds only what the log made durable; every
 * applied payload is in the segments or queued for them (localseg); the
 * vector index holds exactly the vectors of the documents that have one
 * (from load on: before it, they wait in boot); at most one graph build
 * runs, and none once the stop began.
 */
#include "document.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errmsg.h"
#include "log.h"
#include "progress.h"
#include "protocol/errors.h"
#include "uuid.h"

#define STORE_DOCS     2 /* stores: */
#define S_DOCS	       0
#define S_VECTORS      1
#define SETTINGS       "settings"
#define SAVE_EVERY_MS  30000
#define INDEX_FILE_MAX ((size_t)1 << 40)

static struct documents *of(struct store_kind *k)
{
	return KIND_CONTAINER(k, struct documents, sk);
}

static struct doc_write *dw_of(struct store_write *w)
{
	return KIND_CONTAINER(w, struct doc_write, w);
}

/* ---- start-up vectors ---- */

struct bootvec {
	uint8_t id[REC_KEY]; /* first: the idmap's key */
	size_t row;
};

static float *boot_row(const struct documents *ds, size_t row)
{
	return ds->boot.v + row * ds->vopts.dim;
}

/* A row's vector as the index takes it. */
static struct vindex_unit boot_unit(const struct documents *ds, size_t row)
{
	return (struct vindex_unit){boot_row(ds, row), ds->boot.norm[row],
				    ds->boot.hash[row]};
}

static int boot_grow(struct docboot *b, uint32_t dim)
{
	size_t cap = b->cap ? b->cap * 2 : 1024;
	float *v = realloc(b->v, cap * dim * sizeof(float)), *norm;
	uint64_t *hash;

	if (!v)
		return -ENOMEM;
	b->v = v;
	norm = realloc(b->norm, cap * sizeof(*norm));
	if (!norm)
		return -ENOMEM;
	b->norm = norm;
	hash = realloc(b->hash, cap * sizeof(*hash));
	if (!hash)
		return -ENOMEM;
	b->hash = hash;
	b->cap = cap;
	return 0;
}

/*
 * Keep an embedding record's vector, made ready for the index here: the
 * documents are read on a thread of their own at start-up, and the
 * normalising and hashing of every vector is most of vindex_load's work.
 */
static int boot_put(struct documents *ds, const uint8_t *id,
		    const struct rec_embedding *e, char *msg, size_t n)
{
	struct docboot *b = &ds->boot;
	struct bootvec *bv = idmap_get(&b->map, id);
	float *row;

	if (!bv) {
		if (b->rows == b->cap && boot_grow(b, ds->vopts.dim) < 0)
			return -ENOMEM;
		bv = malloc(sizeof(*bv));
		if (!bv)
			return -ENOMEM;
		memcpy(bv->id, id, REC_KEY);
		bv->row = b->rows;
		if (idmap_put(&b->map, bv, NULL) < 0) {
			free(bv);
			return -ENOMEM;
		}
		b->rows++;
	}
	row = boot_row(ds, bv->row);
	rec_embedding_values(e, row);
	return vindex_unit_make(ds->vopts.dim, row, row, &b->norm[bv->row],
				&b->hash[bv->row], msg, n);
}

static void boot_del(struct documents *ds, const uint8_t *id)
{
	free(idmap_del(&ds->boot.map, id)); /* its row stays unused */
}

static void boot_free(struct documents *ds)
{
	struct idmap *m = &ds->boot.map;

	for (size_t i = 0; i < m->cap; i++)
		free(m->tab[i]);
	idmap_done(m);
	free(ds->boot.v);
	free(ds->boot.norm);
	free(ds->boot.hash);
	memset(&ds->boot, 0, sizeof(ds->boot));
}

/* ---- operations on the index (apply, replay, load) ---- */

struct apply_ctx {
	struct documents *ds;
	char *msg;
	size_t n;
};

static int apply_vector(struct apply_ctx *a, const uint8_t *id,
			const struct rec_embedding *e)
{
	struct documents *ds = a->ds;
	float *v;
	int ret;

	if (e->dim != ds->vopts.dim) {
		errmsg_set(a->msg, a->n,
			   "an embedding of %u numbers; embedding_dim is %u",
			   e->dim, ds->vopts.dim);
		return -EINVAL;
	}
	if (ds->booting)
		return boot_put(ds, id, e, a->msg, a->n);
	v = malloc(e->dim * sizeof(*v));
	if (!v)
		return -ENOMEM;
	rec_embedding_values(e, v);
	if (docindex_get(&ds->ix, id) &&
	    vindex_has(ds->ix.vi, docindex_get(&ds->ix, id)->slot))
		ds->removed_since_save = true;
	ret = docindex_set_vector(&ds->ix, id, v, a->msg, a->n);
	free(v);
	if (ret == 0)
		ds->changes++;
	return ret == -ENOENT ? 0 : ret; /* no document: nothing to index */
}

static int apply_op(void *arg, const struct logop *op)
{
	struct apply_ctx *a = arg;
	struct documents *ds = a->ds;
	struct doc *d = docindex_get(&ds->ix, op->key);
	struct rec_document r;
	struct rec_embedding e;
	int ret;

	if (op->store == S_DOCS && op->op == LOGOP_DEL) {
		if (d && vindex_has(ds->ix.vi, d->slot)) {
			ds->removed_since_save = true;
			ds->changes++;
		}
		docindex_del(&ds->ix, op->key);
		if (ds->booting)
			boot_del(ds, op->key);
		return 0;
	}
	if (op->store == S_VECTORS && op->op == LOGOP_DEL) {
		if (ds->booting) {
			boot_del(ds, op->key);
		} else if (d && vindex_has(ds->ix.vi, d->slot)) {
			docindex_set_vector(&ds->ix, op->key, NULL, NULL, 0);
			ds->removed_since_save = true;
			ds->changes++;
		}
		return 0;
	}
	if (op->store == S_VECTORS) {
		ret = rec_embedding_decode(op->payload, op->len, &e, a->msg,
					   a->n);
		return ret ? ret : apply_vector(a, op->key, &e);
	}
	ret = rec_document_decode(op->payload, op->len, &r, a->msg, a->n);
	if (ret == 0)
		ret = docindex_put(&ds->ix, op->key, &r);
	if (ret == -EINVAL)
		errmsg_set(a->msg, a->n,
			   "a document whose metadata is not "
			   "a JSON object");
	if (ret == -ENOMEM)
		errmsg_set(a->msg, a->n, "out of memory");
	return ret;
}

/* ---- the graph build ---- */

static void job_start(struct documents *ds);
static void request_save(struct documents *ds);

static void job_work_cb(uv_work_t *req)
{
	struct documents *ds = req->data;

	vindex_job_run(ds->job);
}

static void maybe_build(struct documents *ds)
{
	if (ds->job || ds->stopping || ds->booting)
		return;
	if (vindex_job_plan(ds->ix.vi, &ds->job) == 1)
		job_start(ds);
	else
		ds->job = NULL;
}

static void job_after_cb(uv_work_t *req, int status)
{
	struct documents *ds = req->data;
	char msg[160] = "";
	int ret;

	if (ds->stopping || status < 0) {
		vindex_job_free(ds->ix.vi, ds->job);
		ds->job = NULL;
		return;
	}
	ret = vindex_job_finish(ds->ix.vi, ds->job, msg, sizeof(msg));
	if (ret == 1) {
		job_start(ds); /* rows came meanwhile: another round */
		return;
	}
	ds->job = NULL;
	if (ret < 0) {
		snprintf(ds->last_error, sizeof(ds->last_error),
			 "building the vector index: %s", msg);
		log_err("documents: %s", ds->last_error);
		return;
	}
	ds->changes++;
	ds->published_since_save = true;
	request_save(ds);
	if (!strcmp(ds->index_state, "rebuilding")) {
		snprintf(ds->index_state, sizeof(ds->index_state), "rebuilt");
		log_info("documents: the vector index is rebuilt");
	}
	maybe_build(ds);
}

static void job_start(struct documents *ds)
{
	ds->job_req.data = ds;
	if (uv_queue_work(ds->sk.store ? ds->sk.store->loop : ds->seg.loop,
			  &ds->job_req, job_work_cb, job_after_cb) < 0) {
		vindex_job_free(ds->ix.vi, ds->job);
		ds->job = NULL;
	}
}

/* ---- a write ---- */

static int lock(struct store_kind *k, const struct store_write *w,
		struct kind_lock *out)
{
	const struct doc_write *dw = KIND_CONTAINER(w, struct doc_write, w);

	(void)k;
	if (dw->op == DOC_STORE)
		return 0; /* a new random id */
	out->slot = 0;
	out->key = dw->key;
	out->key_len = UUID_TEXT_LEN;
	return 1;
}

static bool put_doc(struct doc_write *dw, const struct rec_document *r)
{
	uint8_t *p =
		logpay_put(&dw->payload, S_DOCS, dw->id, rec_document_size(r));

	if (p)
		rec_document_encode(r, p);
	return p != NULL;
}

static bool put_vector(struct documents *ds, struct doc_write *dw)
{
	uint8_t *p = logpay_put(&dw->payload, S_VECTORS, dw->id,
				rec_embedding_size(ds->vopts.dim));

	if (p)
		rec_embedding_encode(ds->vopts.dim, dw->embedding, p);
	return p != NULL;
}

static int prepare(struct store_kind *k, struct store_write *w, char *msg,
		   size_t n)
{
	struct documents *ds = of(k);
	struct doc_write *dw = dw_of(w);
	const struct doc *d = NULL;
	struct rec_document r;
	bool ok = logpay_begin(&dw->payload, DOCUMENT_LOG_TAG);

	dw->d = NULL;
	dw->existed = false;
	if (dw->op != DOC_STORE) {
		d = docindex_get(&ds->ix, dw->id);
		if (!d) {
			buf_done(&dw->payload);
			return KIND_NOOP;
		}
		dw->existed = true;
	}
	switch (dw->op) {
	case DOC_STORE:
		do
			uuid_new(dw->id);
		while (docindex_get(&ds->ix, dw->id));
		r.created_at = r.updated_at = store_timestamp(k);
		r.content = dw->content;
		r.content_len = dw->content_len;
		r.meta = dw->meta;
		r.meta_len = dw->meta_len;
		ok = ok && put_doc(dw, &r);
		if (dw->embedding)
			ok = ok && put_vector(ds, dw);
		break;
	case DOC_UPDATE:
		r.created_at = d->created_at;
		r.updated_at = store_timestamp(k);
		r.content = dw->has_content ? dw->content : d->data;
		r.content_len =
			dw->has_content ? dw->content_len : d->content_len;
		r.meta = dw->has_meta ? dw->meta : d->data + d->content_len;
		r.meta_len = dw->has_meta ? dw->meta_len : d->meta_len;
		ok = ok && put_doc(dw, &r);
		if (dw->embedding)
			ok = ok && put_vector(ds, dw);
		else if (dw->clear_embedding)
			ok = ok && logpay_del(&dw->payload, S_VECTORS, dw->id);
		break;
	case DOC_DELETE:
		ok = ok && logpay_del(&dw->payload, S_DOCS, dw->id) &&
		     logpay_del(&dw->payload, S_VECTORS, dw->id);
		break;
	}
	if (!ok) {
		buf_done(&dw->payload);
		snprintf(msg, n, "out of memory");
		return RPC_INTERNAL_ERROR;
	}
	w->payload = dw->payload.data;
	w->payload_len = dw->payload.len;
	return KIND_LOG;
}

static void unprepare(struct store_kind *k, struct store_write *w)
{
	(void)k;
	buf_done(&dw_of(w)->payload);
}

static void apply(struct store_kind *k, struct store_write *w)
{
	struct documents *ds = of(k);
	struct doc_write *dw = dw_of(w);
	char msg[160];
	struct apply_ctx a = {ds, msg, sizeof(msg)};
	struct doc_change ch;
	uint8_t *payload;
	size_t len;

	if (logpay_parse(w->payload, w->payload_len, DOCUMENT_LOG_TAG,
			 STORE_DOCS, apply_op, &a, msg, sizeof(msg)) < 0)
		log_err("documents: applying a write: %s (restart vmemd to "
			"get it back from the log)",
			msg);
	dw->d = docindex_get(&ds->ix, dw->id);
	ch.what = dw->op == DOC_STORE	 ? DOC_STORED
		  : dw->op == DOC_UPDATE ? DOC_UPDATED
					 : DOC_DELETED;
	ch.id = dw->id;
	ch.d = dw->d;
	store_changed(k, ch.what == DOC_DELETED ? KIND_DELETED : KIND_STORED,
		      &ch);
	payload = (uint8_t *)buf_take(&dw->payload, &len);
	if (!localseg_take(&ds->seg, payload, len))
		log_err("documents: out of memory queueing a write for the "
			"segments (the log keeps it until a restart)");
	maybe_build(ds);
}

/* ---- start-up ---- */

static int replay(struct store_kind *k, const char *payload, size_t len,
		  char *msg, size_t n)
{
	struct documents *ds = of(k);
	struct apply_ctx a = {ds, msg, n};
	int ret;

	ret = logpay_parse((const uint8_t *)payload, len, DOCUMENT_LOG_TAG,
			   STORE_DOCS, apply_op, &a, msg, n);
	if (ret < 0)
		return ret;
	if (!localseg_copy(&ds->seg, payload, len)) {
		errmsg_set(msg, n, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static int load_store(struct documents *ds, unsigned store, const uint8_t *key,
		      const void *payload, size_t len)
{
	struct logop op = {LOGOP_PUT, store, key, payload, len};
	char msg[160];
	struct apply_ctx a = {ds, msg, sizeof(msg)};
	int ret = apply_op(&a, &op);

	if (ret < 0) {
		log_err("documents: a segment record: %s", msg);
		return ret;
	}
	if (++ds->load_records % 16384 == 0 && progress_due())
		progress_say("reading documents: %llu records",
			     (unsigned long long)ds->load_records);
	return 0;
}

static int load_doc_cb(void *ctx, const uint8_t key[SEG_KEY],
		       const void *payload, size_t len)
{
	return load_store(ctx, S_DOCS, key, payload, len);
}

static int load_vec_cb(void *ctx, const uint8_t key[SEG_KEY],
		       const void *payload, size_t len)
{
	return load_store(ctx, S_VECTORS, key, payload, len);
}

/* vindex_load's view of the records: a document and its vector. */
static int lookup_cb(void *ctx, const uint8_t key[VINDEX_KEY], uint32_t *slot,
		     struct vindex_unit *u)
{
	struct documents *ds = ctx;
	const struct doc *d = docindex_get(&ds->ix, key);
	const struct bootvec *bv = idmap_get(&ds->boot.map, key);

	if (!d || !bv)
		return -ENOENT;
	*slot = d->slot;
	*u = boot_unit(ds, bv->row);
	return 0;
}

/* Embeddings whose document is gone (a damaged store): dropped, and
 * their records removed from the segments. */
static int drop_orphans(struct documents *ds)
{
	struct idmap *m = &ds->boot.map;
	struct buf b = {0};
	uint8_t *p;
	size_t len;

	for (size_t i = 0; i < m->cap; i++) {
		struct bootvec *bv = m->tab[i];

		if (!bv || docindex_get(&ds->ix, bv->id))
			continue;
		if ((b.len == 0 && !logpay_begin(&b, DOCUMENT_LOG_TAG)) ||
		    !logpay_del(&b, S_VECTORS, bv->id)) {
			buf_done(&b);
			return -ENOMEM;
		}
		ds->n_orphans++;
	}
	if (!ds->n_orphans)
		return 0;
	for (size_t i = 0; i < m->cap; i++) {
		struct bootvec *bv = m->tab[i];

		if (bv && !docindex_get(&ds->ix, bv->id)) {
			idmap_del(m, bv->id);
			free(bv);
			i--; /* a later entry may have shifted here */
		}
	}
	log_warn("documents: %zu embeddings had no document; dropped",
		 ds->n_orphans);
	p = (uint8_t *)buf_take(&b, &len);
	return localseg_take(&ds->seg, p, len) ? 0 : -ENOMEM;
}

/* Every start-up vector into the index (those it does not hold yet). */
static int index_boot(struct documents *ds, char *msg, size_t n)
{
	struct idmap *m = &ds->boot.map;

	for (size_t i = 0; i < m->cap; i++) {
		struct bootvec *bv = m->tab[i];
		const struct doc *d = bv ? docindex_get(&ds->ix, bv->id) : NULL;
		struct vindex_unit u;
		int ret;

		if (!d || vindex_has(ds->ix.vi, d->slot))
			continue;
		u = boot_unit(ds, bv->row);
		ret = vindex_put_unit(ds->ix.vi, d->slot, d->id, &u, msg, n);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* The newest time a document holds, for the store's clock. */
static int64_t newest(const struct docindex *ix)
{
	int64_t t = 0;

	for (uint32_t i = 0; i < ix->n_slots; i++)
		if (ix->slots[i] && ix->slots[i]->updated_at > t)
			t = ix->slots[i]->updated_at;
	return t;
}

/*
 * After the replay: the vector index from its file when the file still
 * describes the documents (rows added since its save join as the tail),
 * else from the vectors, with a graph rebuilt in the background.
 */
static int load(struct store_kind *k, struct vmdir_load_report *rep,
		char *errmsg, size_t n)
{
	struct documents *ds = of(k);
	struct vindex *vi = NULL;
	uint8_t *buf = NULL;
	size_t len = 0, records = 0;
	char why[256] = "";
	int ret;

	(void)rep;
	store_timestamp_seen(k, newest(&ds->ix));
	ret = drop_orphans(ds);
	if (ret < 0)
		goto oom;
	records = ds->boot.map.n;
	ret = vindex_read_file(&ds->seg.dir, DOCUMENT_INDEX, INDEX_FILE_MAX,
			       &buf, &len, why, sizeof(why));
	if (ret == 0)
		ret = vindex_load(&ds->vopts, buf, len, records, lookup_cb, ds,
				  &vi, why, sizeof(why));
	free(buf);
	if (ret == 0) {
		vindex_free(ds->ix.vi);
		ds->ix.vi = vi;
		snprintf(ds->index_state, sizeof(ds->index_state), "loaded");
		ds->saved_changes = ds->changes;
	} else if (records == 0) {
		snprintf(ds->index_state, sizeof(ds->index_state), "empty");
	} else {
		snprintf(ds->index_state, sizeof(ds->index_state),
			 "rebuilding");
		snprintf(ds->index_note, sizeof(ds->index_note),
			 "index file not used: %s",
			 ret == -ENOENT ? "absent" : why);
		log_warn("documents: the vector index file was not used (%s): "
			 "exact search serves while it is rebuilt",
			 ret == -ENOENT ? "absent" : why);
		/* Saved once it is whole again (at the latest at a stop). */
		ds->published_since_save = true;
		ds->changes++;
	}
	ret = index_boot(ds, why, sizeof(why));
	if (ret < 0) {
		errmsg_set(errmsg, n, "documents: %s", why);
		return ret;
	}
	if (ds->index_state[0] == 'l' && vindex_count(ds->ix.vi) != records)
		snprintf(ds->index_note, sizeof(ds->index_note),
			 "%zu documents stored since its last save were "
			 "added to it",
			 records - (size_t)vindex_count(ds->ix.vi));
	boot_free(ds);
	ds->booting = false;
	maybe_build(ds);
	if (!ds->job && !strcmp(ds->index_state, "rebuilding"))
		/* Too few vectors for a graph: exact search is the index. */
		snprintf(ds->index_state, sizeof(ds->index_state), "rebuilt");
	return 0;
oom:
	errmsg_set(errmsg, n, "out of memory");
	return -ENOMEM;
}

/* ---- the settings file: the dimension of the tree's embeddings ---- */

static int settings_read(const struct statedir *dir, uint32_t *dim, char *msg,
			 size_t n)
{
	char text[64];
	unsigned long v;
	ssize_t got;
	int fd = statedir_open(dir, SETTINGS, O_RDONLY, 0, msg, n);

	if (fd < 0)
		return fd;
	got = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (got < 0) {
		errmsg_set(msg, n, "read documents/%s: %s", SETTINGS,
			   strerror(errno));
		return -EIO;
	}
	text[got] = '\0';
	if (sscanf(text, "embedding_dim %lu\n", &v) != 1 || v == 0 ||
	    v > VECTOR_DIM_MAX) {
		errmsg_set(msg, n, "documents/%s is damaged", SETTINGS);
		return -EBADMSG;
	}
	*dim = (uint32_t)v;
	return 0;
}

static int settings_write(const struct statedir *dir, uint32_t dim, char *msg,
			  size_t n)
{
	char text[64];
	int len = snprintf(text, sizeof(text), "embedding_dim %u\n", dim);
	int fd, ret = 0;

	statedir_unlink(dir, SETTINGS ".tmp");
	fd = statedir_open(dir, SETTINGS ".tmp", O_WRONLY | O_CREAT | O_EXCL,
			   0600, msg, n);
	if (fd < 0)
		return fd;
	if (write(fd, text, (size_t)len) != len || fdatasync(fd) < 0)
		ret = -errno ? -errno : -EIO;
	close(fd);
	if (ret == 0)
		ret = statedir_rename(dir, SETTINGS ".tmp", SETTINGS);
	if (ret == 0)
		ret = statedir_sync(dir);
	if (ret < 0)
		errmsg_set(msg, n, "write documents/%s: %s", SETTINGS,
			   strerror(-ret));
	return ret;
}

int documents_open(struct documents *ds, uv_loop_t *loop,
		   const struct statedir *state, uint32_t dim, char *msg,
		   size_t msglen)
{
	static const char *const stores[STORE_DOCS] = {"docs", "vectors"};
	static const seg_load_fn loads[STORE_DOCS] = {load_doc_cb, load_vec_cb};
	struct statedir dir = {.fd = -1};
	uint32_t had = 0;
	int ret;

	memset(ds, 0, sizeof(*ds));
	ds->sk.kind = &document_kind;
	ds->booting = true;
	if (uv_timer_init(loop, &ds->save_timer) == 0) {
		ds->save_timer.data = ds;
		ds->save_timer_open = true;
	}
	ds->seg.dir.fd = -1;
	idmap_init(&ds->boot.map);
	vindex_opts_default(&ds->vopts, dim);
	if (docindex_init(&ds->ix, &ds->vopts) < 0) {
		errmsg_set(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	/* The dimension first: never read vectors of another one. */
	ret = statedir_sub(state, DOCUMENT_DIR, true, &dir, msg, msglen);
	if (ret < 0)
		return ret;
	ret = settings_read(&dir, &had, msg, msglen);
	statedir_done(&dir);
	if (ret < 0 && ret != -ENOENT)
		return ret;
	ret = localseg_open(&ds->seg, loop, state, DOCUMENT_DIR, stores,
			    STORE_DOCS, DOCUMENT_LOG_TAG, NULL, loads, ds, msg,
			    msglen);
	if (ret == -EINVAL && had && had != dim)
		errmsg_set(msg, msglen,
			   "embedding_dim is %u, but the documents of this "
			   "tree were stored with embedding_dim %u: set "
			   "embedding_dim = %u (or move %s/%s away to start "
			   "afresh)",
			   dim, had, had, state->path, DOCUMENT_DIR);
	if (ret < 0)
		return ret;
	if (ds->seg.last_error[0])
		log_warn("documents: %s", ds->seg.last_error);
	if (had != dim) {
		if (had && ds->ix.n_docs > 0) {
			errmsg_set(msg, msglen,
				   "embedding_dim is %u, but the documents of "
				   "this tree were stored with embedding_dim "
				   "%u: set embedding_dim = %u (or move %s/%s "
				   "away to start afresh)",
				   dim, had, had, state->path, DOCUMENT_DIR);
			return -EINVAL;
		}
		ret = settings_write(&ds->seg.dir, dim, msg, msglen);
		if (ret < 0)
			return ret;
	}
	return 0;
}

void documents_stop(struct documents *ds)
{
	ds->stopping = true;
}

void documents_done(struct documents *ds)
{
	if (ds->job)
		vindex_job_free(ds->ix.vi, ds->job);
	ds->job = NULL;
	localseg_close(&ds->seg);
	boot_free(ds);
	docindex_done(&ds->ix);
}

/* ---- materialisation: segments, and the index file now and then ---- */

struct dsnap {
	void *seg;
	uint8_t *index; /* the index file's bytes, when it is saved */
	size_t index_len;
	uint64_t changes; /* as of the save */
	int index_rc;
	char index_msg[160];
};

static bool save_due(const struct documents *ds)
{
	uint64_t now;

	if (ds->saving || ds->booting || ds->changes == ds->saved_changes)
		return false;
	if (ds->stopping)
		return true;
	if (!ds->published_since_save || !ds->sk.store)
		return false;
	now = uv_now(ds->sk.store->loop);
	return ds->saves == 0 || now - ds->last_save_ms >= SAVE_EVERY_MS;
}

static void save_timer_cb(uv_timer_t *t)
{
	struct documents *ds = t->data;

	if (save_due(ds) && ds->sk.store)
		store_write_files_now(ds->sk.store);
}

/*
 * A published graph is worth saving: have a writer pass do it now, or
 * when the interval between saves has passed. (pending() alone would
 * wait for the next write, and keep the store from ever being idle.)
 */
static void request_save(struct documents *ds)
{
	uint64_t now, wait;

	if (!ds->sk.store || ds->stopping)
		return;
	if (save_due(ds)) {
		store_write_files_now(ds->sk.store);
		return;
	}
	if (!ds->save_timer_open ||
	    uv_is_active((uv_handle_t *)&ds->save_timer))
		return;
	now = uv_now(ds->sk.store->loop);
	wait = now - ds->last_save_ms >= SAVE_EVERY_MS
		       ? 0
		       : SAVE_EVERY_MS - (now - ds->last_save_ms);
	uv_timer_start(&ds->save_timer, save_timer_cb, wait, 0);
}

static size_t pending(const struct store_kind *k)
{
	const struct documents *ds = KIND_CONTAINER(k, struct documents, sk);

	return localseg_pending(&ds->seg) + (save_due(ds) ? 1 : 0);
}

static int snapshot(struct store_kind *k, void **out)
{
	struct documents *ds = of(k);
	struct dsnap *sn = calloc(1, sizeof(*sn));
	int ret;

	if (!sn)
		return -ENOMEM;
	ret = localseg_snapshot(&ds->seg, &sn->seg);
	if (ret < 0) {
		free(sn);
		return ret;
	}
	if (save_due(ds) &&
	    vindex_save_prepare(ds->ix.vi, &sn->index, &sn->index_len,
				sn->index_msg, sizeof(sn->index_msg)) == 0) {
		sn->changes = ds->changes;
		ds->saving = true;
	}
	*out = sn;
	return 0;
}

static int write_segs(struct store_kind *k, void *snap, bool sync, char *errmsg,
		      size_t n)
{
	struct documents *ds = of(k);
	struct dsnap *sn = snap;
	int ret = localseg_write(&ds->seg, sn->seg, sync, errmsg, n);

	/* The index file is a cache of the segments: its failure is
	 * reported, never a failure of the pass. */
	if (sn->index)
		sn->index_rc = vindex_write_file(
			&ds->seg.dir, DOCUMENT_INDEX, sn->index, sn->index_len,
			sn->index_msg, sizeof(sn->index_msg));
	return ret;
}

static void written(struct store_kind *k, void *snap, int rc)
{
	struct documents *ds = of(k);
	struct dsnap *sn = snap;

	localseg_written(&ds->seg, sn->seg, rc);
	if (sn->index) {
		ds->saving = false;
		ds->last_save_ms = uv_now(k->store->loop);
		if (sn->index_rc == 0) {
			ds->saved_changes = sn->changes;
			ds->saves++;
			if (ds->changes == sn->changes) {
				ds->published_since_save = false;
				ds->removed_since_save = false;
			}
		} else {
			snprintf(ds->last_error, sizeof(ds->last_error),
				 "saving the vector index: %s", sn->index_msg);
			log_err("documents: %s", ds->last_error);
		}
		free(sn->index);
		/* Builds published meanwhile: their save, in its time. */
		if (ds->published_since_save)
			request_save(ds);
	}
	free(sn);
}

static int sync_segs(struct store_kind *k, char *errmsg, size_t n)
{
	return localseg_sync(&of(k)->seg, errmsg, n);
}

const struct kind document_kind = {
	.name = "document",
	.committed = false,
	.log_tag = DOCUMENT_LOG_TAG,
	.lock = lock,
	.prepare = prepare,
	.unprepare = unprepare,
	.apply = apply,
	.replay = replay,
	.load = load,
	.pending = pending,
	.snapshot = snapshot,
	.write = write_segs,
	.written = written,
	.sync = sync_segs,
};

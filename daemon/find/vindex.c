/* See vindex.h. */
#include "vindex.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "grow.h"
#include "errmsg.h"
#include "hnsw.h"
#include "statedir.h"

/* What names a row: its record's key, and the hash of its unit vector
 * that the index file keeps (made when the row is, so a save hashes
 * nothing: at a full-size tree that was 600 MB read on the loop). */
struct row_id {
	uint8_t key[VINDEX_KEY];
	uint64_t hash;
};

struct vindex {
	struct vindex_opts o;
	struct vecset *vs;
	struct hnsw *g;	    /* published graph over rows [0, hnsw_count) */
	uint32_t *slot_row; /* slot -> row + 1, 0: no vector */
	size_t slot_cap;
	uint32_t *row_slot; /* row -> slot */
	struct row_id *row_id;
	size_t row_cap;
	struct vindex_job *job; /* the one running, if any */
};

/* Runs of one job before it is published whatever its tail. */
#define VINDEX_ROUNDS_MAX 4

struct vindex_job {
	bool compact;
	struct vecset *src; /* the owner's vecset when planned */
	uint32_t src_n;	    /* compact: source rows copied or listed */
	uint32_t *old;	    /* compact: new row -> source row */
	uint32_t n_old, cap_old;
	bool copied;	   /* compact: the first run copied the rows */
	struct vecset *vs; /* the rows the graph is over */
	struct hnsw *g;	   /* the job's graph, unpublished */
	uint32_t to;	   /* this run adds rows hnsw_count(g) .. to-1 */
	unsigned rounds;   /* runs so far */
	int err;
	char msg[160];
};

void vindex_opts_default(struct vindex_opts *o, uint32_t dim)
{
	*o = (struct vindex_opts){
		.dim = dim,
		.hnsw_min = 4096,
		.exact_cands_max = 8192,
		.tail_max = 256,
		.m = 16,
		.ef_construction = 100,
		.ef_search = 128,
	};
}

static const float *row_cb(void *ctx, uint32_t row)
{
	return vecset_row(ctx, row);
}

static struct hnsw_opts graph_opts(const struct vindex_opts *o)
{
	return (struct hnsw_opts){o->dim, o->m, o->ef_construction};
}

static bool opts_ok(const struct vindex_opts *o)
{
	return o->dim >= 1 && o->dim <= VECTOR_DIM_MAX && o->m >= 2 &&
	       o->m <= 256 && o->ef_construction >= 1 &&
	       o->ef_construction <= 4096 && o->ef_search >= 1 &&
	       o->ef_search <= 4096 && o->hnsw_min >= 1;
}

int vindex_new(const struct vindex_opts *o, struct vindex **out)
{
	struct vindex *vi;

	*out = NULL;
	if (!opts_ok(o))
		return -EINVAL;
	vi = calloc(1, sizeof(*vi));
	if (!vi)
		return -ENOMEM;
	vi->o = *o;
	vi->vs = vecset_new(o->dim);
	if (!vi->vs) {
		free(vi);
		return -ENOMEM;
	}
	*out = vi;
	return 0;
}

static void job_free(struct vindex_job *job)
{
	if (!job)
		return;
	hnsw_free(job->g);
	if (job->compact)
		vecset_free(job->vs);
	free(job->old);
	free(job);
}

void vindex_free(struct vindex *vi)
{
	if (!vi)
		return;
	job_free(vi->job);
	hnsw_free(vi->g);
	vecset_free(vi->vs);
	free(vi->slot_row);
	free(vi->row_slot);
	free(vi->row_id);
	free(vi);
}

/* Room for row r in the per-row arrays (both grow together). */
static int grow_rows(struct vindex *vi, size_t need)
{
	size_t cap = vi->row_cap;
	int ret;

	ret = grow_array((void **)&vi->row_slot, &cap, need, sizeof(uint32_t));
	if (ret < 0)
		return ret;
	cap = vi->row_cap;
	ret = grow_array((void **)&vi->row_id, &cap, need, sizeof(*vi->row_id));
	if (ret < 0)
		return ret;
	vi->row_cap = cap;
	return 0;
}

void vindex_set_ef(struct vindex *vi, unsigned ef)
{
	vi->o.ef_search = ef < 1 ? 1 : ef > 4096 ? 4096 : ef;
}

bool vindex_has(const struct vindex *vi, uint32_t slot)
{
	return slot < vi->slot_cap && vi->slot_row[slot];
}

uint32_t vindex_count(const struct vindex *vi)
{
	return vecset_live(vi->vs);
}

/* Room for slot and one more row; the slot in range. */
static int put_room(struct vindex *vi, uint32_t slot, char *msg, size_t msglen)
{
	int ret;

	if (slot == UINT32_MAX) {
		errmsg_set(msg, msglen, "slot out of range");
		return -EINVAL;
	}
	ret = grow_array((void **)&vi->slot_row, &vi->slot_cap,
			 (size_t)slot + 1, sizeof(uint32_t));
	if (ret == 0)
		ret = grow_rows(vi, (size_t)vecset_rows(vi->vs) + 1);
	if (ret < 0)
		errmsg_set(msg, msglen, "out of memory");
	return ret;
}

/* Row (just added, its unit vector hashing to hash) is now slot's, and
 * the slot's old row dead. */
static void put_row(struct vindex *vi, uint32_t slot,
		    const uint8_t key[VINDEX_KEY], uint32_t row, uint64_t hash)
{
	if (vi->slot_row[slot])
		vecset_kill(vi->vs, vi->slot_row[slot] - 1);
	vi->slot_row[slot] = row + 1;
	vi->row_slot[row] = slot;
	memcpy(vi->row_id[row].key, key, VINDEX_KEY);
	vi->row_id[row].hash = hash;
}

int vindex_put(struct vindex *vi, uint32_t slot, const uint8_t key[VINDEX_KEY],
	       const float *v, char *msg, size_t msglen)
{
	uint32_t row;
	int ret = put_room(vi, slot, msg, msglen);

	if (ret == 0)
		ret = vecset_add(vi->vs, v, &row, msg, msglen);
	if (ret == 0)
		put_row(vi, slot, key, row,
			vindex_unit_hash(vecset_row(vi->vs, row), vi->o.dim));
	return ret;
}

int vindex_put_unit(struct vindex *vi, uint32_t slot,
		    const uint8_t key[VINDEX_KEY], const struct vindex_unit *u,
		    char *msg, size_t msglen)
{
	uint32_t row;
	int ret = put_room(vi, slot, msg, msglen);

	if (ret == 0)
		ret = vecset_add_normalised(vi->vs, u->unit, u->norm, &row);
	if (ret == -ENOSPC)
		errmsg_set(msg, msglen, "at most %u vectors", VECSET_ROWS_MAX);
	else if (ret == -ENOMEM)
		errmsg_set(msg, msglen, "out of memory");
	if (ret == 0)
		put_row(vi, slot, key, row, u->hash);
	return ret;
}

bool vindex_vector(const struct vindex *vi, uint32_t slot, float *v)
{
	uint32_t row, i;
	const float *u;
	float norm;

	if (!vindex_has(vi, slot))
		return false;
	row = vi->slot_row[slot] - 1;
	u = vecset_row(vi->vs, row);
	norm = vecset_norm(vi->vs, row);
	for (i = 0; i < vi->o.dim; i++)
		v[i] = (float)((double)u[i] * (double)norm);
	return true;
}

int vindex_remove(struct vindex *vi, uint32_t slot)
{
	if (!vindex_has(vi, slot))
		return -ENOENT;
	vecset_kill(vi->vs, vi->slot_row[slot] - 1);
	vi->slot_row[slot] = 0;
	return 0;
}

void vindex_stats(const struct vindex *vi, struct vindex_stats *st)
{
	uint32_t gr = vi->g ? hnsw_count(vi->g) : 0;

	st->live = vecset_live(vi->vs);
	st->rows = vecset_rows(vi->vs);
	st->graph_rows = gr;
	st->tail_rows = st->rows - gr;
	st->vector_bytes = vecset_memory(vi->vs);
	st->graph_bytes = vi->g ? hnsw_memory(vi->g) : 0;
	st->map_bytes = vi->slot_cap * sizeof(uint32_t) +
			vi->row_cap * (sizeof(uint32_t) + VINDEX_KEY);
	st->building = vi->job != NULL;
}

/* ---- search ---- */

struct allow {
	const struct vecset *vs;
	const uint8_t *bits; /* candidate rows, or NULL: every live row */
};

static bool allow_cb(void *ctx, uint32_t row)
{
	const struct allow *a = ctx;

	if (!vecset_is_live(a->vs, row))
		return false;
	return !a->bits || (a->bits[row / 8] & (1u << (row % 8)));
}

static int search_exact(const struct vindex *vi, const float *q, size_t k,
			const uint32_t *rows, size_t n_rows,
			struct vec_hit *hits, size_t *n)
{
	return vecset_search(vi->vs, q, k, rows, n_rows, hits, n);
}

/*
 * Through the graph (rows allowed by a) and exactly over the tail rows
 * (those of rows_or_null at or past the graph's end, or all of them),
 * merged into the k best.
 */
static int search_graph(const struct vindex *vi, const float *q, size_t k,
			unsigned ef, struct allow *a, const uint32_t *rows,
			size_t n_rows, struct vec_hit *hits, size_t *n,
			char *msg, size_t msglen)
{
	uint32_t gc = hnsw_count(vi->g), total = vecset_rows(vi->vs), r;
	struct vec_hit *g = NULL, *t = NULL;
	uint32_t *tail = NULL;
	size_t ng = 0, nt = 0, ntail = 0, i;
	struct topk top;
	int ret = -ENOMEM;

	g = malloc(k * sizeof(*g));
	t = malloc(k * sizeof(*t));
	if (!g || !t)
		goto out;
	ret = hnsw_search(vi->g, q, k, ef, allow_cb, a, g, &ng, msg, msglen);
	if (ret < 0)
		goto out;
	if (rows) {
		tail = malloc((n_rows ? n_rows : 1) * sizeof(*tail));
		if (!tail) {
			ret = -ENOMEM;
			goto out;
		}
		for (i = 0; i < n_rows; i++)
			if (rows[i] >= gc)
				tail[ntail++] = rows[i];
	} else if (total > gc) {
		tail = malloc((size_t)(total - gc) * sizeof(*tail));
		if (!tail) {
			ret = -ENOMEM;
			goto out;
		}
		for (r = gc; r < total; r++)
			tail[ntail++] = r;
	}
	if (ntail) {
		ret = search_exact(vi, q, k, tail, ntail, t, &nt);
		if (ret < 0)
			goto out;
	}
	topk_init(&top, hits, k);
	for (i = 0; i < ng; i++)
		topk_push(&top, g[i].row, g[i].score);
	for (i = 0; i < nt; i++)
		topk_push(&top, t[i].row, t[i].score);
	*n = topk_finish(&top);
	ret = 0;
out:
	free(g);
	free(t);
	free(tail);
	return ret;
}

int vindex_search(const struct vindex *vi, const float *query, size_t k,
		  const uint32_t *cands, size_t n_cands, bool exact,
		  struct vindex_hit *out, size_t *n_out, enum vindex_path *path,
		  char *msg, size_t msglen)
{
	size_t stride = vector_stride(vi->o.dim), eligible, n = 0, want, i;
	uint32_t live = vecset_live(vi->vs), *rows = NULL;
	enum vindex_path how = VINDEX_EXACT;
	struct vec_hit *hits = NULL;
	uint8_t *bits = NULL;
	struct allow a = {vi->vs, NULL};
	float *q = NULL;
	unsigned ef;
	int ret;

	*n_out = 0;
	if (k == 0 || k > VECTOR_TOPK_MAX) {
		errmsg_set(msg, msglen, "top_k %zu is out of 1..%u", k,
			   VECTOR_TOPK_MAX);
		return -EINVAL;
	}
	ret = -ENOMEM;
	q = aligned_alloc(64, (stride * sizeof(float) + 63) / 64 * 64);
	hits = malloc(k * sizeof(*hits));
	if (!q || !hits) {
		errmsg_set(msg, msglen, "out of memory");
		goto out;
	}
	memset(q, 0, stride * sizeof(float));
	ret = vector_normalise(query, vi->o.dim, q, NULL, msg, msglen);
	if (ret < 0)
		goto out;

	eligible = live;
	if (cands) {
		rows = malloc((n_cands ? n_cands : 1) * sizeof(*rows));
		if (!rows) {
			ret = -ENOMEM;
			goto out;
		}
		eligible = 0;
		for (i = 0; i < n_cands; i++)
			if (vindex_has(vi, cands[i]))
				rows[eligible++] = vi->slot_row[cands[i]] - 1;
	}
	want = eligible < k ? eligible : k;
	ef = vi->o.ef_search > k ? vi->o.ef_search : (unsigned)k;

	if (exact || !vi->g || live < vi->o.hnsw_min ||
	    (cands && eligible <= vi->o.exact_cands_max)) {
		how = cands ? VINDEX_EXACT_CANDS : VINDEX_EXACT;
		ret = search_exact(vi, q, k, rows, eligible, hits, &n);
		goto done;
	}
	if (cands) {
		size_t scale = eligible ? live / eligible : 1;

		bits = calloc(vecset_rows(vi->vs) / 8 + 1, 1);
		if (!bits) {
			ret = -ENOMEM;
			goto out;
		}
		for (i = 0; i < eligible; i++)
			bits[rows[i] / 8] |= (uint8_t)(1u << (rows[i] % 8));
		a.bits = bits;
		/* A filter thins the graph: look at more candidates. */
		scale = scale < 1 ? 1 : scale > 16 ? 16 : scale;
		ef = ef * scale > 4096 ? 4096 : (unsigned)(ef * scale);
		if (ef < k)
			ef = (unsigned)k;
		how = VINDEX_GRAPH_FILTER;
	} else {
		how = VINDEX_GRAPH;
	}
	ret = search_graph(vi, q, k, ef, &a, rows, eligible, hits, &n, msg,
			   msglen);
	if (ret < 0)
		goto out;
	if (n < want) {
		/* The graph came short (a filter, many dead rows): exact. */
		how = VINDEX_FALLBACK;
		ret = search_exact(vi, q, k, rows, eligible, hits, &n);
	}
done:
	if (ret < 0)
		goto out;
	for (i = 0; i < n; i++) {
		out[i].slot = vi->row_slot[hits[i].row];
		out[i].score = hits[i].score;
	}
	*n_out = n;
	if (path)
		*path = how;
out:
	if (ret == -ENOMEM)
		errmsg_set(msg, msglen, "out of memory");
	free(q);
	free(hits);
	free(rows);
	free(bits);
	return ret;
}

/* ---- graph jobs ---- */

int vindex_job_plan(struct vindex *vi, struct vindex_job **out)
{
	uint32_t rows = vecset_rows(vi->vs), live = vecset_live(vi->vs);
	uint32_t gc = vi->g ? hnsw_count(vi->g) : 0, r;
	struct hnsw_opts go = graph_opts(&vi->o);
	struct vindex_job *job;
	uint8_t *bytes = NULL;
	size_t len = 0;
	bool compact;
	int ret;

	*out = NULL;
	if (vi->job)
		return 0;
	/* Dead rows are memory: compact them at any size. */
	compact = (uint64_t)(rows - live) * 3 > rows && rows >= 64;
	if (!compact && !vi->g && live < vi->o.hnsw_min)
		return 0;
	if (!compact && vi->g && rows - gc <= vi->o.tail_max)
		return 0;
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->compact = compact;
	job->src = vi->vs;
	if (compact) {
		job->cap_old = live ? live : 1;
		job->old = malloc(job->cap_old * sizeof(*job->old));
		job->vs = vecset_new(vi->o.dim);
		if (!job->old || !job->vs) {
			ret = -ENOMEM;
			goto fail;
		}
		/* The live rows now; later kills are applied at publishing. */
		for (r = 0; r < rows; r++)
			if (vecset_is_live(vi->vs, r))
				job->old[job->n_old++] = r;
		job->src_n = rows;
		job->to = job->n_old;
		/* Below the threshold the compacted rows get no graph. */
		ret = live < vi->o.hnsw_min
			      ? 0
			      : hnsw_new(&go, row_cb, job->vs, &job->g,
					 job->msg, sizeof(job->msg));
	} else if (vi->g) {
		/* Extend a copy of the published graph with the tail. */
		job->vs = vi->vs;
		job->to = rows;
		ret = hnsw_serialise(vi->g, &bytes, &len, job->msg,
				     sizeof(job->msg));
		if (ret == 0)
			ret = hnsw_deserialise(bytes, len, &go, row_cb, vi->vs,
					       &job->g, job->msg,
					       sizeof(job->msg));
		free(bytes);
	} else {
		job->vs = vi->vs;
		job->to = rows;
		ret = hnsw_new(&go, row_cb, vi->vs, &job->g, job->msg,
			       sizeof(job->msg));
	}
	if (ret < 0)
		goto fail;
	vi->job = job;
	*out = job;
	return 1;
fail:
	job_free(job);
	return ret;
}

void vindex_job_run(struct vindex_job *job)
{
	uint32_t i, have;

	if (job->err)
		return;
	if (job->compact && !job->copied) {
		for (i = 0; i < job->n_old; i++) {
			job->err = vecset_add_normalised(
				job->vs, vecset_row(job->src, job->old[i]),
				vecset_norm(job->src, job->old[i]), NULL);
			if (job->err < 0) {
				errmsg_set(job->msg, sizeof(job->msg),
					   "copying rows: %s",
					   strerror(-job->err));
				return;
			}
		}
		job->copied = true;
	}
	have = job->g ? hnsw_count(job->g) : 0;
	if (job->g && job->to > have)
		job->err = hnsw_add(job->g, job->to - have, job->msg,
				    sizeof(job->msg));
}

/* Compact: append the source rows added since the last look. */
static int catch_up_rows(struct vindex *vi, struct vindex_job *job)
{
	uint32_t rows = vecset_rows(vi->vs), r;
	void *p;
	int ret;

	for (r = job->src_n; r < rows; r++) {
		if (!vecset_is_live(vi->vs, r))
			continue;
		if (job->n_old == job->cap_old) {
			p = realloc(job->old,
				    2 * job->cap_old * sizeof(*job->old));
			if (!p)
				return -ENOMEM;
			job->old = p;
			job->cap_old *= 2;
		}
		ret = vecset_add_normalised(job->vs, vecset_row(vi->vs, r),
					    vecset_norm(vi->vs, r), NULL);
		if (ret < 0)
			return ret;
		job->old[job->n_old++] = r;
	}
	job->src_n = rows;
	return 0;
}

/* Compact: the new vecset and its maps replace the owner's. */
static int publish_compacted(struct vindex *vi, struct vindex_job *job)
{
	uint32_t *row_slot = NULL, r, n = job->n_old, s;
	struct row_id *row_id = NULL;
	size_t cap = n ? n : 1;

	row_slot = calloc(cap, sizeof(*row_slot));
	row_id = calloc(cap, sizeof(*row_id));
	if (!row_slot || !row_id) {
		free(row_slot);
		free(row_id);
		return -ENOMEM;
	}
	for (r = 0; r < n; r++) {
		uint32_t old = job->old[r];

		row_slot[r] = vi->row_slot[old];
		row_id[r] = vi->row_id[old];
		if (!vecset_is_live(vi->vs, old)) {
			vecset_kill(job->vs, r);
			continue;
		}
		s = vi->row_slot[old];
		vi->slot_row[s] = r + 1;
	}
	free(vi->row_slot);
	free(vi->row_id);
	vi->row_slot = row_slot;
	vi->row_id = row_id;
	vi->row_cap = cap;
	vecset_free(vi->vs);
	vi->vs = job->vs;
	job->vs = NULL;
	job->compact = false;
	return 0;
}

int vindex_job_finish(struct vindex *vi, struct vindex_job *job, char *msg,
		      size_t msglen)
{
	uint32_t rows;
	int ret = job->err;

	if (ret < 0)
		goto drop;
	if (job->compact) {
		ret = catch_up_rows(vi, job);
		if (ret < 0) {
			snprintf(job->msg, sizeof(job->msg), "out of memory");
			goto drop;
		}
		rows = job->n_old;
	} else {
		rows = vecset_rows(vi->vs);
	}
	/*
	 * Catch up with rows added meanwhile, but not forever: writes may
	 * outpace the job, and a tail is searched exactly anyway.
	 */
	if (job->g && rows - hnsw_count(job->g) > vi->o.tail_max &&
	    ++job->rounds < VINDEX_ROUNDS_MAX) {
		job->to = rows;
		return 1;
	}
	if (job->compact) {
		ret = publish_compacted(vi, job);
		if (ret < 0) {
			snprintf(job->msg, sizeof(job->msg), "out of memory");
			goto drop;
		}
	}
	hnsw_free(vi->g);
	vi->g = job->g;
	job->g = NULL;
	vi->job = NULL;
	job_free(job);
	return 0;
drop:
	errmsg_set(msg, msglen, "%s", job->msg);
	vi->job = NULL;
	job_free(job);
	return ret;
}

void vindex_job_free(struct vindex *vi, struct vindex_job *job)
{
	if (vi->job == job)
		vi->job = NULL;
	job_free(job);
}

/* ---- the file ---- */

#define FILE_MAGIC   0x58564d56u /* "VMVX" */
#define FILE_END     0x45564d56u /* "VMVE" */
#define FILE_VERSION 1u
#define FILE_HDR     32u
#define FILE_ROW     32u
#define FILE_TRAILER 8u

uint64_t vindex_unit_hash(const float *unit, uint32_t dim)
{
	uint64_t h = 0xcbf29ce484222325ull;
	uint32_t w, i;

	for (i = 0; i < dim; i++) {
		memcpy(&w, &unit[i], 4);
		h = (h ^ w) * 0x100000001b3ull;
	}
	return h;
}

int vindex_unit_make(uint32_t dim, const float *v, float *unit, float *norm,
		     uint64_t *hash, char *msg, size_t msglen)
{
	int ret = vector_normalise(v, dim, unit, norm, msg, msglen);

	if (ret == 0)
		*hash = vindex_unit_hash(unit, dim);
	return ret;
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

int vindex_save_prepare(const struct vindex *vi, uint8_t **buf, size_t *len,
			char *msg, size_t msglen)
{
	uint32_t rows = vecset_rows(vi->vs), dim = vi->o.dim, dead, r;
	uint8_t *graph = NULL, *b = NULL, *p;
	size_t glen = 0, total;
	float norm;
	int ret;

	if (vi->g) {
		ret = hnsw_serialise(vi->g, &graph, &glen, msg, msglen);
		if (ret < 0)
			return ret;
	}
	dead = rows - vecset_live(vi->vs);
	total = FILE_HDR + (size_t)rows * FILE_ROW +
		(size_t)dead * dim * sizeof(float) + 8 + glen + FILE_TRAILER;
	b = malloc(total);
	if (!b) {
		free(graph);
		errmsg_set(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	put32(b, FILE_MAGIC);
	put32(b + 4, FILE_VERSION);
	put32(b + 8, dim);
	put32(b + 12, vi->o.m);
	put32(b + 16, rows);
	put32(b + 20, vi->g ? hnsw_count(vi->g) : 0);
	put32(b + 24, dead);
	put32(b + 28, 0);
	p = b + FILE_HDR;
	for (r = 0; r < rows; r++, p += FILE_ROW) {
		bool live = vecset_is_live(vi->vs, r);

		memcpy(p, vi->row_id[r].key, VINDEX_KEY);
		put64(p + 16, vi->row_id[r].hash);
		put32(p + 24, live ? 1 : 0);
		norm = vecset_norm(vi->vs, r);
		memcpy(p + 28, &norm, 4);
	}
	/* Dead rows have no record left to take their vector from. */
	for (r = 0; r < rows; r++) {
		if (vecset_is_live(vi->vs, r))
			continue;
		memcpy(p, vecset_row(vi->vs, r), dim * sizeof(float));
		p += dim * sizeof(float);
	}
	put64(p, glen);
	p += 8;
	if (glen)
		memcpy(p, graph, glen);
	p += glen;
	put32(p, crc32c(0, b, (size_t)(p - b)));
	put32(p + 4, FILE_END);
	free(graph);
	*buf = b;
	*len = total;
	return 0;
}

int vindex_load(const struct vindex_opts *o, const uint8_t *buf, size_t len,
		size_t n_records, vindex_lookup_fn lookup, void *ctx,
		struct vindex **out, char *msg, size_t msglen)
{
	size_t stride = vector_stride(o->dim), need, glen;
	uint32_t rows, grows, dead, r, slot, row, live = 0;
	struct hnsw_opts go = graph_opts(o);
	const uint8_t *p, *deadv, *graph;
	struct vindex *vi = NULL;
	struct vindex_unit u;
	float *unit = NULL, norm;
	int ret;

	*out = NULL;
	ret = -EINVAL;
	if (len < FILE_HDR + 8 + FILE_TRAILER ||
	    get32(buf + len - 4) != FILE_END ||
	    get32(buf + len - 8) != crc32c(0, buf, len - 8)) {
		errmsg_set(msg, msglen, "index file is torn or damaged");
		goto out;
	}
	if (get32(buf) != FILE_MAGIC || get32(buf + 4) != FILE_VERSION) {
		errmsg_set(msg, msglen, "not an index file of this version");
		goto out;
	}
	if (get32(buf + 8) != o->dim) {
		errmsg_set(msg, msglen,
			   "index of dimension %u, embedding_dim is %u",
			   get32(buf + 8), o->dim);
		goto out;
	}
	if (get32(buf + 12) != o->m) {
		errmsg_set(msg, msglen, "index built with m %u, not %u",
			   get32(buf + 12), o->m);
		goto out;
	}
	rows = get32(buf + 16);
	grows = get32(buf + 20);
	dead = get32(buf + 24);
	need = FILE_HDR + (size_t)rows * FILE_ROW +
	       (size_t)dead * o->dim * sizeof(float) + 8 + FILE_TRAILER;
	if (rows > VECSET_ROWS_MAX || grows > rows || dead > rows ||
	    need > len) {
		errmsg_set(msg, msglen, "index file sizes do not add up");
		goto out;
	}
	deadv = buf + FILE_HDR + (size_t)rows * FILE_ROW;
	glen = get64(deadv + (size_t)dead * o->dim * sizeof(float));
	graph = deadv + (size_t)dead * o->dim * sizeof(float) + 8;
	if (glen != len - need) {
		errmsg_set(msg, msglen, "index file sizes do not add up");
		goto out;
	}
	ret = vindex_new(o, &vi);
	if (ret < 0) {
		errmsg_set(msg, msglen, "out of memory");
		goto out;
	}
	ret = -ENOMEM;
	unit = calloc(stride, sizeof(float));
	if (!unit || grow_rows(vi, rows ? rows : 1) < 0 ||
	    grow_array((void **)&vi->slot_row, &vi->slot_cap, 1,
		       sizeof(uint32_t)) < 0) {
		errmsg_set(msg, msglen, "out of memory");
		goto out;
	}
	ret = -EINVAL;
	p = buf + FILE_HDR;
	for (r = 0; r < rows; r++, p += FILE_ROW) {
		uint32_t flags = get32(p + 24);

		if (flags > 1) {
			errmsg_set(msg, msglen, "index row %u is damaged", r);
			goto out;
		}
		if (flags == 0) {
			memcpy(unit, deadv, o->dim * sizeof(float));
			deadv += o->dim * sizeof(float);
			memcpy(&norm, p + 28, 4);
			ret = vecset_add_normalised(vi->vs, unit, norm, &row);
			if (ret == 0)
				ret = vecset_kill(vi->vs, row);
			if (ret < 0)
				goto out;
			ret = -EINVAL;
			memcpy(vi->row_id[row].key, p, VINDEX_KEY);
			vi->row_id[row].hash = get64(p + 16);
			vi->row_slot[row] = UINT32_MAX;
			continue;
		}
		if (lookup(ctx, p, &slot, &u) < 0) {
			errmsg_set(msg, msglen,
				   "stale index: row %u names a record that "
				   "is gone",
				   r);
			goto out;
		}
		if (slot == UINT32_MAX || vindex_has(vi, slot)) {
			errmsg_set(msg, msglen,
				   "stale index: two rows for one record");
			goto out;
		}
		if (u.hash != get64(p + 16)) {
			errmsg_set(msg, msglen,
				   "stale index: the vector of row %u changed",
				   r);
			goto out;
		}
		if (grow_array((void **)&vi->slot_row, &vi->slot_cap,
			       (size_t)slot + 1, sizeof(uint32_t)) < 0 ||
		    vecset_add_normalised(vi->vs, u.unit, u.norm, &row) < 0) {
			ret = -ENOMEM;
			errmsg_set(msg, msglen, "out of memory");
			goto out;
		}
		vi->slot_row[slot] = row + 1;
		vi->row_slot[row] = slot;
		memcpy(vi->row_id[row].key, p, VINDEX_KEY);
		vi->row_id[row].hash = u.hash;
		live++;
	}
	/* Records added since the save are the caller's to add (the tail);
	 * more rows than records cannot be. */
	if (live > n_records) {
		errmsg_set(
			msg, msglen,
			"stale index: it covers %u records, %zu have vectors",
			live, n_records);
		goto out;
	}
	if (glen) {
		ret = hnsw_deserialise(graph, glen, &go, row_cb, vi->vs, &vi->g,
				       msg, msglen);
		if (ret < 0)
			goto out;
		ret = -EINVAL;
		if (hnsw_count(vi->g) != grows) {
			errmsg_set(msg, msglen, "index graph size mismatch");
			goto out;
		}
	} else if (grows) {
		errmsg_set(msg, msglen, "index graph missing");
		goto out;
	}
	*out = vi;
	vi = NULL;
	ret = 0;
out:
	free(unit);
	vindex_free(vi);
	return ret;
}

/* ---- the file on disk ---- */

int vindex_write_file(const struct statedir *sd, const char *name,
		      const uint8_t *buf, size_t len, char *msg, size_t msglen)
{
	char tmp[256];
	ssize_t w;
	size_t off = 0;
	int fd, ret;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= (int)sizeof(tmp)) {
		errmsg_set(msg, msglen, "index file name too long");
		return -ENAMETOOLONG;
	}
	/* A leftover of a crashed write is ours to replace. */
	ret = statedir_unlink(sd, tmp);
	if (ret < 0 && ret != -ENOENT) {
		errmsg_set(msg, msglen, "remove %s: %s", tmp, strerror(-ret));
		return ret;
	}
	fd = statedir_open(sd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600, msg,
			   msglen);
	if (fd < 0)
		return fd;
	ret = 0;
	while (off < len) {
		w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			ret = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (ret == 0 && fdatasync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret == 0)
		ret = statedir_rename(sd, tmp, name);
	if (ret == 0)
		ret = statedir_sync(sd);
	if (ret < 0) {
		errmsg_set(msg, msglen, "write %s: %s", name, strerror(-ret));
		statedir_unlink(sd, tmp);
	}
	return ret;
}

int vindex_read_file(const struct statedir *sd, const char *name, size_t max,
		     uint8_t **buf, size_t *len, char *msg, size_t msglen)
{
	uint8_t *b = NULL;
	struct stat st;
	size_t off = 0;
	ssize_t r;
	int fd, ret = 0;

	*buf = NULL;
	*len = 0;
	fd = statedir_open(sd, name, O_RDONLY, 0, msg, msglen);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		errmsg_set(msg, msglen, "stat %s: %s", name, strerror(errno));
		goto out;
	}
	if ((uint64_t)st.st_size > max) {
		ret = -EFBIG;
		errmsg_set(msg, msglen, "%s is over %zu bytes", name, max);
		goto out;
	}
	b = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!b) {
		ret = -ENOMEM;
		errmsg_set(msg, msglen, "out of memory");
		goto out;
	}
	while (off < (size_t)st.st_size) {
		r = read(fd, b + off, (size_t)st.st_size - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ret = r < 0 ? -errno : -EIO;
			errmsg_set(msg, msglen, "read %s: %s", name,
				   r < 0 ? strerror(errno) : "file shrank");
			goto out;
		}
		off += (size_t)r;
	}
	*buf = b;
	*len = off;
	b = NULL;
out:
	free(b);
	close(fd);
	return ret;
}

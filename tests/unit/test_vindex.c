/*
 * Unit tests of daemon/find/vindex.c and the FAISS shim under it
 * (daemon/find/hnsw_faiss.cpp): results against a brute-force model of
 * the slots' current vectors through inserts, updates and deletions (no
 * ghost results, always min(k, eligible) results), the graph built by
 * jobs while rows keep coming (a job run in another thread while the
 * owner adds, updates and removes), compaction, filtered search on every
 * path, and the index file: a round trip, and torn, damaged, stale and
 * other-dimension files refused.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hnsw.h"
#include "vindex.h"
#include "test_rng.h"

#define DIM    48
#define NSLOTS 6000

static float rndf(void)
{
	return (float)((double)(rnd() >> 11) / (double)(1ull << 53)) * 2 - 1;
}

/* The model: each slot's current vector (or none). */
struct model {
	float v[NSLOTS][DIM];
	bool has[NSLOTS];
	float centres[16][DIM];
};

static struct model M;

static void clustered(float *v)
{
	const float *c = M.centres[rnd() % 16];

	for (int i = 0; i < DIM; i++)
		v[i] = c[i] + 0.3f * rndf();
}

static void model_init(uint64_t seed)
{
	memset(&M, 0, sizeof(M));
	rng_state = seed;
	for (int c = 0; c < 16; c++)
		for (int i = 0; i < DIM; i++)
			M.centres[c][i] = rndf();
}

static void key_of(uint32_t slot, uint8_t key[VINDEX_KEY])
{
	memset(key, 0, VINDEX_KEY);
	memcpy(key, &slot, sizeof(slot));
	key[15] = 0xa5;
}

static void put(struct vindex *vi, uint32_t slot)
{
	uint8_t key[VINDEX_KEY];
	char msg[128];

	ck_assert_uint_lt(slot, NSLOTS);
	clustered(M.v[slot]);
	key_of(slot, key);
	ck_assert_int_eq(vindex_put(vi, slot, key, M.v[slot], msg, sizeof(msg)),
			 0);
	M.has[slot] = true;
}

static void del(struct vindex *vi, uint32_t slot)
{
	ck_assert_uint_lt(slot, NSLOTS);
	ck_assert_int_eq(vindex_remove(vi, slot), (M.has[slot] ? 0 : -ENOENT));
	M.has[slot] = false;
}

static double cosine(const float *a, const float *b)
{
	double ab = 0, aa = 0, bb = 0;

	for (int i = 0; i < DIM; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb);
}

struct ms {
	uint32_t slot;
	double score;
};

static int cmp_ms(const void *x, const void *y)
{
	const struct ms *a = x, *b = y;

	return a->score > b->score ? -1 : a->score < b->score;
}

/* The model's top k slots among cands (NULL: all) into out. */
static size_t model_top(const float *q, const uint32_t *cands, size_t nc,
			size_t k, struct ms *out)
{
	static struct ms all[NSLOTS];
	size_t n = 0, i;

	if (cands) {
		for (i = 0; i < nc; i++)
			if (M.has[cands[i]])
				all[n++] = (struct ms){
					cands[i], cosine(q, M.v[cands[i]])};
	} else {
		for (i = 0; i < NSLOTS; i++)
			if (M.has[i])
				all[n++] = (struct ms){(uint32_t)i,
						       cosine(q, M.v[i])};
	}
	qsort(all, n, sizeof(*all), cmp_ms);
	n = n < k ? n : k;
	memcpy(out, all, n * sizeof(*out));
	return n;
}

/*
 * Search and check against the model: the count is min(k, eligible), no
 * slot without a vector (no ghost), no slot outside cands, scores right
 * and descending; returns recall against the model's top k.
 */
static double check_search(struct vindex *vi, const float *q, size_t k,
			   const uint32_t *cands, size_t nc, bool exact,
			   enum vindex_path *path)
{
	static struct vindex_hit hits[VECTOR_TOPK_MAX];
	static struct ms model[VECTOR_TOPK_MAX];
	static bool in[NSLOTS];
	size_t n = 0, mn, i, j, found = 0;
	char msg[128];

	ck_assert_int_eq(vindex_search(vi, q, k, cands, nc, exact, hits, &n,
				       path, msg, sizeof(msg)),
			 0);
	mn = model_top(q, cands, nc, k, model);
	ck_assert_uint_eq(n, mn);
	memset(in, 0, sizeof(in));
	for (i = 0; i < nc && cands; i++)
		in[cands[i]] = true;
	for (i = 0; i < n; i++) {
		ck_assert_uint_lt(hits[i].slot, NSLOTS);
		ck_assert_msg(M.has[hits[i].slot], "ghost slot %u",
			      hits[i].slot);
		ck_assert(!cands || in[hits[i].slot]);
		ck_assert(fabs(hits[i].score - cosine(q, M.v[hits[i].slot])) <
			  1e-4);
		if (i)
			ck_assert(hits[i].score <= hits[i - 1].score);
		for (j = i + 1; j < n; j++)
			ck_assert_uint_ne(hits[i].slot, hits[j].slot);
	}
	for (i = 0; i < n; i++)
		for (j = 0; j < mn; j++)
			if (hits[i].slot == model[j].slot)
				found++;
	/* Exact answers are the model's up to float rounding of ties. */
	if (exact ||
	    (path && (*path == VINDEX_EXACT || *path == VINDEX_EXACT_CANDS ||
		      *path == VINDEX_FALLBACK)))
		ck_assert_uint_ge(found + 1, mn);
	return mn ? (double)found / (double)mn : 1.0;
}

static void opts(struct vindex_opts *o)
{
	vindex_opts_default(o, DIM);
	o->hnsw_min = 500;
	o->exact_cands_max = 200;
	o->tail_max = 64;
	o->m = 8;
	o->ef_construction = 40;
	o->ef_search = 48;
}

/* Plan, run and finish until published (or nothing due). */
static void build(struct vindex *vi)
{
	struct vindex_job *job;
	char msg[160];
	int rc, rounds = 0;

	rc = vindex_job_plan(vi, &job);
	ck_assert_int_ge(rc, 0);
	if (rc == 0)
		return;
	do {
		vindex_job_run(job);
		rc = vindex_job_finish(vi, job, msg, sizeof(msg));
		ck_assert_int_ge(rc, 0);
		ck_assert_int_lt(++rounds, 10);
	} while (rc == 1);
}

START_TEST(small_exact_updates_deletes)
{
	struct vindex *vi;
	struct vindex_opts o;
	enum vindex_path path;
	float q[DIM];
	char msg[128];
	uint8_t key[VINDEX_KEY] = {0};
	float bad[DIM] = {0};

	model_init(1);
	opts(&o);
	ck_assert_int_eq(vindex_new(&o, &vi), 0);
	for (uint32_t s = 0; s < 300; s++)
		put(vi, s);
	for (int rep = 0; rep < 30; rep++) {
		clustered(q);
		check_search(vi, q, 1 + rnd() % 40, NULL, 0, false, &path);
		ck_assert_int_eq(path, VINDEX_EXACT);
		/* Update some, delete some. */
		put(vi, rnd() % 300);
		del(vi, rnd() % 300);
	}
	/* A refused vector leaves the slot's old vector in place. */
	ck_assert_int_eq(vindex_put(vi, 1000, key, bad, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert(!vindex_has(vi, 1000));
	bad[3] = NAN;
	put(vi, 7);
	ck_assert_int_eq(vindex_put(vi, 7, key, bad, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert(vindex_has(vi, 7));
	struct vindex_hit h[5];
	size_t n = 9;
	ck_assert_int_eq(vindex_search(vi, bad, 5, NULL, 0, false, h, &n, NULL,
				       msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_uint_eq(n, 0);
	/* Churn below the graph threshold: dead rows are compacted too. */
	struct vindex_stats st;
	for (int rep = 0; rep < 2000; rep++)
		put(vi, rnd() % 300);
	vindex_stats(vi, &st);
	ck_assert_uint_gt(st.rows, 2000);
	build(vi);
	vindex_stats(vi, &st);
	ck_assert_uint_eq(st.rows, st.live);
	ck_assert_uint_eq(st.graph_rows, 0);
	clustered(q);
	check_search(vi, q, 20, NULL, 0, false, &path);
	ck_assert_int_eq(path, VINDEX_EXACT);
	vindex_free(vi);
}
END_TEST

START_TEST(graph_no_ghosts)
{
	struct vindex *vi;
	struct vindex_opts o;
	struct vindex_stats st;
	enum vindex_path path;
	double recall = 0;
	float q[DIM];
	int queries = 0;
	uint32_t s;

	model_init(2);
	opts(&o);
	ck_assert_int_eq(vindex_new(&o, &vi), 0);
	for (s = 0; s < 3000; s++)
		put(vi, s);
	build(vi);
	vindex_stats(vi, &st);
	ck_assert_uint_eq(st.graph_rows, 3000);
	for (int rep = 0; rep < 200; rep++) {
		clustered(q);
		recall += check_search(vi, q, 10, NULL, 0, false, &path);
		queries++;
		ck_assert(path == VINDEX_GRAPH || path == VINDEX_FALLBACK);
		/* Replace and delete what a search just returned. */
		if (rep % 3 == 0) {
			struct vindex_hit h[3];
			size_t n;

			vindex_search(vi, q, 3, NULL, 0, false, h, &n, NULL,
				      NULL, 0);
			put(vi, h[0].slot);
			del(vi, h[1].slot);
		}
		/* New slots land in the tail, searched exactly. */
		if (rep % 5 == 0)
			put(vi, 3000 + (uint32_t)rep);
	}
	ck_assert_msg(recall / queries >= 0.9, "recall %.3f", recall / queries);
	/* The exact flag. */
	clustered(q);
	check_search(vi, q, 25, NULL, 0, true, &path);
	ck_assert_int_eq(path, VINDEX_EXACT);
	/* k beyond every vector. */
	check_search(vi, q, VECTOR_TOPK_MAX, NULL, 0, false, &path);
	vindex_free(vi);
}
END_TEST

START_TEST(filtered_every_path)
{
	static uint32_t cands[NSLOTS];
	struct vindex *vi;
	struct vindex_opts o;
	enum vindex_path path;
	bool seen[6] = {0};
	float q[DIM];
	size_t nc;
	uint32_t s;

	model_init(3);
	opts(&o);
	ck_assert_int_eq(vindex_new(&o, &vi), 0);
	for (s = 0; s < 4000; s++)
		put(vi, s);
	build(vi);
	for (int rep = 0; rep < 120; rep++) {
		/* 1 %, 10 %, 50 % or a handful, some without vectors. */
		size_t every = (size_t[]){100, 10, 2, 997}[rep % 4];

		nc = 0;
		for (s = (uint32_t)(rnd() % every); s < 4500; s += every)
			cands[nc++] = s;
		if (rep % 7 == 0)
			del(vi, cands[rnd() % nc]);
		clustered(q);
		double r = check_search(vi, q, 1 + rnd() % 30, cands, nc, false,
					&path);
		seen[path] = true;
		if (path == VINDEX_EXACT_CANDS)
			ck_assert(r > 0.999);
	}
	ck_assert(seen[VINDEX_EXACT_CANDS]);
	ck_assert(seen[VINDEX_GRAPH_FILTER]);
	/* A filter the graph cannot satisfy: the far corner of the space. */
	nc = 0;
	for (s = 0; s < 4000 && nc < 300; s++)
		if (M.has[s] && cosine(M.v[s], M.centres[0]) < -0.2)
			cands[nc++] = s;
	ck_assert_uint_gt(nc, o.exact_cands_max);
	memcpy(q, M.centres[0], sizeof(q));
	check_search(vi, q, 300, cands, nc, false, &path);
	ck_assert(path == VINDEX_FALLBACK || path == VINDEX_GRAPH_FILTER);
	/* Empty candidate list. */
	check_search(vi, q, 10, cands, 0, false, &path);
	vindex_free(vi);
}
END_TEST

struct runner {
	struct vindex_job *job;
};

static void *run_thread(void *p)
{
	vindex_job_run(((struct runner *)p)->job);
	return NULL;
}

/* The owner keeps writing while the job runs in another thread. */
static void run_while_writing(struct vindex *vi, struct vindex_job *job,
			      uint32_t next)
{
	struct runner r = {job};
	pthread_t t;
	char msg[160];
	int rc;

	do {
		ck_assert_int_eq(pthread_create(&t, NULL, run_thread, &r), 0);
		for (int i = 0; i < 40; i++) {
			put(vi, next + (uint32_t)i);
			put(vi, (uint32_t)(rnd() % next));
			del(vi, (uint32_t)(rnd() % next));
		}
		next += 40;
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		rc = vindex_job_finish(vi, job, msg, sizeof(msg));
		ck_assert_int_ge(rc, 0);
	} while (rc == 1);
	/* Published although writes outpaced it: the rest is a tail. */
}

static int lookup(void *ctx, const uint8_t key[VINDEX_KEY], uint32_t *slot,
		  struct vindex_unit *u);
static size_t model_count(void);

START_TEST(jobs_while_writing_and_compaction)
{
	struct vindex *vi, *back;
	struct vindex_opts o;
	uint8_t *file;
	size_t len;
	char msg[200];
	struct vindex_job *job;
	struct vindex_stats st;
	enum vindex_path path;
	double recall = 0;
	float q[DIM];
	uint32_t s;

	model_init(4);
	opts(&o);
	ck_assert_int_eq(vindex_new(&o, &vi), 0);
	for (s = 0; s < 1500; s++)
		put(vi, s);
	ck_assert_int_eq(vindex_job_plan(vi, &job), 1);
	/* Only one job at a time. */
	struct vindex_job *second;
	ck_assert_int_eq(vindex_job_plan(vi, &second), 0);
	run_while_writing(vi, job, 1500);
	vindex_stats(vi, &st);
	ck_assert_uint_gt(st.graph_rows, 1500);
	ck_assert_uint_gt(st.tail_rows, 0);
	ck_assert_uint_le(st.tail_rows, 200);
	for (int rep = 0; rep < 50; rep++) {
		clustered(q);
		recall += check_search(vi, q, 10, NULL, 0, false, &path);
	}
	ck_assert_msg(recall / 50 >= 0.85, "recall %.3f", recall / 50);

	/* Kill over a third of the rows: the next job compacts. */
	for (s = 0; s < 1200; s++)
		del(vi, s);
	vindex_stats(vi, &st);
	ck_assert_uint_gt((uint64_t)(st.rows - st.live) * 3, st.rows);
	ck_assert_int_eq(vindex_job_plan(vi, &job), 1);
	run_while_writing(vi, job, 2200);
	vindex_stats(vi, &st);
	ck_assert_uint_le((uint64_t)(st.rows - st.live) * 3, st.rows);
	recall = 0;
	for (int rep = 0; rep < 50; rep++) {
		clustered(q);
		recall += check_search(vi, q, 10, NULL, 0, false, &path);
	}
	ck_assert_msg(recall / 50 >= 0.85, "recall %.3f", recall / 50);
	/* The rows moved by the compaction keep what names them: their
	 * file loads against the records. */
	ck_assert_int_eq(vindex_save_prepare(vi, &file, &len, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(vindex_load(&o, file, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(vindex_count(back), model_count());
	vindex_free(back);
	free(file);
	vindex_free(vi);
}
END_TEST

/* The model's record for a key, made ready as a start-up makes it (the
 * numbers in one buffer: vindex_load copies them before the next call). */
static int lookup(void *ctx, const uint8_t key[VINDEX_KEY], uint32_t *slot,
		  struct vindex_unit *u)
{
	static float unit[DIM];
	uint32_t s;

	(void)ctx;
	memcpy(&s, key, sizeof(s));
	if (key[15] != 0xa5 || s >= NSLOTS || !M.has[s])
		return -ENOENT;
	*slot = s;
	ck_assert_int_eq(vindex_unit_make(DIM, M.v[s], unit, &u->norm, &u->hash,
					  NULL, 0),
			 0);
	u->unit = unit;
	return 0;
}

/* A vector made ready apart (vindex_unit_make, in place as a start-up
 * does) and put with vindex_put_unit is the vector vindex_put stores:
 * the same numbers back, the same file. */
START_TEST(put_unit_as_put)
{
	struct vindex *a, *b;
	struct vindex_opts o;
	struct vindex_unit u;
	uint8_t key[VINDEX_KEY], *fa, *fb;
	float ra[DIM], rb[DIM], v[DIM];
	size_t la, lb;
	char msg[128];

	model_init(11);
	opts(&o);
	ck_assert_int_eq(vindex_new(&o, &a), 0);
	ck_assert_int_eq(vindex_new(&o, &b), 0);
	for (uint32_t s = 0; s < 300; s++) {
		clustered(v);
		key_of(s, key);
		ck_assert_int_eq(vindex_put(a, s, key, v, msg, sizeof(msg)), 0);
		ck_assert_int_eq(vindex_unit_make(DIM, v, v, &u.norm, &u.hash,
						  msg, sizeof(msg)),
				 0);
		u.unit = v;
		ck_assert_int_eq(
			vindex_put_unit(b, s, key, &u, msg, sizeof(msg)), 0);
		ck_assert(vindex_vector(a, s, ra) && vindex_vector(b, s, rb));
		ck_assert_mem_eq(ra, rb, sizeof(ra));
	}
	/* A slot put again: its old row dead in both. */
	clustered(v);
	key_of(7, key);
	ck_assert_int_eq(vindex_put(a, 7, key, v, msg, sizeof(msg)), 0);
	vindex_unit_make(DIM, v, v, &u.norm, &u.hash, NULL, 0);
	ck_assert_int_eq(vindex_put_unit(b, 7, key, &u, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(vindex_count(a), 300);
	ck_assert_uint_eq(vindex_count(b), 300);
	ck_assert_int_eq(vindex_save_prepare(a, &fa, &la, msg, sizeof(msg)), 0);
	ck_assert_int_eq(vindex_save_prepare(b, &fb, &lb, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(la, lb);
	ck_assert_mem_eq(fa, fb, la);
	/* A vector that cannot be made ready is refused with a reason. */
	memset(v, 0, sizeof(v));
	ck_assert_int_eq(
		vindex_unit_make(DIM, v, v, &u.norm, &u.hash, msg, sizeof(msg)),
		-EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "zero"));
	free(fa);
	free(fb);
	vindex_free(a);
	vindex_free(b);
}
END_TEST

static size_t model_count(void)
{
	size_t n = 0;

	for (int i = 0; i < NSLOTS; i++)
		n += M.has[i];
	return n;
}

START_TEST(file_round_trip_and_refusals)
{
	struct vindex *vi, *back;
	struct vindex_opts o, o2;
	struct vindex_stats st;
	enum vindex_path path;
	uint8_t *buf, *copy;
	size_t len;
	float q[DIM];
	char msg[200];
	uint32_t s;

	model_init(5);
	opts(&o);
	ck_assert_int_eq(vindex_new(&o, &vi), 0);
	for (s = 0; s < 2000; s++)
		put(vi, s);
	build(vi);
	for (s = 0; s < 100; s++)
		del(vi, s * 7);
	for (s = 0; s < 30; s++)
		put(vi, 2000 + s); /* a tail */
	ck_assert_int_eq(vindex_save_prepare(vi, &buf, &len, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 0);
	vindex_stats(back, &st);
	ck_assert_uint_eq(st.graph_rows, 2000);
	ck_assert_uint_eq(st.tail_rows, 30 + 0);
	ck_assert_uint_eq(st.live, model_count());
	for (int rep = 0; rep < 50; rep++) {
		struct vindex_hit a[10], b[10];
		size_t na, nb;

		clustered(q);
		check_search(back, q, 10, NULL, 0, false, &path);
		ck_assert_int_eq(path, VINDEX_GRAPH);
		/* The same graph: the same answers. */
		vindex_search(vi, q, 10, NULL, 0, false, a, &na, NULL, NULL, 0);
		vindex_search(back, q, 10, NULL, 0, false, b, &nb, NULL, NULL,
			      0);
		ck_assert_uint_eq(na, nb);
		for (size_t i = 0; i < na; i++)
			ck_assert_uint_eq(a[i].slot, b[i].slot);
	}
	vindex_free(back);

	copy = malloc(len);
	/* Torn: every cut is refused. */
	for (size_t cut = 0; cut < len; cut += 1 + len / 50) {
		ck_assert_int_eq(vindex_load(&o, buf, cut, model_count(),
					     lookup, NULL, &back, msg,
					     sizeof(msg)),
				 -EINVAL);
		ck_assert_ptr_null(back);
	}
	/* A flipped bit anywhere. */
	for (size_t at = 0; at < len; at += 1 + len / 97) {
		memcpy(copy, buf, len);
		copy[at] ^= 0x10;
		ck_assert_int_eq(vindex_load(&o, copy, len, model_count(),
					     lookup, NULL, &back, msg,
					     sizeof(msg)),
				 -EINVAL);
	}
	/* Other dimension, other m. */
	o2 = o;
	o2.dim = DIM + 1;
	ck_assert_int_eq(vindex_load(&o2, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "dimension"));
	o2 = o;
	o2.m = 12;
	ck_assert_int_eq(vindex_load(&o2, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 -EINVAL);
	/* Stale: a record changed, a record gone, a record more. */
	float keep[DIM];
	memcpy(keep, M.v[500], sizeof(keep));
	M.v[500][0] += 0.5f;
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "stale"));
	memcpy(M.v[500], keep, sizeof(keep));
	M.has[501] = false;
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "stale"));
	M.has[501] = true;
	/* A record more (added after the save): loaded, for the caller to
	 * add; a record fewer than the rows cannot be. */
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count() + 1, lookup,
				     NULL, &back, msg, sizeof(msg)),
			 0);
	vindex_free(back);
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count() - 1, lookup,
				     NULL, &back, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "stale"));
	/* And the original still loads. */
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 0);
	vindex_free(back);
	free(copy);
	free(buf);
	vindex_free(vi);
}
END_TEST

/*
 * The start-up flow: the index comes back from its file with no rebuild;
 * a file that no longer matches is refused, exact search serves at once
 * from a fresh index, and a background job brings the graph back.
 */
START_TEST(file_on_disk_and_start_flow)
{
	char dir[] = "/tmp/vmem-vindex-XXXXXX", msg[200];
	struct statedir sd;
	struct vindex *vi, *back;
	struct vindex_opts o;
	struct vindex_stats st;
	enum vindex_path path;
	uint8_t *buf, *rd;
	size_t len, rlen;
	float q[DIM];
	int dfd;
	uint32_t s;

	model_init(8);
	opts(&o);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(statedir_init(&sd, dir, NULL, 0, msg, sizeof(msg)), 0);
	dfd = sd.fd;
	ck_assert_int_eq(vindex_new(&o, &vi), 0);
	for (s = 0; s < 1500; s++)
		put(vi, s);
	build(vi);
	ck_assert_int_eq(vindex_save_prepare(vi, &buf, &len, msg, sizeof(msg)),
			 0);
	ck_assert_int_eq(
		vindex_write_file(&sd, "vectors", buf, len, msg, sizeof(msg)),
		0);
	ck_assert_int_eq(vindex_read_file(&sd, "vectors", 1 << 30, &rd, &rlen,
					  msg, sizeof(msg)),
			 0);
	ck_assert_uint_eq(rlen, len);
	ck_assert(memcmp(rd, buf, len) == 0);
	ck_assert_int_eq(vindex_load(&o, rd, rlen, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 0);
	vindex_stats(back, &st);
	ck_assert_uint_eq(st.graph_rows, 1500);
	clustered(q);
	check_search(back, q, 10, NULL, 0, false, &path);
	ck_assert_int_eq(path, VINDEX_GRAPH);
	vindex_free(back);
	free(rd);
	/* Too big for the caller's bound; a symlink; a FIFO; absent. */
	ck_assert_int_eq(vindex_read_file(&sd, "vectors", len - 1, &rd, &rlen,
					  msg, sizeof(msg)),
			 -EFBIG);
	ck_assert_int_eq(symlinkat("vectors", dfd, "link"), 0);
	ck_assert_int_eq(vindex_read_file(&sd, "link", 1 << 30, &rd, &rlen, msg,
					  sizeof(msg)),
			 -ELOOP);
	ck_assert_int_eq(mkfifoat(dfd, "fifo", 0600), 0);
	ck_assert_int_eq(vindex_read_file(&sd, "fifo", 1 << 30, &rd, &rlen, msg,
					  sizeof(msg)),
			 -EINVAL);
	ck_assert_int_eq(vindex_read_file(&sd, "none", 1 << 30, &rd, &rlen, msg,
					  sizeof(msg)),
			 -ENOENT);
	ck_assert_int_eq(
		vindex_write_file(&sd, "link", buf, len, msg, sizeof(msg)),
		0); /* replaces the link itself, never its target */
	ck_assert_int_eq(fchmodat(dfd, "vectors", 0666, 0), 0);
	ck_assert_int_eq(vindex_read_file(&sd, "vectors", 1 << 30, &rd, &rlen,
					  msg, sizeof(msg)),
			 -EPERM);
	/* Records changed since the save (a crash after it): refused. */
	put(vi, 3);
	ck_assert_int_eq(vindex_load(&o, buf, len, model_count(), lookup, NULL,
				     &back, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "stale"));
	/* Fresh: exact at once, the graph after a job. */
	ck_assert_int_eq(vindex_new(&o, &back), 0);
	for (s = 0; s < 1500; s++) {
		uint8_t key[VINDEX_KEY];

		key_of(s, key);
		ck_assert_int_eq(
			vindex_put(back, s, key, M.v[s], msg, sizeof(msg)), 0);
	}
	check_search(back, q, 10, NULL, 0, false, &path);
	ck_assert_int_eq(path, VINDEX_EXACT);
	build(back);
	check_search(back, q, 10, NULL, 0, false, &path);
	ck_assert(path == VINDEX_GRAPH || path == VINDEX_FALLBACK);
	vindex_free(back);
	vindex_free(vi);
	free(buf);
	statedir_done(&sd);
	{
		char cmd[100];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		ck_assert_int_eq(system(cmd), 0);
	}
}
END_TEST

static const float *row_of(void *ctx, uint32_t row)
{
	return vecset_row(ctx, row);
}

/* Graph bytes damaged past the file's checksum never crash the shim. */
START_TEST(graph_bytes_checked)
{
	struct hnsw_opts go = {DIM, 8, 40};
	struct vecset *vs = vecset_new(DIM);
	struct hnsw *g, *back;
	uint8_t *bytes, *copy;
	size_t len;
	float v[DIM];
	char msg[128];
	int ok = 0;

	model_init(6);
	for (int i = 0; i < 300; i++) {
		clustered(v);
		ck_assert_int_eq(vecset_add(vs, v, NULL, NULL, 0), 0);
	}
	ck_assert_int_eq(hnsw_new(&go, row_of, vs, &g, msg, sizeof(msg)), 0);
	ck_assert_int_eq(hnsw_add(g, 300, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(hnsw_count(g), 300);
	ck_assert_int_eq(hnsw_serialise(g, &bytes, &len, msg, sizeof(msg)), 0);
	copy = malloc(len);
	for (size_t at = 0; at < len; at += 1 + rnd() % 13) {
		memcpy(copy, bytes, len);
		copy[at] = (uint8_t)rnd();
		if (hnsw_deserialise(copy, len, &go, row_of, vs, &back, msg,
				     sizeof(msg)) == 0) {
			struct vec_hit h[10];
			size_t n;
			float q[64] = {0};

			vector_normalise(v, DIM, q, NULL, NULL, 0);
			ck_assert_int_eq(hnsw_search(back, q, 10, 20, NULL,
						     NULL, h, &n, msg,
						     sizeof(msg)),
					 0);
			hnsw_free(back);
			ok++;
		}
	}
	ck_assert_int_eq(hnsw_deserialise(bytes, len - 1, &go, row_of, vs,
					  &back, msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_int_gt(ok, 0);
	ck_assert_ptr_nonnull(strstr(hnsw_library(), "faiss 1.7"));
	free(copy);
	free(bytes);
	hnsw_free(g);
	vecset_free(vs);
}
END_TEST

/* ef reaches FAISS (1.7.3 reads it from the index, not the parameters). */
START_TEST(ef_matters)
{
	struct hnsw_opts go = {DIM, 8, 64};
	struct vecset *vs = vecset_new(DIM);
	struct vec_hit h[10], ex[10];
	struct hnsw *g;
	double low = 0, high = 0;
	float v[DIM], q[64] = {0};
	size_t n, ne, i, j;
	char msg[128];

	rng_state = 99;
	for (i = 0; i < 4000; i++) {
		for (j = 0; j < DIM; j++)
			v[j] = rndf();
		ck_assert_int_eq(vecset_add(vs, v, NULL, NULL, 0), 0);
	}
	ck_assert_int_eq(hnsw_new(&go, row_of, vs, &g, msg, sizeof(msg)), 0);
	ck_assert_int_eq(hnsw_add(g, 4000, msg, sizeof(msg)), 0);
	for (int rep = 0; rep < 50; rep++) {
		for (j = 0; j < DIM; j++)
			v[j] = rndf();
		vector_normalise(v, DIM, q, NULL, NULL, 0);
		vecset_search(vs, q, 10, NULL, 0, ex, &ne);
		for (int pass = 0; pass < 2; pass++) {
			ck_assert_int_eq(hnsw_search(g, q, 10, pass ? 400 : 10,
						     NULL, NULL, h, &n, msg,
						     sizeof(msg)),
					 0);
			for (i = 0; i < n; i++)
				for (j = 0; j < ne; j++)
					if (h[i].row == ex[j].row)
						*(pass ? &high : &low) += 0.1;
		}
	}
	ck_assert_msg(high > low + 10 && high / 50 >= 0.9,
		      "ef 10: %.3f, 400: %.3f", low / 50, high / 50);
	hnsw_free(g);
	vecset_free(vs);
}
END_TEST

static Suite *vindex_suite(void)
{
	Suite *s = suite_create("vindex");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, small_exact_updates_deletes);
	tcase_add_test(tc, graph_no_ghosts);
	tcase_add_test(tc, filtered_every_path);
	tcase_add_test(tc, jobs_while_writing_and_compaction);
	tcase_add_test(tc, file_round_trip_and_refusals);
	tcase_add_test(tc, put_unit_as_put);
	tcase_add_test(tc, graph_bytes_checked);
	tcase_add_test(tc, ef_matters);
	tcase_add_test(tc, file_on_disk_and_start_flow);
	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(vindex_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

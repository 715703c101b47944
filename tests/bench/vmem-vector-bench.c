/*
 * The engine side of the vector benchmark (driven by vmem-vector-bench.py,
 * which makes the data and runs the peers in the same run): exact search
 * (the AVX2 kernel and the portable one), the HNSW graph (build time,
 * recall@10 against exact, p50/p99 at several ef), filtered search (1 %
 * and 10 % of the documents by a metadata filter through the postings
 * index), memory per vector, the index file (save, load), and segment
 * storage (start-up read of every document, disk after compaction).
 * Prints one JSON object on stdout; figures only, no verdicts.
 *
 * usage: vmem-vector-bench --data F --queries F --cats F --dim D --n N
 *        --nq Q [--dir DIR] [--ef LIST] [--exact-queries Q]
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jsonfilter.h"
#include "segment.h"
#include "statedir.h"
#include "vector.h"
#include "vindex.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Percentile p (0..100) of n latencies (sorted in place), in ms. */
static double pct(double *v, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_d);
	i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return v[i] * 1e3;
}

static void *load_file(const char *path, size_t want)
{
	FILE *f = fopen(path, "rb");
	void *p = malloc(want ? want : 1);

	if (!f || !p || fread(p, 1, want, f) != want) {
		fprintf(stderr, "cannot read %zu bytes of %s\n", want, path);
		exit(2);
	}
	fclose(f);
	return p;
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return def;
}

struct bench {
	uint32_t dim, n, nq;
	const float *data, *queries;
	float *unit; /* lookup's: one vector made ready */
	const uint8_t *cats;
	json_t **meta;
	struct vindex *vi;
	uint32_t (*truth)[10]; /* exact top-10 slots per query */
	json_t *out;
};

static void exact_runs(struct bench *b, unsigned nq)
{
	struct vindex_hit hits[10];
	double *lat = calloc(nq, sizeof(double)), t;
	size_t got;
	json_t *o = json_object();

	for (int portable = 0; portable < 2; portable++) {
		vector_force_portable(portable);
		for (unsigned q = 0; q < nq; q++) {
			t = now();
			vindex_search(b->vi, b->queries + (size_t)q * b->dim,
				      10, NULL, 0, true, hits, &got, NULL, NULL,
				      0);
			lat[q] = now() - t;
			if (!portable)
				for (size_t i = 0; i < 10; i++)
					b->truth[q][i] = hits[i].slot;
		}
		json_object_set_new(o, portable ? "portable" : "avx2",
				    json_pack("{s:s,s:f,s:f,s:i}", "kernel",
					      vector_kernel(), "p50_ms",
					      pct(lat, nq, 50), "p99_ms",
					      pct(lat, nq, 99), "queries", nq));
		/* The portable kernel is slow: a few queries do. */
		if (!portable)
			nq = nq < 5 ? nq : 5;
	}
	vector_force_portable(false);
	/* The rest of the ground truth. */
	for (unsigned q = nq; q < b->nq; q++) {
		vindex_search(b->vi, b->queries + (size_t)q * b->dim, 10, NULL,
			      0, true, hits, &got, NULL, NULL, 0);
		for (size_t i = 0; i < 10; i++)
			b->truth[q][i] = hits[i].slot;
	}
	json_object_set_new(b->out, "exact", o);
	free(lat);
}

static double recall10(const uint32_t *truth, const struct vindex_hit *h,
		       size_t n)
{
	size_t found = 0;

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < 10; j++)
			if (h[i].slot == truth[j])
				found++;
	return (double)found / 10.0;
}

static void graph_runs(struct bench *b, const char *eflist,
		       struct vindex_opts *o)
{
	struct vindex_job *job;
	struct vindex_hit hits[10];
	struct vindex_stats st;
	enum vindex_path path;
	double t, *lat = calloc(b->nq, sizeof(double)), rec;
	char msg[200], list[200], *save = NULL, *tok;
	json_t *arr = json_array(), *g = json_object();
	size_t got;
	int rc;

	t = now();
	rc = vindex_job_plan(b->vi, &job);
	if (rc == 1) {
		do {
			vindex_job_run(job);
			rc = vindex_job_finish(b->vi, job, msg, sizeof(msg));
		} while (rc == 1);
	}
	json_object_set_new(g, "build_s", json_real(now() - t));
	vindex_stats(b->vi, &st);
	json_object_set_new(g, "graph_rows", json_integer(st.graph_rows));
	json_object_set_new(g, "m", json_integer(o->m));
	json_object_set_new(g, "ef_construction",
			    json_integer(o->ef_construction));
	snprintf(list, sizeof(list), "%s", eflist);
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		/* ef is the index's option: a fresh search setting. */
		unsigned ef = (unsigned)atoi(tok);
		struct vindex *vi = b->vi;

		vindex_set_ef(vi, ef);
		rec = 0;
		for (unsigned q = 0; q < b->nq; q++) {
			t = now();
			vindex_search(vi, b->queries + (size_t)q * b->dim, 10,
				      NULL, 0, false, hits, &got, &path, NULL,
				      0);
			lat[q] = now() - t;
			rec += recall10(b->truth[q], hits, got);
		}
		json_array_append_new(arr,
				      json_pack("{s:i,s:f,s:f,s:f}", "ef", ef,
						"recall10", rec / b->nq,
						"p50_ms", pct(lat, b->nq, 50),
						"p99_ms", pct(lat, b->nq, 99)));
	}
	vindex_set_ef(b->vi, o->ef_search);
	json_object_set_new(g, "runs", arr);
	json_object_set_new(b->out, "hnsw", g);
	free(lat);
}

static const json_t *meta_of(void *ctx, uint32_t slot)
{
	return ((struct bench *)ctx)->meta[slot];
}

/* Documents of `share` percent, by a metadata filter. */
static void filtered_runs(struct bench *b, struct jfindex *ix, int share)
{
	struct vindex_hit hits[10], ref[10];
	double *lat = calloc(b->nq, sizeof(double)), *flat, t, rec = 0;
	enum vindex_path path;
	size_t got, nref, nc;
	uint32_t *cands;
	int paths[8] = {0};
	char fs[64];
	json_t *f;

	flat = calloc(b->nq, sizeof(double));
	for (unsigned q = 0; q < b->nq; q++) {
		/* 1 %: one category of 100; 10 %: one tag of 10. */
		if (share == 1)
			snprintf(fs, sizeof(fs), "{\"category\": \"c%u\"}",
				 q % 100);
		else
			snprintf(fs, sizeof(fs), "{\"tags\": [\"t%u\"]}",
				 q % 10);
		f = json_loads(fs, 0, NULL);
		t = now();
		jfindex_match(ix, f, meta_of, b, &cands, &nc);
		flat[q] = now() - t;
		vindex_search(b->vi, b->queries + (size_t)q * b->dim, 10, cands,
			      nc, false, hits, &got, &path, NULL, 0);
		lat[q] = now() - t;
		paths[path]++;
		vindex_search(b->vi, b->queries + (size_t)q * b->dim, 10, cands,
			      nc, true, ref, &nref, NULL, NULL, 0);
		for (size_t i = 0; i < got; i++)
			for (size_t j = 0; j < nref; j++)
				if (hits[i].slot == ref[j].slot)
					rec += 1.0 / (double)nref;
		free(cands);
		json_decref(f);
	}
	json_object_set_new(
		b->out, share == 1 ? "filtered_1pct" : "filtered_10pct",
		json_pack("{s:f,s:f,s:f,s:f,s:f,s:{s:i,s:i,s:i}}", "recall10",
			  rec / b->nq, "p50_ms", pct(lat, b->nq, 50), "p99_ms",
			  pct(lat, b->nq, 99), "filter_p50_ms",
			  pct(flat, b->nq, 50), "filter_p99_ms",
			  pct(flat, b->nq, 99), "paths", "exact_cands",
			  paths[VINDEX_EXACT_CANDS], "graph_filter",
			  paths[VINDEX_GRAPH_FILTER], "fallback",
			  paths[VINDEX_FALLBACK]));
	free(lat);
	free(flat);
}

/* A record's vector made ready for the index, as a start-up makes it
 * (the daemon does it on the thread that reads the records; timed here
 * within the load). */
static int lookup(void *ctx, const uint8_t key[VINDEX_KEY], uint32_t *slot,
		  struct vindex_unit *u)
{
	struct bench *b = ctx;
	uint32_t s;

	memcpy(&s, key, 4);
	if (s >= b->n)
		return -ENOENT;
	*slot = s;
	u->unit = b->unit;
	return vindex_unit_make(b->dim, b->data + (size_t)s * b->dim, b->unit,
				&u->norm, &u->hash, NULL, 0);
}

static void file_runs(struct bench *b, const struct vindex_opts *o,
		      const char *dir)
{
	uint8_t *buf;
	size_t len;
	struct vindex *back;
	char msg[200], path[512];
	double t0, t1, t2;
	FILE *f;
	int rc;

	t0 = now();
	vindex_save_prepare(b->vi, &buf, &len, msg, sizeof(msg));
	snprintf(path, sizeof(path), "%s/vindex", dir);
	f = fopen(path, "wb");
	fwrite(buf, 1, len, f);
	fflush(f);
	fsync(fileno(f));
	fclose(f);
	t1 = now();
	b->unit = malloc(b->dim * sizeof(float));
	rc = b->unit ? vindex_load(o, buf, len, b->n, lookup, b, &back, msg,
				   sizeof(msg))
		     : -ENOMEM;
	t2 = now();
	free(b->unit);
	b->unit = NULL;
	json_object_set_new(b->out, "index_file",
			    json_pack("{s:I,s:f,s:f,s:b}", "bytes",
				      (json_int_t)len, "save_s", t1 - t0,
				      "load_s", t2 - t1, "loaded", rc == 0));
	vindex_free(back);
	free(buf);
	unlink(path);
}

static int seg_load(void *ctx, const uint8_t key[SEG_KEY], const void *p,
		    size_t len)
{
	(*(uint64_t *)ctx) += len;
	(void)key;
	(void)p;
	return 0;
}

/* Every document (content + metadata + vector) in segments. */
static void segment_runs(struct bench *b, const char *dir)
{
	char path[512], msg[256], content[400];
	struct statedir root, sd;
	struct seg_opts so = {SEG_SIZE_DEFAULT};
	struct segstore *s;
	struct seg_stats st;
	struct seg_compact *c;
	uint8_t key[SEG_KEY] = {0}, *payload;
	size_t plen, clen;
	uint64_t loaded = 0;
	double t0, t1, t_open, t_comp;

	snprintf(path, sizeof(path), "%s/vmem", dir);
	if (statedir_init(&root, dir, NULL, 0, msg, sizeof(msg)) < 0 ||
	    statedir_sub(&root, "segments", true, &sd, msg, sizeof(msg)) < 0 ||
	    segstore_open(&sd, &so, seg_load, &loaded, &s, NULL, msg,
			  sizeof(msg)) < 0) {
		fprintf(stderr, "segments: %s\n", msg);
		exit(1);
	}
	payload = malloc(sizeof(content) + (size_t)b->dim * 4);
	t0 = now();
	for (int round = 0; round < 2; round++) {
		/* Round 1 rewrites half of the documents: dead records. */
		for (uint32_t i = 0; i < b->n; i++) {
			struct seg_op op;

			if (round == 1 && i % 2)
				continue;
			clen = (size_t)snprintf(
				content, sizeof(content),
				"{\"content\": \"document %u, round %d: lorem "
				"ipsum dolor sit amet, consectetur adipiscing "
				"elit, sed do eiusmod tempor incididunt ut "
				"labore et dolore magna aliqua.\", "
				"\"metadata\": "
				"{\"category\": \"c%u\"}}",
				i, round, b->cats[i]);
			memcpy(payload, content, clen);
			memcpy(payload + clen, b->data + (size_t)i * b->dim,
			       (size_t)b->dim * 4);
			plen = clen + (size_t)b->dim * 4;
			memcpy(key, &i, 4);
			op = (struct seg_op){key, payload, plen, false};
			segstore_apply(s, &op, 1, msg, sizeof(msg));
		}
	}
	segstore_sync(s, msg, sizeof(msg));
	t1 = now();
	segstore_stats(s, &st);
	json_t *o = json_pack("{s:f,s:I,s:I}", "write_s", t1 - t0,
			      "disk_before", (json_int_t)st.disk_bytes, "live",
			      (json_int_t)st.live_bytes);
	t0 = now();
	while (segstore_compact_plan(s, &c, msg, sizeof(msg)) == 1) {
		segcompact_run(c, msg, sizeof(msg));
		segstore_compact_finish(s, c, msg, sizeof(msg));
	}
	t_comp = now() - t0;
	segstore_stats(s, &st);
	segstore_close(s);
	/* Start-up: the page cache is warm (as for a restart). */
	t0 = now();
	loaded = 0;
	segstore_open(&sd, &so, seg_load, &loaded, &s, NULL, msg, sizeof(msg));
	t_open = now() - t0;
	json_object_set_new(o, "compact_s", json_real(t_comp));
	json_object_set_new(o, "disk_after",
			    json_integer((json_int_t)st.disk_bytes));
	json_object_set_new(
		o, "ratio_after",
		json_real((double)st.disk_bytes / (double)st.live_bytes));
	json_object_set_new(o, "segments", json_integer(st.segments));
	json_object_set_new(o, "open_s", json_real(t_open));
	json_object_set_new(o, "open_bytes", json_integer((json_int_t)loaded));
	json_object_set_new(b->out, "segments", o);
	segstore_close(s);
	statedir_done(&sd);
	statedir_done(&root);
	free(payload);
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", path);
	}
}

int main(int argc, char **argv)
{
	struct bench b = {0};
	struct vindex_opts o;
	struct vindex_stats st;
	struct jfindex *ix;
	uint8_t key[VINDEX_KEY] = {0};
	char msg[200], text[128];
	const char *dir = arg(argc, argv, "--dir", "/tmp");
	double t;

	b.dim = (uint32_t)atoi(arg(argc, argv, "--dim", "1536"));
	b.n = (uint32_t)atoi(arg(argc, argv, "--n", "0"));
	b.nq = (uint32_t)atoi(arg(argc, argv, "--nq", "200"));
	if (!b.n || !arg(argc, argv, "--data", NULL)) {
		fprintf(stderr, "usage: see the comment at the top\n");
		return 2;
	}
	b.data = load_file(arg(argc, argv, "--data", NULL),
			   (size_t)b.n * b.dim * 4);
	b.queries = load_file(arg(argc, argv, "--queries", NULL),
			      (size_t)b.nq * b.dim * 4);
	b.cats = load_file(arg(argc, argv, "--cats", NULL), b.n);
	b.truth = calloc(b.nq, sizeof(*b.truth));
	b.meta = calloc(b.n, sizeof(*b.meta));
	b.out = json_object();

	vindex_opts_default(&o, b.dim);
	o.m = (unsigned)atoi(arg(argc, argv, "--m", "16"));
	o.ef_construction = (unsigned)atoi(arg(argc, argv, "--efc", "100"));
	if (vindex_new(&o, &b.vi) < 0)
		return 1;
	t = now();
	for (uint32_t i = 0; i < b.n; i++) {
		memcpy(key, &i, 4);
		if (vindex_put(b.vi, i, key, b.data + (size_t)i * b.dim, msg,
			       sizeof(msg)) < 0) {
			fprintf(stderr, "%s\n", msg);
			return 1;
		}
	}
	json_object_set_new(b.out, "insert_s", json_real(now() - t));
	json_object_set_new(b.out, "n", json_integer(b.n));
	json_object_set_new(b.out, "dim", json_integer(b.dim));

	exact_runs(&b,
		   (unsigned)atoi(arg(argc, argv, "--exact-queries", "50")));
	graph_runs(&b, arg(argc, argv, "--ef", "32,64,128"), &o);

	ix = jfindex_new();
	for (uint32_t i = 0; i < b.n; i++) {
		snprintf(text, sizeof(text),
			 "{\"category\": \"c%u\", \"tags\": [\"t%u\"]}",
			 b.cats[i], b.cats[i] % 10);
		b.meta[i] = json_loads(text, 0, NULL);
		jfindex_add(ix, i, b.meta[i]);
	}
	filtered_runs(&b, ix, 1);
	filtered_runs(&b, ix, 10);

	vindex_stats(b.vi, &st);
	json_object_set_new(b.out, "memory",
			    json_pack("{s:I,s:I,s:I,s:f,s:I}", "vector_bytes",
				      (json_int_t)st.vector_bytes,
				      "graph_bytes", (json_int_t)st.graph_bytes,
				      "map_bytes", (json_int_t)st.map_bytes,
				      "bytes_per_vector",
				      (double)(st.vector_bytes +
					       st.graph_bytes + st.map_bytes) /
					      b.n,
				      "filter_index_bytes",
				      (json_int_t)jfindex_memory(ix)));
	file_runs(&b, &o, dir);
	segment_runs(&b, dir);

	{
		json_t *truth = json_array();

		for (unsigned q = 0; q < b.nq; q++) {
			json_t *row = json_array();

			for (int i = 0; i < 10; i++)
				json_array_append_new(
					row, json_integer(b.truth[q][i]));
			json_array_append_new(truth, row);
		}
		json_object_set_new(b.out, "truth", truth);
	}
	json_dumpf(b.out, stdout, JSON_COMPACT);
	putchar('\n');
	return 0;
}

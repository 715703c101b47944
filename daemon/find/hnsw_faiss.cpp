/*
 * See hnsw.h. The only C++ in the daemon: FAISS's IndexHNSW with a
 * storage that reads vecset rows, behind the C functions of hnsw.h.
 */
#include "hnsw.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <vector>

#include <faiss/IndexHNSW.h>
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/DistanceComputer.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/IDSelector.h>

/* OpenMP's C entry point (libgomp), declared here: no -fopenmp needed. */
extern "C" void omp_set_num_threads(int n);

namespace
{

using idx_t = faiss::Index::idx_t;

/* Vectors stay in the vecset: add only counts, distances read rows. */
struct RowStorage : faiss::Index {
	hnsw_row_fn row;
	void *ctx;

	RowStorage(int d, hnsw_row_fn r, void *c)
	    : faiss::Index(d, faiss::METRIC_INNER_PRODUCT), row(r), ctx(c)
	{
		is_trained = true;
	}
	void add(idx_t n, const float *) override
	{
		ntotal += n;
	}
	void reset() override
	{
		ntotal = 0;
	}
	void search(idx_t, const float *, idx_t, float *, idx_t *,
		    const faiss::SearchParameters *) const override
	{
		FAISS_THROW_MSG(
			"the row storage is searched through the graph");
	}
	void reconstruct(idx_t key, float *out) const override
	{
		std::memcpy(out, row(ctx, (uint32_t)key), sizeof(float) * d);
	}
	faiss::DistanceComputer *get_distance_computer() const override;
};

struct RowDistance : faiss::DistanceComputer {
	const RowStorage &s;
	const float *q = nullptr;

	explicit RowDistance(const RowStorage &st) : s(st)
	{
	}
	void set_query(const float *x) override
	{
		q = x;
	}
	float operator()(idx_t i) override
	{
		return vector_dot(q, s.row(s.ctx, (uint32_t)i), (size_t)s.d);
	}
	float symmetric_dis(idx_t i, idx_t j) override
	{
		return vector_dot(s.row(s.ctx, (uint32_t)i),
				  s.row(s.ctx, (uint32_t)j), (size_t)s.d);
	}
};

faiss::DistanceComputer *RowStorage::get_distance_computer() const
{
	return new RowDistance(*this);
}

struct Allow : faiss::IDSelector {
	hnsw_allow_fn fn;
	void *ctx;

	Allow(hnsw_allow_fn f, void *c) : fn(f), ctx(c)
	{
	}
	bool is_member(idx_t id) const override
	{
		return fn(ctx, (uint32_t)id);
	}
};

int fail(char *msg, size_t msglen, const char *what, int err)
{
	if (msg && msglen)
		std::snprintf(msg, msglen, "hnsw: %s", what);
	return err;
}

} // namespace

struct hnsw {
	hnsw_opts o;
	RowStorage storage;
	faiss::IndexHNSW index;

	hnsw(const hnsw_opts *opts, hnsw_row_fn row, void *ctx)
	    : o(*opts), storage((int)vector_stride(opts->dim), row, ctx),
	      index(&storage, (int)opts->m)
	{
		index.own_fields = false;
		index.hnsw.efConstruction = (int)opts->ef_construction;
	}
};

/* The C entry points: every exception becomes a negative errno. */
#define GUARD_BEGIN try {
#define GUARD_END                                                              \
	}                                                                      \
	catch (const std::bad_alloc &)                                         \
	{                                                                      \
		return fail(msg, msglen, "out of memory", -ENOMEM);            \
	}                                                                      \
	catch (const std::exception &e)                                        \
	{                                                                      \
		return fail(msg, msglen, e.what(), -EINVAL);                   \
	}

static bool opts_ok(const hnsw_opts *o)
{
	return o->dim >= 1 && o->dim <= VECTOR_DIM_MAX && o->m >= 2 &&
	       o->m <= 256 && o->ef_construction >= 1 &&
	       o->ef_construction <= 4096;
}

extern "C" int hnsw_new(const struct hnsw_opts *o, hnsw_row_fn row,
			void *row_ctx, struct hnsw **out, char *msg,
			size_t msglen)
{
	GUARD_BEGIN
	if (!opts_ok(o))
		return fail(msg, msglen, "bad options", -EINVAL);
	*out = new hnsw(o, row, row_ctx);
	return 0;
	GUARD_END
}

extern "C" void hnsw_free(struct hnsw *h)
{
	delete h;
}

extern "C" uint32_t hnsw_count(const struct hnsw *h)
{
	return (uint32_t)h->index.ntotal;
}

extern "C" size_t hnsw_memory(const struct hnsw *h)
{
	const faiss::HNSW &g = h->index.hnsw;

	return sizeof(*h) + g.neighbors.capacity() * sizeof(g.neighbors[0]) +
	       g.offsets.capacity() * sizeof(g.offsets[0]) +
	       g.levels.capacity() * sizeof(g.levels[0]);
}

extern "C" int hnsw_add(struct hnsw *h, uint32_t n, char *msg, size_t msglen)
{
	GUARD_BEGIN
	size_t stride = vector_stride(h->o.dim);
	uint32_t first = hnsw_count(h), i, run;
	std::vector<float> rows;

	omp_set_num_threads(1);
	/* FAISS reads the new points as one array: copy them in runs. */
	for (i = 0; i < n; i += run) {
		run = n - i < 256 ? n - i : 256;
		rows.resize((size_t)run * stride);
		for (uint32_t j = 0; j < run; j++)
			std::memcpy(
				&rows[(size_t)j * stride],
				h->storage.row(h->storage.ctx, first + i + j),
				stride * sizeof(float));
		h->index.add(run, rows.data());
	}
	return 0;
	GUARD_END
}

extern "C" int hnsw_search(struct hnsw *h, const float *query, size_t k,
			   unsigned ef, hnsw_allow_fn allow, void *allow_ctx,
			   struct vec_hit *out, size_t *n_out, char *msg,
			   size_t msglen)
{
	GUARD_BEGIN
	std::vector<float> dist(k);
	std::vector<idx_t> lab(k);
	faiss::SearchParametersHNSW p;
	Allow sel(allow, allow_ctx);
	size_t i, n = 0;

	*n_out = 0;
	if (k == 0 || k > VECTOR_TOPK_MAX)
		return fail(msg, msglen, "k out of range", -EINVAL);
	if (h->index.ntotal == 0)
		return 0;
	/*
	 * FAISS 1.7.3 takes the selector from the parameters but efSearch
	 * only from the index (SearchParametersHNSW::efSearch is ignored):
	 * set both.
	 */
	p.efSearch = (int)(ef < k ? k : ef);
	h->index.hnsw.efSearch = p.efSearch;
	p.sel = allow ? &sel : nullptr;
	/* One query, on the caller's thread: an OpenMP team would only wake
	 * (and spin) threads that compete with the loop. The setting is the
	 * calling thread's own. */
	omp_set_num_threads(1);
	h->index.search(1, query, (idx_t)k, dist.data(), lab.data(), &p);
	for (i = 0; i < k; i++) {
		if (lab[i] < 0)
			continue;
		out[n].row = (uint32_t)lab[i];
		out[n].score = dist[i];
		n++;
	}
	*n_out = n;
	return 0;
	GUARD_END
}

/* ---- serialisation: our own little-endian layout of the graph ---- */

namespace
{

const uint32_t GRAPH_MAGIC = 0x47484d56u; /* "VMHG" */
const uint32_t GRAPH_VERSION = 1;

struct Writer {
	std::vector<uint8_t> b;

	void raw(const void *p, size_t n)
	{
		const uint8_t *c = static_cast<const uint8_t *>(p);
		b.insert(b.end(), c, c + n);
	}
	void u32(uint32_t v)
	{
		raw(&v, 4);
	}
	void u64(uint64_t v)
	{
		raw(&v, 8);
	}
	template <class T> void vec(const std::vector<T> &v)
	{
		u64(v.size());
		raw(v.data(), v.size() * sizeof(T));
	}
};

struct Reader {
	const uint8_t *p;
	size_t left;

	void raw(void *dst, size_t n)
	{
		if (n > left)
			throw std::runtime_error("graph bytes end early");
		std::memcpy(dst, p, n);
		p += n;
		left -= n;
	}
	uint32_t u32()
	{
		uint32_t v;
		raw(&v, 4);
		return v;
	}
	uint64_t u64()
	{
		uint64_t v;
		raw(&v, 8);
		return v;
	}
	template <class T> void vec(std::vector<T> &v, uint64_t max)
	{
		uint64_t n = u64();
		if (n > max || n > left / sizeof(T))
			throw std::runtime_error("graph array too long");
		v.resize(n);
		raw(v.data(), n * sizeof(T));
	}
};

} // namespace

static_assert(sizeof(faiss::HNSW::storage_idx_t) == 4, "32-bit links");

extern "C" int hnsw_serialise(const struct hnsw *h, uint8_t **buf, size_t *len,
			      char *msg, size_t msglen)
{
	GUARD_BEGIN
	const faiss::HNSW &g = h->index.hnsw;
	std::vector<uint64_t> offsets(g.offsets.begin(), g.offsets.end());
	Writer w;

	w.u32(GRAPH_MAGIC);
	w.u32(GRAPH_VERSION);
	w.u32(h->o.dim);
	w.u32(h->o.m);
	w.u64((uint64_t)h->index.ntotal);
	w.u32((uint32_t)g.entry_point);
	w.u32((uint32_t)g.max_level);
	w.u32((uint32_t)g.efConstruction);
	w.u32((uint32_t)g.upper_beam);
	w.vec(g.assign_probas);
	w.vec(g.cum_nneighbor_per_level);
	w.vec(g.levels);
	w.vec(offsets);
	w.vec(g.neighbors);
	*buf = static_cast<uint8_t *>(std::malloc(w.b.size() ? w.b.size() : 1));
	if (!*buf)
		return fail(msg, msglen, "out of memory", -ENOMEM);
	std::memcpy(*buf, w.b.data(), w.b.size());
	*len = w.b.size();
	return 0;
	GUARD_END
}

/* Everything search and add rely on, so bad bytes can never index out. */
static void check_graph(const faiss::HNSW &g, uint64_t n)
{
	size_t levels = g.cum_nneighbor_per_level.size();

	if (levels < 2 || g.assign_probas.size() + 1 != levels)
		throw std::runtime_error("bad level tables");
	if (g.cum_nneighbor_per_level[0] != 0)
		throw std::runtime_error("bad level tables");
	for (size_t l = 1; l < levels; l++)
		if (g.cum_nneighbor_per_level[l] <
		    g.cum_nneighbor_per_level[l - 1])
			throw std::runtime_error("bad level tables");
	if (g.levels.size() != n || g.offsets.size() != n + 1 ||
	    g.offsets[0] != 0)
		throw std::runtime_error("bad node tables");
	for (uint64_t i = 0; i < n; i++) {
		int lv = g.levels[i];
		if (lv < 1 || (size_t)lv >= levels || lv > g.max_level + 1)
			throw std::runtime_error("bad node level");
		if (g.offsets[i + 1] - g.offsets[i] !=
		    (size_t)g.cum_nneighbor_per_level[lv])
			throw std::runtime_error("bad node offsets");
	}
	if (g.offsets[n] != g.neighbors.size())
		throw std::runtime_error("bad link table");
	for (faiss::HNSW::storage_idx_t v : g.neighbors)
		if (v < -1 || (int64_t)v >= (int64_t)n)
			throw std::runtime_error("link out of range");
	if (n == 0 ? g.entry_point != -1 || g.max_level != -1
		   : g.entry_point < 0 || (uint64_t)g.entry_point >= n ||
			     g.max_level < 0 ||
			     g.levels[g.entry_point] != g.max_level + 1)
		throw std::runtime_error("bad entry point");
}

extern "C" int hnsw_deserialise(const uint8_t *buf, size_t len,
				const struct hnsw_opts *o, hnsw_row_fn row,
				void *row_ctx, struct hnsw **out, char *msg,
				size_t msglen)
{
	hnsw *h = nullptr;

	GUARD_BEGIN
	Reader r{buf, len};
	std::vector<uint64_t> offsets;
	uint64_t n;

	*out = nullptr;
	if (!opts_ok(o))
		return fail(msg, msglen, "bad options", -EINVAL);
	if (r.u32() != GRAPH_MAGIC || r.u32() != GRAPH_VERSION)
		return fail(msg, msglen, "not a graph of this version",
			    -EINVAL);
	if (r.u32() != o->dim)
		return fail(msg, msglen, "graph of another dimension", -EINVAL);
	if (r.u32() != o->m)
		return fail(msg, msglen, "graph of another m", -EINVAL);
	n = r.u64();
	if (n > VECSET_ROWS_MAX)
		return fail(msg, msglen, "graph too large", -EINVAL);
	h = new hnsw(o, row, row_ctx);
	faiss::HNSW &g = h->index.hnsw;
	g.entry_point = (int32_t)r.u32();
	g.max_level = (int32_t)r.u32();
	g.efConstruction = (int32_t)r.u32();
	g.upper_beam = (int32_t)r.u32();
	r.vec(g.assign_probas, 64);
	r.vec(g.cum_nneighbor_per_level, 65);
	r.vec(g.levels, n);
	r.vec(offsets, n + 1);
	r.vec(g.neighbors, (uint64_t)UINT32_MAX);
	if (r.left != 0)
		throw std::runtime_error("bytes after the graph");
	g.offsets.assign(offsets.begin(), offsets.end());
	check_graph(g, n);
	h->index.ntotal = (idx_t)n;
	h->storage.ntotal = (idx_t)n;
	*out = h;
	return 0;
}
catch (const std::bad_alloc &)
{
	delete h;
	return fail(msg, msglen, "out of memory", -ENOMEM);
}
catch (const std::exception &e)
{
	delete h;
	return fail(msg, msglen, e.what(), -EINVAL);
}
}

extern "C" const char *hnsw_library(void)
{
#define STR2(x) #x
#define STR(x)	STR2(x)
	return "faiss " STR(FAISS_VERSION_MAJOR) "." STR(
		FAISS_VERSION_MINOR) "." STR(FAISS_VERSION_PATCH);
}

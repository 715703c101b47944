#!/usr/bin/python3
"""Vector search, side by side in one run: vmem's engine (exact SIMD search,
the FAISS HNSW shim, filtered search through the metadata postings, the
index file, segment storage) against FAISS IndexFlatIP (exact, one thread)
and IndexHNSWFlat, and hnswlib, all in this process or its child, on the
same synthetic clustered data and queries. Recall@10 is against vmem's
exact search (checked against IndexFlatIP). Figures only, no verdicts.

Needs python3-numpy, python3-faiss, python3-hnswlib (Debian 12) and a
build of tests/bench/vmem-vector-bench.

usage: vmem-vector-bench.py [--build DIR] [--n N] [--dim D] [--queries Q]
                            [--full] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import faiss
except ImportError:  # pragma: no cover
    sys.exit("python3-faiss is needed (apt-get install python3-faiss)")
try:
    import hnswlib
except ImportError:  # pragma: no cover
    sys.exit("python3-hnswlib is needed (apt-get install python3-hnswlib)")

M = 16
EFC = 100
EFS = (32, 64, 128)


def make_data(n, dim, nq, seed=20261125):
    """Clustered vectors: 100 centres, each point a centre plus noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((100, dim)).astype(np.float32)
    lab = rng.integers(0, 100, n)
    x = centres[lab] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    q = centres[rng.integers(0, 100, nq)] + 0.6 * rng.standard_normal(
        (nq, dim)).astype(np.float32)
    # Metadata categories, independent of the clusters: 1 % each.
    cats = rng.integers(0, 100, n).astype(np.uint8)
    return x.astype(np.float32), q.astype(np.float32), cats


def pct(lat, p):
    return float(np.percentile(np.array(lat) * 1e3, p))


def recall(ids, truth):
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in
                          zip(ids, truth)]))


def timed_queries(fn, queries):
    lat, ids = [], []
    for q in queries:
        t = time.perf_counter()
        got = fn(q)
        lat.append(time.perf_counter() - t)
        ids.append(list(got))
    return lat, ids


def peers(x, q, cats, truth, nexact):
    out = {}
    faiss.omp_set_num_threads(1)
    xn = x.copy()
    faiss.normalize_L2(xn)
    qn = q.copy()
    faiss.normalize_L2(qn)
    n, dim = xn.shape

    flat = faiss.IndexFlatIP(dim)
    flat.add(xn)
    lat, ids = timed_queries(
        lambda v: flat.search(v.reshape(1, -1), 10)[1][0], qn[:nexact])
    out["faiss_flat"] = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                         "agree10": recall(ids, truth[:nexact])}
    del flat

    t = time.perf_counter()
    hn = faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)
    hn.hnsw.efConstruction = EFC
    hn.add(xn)
    out["faiss_hnsw"] = {"build_s": time.perf_counter() - t, "runs": [],
                         "bytes_per_vector":
                         len(faiss.serialize_index(hn)) / n}
    for ef in EFS:
        hn.hnsw.efSearch = ef
        lat, ids = timed_queries(
            lambda v: hn.search(v.reshape(1, -1), 10)[1][0], qn)
        out["faiss_hnsw"]["runs"].append(
            {"ef": ef, "recall10": recall(ids, truth), "p50_ms": pct(lat, 50),
             "p99_ms": pct(lat, 99)})
    # Filtered 1 % through an IDSelector (the index with the filter).
    lat, got_short, rec = [], 0, []
    for i, v in enumerate(qn):
        members = np.nonzero(cats == (i % 100))[0].astype(np.int64)
        sel = faiss.IDSelectorBatch(members.size, faiss.swig_ptr(members))
        p = faiss.SearchParametersHNSW(sel=sel, efSearch=64)
        t = time.perf_counter()
        _, ids = hn.search(v.reshape(1, -1), 10, params=p)
        lat.append(time.perf_counter() - t)
        found = [j for j in ids[0] if j >= 0]
        got_short += len(found) < min(10, members.size)
        sims = xn[members] @ v
        ref = members[np.argsort(-sims)[:10]]
        rec.append(len(set(found) & set(ref)) / min(10, members.size))
    out["faiss_hnsw_filtered_1pct"] = {
        "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
        "recall10": float(np.mean(rec)), "short_results": got_short}
    del hn

    t = time.perf_counter()
    hl = hnswlib.Index(space="ip", dim=dim)
    hl.init_index(max_elements=n, M=M, ef_construction=EFC)
    hl.set_num_threads(1)
    hl.add_items(xn, np.arange(n))
    out["hnswlib"] = {"build_s": time.perf_counter() - t, "runs": []}
    with tempfile.NamedTemporaryFile() as f:
        hl.save_index(f.name)
        out["hnswlib"]["bytes_per_vector"] = os.path.getsize(f.name) / n
    for ef in EFS:
        hl.set_ef(ef)
        lat, ids = timed_queries(
            lambda v: hl.knn_query(v.reshape(1, -1), 10)[0][0], qn)
        out["hnswlib"]["runs"].append(
            {"ef": ef, "recall10": recall(ids, truth), "p50_ms": pct(lat, 50),
             "p99_ms": pct(lat, 99)})
    # hnswlib 0.6.2 has no filter: ask for 100 and keep the 1 %.
    hl.set_ef(128)
    lat, got_short = [], 0
    for i, v in enumerate(qn):
        t = time.perf_counter()
        ids = hl.knn_query(v.reshape(1, -1), 100)[0][0]
        kept = [j for j in ids if cats[j] == i % 100][:10]
        lat.append(time.perf_counter() - t)
        got_short += len(kept) < 10
    out["hnswlib_postfilter_1pct"] = {"p50_ms": pct(lat, 50),
                                      "p99_ms": pct(lat, 99),
                                      "short_results": got_short}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "..",
                                                    "build"))
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=1536)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--exact-queries", type=int, default=50)
    ap.add_argument("--full", action="store_true",
                    help="100,000 documents (the issue's size)")
    ap.add_argument("--json", help="also write every figure here")
    a = ap.parse_args()
    if a.full:
        a.n = 100000
    exe = os.path.join(a.build, "tests", "bench", "vmem-vector-bench")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe}: not built (ninja -C {a.build})")
    load0 = os.getloadavg()[0]
    x, q, cats = make_data(a.n, a.dim, a.queries)
    with tempfile.TemporaryDirectory(prefix="vmem-vbench-") as d:
        for name, arr in (("data", x), ("queries", q), ("cats", cats)):
            arr.tofile(os.path.join(d, name))
        t = time.perf_counter()
        res = subprocess.run(
            [exe, "--data", f"{d}/data", "--queries", f"{d}/queries",
             "--cats", f"{d}/cats", "--dim", str(a.dim), "--n", str(a.n),
             "--nq", str(a.queries), "--dir", d, "--m", str(M),
             "--efc", str(EFC), "--ef", ",".join(map(str, EFS)),
             "--exact-queries", str(a.exact_queries)],
            check=True, capture_output=True, text=True)
        engine_s = time.perf_counter() - t
        v = json.loads(res.stdout)
    truth = v.pop("truth")
    p = peers(x, q, cats, truth, a.exact_queries)
    load1 = os.getloadavg()[0]

    def row(what, p50, p99, rec="", note=""):
        print(f"{what:38} {p50:9.3f} {p99:9.3f} {rec:>9} {note}")

    print(f"# vector bench: {a.n} documents x {a.dim} dimensions, "
          f"{a.queries} queries, M={M} efConstruction={EFC}; "
          f"{os.cpu_count()} CPUs, load {load0:.2f} -> {load1:.2f}; "
          f"engine run {engine_s:.0f} s")
    print(f"{'what':38} {'p50 ms':>9} {'p99 ms':>9} {'recall@10':>9}")
    e = v["exact"]
    ff = p["faiss_flat"]
    row(f"vmem exact ({e['avx2']['kernel']})", e["avx2"]["p50_ms"],
        e["avx2"]["p99_ms"], "1.000",
        f"{e['avx2']['p50_ms'] / ff['p50_ms']:.2f}x faiss flat p50")
    row("vmem exact (portable kernel)", e["portable"]["p50_ms"],
        e["portable"]["p99_ms"], "1.000", f"{e['portable']['queries']} queries")
    row("faiss IndexFlatIP, 1 thread", ff["p50_ms"], ff["p99_ms"],
        f"{ff['agree10']:.3f}", "(agreement with vmem exact)")
    for r in v["hnsw"]["runs"]:
        row(f"vmem hnsw (faiss shim) ef={r['ef']}", r["p50_ms"], r["p99_ms"],
            f"{r['recall10']:.3f}")
    for r in p["faiss_hnsw"]["runs"]:
        row(f"faiss IndexHNSWFlat ef={r['ef']}", r["p50_ms"], r["p99_ms"],
            f"{r['recall10']:.3f}")
    for r in p["hnswlib"]["runs"]:
        row(f"hnswlib ef={r['ef']}", r["p50_ms"], r["p99_ms"],
            f"{r['recall10']:.3f}")
    f1 = v["filtered_1pct"]
    row("vmem filtered 1% (filter + search)", f1["p50_ms"], f1["p99_ms"],
        f"{f1['recall10']:.3f}",
        f"filter alone p50 {f1['filter_p50_ms'] * 1e3:.0f} us, "
        f"p99 {f1['filter_p99_ms'] * 1e3:.0f} us; paths {f1['paths']}")
    f10 = v["filtered_10pct"]
    row("vmem filtered 10% (filter + search)", f10["p50_ms"],
        f10["p99_ms"], f"{f10['recall10']:.3f}", f"paths {f10['paths']}")
    pf = p["faiss_hnsw_filtered_1pct"]
    row("faiss hnsw + IDSelector 1% ef=64", pf["p50_ms"], pf["p99_ms"],
        f"{pf['recall10']:.3f}",
        f"{pf['short_results']} queries got fewer than asked")
    hf = p["hnswlib_postfilter_1pct"]
    row("hnswlib k=100 then filter 1%", hf["p50_ms"], hf["p99_ms"], "",
        f"{hf['short_results']} queries got fewer than 10")
    mem = v["memory"]
    print(f"# build: vmem {v['hnsw']['build_s']:.1f} s, faiss "
          f"{p['faiss_hnsw']['build_s']:.1f} s, hnswlib "
          f"{p['hnswlib']['build_s']:.1f} s (one thread each)")
    print(f"# memory per vector: vmem {mem['bytes_per_vector']:.0f} B "
          f"(vectors {mem['vector_bytes'] / a.n:.0f}, graph "
          f"{mem['graph_bytes'] / a.n:.0f}, maps {mem['map_bytes'] / a.n:.0f});"
          f" faiss hnsw {p['faiss_hnsw']['bytes_per_vector']:.0f} B, hnswlib "
          f"{p['hnswlib']['bytes_per_vector']:.0f} B (their files); "
          f"raw float32 {a.dim * 4} B; metadata postings "
          f"{mem['filter_index_bytes'] / a.n:.0f} B")
    fi = v["index_file"]
    print(f"# index file: {fi['bytes'] / 2**20:.1f} MiB, save "
          f"{fi['save_s']:.2f} s, load+verify {fi['load_s']:.2f} s "
          f"(loaded: {fi['loaded']})")
    s = v["segments"]
    print(f"# segments: {a.n} documents written twice over half "
          f"({s['write_s']:.1f} s), disk {s['disk_before'] / 2**20:.0f} MiB"
          f" -> {s['disk_after'] / 2**20:.0f} MiB after compaction "
          f"({s['compact_s']:.1f} s), {s['ratio_after']:.3f}x the live "
          f"{s['live'] / 2**20:.0f} MiB; start-up read {s['open_s']:.2f} s "
          f"({s['open_bytes'] / 2**20 / max(s['open_s'], 1e-9):.0f} MiB/s, "
          f"{s['segments']} segments)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "vmem": v, "peers": p,
                       "load": [load0, load1]}, f, indent=1)


if __name__ == "__main__":
    main()

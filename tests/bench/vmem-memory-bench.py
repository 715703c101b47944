#!/usr/bin/python3
"""Conversations and documents over the socket (issue 15), peers side by
side in one run: a real vmemd on a temporary repository is loaded through
its socket with documents (synthetic clustered embeddings, a category
that selects 1 % of them) and messages in sessions, then measured by one
client sending pre-encoded request lines (client encoding is not timed):
semantic_search top-10 (recall@10 against the daemon's exact search,
itself checked against FAISS IndexFlatIP; the query embedding as JSON
numbers and in the packed form the Python client sends), filtered to
1 %, exact mode against FAISS IndexFlatIP on one thread in process,
FAISS IndexHNSWFlat
and hnswlib in process, message.history (limit 100), temporal_query of a
one-day window, durable message.store throughput at 16 clients against
decision.store in the same run (vmem-bench), a graceful restart (start-up
time, the vector index loaded, not rebuilt), the daemon's resident memory
against content + vectors, and the disk after compaction against the
live data. Figures only, no verdicts.

Default: 20,000 documents x 1536 and 100,000 messages in 1,000 sessions;
--full: 100,000 documents and 1,000,000 messages in 10,000 sessions.

usage: vmem-memory-bench.py [--build DIR] [--docs N] [--dim D]
                            [--messages M] [--sessions S] [--queries Q]
                            [--full] [--json FILE]
"""
import argparse
import base64
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

try:
    import faiss
except ImportError:  # pragma: no cover
    sys.exit("python3-faiss is needed (apt-get install python3-faiss)")
try:
    import hnswlib
except ImportError:  # pragma: no cover
    sys.exit("python3-hnswlib is needed (apt-get install python3-hnswlib)")

LOADERS = 16
GRAPH_MIN = 4096  # vindex's hnsw_min: fewer live rows get no graph
GRAPH_WAIT_S = 900
WORDS = ("vector memory session agent search index segment cluster "
         "document metadata filter cosine durable commit").split()


# ---- data ----

def make_docs(n, dim, nq, seed=20261125):
    """Clustered vectors (100 centres), queries near the centres, and a
    category per document (100 of them: 1 % each)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((100, dim)).astype(np.float32)
    lab = rng.integers(0, 100, n)
    x = centres[lab] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    q = centres[rng.integers(0, 100, nq)] + 0.6 * rng.standard_normal(
        (nq, dim)).astype(np.float32)
    cats = rng.integers(0, 100, n)
    return np.round(x, 5), np.round(q, 5), cats


def text(rng, words):
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), words))


def pct(lat, p):
    return float(np.percentile(np.array(lat) / 1e3, p))  # us


def recall(got, truth):
    return float(np.mean([len(set(a) & set(b)) / max(1, len(b))
                          for a, b in zip(got, truth)]))


# ---- the daemon ----

class Client:
    """A blocking socket to the daemon: pre-encoded lines, raw answers."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.buf = b""
        # One receive buffer for the client's life: recv(n) would
        # allocate (and the allocator map) n bytes for every read.
        self.rview = memoryview(bytearray(1 << 20))

    def raw(self, line):
        """Send one request line; its answer line (bytes)."""
        self.s.sendall(line)
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                out, self.buf = self.buf[:i], self.buf[i + 1:]
                return out
            n = self.s.recv_into(self.rview)
            if not n:
                raise EOFError("daemon closed the connection")
            self.buf += self.rview[:n]

    def call(self, method, params=None):
        line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                           "params": params or {}}).encode() + b"\n"
        resp = json.loads(self.raw(line))
        if "error" in resp:
            raise RuntimeError("%s: %s" % (method, resp["error"]))
        return resp["result"]

    def timed(self, line):
        t = time.perf_counter_ns()
        out = self.raw(line)
        return time.perf_counter_ns() - t, out

    def close(self):
        self.s.close()


def packed(v):
    """An embedding in the packed form: base64url of little-endian
    float32, as the Python client sends it."""
    return base64.urlsafe_b64encode(np.asarray(v, dtype="<f4").tobytes()) \
        .rstrip(b"=").decode("ascii")


def time_history(c, sessions):
    """message.history (limit 100) of 2,000 sessions spread over all of
    them, none of those the churn deletes (an empty answer is no
    history): the round trips in ns."""
    lat = []
    for i in range(2000):
        k = (i * 7919) % len(sessions)
        if k % 10 == 0:
            k += 1
        dt, _ = c.timed(line_of("message.history", {
            "session_id": sessions[k], "limit": 100}))
        lat.append(dt)
    return lat


def line_of(method, params, rid=1):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                       "params": params}, separators=(",", ":")).encode() \
        + b"\n"


class Daemon:
    def __init__(self, vmemd, root, sock, dim):
        self.argv = [vmemd, "--foreground", "--repo", root, "--socket", sock,
                     "--embedding-dim", str(dim), "--max-line",
                     str(64 << 20), "--commit-delay-ms", "1000"]
        self.sock = sock
        self.log = open(os.path.join(os.path.dirname(sock), "vmemd.log"),
                        "ab")
        self.proc = None

    def start(self):
        t = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        while True:
            if self.proc.poll() is not None:
                sys.exit("vmemd exited with %d (see %s)"
                         % (self.proc.returncode, self.log.name))
            try:
                c = Client(self.sock)
                c.close()
                return time.monotonic() - t
            except OSError:
                time.sleep(0.005)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(600)

    def rss(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) * 1024
        return 0


# ---- loading, in processes (one connection each) ----

def load_part(path, lines, out):
    c = Client(path)
    ids = []
    for ln in lines:
        resp = json.loads(c.raw(ln))
        if "error" in resp:
            out.put(("error", resp["error"]))
            return
        ids.append(resp["result"].get("id") if isinstance(
            resp["result"], dict) else None)
    c.close()
    out.put(("ids", ids))


def load(path, lines, loaders=LOADERS):
    """Send lines over `loaders` connections (line i on connection i %
    loaders, in order); the ids answered, in line order, and the rate."""
    ctx = multiprocessing.get_context("fork")
    parts = [lines[i::loaders] for i in range(loaders)]
    queues = [ctx.Queue() for _ in parts]
    t = time.monotonic()
    procs = [ctx.Process(target=load_part, args=(path, p, q))
             for p, q in zip(parts, queues)]
    for p in procs:
        p.start()
    got = []
    for q in queues:
        kind, v = q.get()
        if kind == "error":
            sys.exit("load failed: %s" % (v,))
        got.append(v)
    for p in procs:
        p.join()
    dt = time.monotonic() - t
    ids = [None] * len(lines)
    for i, part in enumerate(got):
        ids[i::loaders] = part
    return ids, len(lines) / dt


# ---- the run ----

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(here, "..", "..",
                                                    "build"))
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=1536)
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--full", action="store_true",
                    help="100,000 documents, 1,000,000 messages in 10,000 "
                         "sessions")
    ap.add_argument("--json", help="also write every figure here")
    ap.add_argument("--keep", metavar="DIR",
                    help="load into DIR (a new directory) and keep it: its "
                         "repo/ for profiling a start-up afterwards")
    a = ap.parse_args()
    if a.full:
        a.docs, a.messages, a.sessions = 100000, 1000000, 10000
    vmemd = os.path.join(a.build, "daemon", "vmemd")
    vbench = os.path.join(a.build, "tests", "bench", "vmem-bench")
    if a.keep:
        os.mkdir(a.keep, 0o700)
        tmp = a.keep
    else:
        tmp = tempfile.mkdtemp(prefix="vmem-mb-", dir="/tmp")
        os.chmod(tmp, 0o700)
    root = os.path.join(tmp, "repo")
    subprocess.run(["git", "init", "-q", root], check=True)
    sock = os.path.join(tmp, "s.sock")
    d = Daemon(vmemd, root, sock, a.dim)
    fig = {"docs": a.docs, "dim": a.dim, "messages": a.messages,
           "sessions": a.sessions, "queries": a.queries,
           "load_average": os.getloadavg()}
    try:
        run(a, d, fig, tmp, vbench)
    finally:
        if d.proc and d.proc.poll() is None:
            if a.keep:
                d.proc.terminate()
                d.proc.wait()
            else:
                d.proc.kill()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(fig, f, indent=2)


def row(what, p50=None, p99=None, extra=""):
    fmt = lambda v: "%9.1f" % v if v is not None else "%9s" % "-"
    print("%-46s %s %s  %s" % (what, fmt(p50), fmt(p99), extra))


def run(a, d, fig, tmp, vbench):
    rng = np.random.default_rng(7)
    print("vmem-memory-bench: %d documents x %d, %d messages in %d "
          "sessions, %d queries; load average %.2f %.2f %.2f"
          % ((a.docs, a.dim, a.messages, a.sessions, a.queries)
             + os.getloadavg()))
    x, q, cats = make_docs(a.docs, a.dim, a.queries)
    d.start()
    c = Client(d.sock)

    # -- documents
    content_bytes = 0
    lines = []
    for i in range(a.docs):
        body = "doc %d %s" % (i, text(rng, 60))
        meta = {"cat": int(cats[i]), "src": "bench"}
        content_bytes += len(body) + len(json.dumps(meta,
                                                     separators=(",", ":")))
        lines.append(line_of("document.store", {
            "content": body, "metadata": meta,
            "embedding": x[i].tolist()}))
    doc_ids, rate = load(d.sock, lines)
    del lines
    fig["document_store_per_s"] = rate
    print("loaded %d documents: %.0f/s (durable, %d connections)"
          % (a.docs, rate, LOADERS))

    # -- messages
    sessions = [str(uuid.UUID(int=(7 << 64) | s)) for s in range(a.sessions)]
    lines = []
    for i in range(a.messages):
        body = "message %d %s" % (i, text(rng, 25))
        content_bytes += len(body) + 2
        lines.append(line_of("message.store", {
            "session_id": sessions[i % a.sessions],
            "role": ("user", "assistant")[i % 2], "content": body,
            "user_id": "u%d" % (i % 50)}))
    _, rate = load(d.sock, lines)
    del lines
    fig["message_store_load_per_s"] = rate
    print("loaded %d messages: %.0f/s (durable, %d connections)"
          % (a.messages, rate, LOADERS))

    # -- wait for the graph (none below GRAPH_MIN: every search is exact;
    # a graph still missing after GRAPH_WAIT_S is said, not waited for)
    t = time.monotonic()
    while True:
        vi = c.call("server.health")["vector_index"]
        if not vi["building"] and (vi["graph_rows"] >= 0.99 * a.docs or
                                   a.docs < GRAPH_MIN):
            break
        if time.monotonic() - t > GRAPH_WAIT_S:
            print("note: no whole graph after %d s (%s)" % (GRAPH_WAIT_S,
                                                           vi))
            break
        time.sleep(0.5)
    fig["graph_wait_s"] = time.monotonic() - t
    print("graph over %d rows after %.1f s more" % (vi["graph_rows"],
                                                     fig["graph_wait_s"]))

    # -- churn for the compaction: a third of the documents rewritten,
    # a tenth of the sessions deleted
    upd = [line_of("document.update", {"id": doc_ids[i],
                                       "content": "rewritten %d %s"
                                       % (i, text(rng, 60))})
           for i in range(0, a.docs, 3)]
    load(d.sock, upd)
    dels = [line_of("session.delete", {"session_id": s})
            for s in sessions[::10]]
    load(d.sock, dels)
    msgs_left = a.messages - sum(1 for i in range(a.messages)
                                 if i % a.sessions % 10 == 0)

    # -- settle: the churn's writes materialised (server.flush: the
    # daemon idle, the log emptied), the compaction they started, and the
    # graph over every document, are background work; the latencies
    # below are of a settled daemon, its storage unchanged for 3 s (the
    # compaction's own figures are said after)
    t = time.monotonic()
    c.call("server.flush", {"timeout_ms": 600000})
    last, still = None, 0
    while time.monotonic() - t < 300:
        h = c.call("server.health")
        ls = h["local_storage"]
        disk = sum(v["disk_bytes"] for v in ls.values())
        live = sum(v["live_bytes"] for v in ls.values())
        vi = h["vector_index"]
        still = still + 1 if (ls, vi) == last else 0
        last = (ls, vi)
        if (disk <= 1.3 * live and not vi["building"] and still >= 3 and
                (vi["graph_rows"] >= a.docs or a.docs < GRAPH_MIN)):
            break
        time.sleep(1)
    fig["settle_s"] = time.monotonic() - t
    fig["disk"] = {"segments_bytes": disk, "live_bytes": live,
                   "ratio": disk / live,
                   "compactions": sum(v["compactions"]
                                      for v in ls.values())}
    print("settled after %.1f s more: compaction done, graph over %d rows"
          % (fig["settle_s"], vi["graph_rows"]))

    print()
    print("%-46s %9s %9s  %s" % ("what (one client, over the socket)",
                                "p50 us", "p99 us", "notes"))

    # -- semantic search
    qn = q.copy()
    faiss.normalize_L2(qn)
    xn = x.copy()
    faiss.normalize_L2(xn)
    id_row = {did: i for i, did in enumerate(doc_ids)}
    # The graph's queries first, so that the daemon's own timing of
    # semantic_search (server.stats) is theirs alone.
    sq_lines = [line_of("document.semantic_search", {
        "query_embedding": q[i].tolist(), "top_k": 10})
        for i in range(a.queries)]
    lat, outs = [], []
    for ln in sq_lines:
        dt, out = c.timed(ln)
        lat.append(dt)
        outs.append(out)
    st = c.call("server.stats")["methods"]["document.semantic_search"]
    fig["search_in_daemon"] = {k: st[k] for k in ("count", "p50_us",
                                                  "p99_us")}
    got = [[id_row[h["id"]] for h in json.loads(out)["result"]]
           for out in outs]
    # The same queries in the packed form the Python client sends
    # (base64url of little-endian float32): the same answers, and what
    # parsing 1536 numbers costs the round trip.
    pk_lines = [line_of("document.semantic_search", {
        "query_embedding": packed(q[i]), "top_k": 10})
        for i in range(a.queries)]
    pk_lat, pk_got = [], []
    for ln in pk_lines:
        dt, out = c.timed(ln)
        pk_lat.append(dt)
        pk_got.append([id_row[h["id"]] for h in json.loads(out)["result"]])
    fig["search_packed"] = {"p50_us": pct(pk_lat, 50),
                            "p99_us": pct(pk_lat, 99),
                            "same_answers": pk_got == got}
    ex_lines = [line_of("document.semantic_search", {
        "query_embedding": q[i].tolist(), "top_k": 10, "exact": True})
        for i in range(a.queries)]
    truth, ex_lat = [], []
    for ln in ex_lines:
        dt, out = c.timed(ln)
        ex_lat.append(dt)
        truth.append([id_row[h["id"]] for h in json.loads(out)["result"]])
    faiss.omp_set_num_threads(1)
    flat = faiss.IndexFlatIP(a.dim)
    flat.add(xn)
    fl_lat, fl_ids = [], []
    for v in qn:
        t = time.perf_counter_ns()
        fl_ids.append(list(flat.search(v.reshape(1, -1), 10)[1][0]))
        fl_lat.append(time.perf_counter_ns() - t)
    fig["exact"] = {"p50_us": pct(ex_lat, 50), "p99_us": pct(ex_lat, 99),
                    "faiss_flat_p50_us": pct(fl_lat, 50),
                    "faiss_flat_p99_us": pct(fl_lat, 99),
                    "agree_with_faiss_flat": recall(truth, fl_ids)}
    fig["exact"]["ratio_p50"] = fig["exact"]["p50_us"] / \
        fig["exact"]["faiss_flat_p50_us"]
    fig["search"] = {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
                     "recall10": recall(got, truth)}
    row("semantic_search top-10", fig["search"]["p50_us"],
        fig["search"]["p99_us"], "recall@10 %.3f vs exact; in the daemon "
        "p50 %.0f, p99 %.0f" % (fig["search"]["recall10"],
                               fig["search_in_daemon"]["p50_us"],
                               fig["search_in_daemon"]["p99_us"]))
    row("semantic_search top-10, packed embedding",
        fig["search_packed"]["p50_us"], fig["search_packed"]["p99_us"],
        "answers %s the numbers'" % ("equal to" if fig["search_packed"][
            "same_answers"] else "DIFFERENT from"))
    # Filtered to 1 %: against the exact answer among the matches.
    lat, rec, short = [], [], 0
    for i in range(a.queries):
        cat = i % 100
        ln = line_of("document.semantic_search", {
            "query_embedding": q[i].tolist(), "top_k": 10,
            "metadata_filters": {"cat": cat}})
        dt, out = c.timed(ln)
        lat.append(dt)
        ids = [id_row[h["id"]] for h in json.loads(out)["result"]]
        members = np.nonzero(cats == cat)[0]
        ref = members[np.argsort(-(xn[members] @ qn[i]))[:10]]
        rec.append(len(set(ids) & set(ref)) / max(1, min(10, members.size)))
        short += len(ids) < min(10, members.size)
    fig["search_1pct"] = {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
                          "recall10": float(np.mean(rec)),
                          "short_results": short}
    row("semantic_search top-10, filter 1 %", pct(lat, 50), pct(lat, 99),
        "recall@10 %.3f, %d short" % (np.mean(rec), short))
    row("semantic_search exact", fig["exact"]["p50_us"],
        fig["exact"]["p99_us"], "%.2fx FAISS IndexFlatIP p50 (agree %.3f)"
        % (fig["exact"]["ratio_p50"],
           fig["exact"]["agree_with_faiss_flat"]))
    row("  FAISS IndexFlatIP, 1 thread, in process",
        fig["exact"]["faiss_flat_p50_us"], fig["exact"]["faiss_flat_p99_us"])
    del flat

    # -- peers in process
    hn = faiss.IndexHNSWFlat(a.dim, 16, faiss.METRIC_INNER_PRODUCT)
    hn.hnsw.efConstruction = 100
    hn.add(xn)
    hn.hnsw.efSearch = 128
    lat, ids = [], []
    for v in qn:
        t = time.perf_counter_ns()
        ids.append(list(hn.search(v.reshape(1, -1), 10)[1][0]))
        lat.append(time.perf_counter_ns() - t)
    fig["faiss_hnsw"] = {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
                         "recall10": recall(ids, truth)}
    row("  FAISS IndexHNSWFlat ef 128, in process", pct(lat, 50),
        pct(lat, 99), "recall@10 %.3f" % recall(ids, truth))
    del hn
    hl = hnswlib.Index(space="ip", dim=a.dim)
    hl.init_index(max_elements=a.docs, M=16, ef_construction=100)
    hl.add_items(xn, np.arange(a.docs))
    hl.set_ef(128)
    hl.set_num_threads(1)
    lat, ids = [], []
    for v in qn:
        t = time.perf_counter_ns()
        ids.append(list(hl.knn_query(v.reshape(1, -1), 10)[0][0]))
        lat.append(time.perf_counter_ns() - t)
    fig["hnswlib"] = {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
                      "recall10": recall(ids, truth)}
    row("  hnswlib ef 128, in process", pct(lat, 50), pct(lat, 99),
        "recall@10 %.3f" % recall(ids, truth))
    del hl

    # -- history
    lat = time_history(c, sessions)
    fig["history"] = {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99)}
    row("message.history limit 100", pct(lat, 50), pct(lat, 99),
        "%d messages per session" % (a.messages // a.sessions))
    # -- temporal, a one-day window ending now
    lat = []
    for i in range(2000):
        now = time.time()
        dt, _ = c.timed(line_of("document.temporal_query", {
            "start": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                   time.gmtime(now - 86400)),
            "end": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                 time.gmtime(now + 60))}))
        lat.append(dt)
    fig["temporal_day"] = {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99)}
    row("temporal_query one day (limit 100)", pct(lat, 50), pct(lat, 99),
        "every document is in the window")

    # -- the same calls as the daemon timed them (parse to answer queued):
    # what the socket and the client add is the difference
    after = c.call("server.stats")["methods"]
    fig["in_daemon"] = {}
    for m in ("message.history", "document.temporal_query"):
        if m in after:
            fig["in_daemon"][m] = {k: after[m][k] for k in
                                   ("count", "p50_us", "p99_us")}
    print("inside the daemon: "
          + "; ".join("%s p50 %.0f us, p99 %.0f us" % (m, v["p50_us"],
                                                       v["p99_us"])
                      for m, v in fig["in_daemon"].items()))

    vectors = a.docs * a.dim * 4
    fig["memory"] = {"rss_bytes": d.rss(), "content_bytes": content_bytes,
                     "vector_bytes": vectors}
    c.close()

    # -- restart: start-up with all of it, the index loaded
    d.stop()
    vindex = os.path.join(os.path.dirname(d.sock), "repo", ".git", "vmem",
                          "documents", "vindex")
    fig["disk"]["vindex_bytes"] = os.path.getsize(vindex)
    fig["startup_s"] = d.start()
    c = Client(d.sock)
    h = c.call("server.health")
    fig["startup_index"] = h["vector_index"]["state"]
    fig["memory"]["rss_after_restart_bytes"] = d.rss()
    fig["memory"]["ratio"] = fig["memory"]["rss_after_restart_bytes"] / (
        content_bytes + vectors)
    fig["counts"] = h["counts"]
    print()
    print("start-up with all of it: %.2f s (vector index %s; %d documents, "
          "%d messages)" % (fig["startup_s"], fig["startup_index"],
                            h["counts"]["documents"],
                            h["counts"]["messages"]))
    if h["counts"]["messages"] != msgs_left:
        print("note: %d messages expected after the deletes, %d held"
              % (msgs_left, h["counts"]["messages"]))
    print("memory: RSS %.0f MiB after the restart (%.0f MiB before it) "
          "= %.2fx content %.0f MiB + vectors %.0f MiB"
          % (fig["memory"]["rss_after_restart_bytes"] / 2**20,
             fig["memory"]["rss_bytes"] / 2**20, fig["memory"]["ratio"],
             content_bytes / 2**20, vectors / 2**20))
    print("disk: segments %.0f MiB = %.2fx the live records %.0f MiB after "
          "%d compactions; the vector index file %.0f MiB"
          % (disk / 2**20, fig["disk"]["ratio"], live / 2**20,
             fig["disk"]["compactions"], fig["disk"]["vindex_bytes"] / 2**20))
    # The same graph queries on the restarted daemon (its vectors and
    # graph read back from disk, nothing else running in it).
    lat = []
    for ln in sq_lines:
        dt, _ = c.timed(ln)
        lat.append(dt)
    st = c.call("server.stats")["methods"]["document.semantic_search"]
    pk_lat = []
    for ln in pk_lines:
        dt, _ = c.timed(ln)
        pk_lat.append(dt)
    fig["search_after_restart"] = {"p50_us": pct(lat, 50),
                                   "p99_us": pct(lat, 99),
                                   "in_daemon_p50_us": st["p50_us"],
                                   "in_daemon_p99_us": st["p99_us"],
                                   "packed_p50_us": pct(pk_lat, 50),
                                   "packed_p99_us": pct(pk_lat, 99)}
    print("semantic_search top-10 after the restart: p50 %.0f us, p99 %.0f "
          "us; in the daemon p50 %.0f, p99 %.0f; packed p50 %.0f us, p99 "
          "%.0f us"
          % (pct(lat, 50), pct(lat, 99), st["p50_us"], st["p99_us"],
             pct(pk_lat, 50), pct(pk_lat, 99)))
    # message.history again, on the restarted daemon (its records laid
    # out by the start-up's read, not by the load and the churn).
    lat = time_history(c, sessions)
    st = c.call("server.stats")["methods"]["message.history"]
    fig["history_after_restart"] = {"p50_us": pct(lat, 50),
                                    "p99_us": pct(lat, 99),
                                    "in_daemon_p50_us": st["p50_us"],
                                    "in_daemon_p99_us": st["p99_us"]}
    print("message.history limit 100 after the restart: p50 %.0f us, p99 "
          "%.0f us; in the daemon p50 %.0f, p99 %.0f"
          % (pct(lat, 50), pct(lat, 99), st["p50_us"], st["p99_us"]))
    c.close()
    d.stop()

    # -- durable throughput at 16 clients, same run: vmem-bench
    if os.path.exists(vbench):
        out = subprocess.run([vbench, "--vmemd", d.argv[0], "--clients",
                              "16", "--seconds", "5", "--mix", "store",
                              "--mix", "message"], capture_output=True,
                             text=True, timeout=600).stdout
        rates = {}
        for ln in out.splitlines():
            m = re.match(r"^(store|message)\s+16\s+1\s+(\d+)", ln)
            if m:
                rates[m.group(1)] = int(m.group(2))
        if len(rates) == 2:
            fig["durable_16"] = dict(rates, ratio=rates["message"] /
                                     rates["store"])
            print("durable writes, 16 clients (vmem-bench, 256-byte "
                  "values): message.store %d/s, decision.store %d/s: "
                  "%.2fx" % (rates["message"], rates["store"],
                             fig["durable_16"]["ratio"]))
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()

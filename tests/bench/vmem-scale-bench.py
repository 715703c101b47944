#!/usr/bin/env python3
"""vmem-scale-bench: vmemd at 20,000, 100,000 (and, with --sizes, 1,000,000)
decisions of ~480 bytes of content, the table of issue 17.

For each size, on a fresh repository, a release vmemd with --max-x 50000
(commits only when asked, so the first git.sync commits everything):

  load                 every decision through decision.store_many (1,000
                       items a call, one connection)
  first git.sync       the commit of all of them
  git.sync of 10       ten overwrites, then git.sync
  restart -> answer    SIGTERM, wait, start, until decision.get answers
  CPU after restart    CPU seconds the daemon spends after that answer
                       until it has been idle for 2 s (and how long that
                       took), capped by --idle-max
  RSS / content        VmRSS over the content bytes: at rest (after the
                       load, once the daemon has rested 6 s), after the
                       restart (the same) and the peak during the first
                       git.sync; also
                       (RSS - an empty daemon's RSS) / content, and the
                       anonymous part alone (RssAnon: without the files
                       mapped)
  search               round trips through the socket, limit 100, p50 and
                       p99 of every query shape of vmem-fts5-bench (the
                       same generator, the same queries): phrase of common
                       words and a common term are the table's columns
  stall                decision.store p99 on one connection, idle, then
                       while another process reads everything
                       (query_range {}) without pause: the ratio (target
                       <= 5)

and, with --fts5 (default on), vmem-fts5-bench's in-process comparison of
the search module with SQLite FTS5 on the same corpus. The corpus comes
from vmem-fts5-bench --write-corpus (Zipf vocabulary of 100,000 words).

Prints figures; never fails on time. Say how loaded the machine was when
you quote them: vmem-scale-bench prints the load average before and after.

usage: vmem-scale-bench.py [--vmemd PATH] [--fts5-bench PATH]
                           [--sizes 20000,100000] [--no-fts5]
                           [--queries N] [--idle-max S] [--keep]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_X = 50000
SHAPES = ("rare", "common", "and", "or", "phrase", "prefix")
TICK = os.sysconf("SC_CLK_TCK")


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1)))] if v else float("nan")


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def coord_of(i):
    return {"x": 1 + i // 20, "y": 1 + i // 4 % 5, "z": 1 + i % 4}


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.buf = b""
        self.n = 0

    def send(self, method, params=None):
        self.n += 1
        msg = {"jsonrpc": "2.0", "id": self.n, "method": method}
        if params is not None:
            msg["params"] = params
        self.s.sendall((json.dumps(msg, separators=(",", ":")) + "\n")
                       .encode())

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError("vmemd closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def recv(self):
        while True:
            r = json.loads(self.line())
            if "id" in r:
                break
        if "error" in r:
            raise RuntimeError(r["error"])
        return r["result"]

    def call(self, method, params=None):
        self.send(method, params)
        return self.recv()

    def close(self):
        self.s.close()


class Daemon:
    def __init__(self, vmemd, root, sock, log):
        self.argv = [vmemd, "--foreground", "--repo", root, "--socket",
                     sock, "--max-x", str(MAX_X), "--commit-delay-ms",
                     "3600000", "--commit-max-batch", "1000000",
                     "--max-line", str(64 << 20)]
        self.sock = sock
        self.log = log
        self.proc = None

    def start(self, timeout=3600):
        """Start; the time until a decision.get answers."""
        t0 = time.monotonic()
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err)
        while True:
            try:
                c = Conn(self.sock)
                c.call("decision.get", {"coordinate": coord_of(0)})
                c.close()
                return time.monotonic() - t0
            except (OSError, EOFError):
                if self.proc.poll() is not None:
                    raise SystemExit("vmemd exited: see %s" % self.log)
                if time.monotonic() - t0 > timeout:
                    raise SystemExit("vmemd did not answer")
                time.sleep(0.01)

    def stop(self):
        """SIGTERM; the time it took to exit."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        return time.monotonic() - t0

    def rss(self):
        return status_kib(self.proc.pid, "VmRSS") * 1024

    def rss_anon(self):
        """The daemon's own memory: RSS without file pages mapped (the
        libraries, files libgit2 maps)."""
        return status_kib(self.proc.pid, "RssAnon") * 1024

    def wait_idle(self, idle_max, quiet=2.0):
        """CPU seconds spent until idle for quiet seconds, and the wall
        time until the quiet began."""
        pid = self.proc.pid
        t0 = time.monotonic()
        c0 = cpu_seconds(pid)
        quiet_since, last = None, c0
        while time.monotonic() - t0 < idle_max:
            time.sleep(0.25)
            now = cpu_seconds(pid)
            if now - last <= 0.01:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= quiet:
                    break
            else:
                quiet_since = None
            last = now
        end = quiet_since or time.monotonic()
        return cpu_seconds(pid) - c0, end - t0


def search_round_trips(c, queries, reps=3):
    """{shape: [seconds]} of decision.search with limit 100."""
    out = {s: [] for s in SHAPES}
    for _ in range(reps):
        for q in queries:
            t0 = time.perf_counter()
            c.call("decision.search", {"terms": q["terms"],
                                       "match_all": q["match_all"],
                                       "limit": 100})
            out[q["shape"]].append(time.perf_counter() - t0)
    return out


READER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
req = b'{"jsonrpc":"2.0","id":1,"method":"decision.query_range","params":{}}\n'
while True:
    s.sendall(req)
    while True:
        b = s.recv(1 << 20)
        if not b:
            sys.exit(0)
        if b.endswith(b"\n"):
            break
"""


def store_latencies(c, n, base_x):
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        c.call("decision.store", {"coordinate": {"x": base_x + i % 50,
                                                  "y": 1, "z": 2},
                                  "content": "stall probe %d" % i,
                                  "overwrite": True})
        lat.append(time.perf_counter() - t0)
    return lat


def stall_figure(d, n_stores):
    c = Conn(d.sock)
    c.call("server.hello", {"agent_id": "bench"})
    store_latencies(c, 50, MAX_X - 100)  # warm up
    idle = store_latencies(c, n_stores, MAX_X - 100)
    reader = subprocess.Popen([sys.executable, "-c", READER, d.sock])
    time.sleep(0.5)
    busy = store_latencies(c, n_stores, MAX_X - 100)
    reader.kill()
    reader.wait()
    c.close()
    return idle, busy


def sample_peak(pid, stop, out):
    peak = 0
    while not stop.is_set():
        try:
            peak = max(peak, status_kib(pid, "VmRSS") * 1024)
        except OSError:
            break
        time.sleep(0.05)
    out.append(peak)


def run_size(args, n, tmp, empty_rss):
    corpus = os.path.join(tmp, "corpus.txt")
    queries = os.path.join(tmp, "queries.json")
    subprocess.run([args.fts5_bench, "--docs", str(n), "--queries",
                    str(args.queries), "--only-write", "--write-corpus",
                    corpus, "--write-queries", queries], check=True,
                   stdout=subprocess.DEVNULL)
    with open(corpus) as f:
        docs = [line.rstrip("\n") for line in f]
    with open(queries) as f:
        qs = [json.loads(line) for line in f]
    content = sum(len(t.encode()) for t in docs)
    root = os.path.join(tmp, "repo-%d" % n)
    os.mkdir(root)
    subprocess.run(["git", "init", "-q", root], check=True)
    subprocess.run(["git", "-C", root, "commit", "-q", "--allow-empty",
                    "-m", "start"], check=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="b",
                            GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
                            GIT_COMMITTER_EMAIL="b@b"))
    d = Daemon(args.vmemd, root, os.path.join(tmp, "run", "v-%d.sock" % n),
               os.path.join(tmp, "vmemd-%d.log" % n))
    d.start()
    r = {"n": n, "content": content}
    c = Conn(d.sock)
    c.call("server.hello", {"agent_id": "bench"})
    t0 = time.monotonic()
    for start in range(0, n, 1000):
        c.call("decision.store_many", {"items": [
            {"coordinate": coord_of(i), "content": docs[i]}
            for i in range(start, min(n, start + 1000))]})
    r["load"] = time.monotonic() - t0
    del docs
    # At rest: the writer and the search index have caught up, and the
    # daemon has rested long enough to give freed memory back (its trim
    # runs after a quiet 2-second tick).
    d.wait_idle(args.idle_max, quiet=6.0)
    r["rss_rest"] = d.rss()
    r["anon_rest"] = d.rss_anon()
    r["search"] = search_round_trips(c, qs)
    idle, busy = stall_figure(d, args.stall_stores)
    r["stall"] = (pct(idle, 0.5), pct(idle, 0.99), pct(busy, 0.5),
                  pct(busy, 0.99))
    r["rss_pre_sync"] = d.rss()
    stop, peak = threading.Event(), []
    th = threading.Thread(target=sample_peak, args=(d.proc.pid, stop, peak))
    th.start()
    t0 = time.monotonic()
    c.call("git.sync")
    r["sync_first"] = time.monotonic() - t0
    stop.set()
    th.join()
    r["rss_sync"] = peak[0]
    for i in range(10):
        c.call("decision.store", {"coordinate": coord_of(4 * i + 1),
                                  "content": "changed %d" % i,
                                  "overwrite": True})
    t0 = time.monotonic()
    c.call("git.sync")
    r["sync_10"] = time.monotonic() - t0
    c.close()
    r["stop"] = d.stop()
    r["restart"] = d.start()
    r["cpu_after"], r["idle_after"] = d.wait_idle(args.idle_max)
    d.wait_idle(60, quiet=6.0)
    r["rss_restart"] = d.rss()
    r["anon_restart"] = d.rss_anon()
    d.stop()
    r["empty_rss"] = empty_rss
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return r


def empty_daemon_rss(args, tmp):
    root = os.path.join(tmp, "empty")
    os.mkdir(root)
    subprocess.run(["git", "init", "-q", root], check=True)
    d = Daemon(args.vmemd, root, os.path.join(tmp, "run", "empty.sock"),
               os.path.join(tmp, "vmemd-empty.log"))
    d.start()
    time.sleep(0.5)
    rss = d.rss()
    d.stop()
    return rss


def ratio(x, content):
    return "%.2fx" % (x / content)


def print_results(rows):
    print()
    print("| decisions | load | first `git.sync` | `git.sync` of 10 "
          "changes after | restart -> first answer | CPU busy after "
          "restart | RSS / content | phrase search p50 (common words) | "
          "search, common term, limit 100, p50 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["search"]
        print("| {:,} | {:.1f} s | {:.1f} s | {:.2f} s | {:.2f} s | "
              "{:.1f} s CPU over {:.0f} s | {} ({} after restart; {} "
              "during sync) | {:.2f} ms | {:.2f} ms |".format(
                  r["n"], r["load"], r["sync_first"], r["sync_10"],
                  r["restart"], r["cpu_after"], r["idle_after"],
                  ratio(r["rss_rest"], r["content"]),
                  ratio(r["rss_restart"], r["content"]),
                  ratio(r["rss_sync"], r["content"]),
                  pct(s["phrase"], 0.5) * 1e3,
                  pct(s["common"], 0.5) * 1e3))
    print()
    print("Memory (MB): content, RSS at rest / after restart / peak "
          "during the first sync, an empty daemon's RSS, and (RSS - "
          "empty) / content; the anonymous part of RSS (without files "
          "mapped) at rest / after restart and its ratio:")
    for r in rows:
        e = r["empty_rss"]
        print("  {:>9,}: {:.1f} MB; {:.1f} / {:.1f} / {:.1f} MB; empty "
              "{:.1f} MB; {} / {} / {}; anonymous {:.1f} / {:.1f} MB = "
              "{} / {}".format(
                  r["n"], r["content"] / 1e6, r["rss_rest"] / 1e6,
                  r["rss_restart"] / 1e6, r["rss_sync"] / 1e6, e / 1e6,
                  ratio(r["rss_rest"] - e, r["content"]),
                  ratio(r["rss_restart"] - e, r["content"]),
                  ratio(r["rss_sync"] - e, r["content"]),
                  r["anon_rest"] / 1e6, r["anon_restart"] / 1e6,
                  ratio(r["anon_rest"], r["content"]),
                  ratio(r["anon_restart"], r["content"])))
    print()
    print("The first sync against the RSS just before it (issue 17: at "
          "most 1.2x):")
    for r in rows:
        print("  {:>9,}: {:.1f} MB before, {:.1f} MB at its peak: "
              "{:.2f}x".format(r["n"], r["rss_pre_sync"] / 1e6,
                               r["rss_sync"] / 1e6,
                               r["rss_sync"] / r["rss_pre_sync"]))
    print()
    print("Search round trips through the socket, limit 100, ms "
          "(p50 / p99):")
    print("  {:>9}  ".format("") + "".join("{:>17}".format(s)
                                          for s in SHAPES))
    for r in rows:
        print("  {:>9,}  ".format(r["n"]) + "".join(
            "{:>8.2f} /{:>7.2f}".format(pct(r["search"][s], 0.5) * 1e3,
                                        pct(r["search"][s], 0.99) * 1e3)
            for s in SHAPES))
    print()
    print("Stall: decision.store on one connection, idle and while "
          "another process reads everything without pause (ms):")
    for r in rows:
        i50, i99, b50, b99 = r["stall"]
        print("  {:>9,}: idle p50 {:.2f} p99 {:.2f}; during the reads p50 "
              "{:.2f} p99 {:.2f}; p99 ratio {:.2f} (target <= 5)".format(
                  r["n"], i50 * 1e3, i99 * 1e3, b50 * 1e3, b99 * 1e3,
                  b99 / i99))
    print()
    print("Graceful stop after the syncs: " + ", ".join(
        "{:,}: {:.2f} s".format(r["n"], r["stop"]) for r in rows))


def main():
    ap = argparse.ArgumentParser()
    build = os.path.join(HERE, "..", "..", "build-release")
    ap.add_argument("--vmemd", default=os.environ.get(
        "VMEMD", os.path.join(build, "daemon", "vmemd")))
    ap.add_argument("--fts5-bench", default=os.path.join(
        build, "tests", "bench", "vmem-fts5-bench"))
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--stall-stores", type=int, default=400)
    ap.add_argument("--idle-max", type=float, default=600)
    ap.add_argument("--no-fts5", action="store_true")
    ap.add_argument("--keep", action="store_true",
                    help="keep the repositories (in the temp directory)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("vmem-scale-bench: sizes %s, vmemd %s; load average %s"
          % (", ".join("{:,}".format(n) for n in sizes), args.vmemd,
             loadavg()), flush=True)
    tmp = tempfile.mkdtemp(prefix="vmem-scale-")
    os.mkdir(os.path.join(tmp, "run"), 0o700)
    rows = []
    try:
        empty = empty_daemon_rss(args, tmp)
        for n in sizes:
            t0 = time.monotonic()
            rows.append(run_size(args, n, tmp, empty))
            print("  {:,} done in {:.0f} s (load average {})".format(
                n, time.monotonic() - t0, loadavg()), flush=True)
        print_results(rows)
        if not args.no_fts5:
            for n in sizes:
                print(flush=True)
                subprocess.run([args.fts5_bench, "--docs", str(n),
                                "--queries", "100", "--reps", "3"],
                               check=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\nload average at the end: %s" % loadavg())


if __name__ == "__main__":
    main()

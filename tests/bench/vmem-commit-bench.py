#!/usr/bin/env python3
"""vmem-commit-bench: the cost of a commit of 10 changed decisions at 20k
and 100k decisions (1M with --sizes), side by side in one run with git's
floor (shared/reference/git-floor.md):

  git       `git add <10 files>` + `git commit` by the git program
  tree      libgit2 (pygit2) commit of only the touched trees, index
            untouched: the floor of the commit itself
  durable   the same, then syncfs of the file system: the floor with the
            durability the daemon owes (objects on disk before the branch
            moves) and git does not pay
  fsync     the same, then fsync of only the objects it wrote (each loose
            file and its directory): the alternative to syncfs
  own       our index writer (daemon/git/gitidx.c, via vmem-index-bench)
  update    `git update-index -- <10 files>` on a copy of the index
  libgit2   pygit2: read the index, add 10 entries, write it
  vmemd     the daemon's git.sync after storing 10 changes (it includes
            the file writer's pass the sync waits for), p50/p99 of --reps

and the daemon's first commit of the whole tree (start-up scan included),
its RSS between syncs, during commits and after 5 s idle, and what a
user's own `git status` costs: right after each of the daemon's commits
(racy git: how many of those rewrote .git/index) and at rest.
The tree is laid out as the daemon writes it: .vector-memory/x-NNNNN/
y-Y-z-Z.json, 20 files per directory, ~500-byte decisions. Prints
figures; never fails on time. Needs python3-pygit2 (Debian).

usage: vmem-commit-bench.py [--vmemd PATH] [--index-bench PATH]
                            [--sizes 20000,100000] [--reps 12]
                            [--index default|split|v4|untracked]
"""
import argparse
import ctypes
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import pygit2

WORDS = ("decision interface schema cache layer index storage request "
         "postgresql api rest queue retry timeout budget latency agent "
         "memory commit branch merge review test deploy rollback").split()


def text(rng, n=380):
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)


def coord(i):
    return i // 20 + 1, (i % 20) // 4 + 1, i % 4 + 1


def rel(x, y, z):
    return ".vector-memory/x-%03d/y-%d-z-%d.json" % (x, y, z)


def record(x, y, z, content, version=1):
    rec = {"coordinate": {"x": x, "y": y, "z": z}, "content": content,
           "timestamp": "2026-11-25T00:00:00.000000Z", "agent_id": "bench",
           "issue_context": None, "version": version}
    return (json.dumps(rec, indent=2, ensure_ascii=False) + "\n").encode()


def write(root, x, y, z, data):
    path = os.path.join(root, rel(x, y, z))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.n = 0

    def call(self, method, params=None):
        self.n += 1
        self.s.sendall((json.dumps({"jsonrpc": "2.0", "id": self.n,
                                    "method": method,
                                    "params": params or {}}) + "\n").encode())
        r = json.loads(self.f.readline())
        if "error" in r:
            raise RuntimeError(r["error"])
        return r["result"]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Sampler:
    """Peak RSS of pid while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, False
        self.t = threading.Thread(target=self.run)

    def run(self):
        while not self.stop:
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except OSError:
                return
            time.sleep(0.005)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        self.t.join()


def git(root, *args, env=None):
    return subprocess.run(["git", "-C", root] + list(args), check=True,
                          capture_output=True, env=env).stdout


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def tree_commit(root, changes, written=None):
    """The floor: pygit2 commit of only the touched trees (the ids of the
    objects it made appended to written)."""
    ids = written if written is not None else []
    r = pygit2.Repository(root)
    head = r.head.target
    tree = r[head].tree
    vm = r[tree[".vector-memory"].id]
    by_dir = {}
    for path, data in changes:
        d, f = path.split("/")[1:]
        by_dir.setdefault(d, []).append((f, data))
    vb = r.TreeBuilder(vm)
    for d, files in by_dir.items():
        tb = r.TreeBuilder(r[vm[d].id])
        for f, data in files:
            ids.append(r.create_blob(data))
            tb.insert(f, ids[-1], pygit2.GIT_FILEMODE_BLOB)
        ids.append(tb.write())
        vb.insert(d, ids[-1], pygit2.GIT_FILEMODE_TREE)
    rb = r.TreeBuilder(tree)
    ids.append(vb.write())
    rb.insert(".vector-memory", ids[-1], pygit2.GIT_FILEMODE_TREE)
    ids.append(rb.write())
    sig = pygit2.Signature("Bench", "bench@localhost")
    ids.append(r.create_commit("HEAD", sig, sig, "floor", ids[-1], [head]))


def fsync_objects(root, ids):
    """fsync each loose object of ids and each of their directories."""
    objects = os.path.join(root, ".git", "objects")
    dirs = set()
    for oid in ids:
        h = str(oid)
        fd = os.open(os.path.join(objects, h[:2], h[2:]), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        dirs.add(h[:2])
    for d in dirs:
        fd = os.open(os.path.join(objects, d), os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)


def syncfs(root):
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)


def index_stamp(root):
    st = os.stat(os.path.join(root, ".git", "index"))
    return st.st_ino, st.st_mtime_ns, st.st_size


def libgit2_index(root, paths):
    r = pygit2.Repository(root)
    idx = r.index
    idx.read()
    for p in paths:
        idx.add(p)
    idx.write()


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--vmemd", default=os.environ.get("VMEMD", "vmemd"))
    ap.add_argument("--index-bench", default=os.environ.get(
        "VMEM_INDEX_BENCH", "vmem-index-bench"))
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--index", default="default",
                    choices=["default", "split", "v4", "untracked"])
    ap.add_argument("--keep", action="store_true",
                    help="keep the repositories (printed)")
    a = ap.parse_args()
    del here
    rng = random.Random(17)
    tmp = tempfile.mkdtemp(prefix="vmem-commit-bench-")
    os.chmod(tmp, 0o700)
    print("vmem-commit-bench: index %s, %d reps, load %s" %
          (a.index, a.reps, " ".join("%.2f" % v for v in os.getloadavg())))
    rows = []
    try:
        for n in [int(s) for s in a.sizes.split(",")]:
            rows.append(run_size(a, rng, tmp, n))
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept:", tmp)
    print()
    print("| decisions | git add+commit | tree-only floor | own index "
          "sync | git update-index | libgit2 index | floor (tree + "
          "cheapest sync) | durable floor (+ syncfs) | durable floor (+ "
          "fsync of its objects) | vmemd git.sync p50 / "
          "p99 | vs floor | vs durable floor | vs git | first commit | RSS "
          "rest / during sync / after 5 s idle (MB) | user's git status "
          "after a sync "
          "(index rewritten) | at rest |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
          "---|")
    for r in rows:
        print("| {n:,} | {git:.0f} ms | {tree:.1f} ms | {own:.1f} ms | "
              "{upd:.1f} ms | {lg2:.1f} ms | {floor:.1f} ms | {dfloor:.1f} ms"
              " | {ffloor:.1f} ms | {p50:.1f} / {p99:.1f} ms | {rf:.2f}x | {rd:.2f}x | "
              "{rg:.1f}x faster | {first:.1f} s | {rest:.0f} / {during:.0f} / "
              "{rested:.0f} | "
              "{after:.0f} ms ({racy}/{reps}) | {status:.0f} ms |"
              .format(**r))


def run_size(a, rng, tmp, n):
    root = os.path.join(tmp, "r%d" % n)
    sock = os.path.join(tmp, "s%d.sock" % n)
    os.makedirs(root)
    git(root, "init", "-q")
    for k, v in (("user.name", "Bench"), ("user.email", "bench@localhost"),
                 ("gc.auto", "0"), ("maintenance.auto", "false")):
        git(root, "config", k, v)
    t0 = time.perf_counter()
    for i in range(n):
        x, y, z = coord(i)
        write(root, x, y, z, record(x, y, z, text(rng)))
    gen = time.perf_counter() - t0
    if a.index != "default":
        git(root, "commit", "-q", "--allow-empty", "-m", "base")
        setup = {"split": [("config", "core.splitIndex", "true"),
                           ("update-index", "--split-index")],
                 "v4": [("config", "index.version", "4"),
                        ("update-index", "--index-version", "4")],
                 "untracked": [("config", "core.untrackedCache", "true"),
                               ("update-index", "--untracked-cache")]}
        for cmd in setup[a.index]:
            git(root, *cmd)
    max_x = n // 20 + 10
    # The daemon's first commit of everything (its start-up scan finds
    # every file untracked).
    t0 = time.perf_counter()
    d = subprocess.Popen([a.vmemd, "--repo", root, "--socket", sock,
                          "--foreground", "--max-x", str(max_x),
                          "--commit-delay-ms", "600000",
                          "--commit-max-batch", str(min(10 * n, 1000000))],
                         stderr=subprocess.DEVNULL)
    while True:
        try:
            c = Conn(sock)
            break
        except OSError:
            if d.poll() is not None:
                raise SystemExit("vmemd exited with status %d before "
                                 "listening" % d.returncode)
            time.sleep(0.005)
    started = time.perf_counter() - t0
    rss_start = rss_kib(d.pid)
    with Sampler(d.pid) as s_first:
        t1 = time.perf_counter()
        while True:
            h = c.call("server.health")
            if h["last_commit"] and h["pending"] == 0:
                break
            time.sleep(0.02)
        first = time.perf_counter() - t1
    print("%d decisions: generated in %.1f s; vmemd answered in %.2f s, its "
          "first commit of everything took %.1f s (RSS %.0f MB at start, "
          "peak %.0f MB)" % (n, gen, started, first, rss_start / 1024,
                             s_first.peak / 1024))
    # The daemon's git.sync of 10 changes.
    syncs, during, rest = [], 0, 0
    after, racy = [], 0
    version = {}
    for rep in range(a.reps + 1):
        for _ in range(10):
            i = rng.randrange(n)
            x, y, z = coord(i)
            if z == 1:
                z = 2
            c.call("decision.store", {
                "coordinate": {"x": x, "y": y, "z": z},
                "content": text(rng), "agent_id": "bench",
                "overwrite": True})
        rest = max(rest, rss_kib(d.pid))
        with Sampler(d.pid) as s:
            ms = timed(lambda: c.call("git.sync"))
        during = max(during, s.peak)
        # The user's git status at once (in the commit's second, mostly):
        # does git read our files again and rewrite its index?
        before = index_stamp(root)
        ms_status = timed(lambda: git(root, "status", "--porcelain"))
        if rep:  # the first is a warm-up
            syncs.append(ms)
            after.append(ms_status)
            racy += index_stamp(root) != before
    # "At rest" above is between syncs that come back to back; after a
    # rest the daemon gives freed memory back (daemon/service/trim.h).
    time.sleep(5)
    rested = rss_kib(d.pid)
    c.call("server.shutdown")
    d.wait()
    del version
    # Side by side on the same repository: the floor and git's porcelain.
    tree, dur, fsy, own, upd, lg2, gitc = [], [], [], [], [], [], []
    for rep in range(max(5, a.reps // 2) + 1):
        changes = []
        for _ in range(10):
            x, y, z = coord(rng.randrange(n))
            data = record(x, y, z, text(rng), 2 + rep)
            write(root, x, y, z, data)
            changes.append((rel(x, y, z), data))
        paths = sorted({p for p, _ in changes})
        changes = [(p, dict(changes)[p]) for p in paths]
        # files older than any index written now: no racy re-checks
        past = time.time() - 5
        for p in paths:
            os.utime(os.path.join(root, p), (past, past))
        t_tree = timed(lambda: tree_commit(root, changes))
        # the same commit made durable (its own objects: the next one)
        changes = [(p, data + b" ") for p, data in changes]
        t_dur = timed(lambda: (tree_commit(root, changes), syncfs(root)))
        changes = [(p, data + b" ") for p, data in changes]
        ids = []
        t_fsy = timed(lambda: (tree_commit(root, changes, ids),
                               fsync_objects(root, ids)))
        out = subprocess.run([a.index_bench, root, "own", "--dry"] + paths,
                             capture_output=True, text=True, check=True)
        t_own = float(out.stdout.split()[1])
        idx = os.path.join(root, ".git", "index")
        copy = os.path.join(tmp, "index.copy")
        if os.path.exists(copy):
            os.unlink(copy)
        os.link(idx, copy)
        env = dict(os.environ, GIT_INDEX_FILE=copy)
        t_upd = timed(lambda: git(root, "update-index", "--", *paths,
                                  env=env))
        os.unlink(copy)
        if a.index in ("default", "v4"):
            t_lg2 = timed(lambda: libgit2_index(root, paths))
        else:  # libgit2 1.5 cannot read a split index; drops UNTR
            t_lg2 = float("nan")
            git(root, "update-index", "--", *paths)
        # git's own add + commit of 10 other changes
        for p, _ in changes:
            x = int(p.split("/")[1][2:])
            y, z = int(p.split("-")[-3]), int(p.split("-")[-1][:-5])
            write(root, x, y, z, record(x, y, z, text(rng), 50 + rep))
            os.utime(os.path.join(root, p), (past, past))
        t_git = timed(lambda: (git(root, "add", "--", *paths),
                               git(root, "commit", "-q", "-m", "git")))
        if rep:
            tree.append(t_tree)
            dur.append(t_dur)
            fsy.append(t_fsy)
            own.append(t_own)
            upd.append(t_upd)
            lg2.append(t_lg2)
            gitc.append(t_git)
    status = min(timed(lambda: git(root, "status", "--porcelain"))
                 for _ in range(3))
    med = statistics.median
    cheapest = min(med(own), med(upd))
    floor = med(tree) + cheapest
    dfloor = med(dur) + cheapest
    ffloor = med(fsy) + cheapest
    p50, p99 = pct(syncs, 50), pct(syncs, 99)
    row = dict(n=n, git=med(gitc), tree=med(tree), own=med(own),
               upd=med(upd), lg2=med(lg2), floor=floor, dfloor=dfloor,
               ffloor=ffloor,
               p50=p50, p99=p99, rf=p50 / floor, rd=p50 / dfloor,
               rg=med(gitc) / p50, first=first, rest=rest / 1024,
               during=during / 1024, rested=rested / 1024, status=status,
               after=statistics.median(after), racy=racy, reps=len(after))
    print("  git add+commit %.0f ms | tree-only %.1f ms | own sync %.1f ms | "
          "update-index %.1f ms | libgit2 index %.1f ms | durable floor "
          "%.1f ms (syncfs), %.1f ms (fsync of its objects) | vmemd git.sync p50 %.1f p99 %.1f ms (%.2fx the floor, "
          "%.2fx the durable floor, %.1fx faster than git) | RSS %.0f MB at "
          "rest, %.0f MB during syncs, %.0f MB after 5 s idle | git status after a sync %.0f ms "
          "(index rewritten %d/%d), at rest %.0f ms"
          % (row["git"], row["tree"], row["own"], row["upd"], row["lg2"],
             dfloor, ffloor, p50, p99, row["rf"], row["rd"], row["rg"], row["rest"],
             row["during"], row["rested"], row["after"], racy, len(after),
             status),
          flush=True)
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    return row


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""vmem-git-bench: the git side of vmemd on a tree of 20,000 decisions.

Measures, on a temporary repository: start-up with 20,000 decisions, a
git.reload with nothing changed (the stamp rescan), git.sync of 1,000 new
decisions and of 10 changed ones (durable: libgit2 with its gitdir fsync
on), and next to them `git add .vector-memory && git commit` by the git
program on the same tree in the same run, without and with fsync
(core.fsync=all). Prints figures; never fails on time.

usage: vmem-git-bench.py [--vmemd PATH]
"""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

WORDS = ("decision interface schema cache layer index storage request "
         "postgresql api rest queue retry timeout budget latency agent "
         "memory commit branch merge review test deploy rollback").split()


def text(rng, n=1000):
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")
        self.n = 0

    def send(self, method, params):
        self.n += 1
        self.s.sendall((json.dumps({"jsonrpc": "2.0", "id": self.n,
                                    "method": method,
                                    "params": params}) + "\n").encode())

    def recv(self):
        r = json.loads(self.f.readline())
        if "error" in r:
            raise RuntimeError(r["error"])
        return r["result"]

    def call(self, method, params=None):
        self.send(method, params or {})
        return self.recv()


def store_all(path, items, conns=8):
    """Store (coord, content) items pipelined over several connections."""
    cs = [Conn(path) for _ in range(conns)]
    for i, (c, content) in enumerate(items):
        cs[i % conns].send("decision.store", {
            "coordinate": {"x": c[0], "y": c[1], "z": c[2]},
            "content": content, "agent_id": "bench", "overwrite": True})
    for i in range(len(items)):
        cs[i % conns].recv()


def start(vmemd, root, sock):
    t0 = time.monotonic()
    p = subprocess.Popen([vmemd, "--repo", root, "--socket", sock,
                          "--foreground", "--max-x", "1100",
                          "--commit-delay-ms", "3600000"],
                         stderr=subprocess.DEVNULL)
    while True:
        try:
            Conn(sock).s.close()
            return p, time.monotonic() - t0
        except OSError:
            time.sleep(0.002)


def git(root, *args, fsync=False):
    pre = ["-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync"] \
        if fsync else []
    subprocess.run(["git", "-C", root] + pre + list(args), check=True,
                   stdout=subprocess.DEVNULL)


def write_file(root, x, y, z, content):
    d = os.path.join(root, ".vector-memory", "x-%03d" % x)
    os.makedirs(d, exist_ok=True)
    rec = {"coordinate": {"x": x, "y": y, "z": z}, "content": content,
           "timestamp": "2026-11-22T00:00:00.000000Z", "agent_id": "git",
           "issue_context": None, "version": 1}
    with open(os.path.join(d, "y-%d-z-%d.json" % (y, z)), "w") as f:
        f.write(json.dumps(rec, indent=2, ensure_ascii=False) + "\n")


def git_commit_time(root, fsync):
    t0 = time.monotonic()
    git(root, "add", ".vector-memory", fsync=fsync)
    git(root, "commit", "-q", "-m", "by the git program", fsync=fsync)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmemd", default=os.environ.get("VMEMD", "vmemd"))
    a = ap.parse_args()
    rng = random.Random(7)
    tmp = tempfile.mkdtemp(prefix="vmem-git-bench-")
    root, sock = os.path.join(tmp, "repo"), os.path.join(tmp, "v.sock")
    try:
        subprocess.run(["git", "init", "-q", root], check=True)
        git(root, "config", "user.name", "Bench")
        git(root, "config", "user.email", "bench@localhost")
        d, _ = start(a.vmemd, root, sock)
        all20k = [((x, y, z), text(rng)) for x in range(1, 1001)
                  for y in range(1, 6) for z in range(1, 5)]
        store_all(sock, all20k)
        c = Conn(sock)
        t0 = time.monotonic()
        res = c.call("git.sync")
        first = time.monotonic() - t0
        c.call("server.shutdown")
        d.wait()
        print("vmem-git-bench: %d decisions, %.1f MB of content" %
              (len(all20k), sum(len(t) for _, t in all20k) / 1e6))
        print("  git.sync right after storing them all: %.0f ms (its batch: "
              "%d decisions)" % (first * 1e3, res["decisions"]))
        d, startup = start(a.vmemd, root, sock)
        print("  start-up with 20,000 decisions: %.0f ms (target <= 1000)"
              % (startup * 1e3))
        c = Conn(sock)
        # The start-up scan asks git what differs from HEAD (what a crash
        # may have left uncommitted: git status, by stat data); measure
        # it, and let it finish before timing the syncs.
        t0 = time.monotonic()
        while c.call("server.health")["pending"] > 0:
            time.sleep(0.01)
        print("  start-up scan of 20,000 decisions against HEAD "
              "(background): %.0f ms" % ((time.monotonic() - t0 + startup)
                                        * 1e3))
        t0 = time.monotonic()
        c.call("git.reload")
        print("  git.reload with 20,000 unchanged files: %.1f ms"
              % ((time.monotonic() - t0) * 1e3))
        new = [((1000 + i // 20 + 1, i // 4 % 5 + 1, i % 4 + 1), text(rng))
               for i in range(1000)]
        store_all(sock, new)
        t0 = time.monotonic()
        res = c.call("git.sync")
        sync1000 = time.monotonic() - t0
        changed = [((x, 3, 2), text(rng)) for x in range(100, 110)]
        store_all(sock, changed)
        t0 = time.monotonic()
        res10 = c.call("git.sync")
        sync10 = time.monotonic() - t0
        c.call("server.shutdown")
        d.wait()
        # The git program on the same tree: 1,000 new files, then 10
        # changed, without and with fsync.
        figures = {}
        for fsync in (False, True):
            base = 1051 if not fsync else 1076
            for i in range(1000):
                write_file(root, base + i // 40, i // 8 % 5 + 1,
                           i % 4 + 1, text(rng))
            t1000 = git_commit_time(root, fsync)
            for x in range(200, 210):
                write_file(root, x, 3, 2, text(rng))
            t10 = git_commit_time(root, fsync)
            figures[fsync] = (t1000, t10)
        print("  git.sync of 1,000 new decisions: %.0f ms (%d committed); "
              "git program %.0f ms, with fsync %.0f ms; ratio %.2f / %.2f "
              "(target <= 0.5)"
              % (sync1000 * 1e3, res["decisions"],
                 figures[False][0] * 1e3, figures[True][0] * 1e3,
                 sync1000 / figures[False][0], sync1000 / figures[True][0]))
        print("  git.sync of 10 changed decisions: %.1f ms (%d committed; "
              "target <= 25); git program %.0f ms, with fsync %.0f ms"
              % (sync10 * 1e3, res10["decisions"],
                 figures[False][1] * 1e3, figures[True][1] * 1e3))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""vmem-start-bench: what a stop and a start of vmemd cost at scale.

For each size, one repository is filled once (decision.store_many of
~480-byte decisions, or --big: 6,466 decisions of 100 KB, 661 MB; then
git.sync commits everything and the daemon stops). Then, for each vmemd
given (--vmemd, and --compare for a second build measured side by side on
the same repository), --runs times:

  restart -> answer  start, until decision.get answers (the socket is up
                     only once the start is over), and the CPU seconds the
                     daemon spent until then (on a loaded machine the
                     wall time is several times that)
  CPU after          CPU seconds the daemon (and the children it reaped:
                     git status) spends after that answer until it has
                     been idle for 2 s (and how long that took), capped
                     by --idle-max
  stop               after one decision.store (so whatever a stop saves
                     or commits is there to do): SIGTERM until the process
                     is gone (graceful)

Every run starts from a stop that was itself graceful, so the figures are
those of an ordinary restart. Prints figures; never fails on time. Quote
the load average it prints with them.

usage: vmem-start-bench.py [--vmemd PATH] [--compare PATH]
                           [--sizes 20000,100000] [--big] [--runs N]
                           [--idle-max S] [--keep] [--tmp DIR] [--repo DIR]
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_X = 50000
TICK = os.sysconf("SC_CLK_TCK")
WORDS = ("commit queue index stat data snapshot verified restart answer "
         "decision memory agent branch checkout pull edit removed file "
         "start stop graceful daemon socket search token phrase").split()


def coord_of(i):
    return {"x": 1 + i // 20, "y": 1 + i // 4 % 5, "z": 1 + i % 4}


def text_of(i, size):
    """Deterministic text of about size bytes, different for each i."""
    out, k = [], i
    n = 0
    while n < size:
        k = (k * 1103515245 + 12345) & 0x7FFFFFFF
        w = WORDS[k % len(WORDS)]
        out.append(w)
        n += len(w) + 1
    return ("%d " % i + " ".join(out))[:size]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Its own and its reaped children's (git status at the start).
    return sum(int(f) for f in fields[11:15]) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.buf = b""
        self.n = 0

    def call(self, method, params=None):
        self.n += 1
        msg = {"jsonrpc": "2.0", "id": self.n, "method": method}
        if params is not None:
            msg["params"] = params
        self.s.sendall((json.dumps(msg) + "\n").encode())
        while True:
            while b"\n" not in self.buf:
                chunk = self.s.recv(1 << 20)
                if not chunk:
                    raise EOFError("vmemd closed the connection")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            r = json.loads(line)
            if "id" in r:
                break
        if "error" in r:
            raise RuntimeError(r["error"])
        return r["result"]

    def close(self):
        self.s.close()


class Daemon:
    def __init__(self, vmemd, root, sock, log):
        self.argv = [vmemd, "--foreground", "--repo", root, "--socket",
                     sock, "--max-x", str(MAX_X), "--commit-delay-ms",
                     "3600000", "--commit-max-batch", "1000000",
                     "--max-line", str(256 << 20)]
        self.sock = sock
        self.log = log
        self.proc = None

    def start(self, timeout=3600):
        t0 = time.monotonic()
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err)
        while True:
            try:
                c = Conn(self.sock)
                c.call("decision.get", {"coordinate": coord_of(0)})
                c.close()
                self.start_cpu = cpu_seconds(self.proc.pid)
                return time.monotonic() - t0
            except (OSError, EOFError):
                if self.proc.poll() is not None:
                    raise SystemExit("vmemd exited: see %s" % self.log)
                if time.monotonic() - t0 > timeout:
                    raise SystemExit("vmemd did not answer")
                time.sleep(0.005)

    def stop(self):
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait()
        if rc != 0:
            raise SystemExit("vmemd exited %d: see %s" % (rc, self.log))
        return time.monotonic() - t0

    def wait_idle(self, idle_max, quiet=2.0):
        pid = self.proc.pid
        t0 = time.monotonic()
        c0 = last = cpu_seconds(pid)
        quiet_since = None
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


def fill(vmemd, root, tmp, n, size):
    os.mkdir(root)
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
               GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    subprocess.run(["git", "init", "-q", root], check=True)
    subprocess.run(["git", "-C", root, "commit", "-q", "--allow-empty",
                    "-m", "start"], check=True, env=env)
    d = Daemon(vmemd, root, os.path.join(tmp, "fill.sock"),
               os.path.join(tmp, "vmemd-fill.log"))
    d.start()
    c = Conn(d.sock)
    c.call("server.hello", {"agent_id": "bench"})
    per = max(1, min(1000, (8 << 20) // (size + 200)))
    t0 = time.monotonic()
    for start in range(0, n, per):
        c.call("decision.store_many", {"items": [
            {"coordinate": coord_of(i), "content": text_of(i, size)}
            for i in range(start, min(n, start + per))]})
    load = time.monotonic() - t0
    t0 = time.monotonic()
    c.call("git.sync")
    sync = time.monotonic() - t0
    c.close()
    d.stop()
    return load, sync


def measure(vmemd, root, tmp, runs, idle_max, label):
    rows = []
    d = Daemon(vmemd, root, os.path.join(tmp, "m.sock"),
               os.path.join(tmp, "vmemd-%s.log" % label))
    # A first start settles whatever the previous binary left (its
    # snapshot or none), as an upgrade would; not counted.
    d.start()
    d.wait_idle(idle_max)
    d.stop()
    for _ in range(runs):
        start = d.start()
        start_cpu = d.start_cpu
        cpu, idle = d.wait_idle(idle_max)
        # A stop after a write: the snapshot must be saved again and the
        # write committed, as in any stop of a daemon that did work.
        c = Conn(d.sock)
        c.call("server.hello", {"agent_id": "bench"})
        c.call("decision.store", {"coordinate": coord_of(1),
                                  "content": text_of(len(rows) + 7, 480),
                                  "overwrite": True})
        c.close()
        stop = d.stop()
        rows.append((start, start_cpu, cpu, idle, stop))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmemd", default=os.environ.get(
        "VMEMD", os.path.join(HERE, "..", "..", "build-release", "daemon",
                              "vmemd")))
    ap.add_argument("--compare", help="a second vmemd, measured on the "
                    "same repositories")
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--big", action="store_true",
                    help="also 6,466 decisions of 100 KB (661 MB)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--idle-max", type=float, default=300)
    ap.add_argument("--tmp", help="where the repositories go "
                    "(default: a temporary directory)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the repositories (to measure again with "
                    "--repo)")
    ap.add_argument("--repo", help="measure a repository filled by an "
                    "earlier run (--keep) instead of filling one; "
                    "--sizes names its size")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vmem-start-", dir=args.tmp)
    cases = [(int(s), 480) for s in args.sizes.split(",") if s]
    if args.big:
        cases.append((6466, 102400))
    bins = [("vmemd", args.vmemd)]
    if args.compare:
        bins.append(("compare", args.compare))
    print("load average before: %s" % loadavg())
    print("| decisions | content | binary | restart -> first answer "
          "(its CPU) | CPU after restart | graceful stop |")
    print("|---|---|---|---|---|---|")
    sys.stdout.flush()
    try:
        for n, size in cases:
            if args.repo:
                root = args.repo
            else:
                root = os.path.join(tmp, "repo-%d-%d" % (n, size))
                load, sync = fill(args.vmemd, root, tmp, n, size)
                print("filled %d x %d B: store_many %.1f s, git.sync "
                      "%.1f s" % (n, size, load, sync), file=sys.stderr)
            for label, path in bins:
                for start, start_cpu, cpu, idle, stop in measure(
                        path, root, tmp, args.runs, args.idle_max, label):
                    print("| {:,} | {:.0f} MB | {} | {:.2f} s ({:.2f} s) | "
                          "{:.1f} s over {:.0f} s | {:.2f} s |".format(
                              n, n * size / 1e6, label, start, start_cpu,
                              cpu, idle, stop))
                    sys.stdout.flush()
            if not args.keep and not args.repo:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        print("load average after: %s" % loadavg())


if __name__ == "__main__":
    main()

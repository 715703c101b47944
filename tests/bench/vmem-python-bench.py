#!/usr/bin/env python3
"""vmem-python-bench: the Python client's round trip next to a raw socket.

Starts a vmemd on a temporary repository, stores one decision of ~500
bytes, then measures in the same run, interleaved round by round so that
the machine's noise falls on all alike:

  raw      the decision.get request line written with sendall and the
           response line read with recv, nothing else (the floor for any
           Python client on this machine and placement)
  call     vmem.connection.Connection.call("decision.get", ...): the
           transport (encoding, the checks of the response, decoding)
  get      VectorMemoryManager.get(): what a user calls (the connection
           pool, the model object)

p50/p99 in microseconds and each one's p50 as a ratio to raw (target for
get: <= 2). Client and daemon share 2 vCPUs: a round trip is ~10 us when
they run on the same vCPU and ~50 us across vCPUs, so each is measured
unpinned and with both pinned to CPU 0 (--placement). Prints figures;
never fails on time.

usage: vmem-python-bench.py [--vmemd PATH] [--rounds N]
                            [--placement both|pinned|unpinned]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from vmem import VectorMemoryManager  # noqa: E402
from vmem.connection import connect  # noqa: E402

COORD = {"x": 7, "y": 2, "z": 3}


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1)))]


def start_daemon(vmemd, tmp):
    root = os.path.join(tmp, "repo")
    os.mkdir(root)
    subprocess.run(["git", "init", "-q", root], check=True)
    sockdir = os.path.join(tmp, "run")
    os.mkdir(sockdir, 0o700)
    sock = os.path.join(sockdir, "vmemd.sock")
    proc = subprocess.Popen([vmemd, "--foreground", "--repo", root,
                             "--socket", sock], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            s.close()
            return proc, root, sock
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("vmemd did not start")
            time.sleep(0.01)


def raw_round_trip(sock, line):
    sock.sendall(line)
    data = sock.recv(65536)
    while not data.endswith(b"\n"):
        data += sock.recv(65536)
    return data


def measure(root, path, rounds):
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(path)
    line = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "decision.get",
                        "params": {"coordinate": COORD}},
                       separators=(",", ":")) + "\n").encode()
    conn = connect(path)
    mgr = VectorMemoryManager(root, "bench", socket_path=path,
                              autostart=False)
    if json.loads(raw_round_trip(raw, line))["result"] is None or \
            conn.call("decision.get", {"coordinate": COORD}, 30) is None or \
            mgr.get((7, 2, 3)) is None:
        raise SystemExit("the decision is not there")
    clock = time.perf_counter
    t = {"raw": [], "call": [], "get": []}
    for i in range(rounds + rounds // 10):
        order = ("raw", "call", "get")[i % 3:] + ("raw", "call", "get")[:i % 3]
        for what in order:
            t0 = clock()
            if what == "raw":
                raw_round_trip(raw, line)
            elif what == "call":
                conn.call("decision.get", {"coordinate": COORD}, 30)
            else:
                mgr.get((7, 2, 3))
            if i >= rounds // 10:  # the first tenth warms up
                t[what].append(clock() - t0)
    raw.close()
    conn.close()
    mgr.close()
    return t


def report(name, t):
    base = percentile(t["raw"], 0.5)
    print("  %s:" % name)
    print("    %-5s %9s %9s %9s" % ("", "p50 us", "p99 us", "p50/raw"))
    for what in ("raw", "call", "get"):
        p50 = percentile(t[what], 0.5)
        print("    %-5s %9.1f %9.1f %9.2f" % (
            what, p50 * 1e6, percentile(t[what], 0.99) * 1e6, p50 / base))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmemd", default=os.environ.get("VMEMD", "vmemd"))
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--placement", default="both",
                    choices=["both", "pinned", "unpinned"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vmem-pybench-") as tmp:
        proc, root, path = start_daemon(args.vmemd, tmp)
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.sendall((json.dumps({
                "jsonrpc": "2.0", "id": 1, "method": "decision.store",
                "params": {"coordinate": COORD, "agent_id": "bench",
                           "content": "Use PostgreSQL for the store. " * 16,
                           "issue_context": {"issue_id": "bench-7"}}})
                       + "\n").encode())
            if b"result" not in s.recv(65536):
                raise SystemExit("could not store the decision")
            s.close()
            print("vmem-python-bench: decision.get of a ~500-byte decision, "
                  "%d rounds (Python %s)" % (args.rounds,
                                             sys.version.split()[0]))
            cpus = os.sched_getaffinity(0)
            if args.placement in ("both", "unpinned"):
                report("unpinned", measure(root, path, args.rounds))
            if args.placement in ("both", "pinned"):
                os.sched_setaffinity(0, {0})
                os.sched_setaffinity(proc.pid, {0})
                report("client and daemon on CPU 0",
                       measure(root, path, args.rounds))
                os.sched_setaffinity(0, cpus)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()

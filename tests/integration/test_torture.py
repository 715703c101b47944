#!/usr/bin/env python3
"""Crash torture: 8 client processes store, overwrite (overwrite and
if_version) and delete on ~200 coordinates, and store and delete
experiences, and 4 more store and delete messages and documents (the
local kinds), while the parent kills vmemd
with SIGKILL at random moments (at least 200 kills, TORTURE_KILLS) and
restarts it. Every request is recorded as sent and every response with its
full result; after a kill the outcome of a request whose connection died is
unknown. Every few kills, and at the end, the files must hold a state the
recorded operations allow (acknowledged writes never lost, nothing half
written), the index must equal the files, health must show no quarantine
and `git fsck --strict` must be clean; after the final graceful stop no temp
file or lock of ours may remain. Seeded: SEED=N replays a run's schedule.

The model (Model, check_files) is shared with test_syscall_kill.py.
"""

import json
import multiprocessing
import os
import random
import re
import subprocess
import time

import vmemtest as vt

SEED = int(os.environ.get("SEED", "20250107"))
KILLS = int(os.environ.get("TORTURE_KILLS", "200"))
CHECK_EVERY = int(os.environ.get("TORTURE_CHECK_EVERY", "20"))
CLIENTS = 8
LOCAL_CLIENTS = 4  # messages and documents
DIM = 8  # --embedding-dim of the run
COMMIT_DELAY_MS = "50"

# ~200 coordinates: x 1..10, y 1..5, z 1..4 (50 of them write-once z=1).
COORDS = [(x, y, z) for x in range(1, 11) for y in range(1, 6)
          for z in range(1, 5)]

FILE_RE = re.compile(r"^x-(\d{3,4})/y-([1-5])-z-([1-4])\.json$")
TMP_RE = re.compile(r"^\.tmp-(\d+)-")
LOST = (OSError, EOFError, TimeoutError, ValueError)


def short(value, limit=300):
    """repr of value, long strings cut (contents can be 40 KB)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...(%d chars)" \
        % len(text)


# --------------------------------------------------------------------------
# Operations: what a client sends, and what it learned


def make_content(rng, tag):
    """Unique content (tag first), of a size and alphabet picked by rng."""
    r = rng.random()
    if r < 0.6:
        pad = ""
    elif r < 0.8:
        pad = " é ü ✓ 日本 " + "u" * rng.randrange(1, 200)
    elif r < 0.97:
        pad = " " + "m" * rng.randrange(500, 3000)
    else:
        pad = " " + "L" * rng.randrange(20000, 40000)
    return tag + pad


def op_params(kind, c, content=None, ctx=None, **kw):
    params = {"coordinate": vt.coord(*c)}
    if kind == "store":
        params["content"] = content
        if ctx is not None:
            params["issue_context"] = ctx
    params.update(kw)
    return params


METHODS = {"store": "decision.store", "delete": "decision.delete",
           "xstore": "experience.store", "xdelete": "experience.delete"}


def run_op(conn, op):
    """Send op (a dict: c, kind, params) on conn and record the outcome in
    it: s (sent), a (answered, None when unknown), res or err. Returns
    False when the connection is lost."""
    method = METHODS[op["kind"]]
    op["s"] = time.monotonic()
    try:
        op["res"] = conn.call(method, op["params"])
        op["a"] = time.monotonic()
        return True
    except vt.RpcError as e:
        op["a"] = time.monotonic()
        op["err"] = [e.code, e.type, e.message]
        return True
    except LOST:
        op["a"] = None
        return False
    except Exception as e:  # a malformed response: a bug of the daemon
        op["a"] = None
        op["bug"] = repr(e)
        return False


def next_xop(rng, n, seq, mine):
    """An experience operation of client n: a store, or the deletion of
    one of its acknowledged experiences (mine: their ids)."""
    if mine and rng.random() < 0.2:
        return {"c": None, "kind": "xdelete",
                "params": {"id": rng.choice(mine)}}
    return {"c": None, "kind": "xstore",
            "params": {"context": make_content(rng, "x%d.%d" % (n, seq)),
                       "action": "acted %d" % seq,
                       "outcome": "outcome %d" % seq,
                       "tags": ["torture", "client-%d" % n],
                       "importance": rng.randint(1, 10)}}


def next_op(rng, conn, n, seq, coords, mine=None):
    """The next operation of client n (it may read the current version);
    with mine (the client's experience ids), some are experiences."""
    if mine is not None and rng.random() < 0.15:
        return next_xop(rng, n, seq, mine)
    c = rng.choice(coords)
    tag = "t%d.%d" % (n, seq)
    ctx = {"issue_id": "T-%d" % n, "seq": str(seq)} \
        if rng.random() < 0.3 else None
    content = make_content(rng, tag)
    if c[2] == 1:
        kw = {"overwrite": True} if rng.random() < 0.1 else {}
        return {"c": c, "kind": "store",
                "params": op_params("store", c, content, ctx, **kw)}
    r = rng.random()
    if r < 0.2:
        return {"c": c, "kind": "store",
                "params": op_params("store", c, content, ctx)}
    if r < 0.5:
        return {"c": c, "kind": "store",
                "params": op_params("store", c, content, ctx,
                                    overwrite=True)}
    if r < 0.85:
        cur = conn.get(*c)  # may raise: the caller treats it as lost
        version = cur["version"] if cur else rng.randint(1, 3)
        if r < 0.75:
            return {"c": c, "kind": "store",
                    "params": op_params("store", c, content, ctx,
                                        if_version=version)}
        return {"c": c, "kind": "delete",
                "params": op_params("delete", c, if_version=version)}
    return {"c": c, "kind": "delete", "params": op_params("delete", c)}


def client_main(n, seed, sock, run, stop, gen, queue):
    """A client process: while `run` is set, connect (retrying) and send
    operations; report each one, and ("idle", (n, gen)) once per pause
    (gen numbers the parent's pauses)."""
    rng = random.Random(seed * 1000 + n)
    conn = None
    seq = 0
    idle = -1
    mine = []
    while not stop.is_set():
        if not run.is_set():
            if conn is not None:
                conn.close()
                conn = None
            if idle != gen.value:
                idle = gen.value
                queue.put(("idle", (n, idle)))
            run.wait(vt.scaled(0.05))
            continue
        if conn is None:
            try:
                conn = vt.Conn(sock, agent_id="torture-%d" % n, timeout=20)
            except (LOST + (vt.RpcError,)):
                time.sleep(0.002)
                continue
        seq += 1
        try:
            op = next_op(rng, conn, n, seq, COORDS, mine)
        except (LOST + (vt.RpcError,)):
            conn.close()
            conn = None
            continue
        op["agent"] = "torture-%d" % n
        if not run_op(conn, op):
            conn.close()
            conn = None
        if op["kind"] == "xstore" and isinstance(op.get("res"), dict):
            mine.append(op["res"]["id"])
        queue.put(("op", op))
    if conn is not None:
        conn.close()


# --------------------------------------------------------------------------
# Messages and documents: each local client owns its sessions and its
# documents, so the operations on one of them are in the client's order.


def local_op(rng, n, seq, docs):
    """The next operation of local client n: (method, params, target);
    docs: the ids of its documents known to exist (acknowledged)."""
    tag = "L%d.%d" % (n, seq)
    r = rng.random()
    if r < 0.55:
        s = "%08x-0000-4000-8000-%012x" % (n, rng.randrange(3))
        return "message.store", {
            "session_id": s, "role": rng.choice(["user", "assistant"]),
            "content": make_content(rng, tag), "user_id": "u%d" % n}, s
    if r < 0.6:
        s = "%08x-0000-4000-8000-%012x" % (n, rng.randrange(3))
        return "session.delete", {"session_id": s}, s
    if r < 0.8 or not docs:
        params = {"content": make_content(rng, tag),
                  "metadata": {"client": n, "tag": tag}}
        if rng.random() < 0.7:
            params["embedding"] = [rng.uniform(-1, 1) for _ in range(DIM)]
        return "document.store", params, None
    d = rng.choice(sorted(docs))
    if r < 0.93:
        params = {"id": d, "content": make_content(rng, tag)}
        if rng.random() < 0.3:
            params["embedding"] = [rng.uniform(-1, 1) for _ in range(DIM)]
        return "document.update", params, d
    return "document.delete", {"id": d}, d


def local_main(n, seed, sock, run, stop, gen, queue):
    """A client of the local kinds: as client_main, one process."""
    rng = random.Random(seed * 1000 + 500 + n)
    conn, seq, idle = None, 0, -1
    docs = set()
    while not stop.is_set():
        if not run.is_set():
            if conn is not None:
                conn.close()
                conn = None
            if idle != gen.value:
                idle = gen.value
                queue.put(("idle", (CLIENTS + n, idle)))
            run.wait(vt.scaled(0.05))
            continue
        if conn is None:
            try:
                conn = vt.Conn(sock, timeout=20)
            except (LOST + (vt.RpcError,)):
                time.sleep(0.002)
                continue
        seq += 1
        method, params, target = local_op(rng, n, seq, docs)
        op = {"client": n, "seq": seq, "method": method, "params": params,
              "target": target, "s": time.monotonic()}
        try:
            op["res"] = conn.call(method, params)
            op["a"] = time.monotonic()
        except vt.RpcError as e:
            op["a"] = time.monotonic()
            op["err"] = [e.code, e.type, e.message]
        except LOST:
            op["a"] = None
            conn.close()
            conn = None
        if method == "document.store" and "res" in op:
            docs.add(op["res"]["id"])
        elif method == "document.delete" and op.get("res") is not None:
            docs.discard(target)
        queue.put(("local", op))
    if conn is not None:
        conn.close()


def tag_of(content):
    return content.split(" ", 1)[0]


def check_local(ops, conn, where):
    """The daemon's sessions, messages and documents are a state the
    local operations allow: every acknowledged message and document that
    no later delete may have removed is there, nothing that was never sent
    or was refused, messages in the order they were sent, each document's
    content its last acknowledged one or a later unacknowledged one, and
    every document with a vector found by an exact search for it. Returns
    the problems."""
    problems = []
    by_tag = {}
    sessions, docs = {}, {}
    for op in ops:
        if op["method"] in ("message.store", "document.store",
                            "document.update"):
            by_tag[tag_of(op["params"]["content"])] = op
        if op["method"].startswith(("message.", "session.")):
            sessions.setdefault(op["target"], []).append(op)
        elif op["target"]:
            docs.setdefault(op["target"], []).append(op)
        elif "res" in op:
            docs.setdefault(op["res"]["id"], []).append(op)
    # Messages, session by session.
    for s, sops in sessions.items():
        got = conn.call("message.history", {"session_id": s,
                                            "limit": 10000}, timeout=30)
        got_tags = [tag_of(m["content"]) for m in got]
        last_acked_del = max((i for i, op in enumerate(sops)
                              if op["method"] == "session.delete" and
                              op["a"] is not None and "res" in op),
                             default=-1)
        last_del = max((i for i, op in enumerate(sops)
                        if op["method"] == "session.delete" and
                        (op["a"] is None or op.get("res") is True)),
                       default=-1)
        allowed = [tag_of(op["params"]["content"])
                   for i, op in enumerate(sops)
                   if i > last_acked_del and op["method"] ==
                   "message.store" and "err" not in op]
        required = [tag_of(op["params"]["content"])
                    for i, op in enumerate(sops)
                    if i > last_del and op["method"] == "message.store" and
                    "res" in op]
        pos = {t: i for i, t in enumerate(allowed)}
        for t in got_tags:
            if t not in pos:
                problems.append("%s: session %s holds %s, which no allowed "
                                "store sent" % (where, s, t))
        if [t for t in got_tags if t in pos] != sorted(
                (t for t in got_tags if t in pos), key=pos.get):
            problems.append("%s: session %s out of order: %s"
                            % (where, s, got_tags))
        missing = [t for t in required if t not in got_tags]
        if missing:
            problems.append("%s: session %s lost acknowledged messages %s"
                            % (where, s, missing[:5]))
    # Documents: those the daemon holds, by the tag of their content.
    held = {}
    for d in conn.call("document.temporal_query", {
            "start": "2000-01-01T00:00:00Z", "end": "2200-01-01T00:00:00Z",
            "limit": 10000}, timeout=30):
        held[d["id"]] = d
    for did, d in held.items():
        op = by_tag.get(tag_of(d["content"]))
        if op is None or "err" in op:
            problems.append("%s: document %s holds content no allowed "
                            "write sent: %s" % (where, did,
                                                short(d["content"])))
            continue
        if d["has_embedding"]:
            hit = conn.call("document.get", {"id": did})
            found = conn.call("document.semantic_search", {
                "query_embedding": hit["embedding"], "top_k": 1,
                "exact": True}, timeout=30)
            if not found or found[0]["score"] < 0.9999:
                problems.append("%s: document %s with a vector is not "
                                "found by it" % (where, did))
    for did, dops in docs.items():
        d = held.get(did)
        acked = [op for op in dops if "res" in op and op["res"] is not None]
        last = acked[-1] if acked else None
        after = dops[dops.index(last) + 1:] if last else dops
        unknown_after = [op for op in after if op["a"] is None]
        if last is None:
            continue
        if last["method"] == "document.delete":
            if last["res"] is True and d is not None:
                problems.append("%s: document %s is back after its "
                                "acknowledged delete" % (where, did))
            continue
        if d is None:
            if not any(op["method"] == "document.delete"
                       for op in unknown_after):
                problems.append("%s: document %s lost (last acknowledged "
                                "%s)" % (where, did, last["method"]))
            continue
        ok_tags = {tag_of(last["params"]["content"])} | {
            tag_of(op["params"]["content"]) for op in unknown_after
            if op["method"] == "document.update"}
        if tag_of(d["content"]) not in ok_tags:
            problems.append("%s: document %s holds %s, not its last "
                            "acknowledged content %s" % (
                                where, did, tag_of(d["content"]),
                                sorted(ok_tags)))
    health = conn.call("server.health")
    if health["counts"]["documents"] != len(held):
        problems.append("%s: health counts %d documents, %d listed"
                        % (where, health["counts"]["documents"], len(held)))
    return problems


# --------------------------------------------------------------------------
# The model


class Model:
    """Every operation sent, per coordinate, and the reap time of every
    kill. An operation executes, if at all, between its sending and its
    answer; one whose connection died executes before the daemon it was
    sent to died, i.e. before the first kill reaped after it was sent."""

    def __init__(self):
        self.ops = {}
        self.xops = []  # experience operations, in the order reported
        self.reaps = []
        self.by_content = {}
        self.acked = 0
        self.unknown = 0
        self.bugs = []

    def add(self, op):
        if op["kind"] in ("xstore", "xdelete"):
            self.xops.append(op)
            if "bug" in op:
                self.bugs.append("%s: %s" % (short(op["params"]),
                                             op["bug"]))
            if op["a"] is None:
                self.unknown += 1
            elif "res" in op:
                self.acked += 1
            return
        c = tuple(op["c"])
        op["c"] = c
        self.ops.setdefault(c, []).append(op)
        if op["kind"] == "store":
            self.by_content[op["params"]["content"]] = op
        if "bug" in op:
            self.bugs.append("%s: %s" % (short(op["params"]), op["bug"]))
        if op["a"] is None:
            self.unknown += 1
        elif "res" in op:
            self.acked += 1

    def reaped(self, when=None):
        self.reaps.append(time.monotonic() if when is None else when)

    def hi(self, op):
        if op["a"] is not None:
            return op["a"]
        for r in self.reaps:
            if r > op["s"]:
                return r
        return float("inf")

    @staticmethod
    def effective(op):
        """Acknowledged with an effect (a stored record, a delete that
        found something) or unknown."""
        if op["a"] is None:
            return True
        if "res" not in op:
            return False
        return op["kind"] == "store" or op["res"] is True


def record_matches_request(rec, op):
    """A record could have been produced by the store op."""
    p = op["params"]
    c = op["c"]
    return (isinstance(rec, dict) and
            list(rec.keys()) == list(vt.DECISION_KEYS) and
            rec["coordinate"] == vt.coord(*c) and
            rec["content"] == p["content"] and
            rec["agent_id"] == op["agent"] and
            rec["issue_context"] == p.get("issue_context") and
            type(rec["version"]) is int and rec["version"] >= 1 and
            isinstance(rec["timestamp"], str) and
            vt.TIMESTAMP_RE.match(rec["timestamp"]) is not None and
            (rec["version"] == 1 or p.get("overwrite") or
             "if_version" in p) and
            ("if_version" not in p or
             rec["version"] == p["if_version"] + 1))


def check_acked_results(model):
    """Each acknowledged store returned what was asked for. Returns a list
    of problems."""
    bad = []
    for ops in model.ops.values():
        for op in ops:
            if op["kind"] == "store" and "res" in op and \
                    not record_matches_request(op["res"], op):
                bad.append("acknowledged store %s returned %s"
                           % (short(op["params"]), short(op["res"])))
    return bad


def check_coordinate(model, c, rec):
    """rec (the parsed file, or None) is a final state of c the operations
    allow. Returns None or a problem."""
    ops = model.ops.get(c, [])
    acked = [op for op in ops if op["a"] is not None and
             model.effective(op)]
    max_lo = max((op["s"] for op in acked), default=float("-inf"))
    stamps = [op["res"]["timestamp"] for op in acked
              if op["kind"] == "store"]
    max_ts = max(stamps, default="")

    def final_ok(op):
        return model.hi(op) >= max_lo

    def last_acked():
        op = max(acked, key=lambda o: o["s"])
        return "%s %s -> %s" % (op["kind"], short(op["params"]),
                                short(op.get("res")))

    if rec is None:
        if not acked:
            return None
        for op in ops:
            if op["kind"] == "delete" and model.effective(op) and \
                    final_ok(op):
                return None
        return ("%s is gone, but no delete can follow the acknowledged %s"
                % (c, last_acked()))
    op = model.by_content.get(rec.get("content")) \
        if isinstance(rec, dict) else None
    if op is None or op["c"] != c:
        return "%s holds a record no client sent: %s" % (c, short(rec))
    if "err" in op:
        return ("%s holds the content of a store answered by an error "
                "%s: %s" % (c, op["err"], short(rec)))
    if op["a"] is not None:
        if rec != op["res"]:
            return ("%s holds %s, but its store was acknowledged as %s"
                    % (c, short(rec), short(op["res"])))
    elif not record_matches_request(rec, op):
        return ("%s holds %s, which does not match its (unacknowledged) "
                "store %s" % (c, short(rec), short(op["params"])))
    if rec["timestamp"] < max_ts:
        later = [o for o in acked if o["kind"] == "store" and
                 o["res"]["timestamp"] > rec["timestamp"]]
        return ("%s holds %s, older than the acknowledged %s"
                % (c, short(rec), short(later[-1]["res"])))
    if not final_ok(op):
        return ("%s holds %s, but the acknowledged %s was sent after that "
                "store was settled" % (c, short(rec), last_acked()))
    return None


def read_tree(repo):
    """{coordinate: (bytes, parsed or None)} of the decision files, and the
    other entries (temporaries, strays) under .vector-memory."""
    files, other = {}, []
    for rel in repo.vm_files():
        full = os.path.join(repo.vmdir, rel)
        if os.path.isdir(full) or rel == "metadata.json" or \
                (rel.startswith("experiences" + os.sep) and
                 not TMP_RE.match(os.path.basename(rel))):
            continue  # shards: check_experiences
        m = FILE_RE.match(rel)
        if not m:
            other.append(rel)
            continue
        c = tuple(int(v) for v in m.groups())
        with open(full, "rb") as f:
            data = f.read()
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        files[c] = (data, parsed)
    return files, other


def check_files(model, repo, conn, daemon_pid, where):
    """The files and the index hold a state the model allows. Returns
    (problems, number of coordinates checked)."""
    problems = check_acked_results(model) + model.bugs
    files, other = read_tree(repo)
    for rel in other:
        m = TMP_RE.match(os.path.basename(rel))
        if not m or int(m.group(1)) != daemon_pid:
            problems.append("stray entry %s" % rel)
    for c, (data, rec) in sorted(files.items()):
        if rec is None or not isinstance(rec, dict) or \
                list(rec.keys()) != list(vt.DECISION_KEYS):
            problems.append("%r: file does not parse as a record: %r"
                            % (c, data[:200]))
            continue
        if vt.decision_file_bytes(rec) != data:
            problems.append("%r: file is not in the file format: %r"
                            % (c, data[:200]))
    for c in sorted(set(model.ops) | set(files)):
        rec = files[c][1] if c in files else None
        problem = check_coordinate(model, c, rec)
        if problem:
            problems.append(problem)
    index = conn.call("decision.query_range", {"limit": 10000}, timeout=30)
    by_coord = {tuple(r["coordinate"][k] for k in "xyz"): r for r in index}
    if len(by_coord) != len(index):
        problems.append("query_range returned a coordinate twice")
    on_disk = {c: rec for c, (data, rec) in files.items()}
    if by_coord != on_disk:
        diff = sorted(c for c in set(by_coord) | set(on_disk)
                      if by_coord.get(c) != on_disk.get(c))
        problems.append("index differs from the files at %r: index %s, "
                        "file %s" % (diff[:5], short(by_coord.get(diff[0])),
                                     short(on_disk.get(diff[0]))))
    health = conn.call("server.health")
    if health.get("quarantined"):
        problems.append("quarantined: %r" % health["quarantined"])
    return ["%s: %s" % (where, p) for p in problems], len(set(model.ops))


def read_shards(repo):
    """[(shard, line bytes)] of every line of every experience shard."""
    lines = []
    base = os.path.join(repo.vmdir, "experiences")
    for dirpath, _, filenames in os.walk(base):
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                data = f.read()
            rel = os.path.relpath(path, repo.vmdir)
            if data and not data.endswith(b"\n"):
                lines.append((rel, None))  # a torn last line
            lines += [(rel, ln) for ln in data.split(b"\n")[:-1]]
    return lines


def check_experiences(model, repo, conn):
    """Every acknowledged experience is served as acknowledged, unless a
    deletion of it may have happened (gone when one was acknowledged
    with true); every record served was sent by a client; the shards'
    lines are whole, parse, appear once, and fold to what is served.
    Returns the problems."""
    problems = []
    stores = {}
    for op in model.xops:
        if op["kind"] == "xstore" and isinstance(op.get("res"), dict):
            stores[op["res"]["id"]] = op["res"]
    contexts = {op["params"]["context"]: op for op in model.xops
                if op["kind"] == "xstore"}
    deleted = {op["params"]["id"] for op in model.xops
               if op["kind"] == "xdelete" and op.get("res") is True}
    maybe = {op["params"]["id"] for op in model.xops
             if op["kind"] == "xdelete" and op["a"] is None}
    seen, live, gone = set(), {}, set()
    for rel, line in read_shards(repo):
        if line is None:
            problems.append("%s ends inside a line" % rel)
            continue
        if (rel, line) in seen:
            problems.append("%s holds a line twice: %s" % (rel, line[:120]))
        seen.add((rel, line))
        try:
            rec = json.loads(line)
        except ValueError:
            problems.append("%s: a line does not parse: %s"
                            % (rel, line[:120]))
            continue
        if "deleted" in rec:
            gone.add(rec["deleted"])
        else:
            live[rec["id"]] = rec
    for rid in gone:
        live.pop(rid, None)
    for rid, rec in stores.items():
        got = conn.call("experience.get", {"id": rid})
        if rid in deleted:
            if got is not None:
                problems.append("experience %s served after its "
                                "acknowledged deletion" % rid)
        elif got != rec and not (got is None and rid in maybe):
            problems.append("experience %s is %s, acknowledged as %s"
                            % (rid, short(got), short(rec)))
        if got is not None and live.get(rid) != got:
            problems.append("experience %s is served but its shards "
                            "say %s" % (rid, short(live.get(rid))))
    for rid, rec in live.items():
        op = contexts.get(rec["context"])
        if op is None or op["agent"] != rec["agent_id"] or \
                "err" in op:
            problems.append("the shards hold an experience no client "
                            "stored: %s" % short(rec))
    total = conn.call("experience.stats")["total_count"]
    if total != len(live):
        problems.append("%d experiences served, the shards fold to %d"
                        % (total, len(live)))
    return problems


def git_fsck(repo, env):
    """Problems reported by git fsck --strict (empty when clean)."""
    p = subprocess.run(["git", "-C", repo.root, "fsck", "--strict",
                        "--no-progress"], capture_output=True, env=env,
                       timeout=vt.scaled(120))
    out = (p.stdout + p.stderr).decode(errors="replace")
    bad = [ln for ln in out.splitlines()
           if ln.startswith(("error", "fatal", "warning"))]
    if p.returncode != 0 or bad:
        return ["git fsck --strict (exit %d): %s" % (p.returncode,
                                                     out.strip()[-2000:])]
    return []


def leftovers(repo):
    """(temporaries and lock files of ours, libgit2's temporary objects):
    .vector-memory's temporaries and any *.lock in the git directory (but
    the daemon's own flock file); the loose-object temporaries libgit2
    leaves when killed while writing are counted apart (git gc prunes them
    in time and fsck accepts them)."""
    found = ["%s/%s" % (os.path.basename(repo.vmdir), p)
             for p in repo.temp_files()]
    git_tmp = []
    for dirpath, dirnames, filenames in os.walk(repo.gitdir):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), repo.root)
            if name.endswith(".lock") and rel != ".git/vmem/lock":
                found.append(rel)
            elif name.startswith("tmp_"):
                git_tmp.append(rel)
    return sorted(found), sorted(git_tmp)


def log_summary(text):
    """Counts of the daemon's warning and error lines, with a few of
    them (timestamps and pids cut), for the TAP diagnostics."""
    lines = [ln.split(": ", 1)[-1] if "vmemd[" in ln else ln
             for ln in text.splitlines()
             if re.search(r"\b(warning|error|critical)\b", ln)]
    distinct = []
    for ln in lines:
        key = re.sub(r"[0-9a-f]{8,}|\d+", "N", ln)
        if key not in [k for k, _ in distinct]:
            distinct.append((key, ln))
    return len(lines), [ln[:300] for _, ln in distinct[:8]]


# --------------------------------------------------------------------------
# The torture


class Torture(vt.GitCase):
    daemon_args = ("--commit-delay-ms", COMMIT_DELAY_MS,
                   "--embedding-dim", str(DIM))

    def test_kill9_at_random_moments(self):
        vt.diag("seed %d (SEED=%d replays the schedule), %d kills, %d "
                "clients, check every %d kills"
                % (SEED, SEED, KILLS, CLIENTS, CHECK_EVERY))
        started = time.monotonic()
        rng = random.Random(SEED)
        model = Model()
        self.env = vt.clean_env(self.repo.tmp)
        ctx = multiprocessing.get_context("fork")
        run, stop = ctx.Event(), ctx.Event()
        self.gen = ctx.Value("i", 0)
        queue = ctx.Queue()
        procs = [ctx.Process(target=client_main,
                             args=(n, SEED, self.daemon.sock, run, stop,
                                   self.gen, queue), daemon=True)
                 for n in range(CLIENTS)]
        procs += [ctx.Process(target=local_main,
                              args=(n, SEED, self.daemon.sock, run, stop,
                                    self.gen, queue), daemon=True)
                  for n in range(LOCAL_CLIENTS)]
        self.local_ops = []
        run.set()
        for p in procs:
            p.start()
        self.addCleanup(self.end_clients, procs, stop, run)
        kills, checked = 0, 0
        while kills < KILLS:
            pause = (kills + 1) % CHECK_EVERY == 0 or kills + 1 == KILLS
            time.sleep(rng.uniform(0.005, 0.08))
            if pause:
                self.gen.value += 1
                run.clear()
            self.daemon.kill()
            model.reaped()
            kills += 1
            if pause:
                t0 = time.monotonic()
                self.drain(queue, model, CLIENTS + LOCAL_CLIENTS)
                t1 = time.monotonic()
                checked += self.check_all(model, "seed %d kill %d"
                                          % (SEED, kills))
                if os.environ.get("TORTURE_VERBOSE"):
                    vt.diag("kill %d: drain %.2f s, check %.2f s, %d ops"
                            % (kills, t1 - t0, time.monotonic() - t1,
                               sum(map(len, model.ops.values()))))
                if kills < KILLS:
                    run.set()
            else:
                self.daemon.start(timeout=vt.scaled(60))
        problems = self.final_stop(model)
        duration = time.monotonic() - started
        vt.diag("torture: %d kills survived, %d acknowledged writes checked, "
                "duration %.1f s" % (kills, model.acked, duration))
        vt.diag("torture: %d operations sent, %d unknown outcomes, %d "
                "coordinate checks" % (sum(map(len, model.ops.values())),
                                       model.unknown, checked))
        xacked = [op for op in model.xops if "res" in op]
        vt.diag("torture: %d experience operations, %d stores and %d "
                "deletions acknowledged"
                % (len(model.xops),
                   sum(op["kind"] == "xstore" for op in xacked),
                   sum(op["kind"] == "xdelete" for op in xacked)))
        vt.diag("torture: %d message and document operations, %d "
                "acknowledged, %d unknown" % (
                    len(self.local_ops),
                    sum(1 for op in self.local_ops if "res" in op),
                    sum(1 for op in self.local_ops if op["a"] is None)))
        self.assertEqual(problems, [], "\n".join(problems[:20]))
        self.assertGreaterEqual(kills, KILLS)
        self.assertGreater(model.acked, KILLS)

    def end_clients(self, procs, stop, run):
        stop.set()
        run.set()
        for p in procs:
            p.join(vt.scaled(10))
            if p.is_alive():
                p.kill()
                p.join()

    def drain(self, queue, model, clients):
        """Read the clients' reports until each one says it is idle."""
        idle = set()
        deadline = time.monotonic() + vt.scaled(120)
        while len(idle) < clients:
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, "clients did not pause: %r" % idle)
            try:
                kind, item = queue.get(timeout=left)
            except Exception:  # queue.Empty
                continue
            if kind == "idle":
                if item[1] == self.gen.value:
                    idle.add(item[0])
            elif kind == "local":
                self.local_ops.append(item)
            else:
                model.add(item)

    def check_all(self, model, where):
        """With the daemon dead and clients paused: fsck, restart, check
        the files against the model."""
        problems = git_fsck(self.repo, self.env)
        self.daemon.start(timeout=vt.scaled(60))
        conn = self.daemon.connect(timeout=vt.scaled(30))
        try:
            found, n = check_files(model, self.repo, conn, self.daemon.pid,
                                   where)
            found += ["%s: %s" % (where, p)
                      for p in check_experiences(model, self.repo, conn)]
            found += check_local(self.local_ops, conn, where)
        finally:
            conn.close()
        problems += found
        self.assertEqual(problems, [], "\n".join(problems[:20]))
        return n

    def final_stop(self, model):
        """After the last check: graceful stop, nothing of ours left, the
        files are still what the model allows and git holds them. Returns
        the problems."""
        conn = self.daemon.connect(timeout=vt.scaled(30))
        try:
            problems = ["before the graceful stop: " + p
                        for p in check_experiences(model, self.repo, conn)]
            problems += check_local(self.local_ops, conn,
                                    "before the stop")
        finally:
            conn.close()
        self.daemon.stop(timeout=vt.scaled(60))
        files, other = read_tree(self.repo)
        problems += ["stray entry after a graceful stop: %s" % p
                     for p in other]
        for c in sorted(set(model.ops) | set(files)):
            problem = check_coordinate(model, c,
                                       files[c][1] if c in files else None)
            if problem:
                problems.append("after the graceful stop: " + problem)
        ours, git_tmp = leftovers(self.repo)
        problems += ["left after a graceful stop: %s" % p for p in ours]
        if git_tmp:
            vt.diag("note: %d libgit2 temporary objects left in .git/objects "
                    "by killed commits (e.g. %s)" % (len(git_tmp),
                                                     git_tmp[0]))
        count, samples = log_summary(self.daemon.stderr())
        vt.diag("torture: vmemd logged %d warning/error lines" % count,
                *samples)
        problems += git_fsck(self.repo, self.env)
        st = subprocess.run(["git", "-C", self.repo.root, "status",
                             "--porcelain", "--untracked-files=all", "--",
                             ".vector-memory"], capture_output=True,
                            env=self.env, timeout=vt.scaled(60))
        if st.stdout.strip():
            problems.append("not committed after a graceful stop:\n%s"
                            % st.stdout.decode(errors="replace")[:2000])
        return problems


if __name__ == "__main__":
    vt.main()

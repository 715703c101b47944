#!/usr/bin/env python3
"""Stress suite: many client processes hammer one vmemd on a small hot set
of coordinates, then everything the daemon, the decision files and git HEAD
hold is checked against a model built from the acknowledged operations only.

Each client is this file run again as a separate process
(`test_stress.py --worker SOCKET INDEX SEED OPS LOGFILE`): its own socket
connection, its own agent id, its own seeded random stream. Every call and
its outcome (result or error) goes to a JSON log that the parent reads back.

Deletes are always done under a lease (lock.acquire [c], decision.get c,
decision.delete c with if_version, lock.release), so the decision a delete
removed is known. Server timestamps are strictly increasing across writes,
so they order the acknowledged stores of a coordinate.

Environment: SEED (default 20240611), STRESS_CLIENTS (default 32),
STRESS_OPS (operations per client, default 625).
"""

import datetime
import json
import os
import random
import subprocess
import sys
import time

import vmemtest as vt

SEED = int(os.environ.get("SEED", "20240611"))
CLIENTS = int(os.environ.get("STRESS_CLIENTS", "32"))
OPS = int(os.environ.get("STRESS_OPS", "625"))

# The hot set: 4 x 5 x 4 = 80 coordinates, z=1 included.
XS, YS, ZS = range(1, 5), range(1, 6), range(1, 5)
HOT = [(x, y, z) for x in XS for y in YS for z in ZS]

CALL_TIMEOUT = 60.0       # seconds per call (ASan may be 3-5x slower)
WRITE_TIMEOUT_MS = 10000  # longest wait of a write for a lock or lease
LEASE_TIMEOUT_MS = 10000  # longest wait of lock.acquire
LEASE_TTL_MS = 2000
RUN_TIMEOUT = 600.0       # seconds for the whole run of the workers
CLOCK_SLACK = 0.05        # seconds between our clock and the daemon's
# A call answered this many seconds before its lease's expires_at ran under
# the lease (the daemon's timers run on a loop time that may lag a little).
EXPIRY_MARGIN = 0.25

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
         "hotel", "india", "juliet", "kilo", "lima")

# (weight, operation) of the mix.
MIX = (
    (18, "get"),
    (3, "exists"),
    (11, "store"),
    (13, "store_if_version"),
    (9, "store_overwrite"),
    (8, "query_range"),
    (5, "query_partial_order"),
    (6, "search"),
    (8, "delete"),
    (9, "lease"),
    (10, "store_many"),
)

READS = ("decision.get", "decision.exists", "decision.query_range",
         "decision.query_partial_order", "decision.search")


def agent(index):
    return "stress-%02d" % index


def ckey(c):
    """(x, y, z) of a wire coordinate."""
    return (c["x"], c["y"], c["z"])


def rec_key(rec):
    """A hashable identity of a decision record (search extras dropped)."""
    return (ckey(rec["coordinate"]), rec["timestamp"], rec["version"],
            rec["content"], rec["agent_id"],
            json.dumps(rec["issue_context"], sort_keys=True))


def epoch(ts):
    """Seconds since the epoch of a decisions-format UTC timestamp."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


# --------------------------------------------------------------------------
# The client process


class Worker:
    """One client: runs OPS random operations and logs every call."""

    def __init__(self, sock, index, seed, ops):
        self.index = index
        self.agent = agent(index)
        self.rng = random.Random("%d-%d" % (seed, index))
        self.ops = ops
        self.conn = vt.Conn(sock, agent_id=self.agent, timeout=CALL_TIMEOUT)
        self.calls = []      # every call with its outcome
        self.seen = set()    # every record a read returned
        self.problems = []   # inconsistencies a read showed
        self.op = 0
        self.kinds = [k for w, k in MIX for _ in range(w)]

    # -- calls
    def call(self, kind, method, params, lease=None):
        """Call and log; returns (result, error) with exactly one set.
        Errors other than RpcError (timeout, EOF) end the worker."""
        entry = {"op": self.op, "kind": kind, "m": method, "p": params}
        if lease is not None:
            entry["lease"] = lease
        self.calls.append(entry)
        entry["t0"] = time.time()
        try:
            result = self.conn.call(method, params)
        except vt.RpcError as e:
            entry["t"] = time.time()
            entry["e"] = {"code": e.code, "type": e.type,
                          "message": e.message, "data": e.data}
            return None, entry["e"]
        entry["t"] = time.time()
        if method in READS:
            self.check_read(method, params, result)
            entry["n"] = (len(result) if isinstance(result, list)
                          else int(result is not None))
        else:
            entry["r"] = result
        return result, None

    def note(self, text):
        self.problems.append("op %d: %s" % (self.op, text))

    def see(self, rec, where):
        if not isinstance(rec, dict) or "coordinate" not in rec:
            self.note("%s returned a non-record %r" % (where, rec))
            return
        self.seen.add(rec_key(rec))

    def check_read(self, method, params, result):
        """Shape and order of a read's result; the records go to seen."""
        if method == "decision.exists":
            if not isinstance(result, bool):
                self.note("exists returned %r" % (result,))
            return
        if method == "decision.get":
            if result is not None:
                self.see(result, "get")
                if result.get("coordinate") != params["coordinate"]:
                    self.note("get %r returned %r" % (params, result))
            return
        if not isinstance(result, list):
            self.note("%s returned %r" % (method, result))
            return
        for rec in result:
            self.see(rec, method)
        keys = [ckey(r["coordinate"]) for r in result]
        if method == "decision.search":
            order = [(-r.get("score", 0), ckey(r["coordinate"]))
                     for r in result]
            if order != sorted(order) or len(set(keys)) != len(keys):
                self.note("search result out of order: %r" % (order,))
            terms = params["terms"]
            for r in result:
                matched = r.get("matched_terms")
                if (not isinstance(matched, list) or not matched
                        or r.get("score") != len(matched)
                        or any(t not in terms for t in matched)):
                    self.note("search record %r for %r" % (r, terms))
                    continue
                tokens = r["content"].lower().replace(":", " ").split()
                for t in matched:
                    hit = (any(tok.startswith(t[:-1]) for tok in tokens)
                           if t.endswith("*") else t in tokens)
                    if not hit:
                        self.note("search term %r matched %r"
                                  % (t, r["content"]))
                if params.get("match_all") and len(matched) != len(
                        set(terms)):
                    self.note("match_all search %r returned %r"
                              % (terms, r))
            if "limit" in params and len(result) > params["limit"]:
                self.note("search over its limit: %d" % len(result))
            return
        if keys != sorted(set(keys)):
            self.note("%s result not sorted by (x, y, z): %r"
                      % (method, keys))
        if "limit" in params and len(result) > params["limit"]:
            self.note("%s over its limit: %d" % (method, len(result)))
        if method == "decision.query_range":
            for k in keys:
                for axis, v in zip("xyz", k):
                    lo, hi = params.get(axis + "_range") or (1, 10000)
                    if not lo <= v <= hi:
                        self.note("query_range %r returned %r"
                                  % (params, k))
        else:
            xt, yt = params["x_threshold"], params["y_threshold"]
            zf = params.get("z_filter")
            for x, y, z in keys:
                if not (x < xt or (x == xt and y < yt)) or \
                        (zf is not None and z != zf):
                    self.note("query_partial_order %r returned %r"
                              % (params, (x, y, z)))

    # -- building blocks
    def pick(self, z1=True):
        if z1:
            return self.rng.choice(HOT)
        return self.rng.choice([c for c in HOT if c[2] != 1])

    def content(self, item=0):
        words = self.rng.sample(WORDS, 2)
        return "w%02d o%d i%d %s %s: stress decision" % (
            self.index, self.op, item, words[0], words[1])

    def store_params(self, c, mode, item=0, version=None):
        """Params of a store (or store_many item) at c; mode is plain,
        overwrite or if_version."""
        p = {"coordinate": vt.coord(*c), "content": self.content(item)}
        if self.rng.random() < 0.2:
            p["issue_context"] = {"issue_id": "stress-%d" % c[0]}
        if mode == "overwrite":
            p["overwrite"] = True
        elif mode == "if_version":
            p["if_version"] = version
        return p

    def get(self, kind, c, lease=None):
        rec, _ = self.call(kind, "decision.get",
                           {"coordinate": vt.coord(*c)}, lease)
        return rec

    def store(self, kind, c, mode, lease=None):
        """A store at c; for if_version the version is read first (an
        empty coordinate gets a plain store)."""
        version = None
        if mode == "if_version":
            rec = self.get(kind, c, lease)
            if rec is None:
                mode = "plain"
            else:
                version = rec["version"]
        p = self.store_params(c, mode, version=version)
        p["timeout_ms"] = WRITE_TIMEOUT_MS
        return self.call(kind, "decision.store", p, lease)

    # -- the operations
    def op_get(self):
        self.get("get", self.pick())

    def op_exists(self):
        self.call("exists", "decision.exists",
                  {"coordinate": vt.coord(*self.pick())})

    def op_store(self):
        self.store("store", self.pick(), "plain")

    def op_store_if_version(self):
        self.store("store_if_version", self.pick(), "if_version")

    def op_store_overwrite(self):
        self.store("store_overwrite", self.pick(), "overwrite")

    def op_query_range(self):
        p = {}
        for axis, dom in (("x", XS), ("y", YS), ("z", ZS)):
            if self.rng.random() < 0.6:
                a, b = sorted(self.rng.choice(dom) for _ in range(2))
                p[axis + "_range"] = [a, b]
        if self.rng.random() < 0.3:
            p["limit"] = self.rng.randint(1, 40)
        self.call("query_range", "decision.query_range", p)

    def op_query_partial_order(self):
        p = {"x_threshold": self.rng.randint(1, 5),
             "y_threshold": self.rng.randint(1, 6)}
        if self.rng.random() < 0.5:
            p["z_filter"] = self.rng.choice(ZS)
        self.call("query_partial_order", "decision.query_partial_order", p)

    def op_search(self):
        terms = self.rng.sample(WORDS, self.rng.randint(1, 2))
        if self.rng.random() < 0.3:
            terms[0] = terms[0][:3] + "*"
        p = {"terms": terms}
        if self.rng.random() < 0.5:
            p["match_all"] = True
        if self.rng.random() < 0.5:
            p["limit"] = self.rng.randint(1, 30)
        self.call("search", "decision.search", p)

    def acquire(self, kind, coords):
        """lock.acquire: (token, expiry in epoch seconds), or (None, None)
        when it failed."""
        res, _ = self.call(kind, "lock.acquire", {
            "coordinates": [vt.coord(*c) for c in coords],
            "timeout_ms": LEASE_TIMEOUT_MS, "ttl_ms": LEASE_TTL_MS})
        if res is None:
            return None, None
        return res["token"], epoch(res["expires_at"])

    def op_delete(self):
        """lease [c], get c, delete c with if_version, release."""
        c = self.pick() if self.rng.random() < 0.15 else self.pick(False)
        token, expires = self.acquire("delete", [c])
        if token is None:
            return
        rec = self.get("delete", c, expires)
        p = {"coordinate": vt.coord(*c), "timeout_ms": WRITE_TIMEOUT_MS}
        if rec is not None:
            p["if_version"] = rec["version"]
        self.call("delete", "decision.delete", p, expires)
        self.calls[-1]["deleted"] = rec
        self.call("delete", "lock.release", {"token": token}, expires)

    def op_lease(self):
        """lease 2-3 coordinates, write a couple of them, release."""
        coords = self.rng.sample(HOT, self.rng.randint(2, 3))
        order = list(coords)
        self.rng.shuffle(order)  # any order: the daemon sorts
        if self.rng.random() < 0.2:
            order.append(order[0])  # a duplicate is merged
        token, expires = self.acquire("lease", order)
        if token is None:
            return
        for _ in range(2):
            mode = self.rng.choice(("overwrite", "if_version"))
            self.store("lease", self.rng.choice(coords), mode, expires)
        self.call("lease", "lock.release", {"token": token}, expires)

    def op_store_many(self):
        """2-5 items; mostly z=2..4 and explicit overwrites, so that a fair
        share of the batches succeed."""
        hot = HOT if self.rng.random() < 0.15 else [c for c in HOT
                                                    if c[2] != 1]
        coords = self.rng.sample(hot, self.rng.randint(2, 5))
        items = []
        for i, c in enumerate(coords):
            mode = self.rng.choice(("plain", "overwrite", "overwrite",
                                    "if_version", "if_version"))
            version = None
            if mode == "if_version":
                rec = self.get("store_many", c)
                if rec is None:
                    mode = "plain"
                else:
                    version = rec["version"]
            items.append(self.store_params(c, mode, i, version))
        self.call("store_many", "decision.store_many",
                  {"items": items, "timeout_ms": WRITE_TIMEOUT_MS})

    def run(self):
        for self.op in range(self.ops):
            getattr(self, "op_" + self.rng.choice(self.kinds))()


def worker_main(argv):
    """--worker SOCKET INDEX SEED OPS LOGFILE: say "ready", wait for a
    line on stdin, run, write the log."""
    sock, index, seed, ops, logfile = argv
    w = Worker(sock, int(index), int(seed), int(ops))
    print("ready", flush=True)
    sys.stdin.readline()
    fatal = None
    try:
        w.run()
    except Exception as e:  # timeout or EOF: the parent fails the test
        fatal = "op %d: %s: %s" % (w.op, type(e).__name__, e)
    finally:
        w.conn.close()
    with open(logfile, "w") as f:
        json.dump({"agent": w.agent, "calls": w.calls, "problems":
                   w.problems, "fatal": fatal,
                   "seen": [list(k) for k in w.seen]}, f)
    return 0 if fatal is None else 1


# --------------------------------------------------------------------------
# The model and its checks


def err_class(err):
    """data.type of an error; a ConcurrencyError says whether it was an
    if_version mismatch or a lock wait."""
    if err["type"] != "ConcurrencyError":
        return err["type"]
    why = "if_version" if "if_version" in err["message"] else "lock wait"
    return "ConcurrencyError (%s)" % why


class Model:
    """Everything the acknowledged operations imply, and every violation
    of the rules found on the way (self.problems)."""

    def __init__(self, logs):
        self.problems = []
        self.stores = {}       # coordinate -> [acknowledged record]
        self.deleted = {}      # coordinate -> {timestamp of deleted}
        self.acked = set()     # rec_key of every acknowledged store
        self.z1_attempts = {}  # z=1 coordinate -> [outcome]
        self.counts = {}
        self.calls = 0
        for log in logs:
            self.add_log(log)
        self.check_order()
        self.expected = self.final_state()
        for log in logs:
            for k in log["seen"]:
                k = (tuple(k[0]), *k[1:])
                if k not in self.acked:
                    self.bad("%s read a record never acknowledged: %r"
                             % (log["agent"], k))

    def bad(self, text):
        self.problems.append(text)

    def count(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1

    def add_log(self, log):
        who = log["agent"]
        if log["fatal"]:
            self.bad("%s: %s" % (who, log["fatal"]))
        self.problems += ["%s: %s" % (who, p) for p in log["problems"]]
        last_ts = ""
        for entry in log["calls"]:
            self.calls += 1
            where = "%s op %d %s %s" % (who, entry["op"], entry["kind"],
                                        entry["m"])
            err = entry.get("e")
            if err is not None:
                self.count("%s: %s" % (entry["m"], err_class(err)))
                self.check_error(where, entry, err)
                continue
            self.count("%s: ok" % entry["m"])
            if entry["m"] == "decision.store":
                recs = [(entry["p"], entry["r"])]
            elif entry["m"] == "decision.store_many":
                items = entry["p"]["items"]
                if not isinstance(entry["r"], list) or \
                        len(entry["r"]) != len(items):
                    self.bad("%s: result %r" % (where, entry["r"]))
                    continue
                recs = list(zip(items, entry["r"]))
            elif entry["m"] == "decision.delete":
                self.add_delete(where, entry)
                continue
            elif entry["m"] == "lock.acquire":
                self.check_lease(where, entry)
                continue
            elif entry["m"] == "lock.release":
                if entry["r"] is not True and \
                        entry["t"] < entry["lease"] - EXPIRY_MARGIN:
                    self.bad("%s: %r before the lease expired"
                             % (where, entry["r"]))
                continue
            else:
                continue
            for p, rec in recs:
                self.add_store(where, who, p, rec)
                if rec["timestamp"] <= last_ts:
                    self.bad("%s: timestamp %s not after this client's "
                             "previous write %s"
                             % (where, rec["timestamp"], last_ts))
                last_ts = rec["timestamp"]

    def check_lease(self, where, entry):
        """A token, and an expiry ttl_ms after a grant that happened
        while the call was in flight."""
        res, ttl = entry["r"], entry["p"]["ttl_ms"] / 1000.0
        if not isinstance(res, dict) or sorted(res) != ["expires_at",
                                                         "token"] or \
                not isinstance(res["token"], str) or \
                not vt.TIMESTAMP_RE.match(res["expires_at"]):
            self.bad("%s: result %r" % (where, res))
            return
        expires = epoch(res["expires_at"])
        if not entry["t0"] + ttl - CLOCK_SLACK <= expires <= \
                entry["t"] + ttl + CLOCK_SLACK:
            self.bad("%s: expires_at %s is not ttl_ms after a grant "
                     "between %.6f and %.6f" % (where, res["expires_at"],
                                                entry["t0"], entry["t"]))

    def lease_valid(self, entry):
        """True when the call was answered while its lease still held."""
        return "lease" in entry and entry["t"] < entry["lease"] - \
            EXPIRY_MARGIN

    def check_error(self, where, entry, err):
        """Only ConcurrencyError, CoordinateOccupiedError and
        ImmutableLayerError, and each only where it can happen."""
        m, p, typ = entry["m"], entry["p"], err["type"]
        code = {"ConcurrencyError": -32003, "ImmutableLayerError": -32002,
                "CoordinateOccupiedError": -32006}.get(typ)
        if code is None or err["code"] != code:
            self.bad("%s: unexpected error %r" % (where, err))
            return
        if m == "lock.acquire":
            ok = typ == "ConcurrencyError"
        elif m == "decision.store_many":
            idx = (err["data"] or {}).get("index")
            if not isinstance(idx, int) or not 0 <= idx < len(p["items"]):
                self.bad("%s: error without a valid data.index %r"
                         % (where, err))
                return
            if not err["message"].startswith("items[%d]: " % idx):
                self.bad("%s: message without the items[%d] prefix: %r"
                         % (where, idx, err["message"]))
            ok = self.store_error_ok(p["items"][idx], typ)
        elif m == "decision.store":
            ok = self.store_error_ok(p, typ)
            if ok and typ == "ConcurrencyError" and self.lease_valid(entry):
                self.bad("%s: %r under a valid lease" % (where, err))
        elif m == "decision.delete":
            ok = (typ == "ImmutableLayerError") == (p["coordinate"]["z"] == 1)
            if typ == "ConcurrencyError" and self.lease_valid(entry):
                ok = False
        else:
            ok = False
        if not ok:
            self.bad("%s: unexpected error %r for %r" % (where, err, p))
        if m == "decision.store" and p["coordinate"]["z"] == 1:
            self.z1_attempts.setdefault(ckey(p["coordinate"]), []).append(
                (where, typ, err["message"]))

    @staticmethod
    def store_error_ok(p, typ):
        z = p["coordinate"]["z"]
        if typ == "ImmutableLayerError":
            return z == 1
        if typ == "CoordinateOccupiedError":
            return z != 1 and not p.get("overwrite") and \
                "if_version" not in p
        return True  # ConcurrencyError: if_version mismatch or lock wait

    def add_store(self, where, who, p, rec):
        c = ckey(p["coordinate"])
        want = {"coordinate": p["coordinate"], "content": p["content"],
                "agent_id": who,
                "issue_context": p.get("issue_context")}
        if not isinstance(rec, dict) or \
                list(rec.keys()) != list(vt.DECISION_KEYS) or \
                {k: rec[k] for k in want} != want or \
                not vt.TIMESTAMP_RE.match(rec["timestamp"]):
            self.bad("%s: stored %r for %r" % (where, rec, p))
            return
        if "if_version" in p and rec["version"] != p["if_version"] + 1:
            self.bad("%s: if_version %d gave version %d"
                     % (where, p["if_version"], rec["version"]))
        if not p.get("overwrite") and "if_version" not in p and \
                rec["version"] != 1:
            self.bad("%s: a plain store gave version %d"
                     % (where, rec["version"]))
        self.stores.setdefault(c, []).append(rec)
        key = rec_key(rec)
        self.acked.add(key)
        if c[2] == 1:
            self.z1_attempts.setdefault(c, []).append((where, "stored", rec))

    def add_delete(self, where, entry):
        c = ckey(entry["p"]["coordinate"])
        got = entry.get("deleted")
        if c[2] == 1:
            self.bad("%s: a z=1 delete answered %r" % (where, entry["r"]))
        elif entry["r"] is True and got is not None:
            self.deleted.setdefault(c, []).append((where, got))
        elif entry["r"] is False and got is None:
            pass  # the coordinate was empty under the lease
        elif self.lease_valid(entry) or entry["r"] is not False:
            self.bad("%s: delete answered %r after get returned %r"
                     % (where, entry["r"], got))

    def check_order(self):
        """Timestamps unique; per coordinate, versions follow the stores
        and deletes; z=1 written once."""
        all_ts = [r["timestamp"] for recs in self.stores.values()
                  for r in recs]
        if len(set(all_ts)) != len(all_ts):
            self.bad("%d acknowledged writes share a timestamp"
                     % (len(all_ts) - len(set(all_ts))))
        for c, dels in self.deleted.items():
            by_ts = {r["timestamp"]: r for r in self.stores.get(c, [])}
            seen = set()
            for where, got in dels:
                ts = got["timestamp"]
                if by_ts.get(ts) != got:
                    self.bad("%s: deleted %r, not an acknowledged store"
                             % (where, got))
                if ts in seen:
                    self.bad("%s: %r deleted twice" % (where, got))
                seen.add(ts)
        for c, recs in self.stores.items():
            recs.sort(key=lambda r: r["timestamp"])
            gone = self.deleted_ts(c)
            prev = None
            for rec in recs:
                want = 1 if prev is None or prev["timestamp"] in gone \
                    else prev["version"] + 1
                if rec["version"] != want:
                    self.bad("%r: version %d at %s, expected %d (previous "
                             "%r)" % (c, rec["version"], rec["timestamp"],
                                      want, prev))
                prev = rec
        for c, attempts in self.z1_attempts.items():
            stored = [a for a in attempts if a[1] == "stored"]
            if len(stored) > 1:
                self.bad("%r (z=1) stored %d times: %r"
                         % (c, len(stored), stored))
            for where, typ, msg in attempts:
                if typ == "CoordinateOccupiedError" or (
                        typ == "ConcurrencyError" and "if_version" in msg):
                    self.bad("%s: z=1 store failed with %s (%s), not "
                             "ImmutableLayerError" % (where, typ, msg))

    def deleted_ts(self, c):
        return {got["timestamp"] for _, got in self.deleted.get(c, [])}

    def final_state(self):
        """coordinate -> the record the daemon must hold."""
        state = {}
        for c, recs in self.stores.items():
            last = recs[-1]
            if last["timestamp"] not in self.deleted_ts(c):
                state[c] = last
        return state


# --------------------------------------------------------------------------
# The test


def file_records(repo):
    """coordinate -> (bytes, parsed) of every decision file."""
    found = {}
    for rel in repo.vm_files():
        parts = rel.split(os.sep)
        if len(parts) != 2 or not parts[1].endswith(".json"):
            continue
        x = int(parts[0][2:])
        y, z = int(parts[1][2]), int(parts[1][6])
        with open(os.path.join(repo.vmdir, rel), "rb") as f:
            data = f.read()
        found[(x, y, z)] = (data, json.loads(data))
    return found


class Stress(vt.GitCase):
    def spawn_workers(self):
        procs = []
        for i in range(CLIENTS):
            log = self.repo.path("worker-%02d.json" % i)
            err = open(self.repo.path("worker-%02d.stderr" % i), "wb")
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker",
                 self.daemon.sock, str(i), str(SEED), str(OPS), log],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
            err.close()
            self.addCleanup(self.reap_worker, p)
            procs.append((p, log))
        for i, (p, _) in enumerate(procs):
            line = p.stdout.readline()
            self.assertEqual(line, b"ready\n", "worker %d did not start:\n%s"
                             % (i, self.worker_stderr(i)))
        return procs

    def worker_stderr(self, i):
        with open(self.repo.path("worker-%02d.stderr" % i), "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    @staticmethod
    def reap_worker(p):
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass

    def run_workers(self):
        """All workers start together; returns (logs, seconds)."""
        procs = self.spawn_workers()
        started = time.monotonic()
        for p, _ in procs:
            p.stdin.write(b"go\n")
            p.stdin.close()
        deadline = started + RUN_TIMEOUT
        for i, (p, _) in enumerate(procs):
            try:
                p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail("worker %d still running after %.0f s"
                          % (i, RUN_TIMEOUT))
        elapsed = time.monotonic() - started
        logs = []
        for i, (p, log) in enumerate(procs):
            self.assertTrue(os.path.exists(log), "worker %d (exit %d) left "
                            "no log:\n%s" % (i, p.returncode,
                                             self.worker_stderr(i)))
            with open(log) as f:
                logs.append(json.load(f))
        return logs, elapsed

    def test_concurrent_clients_agree_with_the_model(self):
        vt.diag("stress: seed %d (SEED=%d to replay), %d clients x %d ops"
                % (SEED, SEED, CLIENTS, OPS))
        logs, elapsed = self.run_workers()
        total = CLIENTS * OPS
        model = Model(logs)
        vt.diag("stress: %d ops in %.2f s = %.0f ops/s (%d calls = %.0f "
                "calls/s)" % (total, elapsed, total / elapsed, model.calls,
                              model.calls / elapsed))
        vt.diag("stress: outcomes: " + ", ".join(
            "%s %d" % kv for kv in sorted(model.counts.items())))
        vt.diag("stress: %d acknowledged stores, %d deletes, %d decisions "
                "at the end" % (len(model.acked), sum(
                    len(d) for d in model.deleted.values()),
                    len(model.expected)))
        self.assertEqual(model.problems[:30], [],
                         "%d problems" % len(model.problems))
        for kind in ("decision.store: ok",
                     "decision.store: ConcurrencyError (if_version)",
                     "decision.store_many: ok",
                     "decision.delete: ok", "lock.acquire: ok",
                     "decision.store: CoordinateOccupiedError",
                     "decision.store: ImmutableLayerError"):
            self.assertGreater(model.counts.get(kind, 0), 0,
                               "the mix never produced %s" % kind)

        conn = self.connect(agent_id="stress-check", timeout=CALL_TIMEOUT)
        self.report_stats(conn)
        expected = model.expected

        # The daemon's memory.
        held = conn.call("decision.query_range", {"limit": 10000})
        self.assertEqual({ckey(r["coordinate"]): r for r in held}, expected)

        # The decision files (written by a background writer).
        want_files = {c: vt.decision_file_bytes(r)
                      for c, r in expected.items()}
        vt.wait_until(lambda: {c: d for c, (d, _) in
                               file_records(self.repo).items()}
                      == want_files, 10.0, 0.05)
        files = file_records(self.repo)
        self.assertEqual({c: rec for c, (_, rec) in files.items()},
                         expected)
        self.assertEqual({c: d for c, (d, _) in files.items()}, want_files)
        self.assertEqual(self.repo.temp_files(), [])

        # git HEAD after git.sync.
        self.sync(conn, timeout=CALL_TIMEOUT)
        paths = [p for p in self.tree_files("HEAD")
                 if p.startswith(".vector-memory/") and p != vt.METADATA]
        self.assertEqual(sorted(paths),
                         sorted(vt.rel_path(*c) for c in expected))
        for c, rec in expected.items():
            path = vt.rel_path(*c)
            blob = self.git_bytes("show", "HEAD:" + path)
            self.assertEqual(blob, want_files[c], path)
            self.assertEqual(json.loads(blob), rec, path)

    def report_stats(self, conn):
        stats = conn.call("server.stats")
        lines = []
        for m, s in sorted(stats.get("methods", {}).items()):
            lines.append("stress: %-28s n %6d err %5d p50 %8.0f us p99 "
                         "%8.0f us" % (m, s["count"], s["errors"],
                                       s["p50_us"], s["p99_us"]))
        vt.diag(*lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.exit(worker_main(sys.argv[2:]))
    vt.main()

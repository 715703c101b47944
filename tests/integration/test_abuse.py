#!/usr/bin/env python3
"""Protocol abuse (issue 7): no input crashes vmemd, leaks a descriptor or
grows it without bound, and no vanished client leaves a write half done.

Most cases share ONE daemon (started by the first of them) so that the
abuse accumulates; the last case (AfterAll) then requires that daemon's
RSS to be within RSS_SLACK_KIB of its start (not under a sanitizer, whose
quarantine and shadow memory make RSS meaningless), its descriptor count
to be back to its start value, its stderr to be free of sanitizer reports,
that it still serves, and that it stops gracefully.

Cases: 10,000-element batches (over the default --max-batch, and served
with --max-batch 10000), a 100 MB line without a newline, 1 byte per
second (--line-deadline-ms), half-close after pipelining, 10,000
connect/close cycles, clients vanishing mid-line and after sending a
durable write, ids of every JSON type, notifications.

Seeded: VMEM_SEED=N replays a run (the seed is printed). Figures are
printed as TAP diagnostics.
"""

import atexit
import json
import os
import random
import re
import socket
import struct
import threading
import time

import vmemtest as vt

SEED = int(os.environ.get("VMEM_SEED", "0")) or random.randrange(1, 1 << 31)
CYCLES = int(os.environ.get("VMEM_ABUSE_CYCLES", "10000"))
DEADLINE_MS = 5000
SHARED_ARGS = ("--line-deadline-ms", str(DEADLINE_MS))
RSS_SLACK_KIB = 30 * 1024
LINE_RSS_SLACK_KIB = 20 * 1024
MAX_LINE = 1 << 20
MiB = 1 << 20
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "server.hello"}
TSAN_RE = re.compile(r".*WARNING: ThreadSanitizer.*")


def line_of(obj):
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def req(rid, method, params=None):
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def note(method, params=None):
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def store_params(x, y, z, content, agent="abuser", **kw):
    params = {"coordinate": vt.coord(x, y, z), "content": content,
              "agent_id": agent}
    params.update(kw)
    return params


def fd_count(pid):
    """Descriptors of a process, but for git pack files: libgit2 keeps the
    packs it has read open as a cache (bounded by the daemon, see gitc.c),
    so a commit that wrote a pack leaves one open that is no leak."""
    return sum(1 for target in fd_links(pid).values()
               if not re.search(r"/objects/pack/pack-[0-9a-f]+\.pack$",
                                target))


def fd_links(pid):
    """{fd: link target} of a process (for failure messages)."""
    links = {}
    for name in os.listdir("/proc/%d/fd" % pid):
        try:
            links[int(name)] = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            pass
    return links


def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % pid)


def sanitizer_of(pid):
    """The sanitizer runtime mapped into a process ("asan", "tsan") or
    None."""
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    for name in ("asan", "tsan", "msan"):
        if "lib%s" % name in maps:
            return name
    return None


def reset_close(sock):
    """Close with RST (SO_LINGER 0) instead of FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                    struct.pack("ii", 1, 0))
    sock.close()


def fin_close(sock):
    sock.close()


def raw_connect(path):
    """A blocking socket (a full backlog makes connect wait, not fail)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def sanitizer_report(log):
    """The first sanitizer report in a daemon's stderr (up to 4000
    characters of it, stacks included), or None. vmemtest's SANITIZER_RE
    does not know ThreadSanitizer's "WARNING:" lines, hence TSAN_RE."""
    found = vt.SANITIZER_RE.search(log) or TSAN_RE.search(log)
    return log[found.start():found.start() + 4000] if found else None


# --------------------------------------------------------------------------
# The shared daemon


class Shared:
    """One daemon for the abuse cases, with its start figures."""

    repo = None
    daemon = None
    base_rss = None
    base_fds = None
    sanitizer = None

    @classmethod
    def get(cls):
        if cls.daemon is None:
            cls.repo = vt.Repo()
            cls.daemon = vt.Daemon(cls.repo, args=SHARED_ARGS,
                                   name="shared").start()
            atexit.register(cls.cleanup)
            # Warm up: a served connection, a write, a read; then let the
            # start-up probe's close and the first git job settle.
            c = cls.daemon.connect(agent_id="warmup")
            c.store(1000, 5, 1, "warm-up")
            c.get(1000, 5, 1)
            c.call("git.sync")
            c.close()
            time.sleep(0.3)
            cls.base_fds = stable_fd_count(cls.daemon.pid)
            cls.base_rss = cls.daemon.rss_kib()
            cls.sanitizer = sanitizer_of(cls.daemon.pid)
            vt.diag("seed %d (VMEM_SEED to replay); shared daemon pid %d: "
                    "%d fds, RSS %d KiB at start%s"
                    % (SEED, cls.daemon.pid, cls.base_fds, cls.base_rss,
                       ", under %s" % cls.sanitizer if cls.sanitizer
                       else ""))
        return cls.daemon

    @classmethod
    def cleanup(cls):
        if cls.daemon is not None:
            cls.daemon.kill()
        if cls.repo is not None:
            cls.repo.cleanup()
        cls.daemon = cls.repo = None


def stable_fd_count(pid, settle=0.3, timeout=vt.scaled(5.0)):
    """The descriptor count once it has not changed for settle seconds."""
    deadline = time.monotonic() + timeout
    last = fd_count(pid)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = fd_count(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            break
    return last


class SharedCase(vt.VmemTestCase):
    """A case against the shared daemon (the per-test repository of
    VmemTestCase stays unused but harmless)."""

    start_daemon = False

    def setUp(self):
        super().setUp()
        self.daemon = Shared.get()
        self.assertTrue(self.daemon.running(), "the shared daemon died:\n%s"
                        % self.daemon.stderr()[-3000:])

    def tearDown(self):
        # A case that killed the daemon fails, whatever it asserted.
        self.assertTrue(self.daemon.running(), "the shared daemon died:\n%s"
                        % self.daemon.stderr()[-3000:])
        report = sanitizer_report(self.daemon.stderr())
        self.assertIsNone(report, report)
        vt.diag("shared daemon now: RSS %d KiB, %d fds"
                % (self.daemon.rss_kib(), fd_count(self.daemon.pid)))

    def fresh(self, agent_id=None):
        """A connection the daemon serves (retrying while it has not yet
        noticed earlier closes and refuses us as one too many)."""
        deadline = time.monotonic() + vt.scaled(5.0)
        while True:
            c = None
            try:
                c = vt.Conn(self.daemon.sock)  # EAGAIN: backlog full
                c.call("server.hello",
                       {"agent_id": agent_id} if agent_id else None)
                self.addCleanup(c.close)
                return c
            except (OSError, EOFError, vt.RpcError):
                if c is not None:
                    c.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


# --------------------------------------------------------------------------
# 1. Batches of 10,000


def big_batch(n, y, z):
    """n elements: every tenth a store at (k, y, z), the rest hellos."""
    elems = []
    for i in range(n):
        if i % 10 == 0:
            k = 1 + i // 10
            elems.append(req(i, "decision.store",
                             store_params(k, y, z, "batch %d" % k)))
        else:
            elems.append(req(i, "server.hello"))
    return elems


class BatchOverDefaultLimit(SharedCase):
    def test_10000_elements_refused_unexecuted_connection_stays(self):
        conn = self.fresh()
        data = line_of(big_batch(10000, 5, 4))
        self.assertLess(len(data), MAX_LINE)  # the batch limit answers
        conn.send_raw(data)
        resp = conn.read_json(timeout=30)
        self.assertEqual(set(resp), {"jsonrpc", "id", "error"}, resp)
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)
        self.assertEqual(resp["error"], {
            "code": vt.INVALID_REQUEST,
            "message": "batch of 10000 requests exceeds the limit of 1000"})
        # Nothing of it ran, and the connection still serves.
        self.assertEqual(conn.call("decision.query_range", {
            "x_range": [1, 1000], "y_range": [5, 5], "z_range": [4, 4]}), [])
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")
        vt.diag("10,000-element batch of %d bytes: %s"
                % (len(data), resp["error"]["message"]))


class BatchAtRaisedLimit(vt.VmemTestCase):
    daemon_args = ("--max-batch", "10000", "--max-line", str(16 * MiB))

    def test_10000_elements_answered_in_one_array_in_order(self):
        conn = self.connect(agent_id="batcher")
        pid = self.daemon.pid
        fds = stable_fd_count(pid)
        elems, expect = [], []
        for i in range(10000):
            kind = i % 10
            k = 1 + i // 10
            if kind == 0:
                elems.append(req(i, "decision.store",
                                 {"coordinate": vt.coord(k, 2, 2),
                                  "content": "b%d" % k}))
                expect.append((i, "stored", k))
            elif kind == 1:  # sees the store just before it
                elems.append(req("g%d" % i, "decision.get",
                                 {"coordinate": vt.coord(k, 2, 2)}))
                expect.append(("g%d" % i, "got", k))
            elif kind == 2:  # a notification: no entry
                elems.append(note("decision.exists",
                                  {"coordinate": vt.coord(k, 2, 2)}))
            elif kind == 3:  # not a request: an error entry in place
                elems.append(i)
                expect.append((None, -32600, None))
            elif kind == 4:
                elems.append(req(-i, "nope.method"))
                expect.append((-i, -32601, None))
            elif kind == 5:
                elems.append(req(i + 0.5, "decision.exists",
                                 {"coordinate": vt.coord(k, 2, 2)}))
                expect.append((i + 0.5, True, None))
            else:
                elems.append(req("h%d" % i, "server.hello"))
                expect.append(("h%d" % i, "hello", None))
        data = line_of(elems)
        started = time.monotonic()
        conn.send_raw(data)
        line = conn.read_line(timeout=120)
        took = time.monotonic() - started
        self.assertIsNotNone(line)
        resps = json.loads(line)
        self.assertIsInstance(resps, list)
        self.assertEqual(len(resps), len(expect))
        for n, (resp, (rid, what, k)) in enumerate(zip(resps, expect)):
            at = "entry %d: %r" % (n, resp)
            self.assertEqual(resp["jsonrpc"], "2.0", at)
            self.assertEqual(resp["id"], rid, at)
            self.assertIs(type(resp["id"]), type(rid), at)
            if what == "stored":
                self.assertDecision(resp["result"], k, 2, 2, "b%d" % k,
                                    agent_id="batcher")
            elif what == "got":
                self.assertEqual(resp["result"]["content"], "b%d" % k, at)
            elif what == "hello":
                self.assertEqual(resp["result"]["server"], "vmemd", at)
            elif what is True:
                self.assertIs(resp["result"], True, at)
            else:
                self.assertEqual(resp["error"]["code"], what, at)
        vt.diag("10,000-element batch (%d bytes, 1,000 stores): %d entries "
                "in %.2f s, response %d bytes"
                % (len(data), len(resps), took, len(line)))
        # Nothing else on the line, the stores are all there, no fd leak.
        self.assertTrue(conn.silent_for(0.2))
        got = conn.call("decision.query_range", {
            "y_range": [2, 2], "z_range": [2, 2], "limit": 10000})
        self.assertEqual(len(got), 1000)
        # Only notifications: no output at all, then a request answered.
        conn.send_raw(line_of([note("decision.exists",
                                    {"coordinate": vt.coord(1, 1, 1)})]
                              * 10000))
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")
        # Once the background writer and the git job are done, the
        # descriptors are those of before.
        conn.call("git.sync", timeout=60)
        back = vt.wait_until(lambda: fd_count(pid) == fds, 5.0)
        self.assertTrue(back, "fds %d before, now %s" % (fds, fd_links(pid)))
        self.daemon.stop()
        report = sanitizer_report(self.daemon.stderr())
        self.assertIsNone(report, report)


# --------------------------------------------------------------------------
# 2. A 100 MB line without a newline


class RssSampler(threading.Thread):
    """Samples a process's RSS every 20 ms until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.peak = max(self.peak, vt.rss_kib(self.pid))
            except (OSError, AssertionError):
                return
            self.done.wait(vt.scaled(0.02))

    def stop(self):
        self.done.set()
        self.join(vt.scaled(5))
        return self.peak


class HugeLine(SharedCase):
    def test_100mb_line_without_newline(self):
        pid = self.daemon.pid
        base = self.daemon.rss_kib()
        sampler = RssSampler(pid)
        sampler.start()
        conn = self.fresh()
        # The start of a genuine store, then 100 MB of content, no LF.
        head = b'{"jsonrpc":"2.0","id":7,"method":"decision.store",' \
               b'"params":{"coordinate":{"x":9,"y":1,"z":4},' \
               b'"agent_id":"huge","content":"'
        chunk = b"z" * MiB
        sent, how = 0, "all 100 MiB sent"
        try:
            conn.send_raw(head)
            for _ in range(100):
                conn.send_raw(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError) as e:
            how = "%s after %d MiB" % (type(e).__name__, sent >> 20)
        resp = conn.read_json(timeout=10)
        eof = conn.at_eof(5.0)
        peak = sampler.stop()
        vt.diag("100 MB line: %s; daemon RSS %d KiB before, peak %d KiB, "
                "%d KiB after" % (how, base, peak, self.daemon.rss_kib()))
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)
        self.assertIn("limit", resp["error"]["message"])
        self.assertTrue(eof, "no EOF after the over-long line")
        if Shared.sanitizer is None:
            self.assertLess(peak - base, LINE_RSS_SLACK_KIB)
        c = self.fresh()
        self.assertIsNone(c.get(9, 1, 4))


# --------------------------------------------------------------------------
# 3. One byte per second


class OneBytePerSecond(SharedCase):
    def test_slowloris_closed_while_a_slow_honest_client_is_served(self):
        """Two clients at 1 byte/s at once: one never ends its line and is
        refused after the deadline; the other ends each line within the
        deadline (two lines, longer than the deadline together) and is
        answered. A third client is served without delay meanwhile."""
        results = {}

        def slowloris():
            conn = vt.Conn(self.daemon.sock, timeout=DEADLINE_MS / 1000 + 5)
            self.addCleanup(conn.close)
            text = b'{"jsonrpc":"2.0","id":1,"method":"server.hello",' \
                   b'"params":{"client":"' + b"s" * 100
            started = time.monotonic()
            resp, sent = None, 0
            try:
                while time.monotonic() - started < DEADLINE_MS / 1000 + 5:
                    conn.send_raw(text[sent:sent + 1])
                    sent += 1
                    try:
                        line = conn.read_line(1.0)
                    except TimeoutError:
                        continue
                    resp = line
                    break
            except (BrokenPipeError, ConnectionResetError):
                resp = conn.read_line(2.0)
            results["loris"] = (resp, time.monotonic() - started, sent,
                                conn.at_eof(3.0))

        def honest():
            conn = vt.Conn(self.daemon.sock, timeout=20)
            self.addCleanup(conn.close)
            started = time.monotonic()
            ids = []
            for rid in ("slow-1", "slow-2"):
                line = line_of(req(rid, "server.hello"))
                conn.send_raw(line[:-4])
                for b in line[-4:]:
                    time.sleep(1.0)
                    conn.send_raw(bytes([b]))
                ids.append(json.loads(conn.read_line(5.0))["id"])
            results["honest"] = (ids, time.monotonic() - started)

        threads = [threading.Thread(target=slowloris),
                   threading.Thread(target=honest)]
        for t in threads:
            t.start()
        other = self.fresh()
        worst = 0.0
        while any(t.is_alive() for t in threads):
            t0 = time.monotonic()
            other.call("decision.exists", {"coordinate": vt.coord(1, 1, 1)})
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.2)
        for t in threads:
            t.join()
        resp, waited, sent, eof = results["loris"]
        ids, honest_took = results["honest"]
        vt.diag("1 byte/s: slowloris refused after %.1f s (%d bytes, "
                "deadline %d ms); honest client's 2 lines answered over "
                "%.1f s; other client's worst round trip %.3f s"
                % (waited, sent, DEADLINE_MS, honest_took, worst))
        self.assertIsNotNone(resp, "the slow line was never refused")
        resp = json.loads(resp)
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)
        self.assertGreaterEqual(waited, DEADLINE_MS / 1000 - 0.5)
        self.assertLess(waited, DEADLINE_MS / 1000 + 3)
        self.assertTrue(eof)
        self.assertEqual(ids, ["slow-1", "slow-2"])
        self.assertGreater(honest_took, DEADLINE_MS / 1000)
        self.assertLess(worst, 2.0)


# --------------------------------------------------------------------------
# 4. Half-close after pipelining


class HalfClose(SharedCase):
    def pipelined(self, y):
        """100 requests (stores, gets, hellos, errors) and the expected
        (id, check) of each answer."""
        msgs, expect = [], []
        for i in range(100):
            x = 1 + i // 4
            kind = i % 4
            if kind == 0:
                msgs.append(req(i, "decision.store",
                                store_params(x, y, 3, "half %d" % x)))
                expect.append((i, lambda r, x=x: r["result"]["content"]
                               == "half %d" % x))
            elif kind == 1:
                msgs.append(req(i, "decision.get",
                                {"coordinate": vt.coord(x, y, 3)}))
                expect.append((i, lambda r, x=x: r["result"]["content"]
                               == "half %d" % x))
            elif kind == 2:
                msgs.append(req(i, "decision.store",
                                store_params(x, y, 3, "again")))
                expect.append((i, lambda r: r["error"]["code"]
                               == vt.E_OCCUPIED[0]))
            else:
                msgs.append(req(i, "server.hello"))
                expect.append((i, lambda r: "result" in r))
        return msgs, expect

    def test_100_pipelined_then_shut_wr_all_answered_then_eof(self):
        # The second round ends with a whole store but no LF: bytes after
        # the last LF are never executed.
        partial = line_of(req("partial", "decision.store",
                              store_params(99, 4, 3, "no LF")))[:-1]
        for y, tail in ((3, b""), (4, partial)):
            conn = self.fresh()
            msgs, expect = self.pipelined(y)
            conn.send_raw(b"".join(line_of(m) for m in msgs) + tail)
            conn.sock.shutdown(socket.SHUT_WR)
            for rid, check in expect:
                line = conn.read_line(10.0)
                self.assertIsNotNone(line, "EOF before the answer to %d"
                                     % rid)
                resp = json.loads(line)
                self.assertEqual(resp["id"], rid)
                self.assertTrue(check(resp), resp)
            self.assertTrue(conn.at_eof(5.0), "no EOF after the answers")
        self.assertIsNone(self.fresh().get(99, 4, 3))
        vt.diag("half-close: 2 x 100 pipelined requests answered, then EOF")


# --------------------------------------------------------------------------
# 5. 10,000 connect/close cycles


class ConnectClose(SharedCase):
    def test_10000_connect_close_cycles(self):
        rng = random.Random(SEED)
        pid = self.daemon.pid
        fds_before = stable_fd_count(pid)
        path = self.daemon.sock
        counts = dict(plain=0, request=0, store=0, partial=0, reset=0,
                      garbage=0)
        stores = {}
        started = time.monotonic()
        for n in range(CYCLES):
            r = rng.random()
            s = raw_connect(path)
            try:
                if r < 0.80:
                    counts["plain"] += 1
                    s.close()
                elif r < 0.86:
                    counts["request"] += 1
                    s.sendall(line_of(HELLO))
                    s.close()
                elif r < 0.90 and len(stores) < 1000:
                    counts["store"] += 1
                    x = 1 + len(stores)
                    content = "cycle %d %s" % (n, "c" * rng.randrange(4000))
                    stores[x] = content
                    s.sendall(line_of(req(n, "decision.store",
                                          store_params(x, 4, 4, content))))
                    (reset_close if rng.random() < 0.5 else fin_close)(s)
                elif r < 0.94:
                    counts["partial"] += 1
                    s.sendall(line_of(HELLO)[:rng.randrange(1, 40)])
                    s.close()
                elif r < 0.97:
                    counts["reset"] += 1
                    s.sendall(line_of(HELLO) * rng.randrange(1, 20))
                    reset_close(s)
                else:
                    counts["garbage"] += 1
                    s.sendall(bytes(rng.randrange(256)
                                    for _ in range(rng.randrange(1, 200))))
                    s.close()
            except (BrokenPipeError, ConnectionResetError):
                s.close()  # refused as one too many: fine
        took = time.monotonic() - started
        c = self.fresh()
        applied = 0
        for x, content in sorted(stores.items()):
            rec = c.get(x, 4, 4)
            if rec is not None:
                applied += 1
                self.assertDecision(rec, x, 4, 4, content, agent_id="abuser")
        fds_after = vt.wait_until(
            lambda: fd_count(pid) <= fds_before + 1 and fd_count(pid), 5.0)
        vt.diag("%d connect/close cycles in %.2f s (%.0f/s): %s; "
                "stores sent then closed unread: %d applied of %d; "
                "daemon fds %d before, %d after (this case's connection "
                "included)"
                % (CYCLES, took, CYCLES / took, counts, applied,
                   len(stores), fds_before, fd_count(pid)))
        self.assertTrue(fds_after, "fds %d before, now %s"
                        % (fds_before, fd_links(pid)))
        self.assertEqual(c.call("server.hello")["server"], "vmemd")


# --------------------------------------------------------------------------
# 6. Clients vanishing


def vanish_rounds(sock, rng, rounds, y):
    """Clients that send a durable write and vanish before reading the
    answer (at once or after a short random pause): single stores of
    1..100 KB at (x, y, 3), and store_many of 5 items at (x, y, 2) and
    (x, y', 1) for the four other y'. Returns (singles, batches):
    [(coordinate, content sent)] and [[(coordinate, content sent)...]]."""
    singles, batches = [], []
    for n in range(rounds):
        s = raw_connect(sock)
        x = 1 + n
        if n % 2 == 0:
            content = ("v%d " % n) + "q" * rng.randrange(1024,
                                                         vt.CONTENT_MAX - 8)
            singles.append(((x, y, 3), content))
            msg = req(n, "decision.store", store_params(x, y, 3, content))
        else:
            where = [(x, y, 2)] + [(x, yy, 1) for yy in range(1, 6)
                                   if yy != y]
            items = [(c, "m%d %r %s" % (n, c, "w" * 2000)) for c in where]
            batches.append(items)
            msg = req(n, "decision.store_many", {
                "items": [{"coordinate": vt.coord(*c), "content": text}
                          for c, text in items],
                "agent_id": "abuser"})
        data = line_of(msg)
        if rng.random() < 0.4:
            # A hello first: its answer may be unread at the close, which
            # makes the daemon see ECONNRESET instead of end of file.
            data = line_of(HELLO) + data
        try:
            s.sendall(data)
            pause = rng.choice([0, 0, 0.0002, 0.001, 0.003])
            if pause:
                time.sleep(pause)
            (reset_close if rng.random() < 0.5 else fin_close)(s)
        except (BrokenPipeError, ConnectionResetError):
            s.close()
    return singles, batches


def settled(conn, coords, timeout=vt.scaled(10.0)):
    """{coordinate: record or None} once two reads 0.2 s apart agree (the
    writes of vanished clients may still be in flight)."""
    deadline = time.monotonic() + timeout
    last = {c: conn.get(*c) for c in coords}
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = {c: conn.get(*c) for c in coords}
        if now == last:
            break
        last = now
    return last


def all_coords(singles, batches):
    return [c for c, _ in singles] + [c for b in batches for c, _ in b]


def check_all_or_nothing(case, repo, conn, singles, batches):
    """Each single store is there exactly (and so is its file in repo) or
    not at all; each store_many has all its items or none. Returns
    (applied singles, applied batches)."""
    applied_s = applied_b = 0
    for c, content in singles:
        rec = conn.get(*c)
        if rec is not None:
            applied_s += 1
            case.assertDecision(rec, *c, content, agent_id="abuser")
            want = vt.decision_file_bytes(rec)
            got = vt.wait_until(
                lambda: repo.read_decision_bytes(*c) == want, 5.0)
            case.assertTrue(got, "file of %r: %r" % (
                c, (repo.read_decision_bytes(*c) or b"")[:200]))
    for items in batches:
        recs = [conn.get(*c) for c, _ in items]
        present = [r is not None for r in recs]
        case.assertIn(present, ([True] * len(items), [False] * len(items)),
                      "store_many half applied: %r" % (present,))
        if present[0]:
            applied_b += 1
            for (c, content), rec in zip(items, recs):
                case.assertDecision(rec, *c, content, agent_id="abuser")
    return applied_s, applied_b


class Vanish(SharedCase):
    def test_client_vanishing_mid_line(self):
        sock = self.daemon.sock
        for n in range(50):
            s = raw_connect(sock)
            data = line_of(req(n, "decision.store",
                               store_params(100 + n, 5, 3, "never")))
            s.sendall(data[:len(data) * (n % 9 + 1) // 10])
            (reset_close if n % 2 else fin_close)(s)
        conn = self.fresh()
        time.sleep(0.2)
        for n in range(50):
            self.assertIsNone(conn.get(100 + n, 5, 3))

    def test_client_vanishing_after_a_durable_write(self):
        rng = random.Random(SEED + 1)
        singles, batches = vanish_rounds(self.daemon.sock, rng, 60, 1)
        conn = self.fresh()
        settled(conn, all_coords(singles, batches))
        s, b = check_all_or_nothing(self, Shared.repo, conn, singles,
                                    batches)
        vt.diag("vanished after a write: %d/%d stores and %d/%d store_many "
                "applied (the rest never were)"
                % (s, len(singles), b, len(batches)))


class VanishThenRestart(vt.VmemTestCase):
    def test_what_was_applied_survives_a_kill_whole(self):
        rng = random.Random(SEED + 2)
        singles, batches = vanish_rounds(self.daemon.sock, rng, 40, 2)
        conn = self.connect()
        coords = all_coords(singles, batches)
        before = settled(conn, coords)
        conn.close()
        self.daemon.kill()  # the log must hold what was applied
        self.daemon.start()
        conn = self.connect()
        after = {c: conn.get(*c) for c in coords}
        self.assertEqual(after, before)
        s, b = check_all_or_nothing(self, self.repo, conn, singles,
                                    batches)
        vt.diag("after kill -9: %d/%d stores, %d/%d store_many as before"
                % (s, len(singles), b, len(batches)))
        self.daemon.stop()
        report = sanitizer_report(self.daemon.stderr())
        self.assertIsNone(report, report)


# --------------------------------------------------------------------------
# 7. Ids of every type


class Ids(SharedCase):
    def exchange(self, conn, raw_id, method="server.hello", params=None):
        """Send a request whose id is the raw JSON text raw_id; the
        response line (bytes) and its parsed form."""
        text = '{"jsonrpc":"2.0","id":%s,"method":"%s"' % (raw_id, method)
        if params is not None:
            text += ',"params":%s' % json.dumps(params)
        conn.send_raw(text.encode() + b"}\n")
        line = conn.read_line(10.0)
        self.assertIsNotNone(line, "EOF after id %s" % raw_id[:60])
        return line, json.loads(line)

    def test_integer_ids_echoed_exactly(self):
        conn = self.fresh()
        for raw in ("0", "-1", "1", "9007199254740993",
                    "9223372036854775807", "-9223372036854775808"):
            line, resp = self.exchange(conn, raw)
            self.assertIn(b'"id":' + raw.encode() + b",", line)
            self.assertEqual(resp["id"], int(raw))
            self.assertIn("result", resp)

    def test_integer_ids_beyond_64_bits(self):
        conn = self.fresh()
        seen = []
        for raw in ("9223372036854775808", "-9223372036854775809",
                    "18446744073709551616", "1" + "0" * 400):
            line, resp = self.exchange(conn, raw)
            seen.append("%s -> %s" % (raw[:24], line.decode()[:120]))
            # docs/protocol.md §3: an integer outside int64 makes the line
            # a parse error, answered with id null.
            self.assertIsNone(resp["id"], line)
            self.assertEqual(resp["error"]["code"], vt.PARSE_ERROR, line)
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")
        vt.diag("ids beyond int64:", *seen)

    def test_real_ids(self):
        conn = self.fresh()
        seen = []
        for raw in ("1.5", "0.1", "-0.0", "1e2", "-2.5E-3", "1e308",
                    "5e-324", "123456789.125"):
            line, resp = self.exchange(conn, raw)
            seen.append("%s -> %s" % (raw, json.dumps(resp["id"])))
            self.assertIsInstance(resp["id"], float, line)
            self.assertEqual(resp["id"], float(raw), line)
            self.assertIn("result", resp)
        # Out of the double range: a parse error (jansson refuses it).
        line, resp = self.exchange(conn, "1e400")
        seen.append("1e400 -> %s" % line.decode()[:120])
        self.assertIsNone(resp["id"], line)
        self.assertEqual(resp["error"]["code"], vt.PARSE_ERROR, line)
        vt.diag("real ids:", *seen)

    def test_string_ids(self):
        conn = self.fresh()
        long_id = "".join(random.Random(SEED).choice("abcé€😀\"\\/\t")
                          for _ in range(50000))
        for value in ("", "1", "ünïcødé € 😀 \u2028 𝄞", "\x01\x1f",
                      "a" * 600000, long_id, "null"):
            raw = json.dumps(value)
            line, resp = self.exchange(conn, raw)
            self.assertEqual(resp["id"], value, line[:200])
            self.assertIs(type(resp["id"]), str)
            self.assertIn("result", resp)
        # An error answer echoes the id too.
        line, resp = self.exchange(conn, json.dumps("x" * 100000),
                                   method="no.such")
        self.assertEqual(resp["id"], "x" * 100000)
        self.assertEqual(resp["error"]["code"], -32601)
        # NUL and lone surrogates: the line is not valid, id null.
        for raw in ('"a\\u0000b"', '"\\ud800"', '"\\udc00x"'):
            line, resp = self.exchange(conn, raw)
            self.assertIsNone(resp["id"], line)
            self.assertEqual(resp["error"]["code"], vt.PARSE_ERROR, line)

    def test_null_id_is_a_request_answered_with_null(self):
        conn = self.fresh()
        line, resp = self.exchange(conn, "null")
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["result"]["server"], "vmemd")

    def test_invalid_id_types_refused_unexecuted(self):
        conn = self.fresh()
        for n, raw in enumerate(("true", "false", "[]", "[1]", "{}",
                                 '{"id":1}', '[[[[["deep"]]]]]')):
            line, resp = self.exchange(
                conn, raw, "decision.store",
                store_params(200 + n, 5, 2, "must not run"))
            self.assertIsNone(resp["id"], line)
            self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST, line)
            self.assertNotIn("result", resp)
        for n in range(7):
            self.assertIsNone(conn.get(200 + n, 5, 2))


# --------------------------------------------------------------------------
# 8. Notifications


class Notifications(SharedCase):
    def test_notifications_never_answered(self):
        conn = self.fresh(agent_id="notifier")
        pending = [
            note("server.hello"),
            note("server.health"),
            note("no.such.method"),
            note("decision.store", {"coordinate": vt.coord(0, 0, 0),
                                    "content": "bad coordinate"}),
            note("decision.store", {"coordinate": vt.coord(3, 1, 2)}),
            note("decision.get", {"coordinate": vt.coord(3, 1, 2)}),
            note("decision.store", store_params(3, 1, 2, "by notification")),
            note("decision.store", store_params(3, 1, 2, "occupied now")),
            note("decision.delete", {"coordinate": vt.coord(3, 1, 1)}),
            note("lock.release", {"token": "nope"}),
            note("watch.unsubscribe", {"subscription": 12345}),
        ]
        data = b"".join(line_of(m) for m in pending)
        data += line_of(pending) + line_of([note("server.hello")] * 500)
        data += b"".join(line_of(note("decision.exists",
                                      {"coordinate": vt.coord(1, 1, 1)}))
                         for _ in range(1000))
        # A batch mixing notifications and one request: one entry.
        data += line_of([note("server.hello"), req("in-batch",
                                                    "server.hello"),
                         note("no.such")])
        conn.send_raw(data)
        resp = conn.read_json(timeout=20)
        self.assertIsInstance(resp, list, resp)
        self.assertEqual([r["id"] for r in resp], ["in-batch"])
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")
        self.assertTrue(conn.silent_for(0.3))
        rec = conn.get(3, 1, 2)  # notifications are executed
        self.assertDecision(rec, 3, 1, 2, "by notification",
                            agent_id="abuser")


# --------------------------------------------------------------------------
# 9. After all of it


class ZAfterAll(SharedCase):
    """Runs last (classes run in name order)."""

    def test_rss_fds_and_service_after_the_abuse(self):
        d = self.daemon
        pid = d.pid
        fds = stable_fd_count(pid)
        rss = d.rss_kib()
        hwm = hwm_kib(pid)
        c = self.fresh(agent_id="after")
        health = c.call("server.health")
        stats = c.call("server.stats")
        vt.diag("shared daemon after the abuse: fds %d (start %d), RSS %d "
                "KiB (start %d, +%d KiB; peak %d KiB)%s; health %s"
                % (fds, Shared.base_fds, rss, Shared.base_rss,
                   rss - Shared.base_rss, hwm,
                   "; RSS bound skipped under %s" % Shared.sanitizer
                   if Shared.sanitizer else "",
                   json.dumps({k: health[k] for k in (
                       "status", "decisions", "pending", "last_error")})))
        if isinstance(stats, dict) and "connections" in stats:
            vt.diag("server.stats connections: %s"
                    % json.dumps(stats["connections"]))
        # Served: a write, a read, a commit.
        rec = c.store(999, 2, 4, "still serving")
        self.assertEqual(c.get(999, 2, 4), rec)
        self.assertIsNotNone(c.call("git.sync", timeout=30)["commit"])
        self.assertEqual(health["status"], "ok", health)
        # Counted before our own connection: back to the start value.
        self.assertEqual(fds, Shared.base_fds,
                         "fds: %s" % fd_links(pid))
        if Shared.sanitizer is None:
            self.assertLess(rss - Shared.base_rss, RSS_SLACK_KIB)
        c.close()
        d.stop(timeout=vt.scaled(30))
        report = sanitizer_report(d.stderr())
        self.assertIsNone(report, report)
        Shared.cleanup()

    def tearDown(self):
        pass  # the daemon is stopped on purpose


if __name__ == "__main__":
    vt.main()

#!/usr/bin/env python3
"""The wire protocol of vmemd: golden transcripts (transcripts/*.txt, one
fresh daemon each) and the NDJSON framing and limits.

Transcript format: "--> TEXT" sends TEXT and a LF (raw, may be invalid
JSON); "<-- JSON" reads one response line and compares it structurally
("<TIMESTAMP>" matches a microsecond UTC timestamp, "<ANY>" anything,
"<REPO>" the repository root; error objects compare code and data, and the
message only when given); "<-- (none)" means no response within 0.3 s;
"<-- (eof)" means the daemon closes the connection; "#" starts a comment.
After the last line nothing more may arrive.
"""

import glob
import json
import os
import socket
import threading
import time

import vmemtest as vt

HERE = os.path.dirname(os.path.abspath(__file__))
TRANSCRIPTS = os.path.join(HERE, "transcripts")
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "server.hello"}


def hello_line(rid):
    return json.dumps(dict(HELLO, id=rid)).encode() + b"\n"


# --------------------------------------------------------------------------
# Structural comparison


def mismatch(expected, got, repo, path="$"):
    """None when got matches expected, else a description of the first
    difference."""
    if expected == "<ANY>":
        return None
    if expected == "<TIMESTAMP>":
        ok = isinstance(got, str) and vt.TIMESTAMP_RE.match(got)
        return None if ok else "%s: %r is not a timestamp" % (path, got)
    if expected == "<REPO>":
        expected = repo
    if isinstance(expected, dict):
        return mismatch_object(expected, got, repo, path)
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return "%s: expected %r, got %r" % (path, expected, got)
        for i, (e, g) in enumerate(zip(expected, got)):
            diff = mismatch(e, g, repo, "%s[%d]" % (path, i))
            if diff:
                return diff
        return None
    if type(expected) is not type(got) or expected != got:
        return "%s: expected %r, got %r" % (path, expected, got)
    return None


def mismatch_object(expected, got, repo, path):
    if not isinstance(got, dict):
        return "%s: expected an object, got %r" % (path, got)
    is_error = path.endswith(".error")
    keys = set(expected)
    if is_error:
        if not isinstance(got.get("message"), str):
            return "%s.message: missing or not a string" % path
        keys.add("message")
        if "data" not in expected:
            if isinstance(got.get("data"), dict) and "type" in got["data"]:
                return "%s.data: unexpected type %r" % (path,
                                                        got["data"]["type"])
            keys.add("data")
    extra = set(got) - keys
    missing = set(expected) - set(got)
    if extra or missing:
        return "%s: members missing %s, unexpected %s in %r" % (
            path, sorted(missing), sorted(extra), got)
    for key, value in expected.items():
        diff = mismatch(value, got[key], repo, "%s.%s" % (path, key))
        if diff:
            return diff
    return None


# --------------------------------------------------------------------------
# Transcripts


def parse_transcript(path):
    """[(lineno, kind, text)] with kind "send" or "expect"."""
    steps = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("--> "):
                steps.append((lineno, "send", line[4:]))
            elif line.startswith("<-- "):
                steps.append((lineno, "expect", line[4:]))
            elif line.strip() and not line.startswith("#"):
                raise ValueError("%s:%d: bad transcript line" % (path, lineno))
    return steps


class Transcripts(vt.VmemTestCase):
    """One test per transcripts/*.txt, each on a fresh daemon."""

    def run_transcript(self, path):
        conn = self.connect()
        where = os.path.basename(path)
        for lineno, kind, text in parse_transcript(path):
            at = "%s:%d" % (where, lineno)
            if kind == "send":
                conn.send_raw(text.encode() + b"\n")
            elif text == "(none)":
                self.assertTrue(conn.silent_for(0.3),
                                "%s: a response arrived" % at)
            elif text == "(eof)":
                self.assertTrue(conn.at_eof(5.0), "%s: no EOF" % at)
            else:
                self.expect_line(conn, json.loads(text), at)
        self.assertTrue(conn.silent_for(0.2) or conn.at_eof(0.1),
                        "%s: unexpected trailing response" % where)

    def expect_line(self, conn, expected, at):
        try:
            line = conn.read_line(5.0)
        except TimeoutError:
            self.fail("%s: no response" % at)
        self.assertIsNotNone(line, "%s: EOF instead of a response" % at)
        got = json.loads(line)
        diff = mismatch(expected, got, self.repo.root)
        self.assertIsNone(diff, "%s: %s\n  got line: %s" % (at, diff, line))


def _add_transcript_tests():
    for path in sorted(glob.glob(os.path.join(TRANSCRIPTS, "*.txt"))):
        name = "test_" + os.path.splitext(os.path.basename(path))[0]
        setattr(Transcripts, name,
                lambda self, p=path: self.run_transcript(p))


_add_transcript_tests()


# --------------------------------------------------------------------------
# Framing


class Framing(vt.VmemTestCase):
    def test_pipelining_100_in_one_write(self):
        conn = self.connect()
        conn.send_raw(b"".join(hello_line(i) for i in range(1, 101)))
        for i in range(1, 101):
            resp = conn.read_json()
            self.assertEqual(resp["id"], i)
            self.assertEqual(resp["result"]["server"], "vmemd")

    def test_mixed_methods_answered_in_order(self):
        conn = self.connect(agent_id="pipe")
        reqs = []
        for i in range(1, 31):
            params = {"coordinate": vt.coord(i, 2, 3), "content": "c%d" % i}
            reqs.append({"jsonrpc": "2.0", "id": 2 * i,
                         "method": "decision.store", "params": params})
            reqs.append({"jsonrpc": "2.0", "id": 2 * i + 1,
                         "method": "decision.get",
                         "params": {"coordinate": vt.coord(i, 2, 3)}})
        conn.send_raw("".join(json.dumps(r) + "\n" for r in reqs).encode())
        for r in reqs:
            resp = conn.read_json()
            self.assertEqual(resp["id"], r["id"])
            self.assertEqual(resp["result"]["content"], "c%d" % (r["id"] // 2))

    def test_request_split_one_byte_per_write(self):
        conn = self.connect()
        for byte in hello_line(7):
            conn.send_raw(bytes([byte]))
            time.sleep(0.001)
        self.assertEqual(conn.read_json()["id"], 7)

    def test_crlf_accepted(self):
        conn = self.connect()
        conn.send_raw(hello_line(1)[:-1] + b"\r\n")
        resp = conn.read_json()
        self.assertEqual(resp["id"], 1)
        self.assertIn("result", resp)

    def test_empty_lines_ignored(self):
        conn = self.connect()
        conn.send_raw(b"\n\n\r\n" + hello_line(1) + b"\n\n" + hello_line(2))
        self.assertEqual(conn.read_json()["id"], 1)
        self.assertEqual(conn.read_json()["id"], 2)
        self.assertTrue(conn.silent_for(0.3))

    def test_invalid_utf8_is_a_parse_error(self):
        conn = self.connect()
        for bad in (b'{"jsonrpc":"2.0","id":1,"method":"server.hello",'
                    b'"params":{"client":"\xff\xfe"}}',
                    b'\xef\xbb\xbf' + hello_line(1)[:-1],  # a BOM
                    b'{"jsonrpc":"2.0","id":1,"method":"server.\xc3"}'):
            conn.send_raw(bad + b"\n")
            resp = conn.read_json()
            self.assertEqual((resp["id"], resp["error"]["code"]),
                             (None, vt.PARSE_ERROR), bad)
        conn.send_raw(hello_line(2))
        self.assertEqual(conn.read_json()["id"], 2)

    def test_deep_nesting_refused(self):
        conn = self.connect()
        conn.send_raw(b"[" * 100000 + b"]" * 100000 + b"\n")
        resp = conn.read_json()
        self.assertIn(resp["error"]["code"],
                      (vt.PARSE_ERROR, vt.INVALID_REQUEST))
        conn.send_raw(hello_line(3))
        self.assertEqual(conn.read_json()["id"], 3)

    def test_partial_line_then_close_is_not_a_request(self):
        agent = self.connect(agent_id="a")
        raw = vt.Conn(self.daemon.sock)
        params = {"coordinate": vt.coord(9, 2, 2), "content": "half",
                  "agent_id": "a"}
        line = json.dumps({"jsonrpc": "2.0", "id": 1,
                           "method": "decision.store", "params": params})
        raw.send_raw(line.encode())  # no LF
        raw.sock.shutdown(socket.SHUT_WR)
        self.assertTrue(raw.at_eof(5.0), "a response to a partial line")
        raw.close()
        self.assertIsNone(agent.get(9, 2, 2))

    def test_half_close_answers_everything_then_eof(self):
        conn = self.connect()
        conn.send_raw(b"".join(hello_line(i) for i in range(1, 6)))
        conn.sock.shutdown(socket.SHUT_WR)
        for i in range(1, 6):
            self.assertEqual(conn.read_json()["id"], i)
        self.assertTrue(conn.at_eof(5.0))


# --------------------------------------------------------------------------
# Limits


class FastPath(vt.VmemTestCase):
    """Single-coordinate reads take a fast path (protocol/fastreq.c); the
    same request inside a batch of one takes the full one. Their answers
    must be the same bytes."""

    LINES = [
        '{{"jsonrpc":"2.0","id":{id},"method":"decision.get",'
        '"params":{{"coordinate":{{"x":{x},"y":{y},"z":{z}}}}}}}',
        ' {{ "params" : {{"coordinate": {{"z":{z}, "y":{y}, "x":{x}}}}},'
        ' "method":"decision.exists", "id": {id},"jsonrpc":"2.0"}} ',
    ]

    def test_fast_and_full_answers_are_the_same_bytes(self):
        conn = self.connect(agent_id="fast")
        conn.store(3, 2, 1, "a decision \u00e9\n with \"quotes\"")
        conn.store(1000, 5, 4, "the last coordinate")
        ids = ["0", "-0", "7", "-42", "999999999999999999"]
        coords = [(3, 2, 1), (1000, 5, 4), (1, 1, 1), (0, 1, 1), (3, 6, 1),
                  (1001, 1, 1), (-1, 1, 1)]
        checked = 0
        for template in self.LINES:
            for rid in ids:
                for (x, y, z) in coords:
                    text = template.format(id=rid, x=x, y=y, z=z).encode()
                    conn.send_raw(text + b"\n")
                    fast = conn.read_line()
                    conn.send_raw(b"[" + text + b"]\n")
                    full = conn.read_line()
                    self.assertTrue(full.startswith(b"[") and
                                    full.endswith(b"]"), full)
                    self.assertEqual(fast, full[1:-1], text)
                    checked += 1
        self.assertEqual(checked, 70)

    def test_fast_reads_count_in_stats(self):
        conn = self.connect()
        for _ in range(5):
            conn.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"decision.get",'
                          b'"params":{"coordinate":{"x":1,"y":1,"z":1}}}\n')
            self.assertIsNone(conn.read_json()["result"])
        stats = conn.call("server.stats")
        self.assertEqual(stats["methods"]["decision.get"]["count"], 5)


class Limits(vt.VmemTestCase):
    daemon_args = ("--max-line", "4096", "--max-batch", "5",
                   "--max-connections", "4")

    def assertInvalidRequestNullId(self, resp):
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)

    def test_hello_reports_limits(self):
        limits = self.connect().call("server.hello")["limits"]
        self.assertEqual(limits, {"max_line": 4096, "max_batch": 5,
                                  "max_connections": 4, "max_x": 1000,
                                  "content_max": vt.CONTENT_MAX})

    def test_line_over_max_line_error_then_eof(self):
        conn = self.connect()
        conn.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"server.hello",'
                      b'"params":{"client":"' + b"a" * 5000 + b'"}}\n')
        self.assertInvalidRequestNullId(conn.read_json())
        self.assertTrue(conn.at_eof(5.0))
        self.connect().call("server.hello")  # the daemon still serves

    def test_refused_client_that_never_closes_does_not_hold_a_stop(self):
        conn = self.connect()
        conn.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"server.hello",'
                      b'"params":{"client":"' + b"a" * 5000 + b'"}}\n')
        self.assertInvalidRequestNullId(conn.read_json())
        # The client keeps its end open; the daemon stops promptly anyway.
        started = time.monotonic()
        self.daemon.stop()
        self.assertLess(time.monotonic() - started, 5.0)
        self.assertNotIn("did not drain", self.daemon.stderr())

    def test_endless_line_without_newline_closed(self):
        conn = self.connect()
        try:
            conn.send_raw(b"a" * 20000)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we were still sending: fine
        self.assertInvalidRequestNullId(conn.read_json())
        self.assertTrue(conn.at_eof(5.0))

    def test_line_at_max_line_accepted(self):
        conn = self.connect()
        head = b'{"jsonrpc":"2.0","id":1,"method":"server.hello",' \
               b'"params":{"client":"'
        tail = b'"}}'
        pad = 4096 - len(head) - len(tail)
        conn.send_raw(head + b"c" * pad + tail + b"\n")
        self.assertEqual(conn.read_json()["result"]["server"], "vmemd")

    def test_batch_over_max_batch(self):
        conn = self.connect()
        conn.send_line(json.dumps([dict(HELLO, id=i) for i in range(6)]))
        self.assertInvalidRequestNullId(conn.read_json())
        conn.send_line(json.dumps([dict(HELLO, id=i) for i in range(5)]))
        self.assertEqual([r["id"] for r in conn.read_json()], list(range(5)))

    def test_fifth_connection_unavailable(self):
        conns = [self.served_connection() for _ in range(4)]
        extra = vt.Conn(self.daemon.sock)
        self.addCleanup(extra.close)
        resp = extra.read_json()
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.E_UNAVAILABLE[0])
        self.assertEqual(resp["error"]["data"]["type"], vt.E_UNAVAILABLE[1])
        self.assertTrue(extra.at_eof(5.0))
        for c in conns:
            c.call("server.hello")
        conns[0].close()
        again = vt.wait_until(lambda: self._serves_new_connection(), 3.0)
        self.assertTrue(again, "a slot did not free up after a close")

    def test_refused_client_can_still_send_then_read_the_error(self):
        # Closing with the client's request unread could reset the
        # connection before it reads why: the daemon must linger.
        # A client typically connects, then sends its hello a moment
        # later, after the daemon has already answered the refusal.
        conns = [self.served_connection() for _ in range(4)]
        for _ in range(5):
            extra = vt.Conn(self.daemon.sock)
            time.sleep(0.1)
            extra.send_raw((json.dumps(HELLO) + "\n").encode() * 50)
            resp = extra.read_json()
            self.assertEqual(resp["error"]["data"]["type"],
                             vt.E_UNAVAILABLE[1])
            self.assertTrue(extra.at_eof(5.0))
            extra.close()
        for c in conns:
            c.call("server.hello")

    def _serves_new_connection(self):
        c = vt.Conn(self.daemon.sock)
        try:
            c.request("server.hello")
            return "result" in c.read_json()
        except (EOFError, OSError):
            return False
        finally:
            c.close()


class LineDeadline(vt.VmemTestCase):
    """A line once begun must end within --line-deadline-ms (slowloris)."""
    daemon_args = ("--line-deadline-ms", "600")

    def test_unfinished_line_closed_with_an_error(self):
        conn = self.connect()
        started = time.monotonic()
        conn.send_raw(b'{"jsonrpc":"2.0","id":1,"method":')
        resp = conn.read_json(timeout=5)
        waited = time.monotonic() - started
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)
        self.assertIsNone(resp["id"])
        self.assertIn("not completed within 600 ms", resp["error"]["message"])
        self.assertGreaterEqual(waited, 0.55)
        self.assertTrue(conn.at_eof(timeout=vt.scaled(3)))
        self.assertIn("unfinished", self.daemon.stderr())

    def test_slow_but_timely_line_answered(self):
        conn = self.connect()
        line = hello_line(3)
        for i in range(0, len(line), len(line) // 4 + 1):
            conn.send_raw(line[i:i + len(line) // 4 + 1])
            time.sleep(0.1)
        self.assertEqual(conn.read_json()["id"], 3)

    def test_idle_connection_without_a_partial_line_stays(self):
        conn = self.connect()
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")
        time.sleep(1.5)
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")


class ConcurrentConnections(vt.VmemTestCase):
    def test_many_clients_at_once(self):
        errors = []

        def client(n):
            try:
                c = self.daemon.connect(agent_id="c%d" % n)
                for i in range(20):
                    c.store(n + 1, 1 + i % 5, 4, "n%d i%d" % (n, i),
                            overwrite=True)
                c.close()
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(n,))
                   for n in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(vt.scaled(60))
        self.assertEqual(errors, [])
        health = self.connect().call("server.health")
        self.assertEqual(health["decisions"], 100)


if __name__ == "__main__":
    vt.main()

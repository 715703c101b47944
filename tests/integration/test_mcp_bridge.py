#!/usr/bin/env python3
"""`vmem mcp`, the stdio bridge, against a real daemon: what goes in on
stdin reaches the daemon unchanged and its answers come back on stdout,
and nothing else does; --agent / $VMEM_AGENT_ID name the writer; stdin
EOF ends it with status 0 once every answer is out; a line over max_line
is answered under its own id and the session goes on; the daemon going
away (stopped, killed mid-request) costs the requests in flight an
"outcome unknown" answer, and the session goes on with a daemon reached
again and the session's state replayed; with the short environment an
MCP host gives, the daemon a shell started is found and vmemd is found
next to vmem; partial and large lines, a client that does not read, and a
client that goes away are handled."""

import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time

import vmemtest as vt

MCP_VERSION = "2025-11-25"
INSTALLED_VMEMD = "/usr/local/bin/vmemd"
HOST_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


def bridge_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMEM_")}
    env.update({"VMEMD": vt.VMEMD}, **extra)
    return env


def rpc(rid, method, params=None):
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def line(obj):
    return (json.dumps(obj) + "\n").encode()


def initialize(rid=1, name="bridge-tester"):
    return rpc(rid, "initialize", {
        "protocolVersion": MCP_VERSION, "capabilities": {},
        "clientInfo": {"name": name, "version": "1.0"}})


def tool_call(rid, name, **arguments):
    return rpc(rid, "tools/call", {"name": name, "arguments": arguments})


class Bridge:
    """One `vmem mcp` process with pipes on its stdin, stdout, stderr."""

    def __init__(self, case, *args, sock=None, env=None):
        argv = [vt.VMEM, "--socket", sock or case.daemon.sock,
                "--repo", case.repo.root] + list(args) + ["mcp"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     env=env or bridge_env())
        self.buf = bytearray()
        case.addCleanup(self.reap)

    def reap(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def write(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj):
        self.write(line(obj))

    def _fill(self, deadline):
        """Read what stdout has; False at EOF. TimeoutError at deadline."""
        fd = self.proc.stdout.fileno()
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError("no output from vmem mcp in time")
        chunk = os.read(fd, 1 << 20)
        self.buf += chunk
        return bool(chunk)

    def read_line(self, timeout=vt.DEFAULT_TIMEOUT):
        """The next stdout line (bytes, no LF), None at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                out = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                return out
            if not self._fill(deadline):
                if self.buf:
                    raise AssertionError("stdout ends in a partial line: %r"
                                         % bytes(self.buf[:200]))
                return None

    def read_json(self, timeout=vt.DEFAULT_TIMEOUT):
        out = self.read_line(timeout)
        if out is None:
            raise EOFError("vmem mcp closed stdout; stderr: %s"
                           % self.stderr_now())
        return json.loads(out)

    def silent_for(self, seconds=0.3):
        try:
            return self._fill(time.monotonic() + seconds) and False
        except TimeoutError:
            return True

    def stderr_now(self):
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read().decode(errors="replace")

    def finish(self, timeout=vt.DEFAULT_TIMEOUT):
        """Close stdin; (status, the remaining stdout lines, stderr)."""
        self.proc.stdin.close()
        lines = []
        while True:
            out = self.read_line(timeout)
            if out is None:
                break
            lines.append(out)
        return self.wait(timeout), lines, self.proc.stderr.read().decode()

    def wait(self, timeout=vt.DEFAULT_TIMEOUT):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("vmem mcp still running after %.0f s"
                                 % timeout)


class BridgeCase(vt.VmemTestCase):
    def bridge(self, *args, **kw):
        return Bridge(self, *args, **kw)

    def assertClean(self, stderr):
        found = vt.SANITIZER_RE.search(stderr)
        self.assertIsNone(found, stderr)

    @staticmethod
    def _write_quietly(b, data):
        """Write to stdin of a bridge that may be exiting."""
        try:
            b.write(data)
        except (BrokenPipeError, ValueError, OSError):
            pass

    def assertAnswers(self, lines, ids):
        """lines are exactly the answers to ids, in order."""
        msgs = [json.loads(x) for x in lines]
        self.assertEqual([m.get("id") for m in msgs], ids, msgs)
        for m in msgs:
            self.assertEqual(m.get("jsonrpc"), "2.0", m)
        return msgs


class Relay(BridgeCase):
    def test_mcp_session(self):
        b = self.bridge()
        b.send(initialize(1))
        init = b.read_json()
        self.assertEqual(init["id"], 1)
        self.assertEqual(init["result"]["protocolVersion"], MCP_VERSION)
        b.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        b.send(rpc(2, "tools/list"))
        tools = b.read_json()
        self.assertEqual(tools["id"], 2)
        names = [t["name"] for t in tools["result"]["tools"]]
        self.assertIn("store_decision", names)
        self.assertIn("get_decision", names)
        b.send(tool_call("s", "store_decision", x=5, y=2, z=1,
                         content="Use PostgreSQL", agent_id="agent-a"))
        # Answers come as requests finish: wait for the write.
        stored = b.read_json()
        self.assertEqual(stored["id"], "s")
        b.send(tool_call(None, "get_decision", x=5, y=2, z=1))
        got = b.read_json()
        b.send(tool_call(4, "get_decision", x=0, y=2, z=1))
        status, lines, err = b.finish()
        self.assertEqual(status, 0, err)
        self.assertClean(err)
        self.assertEqual(got["id"], None)
        bad, = self.assertAnswers(lines, [4])
        self.assertFalse(stored["result"]["isError"], stored)
        rec = stored["result"]["structuredContent"]
        self.assertDecision(rec, 5, 2, 1, "Use PostgreSQL", "agent-a")
        self.assertEqual(got["result"]["structuredContent"]["decision"],
                         rec)
        self.assertTrue(bad["result"]["isError"], bad)
        self.assertIn("CoordinateValidationError",
                      bad["result"]["content"][0]["text"])
        self.assertEqual(self.connect().get(5, 2, 1), rec)

    def test_bytes_pass_unchanged(self):
        # Native methods too, errors included, byte for byte; notifications
        # get no answer, and nothing else appears on stdout.
        conn = self.connect(agent_id="writer")
        conn.store(3, 1, 2, "caf\u00e9 \u2603 \"quoted\"\ttab")
        expected = []
        for rid, method in ((1, "decision.get"), (2, "decision.get")):
            conn.request(method, {"coordinate": vt.coord(3, 1, 2)}, rid=rid)
            expected.append(conn.read_line())
        b = self.bridge()
        req = (b'{"jsonrpc":"2.0","id":1,"method":"decision.get",'
               b'"params":{"coordinate":{"x":3,"y":1,"z":2}}}\n'
               b'{"jsonrpc":"2.0","method":"ping"}\n'
               b'\n'
               b'{"jsonrpc":"2.0","id":2,"method":"decision.get",'
               b'"params":{"coordinate":{"x":3,"y":1,"z":2}}}\r\n'
               b'{"jsonrpc":"2.0","id":3,"method":"no.such"}\n'
               b'{bad json\n')
        b.write(req)
        status, lines, err = b.finish()
        self.assertEqual(status, 0, err)
        self.assertEqual(lines[:2], expected)
        self.assertEqual(len(lines), 4, lines)
        self.assertEqual(json.loads(lines[2])["error"]["code"], -32601)
        self.assertEqual(json.loads(lines[3])["error"]["code"],
                         vt.PARSE_ERROR)
        self.assertEqual(err, "")

    def test_answers_with_a_null_id_are_waited_for(self):
        # Lines the daemon answers with a null id (not JSON, not a
        # request, an empty batch, a request whose id is null or of a
        # type no id may have) are owed an answer as much as any other:
        # end of input does not end the bridge before they come.
        b = self.bridge()
        b.write(b'{bad json\n'
                b'42\n'
                b'[]\n'
                b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n'
                b'{"jsonrpc":"2.0","id":true,"method":"ping"}\n')
        status, lines, err = b.finish()
        self.assertEqual(status, 0, err)
        answers = [json.loads(ln) for ln in lines]
        self.assertEqual([a["id"] for a in answers], [None] * 5, lines)
        self.assertEqual(sorted(a["error"]["code"] for a in answers
                                if "error" in a),
                         [vt.PARSE_ERROR] + [-32600] * 3, lines)
        self.assertEqual(err, "")

    def test_partial_lines(self):
        b = self.bridge()
        data = line(rpc(7, "decision.exists",
                        {"coordinate": vt.coord(1, 1, 1)}))
        for i in range(0, len(data), 5):
            b.write(data[i:i + 5])
            time.sleep(0.005)
        self.assertEqual(b.read_json(), {"jsonrpc": "2.0", "id": 7,
                                         "result": False})
        # A last line without its LF is still a request.
        b.write(json.dumps(rpc(8, "ping")).encode())
        status, lines, err = b.finish()
        self.assertEqual(status, 0, err)
        self.assertAnswers(lines, [8])

    def test_large_lines(self):
        big = "w" * (vt.CONTENT_MAX - 2)
        b = self.bridge("--agent", "big-writer")
        for x in range(1, 11):
            b.send(rpc(x, "decision.store", {
                "coordinate": vt.coord(x, 1, 3), "content": big + str(x)}))
        b.send(rpc(11, "decision.query_range", {"z_range": [3, 3]}))
        status, lines, err = b.finish(timeout=vt.scaled(30))
        self.assertEqual(status, 0, err)
        msgs = self.assertAnswers(lines, list(range(1, 12)))
        self.assertTrue(all("result" in m for m in msgs),
                        [m.get("error") for m in msgs])
        decisions = msgs[-1]["result"]
        self.assertGreater(len(lines[-1]), 10 * vt.CONTENT_MAX)
        self.assertEqual([d["content"] for d in decisions],
                         [big + str(x) for x in range(1, 11)])

    def test_over_long_lines_are_answered_and_the_session_goes_on(self):
        # The daemon would refuse a line over max_line and hang up: the
        # bridge refuses it itself, under the request's own id, wherever
        # the id stands (the TypeScript SDK writes it last).
        b = self.bridge("--agent", "big")
        b.send(initialize(1))
        self.assertEqual(b.read_json()["id"], 1)
        arg = "x" * (2 << 20)  # a 2 MiB argument
        tool_last = (b'{"method":"tools/call","params":{"name":'
                     b'"store_decision","arguments":{"x":1,"y":1,"z":2,'
                     b'"content":"' + arg.encode() + b'"}},'
                     b'"jsonrpc":"2.0","id":"big-1"}\n')
        ping_first = (b'{"jsonrpc":"2.0","id":7,"method":"ping","params":'
                      b'{"p":"' + arg.encode() + b'"}}\n')
        note = (b'{"jsonrpc":"2.0","method":"notifications/x","params":'
                b'{"p":"' + arg.encode() + b'"}}\n')
        writer = threading.Thread(target=self._write_quietly, args=(
            b, tool_last + note + ping_first + line(rpc(8, "ping"))))
        writer.start()
        tool = b.read_json()
        self.assertEqual(tool["id"], "big-1", tool)
        self.assertTrue(tool["result"]["isError"])
        text = tool["result"]["content"][0]["text"]
        self.assertTrue(text.startswith("ValueError: "), text)
        self.assertIn("nothing was done", text)
        refused = b.read_json()
        self.assertEqual(refused["id"], 7)
        self.assertEqual(refused["error"]["code"], vt.INVALID_REQUEST)
        self.assertEqual(b.read_json(), {"jsonrpc": "2.0", "id": 8,
                                         "result": {}})
        writer.join(vt.scaled(10))
        b.send(tool_call(9, "get_decision", x=1, y=1, z=2))
        self.assertFalse(b.read_json()["result"]["structuredContent"]
                         ["found"])
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)
        self.assertIn("over max_line", err)
        self.assertIn("without an id", err)

    def test_watch_notifications_pass(self):
        b = self.bridge()
        b.send(rpc(1, "watch.subscribe", {"x_range": [1, 9]}))
        self.assertIn("subscription", b.read_json()["result"])
        self.connect(agent_id="other").store(2, 2, 2, "seen by the watcher")
        note = b.read_json()
        self.assertEqual(note["method"], "watch.changed", note)
        self.assertEqual(note["params"]["decision"]["content"],
                         "seen by the watcher")
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)


class LineLimit(BridgeCase):
    daemon_args = ("--max-line", "65536")

    def padded(self, rid, size):
        """A ping request line of exactly size bytes (LF excluded)."""
        head = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"p":"' % rid
        tail = b'"}}'
        return head + b"x" * (size - len(head) - len(tail)) + tail

    def test_the_daemons_limit_to_the_byte(self):
        # The limit is the daemon's (learned from server.hello): a line of
        # max_line bytes reaches it, one byte more is refused by the
        # bridge, and the connection to the daemon is never lost.
        b = self.bridge()
        b.write(self.padded(1, 65536) + b"\n")
        self.assertEqual(b.read_json(), {"jsonrpc": "2.0", "id": 1,
                                         "result": {}})
        b.write(self.padded(2, 65536) + b"\r\n")
        self.assertEqual(b.read_json()["id"], 2)
        b.write(self.padded(3, 65537) + b"\n")
        refused = b.read_json()
        self.assertEqual(refused["id"], 3)
        self.assertEqual(refused["error"]["code"], vt.INVALID_REQUEST)
        self.assertIn("65536", refused["error"]["message"])
        b.send(rpc(4, "ping"))
        self.assertEqual(b.read_json()["id"], 4)
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)
        self.assertNotIn("lost the connection", err)


class Agent(BridgeCase):
    def stored_agent(self, b, x):
        b.send(initialize(1, name="client-name"))
        b.send(tool_call(2, "store_decision", x=x, y=1, z=2, content="c"))
        status, lines, err = b.finish()
        self.assertEqual(status, 0, err)
        # The hello's answer is not relayed: only ours come out.
        msgs = self.assertAnswers(lines, [1, 2])
        self.assertFalse(msgs[1]["result"]["isError"], msgs[1])
        return json.loads(msgs[1]["result"]["content"][0]["text"])[
            "agent_id"]

    def test_agent_option(self):
        self.assertEqual(self.stored_agent(self.bridge("--agent", "opt-id"),
                                           1), "opt-id")

    def test_agent_from_environment(self):
        env = bridge_env(VMEM_AGENT_ID="env-id")
        self.assertEqual(self.stored_agent(self.bridge(env=env), 2),
                         "env-id")
        env = bridge_env(VMEM_AGENT_ID="env-id")
        self.assertEqual(
            self.stored_agent(self.bridge("--agent", "opt-id", env=env), 3),
            "opt-id")

    def test_no_agent_leaves_it_to_the_client(self):
        # Without one, the connection has none of ours (so the MCP
        # client's own name applies), and native writes need agent_id.
        self.assertEqual(self.stored_agent(self.bridge(), 4), "client-name")
        b = self.bridge()
        b.send(rpc(1, "decision.store", {"coordinate": vt.coord(5, 1, 2),
                                         "content": "c"}))
        self.assertEqual(b.read_json()["error"]["data"]["type"],
                         "ValueError")

    def test_bad_agent_is_refused_before_relaying(self):
        b = self.bridge("--agent", "bad\x01id")
        status, lines, err = b.finish()
        self.assertEqual(status, 1, err)
        self.assertEqual(lines, [])
        self.assertIn("ValueError", err)


class Lifecycle(BridgeCase):
    def test_eof_waits_for_every_answer(self):
        b = self.bridge("--agent", "burst")
        burst = b"".join(
            line(rpc(i, "decision.store", {
                "coordinate": vt.coord(1 + i, 1 + i % 5, 2 + i % 3),
                "content": "burst %d" % i}))
            for i in range(300))
        b.write(burst)
        status, lines, err = b.finish(timeout=vt.scaled(30))
        self.assertEqual(status, 0, err)
        msgs = self.assertAnswers(lines, list(range(300)))
        self.assertTrue(all("result" in m for m in msgs), msgs[:3])

    def test_backpressure_client_not_reading(self):
        # Far more answer bytes than the pipes and buffers hold, while the
        # client does not read: nothing is lost or reordered.
        conn = self.connect(agent_id="w")
        conn.store(9, 9 % 5 + 1, 4, "p" * 60000)
        b = self.bridge()
        n = 400
        req = b"".join(line(rpc(i, "decision.get",
                                {"coordinate": vt.coord(9, 5, 4)}))
                       for i in range(n))
        writer = threading.Thread(target=b.write, args=(req,))
        writer.start()
        time.sleep(1.0)
        got = [b.read_json(timeout=30) for _ in range(n)]
        writer.join(vt.scaled(10))
        self.assertEqual([m["id"] for m in got], list(range(n)))
        self.assertTrue(all(len(m["result"]["content"]) == 60000
                            for m in got))
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)

    def test_daemon_stopped_the_session_goes_on(self):
        # `vmem daemon stop` (or an upgrade): the next request reaches a
        # daemon started again, and the session is the same one: the
        # client's name is still the agent id (initialize replayed).
        b = self.bridge()
        b.send(initialize(1, name="survivor"))
        self.assertEqual(b.read_json()["id"], 1)
        b.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.daemon.stop()
        b.send(tool_call(2, "store_decision", x=3, y=1, z=2,
                         content="after the restart"))
        res = b.read_json(timeout=vt.START_TIMEOUT * 2)
        self.assertEqual(res["id"], 2, res)
        self.assertFalse(res["result"]["isError"], res)
        self.assertEqual(res["result"]["structuredContent"]["agent_id"],
                         "survivor")
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)
        self.assertIn("lost the connection", err)
        self.assertIn("reconnected", err)
        self.assertTrue(vt.shutdown_any(self.daemon.sock))

    def test_daemon_killed_mid_request(self):
        # A write waits for another client's lease when the daemon dies:
        # its outcome is unknown and it is never sent again; the session
        # goes on, its resource subscription with it.
        holder = self.connect(agent_id="holder")
        holder.call("lock.acquire", {"coordinates": [vt.coord(4, 4, 4)],
                                     "ttl_ms": 600000})
        b = self.bridge("--agent", "writer")
        b.send(initialize(1))
        self.assertEqual(b.read_json()["id"], 1)
        b.send(rpc(2, "resources/subscribe",
                   {"uri": "vmem://decision/6/1/2"}))
        self.assertEqual(b.read_json()["id"], 2)
        b.send(tool_call(3, "store_decision", x=4, y=4, z=4, content="lost",
                         timeout_ms=600000))
        # A second one, cancelled by the client: no answer is owed.
        b.send(tool_call(6, "store_decision", x=4, y=4, z=4,
                         content="cancelled", timeout_ms=600000))
        b.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 6}})
        b.send(rpc(4, "ping"))
        self.assertEqual(b.read_json()["id"], 4)
        self.daemon.kill()
        res = b.read_json()
        self.assertEqual(res["id"], 3)
        self.assertTrue(res["result"]["isError"])
        self.assertIn("outcome is unknown", res["result"]["content"][0]
                      ["text"])
        b.send(rpc(5, "ping"))
        self.assertEqual(b.read_json(timeout=vt.START_TIMEOUT * 2),
                         {"jsonrpc": "2.0", "id": 5, "result": {}})
        other = vt.Conn(self.daemon.sock, agent_id="other")
        self.assertIsNone(other.get(4, 4, 4))  # never sent again
        other.store(6, 1, 2, "watched again")
        note = b.read_json()
        self.assertEqual(note, {"jsonrpc": "2.0",
                                "method": "notifications/resources/updated",
                                "params": {"uri": "vmem://decision/6/1/2"}})
        other.close()
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)
        self.assertIn("replayed", err)
        self.assertTrue(vt.shutdown_any(self.daemon.sock))

    def test_no_daemon_to_come_back(self):
        # Without auto-start, requests fail while the daemon stays away,
        # and succeed once one is there again.
        b = self.bridge("--no-autostart")
        b.send(rpc(1, "ping"))
        self.assertEqual(b.read_json()["id"], 1)
        self.daemon.stop()
        b.send(tool_call(2, "get_decision", x=1, y=1, z=1))
        res = b.read_json()
        self.assertEqual(res["id"], 2)
        self.assertTrue(res["result"]["isError"])
        self.assertIn("UnavailableError", res["result"]["content"][0]["text"])
        b.send(rpc(3, "ping"))
        self.assertEqual(b.read_json()["error"]["data"]["type"],
                         "UnavailableError")
        self.daemon.start()
        deadline = time.monotonic() + vt.DEFAULT_TIMEOUT
        while True:
            b.send(rpc(4, "ping"))
            msg = b.read_json()
            if "result" in msg or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(msg.get("result"), {}, msg)
        status, lines, err = b.finish()
        self.assertEqual((status, lines), (0, []), err)

    def test_client_stops_reading_stdout(self):
        b = self.bridge()
        b.proc.stdout.close()
        b.send(rpc(1, "ping"))
        status = b.wait()
        self.assertEqual(status, 1)  # never killed by SIGPIPE
        self.assertNotEqual(status, -signal.SIGPIPE)
        self.assertIn("stdout", b.proc.stderr.read().decode())

    def test_usage(self):
        for extra in (["mcp", "extra"], ["--json", "mcp"],
                      ["--limit", "3", "mcp"]):
            with self.subTest(args=extra):
                p = subprocess.run([vt.VMEM, "--socket", self.daemon.sock]
                                   + extra, capture_output=True,
                                   env=bridge_env(), timeout=vt.scaled(10))
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stdout, b"")


class NoDaemon(BridgeCase):
    start_daemon = False

    def host_env(self, **extra):
        """The environment an MCP host starts servers with."""
        env = {k: os.environ[k] for k in HOST_ENV if k in os.environ}
        env.update(extra)
        return env

    def test_host_environment_finds_the_shells_daemon(self):
        # A daemon started from a shell with XDG_RUNTIME_DIR listens
        # there; a host's vmem mcp has no XDG_RUNTIME_DIR, no VMEM_*, no
        # VMEMD, and still talks to that daemon (its recorded socket).
        xdg = self.repo.path("xdg")
        os.mkdir(xdg, 0o700)
        shell = dict(bridge_env(), XDG_RUNTIME_DIR=xdg)
        p = subprocess.run([vt.VMEM, "--repo", self.repo.root, "daemon",
                            "start"], env=shell, capture_output=True,
                           timeout=vt.START_TIMEOUT * 2)
        self.assertEqual(p.returncode, 0, p.stderr)
        sock = p.stdout.decode().strip().splitlines()[-1]
        self.assertTrue(sock.startswith(xdg), sock)
        self.addCleanup(vt.shutdown_any, sock)
        with open(os.path.join(self.repo.gitdir, "vmem", "socket")) as f:
            self.assertEqual(f.read(), sock + "\n")
        argv = ["env", "-i"] + ["%s=%s" % kv for kv in
                                self.host_env().items()] + [
            vt.VMEM, "mcp", "--repo", self.repo.root]
        proc = subprocess.run(argv, input=line(rpc(1, "server.health")),
                              capture_output=True,
                              timeout=vt.START_TIMEOUT * 2)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["result"]["repo"],
                         self.repo.root)
        # The one daemon of the tree: no second one was started.
        self.assertTrue(vt.shutdown_any(sock))
        self.assertTrue(vt.wait_until(lambda: not self.repo.lock_held(),
                                      vt.DEFAULT_TIMEOUT))
        self.assertFalse(os.path.exists(
            os.path.join(self.repo.gitdir, "vmem", "socket")))

    def test_host_environment_starts_vmemd_beside_vmem(self):
        # No daemon, no VMEMD, a PATH without vmemd: the vmemd built
        # beside this vmem is started.
        env = self.host_env(PATH="/usr/bin:/bin")
        argv = ["env", "-i"] + ["%s=%s" % kv for kv in env.items()] + [
            vt.VMEM, "mcp", "--repo", self.repo.root]
        proc = subprocess.run(argv, input=line(rpc(1, "server.health")),
                              capture_output=True,
                              timeout=vt.START_TIMEOUT * 2)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["result"]["repo"],
                         self.repo.root)
        with open(os.path.join(self.repo.gitdir, "vmem", "socket")) as f:
            sock = f.read().strip()
        self.assertTrue(vt.shutdown_any(sock))
        self.assertTrue(vt.wait_until(lambda: not self.repo.lock_held(),
                                      vt.DEFAULT_TIMEOUT))

    def test_vmemd_not_found_says_what_to_do(self):
        # A vmem copied alone, with no vmemd anywhere it looks.
        alone = self.repo.path("bin")
        os.mkdir(alone)
        shutil.copy(vt.VMEM, os.path.join(alone, "vmem"))
        env = self.host_env(PATH="/usr/bin:/bin", LD_LIBRARY_PATH=(
            os.path.dirname(os.path.realpath(vt.VMEM))))
        argv = ["env", "-i"] + ["%s=%s" % kv for kv in env.items()] + [
            os.path.join(alone, "vmem"), "mcp", "--repo", self.repo.root]
        proc = subprocess.run(argv, input=b"", capture_output=True,
                              timeout=vt.START_TIMEOUT * 2)
        if os.path.exists(INSTALLED_VMEMD):
            self.skipTest("a vmemd is installed at " + INSTALLED_VMEMD)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        err = proc.stderr.decode()
        self.assertIn("vmemd is not next to this program", err)
        self.assertIn("VMEMD=", err)

    def test_no_daemon(self):
        sock = self.repo.path("nobody.sock")
        b = self.bridge("--no-autostart", sock=sock)
        status, lines, err = b.finish()
        self.assertEqual(status, 2)
        self.assertEqual(lines, [])
        self.assertIn("nobody.sock", err)

    def test_autostart(self):
        sock = self.repo.path("auto.sock")
        b = self.bridge(sock=sock)
        b.send(rpc(1, "server.health"))
        self.assertEqual(b.read_json()["result"]["repo"], self.repo.root)
        status, lines, err = b.finish()
        self.assertEqual(status, 0, err)
        self.assertTrue(vt.shutdown_any(sock))
        self.assertTrue(vt.wait_until(lambda: not self.repo.lock_held(),
                                      vt.DEFAULT_TIMEOUT))


if __name__ == "__main__":
    vt.main()

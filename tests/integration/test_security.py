#!/usr/bin/env python3
"""Security and limits of vmemd (issue 6): the socket directory and the
socket's mode, the peer uid check, connection, line, deadline, backlog and
nesting limits, symlinks under .vector-memory, a repository of another
owner, closed standard descriptors, and no network sockets; the state
directory <gitdir>/vmem attacked by a second user of a group-shared
repository, and the modes of the files in .vector-memory (issue 12).

Several cases act as another user: they need root (as in CI) and use
setpriv(1) to drop to uid 65534 (nobody), keeping CAP_DAC_OVERRIDE where a
client must traverse a 0700 directory. strace(1) traces system calls where
a case needs to see them. Cases whose tools are missing are skipped.
"""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time

import vmemtest as vt

NOBODY = 65534
OTHER = 65533  # a third uid, neither the daemon's nor the client's
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "server.hello"}
RSS_GROWTH_MAX_KIB = 20 * 1024
SETPRIV = shutil.which("setpriv")
STRACE = shutil.which("strace")
PYTHON = shutil.which("python3", path="/usr/bin:/bin")


def hello_line(rid=1):
    return json.dumps(dict(HELLO, id=rid)).encode() + b"\n"


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def hwm_kib(pid):
    """VmHWM (peak resident set) of a process in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for pid %d" % pid)


def fd_links(pid):
    """{fd: link target} of a process."""
    links = {}
    base = "/proc/%d/fd" % pid
    for name in os.listdir(base):
        try:
            links[int(name)] = os.readlink(os.path.join(base, name))
        except OSError:
            pass
    return links


def setpriv_argv(uid, dac_override=False):
    argv = [SETPRIV, "--reuid=%d" % uid, "--regid=%d" % uid,
            "--clear-groups"]
    if dac_override:
        argv += ["--inh-caps=+dac_override", "--ambient-caps=+dac_override"]
    return argv


# A client run as another user: connects, sends a hello, reports what it
# saw as one JSON line on stdout.
PROBE = r"""
import json, socket, sys
out = {"connected": False, "lines": [], "eof": False, "error": None}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
    out["connected"] = True
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"server.hello"}\n')
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            out["eof"] = True
            break
        buf += chunk
        if b"\n" in buf:
            break
    out["lines"] = [ln.decode(errors="replace")
                    for ln in buf.split(b"\n") if ln]
except OSError as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"""


class NeedsRoot:
    def need_root(self, *tools):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        for name, path in (("setpriv", SETPRIV), ("strace", STRACE),
                           ("python3", PYTHON)):
            if name in tools and not path:
                self.skipTest("needs %s" % name)

    def probe_as(self, uid, sock, dac_override=True):
        """Run PROBE as uid; its report (a dict)."""
        p = subprocess.run(setpriv_argv(uid, dac_override) +
                           [PYTHON, "-c", PROBE, sock],
                           capture_output=True, text=True, timeout=vt.scaled(30))
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)


# --------------------------------------------------------------------------
# 1. The socket directory


class SocketDirectory(NeedsRoot, vt.VmemTestCase):
    start_daemon = False

    def refused(self, sock, words):
        """vmemd on sock exits non-zero with a message naming one of
        words, and leaves no socket there."""
        d = self.new_daemon(sock=sock).spawn()
        rc = d.wait()
        err = d.stderr()
        self.assertNotEqual(rc, 0, "vmemd accepted %s:\n%s"
                            % (os.path.dirname(sock), err))
        self.assertTrue(any(w in err for w in words),
                        "no message naming %r:\n%s" % (words, err))
        self.assertFalse(os.path.lexists(sock), "a socket was created")
        vt.diag("refused: %s" % err.strip().splitlines()[-1])
        return err

    def test_missing_directory_created_0700(self):
        sock = self.repo.path("newdir", "d.sock")
        old = os.umask(0)  # the daemon must not rely on ours
        try:
            self.start_vmemd(sock=sock)
        finally:
            os.umask(old)
        st = os.lstat(os.path.dirname(sock))
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        self.assertEqual(st.st_uid, os.geteuid())

    def test_directory_of_another_owner_refused(self):
        self.need_root()
        sub = self.repo.path("theirs")
        os.mkdir(sub, 0o700)
        os.chown(sub, NOBODY, NOBODY)
        self.refused(os.path.join(sub, "d.sock"), ["owned by", "owner"])

    def test_accessible_directory_refused(self):
        for mode in (0o777, 0o1777, 0o770, 0o750, 0o710, 0o707, 0o701):
            with self.subTest(mode=oct(mode)):
                sub = self.repo.path("open-%o" % mode)
                os.mkdir(sub)
                os.chmod(sub, mode)
                self.refused(os.path.join(sub, "d.sock"), ["mode"])

    def test_symlink_as_the_directory_refused(self):
        real = self.repo.path("real")
        os.mkdir(real, 0o700)
        link = self.repo.path("link")
        os.symlink(real, link)
        self.refused(os.path.join(link, "d.sock"), ["symlink", "symbolic"])
        self.assertEqual(os.listdir(real), [])

    def test_symlink_to_a_foreign_directory_refused(self):
        self.need_root()
        real = self.repo.path("foreign")
        os.mkdir(real, 0o700)
        os.chown(real, NOBODY, NOBODY)
        link = self.repo.path("mine")
        os.symlink(real, link)
        self.refused(os.path.join(link, "d.sock"),
                     ["symlink", "symbolic", "owned by"])

    def test_symlinked_parent_still_checks_the_directory(self):
        # check_socket_dir lstat()s the socket's own directory only (as
        # tmux does): a symlinked parent component is resolved by the
        # kernel, but the final directory must still be ours and 0700.
        parent = self.repo.path("parent")
        os.mkdir(parent, 0o700)
        plink = self.repo.path("plink")
        os.symlink(parent, plink)
        bad = os.path.join(parent, "bad")
        os.mkdir(bad)
        os.chmod(bad, 0o777)
        self.refused(os.path.join(plink, "bad", "d.sock"), ["mode"])
        good = os.path.join(parent, "good")
        os.mkdir(good, 0o700)
        d = self.start_vmemd(sock=os.path.join(plink, "good", "d.sock"))
        self.assertTrue(stat.S_ISSOCK(os.lstat(os.path.join(
            good, "d.sock")).st_mode))
        d.stop()

    def test_existing_safe_directory_accepted(self):
        sub = self.repo.path("safe")
        os.mkdir(sub, 0o700)
        d = self.start_vmemd(sock=os.path.join(sub, "d.sock"))
        self.assertEqual(d.connect().call("server.hello")["server"],
                         "vmemd")
        self.assertEqual(mode_of(sub), 0o700)


# --------------------------------------------------------------------------
# 2. The socket's mode


def parse_strace(path):
    """[(pid, syscall, args, result)] of an strace -f -o log (resumed
    calls joined to their start)."""
    calls = []
    pending = {}
    line_re = re.compile(r"^(\d+)\s+(.*)$")
    call_re = re.compile(r"^(\w+)\((.*)\)\s+=\s+(.*)$")
    with open(path, errors="replace") as f:
        for raw in f:
            m = line_re.match(raw.rstrip("\n"))
            if not m:
                continue
            pid, text = int(m.group(1)), m.group(2)
            if text.endswith("<unfinished ...>"):
                pending[pid] = text[:-len("<unfinished ...>")].rstrip()
                continue
            r = re.match(r"^<\.\.\. (\w+) resumed>(.*)$", text)
            if r:
                text = pending.pop(pid, r.group(1) + "(") + r.group(2)
            c = call_re.match(text)
            if c:
                calls.append((pid, c.group(1), c.group(2), c.group(3)))
    return calls


class StracedCase(NeedsRoot, vt.VmemTestCase):
    start_daemon = False

    def strace_daemon(self, trace, *args):
        """vmemd --foreground under strace -f; returns (proc, sock, log)."""
        self.need_root("strace")
        sock = self.repo.path("traced.sock")
        log = self.repo.path("strace.log")
        argv = [STRACE, "-f", "-qq", "-o", log, "-e", "trace=" + trace,
                vt.VMEMD, "--foreground", "--repo", self.repo.root,
                "--socket", sock] + list(args)
        err = open(self.repo.path("traced.stderr"), "wb")
        self.addCleanup(err.close)
        env = vt.clean_env(self.repo.tmp)
        # LeakSanitizer cannot run under ptrace; the rest of ASan can.
        env["ASAN_OPTIONS"] = ":".join(
            filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err,
                                stderr=err, env=env)
        self.addCleanup(self._kill_traced, proc)
        deadline = time.monotonic() + vt.scaled(30)
        while not vt.accepts(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.fail("traced vmemd not listening (rc %r):\n%s"
                          % (proc.poll(), self.traced_stderr()))
            time.sleep(0.02)
        return proc, sock, log

    def traced_stderr(self):
        with open(self.repo.path("traced.stderr"), "rb") as f:
            return f.read().decode(errors="replace")

    def _kill_traced(self, proc):
        if proc.poll() is None:
            for pid in self.repo.processes():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.kill()
        proc.wait()

    def session(self, sock):
        """Store, read, sync to git, then shut down through the socket."""
        conn = vt.Conn(sock, agent_id="traced")
        try:
            rec = conn.store(1, 2, 2, "traced decision")
            self.assertEqual(conn.get(1, 2, 2), rec)
            sync = conn.call("git.sync", {}, timeout=30)
            self.assertIsNotNone(sync["commit"])
            self.assertTrue(conn.call("server.shutdown"))
        finally:
            conn.close()

    def finish(self, proc):
        try:
            rc = proc.wait(vt.scaled(60))
        except subprocess.TimeoutExpired:
            self.fail("traced vmemd did not stop")
        self.assertEqual(rc, 0, self.traced_stderr())


class SocketMode(StracedCase):
    def test_socket_is_0600_right_after_start_whatever_the_umask(self):
        for umask in (0o000, 0o022):
            with self.subTest(umask=oct(umask)):
                sock = self.repo.path("m%o.sock" % umask)
                old = os.umask(umask)
                try:
                    d = self.new_daemon(sock=sock, name="m%o" % umask)
                    d.spawn()
                finally:
                    os.umask(old)
                seen = vt.wait_until(lambda: os.path.lexists(sock), 10, 0.0005)
                self.assertTrue(seen, d.stderr())
                first = mode_of(sock)
                d_ok = vt.wait_until(lambda: vt.accepts(sock), 10)
                self.assertTrue(d_ok, d.stderr())
                self.assertEqual(first, 0o600, "mode at first sight")
                self.assertEqual(mode_of(sock), 0o600)
                self.assertEqual(os.lstat(sock).st_uid, os.geteuid())
                d.stop()

    def test_umask_before_bind_and_no_chmod(self):
        proc, sock, log = self.strace_daemon(
            "umask,chmod,fchmod,fchmodat,socket,bind")
        self.session(sock)
        self.finish(proc)
        calls = parse_strace(log)
        binds = [i for i, c in enumerate(calls) if c[1] == "bind" and
                 ('"%s"' % sock) in c[2]]
        self.assertEqual(len(binds), 1, "binds of the socket: %r"
                         % [calls[i] for i in binds])
        at = binds[0]
        fd = calls[at][2].split(",", 1)[0].strip()
        umasks = [c for c in calls[:at] if c[1] == "umask"]
        self.assertTrue(umasks, "no umask before bind")
        self.assertEqual(int(umasks[-1][2], 8), 0o177,
                         "last umask before bind: %r" % (umasks[-1],))
        chmods = [c for c in calls if c[1] in ("chmod", "fchmodat",
                                                "fchmod")]
        if chmods:
            vt.diag("chmod-family calls seen: %r" % chmods[:10])
        on_sock = [c for c in chmods if sock in c[2] or
                   (c[1] == "fchmod" and c[2].split(",")[0].strip() == fd
                    and c[0] == calls[at][0])]
        self.assertEqual(on_sock, [], "chmod of the socket")
        after = [c for c in calls[at + 1:] if c[1] == "umask"]
        vt.diag("umask calls: %r" % ([c[2] + " = " + c[3] for c in
                                       umasks[-2:] + after[:2]],))


# --------------------------------------------------------------------------
# 3. Peer uid


class PeerUid(NeedsRoot, vt.VmemTestCase):
    start_daemon = False

    def test_client_of_another_uid_refused(self):
        self.need_root("setpriv", "python3")
        d = self.start_vmemd(sock=self.repo.path("peer", "d.sock"))
        got = self.probe_as(NOBODY, d.sock)
        vt.diag("uid %d got: %r" % (NOBODY, got))
        self.assertTrue(got["connected"], got)  # the kernel let it in
        self.assertFalse(any('"result"' in ln for ln in got["lines"]), got)
        self.assertTrue(got["eof"] or got["error"], got)
        self.assertTrue(vt.wait_until(
            lambda: "refused a connection from uid %d" % NOBODY
            in d.stderr(), 3.0), d.stderr())
        # root and the daemon's own user are served
        self.assertEqual(self.connect(daemon=d).call("server.hello")
                         ["server"], "vmemd")

    def test_daemon_of_another_uid_serves_its_user_only(self):
        self.need_root("setpriv", "python3")
        env = vt.clean_env(self.repo.tmp)
        for dirpath, dirnames, filenames in os.walk(self.repo.tmp):
            for name in [dirpath] + [os.path.join(dirpath, n)
                                     for n in dirnames + filenames]:
                os.lchown(name, NOBODY, NOBODY)
        sock = self.repo.path("run", "d.sock")
        d = AsUser(self.repo, NOBODY, sock=sock, env=env)
        self.addCleanup(self._reap, d)
        d.start()
        self.assertEqual(os.lstat(sock).st_uid, NOBODY)
        self.assertEqual(os.lstat(os.path.dirname(sock)).st_uid, NOBODY)
        same = self.probe_as(NOBODY, sock, dac_override=False)
        vt.diag("same uid got: %r" % same)
        self.assertTrue(same["connected"], same)
        self.assertTrue(same["lines"], same)
        self.assertEqual(json.loads(same["lines"][0])["result"]["server"],
                         "vmemd")
        other = self.probe_as(OTHER, sock)
        vt.diag("uid %d got: %r" % (OTHER, other))
        self.assertTrue(other["connected"], other)
        self.assertFalse(any('"result"' in ln for ln in other["lines"]),
                         other)
        self.assertTrue(vt.wait_until(
            lambda: "refused a connection from uid %d" % OTHER
            in d.stderr(), 3.0), d.stderr())
        self.assertEqual(self.connect(daemon=d).call("server.hello")
                         ["server"], "vmemd")  # root, by design
        d.stop()


class AsUser(vt.Daemon):
    """A vmemd --foreground run as another uid through setpriv."""

    def __init__(self, repo, uid, **kw):
        super().__init__(repo, name="as%d" % uid, **kw)
        self.uid = uid

    def argv(self):
        return setpriv_argv(self.uid) + super().argv()


# --------------------------------------------------------------------------
# 4. Connection limit


class ConnectionLimit(vt.VmemTestCase):
    daemon_args = ("--max-connections", "2")

    def test_third_connection_unavailable_then_eof(self):
        a, b = self.served_connection(), self.served_connection()
        third = vt.Conn(self.daemon.sock)
        self.addCleanup(third.close)
        resp = third.read_json(timeout=5)
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.E_UNAVAILABLE[0])
        self.assertEqual(resp["error"]["data"]["type"], vt.E_UNAVAILABLE[1])
        self.assertTrue(third.at_eof(5.0))
        a.call("server.hello")
        b.call("server.hello")
        a.close()

        def fresh():
            c = vt.Conn(self.daemon.sock)
            try:
                c.request("server.hello")
                return "result" in c.read_json(timeout=2)
            except (OSError, EOFError, TimeoutError):
                return False
            finally:
                c.close()
        self.assertTrue(vt.wait_until(fresh, 3.0), "no slot after a close")


# --------------------------------------------------------------------------
# 5. Line deadline (slowloris)


class Slowloris(vt.VmemTestCase):
    daemon_args = ("--line-deadline-ms", "500")

    def test_one_byte_per_200ms_closed(self):
        conn = self.connect()
        other = self.connect()
        text = json.dumps({"jsonrpc": "2.0", "id": 9,
                           "method": "server.hello",
                           "params": {"client": "s" * 200}}).encode()
        started = time.monotonic()
        line = None
        sent = 0
        for i in range(len(text)):
            try:
                conn.send_raw(text[i:i + 1])
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                break
            if i == 3:
                self.assertEqual(other.call("server.hello")["server"],
                                 "vmemd")  # others are served meanwhile
            try:
                line = conn.read_line(0.2)
                break
            except TimeoutError:
                pass
        waited = time.monotonic() - started
        self.assertIsNotNone(line, "no error after %d bytes over %.1f s"
                             % (sent, waited))
        resp = json.loads(line)
        vt.diag("closed after %d bytes, %.2f s: %s" % (sent, waited, line))
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)
        self.assertIn("not completed", resp["error"]["message"])
        self.assertGreaterEqual(waited, 0.45)
        self.assertLess(waited, 5.0)
        self.assertTrue(conn.at_eof(3.0))
        self.assertEqual(other.call("server.hello")["server"], "vmemd")

    def test_slow_but_complete_lines_answered(self):
        conn = self.connect()
        started = time.monotonic()
        for rid in range(1, 6):
            line = hello_line(rid)
            half = len(line) // 2
            conn.send_raw(line[:half])
            time.sleep(0.15)
            conn.send_raw(line[half:])
            self.assertEqual(conn.read_json(timeout=5)["id"], rid)
            time.sleep(0.15)
        # well past one deadline in all, each line within its own
        self.assertGreater(time.monotonic() - started, 1.0)
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")


# --------------------------------------------------------------------------
# 6. A client that stops reading


def flood(sock, payload, quiet_for=2.0, limit_s=30.0):
    """Send payload repeatedly until sends block for quiet_for seconds.
    Returns (bytes sent, "blocked" | "closed" | "limit")."""
    sock.setblocking(False)
    sent = 0
    last = start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            sent += sock.send(payload)
            last = time.monotonic()
        except BlockingIOError:
            if time.monotonic() - last >= quiet_for:
                return sent, "blocked"
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            return sent, "closed"
    return sent, "limit"


class StopsReading(vt.VmemTestCase):
    daemon_args = ("--output-backlog", "65536")
    BIG = 100000

    def test_back_pressure_bounds_memory_and_others_are_served(self):
        conn = self.connect(agent_id="big")
        conn.store(1, 1, 2, "b" * self.BIG)
        for _ in range(10):
            self.assertEqual(len(conn.get(1, 1, 2)["content"]), self.BIG)
        rss_before = self.daemon.rss_kib()
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(slow.close)
        slow.connect(self.daemon.sock)
        req = (json.dumps({"jsonrpc": "2.0", "id": 1,
                           "method": "decision.get",
                           "params": {"coordinate": vt.coord(1, 1, 2)}})
               + "\n").encode()
        served = []
        stop = threading.Event()

        def other_client():
            c = self.daemon.connect()
            try:
                while not stop.is_set():
                    t0 = time.monotonic()
                    ok = len(c.get(1, 1, 2)["content"]) == self.BIG
                    served.append((ok, time.monotonic() - t0))
                    time.sleep(0.05)
            except Exception as e:  # reported below
                served.append((False, repr(e)))
            finally:
                c.close()

        t = threading.Thread(target=other_client)
        t.start()
        try:
            sent, how = flood(slow, req * 64)
        finally:
            stop.set()
            t.join(vt.scaled(30))
        growth = self.daemon.rss_kib() - rss_before
        vt.diag("slow client: sent %d bytes (%d requests) then %s; "
                "RSS grew %d KiB; other client served %d times"
                % (sent, sent // len(req), how, growth, len(served)))
        self.assertIn(how, ("blocked", "closed"),
                      "the daemon kept reading %d bytes" % sent)
        self.assertLess(growth, RSS_GROWTH_MAX_KIB)
        self.assertTrue(served, "the other client was never served")
        bad = [s for s in served if not s[0] or s[1] > 2.0]
        self.assertEqual(bad, [], "other client failed or waited")
        self.assertTrue(self.daemon.running())
        slow.close()
        self.assertEqual(len(conn.get(1, 1, 2)["content"]), self.BIG)
        self.daemon.stop()


# --------------------------------------------------------------------------
# 7. A 100 MB line


class HugeLine(vt.VmemTestCase):
    daemon_args = ("--max-line", "1048576")

    def test_100mb_without_newline(self):
        base_rss = self.daemon.rss_kib()
        base_hwm = hwm_kib(self.daemon.pid)
        conn = self.connect()
        chunk = b"x" * (1 << 20)
        sent = 0
        how = "all sent"
        for _ in range(100):
            try:
                conn.send_raw(chunk)
                sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError) as e:
                how = type(e).__name__
                break
        peak = hwm_kib(self.daemon.pid)
        growth = max(peak - base_rss, self.daemon.rss_kib() - base_rss)
        vt.diag("sent %d MiB (%s); RSS %d KiB at start, peak %d KiB "
                "(was %d)" % (sent >> 20, how, base_rss, peak, base_hwm))
        resp = conn.read_json(timeout=5)
        self.assertIsNone(resp["id"])
        self.assertEqual(resp["error"]["code"], vt.INVALID_REQUEST)
        self.assertTrue(conn.at_eof(5.0))
        self.assertLess(growth, RSS_GROWTH_MAX_KIB)
        self.assertEqual(self.connect().call("server.hello")["server"],
                         "vmemd")
        self.assertTrue(self.daemon.running())


# --------------------------------------------------------------------------
# 8. Deep nesting


class DeepNesting(vt.VmemTestCase):
    N = 100000

    def check(self, conn, data, codes):
        conn.send_raw(data + b"\n")
        resp = conn.read_json(timeout=10)
        self.assertIn("error", resp, resp)
        self.assertIn(resp["error"]["code"], codes, resp)
        self.assertIsInstance(resp["error"]["message"], str)
        self.assertTrue(resp["error"]["message"])
        return resp

    def test_deep_nesting_refused(self):
        conn = self.connect()
        cases = [
            b"[" * self.N + b"]" * self.N,
            b"[" * self.N,
            b'{"a":' * self.N + b"1" + b"}" * self.N,
            b'{"jsonrpc":"2.0","id":5,"method":"server.hello",'
            b'"params":{"client":' + b"[" * self.N + b"]" * self.N + b"}}",
        ]
        for i, data in enumerate(cases):
            resp = self.check(conn, data,
                              (vt.PARSE_ERROR, vt.INVALID_REQUEST,
                               vt.E_VALUE[0]))
            vt.diag("case %d: %s" % (i, json.dumps(resp)[:200]))
            conn.send_raw(hello_line(100 + i))
            self.assertEqual(conn.read_json()["id"], 100 + i)
        self.assertTrue(self.daemon.running())
        self.daemon.stop()


# --------------------------------------------------------------------------
# 9. Symlinks under .vector-memory


def record(x, y, z, content):
    return {"coordinate": vt.coord(x, y, z), "content": content,
            "timestamp": "2025-01-06T15:30:00.123456Z", "agent_id": "planted",
            "issue_context": None, "version": 1}


def tree_snapshot(path):
    """{relative path: bytes or link target} of everything under path."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path)
            if os.path.islink(full):
                snap[rel] = "-> " + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    snap[rel] = f.read()
            else:
                snap[rel] = "dir"
    return snap


class Symlinks(vt.VmemTestCase):
    start_daemon = False

    def outside_dir(self, *recs):
        """A directory outside the tree holding decision files."""
        out = self.repo.path("outside")
        os.makedirs(out, exist_ok=True)
        for rec in recs:
            c = rec["coordinate"]
            with open(os.path.join(out, "y-%d-z-%d.json"
                                   % (c["y"], c["z"])), "wb") as f:
                f.write(vt.decision_file_bytes(rec))
        return out

    def assertQuarantined(self, conn, rel):
        health = conn.call("server.health")
        paths = json.dumps(health["quarantined"])
        self.assertIn(rel, paths, health)
        self.assertTrue(os.path.isdir(self.repo.quarantine))
        return health

    def test_vector_memory_symlink_refused(self):
        out = self.outside_dir(record(3, 2, 2, "outside"))
        before = tree_snapshot(out)
        os.symlink(out, self.repo.vmdir)
        d = self.new_daemon().spawn()
        rc = d.wait()
        err = d.stderr()
        vt.diag("exit %d: %s" % (rc, err.strip().splitlines()[-1]))
        self.assertNotEqual(rc, 0, err)
        self.assertIn("symbolic link", err)
        self.assertEqual(tree_snapshot(out), before)
        self.assertTrue(os.path.islink(self.repo.vmdir))

    def test_symlinked_x_directory_quarantined(self):
        out = self.outside_dir(record(5, 2, 2, "outside x"))
        before = tree_snapshot(out)
        os.mkdir(self.repo.vmdir)
        os.symlink(out, os.path.join(self.repo.vmdir, "x-005"))
        d = self.start_vmemd()
        conn = self.connect(agent_id="sym", daemon=d)
        self.assertIsNone(conn.get(5, 2, 2))
        self.assertQuarantined(conn, "x-005")
        self.assertFalse(os.path.islink(os.path.join(self.repo.vmdir,
                                                     "x-005")))
        rec = conn.store(5, 2, 2, "inside")
        self.assertFileMatches(rec)
        self.assertFalse(os.path.islink(os.path.join(self.repo.vmdir,
                                                     "x-005")))
        d.stop()
        self.assertEqual(tree_snapshot(out), before)

    def test_symlinked_decision_file_quarantined(self):
        out = self.outside_dir(record(7, 2, 2, "outside file"))
        before = tree_snapshot(out)
        xdir = os.path.join(self.repo.vmdir, "x-007")
        os.makedirs(xdir)
        os.symlink(os.path.join(out, "y-2-z-2.json"),
                   os.path.join(xdir, "y-2-z-2.json"))
        d = self.start_vmemd()
        conn = self.connect(agent_id="sym", daemon=d)
        self.assertIsNone(conn.get(7, 2, 2))
        self.assertQuarantined(conn, "y-2-z-2.json")
        rec = conn.store(7, 2, 2, "inside")
        self.assertFileMatches(rec)
        self.assertFalse(os.path.islink(self.repo.decision_path(7, 2, 2)))
        d.stop()
        self.assertEqual(tree_snapshot(out), before)

    def store_through(self, conn, x):
        """Store at (x, 2, 2); the result or the error, for the report."""
        try:
            return conn.store(x, 2, 2, "must not leave the tree")
        except vt.RpcError as e:
            return e

    def test_x_directory_symlink_planted_at_run_time(self):
        d = self.start_vmemd()
        conn = self.connect(agent_id="sym", daemon=d)
        conn.store(1, 2, 2, "makes .vector-memory")
        self.assertTrue(vt.wait_until(
            lambda: os.path.isdir(self.repo.vmdir), 3.0))
        out = self.outside_dir()
        os.symlink(out, os.path.join(self.repo.vmdir, "x-009"))
        got = self.store_through(conn, 9)
        vt.diag("store through a symlinked x-009: %r" % (got,))
        time.sleep(1.5)  # the file writer runs in the background
        self.assertEqual(os.listdir(out), [])
        self.assertTrue(os.path.islink(os.path.join(self.repo.vmdir,
                                                    "x-009")))
        health = conn.call("server.health")
        vt.diag("health: status %s, last_error %r"
                % (health["status"], health["last_error"]))

    def test_decision_file_symlink_planted_at_run_time(self):
        d = self.start_vmemd()
        conn = self.connect(agent_id="sym", daemon=d)
        rec = conn.store(11, 2, 3, "first")
        self.assertFileMatches(rec)
        target = self.repo.path("precious")
        with open(target, "w") as f:
            f.write("precious")
        path = self.repo.decision_path(11, 2, 3)
        os.unlink(path)
        os.symlink(target, path)
        got = conn.store(11, 2, 3, "second", overwrite=True)
        vt.diag("overwrite over a symlink: version %r" % got["version"])
        settled = vt.wait_until(
            lambda: not os.path.islink(path) and os.path.isfile(path), 3.0)
        with open(target) as f:
            self.assertEqual(f.read(), "precious")
        self.assertTrue(settled, "the decision file is still a symlink")
        self.assertFileMatches(got)
        d.stop()
        with open(target) as f:
            self.assertEqual(f.read(), "precious")

    def test_vector_memory_replaced_by_symlink_at_run_time(self):
        d = self.start_vmemd()
        conn = self.connect(agent_id="sym", daemon=d)
        self.assertFileMatches(conn.store(1, 2, 2, "inside"))
        out = self.outside_dir()
        os.rename(self.repo.vmdir, self.repo.path("moved-away"))
        os.symlink(out, self.repo.vmdir)
        got = self.store_through(conn, 12)
        vt.diag("store through a symlinked .vector-memory: %r" % (got,))
        time.sleep(1.5)
        self.assertEqual(os.listdir(out), [])
        self.assertTrue(os.path.islink(self.repo.vmdir))


# --------------------------------------------------------------------------
# 10. A repository of another owner


class ForeignRepository(NeedsRoot, vt.VmemTestCase):
    start_daemon = False

    def foreign(self):
        """Give the working tree to uid 65534; a clean environment."""
        self.need_root()
        env = vt.clean_env(self.repo.tmp)
        for dirpath, dirnames, filenames in os.walk(self.repo.root):
            for name in [dirpath] + [os.path.join(dirpath, n)
                                     for n in dirnames + filenames]:
                os.lchown(name, NOBODY, NOBODY)
        return env

    def test_repository_of_another_user_refused(self):
        env = self.foreign()
        d = self.new_daemon(env=env).spawn()
        rc = d.wait()
        err = d.stderr()
        vt.diag("exit %d: %s" % (rc, err.strip()[-400:]))
        self.assertNotEqual(rc, 0, "vmemd served a foreign repository")
        self.assertFalse(os.path.exists(os.path.join(self.repo.gitdir,
                                                     "vmem", "wal")))
        self.assertRegex(err, r"(?i)owne[dr]|safe\.directory")

    def test_repository_declared_safe_served(self):
        # the refusal is about ownership: declared safe, it serves
        env = self.foreign()
        with open(os.path.join(env["HOME"], ".gitconfig"), "w") as f:
            f.write("[safe]\n\tdirectory = %s\n" % self.repo.root)
        d = self.new_daemon(env=env, name="safe")
        d.start()
        self.assertEqual(d.connect().call("server.hello")["server"],
                         "vmemd")
        d.stop()


# --------------------------------------------------------------------------
# 11. Standard descriptors closed at start


def close_stdio():
    for fd in (0, 1, 2):
        try:
            os.close(fd)
        except OSError:
            pass


class ClosedStdio(vt.VmemTestCase):
    start_daemon = False

    def assertStdioSafe(self, pid, allowed):
        links = fd_links(pid)
        vt.diag("fds of vmemd: %r" % {k: v for k, v in links.items()
                                       if k < 8})
        for fd in (0, 1, 2):
            with self.subTest(fd=fd):
                target = links.get(fd)
                self.assertIn(target, (None,) + tuple(allowed[fd]),
                              "fd %d is %s" % (fd, target))
        return links

    def store_some(self, sock, n=20):
        conn = vt.Conn(sock, agent_id="stdio")
        try:
            recs = [conn.store(i, 2, 2, "closed stdio %d" % i)
                    for i in range(1, n + 1)]
            self.assertEqual(conn.call("server.health")["decisions"], n)
            return recs
        finally:
            conn.close()

    def assertSurvive(self, recs):
        """A fresh daemon on the tree has every record, and the log and
        files are intact."""
        d = self.start_vmemd(name="after")
        conn = self.connect(daemon=d)
        for rec in recs:
            c = rec["coordinate"]
            self.assertEqual(conn.get(c["x"], c["y"], c["z"]), rec)
            self.assertFileMatches(rec)
        health = conn.call("server.health")
        self.assertEqual(health["quarantined"], [], health)
        self.assertEqual(health["decisions"], len(recs))
        d.stop()

    def test_foreground_with_stdio_closed(self):
        sock = self.repo.path("fg.sock")
        argv = [vt.VMEMD, "--foreground", "--repo", self.repo.root,
                "--socket", sock]
        proc = subprocess.Popen(argv, preexec_fn=close_stdio)
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(),
                                 proc.wait()))
        ok = vt.wait_until(lambda: vt.accepts(sock) or
                           proc.poll() is not None, 10)
        self.assertTrue(ok and proc.poll() is None,
                        "vmemd did not listen (rc %r)" % proc.poll())
        with self.subTest("fds 0-2"):
            self.assertStdioSafe(proc.pid, {0: ["/dev/null"],
                                            1: ["/dev/null"],
                                            2: ["/dev/null"]})
        with self.subTest("lock"):
            self.assertTrue(self.repo.lock_held(), "the tree's lock is "
                            "not held")
        recs = self.store_some(sock)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(vt.scaled(20))
        with self.subTest("clean stop"):
            self.assertEqual(rc, 0, "exit status on SIGTERM")
        with self.subTest("stores survive"):
            self.assertSurvive(recs)

    def test_background_with_stdio_closed(self):
        sock = self.repo.path("bg.sock")
        argv = [vt.VMEMD, "--repo", self.repo.root, "--socket", sock]
        parent = subprocess.run(argv, preexec_fn=close_stdio, timeout=vt.scaled(30))
        listening = vt.wait_until(lambda: vt.accepts(sock), 10)
        pids = self.repo.processes()
        for pid in pids:
            self.addCleanup(self._kill_pid, pid)
        vt.diag("parent exit %d; daemon pids %r" % (parent.returncode,
                                                     pids))
        self.assertTrue(listening, "the background daemon does not listen")
        self.assertEqual(len(pids), 1, pids)
        pid = pids[0]
        log = os.path.join(self.repo.gitdir, "vmem", "vmemd.log")
        with self.subTest("starter exit status"):
            self.assertEqual(parent.returncode, 0,
                             "the starting process reported a failure "
                             "although the daemon runs")
        with self.subTest("fds 0-2"):
            self.assertStdioSafe(pid, {0: ["/dev/null"], 1: ["/dev/null"],
                                       2: [log]})
        with self.subTest("lock"):
            self.assertTrue(self.repo.lock_held(), "the tree's lock is "
                            "not held: a second daemon could start")
        with self.subTest("single instance"):
            second = self.new_daemon(sock=self.repo.path("second.sock"),
                                     name="second").spawn()
            vt.wait_until(lambda: not second.running() or
                          vt.accepts(second.sock), 10)
            serving = second.running()
            second.kill()
            self.assertFalse(serving, "a second daemon serves the tree")
            self.assertNotEqual(second.proc.returncode, 0)
            self.assertIn("already running", second.stderr())
        recs = self.store_some(sock)
        os.kill(pid, signal.SIGTERM)
        gone = vt.wait_until(lambda: not os.path.exists("/proc/%d" % pid)
                             or _zombie(pid), 20, 0.05)
        self.assertTrue(gone, "vmemd did not stop")
        with open(log) as f:
            text = f.read()
        vt.diag("vmemd.log: %r" % text[-600:])
        with self.subTest("log"):
            self.assertIn("serving", text)
            self.assertIn("stopped", text)
        with self.subTest("stores survive"):
            self.assertSurvive(recs)

    def _kill_pid(self, pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --------------------------------------------------------------------------
# 12. No network sockets


def proc_net_inodes(pid, name):
    """Socket inodes listed in /proc/PID/net/NAME."""
    inodes = set()
    try:
        with open("/proc/%d/net/%s" % (pid, name)) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return inodes
    if not lines:
        return inodes
    header = lines[0].split()
    col = header.index("Inode") if name == "unix" else 9
    for ln in lines[1:]:
        parts = ln.split()
        if len(parts) > col:
            inodes.add(parts[col])
    return inodes


class NoNetwork(StracedCase):
    def test_only_unix_sockets_in_proc(self):
        d = self.start_vmemd(*vt.GitCase.daemon_args,
                             env=vt.clean_env(self.repo.tmp))
        conn = self.connect(agent_id="net", daemon=d)
        conn.store(1, 2, 2, "net")
        self.assertIsNotNone(conn.call("git.sync", {}, timeout=30)["commit"])
        links = fd_links(d.pid)
        socks = {v[len("socket:["):-1] for v in links.values()
                 if v.startswith("socket:[")}
        self.assertGreaterEqual(len(socks), 2, links)  # listener + conn
        unix = proc_net_inodes(d.pid, "unix")
        inet = set()
        for name in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6",
                     "udplite", "udplite6"):
            inet |= proc_net_inodes(d.pid, name)
        vt.diag("socket inodes %s" % sorted(socks))
        self.assertEqual(socks & inet, set(), "network sockets")
        self.assertEqual(socks - unix, set(), "sockets not AF_UNIX")
        d.stop()

    def test_only_unix_sockets_created(self):
        proc, sock, log = self.strace_daemon("socket,connect,bind",
                                             "--commit-delay-ms", "200")
        self.session(sock)
        self.finish(proc)
        calls = parse_strace(log)
        domains = [c[2].split(",", 1)[0] for c in calls if c[1] == "socket"]
        families = [m.group(1) for c in calls if c[1] in ("connect", "bind")
                    for m in [re.search(r"sa_family=(\w+)", c[2])] if m]
        vt.diag("socket() domains: %s; connect/bind families: %s"
                % (sorted(set(domains)), sorted(set(families))))
        if "AF_NETLINK" in domains:
            vt.diag("note: an AF_NETLINK socket was created")
        self.assertTrue(domains, "no socket() call traced")
        self.assertEqual(set(domains) - {"AF_UNIX", "AF_LOCAL",
                                         "AF_NETLINK"}, set(), domains)
        self.assertEqual(set(families) - {"AF_UNIX", "AF_LOCAL",
                                          "AF_NETLINK"}, set(), families)



# --------------------------------------------------------------------------
# 13. The state directory <gitdir>/vmem is ours (issue 12, item 7)

USERADD = shutil.which("useradd", path="/usr/sbin:/sbin:/usr/bin:/bin")


def _retry(argv):
    """Run an account tool, retrying while another one holds the lock
    of /etc/passwd (other test runs on this machine)."""
    for attempt in range(20):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=vt.scaled(30))
        if p.returncode == 0:
            return
        if "lock" not in p.stderr or attempt == 19:
            raise AssertionError("%s: %s" % (" ".join(argv), p.stderr))
        time.sleep(0.2)


class SharedRepository(vt.VmemTestCase):
    """A `git init --shared=group` repository that root (the daemon's
    user here, as in CI) and a throw-away user of the same group can both
    write. The second user plants things in .git/vmem before the daemon
    starts; the daemon must refuse them (with the path, the owner and the
    mode), leave their targets untouched and move nothing anywhere."""

    start_daemon = False

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root to create a second user (CI runs "
                          "as root)")
        if not (USERADD and SETPRIV):
            self.skipTest("needs useradd and setpriv")
        tag = "vmt%s" % os.urandom(4).hex()
        _retry(["groupadd", tag + "g"])
        self.addCleanup(_retry, ["groupdel", tag + "g"])
        _retry(["useradd", "-M", "-N", "-g", tag + "g", "-s",
                "/usr/sbin/nologin", tag])
        self.addCleanup(_retry, ["userdel", tag])
        self.other = tag
        self.uid = int(subprocess.run(["id", "-u", tag], capture_output=True,
                                      text=True, check=True).stdout)
        self.gid = int(subprocess.run(["id", "-g", tag], capture_output=True,
                                      text=True, check=True).stdout)
        # the repository: the group's, setgid, shared with git's own means
        os.chmod(self.repo.tmp, 0o755)
        shutil.rmtree(self.repo.root)
        os.mkdir(self.repo.root)
        os.chown(self.repo.root, 0, self.gid)
        os.chmod(self.repo.root, 0o2775)
        subprocess.run(["git", "init", "-q", "--shared=group",
                        self.repo.root], check=True)
        self.vmem = os.path.join(self.repo.gitdir, "vmem")
        # something of the daemon's user the other one would like to hit
        self.victim = self.repo.path("victim.txt")
        with open(self.victim, "w") as f:
            f.write("precious\n")
        self.victim_dir = self.repo.path("victim-dir")
        os.mkdir(self.victim_dir, 0o700)
        with open(os.path.join(self.victim_dir, "keep"), "w") as f:
            f.write("keep\n")

    def new_daemon(self, *args, sock=None, name="vmemd", root=None,
                   env=None):
        # the temporary directory is open to the other user: the socket
        # goes into a directory of its own (made 0700 by the daemon)
        return super().new_daemon(*args, name=name, root=root, env=env,
                                   sock=sock or self.repo.path("run",
                                                               name + ".s"))

    def as_other(self, *argv):
        """Run argv as the second user (its group: the repository's)."""
        p = subprocess.run([SETPRIV, "--reuid=%d" % self.uid,
                            "--regid=%d" % self.gid, "--clear-groups"] +
                           list(argv), capture_output=True, text=True,
                           timeout=vt.scaled(30))
        self.assertEqual(p.returncode, 0, "%s: %s" % (argv, p.stderr))

    def snapshot(self):
        """What the attack could have changed, to compare after."""
        st = os.stat(self.victim)
        with open(self.victim) as f:
            text = f.read()
        return (text, st.st_size, st.st_mtime_ns, st.st_uid,
                sorted(os.listdir(self.victim_dir)))

    def refused(self, path, why, owner=None, mode=None):
        """vmemd (as root) refuses to start, naming path, owner, mode."""
        d = self.new_daemon().spawn()
        rc = d.wait()
        err = d.stderr()
        vt.diag("exit %d: %s" % (rc, err.strip().splitlines()[-1]))
        self.assertEqual(rc, 1, err)
        self.assertIn("vmemd: %s: owner " % path, err)
        if owner is not None:
            self.assertRegex(err, r"owner %s \(uid %d\)"
                             % (re.escape(owner[0]), owner[1]))
        if mode is not None:
            self.assertIn("mode %04o" % mode, err)
        self.assertIn(why, err)
        self.assertFalse(vt.accepts(d.sock))
        self.assertFalse(self.repo.lock_held())
        return err

    def test_planted_wal_symlink(self):
        before = self.snapshot()
        self.as_other("mkdir", self.vmem)
        self.as_other("ln", "-s", self.victim, os.path.join(self.vmem,
                                                            "wal"))
        self.refused(self.vmem, "owned by another user",
                     owner=(self.other, self.uid))
        self.assertEqual(self.snapshot(), before)
        # nothing of ours was made in the other user's directory
        self.assertEqual(os.listdir(self.vmem), ["wal"])
        # vmem, which starts the daemon, shows the same message
        p = subprocess.run([vt.VMEM, "--repo", self.repo.root, "--socket",
                            self.repo.path("cli.sock"), "status"],
                           capture_output=True, text=True, timeout=vt.scaled(60),
                           env=dict(os.environ, VMEMD=vt.VMEMD))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("%s: owner %s (uid %d)" % (self.vmem, self.other,
                                                 self.uid), p.stderr)
        self.assertEqual(self.snapshot(), before)

    def test_planted_quarantine_symlink(self):
        before = self.snapshot()
        # a file the daemon would quarantine, with the attacker's content
        bad = self.repo.decision_path(1, 1, 1)
        self.as_other("mkdir", "-p", os.path.dirname(bad))
        self.as_other("sh", "-c", "echo 'ssh-ed25519 AAAA attacker' > '%s'"
                      % bad)
        self.as_other("mkdir", self.vmem)
        self.as_other("ln", "-s", self.victim_dir,
                      os.path.join(self.vmem, "quarantine"))
        self.refused(self.vmem, "owned by another user",
                     owner=(self.other, self.uid))
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(os.listdir(self.victim_dir), ["keep"])
        self.assertTrue(os.path.exists(bad))

    def test_state_directory_is_a_symlink(self):
        before = self.snapshot()
        self.as_other("ln", "-s", self.victim_dir, self.vmem)
        self.refused(self.vmem, "a symbolic link",
                     owner=(self.other, self.uid), mode=0o777)
        self.assertEqual(self.snapshot(), before)
        self.assertTrue(os.path.islink(self.vmem))

    def test_our_directory_open_to_everyone(self):
        # ours, but 0777: the other user planted a log in it
        os.mkdir(self.vmem)
        os.chmod(self.vmem, 0o777)
        before = self.snapshot()
        self.as_other("ln", "-s", self.victim, os.path.join(self.vmem,
                                                            "wal"))
        self.refused(self.vmem, "writable by group or other",
                     owner=("root", 0), mode=0o777)
        self.assertEqual(self.snapshot(), before)

    def test_group_writable_file_in_a_0750_directory(self):
        os.mkdir(self.vmem)
        os.chmod(self.vmem, 0o750)
        log = os.path.join(self.vmem, "vmemd.log")
        with open(log, "w") as f:
            f.write("old lines\n")
        os.chown(log, 0, self.gid)
        os.chmod(log, 0o660)
        self.refused(log, "writable by group or other", owner=("root", 0),
                     mode=0o660)
        with open(log) as f:
            self.assertEqual(f.read(), "old lines\n")
        # only readable by the group: made private, and the start goes on
        os.chmod(log, 0o640)
        d = self.start_vmemd()
        self.assertEqual(mode_of(self.vmem), 0o700)
        self.assertEqual(mode_of(log), 0o600)
        self.assertIn("made private what others could read", d.stderr())
        d.stop()

    def test_created_private_in_the_shared_repository(self):
        old = os.umask(0)
        try:
            d = self.start_vmemd()
        finally:
            os.umask(old)
        conn = self.connect(daemon=d, agent_id="shared")
        self.assertFileMatches(conn.store(2, 1, 2, "in a shared tree"))
        d.stop()
        st = os.lstat(self.vmem)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (0, 0o700))
        for name in os.listdir(self.vmem):
            st = os.lstat(os.path.join(self.vmem, name))
            want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            self.assertEqual(stat.S_IMODE(st.st_mode), want, name)
        # the other user cannot look inside
        p = subprocess.run([SETPRIV, "--reuid=%d" % self.uid,
                            "--regid=%d" % self.gid, "--clear-groups",
                            "ls", self.vmem], capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        # the decisions are the group's, as the shared repository says
        path = self.repo.decision_path(2, 1, 2)
        self.assertEqual(mode_of(path), 0o666)  # umask 0: 0666 already
        self.assertEqual(os.stat(path).st_gid, self.gid)
        self.assertEqual(mode_of(os.path.dirname(path)), 0o2777)


class TreeFileModes(vt.VmemTestCase):
    """The files the daemon creates under .vector-memory get the modes git
    gives the files of a repository with the same core.sharedRepository,
    under the daemon's umask."""

    start_daemon = False

    CASES = [
        # (core.sharedRepository, umask, file mode, directory mode)
        (None, 0o022, 0o644, 0o755),
        (None, 0o077, 0o600, 0o700),
        ("group", 0o022, 0o664, 0o2775),
        ("true", 0o077, 0o660, 0o2770),
        ("all", 0o077, 0o664, 0o2775),
        ("everybody", 0o022, 0o664, 0o2775),
        ("0640", 0o000, 0o640, 0o2750),
        ("umask", 0o027, 0o640, 0o750),
    ]

    def test_modes_follow_the_repository_and_the_umask(self):
        for shared, umask, fmode, dmode in self.CASES:
            with self.subTest(shared=shared, umask=oct(umask)):
                shutil.rmtree(self.repo.vmdir, ignore_errors=True)
                subprocess.run(["git", "-C", self.repo.root, "config",
                                "--unset-all", "core.sharedRepository"])
                if shared is not None:
                    subprocess.run(["git", "-C", self.repo.root, "config",
                                    "core.sharedRepository", shared],
                                   check=True)
                old = os.umask(umask)
                try:
                    d = self.start_vmemd(name="modes")
                finally:
                    os.umask(old)
                conn = d.connect(agent_id="modes")
                self.assertFileMatches(conn.store(3, 2, 2, "mode?"))
                d.stop()
                path = self.repo.decision_path(3, 2, 2)
                self.assertEqual(oct(mode_of(path)), oct(fmode))
                self.assertEqual(oct(mode_of(os.path.join(
                    self.repo.vmdir, "metadata.json"))), oct(fmode))
                self.assertEqual(oct(mode_of(os.path.dirname(path))),
                                 oct(dmode))
                self.assertEqual(oct(mode_of(self.repo.vmdir)), oct(dmode))

    def test_value_git_refuses_stops_the_start(self):
        subprocess.run(["git", "-C", self.repo.root, "config",
                        "core.sharedRepository", "0440"], check=True)
        d = self.new_daemon().spawn()
        self.assertEqual(d.wait(), 1, d.stderr())
        self.assertIn("core.sharedRepository = 0440", d.stderr())
        self.assertIn("the owner must be able to read and write", d.stderr())


if __name__ == "__main__":
    vt.main()

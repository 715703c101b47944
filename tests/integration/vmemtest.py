"""Harness of the vmem integration suites (Python 3.9+, standard library).

Each test gets a fresh temporary git repository (`git init -q`) and, when it
asks for one, a real vmemd started with --foreground on a socket inside the
temporary directory. VMEMD and VMEM name the daemon and CLI binaries (meson
passes them). Results are printed as TAP so that meson counts every case:
`python3 test_x.py [SUBSTRING...]` runs the cases whose id contains one of
the substrings (all when none is given).
"""

import collections
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

VMEMD = os.environ.get("VMEMD", "vmemd")
VMEM = os.environ.get("VMEM", "vmem")

TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
DECISION_KEYS = ("coordinate", "content", "timestamp", "agent_id",
                 "issue_context", "version")
SANITIZER_RE = re.compile(
    r".*(ERROR: \w+Sanitizer|WARNING: ThreadSanitizer|runtime error:).*")
CONTENT_MAX = 102400
# Slow builds (ThreadSanitizer) stretch every wait: VMEM_TIMEOUT_SCALE.
TIMEOUT_SCALE = float(os.environ.get("VMEM_TIMEOUT_SCALE", "1"))
DEFAULT_TIMEOUT = 10.0 * TIMEOUT_SCALE
START_TIMEOUT = 10.0 * TIMEOUT_SCALE

# (code, data.type) of the domain errors.
E_VALUE = (-32602, "ValueError")
E_COORD = (-32001, "CoordinateValidationError")
E_IMMUTABLE = (-32002, "ImmutableLayerError")
E_CONCURRENCY = (-32003, "ConcurrencyError")
E_QUERY = (-32005, "QueryError")
E_OCCUPIED = (-32006, "CoordinateOccupiedError")
E_UNAVAILABLE = (-32007, "UnavailableError")
PARSE_ERROR = -32700
INVALID_REQUEST = -32600


# --------------------------------------------------------------------------
# Output


def diag(*lines):
    """Print TAP diagnostics (one "# " line per text line)."""
    for text in lines:
        for line in str(text).splitlines() or [""]:
            print("# " + line, flush=True)


# --------------------------------------------------------------------------
# Temporary repository and decision files


def _temp_base():
    """A temporary directory whose paths stay well inside sun_path."""
    base = tempfile.gettempdir()
    return base if len(base) < 40 else "/tmp"


class Repo:
    """A temporary directory holding a fresh git working tree ("repo")."""

    def __init__(self):
        self.tmp = os.path.realpath(
            tempfile.mkdtemp(prefix="vmemit-", dir=_temp_base()))
        self.root = os.path.join(self.tmp, "repo")
        os.mkdir(self.root)
        subprocess.run(["git", "init", "-q", self.root], check=True)
        self.gitdir = os.path.join(self.root, ".git")
        self.vmdir = os.path.join(self.root, ".vector-memory")
        self.quarantine = os.path.join(self.gitdir, "vmem", "quarantine")

    def path(self, *parts):
        """A path inside the temporary directory (outside the tree)."""
        return os.path.join(self.tmp, *parts)

    def decision_path(self, x, y, z):
        return os.path.join(self.vmdir, "x-%03d" % x,
                            "y-%d-z-%d.json" % (y, z))

    def read_decision_bytes(self, x, y, z):
        """The bytes of a decision file, or None when it does not exist."""
        try:
            with open(self.decision_path(x, y, z), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_decision(self, x, y, z):
        data = self.read_decision_bytes(x, y, z)
        return None if data is None else json.loads(data)

    def vm_files(self):
        """Relative paths of every file and directory under .vector-memory."""
        found = []
        for dirpath, dirnames, filenames in os.walk(self.vmdir):
            rel = os.path.relpath(dirpath, self.vmdir)
            for name in dirnames + filenames:
                found.append(os.path.normpath(os.path.join(rel, name)))
        return sorted(found)

    def temp_files(self):
        return [p for p in self.vm_files()
                if os.path.basename(p).startswith(".tmp-")]

    def lock_held(self):
        """True while a daemon holds the tree's lock (<gitdir>/vmem/lock)."""
        try:
            fd = os.open(os.path.join(self.gitdir, "vmem", "lock"), os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def processes(self):
        """Pids of live processes whose command line names this temporary
        directory (daemons we started, directly or through the CLI)."""
        needle = self.tmp.encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if needle in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
        return pids

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def coord(x, y, z):
    return {"x": x, "y": y, "z": z}


def decision_file_bytes(record):
    """The exact file format of a decision record (keys in file order)."""
    c = record["coordinate"]
    ordered = {k: record[k] for k in DECISION_KEYS}
    ordered["coordinate"] = coord(c["x"], c["y"], c["z"])
    return (json.dumps(ordered, indent=2, ensure_ascii=False) + "\n").encode()


def scaled(seconds):
    """A wait of seconds on an unloaded machine, stretched for this stage
    (VMEM_TIMEOUT_SCALE): every positive wait of the suites goes through
    here."""
    return seconds * TIMEOUT_SCALE


def wait_until(predicate, timeout=2.0, interval=0.01):
    """Poll predicate() until it returns a true value, for at most
    scaled(timeout) seconds; return the last value."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


# --------------------------------------------------------------------------
# The write-ahead log, written by hand (docs/architecture.md section 4)


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli) of data, continuing from crc."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def wal_bytes(batches, first=1):
    """A log holding batches (lists of payloads, bytes), numbered from
    first, each complete (its last record marked)."""
    out = bytearray()
    for number, payloads in enumerate(batches, first):
        for i, payload in enumerate(payloads):
            lenf = len(payload) | (0x80000000 if i == len(payloads) - 1
                                   else 0)
            head = struct.pack("<QI", number, lenf)
            crc = crc32c(payload, crc32c(head))
            out += struct.pack("<I", 0x32574D56) + head + \
                struct.pack("<I", crc) + payload
    return bytes(out)


def wal_record_payload(x, y, z, content, agent_id="wal-writer", version=1):
    """The compact form of a decision record, as the log holds it."""
    return json.dumps({
        "coordinate": coord(x, y, z), "content": content,
        "timestamp": "2025-01-06T15:30:00.123456Z", "agent_id": agent_id,
        "issue_context": None, "version": version,
    }, separators=(",", ":")).encode()


# --------------------------------------------------------------------------
# JSON-RPC over the Unix socket


class RpcError(Exception):
    """An error response: code, data.type (or None), message, data."""

    def __init__(self, error):
        self.code = error.get("code")
        self.data = error.get("data")
        self.type = self.data.get("type") if isinstance(self.data, dict) \
            else None
        self.message = error.get("message")
        super().__init__("%s %s: %s" % (self.code, self.type, self.message))


class Conn:
    """One NDJSON connection to the daemon."""

    def __init__(self, path, agent_id=None, timeout=DEFAULT_TIMEOUT):
        self.path = path
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.buf = bytearray()
        self.last_id = 0
        # Messages read while looking for something else: watch.changed
        # notifications met while waiting for a response, and responses
        # met while waiting for a notification.
        self.notes = collections.deque()
        self.unread = collections.deque()
        if agent_id is not None:
            self.call("server.hello", {"agent_id": agent_id})

    # -- raw I/O
    def send_raw(self, data):
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)

    def send_line(self, text):
        self.send_raw(text.encode() + b"\n")

    def send(self, obj):
        self.send_line(json.dumps(obj))

    def read_line(self, timeout=None):
        """The next line (bytes, without LF), None at EOF; raises
        TimeoutError when nothing complete arrives in scaled(timeout)
        (default: the connection's timeout, scaled already)."""
        return self._read_line_until(
            time.monotonic() + (scaled(timeout) if timeout
                                else self.timeout))

    def _read_line_until(self, deadline):
        scanned = 0
        while True:
            nl = self.buf.find(b"\n", scanned)
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                return line
            scanned = len(self.buf)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no complete response line in time")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError("no complete response line in time")
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk

    def _read_message(self, timeout=None):
        line = self.read_line(timeout)
        if line is None:
            raise EOFError("connection closed by the daemon")
        return json.loads(line)

    def read_json(self, timeout=None):
        """The next message not yet consumed (notifications included)."""
        if self.unread:
            return self.unread.popleft()
        return self._read_message(timeout)

    def _next(self, deadline):
        """read_json until an absolute deadline (already scaled)."""
        if self.unread:
            return self.unread.popleft()
        line = self._read_line_until(deadline)
        if line is None:
            raise EOFError("connection closed by the daemon")
        return json.loads(line)

    def silent_for(self, seconds=0.3):
        """True when neither a line nor EOF arrives within seconds."""
        try:
            self.read_line(seconds)
        except TimeoutError:
            return True
        return False

    def at_eof(self, timeout=2.0):
        """True when the daemon closes the connection without a line."""
        try:
            return self.read_line(timeout) is None
        except TimeoutError:
            return False

    # -- JSON-RPC
    def request(self, method, params=None, rid=None):
        """Send a request (no wait); returns its id."""
        if rid is None:
            self.last_id += 1
            rid = self.last_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def response(self, rid, timeout=None):
        """Read the response to rid: its result, or raise RpcError.
        watch.changed notifications arriving first are queued (see
        next_notification)."""
        deadline = time.monotonic() + (scaled(timeout) if timeout
                                       else self.timeout)
        while True:
            resp = self._next(deadline)
            if not is_watch_notification(resp):
                break
            self.notes.append(resp)
        if "error" in resp and resp.get("id") is None:
            raise RpcError(resp["error"])  # the request did not parse
        if resp.get("id") != rid or resp.get("jsonrpc") != "2.0":
            raise AssertionError("unexpected response to id %r: %r"
                                 % (rid, resp))
        if "error" in resp:
            raise RpcError(resp["error"])
        return resp["result"]

    def call(self, method, params=None, timeout=None):
        return self.response(self.request(method, params), timeout)

    # -- the decision methods
    def store(self, x, y, z, content, **kw):
        params = {"coordinate": coord(x, y, z), "content": content}
        params.update(kw)
        return self.call("decision.store", params)

    def get(self, x, y, z):
        return self.call("decision.get", {"coordinate": coord(x, y, z)})

    def exists(self, x, y, z):
        return self.call("decision.exists", {"coordinate": coord(x, y, z)})

    def delete(self, x, y, z, **kw):
        params = {"coordinate": coord(x, y, z)}
        params.update(kw)
        return self.call("decision.delete", params)

    # -- server notifications
    def next_notification(self, timeout=None):
        """The params of the next watch.changed notification (queued or
        read now); responses met meanwhile are kept for response().
        Raises TimeoutError when none arrives in time, EOFError at EOF."""
        if not self.notes:
            deadline = time.monotonic() + (scaled(timeout) if timeout
                                           else self.timeout)
            while True:
                line = self._read_line_until(deadline)
                if line is None:
                    raise EOFError("connection closed by the daemon")
                msg = json.loads(line)
                if is_watch_notification(msg):
                    self.notes.append(msg)
                    break
                self.unread.append(msg)
        msg = self.notes.popleft()
        if set(msg) != {"jsonrpc", "method", "params"} or \
                msg["jsonrpc"] != "2.0" or not isinstance(msg["params"], dict):
            raise AssertionError("malformed notification: %r" % (msg,))
        return msg["params"]

    def notifications(self, timeout=0.3):
        """The params of every watch.changed notification queued or
        arriving within timeout seconds, in order."""
        found = []
        deadline = time.monotonic() + scaled(timeout)
        while True:
            try:
                left = max(deadline - time.monotonic(), 0.001)
                found.append(self.next_notification(left / TIMEOUT_SCALE))
            except TimeoutError:
                return found

    def close(self):
        self.sock.close()


def is_watch_notification(msg):
    """True for a server notification (no id) of method watch.changed."""
    return isinstance(msg, dict) and "id" not in msg and \
        msg.get("method") == "watch.changed"


def try_connect(path):
    """A connected socket, or None when nothing accepts at path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def accepts(path):
    s = try_connect(path)
    if s is None:
        return False
    s.close()
    return True


# --------------------------------------------------------------------------
# Trace spans (--trace-file): OTLP/JSON lines


def _otlp_value(v):
    """A protobuf-JSON AnyValue as a Python value."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        return [_otlp_value(x) for x in v["arrayValue"].get("values", [])]
    raise AssertionError("unknown attribute value %r" % (v,))


def read_spans(path):
    """The spans of a trace file, in order, each a dict with its
    attributes as {key: value}; [] when the file does not exist."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    spans = []
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    sp = dict(sp)
                    sp["attributes"] = {a["key"]: _otlp_value(a["value"])
                                        for a in sp.get("attributes", [])}
                    spans.append(sp)
    return spans


# --------------------------------------------------------------------------
# The daemon


def _status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for pid %d" % (key, pid))


def daemon_is_sanitized():
    """True when vmemd is built with AddressSanitizer or
    ThreadSanitizer (its RSS then says little: freed memory sits in the
    quarantine, shadow memory grows)."""
    try:
        with open(VMEMD if os.path.isabs(VMEMD) else
                  os.path.join(os.getcwd(), VMEMD), "rb") as f:
            text = f.read()
            return b"__asan_init" in text or b"__tsan_init" in text
    except OSError:
        return False


def rss_kib(pid):
    """VmRSS of a process in KiB."""
    return _status_kib(pid, "VmRSS")


def peak_rss_kib(pid):
    """VmHWM of a process in KiB: the most it ever held, so a burst
    freed before we look still shows."""
    return _status_kib(pid, "VmHWM")


def describe_process(pid):
    """"pid (state) command line" of a process, for reports."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return "%d (%s) %s" % (pid, state, cmd.strip())
    except OSError:
        return "%d (gone)" % pid


class Daemon:
    """A vmemd --foreground process on a repository."""

    def __init__(self, repo, sock=None, args=(), name="vmemd", root=None,
                 env=None):
        self.repo = repo
        self.env = env  # the process environment (None: inherit ours)
        self.root = root or repo.root
        self.sock = sock or repo.path("vmemd.sock")
        self.args = list(args)
        self.stderr_path = repo.path("%s.stderr" % name)
        self.proc = None
        self.runs = 0

    def argv(self):
        return [VMEMD, "--foreground", "--repo", self.root,
                "--socket", self.sock] + self.args

    def spawn(self):
        """Start the process without waiting for it to listen."""
        self.runs += 1
        with open(self.stderr_path, "ab") as err:
            err.write(b"--- run %d\n" % self.runs)
            err.flush()
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err,
                                         env=self.env)
        return self

    def start(self, timeout=START_TIMEOUT):
        """Start and wait until the socket accepts connections: timeout
        seconds, and longer (up to 4 times) while the daemon keeps saying
        what it does (its log grows: a long replay or load)."""
        self.spawn()
        began = time.monotonic()
        deadline = began + timeout
        logged = self._stderr_size()
        while not accepts(self.sock):
            rc = self.proc.poll()
            if rc is not None:
                raise AssertionError("vmemd exited with %d before listening:"
                                     "\n%s" % (rc, self.stderr()))
            now = time.monotonic()
            size = self._stderr_size()
            if size != logged:
                logged = size
                deadline = min(max(deadline, now + timeout / 2),
                               began + 4 * timeout)
            if now > deadline:
                raise AssertionError("vmemd not listening after %.0f s:\n%s"
                                     % (now - began, self.stderr()))
            time.sleep(0.01)
        return self

    def _stderr_size(self):
        try:
            return os.path.getsize(self.stderr_path)
        except OSError:
            return 0

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def wait(self, timeout=DEFAULT_TIMEOUT):
        """The exit status; kill -9 and fail when it takes too long."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("vmemd did not exit within %.0f s:\n%s"
                                 % (timeout, self.stderr()))

    def stop(self, timeout=DEFAULT_TIMEOUT):
        """Graceful stop (SIGTERM); asserts exit status 0."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc != 0:
            raise AssertionError("vmemd exited with %d on SIGTERM:\n%s"
                                 % (rc, self.stderr()))

    def kill(self):
        """kill -9 and reap."""
        if self.running():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def restart(self):
        self.stop()
        return self.start()

    def connect(self, agent_id=None, timeout=DEFAULT_TIMEOUT):
        return Conn(self.sock, agent_id=agent_id, timeout=timeout)

    def rss_kib(self):
        return rss_kib(self.pid)

    def peak_rss_kib(self):
        return peak_rss_kib(self.pid)


def shutdown_any(sock):
    """Best effort: ask whatever daemon listens at sock to stop."""
    try:
        c = Conn(sock, timeout=scaled(2.0))
    except OSError:
        return False
    try:
        c.call("server.shutdown")
        return True
    except (OSError, EOFError, TimeoutError, RpcError, ValueError):
        return False
    finally:
        c.close()


# --------------------------------------------------------------------------
# Base test case


class VmemTestCase(unittest.TestCase):
    """A fresh repository per test, and a daemon unless start_daemon is
    False (daemon_args are passed to it)."""

    start_daemon = True
    daemon_args = ()
    maxDiff = 4000

    def setUp(self):
        self.repo = Repo()
        self.addCleanup(self.repo.cleanup)
        self.addCleanup(self._no_strays)
        self.daemon = None
        if self.start_daemon:
            self.daemon = self.start_vmemd(*self.daemon_args)

    def new_daemon(self, *args, sock=None, name="vmemd", root=None,
                   env=None):
        d = Daemon(self.repo, sock=sock, args=args, name=name, root=root,
                   env=env)
        self.addCleanup(self._reap, d)
        return d

    def start_vmemd(self, *args, sock=None, name="vmemd", env=None):
        return self.new_daemon(*args, sock=sock, name=name, env=env).start()

    def _reap(self, d):
        """Kill a daemon left running and keep its stderr for the report
        of a failed test (the temporary directory goes away); a sanitizer
        report in it fails the test."""
        d.kill()
        log = d.stderr()
        self.daemon_logs = getattr(self, "daemon_logs", [])
        self.daemon_logs.append((d.sock, log))
        found = SANITIZER_RE.search(log)
        if found:
            raise AssertionError("vmemd on %s: %s" % (d.sock, found.group(0)))

    def _no_strays(self):
        """Kill (by pid) processes of this test still running at its end,
        and fail the test: nothing may outlive it."""
        if not wait_until(lambda: not self.repo.processes(), 3.0):
            pids = self.repo.processes()
            described = [describe_process(pid) for pid in pids]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError("processes left running: %s" % described)

    def connect(self, agent_id=None, daemon=None, timeout=DEFAULT_TIMEOUT):
        c = (daemon or self.daemon).connect(agent_id=agent_id, timeout=timeout)
        self.addCleanup(c.close)
        return c

    # -- assertions
    def served_connection(self):
        """A connection the daemon serves (retrying while it has not yet
        noticed the close of the start-up probe)."""
        deadline = time.monotonic() + scaled(3.0)
        while True:
            c = Conn(self.daemon.sock)
            try:
                c.call("server.hello")
                self.addCleanup(c.close)
                return c
            except (OSError, EOFError, RpcError):
                c.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def assertRpcError(self, expected, fn, *args, **kw):
        """fn(*args, **kw) must raise RpcError with (code, data.type)."""
        with self.assertRaises(RpcError) as cm:
            fn(*args, **kw)
        got = (cm.exception.code, cm.exception.type)
        self.assertEqual(got, tuple(expected), str(cm.exception))
        self.assertIsInstance(cm.exception.message, str)
        return cm.exception

    def assertTimestamp(self, value):
        self.assertIsInstance(value, str)
        self.assertRegex(value, TIMESTAMP_RE)

    def assertDecision(self, rec, x, y, z, content, agent_id=None,
                       issue_context=None, version=1):
        self.assertIsInstance(rec, dict)
        self.assertEqual(list(rec.keys()), list(DECISION_KEYS))
        self.assertEqual(rec["coordinate"], coord(x, y, z))
        self.assertEqual(rec["content"], content)
        self.assertTimestamp(rec["timestamp"])
        if agent_id is not None:
            self.assertEqual(rec["agent_id"], agent_id)
        self.assertEqual(rec["issue_context"], issue_context)
        self.assertEqual(rec["version"], version)
        self.assertIs(type(rec["version"]), int)

    def assertFileMatches(self, rec, timeout=2.0):
        """The decision file of rec eventually holds exactly rec."""
        c = rec["coordinate"]
        want = decision_file_bytes(rec)
        got = wait_until(
            lambda: self.repo.read_decision_bytes(c["x"], c["y"], c["z"])
            == want, timeout)
        if not got:
            self.assertEqual(
                self.repo.read_decision_bytes(c["x"], c["y"], c["z"]), want)

    def assertFileGone(self, x, y, z, timeout=2.0):
        gone = wait_until(
            lambda: not os.path.exists(self.repo.decision_path(x, y, z)),
            timeout)
        self.assertTrue(gone, "%s still exists"
                        % self.repo.decision_path(x, y, z))

    def assertOnlyDecisionFiles(self):
        """Nothing under .vector-memory but x-NNN/y-Y-z-Z.json and
        metadata.json."""
        pattern = re.compile(r"^(metadata\.json|x-\d{3,4}|"
                             r"x-\d{3,4}/y-[1-5]-z-[1-4]\.json)$")
        stray = [p for p in self.repo.vm_files() if not pattern.match(p)]
        self.assertEqual(stray, [])


# --------------------------------------------------------------------------
# Git: helpers and a base case running the git program


HEX40 = re.compile(r"^[0-9a-f]{40}$")
E_STORAGE = (-32004, "StorageError")
USER = ("Una User", "una@example.com")
METADATA = ".vector-memory/metadata.json"


def rel_path(x, y, z):
    """The path of a decision file relative to the working-tree root."""
    return ".vector-memory/x-%03d/y-%d-z-%d.json" % (x, y, z)


def clean_env(tmp):
    """Our environment without git's or vmem's variables, with a HOME and
    XDG_CONFIG_HOME that hold no git configuration and no system config:
    only the repository's own config counts."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "VMEM_"))}
    home = os.path.join(tmp, "home")
    xdg = os.path.join(tmp, "xdg")
    os.makedirs(home, exist_ok=True)
    os.makedirs(xdg, exist_ok=True)
    env.update(HOME=home, XDG_CONFIG_HOME=xdg, GIT_CONFIG_NOSYSTEM="1",
               LC_ALL="C")
    return env


class GitCase(VmemTestCase):
    """Daemons run in a clean environment; git() runs the git program as
    a user "Una User" would (identity from the environment, not from the
    repository's config)."""

    daemon_args = ("--commit-delay-ms", "200")

    def new_daemon(self, *args, sock=None, name="vmemd", root=None,
                   env=None):
        return super().new_daemon(*args, sock=sock, name=name, root=root,
                                  env=env or clean_env(self.repo.tmp))

    def tearDown(self):
        """Stop the daemon gracefully, then the repository must pass
        git fsck --strict."""
        if self.daemon is not None and self.daemon.running():
            self.daemon.stop()
        p = self.git_run("fsck", "--strict", "--no-progress")
        out = (p.stdout + p.stderr).decode(errors="replace")
        errors = [ln for ln in out.splitlines()
                  if ln.startswith(("error", "fatal", "warning"))]
        self.assertEqual((p.returncode, errors), (0, []),
                         "git fsck --strict:\n%s" % out)

    # -- the git program
    def git_env(self, **extra):
        env = clean_env(self.repo.tmp)
        env.update(GIT_AUTHOR_NAME=USER[0], GIT_AUTHOR_EMAIL=USER[1],
                   GIT_COMMITTER_NAME=USER[0], GIT_COMMITTER_EMAIL=USER[1],
                   GIT_EDITOR="true", GIT_MERGE_AUTOEDIT="no")
        env.update(extra)
        return env

    def git_run(self, *args, **extra):
        return subprocess.run(["git", "-C", self.repo.root] + list(args),
                              capture_output=True, env=self.git_env(**extra),
                              timeout=scaled(30))

    def git(self, *args, **extra):
        """stdout of a git command that must succeed (text)."""
        p = self.git_run(*args, **extra)
        self.assertEqual(p.returncode, 0, "git %s: %s%s"
                         % (" ".join(args), p.stdout.decode(errors="replace"),
                            p.stderr.decode(errors="replace")))
        return p.stdout.decode()

    def git_bytes(self, *args):
        p = self.git_run(*args)
        self.assertEqual(p.returncode, 0, "git %s: %r" % (args, p.stderr))
        return p.stdout

    def head(self):
        """HEAD's commit id, or None on an unborn branch."""
        p = self.git_run("rev-parse", "-q", "--verify", "HEAD^{commit}")
        return p.stdout.decode().strip() if p.returncode == 0 else None

    def commits(self):
        """Commit ids of HEAD's history, newest first ([] when unborn)."""
        if self.head() is None:
            return []
        return self.git("log", "--format=%H").split()

    def wait_commits(self, n, timeout=5.0):
        """Poll until HEAD's history has n commits; return the history."""
        got = wait_until(lambda: len(self.commits()) >= n and
                            self.commits(), timeout, 0.05)
        self.assertTrue(got, "no %d commits after %.1f s: %r"
                        % (n, timeout, self.commits()))
        self.assertEqual(len(got), n, got)
        return got

    def assertNoNewCommit(self, history, seconds=1.0):
        time.sleep(seconds)
        self.assertEqual(self.commits(), history)

    def subject(self, rev="HEAD"):
        return self.git("log", "-1", "--format=%s", rev).rstrip("\n")

    def body_lines(self, rev="HEAD"):
        return [ln for ln in self.git("log", "-1", "--format=%b",
                                      rev).splitlines() if ln]

    def raw_message(self, rev="HEAD"):
        """The commit object's message, byte for byte (text)."""
        raw = self.git_bytes("cat-file", "commit", rev).decode()
        return raw.split("\n\n", 1)[1]

    def parents(self, rev="HEAD"):
        return self.git("rev-list", "--parents", "-n", "1",
                        rev).split()[1:]

    def tree_files(self, rev="HEAD"):
        return sorted(self.git("ls-tree", "-r", "--name-only",
                               rev).splitlines())

    def blob(self, rev, path):
        return self.git_bytes("cat-file", "blob", "%s:%s" % (rev, path))

    def changed_in(self, rev="HEAD"):
        """(status, path) of a commit against its first parent."""
        out = self.git("show", "--name-status", "--format=", rev)
        return sorted(tuple(ln.split("\t", 1)) for ln in out.splitlines()
                      if ln)

    def status(self):
        """git status --porcelain lines (untracked files included)."""
        return sorted(ln for ln in self.git(
            "status", "--porcelain", "--untracked-files=all").splitlines()
            if ln)

    def assertStatus(self, expected, timeout=2.0):
        """git status eventually says expected (the decision files are
        written by a background writer)."""
        if not wait_until(lambda: self.status() == expected, timeout,
                             0.05):
            self.assertEqual(self.status(), expected)

    def user_commit(self, path, text, message="user change"):
        """Write a file and commit it (only it) as the user."""
        with open(os.path.join(self.repo.root, path), "w") as f:
            f.write(text)
        self.git("add", "--", path)
        self.git("commit", "-q", "-m", message, "--", path)
        return self.head()

    def make_conflict(self, merge=True):
        """Two branches changing shared.txt differently; with merge, a
        repository in the middle of their conflicting merge. Returns the
        branch we are on."""
        self.user_commit("shared.txt", "base\n", "base")
        branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.git("checkout", "-q", "-b", "other")
        self.user_commit("shared.txt", "other\n", "other side")
        self.git("checkout", "-q", branch)
        self.user_commit("shared.txt", "mine\n", "my side")
        if not merge:
            return branch
        p = self.git_run("merge", "other")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertTrue(os.path.exists(os.path.join(self.repo.gitdir,
                                                    "MERGE_HEAD")))
        return branch

    # -- the daemon
    def health(self, conn):
        return conn.call("server.health")

    def sync(self, conn, message=None, timeout=20):
        params = {} if message is None else {"message": message}
        return conn.call("git.sync", params, timeout=timeout)

    def assertCommitted(self, rev, recs):
        """rev's tree holds each record's file with its exact bytes (and
        the working file is the same)."""
        for rec in recs:
            c = rec["coordinate"]
            self.assertFileMatches(rec)
            self.assertEqual(self.blob(rev, rel_path(c["x"], c["y"], c["z"])),
                             decision_file_bytes(rec))

    def assertPendingSettles(self, conn, timeout=2.0):
        """After a start on files equal to HEAD, pending drops to 0 once
        the first job found nothing to commit (at start it may count every
        loaded decision)."""
        first = self.health(conn)["pending"]
        settled = wait_until(lambda: self.health(conn)["pending"] == 0,
                                timeout, 0.05)
        self.assertTrue(settled, "pending stays %d (was %d at start)"
                        % (self.health(conn)["pending"], first))
        if first:
            diag("note: pending was %d right after start-up" % first)

    def assertDeferred(self, conn, word):
        """git.sync fails with StorageError naming word, health reports
        the deferral and keeps the batch pending."""
        err = self.assertRpcError(E_STORAGE, self.sync, conn)
        text = "%s %s" % (err.message, json.dumps(err.data))
        self.assertIn("commit deferred", text)
        self.assertIn(word, text)
        health = self.health(conn)
        self.assertIsInstance(health["commit_deferred"], str, health)
        self.assertIn(word, health["commit_deferred"])
        self.assertGreater(health["pending"], 0, health)
        return health

    def assertCommitResumes(self, conn, history, recs, timeout=6.0):
        """Within timeout a new commit holding recs appears on history's
        tip, and health says nothing is deferred or pending."""
        now = self.wait_commits(len(history) + 1, timeout)
        self.assertEqual(now[1:], history)
        self.assertCommitted("HEAD", recs)
        health = wait_until(
            lambda: (lambda h: h["commit_deferred"] is None
                     and h["pending"] == 0 and h)(self.health(conn)), 2.0)
        self.assertTrue(health, self.health(conn))
        self.assertEqual(health["last_commit"]["commit"], now[0])
        return now


# --------------------------------------------------------------------------
# TAP runner


def _flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def _case_name(test):
    return test.id().split(".", 1)[-1]


def _report(number, test, result):
    name = _case_name(test)
    problems = result.errors + result.failures
    if result.skipped and not problems:
        print("ok %d - %s # SKIP %s" % (number, name, result.skipped[0][1]))
        return True
    if problems:
        print("not ok %d - %s" % (number, name))
        for case, text in problems:
            if case is not test:  # a subTest: say which one
                diag("in %s" % case.id().split(".", 1)[-1])
            diag(text)
        for sock, log in getattr(test, "daemon_logs", []):
            diag("stderr of vmemd on %s (last 3000 bytes):" % sock,
                 log[-3000:])
        return False
    print("ok %d - %s" % (number, name))
    return True


def main(module=None):
    """Run the TestCases of module (default __main__) and print TAP."""
    module = module or sys.modules["__main__"]
    tests = list(_flatten(unittest.defaultTestLoader.loadTestsFromModule(
        module)))
    # Arguments choose cases by a part of their id; "-PART" leaves out
    # the cases whose id has PART.
    wanted = [w for w in sys.argv[1:] if not w.startswith("-")]
    unwanted = [w[1:] for w in sys.argv[1:] if w.startswith("-")]
    if wanted:
        tests = [t for t in tests if any(w in t.id() for w in wanted)]
    tests = [t for t in tests if not any(w in t.id() for w in unwanted)]
    print("1..%d" % len(tests), flush=True)
    failed = 0
    for number, test in enumerate(tests, 1):
        result = unittest.TestResult()
        started = time.monotonic()
        try:
            test.run(result)
        except Exception:  # a crash of the harness itself
            result.errors.append((test, traceback.format_exc()))
        if not _report(number, test, result):
            failed += 1
        diag("%s: %.2f s" % (_case_name(test), time.monotonic() - started))
        sys.stdout.flush()
    sys.exit(1 if failed else 0)

"""One NDJSON JSON-RPC 2.0 connection to vmemd, and starting the daemon.

A Connection runs one call at a time (callers serialise; the manager's
pool hands each connection to one thread at a time). Server notifications
(lines without ``id``) are skipped. After any transport failure, timeout
or protocol confusion the connection is marked ``broken`` and must not be
used again: the daemon may still answer the abandoned request later.

The socket stays in blocking mode and a call's deadline is the kernel's
(SO_SNDTIMEO / SO_RCVTIMEO, set only when it changes), so a call costs
one send and, for an answer that arrives whole, one recv: a Python socket
timeout would add a poll() before every send and recv, and a mode switch
per call.
"""

import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from typing import Any, Dict, Optional

from .errors import (DaemonConnectionError, InvalidParamsError,
                     ProtocolError, error_from_response)

__all__ = ["Connection", "connect", "connect_or_start", "daemon_program"]

MAX_LINE = 64 * 1024 * 1024  # longest response line accepted
READ_CHUNK = 64 * 1024
CONNECT_BUSY_S = 2.0  # retry a full listen backlog this long
START_WAIT_S = 10.0  # wait this long for a started daemon to answer
BACKOFF_FIRST_S = 0.005
BACKOFF_MAX_S = 0.2
RESPAWN_S = 1.0
EXIT_RUNNING = 3  # vmemd: another instance holds the tree


def _check_nul(value: Any, where: str = "params") -> None:
    """NUL is refused by the daemon's JSON parser as a parse error; refuse
    it here as what it is, a bad parameter."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidParamsError("%s must not contain NUL" % where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_nul(key, where)
            _check_nul(item, "%s.%s" % (where, key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_nul(item, where)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"),
                            allow_nan=False)
_METHOD_JSON: Dict[str, str] = {}  # method name -> its JSON string


def _method_json(method: str) -> str:
    text = _METHOD_JSON.get(method)
    if text is None:
        text = _ENCODER.encode(method)
        if len(_METHOD_JSON) < 256:
            _METHOD_JSON[method] = text
    return text


def _params_json(params: Dict[str, Any]) -> str:
    """The params' JSON. The commonest request, a read of one coordinate,
    is written directly (the encoder's setup costs more than the text)."""
    if len(params) == 1:
        c = params.get("coordinate")
        if type(c) is dict and len(c) == 3:
            x, y, z = c.get("x"), c.get("y"), c.get("z")
            if type(x) is int and type(y) is int and type(z) is int:
                return '{"coordinate":{"x":%d,"y":%d,"z":%d}}' % (x, y, z)
    return _ENCODER.encode(params)


def encode_request(rid: int, method: str,
                   params: Optional[Dict[str, Any]]) -> bytes:
    """One request line; InvalidParamsError for what JSON or UTF-8 cannot
    carry (NaN, lone surrogates, NUL, unserialisable objects)."""
    try:
        if params is None:
            text = '{"jsonrpc":"2.0","id":%d,"method":%s}' % (
                rid, _method_json(method))
        else:
            text = '{"jsonrpc":"2.0","id":%d,"method":%s,"params":%s}' % (
                rid, _method_json(method), _params_json(params))
        data = text.encode("utf-8") + b"\n"
    except (TypeError, ValueError) as e:  # UnicodeEncodeError included
        raise InvalidParamsError("cannot encode %s params: %s"
                                 % (method, e)) from None
    # A NUL is written as \u0000: look closer only when that text is there.
    if params is not None and "\\u0000" in text:
        _check_nul(params)
    return data


class Connection:
    """A connected socket to one daemon."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        self.buf = bytearray()
        self.next_id = 0
        self.broken = False
        sock.settimeout(None)  # blocking: deadlines are the kernel's
        self._timeout: Optional[float] = None  # SO_SNDTIMEO/SO_RCVTIMEO

    def _set_timeout(self, timeout: Optional[float]) -> None:
        """The kernel's bound on each send and recv (None: none)."""
        if timeout == self._timeout:
            return
        if timeout is None:
            tv = struct.pack("ll", 0, 0)
        else:
            # At least 1 us: zero would mean no bound.
            usec = max(int(timeout * 1e6), 1)
            tv = struct.pack("ll", usec // 1000000, usec % 1000000)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self._timeout = timeout

    def close(self) -> None:
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass

    def _fail(self, message: str) -> DaemonConnectionError:
        self.close()
        return DaemonConnectionError(message)

    def alive(self) -> bool:
        """False when the daemon has closed this idle connection (for
        example after a restart): checked before reuse so that a request
        is never sent into a dead connection."""
        if self.broken:
            return False
        if self.buf:
            return True  # a late answer is waiting: the peer was alive
        try:
            # MSG_DONTWAIT: EAGAIN at once when nothing is there.
            data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            self.close()
            return False
        if not data:
            self.close()
            return False
        return True

    def call(self, method: str, params: Optional[Dict[str, Any]],
             timeout: Optional[float]) -> Any:
        """Send one request and return its result; raise the mapped
        exception for an error response. timeout: seconds, None forever.
        """
        if self.broken:
            raise DaemonConnectionError("connection to %s is closed"
                                        % self.path)
        self.next_id += 1
        rid = self.next_id
        line = encode_request(rid, method, params)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._set_timeout(timeout)
            self.sock.sendall(line)
        except (socket.timeout, BlockingIOError):
            raise self._fail("timed out sending %s to %s"
                             % (method, self.path)) from None
        except OSError as e:
            raise self._fail("cannot send to %s: %s"
                             % (self.path, e.strerror or e)) from None
        while True:
            msg = self._read_message(deadline, method)
            if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                self.close()
                raise ProtocolError("malformed message from the daemon: %r"
                                    % (msg,))
            if "id" not in msg:
                continue  # a server notification
            if "error" in msg:
                if msg["id"] is None:
                    # Refused before its id was read: still ours, since
                    # one request is in flight; the daemon may close.
                    self.close()
                elif msg["id"] != rid:
                    continue
                raise error_from_response(msg["error"])
            if msg["id"] != rid:
                continue  # a late answer to an abandoned request
            if "result" not in msg:
                self.close()
                raise ProtocolError("response without result: %r" % (msg,))
            return msg["result"]

    def _read_message(self, deadline: Optional[float], method: str) -> Any:
        scanned = 0
        while True:
            nl = self.buf.find(b"\n", scanned)
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                if not line.strip():
                    scanned = 0
                    continue
                return self._decode(line)
            scanned = len(self.buf)
            if scanned > MAX_LINE:
                raise self._fail("response line from %s over %d bytes"
                                 % (self.path, MAX_LINE))
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._fail("no answer to %s from %s in time"
                                     % (method, self.path))
                # Lowered only once a tenth has passed: resetting the
                # kernel's bound on every call would cost two syscalls.
                if left < 0.9 * self._timeout:  # type: ignore[operator]
                    self._set_timeout(left)
            try:
                chunk = self.sock.recv(READ_CHUNK)
            except (socket.timeout, BlockingIOError):
                raise self._fail("no answer to %s from %s in time"
                                 % (method, self.path)) from None
            except InterruptedError:
                continue
            except OSError as e:
                raise self._fail("connection to %s broke: %s"
                                 % (self.path, e.strerror or e)) from None
            if not chunk:
                raise self._fail("connection to %s closed by the daemon "
                                 "during %s" % (self.path, method))
            if not self.buf and chunk.endswith(b"\n") and \
                    chunk.count(b"\n") == 1 and chunk.strip():
                return self._decode(chunk)  # the usual case: one line
            self.buf += chunk

    def _decode(self, line: bytes) -> Any:
        try:
            return json.loads(line)
        except ValueError:
            self.close()
            raise ProtocolError("unparsable line from the daemon: %r"
                                % line[:200]) from None


def _peer_uid(sock: socket.socket) -> int:
    fmt = "3i"
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                          struct.calcsize(fmt))
    return struct.unpack(fmt, raw)[1]


def connect(path: str, timeout: float = CONNECT_BUSY_S) -> Connection:
    """Connect to path; raises OSError (FileNotFoundError,
    ConnectionRefusedError, ...) as connect(2) does. Only a daemon run by
    our own uid or root is accepted (PermissionError otherwise)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        busy_until = time.monotonic() + CONNECT_BUSY_S
        while True:
            try:
                sock.connect(path)
                break
            except (BlockingIOError, InterruptedError):
                # EAGAIN: the listen backlog is full; retry a while.
                if time.monotonic() >= busy_until:
                    raise
                time.sleep(0.005)
        uid = _peer_uid(sock)
        if uid not in (os.geteuid(), 0):
            raise PermissionError(errno.EPERM, "socket served by uid %d"
                                  % uid, path)
        return Connection(sock, path)
    except BaseException:
        sock.close()
        raise


# Where vmemd is looked for after $VMEMD, before PATH: the install prefix
# meson uses by default, and the build tree of the source checkout this
# package is imported from (client/python/vmem -> build/daemon/vmemd).
INSTALLED_VMEMD = "/usr/local/bin/vmemd"
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
BUILD_VMEMD = os.path.join(_CHECKOUT, "build", "daemon", "vmemd")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def daemon_program(explicit: Optional[str] = None) -> Optional[str]:
    """The vmemd to start: explicit, else $VMEMD, else the one of the
    install prefix, else the one built in this source checkout, else
    vmemd on PATH; None when there is none."""
    if explicit:
        return explicit
    env = os.environ.get("VMEMD")
    if env:
        return env
    for path in (INSTALLED_VMEMD, BUILD_VMEMD):
        if _executable(path):
            return path
    return shutil.which("vmemd")


def _spawn(program: str, root: str, path: str) -> int:
    """Run ``vmemd --repo ROOT --socket PATH``, whose parent exits 0 once
    the daemon listens, 3 when another instance holds the tree."""
    argv = [program, "--repo", root, "--socket", path]
    # stderr goes to an anonymous file, not a pipe: the daemon outlives
    # the call and might keep a pipe open. Its text explains a failure.
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=err,
                                  close_fds=True, timeout=START_WAIT_S * 3)
        except (OSError, subprocess.SubprocessError) as e:
            raise DaemonConnectionError("cannot start %s: %s"
                                        % (program, e)) from None
        if proc.returncode in (0, EXIT_RUNNING):
            return proc.returncode
        err.seek(0)
        text = err.read(4096).decode(errors="replace").strip()
    how = ("killed by signal %d" % -proc.returncode if proc.returncode < 0
           else "exited with status %d" % proc.returncode)
    raise DaemonConnectionError("%s %s%s" % (" ".join(argv), how,
                                             ": " + text if text else ""))


def _absent(e: OSError) -> bool:
    return isinstance(e, (FileNotFoundError, ConnectionRefusedError))


def connect_or_start(root: Optional[str], path: str, autostart: bool,
                     program: Optional[str] = None) -> Connection:
    """Connect to path, starting the daemon for root when nothing answers
    and autostart is true; then retry with backoff for a bounded time.
    When another instance held the tree (status 3) but never answers, it
    may have been on its way out: start again, later each time."""
    try:
        return connect(path)
    except OSError as e:
        if not _absent(e) or not autostart or root is None:
            raise DaemonConnectionError("cannot connect to %s: %s"
                                        % (path, e.strerror or e)) from None
    prog = daemon_program(program)
    if not prog:
        raise DaemonConnectionError(
            "no daemon at %s and vmemd not found (not at %s, not built at "
            "%s, not on PATH): install vmem (meson install), or set VMEMD "
            "to the vmemd program, or pass vmemd=" % (
                path, INSTALLED_VMEMD, BUILD_VMEMD))
    rc = _spawn(prog, root, path)
    spawned = time.monotonic()
    deadline = spawned + START_WAIT_S
    delay = BACKOFF_FIRST_S
    respawn = RESPAWN_S
    last: Optional[OSError] = None
    while True:
        try:
            return connect(path)
        except OSError as e:
            last = e
            if not _absent(e) or time.monotonic() >= deadline:
                break
        if rc == EXIT_RUNNING and time.monotonic() - spawned >= respawn:
            respawn *= 2
            rc = _spawn(prog, root, path)
            spawned = time.monotonic()
            continue
        time.sleep(delay)
        delay = min(delay * 2, BACKOFF_MAX_S)
    why = last.strerror if last is not None and last.strerror else last
    if rc == EXIT_RUNNING:
        raise DaemonConnectionError(
            "a vmemd already serves %s but nothing answers on %s (another "
            "socket?): %s" % (root, path, why))
    raise DaemonConnectionError("cannot connect to %s after starting %s: %s"
                                % (path, prog, why))

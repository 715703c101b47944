"""VectorMemoryManager: the seed API on top of vmemd.

Thread-safe: each call borrows a connection from a small pool (opening a
new one when all are busy), so threads never share a connection and their
writes share the daemon's group commit. A connection is put back only when
its call ended cleanly; an idle connection the daemon has closed (a
restart) is dropped before reuse, and a forked child opens its own, so a
request is never sent into a dead connection. Read-only calls that lose
their connection midway are retried once on a fresh connection; writes are
not (their outcome is unknown).

The seed library wrote its files itself, so its users count on them:
store() returns once the decision's file is in the working tree, and
close() (also run by a finalizer when the manager is garbage-collected)
returns once the daemon holds nothing of this manager's writes that is
not yet written, synced and committed (server.flush), so the repository
can be deleted right after. The pool lives apart from the manager so
that the finalizer does not keep the manager alive.
"""

import os
import threading
import weakref
from typing import (Any, Dict, Iterable, List, Optional, Sequence, Tuple,
                    Union)

from .connection import Connection, connect, connect_or_start
from .discovery import PathLike, find_root, recorded_socket, socket_path
from .errors import (DaemonConnectionError, InvalidParamsError, QueryError,
                     StorageError, VectorMemoryError)
from .model import (HistoryEntry, StoredDecision, SyncResult,
                    VectorCoordinate)

__all__ = ["VectorMemoryManager"]

CoordLike = Union[VectorCoordinate, Tuple[int, int, int]]
Range = Optional[Sequence[int]]

DEFAULT_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0
MAX_IDLE = 8
CONTENT_MAX = 102400
VMDIR = ".vector-memory"

_READ_ONLY = frozenset({
    "server.hello", "server.health", "server.stats", "decision.get",
    "decision.exists", "decision.history", "decision.query_range",
    "decision.query_partial_order", "decision.search", "git.log",
    "git.rollback_point", "experience.get", "experience.retrieve",
    "experience.find_similar", "experience.stats",
})
_WRITES = frozenset({"decision.store", "decision.store_many",
                     "decision.delete", "experience.store",
                     "experience.delete"})


def _coord(value: CoordLike) -> Dict[str, int]:
    return VectorCoordinate.of(value).to_json()


def _range(name: str, value: Range) -> Optional[List[int]]:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise InvalidParamsError("%s must be a (min, max) pair, got %r"
                                 % (name, value))
    return list(value)


def _decisions(result: Any) -> List[StoredDecision]:
    if not isinstance(result, list):
        raise VectorMemoryError("expected a list of decisions, got %r"
                                % (result,))
    return [StoredDecision.from_json(item) for item in result]


def _content(content: Any) -> str:
    """The seed's content rule, checked before anything is sent."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidParamsError("content must be a non-empty string "
                                 "(not only whitespace)")
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > CONTENT_MAX:
        raise InvalidParamsError("content too large: %d bytes, more than "
                                 "%d" % (size, CONTENT_MAX))
    return content


class _Pool:
    """The connections of one manager, and whether it wrote anything the
    daemon may still hold (the finalizer's state: no reference to the
    manager)."""

    def __init__(self, root: str, sock: str, agent_id: str,
                 autostart: bool, timeout: Optional[float],
                 vmemd: Optional[str]) -> None:
        self.root = root
        self.socket_path = sock
        self.agent_id = agent_id
        self.autostart = autostart
        self.timeout = timeout
        self.vmemd = vmemd
        self.lock = threading.RLock()
        self.start_lock = threading.Lock()
        self.idle: List[Connection] = []
        self.closed = False
        self.pid = os.getpid()
        self.opened = 0
        self.server_info: Any = None
        self.unflushed = False  # a write since the last flush
        self.flush_error: Optional[BaseException] = None

    def open(self, autostart: Optional[bool] = None) -> Connection:
        with self.start_lock:
            conn = connect_or_start(
                self.root, self.socket_path,
                self.autostart if autostart is None else autostart,
                self.vmemd)
        try:
            hello = conn.call("server.hello",
                              {"agent_id": self.agent_id,
                               "client": "vmem-python", "protocol": 1},
                              self.timeout)
        except BaseException:
            conn.close()
            raise
        self.server_info = hello
        limits = hello.get("limits") if isinstance(hello, dict) else None
        max_x = limits.get("max_x") if isinstance(limits, dict) else None
        if isinstance(max_x, int) and max_x > VectorCoordinate.MAX_X:
            VectorCoordinate.MAX_X = max_x
        with self.lock:
            self.opened += 1
        return conn

    def acquire(self, probe: bool = True) -> Tuple[Connection, bool]:
        """A connection for one call, and whether it was reused. probe:
        check that a reused one is still alive (a read skips it: found
        dead, it is retried on a fresh connection anyway)."""
        while True:
            with self.lock:
                if self.closed:
                    raise DaemonConnectionError("the manager is closed")
                if self.pid != os.getpid():
                    # A forked child must not talk on its parent's
                    # connections: drop its copies, open its own.
                    for stale in self.idle:
                        stale.close()
                    self.idle = []
                    self.pid = os.getpid()
                conn = self.idle.pop() if self.idle else None
            if conn is None:
                return self.open(), False
            if not probe or conn.alive():
                return conn, True

    def release(self, conn: Connection) -> None:
        with self.lock:
            if not conn.broken and not self.closed and \
                    len(self.idle) < MAX_IDLE:
                self.idle.append(conn)
                return
        conn.close()

    def call(self, method: str, params: Optional[Dict[str, Any]],
             timeout: Optional[float], then: Optional[str] = None,
             then_params: Optional[Dict[str, Any]] = None) -> Any:
        """One call (and, with then, a second call on the same connection
        once the first succeeded; its result is dropped, its failure is a
        StorageError saying that the first one did happen)."""
        if method in _WRITES:
            with self.lock:
                self.unflushed = True
        for attempt in (1, 2):
            conn, reused = self.acquire(probe=method not in _READ_ONLY)
            try:
                result = conn.call(method, params, timeout)
                if then is not None:
                    try:
                        conn.call(then, then_params, timeout)
                    except VectorMemoryError as e:
                        raise StorageError(
                            "%s succeeded (the write is durable) but its "
                            "file is not in the working tree yet: %s"
                            % (method, e.message),
                            code=-32004,
                            data={"type": "StorageError",
                                  "reason": e.message}) from None
                return result
            except DaemonConnectionError:
                if attempt == 2 or not reused or method not in _READ_ONLY:
                    raise
            finally:
                self.release(conn)
        raise AssertionError("unreachable")

    def close(self, timeout: Optional[float]) -> None:
        """Wait (at most timeout seconds) until the daemon has written,
        synced and committed this manager's writes, then close every
        connection. Never raises: a failed wait is kept in
        flush_error."""
        with self.lock:
            if self.closed:
                return
            wanted = self.unflushed and self.pid == os.getpid()
            conn = self.idle.pop() if self.idle else None
        if wanted and timeout:
            try:
                if conn is None or not conn.alive():
                    conn = None
                    # A daemon that is gone holds nothing of ours: never
                    # start one just to ask.
                    conn = self.open(autostart=False)
                conn.call("server.flush",
                          {"timeout_ms": max(1, int(timeout * 1000))},
                          timeout + 5.0)
                self.unflushed = False
            except (VectorMemoryError, OSError) as e:
                if conn is not None and conn.broken:
                    conn = None
                self.flush_error = e
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        if conn is not None:
            idle.append(conn)
        for one in idle:
            one.close()


def _finalize(pool: _Pool) -> None:
    pool.close(CLOSE_TIMEOUT)


class VectorMemoryManager:
    """Store and query decisions of one git working tree through its
    vmemd (started on demand)."""

    def __init__(self, repo_path: PathLike, agent_id: str, *,
                 socket_path: Optional[str] = None,
                 autostart: Optional[bool] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 vmemd: Optional[str] = None) -> None:
        """Connect to (or start) the daemon serving the working tree that
        holds repo_path, and make sure ``.vector-memory/`` exists there.

        socket_path overrides the computed socket; autostart (default:
        true unless VMEM_NO_AUTOSTART=1) starts vmemd when nothing
        answers; timeout bounds each call in seconds (None: no bound);
        vmemd names the daemon program (default $VMEMD, else PATH).

        Raises StorageError ("Not a Git repository") when repo_path is not
        in a git working tree, ValueError when agent_id is empty or
        refused by the daemon, DaemonConnectionError when no daemon can be
        reached.
        """
        if not isinstance(agent_id, str) or not agent_id:
            raise InvalidParamsError("agent_id must be a non-empty string")
        self.agent_id = agent_id
        self.root = find_root(repo_path)
        self.socket_path = socket_path or _socket_path(self.root)
        if autostart is None:
            autostart = os.environ.get("VMEM_NO_AUTOSTART") != "1"
        self.autostart = autostart
        self.timeout = timeout
        self.last_reload: Optional[Dict[str, Any]] = None
        self._pool = _Pool(self.root, self.socket_path, agent_id,
                           autostart, timeout, vmemd)
        try:
            # The seed's constructor creates it; the daemon would only
            # with the first decision file.
            os.mkdir(os.path.join(self.root, VMDIR))
        except FileExistsError:
            pass
        except OSError as e:
            raise StorageError("cannot create %s in %s: %s"
                               % (VMDIR, self.root, e.strerror or e)) \
                from None
        conn = self._pool.open()
        self._pool.release(conn)
        self._finalizer = weakref.finalize(self, _finalize, self._pool)

    # -- connections -----------------------------------------------------

    @property
    def connections_opened(self) -> int:
        """Connections opened so far (the pool reuses them)."""
        return self._pool.opened

    @property
    def server_info(self) -> Any:
        """The daemon's answer to server.hello on the last connection
        opened."""
        return self._pool.server_info

    @property
    def closed(self) -> bool:
        return self._pool.closed

    @property
    def flush_error(self) -> Optional[BaseException]:
        """Why close() could not see this manager's writes committed
        (commits deferred by a rebase, a timeout...), else None. The
        writes are durable in the daemon either way."""
        return self._pool.flush_error

    def call(self, method: str, params: Optional[Dict[str, Any]] = None,
             timeout: Optional[float] = None) -> Any:
        """One raw JSON-RPC call (result as decoded JSON); errors raise
        the mapped exceptions. Connection state (leases, subscriptions)
        does not carry from one call to the next."""
        return self._pool.call(method, params,
                               self.timeout if timeout is None else timeout)

    def _write(self, method: str, params: Dict[str, Any],
               timeout_ms: Optional[int]) -> Any:
        """A write that returns once its file is in the working tree
        (server.flush until written, on the same connection)."""
        timeout = self._write_timeout(timeout_ms)
        flush: Dict[str, Any] = {"until": "written"}
        if timeout is not None:
            # The daemon gives up first, so the answer says why.
            flush["timeout_ms"] = max(1, min(600000, int(timeout * 900)))
        return self._pool.call(method, params, timeout, "server.flush",
                               flush)

    def _write_timeout(self, timeout_ms: Optional[int]) -> Optional[float]:
        """A write may wait timeout_ms for its lock: allow for it."""
        if self.timeout is None or timeout_ms is None:
            return self.timeout
        return max(self.timeout, timeout_ms / 1000.0 + 5.0)

    def close(self, timeout: Optional[float] = CLOSE_TIMEOUT) -> None:
        """Close the manager; the daemon keeps running. If this manager
        wrote anything, first wait, at most timeout seconds, until the
        daemon has written and synced its files, emptied its log and
        committed them (``server.flush``), so that nothing more is
        written into the repository on this manager's behalf and it may
        be deleted at once. A wait that fails (commits deferred, timeout)
        does not raise: see flush_error. Idempotent; also run, with the
        default timeout, when the manager is garbage-collected or at
        interpreter exit. timeout 0 or None: close without waiting."""
        self._pool.close(timeout)
        self._finalizer.detach()

    def __enter__(self) -> "VectorMemoryManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- storage ---------------------------------------------------------

    def store(self, coord: CoordLike, content: str,
              issue_context: Optional[Dict[str, str]] = None,
              overwrite: bool = True, *, if_version: Optional[int] = None,
              timeout_ms: Optional[int] = None) -> StoredDecision:
        """Store a decision, as the seed library does: z=1 is write-once
        (ImmutableLayerError); at z=2..4 a store replaces what is there
        (version + 1). overwrite=False refuses an occupied coordinate
        (CoordinateOccupiedError), as the wire protocol does by default;
        if_version=N replaces only version N (else ConcurrencyError).
        Returns once the write is durable and its file is in the working
        tree; committed to git in the background or on sync()."""
        params: Dict[str, Any] = {"coordinate": _coord(coord),
                                  "content": _content(content)}
        if issue_context is not None:
            if not isinstance(issue_context, dict):
                raise InvalidParamsError("issue_context must be a dict of "
                                         "str to str or None")
            params["issue_context"] = issue_context
        if not isinstance(overwrite, bool):
            raise InvalidParamsError("overwrite must be a bool")
        if if_version is not None:
            params["if_version"] = if_version
        elif overwrite:
            params["overwrite"] = True
        if timeout_ms is not None:
            params["timeout_ms"] = timeout_ms
        result = self._write("decision.store", params, timeout_ms)
        return StoredDecision.from_json(result)

    def store_many(self, items: Iterable[Dict[str, Any]], *,
                   timeout_ms: Optional[int] = None) -> List[StoredDecision]:
        """Store several decisions, all or nothing, with one log sync.
        Each item: coordinate, content, and optionally issue_context,
        overwrite, if_version (an occupied z=2..4 coordinate is replaced
        only with overwrite or if_version, as on the wire)."""
        wire = []
        for item in items:
            if not isinstance(item, dict):
                raise InvalidParamsError("store_many items are dicts")
            one = dict(item)
            if "coordinate" in one:
                one["coordinate"] = _coord(one["coordinate"])
            wire.append(one)
        params: Dict[str, Any] = {"items": wire}
        if timeout_ms is not None:
            params["timeout_ms"] = timeout_ms
        return _decisions(self._write("decision.store_many", params,
                                      timeout_ms))

    def get(self, coord: CoordLike) -> Optional[StoredDecision]:
        """The decision at coord, or None."""
        result = self.call("decision.get", {"coordinate": _coord(coord)})
        return None if result is None else StoredDecision.from_json(result)

    def exists(self, coord: CoordLike) -> bool:
        return bool(self.call("decision.exists",
                              {"coordinate": _coord(coord)}))

    def delete(self, coord: CoordLike, *, if_version: Optional[int] = None,
               timeout_ms: Optional[int] = None) -> bool:
        """Delete a z=2..4 decision; True if one existed (its file is gone
        when this returns). Any delete at z=1 raises
        ImmutableLayerError."""
        params: Dict[str, Any] = {"coordinate": _coord(coord)}
        if if_version is not None:
            params["if_version"] = if_version
        if timeout_ms is not None:
            params["timeout_ms"] = timeout_ms
        return bool(self._write("decision.delete", params, timeout_ms))

    def history(self, coord: CoordLike,
                limit: Optional[int] = None) -> List[HistoryEntry]:
        """Every version of coord, newest first (uncommitted state first,
        with commit None)."""
        params: Dict[str, Any] = {"coordinate": _coord(coord)}
        if limit is not None:
            params["limit"] = limit
        result = self.call("decision.history", params)
        return [HistoryEntry.from_json(item) for item in result]

    # -- queries ---------------------------------------------------------

    def query_range(self, x_range: Range = None, y_range: Range = None,
                    z_range: Range = None, *, limit: Optional[int] = None,
                    after: Optional[CoordLike] = None
                    ) -> List[StoredDecision]:
        """Decisions inside the inclusive (min, max) ranges (None: the
        whole axis), sorted by (x, y, z). QueryError when min > max."""
        params: Dict[str, Any] = {}
        for name, value in (("x_range", x_range), ("y_range", y_range),
                            ("z_range", z_range)):
            r = _range(name, value)
            if r is not None:
                params[name] = r
        if limit is not None:
            params["limit"] = limit
        if after is not None:
            params["after"] = _coord(after)
        return _decisions(self.call("decision.query_range", params))

    def query_partial_order(self, x_threshold: int, y_threshold: int,
                            z_filter: Optional[int] = None
                            ) -> List[StoredDecision]:
        """Decisions with (x, y) < (x_threshold, y_threshold): x smaller,
        or x equal and y smaller; sorted by (x, y, z). x_threshold may be
        max_x + 1 and y_threshold 6."""
        params: Dict[str, Any] = {"x_threshold": x_threshold,
                                  "y_threshold": y_threshold}
        if z_filter is not None:
            params["z_filter"] = z_filter
        return _decisions(self.call("decision.query_partial_order", params))

    def search_content(self, search_terms: Sequence[str],
                       match_all: bool = False, *,
                       limit: Optional[int] = None) -> List[StoredDecision]:
        """Decisions whose content holds any (or, with match_all, every)
        term, best first; each result has score and matched_terms. Terms
        are words or phrases; a trailing ``*`` makes a prefix. QueryError
        for an empty list or terms without words."""
        if isinstance(search_terms, (str, bytes)):
            raise InvalidParamsError("search_terms must be a list of "
                                     "strings, not a string")
        terms = list(search_terms)
        if not terms:
            raise QueryError("search_terms must not be empty", code=-32005,
                             data={"type": "QueryError"})
        params: Dict[str, Any] = {"terms": terms,
                                  "match_all": bool(match_all)}
        if limit is not None:
            params["limit"] = limit
        try:
            return _decisions(self.call("decision.search", params))
        except QueryError as e:
            raise QueryError("search_terms: %s" % e.message, code=e.code,
                             data=e.data) from None

    # -- git ---------------------------------------------------------------

    def sync(self, message: Optional[str] = None,
             timeout: Optional[float] = None) -> SyncResult:
        """Commit every decision written so far; returns what the commit
        holds (commit None when nothing was pending). StorageError while
        commits are deferred (rebase, detached HEAD, index.lock...)."""
        params = {} if message is None else {"message": message}
        return SyncResult.from_json(self.call("git.sync", params, timeout))

    def load_from_git(self) -> int:
        """Make the daemon's memory what the files say (after a checkout,
        pull or hand edit); returns the number of decisions held. Files
        that do not parse are quarantined (see last_reload). Calls from
        several threads share the daemon's reloads (each gets one that
        began after it asked)."""
        result = self.call("git.reload", {})
        self.last_reload = result
        return int(result["count"])

    def rollback_point(self, x_threshold: int,
                       y_threshold: int) -> Dict[str, Any]:
        """The newest commit holding only decisions before the
        threshold: {commit, subject, committed_at} (all None if none)."""
        return self.call("git.rollback_point",
                         {"x_threshold": x_threshold,
                          "y_threshold": y_threshold})

    # -- the server --------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        return self.call("server.health")

    def flush(self, until: str = "committed",
              timeout: float = CLOSE_TIMEOUT) -> Dict[str, Any]:
        """server.flush: wait until what was acknowledged is written
        (until="written") or written, synced and committed (the
        default), at most timeout seconds."""
        pool = self._pool
        with pool.lock:
            was, pool.unflushed = pool.unflushed, \
                pool.unflushed and until != "committed"
        try:
            return self.call("server.flush",
                             {"until": until,
                              "timeout_ms": max(1, int(timeout * 1000))},
                             timeout + 5.0)
        except BaseException:
            with pool.lock:
                pool.unflushed = pool.unflushed or was
            raise

    def shutdown_daemon(self) -> bool:
        """Ask the daemon to stop gracefully (it flushes and commits)."""
        result = bool(self.call("server.shutdown"))
        self.close(None)
        return result


def _socket_path(root: str) -> str:
    """$VMEM_SOCKET; else the socket the tree's daemon recorded, when a
    daemon answers there; else the rule."""
    if os.environ.get("VMEM_SOCKET"):
        return socket_path(root)
    recorded = recorded_socket(root)
    if recorded is not None:
        try:
            connect(recorded, timeout=1.0).close()
            return recorded
        except OSError:
            pass
    return socket_path(root)

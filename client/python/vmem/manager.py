"""VectorMemoryManager: the seed API on top of vmemd.

Thread-safe: each call borrows a connection from a small pool (opening a
new one when all are busy), so threads never share a connection and their
writes share the daemon's group commit. A connection is put back only when
its call ended cleanly; an idle connection the daemon has closed (a
restart) is dropped before reuse, and a forked child opens its own, so a request is never sent into a dead
connection. Read-only calls that lose their connection midway are retried
once on a fresh connection; writes are not (their outcome is unknown).
"""

import os
import threading
from typing import (Any, Dict, Iterable, List, Optional, Sequence, Tuple,
                    Union)

from .connection import Connection, connect, connect_or_start
from .discovery import PathLike, find_root, recorded_socket, socket_path
from .errors import (DaemonConnectionError, InvalidParamsError,
                     VectorMemoryError)
from .model import (HistoryEntry, StoredDecision, SyncResult,
                    VectorCoordinate)

__all__ = ["VectorMemoryManager"]

CoordLike = Union[VectorCoordinate, Tuple[int, int, int]]
Range = Optional[Sequence[int]]

DEFAULT_TIMEOUT = 30.0
MAX_IDLE = 8

_READ_ONLY = frozenset({
    "server.hello", "server.health", "server.stats", "decision.get",
    "decision.exists", "decision.history", "decision.query_range",
    "decision.query_partial_order", "decision.search", "git.log",
    "git.rollback_point",
})


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


class VectorMemoryManager:
    """Store and query decisions of one git working tree through its
    vmemd (started on demand)."""

    def __init__(self, repo_path: PathLike, agent_id: str, *,
                 socket_path: Optional[str] = None,
                 autostart: Optional[bool] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 vmemd: Optional[str] = None) -> None:
        """Connect to (or start) the daemon serving the working tree that
        holds repo_path.

        socket_path overrides the computed socket; autostart (default:
        true unless VMEM_NO_AUTOSTART=1) starts vmemd when nothing
        answers; timeout bounds each call in seconds (None: no bound);
        vmemd names the daemon program (default $VMEMD, else PATH).

        Raises StorageError when repo_path is not in a git working tree,
        ValueError when agent_id is empty or refused by the daemon,
        DaemonConnectionError when no daemon can be reached.
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
        self._vmemd = vmemd
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._idle: List[Connection] = []
        self._closed = False
        self._pid = os.getpid()
        self.connections_opened = 0
        conn = self._open()
        self._release(conn)

    # -- connections -----------------------------------------------------

    def _open(self) -> Connection:
        with self._start_lock:
            conn = connect_or_start(self.root, self.socket_path,
                                    self.autostart, self._vmemd)
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
        with self._lock:
            self.connections_opened += 1
        return conn

    def _acquire(self) -> Tuple[Connection, bool]:
        """A connection for one call, and whether it was reused."""
        while True:
            with self._lock:
                if self._closed:
                    raise DaemonConnectionError("the manager is closed")
                if self._pid != os.getpid():
                    # A forked child must not talk on its parent's
                    # connections: drop its copies, open its own.
                    for stale in self._idle:
                        stale.close()
                    self._idle = []
                    self._pid = os.getpid()
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open(), False
            if conn.alive():
                return conn, True

    def _release(self, conn: Connection) -> None:
        with self._lock:
            if not conn.broken and not self._closed and \
                    len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def call(self, method: str, params: Optional[Dict[str, Any]] = None,
             timeout: Optional[float] = None) -> Any:
        """One raw JSON-RPC call (result as decoded JSON); errors raise
        the mapped exceptions. Connection state (leases, subscriptions)
        does not carry from one call to the next."""
        if timeout is None:
            timeout = self.timeout
        for attempt in (1, 2):
            conn, reused = self._acquire()
            try:
                return conn.call(method, params, timeout)
            except DaemonConnectionError:
                if attempt == 2 or not reused or method not in _READ_ONLY:
                    raise
            finally:
                self._release(conn)
        raise AssertionError("unreachable")

    def _write_timeout(self, timeout_ms: Optional[int]) -> Optional[float]:
        """A write may wait timeout_ms for its lock: allow for it."""
        if self.timeout is None or timeout_ms is None:
            return self.timeout
        return max(self.timeout, timeout_ms / 1000.0 + 5.0)

    def close(self) -> None:
        """Close every connection (the daemon keeps running)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> "VectorMemoryManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- storage ---------------------------------------------------------

    def store(self, coord: CoordLike, content: str,
              issue_context: Optional[Dict[str, str]] = None,
              overwrite: bool = False, *, if_version: Optional[int] = None,
              timeout_ms: Optional[int] = None) -> StoredDecision:
        """Store a decision. z=1 is write-once (ImmutableLayerError); an
        occupied z=2..4 coordinate is replaced only with overwrite=True or
        a matching if_version (else CoordinateOccupiedError /
        ConcurrencyError). Durable when this returns; committed to git in
        the background or on sync()."""
        params: Dict[str, Any] = {"coordinate": _coord(coord)}
        if not isinstance(content, str) or not content:
            raise InvalidParamsError("content must be a non-empty string")
        params["content"] = content
        if issue_context is not None:
            if not isinstance(issue_context, dict):
                raise InvalidParamsError("issue_context must be a dict of "
                                         "str to str or None")
            params["issue_context"] = issue_context
        if not isinstance(overwrite, bool):
            raise InvalidParamsError("overwrite must be a bool")
        if overwrite:
            params["overwrite"] = True
        if if_version is not None:
            params["if_version"] = if_version
        if timeout_ms is not None:
            params["timeout_ms"] = timeout_ms
        result = self.call("decision.store", params,
                           self._write_timeout(timeout_ms))
        return StoredDecision.from_json(result)

    def store_many(self, items: Iterable[Dict[str, Any]], *,
                   timeout_ms: Optional[int] = None) -> List[StoredDecision]:
        """Store several decisions, all or nothing, with one log sync.
        Each item: coordinate, content, and optionally issue_context,
        overwrite, if_version."""
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
        return _decisions(self.call("decision.store_many", params,
                                    self._write_timeout(timeout_ms)))

    def get(self, coord: CoordLike) -> Optional[StoredDecision]:
        """The decision at coord, or None."""
        result = self.call("decision.get", {"coordinate": _coord(coord)})
        return None if result is None else StoredDecision.from_json(result)

    def exists(self, coord: CoordLike) -> bool:
        return bool(self.call("decision.exists",
                              {"coordinate": _coord(coord)}))

    def delete(self, coord: CoordLike, *, if_version: Optional[int] = None,
               timeout_ms: Optional[int] = None) -> bool:
        """Delete a z=2..4 decision; True if one existed. Any delete at
        z=1 raises ImmutableLayerError."""
        params: Dict[str, Any] = {"coordinate": _coord(coord)}
        if if_version is not None:
            params["if_version"] = if_version
        if timeout_ms is not None:
            params["timeout_ms"] = timeout_ms
        return bool(self.call("decision.delete", params,
                              self._write_timeout(timeout_ms)))

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
        are words or phrases; a trailing ``*`` makes a prefix."""
        if isinstance(search_terms, (str, bytes)):
            raise InvalidParamsError("search_terms must be a list of "
                                     "strings, not a string")
        params: Dict[str, Any] = {"terms": list(search_terms),
                                  "match_all": bool(match_all)}
        if limit is not None:
            params["limit"] = limit
        return _decisions(self.call("decision.search", params))

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
        that do not parse are quarantined (see last_reload)."""
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

    def shutdown_daemon(self) -> bool:
        """Ask the daemon to stop gracefully (it flushes and commits)."""
        result = bool(self.call("server.shutdown"))
        self.close()
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

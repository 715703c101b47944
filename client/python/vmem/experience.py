"""Experience memory: the API of the amplihack-memory-lib seed (004) on top
of vmemd, also importable as the package ``amplihack_memory``.

An agent records what it met (context), what it did (action) and what came
of it (outcome), with tags and an importance from 1 to 10, and later
retrieves its recent experiences, finds similar situations and reads
statistics. The experiences live in the daemon of the git working tree
(durable when acknowledged, committed to git in append-only shards under
``.vector-memory/experiences/``, merged between clones), so every agent of
a tree, and of its clones, learns from every other.

    from amplihack_memory import MemoryConnector, ExperienceStore

    with MemoryConnector() as conn:          # the working tree of "."
        store = ExperienceStore(conn)
        exp_id = store.store(agent_id="goal_seeker_1",
                             context="User requested file analysis",
                             action="Analyzed src/",
                             outcome="Found 142 Python files",
                             tags=["analysis"], importance=7)
        similar = store.find_similar("goal_seeker_1", "file analysis")

Differences from the seed, by design: there is no database file (db_path
names a place inside the working tree; the seed's "./memory.db" works, its
directory is used); find_similar ranks by BM25 over whole words (not
substring CONTAINS: "post" does not match "PostgreSQL", "post*" does) and
each result carries ``score`` and ``matched_terms``; QueryBuilder's helpers
return query objects that ExperienceStore.run() executes, not Cypher.
"""

import dataclasses
import os
import weakref
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Optional, Sequence, Union

from . import errors as _errors
from .discovery import PathLike, find_root
from .manager import (CLOSE_TIMEOUT, DEFAULT_TIMEOUT, _finalize, _Pool,
                      _socket_path)
from .model import parse_timestamp

__all__ = [
    "MemoryConnector",
    "ExperienceStore",
    "Experience",
    "ExperienceStats",
    "QueryBuilder",
    "ExperienceQuery",
    "MemoryLibError",
    "ConnectionError",
    "StorageError",
    "QueryError",
    "ValidationError",
]

_CONNECTOR_AGENT = "amplihack-memory"


# ---- errors -------------------------------------------------------------


class MemoryLibError(Exception):
    """Base exception for memory library."""


class ConnectionError(MemoryLibError):  # noqa: A001 (the seed's name)
    """Database connection failed: no daemon could be reached or started,
    or the path is not in a git working tree."""


class StorageError(MemoryLibError):
    """Experience storage failed (the daemon's StorageError, or a write
    whose answer was lost)."""


class QueryError(MemoryLibError):
    """Query execution failed: e.g. a find_similar context of nothing but
    stop words, or a time window that ends before it starts."""


class ValidationError(MemoryLibError, ValueError):
    """Input validation failed (an importance outside 1..10, an empty
    text, bad tags or metadata). Also a ValueError, as the seed's
    store() promises for the importance."""


def _translate(e: BaseException, write: bool) -> MemoryLibError:
    """The seed's exception for a vmem one."""
    if isinstance(e, _errors.InvalidParamsError):
        return ValidationError(str(e))
    if isinstance(e, _errors.QueryError):
        return QueryError(str(e))
    if isinstance(e, _errors.DaemonConnectionError):
        if write:
            return StorageError("the write's outcome is unknown (%s): read "
                                "it back" % e)
        return ConnectionError(str(e))
    if isinstance(e, (_errors.StorageError, _errors.ConcurrencyError,
                      _errors.UnavailableError)):
        return StorageError(str(e))
    return MemoryLibError(str(e))


# ---- data model ---------------------------------------------------------


def _utc(value: Union[str, datetime]) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return parse_timestamp(value)


def _rfc3339(value: datetime) -> str:
    """A datetime as the daemon reads it (a naive one is UTC)."""
    if not isinstance(value, datetime):
        raise ValidationError("a time must be a datetime, not %r"
                              % (value,))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()


@dataclasses.dataclass
class Experience:
    """Single agent experience record."""

    # Identity
    id: str
    agent_id: str

    # Content
    context: str
    action: str
    outcome: str

    # Metadata
    timestamp: datetime
    importance: int  # 1-10
    tags: List[str]
    metadata: Dict[str, Any]

    # Set on find_similar's results only: the BM25 relevance and the
    # words of the query that matched.
    score: Optional[float] = dataclasses.field(default=None, compare=False)
    matched_terms: Optional[List[str]] = dataclasses.field(default=None,
                                                           compare=False)

    def to_dict(self) -> Dict[str, Any]:
        """Convert to dictionary (the timestamp in ISO 8601)."""
        d = {
            "id": self.id,
            "agent_id": self.agent_id,
            "context": self.context,
            "action": self.action,
            "outcome": self.outcome,
            "timestamp": self.timestamp.isoformat(),
            "importance": self.importance,
            "tags": list(self.tags),
            "metadata": dict(self.metadata),
        }
        if self.score is not None:
            d["score"] = self.score
            d["matched_terms"] = list(self.matched_terms or [])
        return d

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Experience":
        """Create from dictionary (to_dict's, or the daemon's record)."""
        return cls(id=data["id"], agent_id=data["agent_id"],
                   context=data["context"], action=data["action"],
                   outcome=data["outcome"],
                   timestamp=_utc(data["timestamp"]),
                   importance=data.get("importance", 5),
                   tags=list(data.get("tags") or []),
                   metadata=dict(data.get("metadata") or {}),
                   score=data.get("score"),
                   matched_terms=data.get("matched_terms"))


@dataclasses.dataclass
class ExperienceStats:
    """Experience statistics for an agent (oldest and newest are None when
    it has none)."""

    agent_id: str
    total_count: int
    avg_importance: float
    oldest: Optional[datetime]
    newest: Optional[datetime]
    tag_distribution: Dict[str, int]  # tag -> count


# ---- connection ---------------------------------------------------------


class MemoryConnector:
    """The connection to the experience memory of a git working tree (its
    vmemd, started on demand)."""

    def __init__(self, db_path: Union[PathLike, None] = None,
                 *, timeout: Optional[float] = DEFAULT_TIMEOUT,
                 autostart: Optional[bool] = None,
                 vmemd: Optional[str] = None):
        """Initialize connector.

        Args:
            db_path: a path inside the git working tree (default: the
                current directory). A path that does not exist, such as
                the seed's "./memory.db", stands for its directory.

        Raises:
            ConnectionError: If database cannot be opened (not in a git
                working tree)
        """
        path = os.fspath(db_path) if db_path is not None else "."
        if not os.path.exists(path):
            path = os.path.dirname(os.path.abspath(path))
        try:
            self.root = find_root(path)
        except _errors.VectorMemoryError as e:
            raise ConnectionError(str(e)) from None
        if autostart is None:
            autostart = os.environ.get("VMEM_NO_AUTOSTART") != "1"
        self.timeout = timeout
        self._autostart = autostart
        self._vmemd = vmemd
        self._pool: Optional[_Pool] = None
        self._finalizer: Optional[weakref.finalize] = None

    @property
    def connected(self) -> bool:
        return self._pool is not None and not self._pool.closed

    def connect(self) -> "MemoryConnector":
        """Open database connection. Returns self for chaining."""
        if self.connected:
            return self
        pool = _Pool(self.root, _socket_path(self.root), _CONNECTOR_AGENT,
                     self._autostart, self.timeout, self._vmemd)
        try:
            pool.release(pool.open())
        except _errors.VectorMemoryError as e:
            raise ConnectionError(str(e)) from None
        self._pool = pool
        # Closed (and flushed) when the connector is collected, too.
        self._finalizer = weakref.finalize(self, _finalize, pool)
        return self

    def close(self) -> None:
        """Close database connection, once what was stored through it is
        written and committed (at most 10 s; it is durable either way).
        A store used afterwards connects again."""
        if self._pool is not None:
            self._pool.close(CLOSE_TIMEOUT)
        if self._finalizer is not None:
            self._finalizer.detach()

    def __enter__(self) -> "MemoryConnector":
        """Context manager entry."""
        return self.connect()

    def __exit__(self, *args: Any) -> None:
        """Context manager exit."""
        self.close()

    def verify_connectivity(self) -> bool:
        """Test database connectivity."""
        if not self.connected:
            return False
        try:
            health = self._call("server.health", None)
        except MemoryLibError:
            return False
        return isinstance(health, dict) and health.get("status") in (
            "ok", "degraded")

    def _call(self, method: str, params: Optional[Dict[str, Any]]) -> Any:
        if not self.connected:
            self.connect()  # closed since the store was made: again
        try:
            return self._pool.call(method, params, self.timeout)
        except _errors.VectorMemoryError as e:
            raise _translate(e, method in ("experience.store",
                                           "experience.delete")) from None


# ---- queries ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExperienceQuery:
    """A query of QueryBuilder, for ExperienceStore.run(): the method of
    the daemon it calls and its params (days: a window counted back from
    the moment it runs). Not Cypher: str() describes it."""

    method: str
    params: Dict[str, Any]
    days: Optional[float] = None

    def __str__(self) -> str:
        what = ", ".join("%s=%r" % kv for kv in sorted(self.params.items()))
        if self.days is not None:
            what += ", since=now-%gd" % self.days
        return "%s(%s)" % (self.method, what)


class QueryBuilder:
    """Helper for common query patterns. Each returns an ExperienceQuery
    that ExperienceStore.run() executes (not a Cypher string)."""

    @staticmethod
    def recent_by_tag(agent_id: str, tag: str, days: int = 7,
                      limit: int = 10) -> ExperienceQuery:
        """The agent's experiences holding tag, of the last days days,
        newest first."""
        return ExperienceQuery("experience.retrieve",
                               {"agent_id": agent_id, "tags": [tag],
                                "limit": limit}, days=days)

    @staticmethod
    def high_importance(agent_id: str, min_importance: int = 8,
                        limit: int = 10) -> ExperienceQuery:
        """The agent's experiences of at least min_importance, newest
        first."""
        return ExperienceQuery("experience.retrieve",
                               {"agent_id": agent_id,
                                "min_importance": min_importance,
                                "limit": limit})

    @staticmethod
    def context_contains(agent_id: str, keywords: Sequence[str],
                         limit: int = 10) -> ExperienceQuery:
        """The agent's experiences whose context (or action, outcome)
        holds the keywords as whole words, best match first (BM25; a
        keyword ending in * is a prefix)."""
        return ExperienceQuery("experience.find_similar",
                               {"agent_id": agent_id,
                                "context": " ".join(keywords),
                                "limit": limit})


# ---- the store ----------------------------------------------------------


def _check_importance(importance: Any) -> None:
    if isinstance(importance, bool) or not isinstance(importance, int) or \
            not 1 <= importance <= 10:
        raise ValidationError("importance must be an integer in 1..10, "
                              "not %r" % (importance,))


class ExperienceStore:
    """Store and retrieve agent experiences."""

    def __init__(self, connector: MemoryConnector):
        """Initialize store with database connector.

        Raises:
            ValueError: If connector not connected
        """
        if not isinstance(connector, MemoryConnector) or \
                not connector.connected:
            raise ValueError("the connector is not connected: call "
                             "connect() or use it in a with statement")
        self.connector = connector

    def store(self, agent_id: str, context: str, action: str, outcome: str,
              metadata: Optional[Dict[str, Any]] = None,
              tags: Optional[List[str]] = None,
              importance: int = 5) -> str:
        """Store a new experience; returns its id (a time-ordered UUIDv7).

        Raises:
            StorageError: If storage fails
            ValueError: If importance not in 1-10 range (ValidationError,
                also for empty texts, bad tags or metadata)
        """
        _check_importance(importance)
        params: Dict[str, Any] = {"agent_id": agent_id, "context": context,
                                  "action": action, "outcome": outcome,
                                  "importance": importance}
        if tags is not None:
            params["tags"] = list(tags)
        if metadata is not None:
            params["metadata"] = metadata
        return self.connector._call("experience.store", params)["id"]

    def retrieve(self, agent_id: str, limit: int = 10,
                 min_importance: int = 1, tags: Optional[List[str]] = None,
                 since: Optional[datetime] = None,
                 until: Optional[datetime] = None) -> List[Experience]:
        """The agent's experiences, newest first: at most limit (1..10000),
        of at least min_importance, holding every tag given, recorded at
        or after since (and at or before until).

        Raises:
            QueryError: If query fails
        """
        params: Dict[str, Any] = {"agent_id": agent_id, "limit": limit,
                                  "min_importance": min_importance}
        if tags:
            params["tags"] = list(tags)
        if since is not None:
            params["since"] = _rfc3339(since)
        if until is not None:
            params["until"] = _rfc3339(until)
        return self._list("experience.retrieve", params)

    def find_similar(self, agent_id: str, context: str,
                     limit: int = 5) -> List[Experience]:
        """The agent's experiences most like context, best first (BM25
        over context, action and outcome; each with score and
        matched_terms). agent_id None: every agent's.

        Raises:
            QueryError: If query fails (a context of only stop words)
        """
        params: Dict[str, Any] = {"context": context, "limit": limit}
        if agent_id is not None:
            params["agent_id"] = agent_id
        return self._list("experience.find_similar", params)

    def get_stats(self, agent_id: str) -> ExperienceStats:
        """Get statistics for agent's experiences."""
        s = self.connector._call("experience.stats", {"agent_id": agent_id})
        return ExperienceStats(
            agent_id=agent_id, total_count=s["total_count"],
            avg_importance=float(s["avg_importance"]),
            oldest=_utc(s["oldest"]) if s["oldest"] else None,
            newest=_utc(s["newest"]) if s["newest"] else None,
            tag_distribution=dict(s["tag_distribution"]))

    def get(self, experience_id: str) -> Optional[Experience]:
        """One experience by id, or None."""
        rec = self.connector._call("experience.get", {"id": experience_id})
        return Experience.from_dict(rec) if rec is not None else None

    def delete(self, experience_id: str, agent_id: Optional[str] = None
               ) -> bool:
        """Delete an experience (a tombstone, kept in git's history);
        True if it existed. agent_id: who deletes (default: the
        connector's name)."""
        return bool(self.connector._call(
            "experience.delete",
            {"id": experience_id, "agent_id": agent_id or _CONNECTOR_AGENT}))

    def run(self, query: ExperienceQuery) -> List[Experience]:
        """Execute a QueryBuilder query."""
        if not isinstance(query, ExperienceQuery):
            raise QueryError("run() takes a QueryBuilder query (these are "
                             "not Cypher strings)")
        params = dict(query.params)
        if query.days is not None:
            since = datetime.now(timezone.utc) - timedelta(days=query.days)
            params["since"] = _rfc3339(since)
        return self._list(query.method, params)

    def _list(self, method: str, params: Dict[str, Any]) -> List[Experience]:
        return [Experience.from_dict(r)
                for r in self.connector._call(method, params)]

"""vmem.aio: the seed's asyncio MemoryManager (conversation history,
documents with embeddings, semantic and temporal search) on top of vmemd.

Standard library only. Every method is a coroutine; each call opens its
own connection to the daemon of the working tree (found as the other
clients find it: the socket the daemon recorded, else the socket rule;
started on demand), sends one request and closes it, so the manager holds
nothing open between calls and concurrent calls share the daemon's group
commit. Writes return once durable.

Errors, as the seed says: ValueError for invalid input (the daemon's
ValueError arrives as InvalidParamsError, a ValueError), DatabaseError
for storage and connection failures. When the ``opentelemetry`` package
is importable, each request carries the current span's ``traceparent``
(params._meta), so the daemon's spans (--trace-file) join the caller's
trace.

    from vmem.aio import MemoryManager
    memory = MemoryManager()          # the working tree of the current dir
    sid = await memory.create_session("ada")
    await memory.store_message(sid, "user", "What is async programming?")
    history = await memory.get_conversation_history(sid, limit=10)
"""

import asyncio
import base64
import getpass
import json
import os
import socket
import struct
from datetime import datetime, timedelta
from typing import Any, Dict, List, Optional, Sequence
from uuid import UUID

from . import connection as _connection
from .discovery import PathLike, find_root, recorded_socket, socket_path
from .errors import (DaemonConnectionError, InvalidParamsError, ProtocolError,
                     QueryError, StorageError, UnavailableError,
                     VectorMemoryError, error_from_response)
from .memory import (AgentResponse, ApprovalRequest, Document, Message,
                     Session, ToolGapReport, ValidationError)
from .model import format_timestamp

try:  # pragma: no cover - depends on what is installed
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover
    _otel_trace = None

__all__ = [
    "MemoryManager",
    "DatabaseError",
    "ValidationError",
    "Session",
    "Message",
    "Document",
    "AgentResponse",
    "ToolGapReport",
    "ApprovalRequest",
]

DEFAULT_TIMEOUT = 30.0
MAX_LINE = 64 * 1024 * 1024
PAGE = 1000  # documents per temporal_query request


class DatabaseError(VectorMemoryError):
    """The memory could not be reached or could not store or read: no
    daemon, a broken connection, a storage failure (the daemon's
    StorageError, with ``reason``), a daemon shutting down."""


class _TooLarge(QueryError, ValueError):
    """An answer the daemon bounds (ask for fewer)."""


def _traceparent() -> Optional[str]:
    """The W3C traceparent of the current OpenTelemetry span, if any."""
    if _otel_trace is None:
        return None
    try:
        ctx = _otel_trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None
        return "00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id,
                                        int(ctx.trace_flags) & 0xFF)
    except Exception:  # a tracer that fails must not fail the call
        return None


def _as_uuid(name: str, value: Any) -> str:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(UUID(value))
        except ValueError:
            pass
    raise InvalidParamsError("%s must be a UUID, got %r" % (name, value))


def _as_time(name: str, value: Any) -> str:
    if not isinstance(value, datetime):
        raise InvalidParamsError("%s must be a datetime, got %r"
                                 % (name, value))
    return format_timestamp(value)


def _metadata(value: Any) -> Optional[Dict[str, Any]]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidParamsError("metadata must be a dict, got %r"
                                 % (value,))
    return value


def _embedding(name: str, value: Any) -> Optional[str]:
    """An embedding in the packed form the daemon takes: base64url of its
    values as little-endian float32 (what the daemon keeps). A quarter of
    the bytes of the JSON numbers, and neither side parses a number: for
    1536 dimensions it saves about 1 ms of each call's time here
    (json.dumps of the numbers, against struct.pack and base64) and
    0.2 ms of the daemon's."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise InvalidParamsError("%s must be a list of numbers" % name)
    try:
        raw = struct.pack("<%df" % len(value), *value)
    except (struct.error, TypeError, OverflowError):
        raw = None
    if raw is None or any(isinstance(x, bool) for x in value):
        for x in value:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InvalidParamsError(
                    "%s must hold numbers only, got %r" % (name, x))
            try:
                struct.pack("<f", x)
            except OverflowError:
                raise InvalidParamsError(
                    "%s holds %r, beyond float32" % (name, x)) from None
        raise InvalidParamsError("%s must be a list of numbers" % name)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _default_agent() -> str:
    env = os.environ.get("VMEM_AGENT_ID")
    if env:
        return env
    try:
        return getpass.getuser() or "memory-manager"
    except Exception:  # no user name in this environment
        return "memory-manager"


def _database_error(e: VectorMemoryError) -> Exception:
    """The seed's exception for a daemon error."""
    if isinstance(e, InvalidParamsError):
        return e
    if isinstance(e, QueryError):
        return _TooLarge(e.message, code=e.code, data=e.data)
    if isinstance(e, (StorageError, UnavailableError, DaemonConnectionError,
                      ProtocolError)):
        err = DatabaseError(e.message, code=e.code, data=e.data)
        err.__cause__ = e
        return err
    return e


class MemoryManager:
    """Async memory of conversations and documents, served by the vmemd
    of a git working tree."""

    def __init__(self, repo_path: Optional[PathLike] = None, *,
                 agent_id: Optional[str] = None,
                 socket_path: Optional[str] = None,
                 autostart: Optional[bool] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 vmemd: Optional[str] = None) -> None:
        """repo_path: any directory of the working tree (default: the
        current directory); agent_id: the user of sessions that
        store_message creates (default $VMEM_AGENT_ID, else the login
        name); socket_path overrides the discovered socket; autostart
        (default: true unless VMEM_NO_AUTOSTART=1) starts vmemd when
        nothing answers; timeout bounds each call in seconds.

        Raises StorageError ("Not a Git repository") when there is no
        working tree. Nothing is connected until the first call.
        """
        self.root = find_root(repo_path if repo_path is not None
                              else os.getcwd())
        self.agent_id = agent_id or _default_agent()
        self._socket = socket_path
        if autostart is None:
            autostart = os.environ.get("VMEM_NO_AUTOSTART") != "1"
        self.autostart = autostart
        self.timeout = timeout
        self.vmemd = vmemd
        self._next_id = 0

    # -- transport ------------------------------------------------------

    def _path(self) -> str:
        return self._socket or recorded_socket(self.root) or \
            socket_path(self.root)

    async def _open(self):
        path = self._path()
        try:
            return await asyncio.open_unix_connection(path, limit=MAX_LINE)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            if not self.autostart:
                raise DatabaseError("no daemon at %s: %s"
                                    % (path, e.strerror or e)) from None
        # Start it (blocking: in a thread), then connect again.
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(
                None, _connection.connect_or_start, self.root, path, True,
                self.vmemd)
        except DaemonConnectionError as e:
            raise DatabaseError(e.message) from e
        conn.close()
        path = self._path()
        return await asyncio.open_unix_connection(path, limit=MAX_LINE)

    @staticmethod
    def _check_peer(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        fmt = "3i"
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                              struct.calcsize(fmt))
        uid = struct.unpack(fmt, raw)[1]
        if uid not in (os.geteuid(), 0):
            raise DatabaseError("the socket is served by uid %d" % uid)

    async def _call(self, method: str, params: Dict[str, Any]) -> Any:
        """One request on a connection of its own; the result, or the
        mapped exception."""
        tp = _traceparent()
        if tp:
            params = dict(params, _meta={"traceparent": tp})
        self._next_id += 1
        rid = self._next_id
        line = _connection.encode_request(rid, method, params)
        try:
            reader, writer = await self._open()
        except OSError as e:
            raise DatabaseError("cannot connect to the daemon of %s: %s"
                                % (self.root, e.strerror or e)) from None
        try:
            self._check_peer(writer)
            writer.write(line)
            await writer.drain()
            resp = await asyncio.wait_for(self._response(reader, rid),
                                          self.timeout)
        except asyncio.TimeoutError:
            raise DatabaseError("no answer to %s in %s s" % (
                method, self.timeout)) from None
        except (OSError, EOFError, asyncio.IncompleteReadError) as e:
            raise DatabaseError("connection to the daemon broke during "
                                "%s: %s" % (method, e)) from None
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
        if "error" in resp:
            raise _database_error(error_from_response(resp["error"]))
        return resp.get("result")

    @staticmethod
    async def _response(reader: asyncio.StreamReader, rid: int) -> Dict:
        while True:
            line = await reader.readline()
            if not line.endswith(b"\n"):
                raise EOFError("the daemon closed the connection")
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                raise DatabaseError("unparsable line from the daemon: %r"
                                    % line[:200]) from None
            if not isinstance(msg, dict) or "id" not in msg:
                continue  # a notification
            if msg["id"] == rid or (msg["id"] is None and "error" in msg):
                return msg

    # -- sessions ---------------------------------------------------------

    async def create_session(self, user_id: str,
                             metadata: Optional[Dict[str, Any]] = None
                             ) -> UUID:
        """Create a session; its new id. ValueError: empty user_id."""
        if not isinstance(user_id, str) or not user_id:
            raise InvalidParamsError("user_id must be a non-empty string")
        params: Dict[str, Any] = {"user_id": user_id}
        if metadata is not None:
            params["metadata"] = _metadata(metadata)
        return Session.from_wire(
            await self._call("session.create", params)).id

    async def get_session(self, session_id: UUID) -> Optional[Session]:
        res = await self._call("session.get", {
            "session_id": _as_uuid("session_id", session_id)})
        return None if res is None else Session.from_wire(res)

    async def list_sessions(self, user_id: Optional[str] = None,
                            limit: int = 100) -> List[Session]:
        """Sessions by activity, newest first (every page)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or \
                limit <= 0:
            raise InvalidParamsError("limit must be a positive integer")
        out: List[Session] = []
        after = None
        while len(out) < limit:
            params: Dict[str, Any] = {"limit": min(limit - len(out), 1000)}
            if user_id is not None:
                params["user_id"] = user_id
            if after is not None:
                params["after"] = after
            page = await self._call("session.list", params)
            out += [Session.from_wire(s) for s in page]
            if len(page) < params["limit"]:
                break
            after = {"updated_at": page[-1]["updated_at"],
                     "id": page[-1]["id"]}
        return out

    async def delete_session(self, session_id: UUID) -> bool:
        """Delete a session and its messages; False if there was none."""
        return bool(await self._call("session.delete", {
            "session_id": _as_uuid("session_id", session_id)}))

    # -- messages ---------------------------------------------------------

    async def store_message(self, session_id: UUID, role: str, content: str,
                            metadata: Optional[Dict[str, Any]] = None
                            ) -> UUID:
        """Store a message (creating the session, for this manager's
        agent_id, if it does not exist); its new id. ValueError: a role
        other than user, assistant, system, or empty content."""
        if role not in ("user", "assistant", "system"):
            raise InvalidParamsError("role must be user, assistant or "
                                     "system, got %r" % (role,))
        if not isinstance(content, str) or not content:
            raise InvalidParamsError("content must be a non-empty string")
        params: Dict[str, Any] = {
            "session_id": _as_uuid("session_id", session_id), "role": role,
            "content": content, "user_id": self.agent_id}
        if metadata is not None:
            params["metadata"] = _metadata(metadata)
        return Message.from_wire(
            await self._call("message.store", params)).id

    async def get_conversation_history(self, session_id: UUID,
                                       limit: int = 100) -> List[Message]:
        """The most recent limit messages, oldest first ([] for an
        unknown session). ValueError: limit <= 0."""
        if isinstance(limit, bool) or not isinstance(limit, int) or \
                limit <= 0:
            raise InvalidParamsError("limit must be a positive integer, "
                                     "got %r" % (limit,))
        res = await self._call("message.history", {
            "session_id": _as_uuid("session_id", session_id),
            "limit": limit})
        return [Message.from_wire(m) for m in res]

    # -- documents --------------------------------------------------------

    async def store_document(self, content: str,
                             metadata: Optional[Dict[str, Any]] = None,
                             embedding: Optional[Sequence[float]] = None
                             ) -> UUID:
        """Store a document; its new id. ValueError: empty content, an
        embedding of another dimension than the tree's."""
        if not isinstance(content, str) or not content:
            raise InvalidParamsError("content must be a non-empty string")
        params: Dict[str, Any] = {"content": content}
        if metadata is not None:
            params["metadata"] = _metadata(metadata)
        if embedding is not None:
            params["embedding"] = _embedding("embedding", embedding)
        res = await self._call("document.store", params)
        return UUID(res["id"])

    async def get_document(self, document_id: UUID,
                           include_embedding: bool = True
                           ) -> Optional[Document]:
        res = await self._call("document.get", {
            "id": _as_uuid("document_id", document_id),
            "include_embedding": bool(include_embedding)})
        return None if res is None else Document.from_wire(res)

    async def update_document(self, document_id: UUID, *,
                              content: Optional[str] = None,
                              metadata: Optional[Dict[str, Any]] = None,
                              embedding: Optional[Sequence[float]] = None,
                              clear_embedding: bool = False
                              ) -> Optional[Document]:
        """Change what is given; None when there is no such document."""
        params: Dict[str, Any] = {"id": _as_uuid("document_id",
                                                  document_id)}
        if content is not None:
            params["content"] = content
        if metadata is not None:
            params["metadata"] = _metadata(metadata)
        if embedding is not None:
            params["embedding"] = _embedding("embedding", embedding)
        elif clear_embedding:
            params["embedding"] = None
        res = await self._call("document.update", params)
        return None if res is None else Document.from_wire(res)

    async def delete_document(self, document_id: UUID) -> bool:
        return bool(await self._call("document.delete", {
            "id": _as_uuid("document_id", document_id)}))

    async def semantic_search(self, query_embedding: Sequence[float],
                              top_k: int = 10,
                              metadata_filters: Optional[Dict[str, Any]]
                              = None, *, exact: bool = False
                              ) -> List[Document]:
        """The top_k documents most similar to query_embedding (cosine),
        best first, among those whose metadata contains metadata_filters
        (jsonb @>); each with its ``score``. ValueError: a query of
        another dimension than the tree's, top_k <= 0."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or \
                top_k <= 0:
            raise InvalidParamsError("top_k must be a positive integer, "
                                     "got %r" % (top_k,))
        params: Dict[str, Any] = {
            "query_embedding": _embedding("query_embedding",
                                          query_embedding),
            "top_k": top_k}
        if metadata_filters is not None:
            params["metadata_filters"] = _metadata(metadata_filters)
        if exact:
            params["exact"] = True
        res = await self._call("document.semantic_search", params)
        return [Document.from_wire(d) for d in res]

    async def temporal_query(self, start_date: datetime, end_date: datetime,
                             metadata_filters: Optional[Dict[str, Any]]
                             = None) -> List[Document]:
        """Every document created in [start_date, end_date] (inclusive;
        naive datetimes are UTC), newest first, among those whose
        metadata contains metadata_filters. ValueError: end_date before
        start_date."""
        start = _as_time("start_date", start_date)
        end = _as_time("end_date", end_date)
        if end < start:
            raise InvalidParamsError("end_date is before start_date")
        out: List[Document] = []
        while True:
            params: Dict[str, Any] = {"start": start, "end": end,
                                      "limit": PAGE}
            if metadata_filters is not None:
                params["metadata_filters"] = _metadata(metadata_filters)
            page = await self._call("document.temporal_query", params)
            out += [Document.from_wire(d) for d in page]
            if len(page) < PAGE:
                return out
            # Creation times are unique: go on just before the last one.
            last = out[-1].created_at - timedelta(microseconds=1)
            if format_timestamp(last) < start:
                return out
            end = format_timestamp(last)

    # -- health -----------------------------------------------------------

    async def health_check(self) -> Dict[str, Any]:
        """{"status": "healthy" | "degraded" | "unhealthy", and the
        versions of what serves the data in the seed's names:
        "postgres_version" (vmemd's), "pgvector_version" (the vector
        index library's)}, with the daemon's health under "vmem".
        DatabaseError when no daemon answers."""
        h = await self._call("server.health", {})
        status = {"ok": "healthy", "degraded": "degraded"}.get(
            h.get("status"), "unhealthy")
        versions = h.get("versions") or {}
        return {"status": status,
                "postgres_version": "vmemd %s" % versions.get(
                    "vmemd", h.get("version")),
                "pgvector_version": versions.get("hnsw", "unknown"),
                "counts": h.get("counts"),
                "vmem": h}

    # -- lifetime ---------------------------------------------------------

    async def close(self) -> None:
        """Nothing stays open between calls; here for symmetry."""

    async def __aenter__(self) -> "MemoryManager":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


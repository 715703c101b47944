"""The exception hierarchy of the vmem client, and the mapping from the
daemon's JSON-RPC errors (``error.data.type``, else ``error.code``) to it.

Every exception raised for a daemon error carries ``code`` (the JSON-RPC
code), ``type`` (``data.type`` or None), ``data`` (the error's ``data``
object or None) and ``message``.
"""

from typing import Any, Dict, Optional

__all__ = [
    "VectorMemoryError",
    "CoordinateValidationError",
    "ImmutableLayerError",
    "ConcurrencyError",
    "StorageError",
    "QueryError",
    "CoordinateOccupiedError",
    "UnavailableError",
    "ConflictError",
    "DaemonConnectionError",
    "InvalidParamsError",
    "ProtocolError",
    "error_from_response",
]


class VectorMemoryError(Exception):
    """Base exception for all vector memory errors."""

    def __init__(self, message: str = "", *, code: Optional[int] = None,
                 data: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = data

    @property
    def type(self) -> Optional[str]:
        """The daemon's ``data.type`` name, or None."""
        if isinstance(self.data, dict):
            value = self.data.get("type")
            return value if isinstance(value, str) else None
        return None


class CoordinateValidationError(VectorMemoryError):
    """Coordinate values out of range or invalid (-32001)."""


class ImmutableLayerError(VectorMemoryError):
    """Attempt to overwrite or delete in the write-once layer z=1
    (-32002)."""


class ConcurrencyError(VectorMemoryError):
    """Lock wait timed out, or ``if_version`` did not match (-32003)."""


class StorageError(VectorMemoryError):
    """File system or git failure (-32004), or a repository path that is
    not a git working tree. ``reason`` repeats the daemon's
    ``data.reason``."""

    @property
    def reason(self) -> Optional[str]:
        if isinstance(self.data, dict):
            value = self.data.get("reason")
            return value if isinstance(value, str) else None
        return None


class QueryError(VectorMemoryError):
    """Query parameters invalid: a range with min > max, empty or
    word-less search terms (-32005)."""


class CoordinateOccupiedError(VectorMemoryError):
    """A plain store on an occupied z=2..4 coordinate (-32006): pass
    ``overwrite=True`` or ``if_version`` to replace it."""


class UnavailableError(VectorMemoryError):
    """The daemon is shutting down or serves too many connections
    (-32007)."""


class ConflictError(VectorMemoryError):
    """A write to a coordinate whose file is in a git conflict (-32008):
    resolve it (``vmem resolve``, or git) and write again."""


class DaemonConnectionError(UnavailableError):
    """No daemon could be reached or started, the connection broke, or no
    answer came in time. A write whose answer never arrived may or may
    not have happened: read it back."""


class InvalidParamsError(VectorMemoryError, ValueError):
    """Bad parameters (-32602): empty or oversized content, bad agent id
    or issue context, ill-typed member. Also a ``ValueError``."""


class ProtocolError(VectorMemoryError):
    """A JSON-RPC level failure (-32700, -32600, -32601, -32603) or a
    malformed message from the daemon."""


_BY_TYPE = {
    "ValueError": InvalidParamsError,
    "CoordinateValidationError": CoordinateValidationError,
    "ImmutableLayerError": ImmutableLayerError,
    "ConcurrencyError": ConcurrencyError,
    "StorageError": StorageError,
    "QueryError": QueryError,
    "CoordinateOccupiedError": CoordinateOccupiedError,
    "UnavailableError": UnavailableError,
    "ConflictError": ConflictError,
}

_BY_CODE = {
    -32602: InvalidParamsError,
    -32001: CoordinateValidationError,
    -32002: ImmutableLayerError,
    -32003: ConcurrencyError,
    -32004: StorageError,
    -32005: QueryError,
    -32006: CoordinateOccupiedError,
    -32007: UnavailableError,
    -32008: ConflictError,
}


def error_from_response(error: Any) -> VectorMemoryError:
    """The exception for a JSON-RPC ``error`` member (not raised)."""
    if not isinstance(error, dict):
        return ProtocolError("malformed error from the daemon: %r"
                             % (error,))
    code = error.get("code")
    message = error.get("message")
    if not isinstance(message, str):
        message = "error %r from the daemon" % (code,)
    data = error.get("data")
    if not isinstance(data, dict):
        data = None
    cls = None
    if data is not None and isinstance(data.get("type"), str):
        cls = _BY_TYPE.get(data["type"])
    if cls is None and isinstance(code, int) and not isinstance(code, bool):
        cls = _BY_CODE.get(code)
    if cls is None:
        cls = ProtocolError
    return cls(message, code=code if isinstance(code, int) else None,
               data=data)

"""vmem: Python client of vmemd, the vector memory daemon (standard library
only, Python 3.9+).

    from vmem import VectorMemoryManager, VectorCoordinate
    m = VectorMemoryManager("/path/to/repo", agent_id="claude-code-01")
    m.store(VectorCoordinate(5, 2, 1), "Use PostgreSQL for persistence")
"""

from .discovery import find_root, fnv1a64, socket_key, socket_path
from .errors import (ConcurrencyError, ConflictError,
                     CoordinateOccupiedError, CoordinateValidationError,
                     DaemonConnectionError, ImmutableLayerError,
                     InvalidParamsError, ProtocolError, QueryError,
                     StorageError, UnavailableError, VectorMemoryError,
                     error_from_response)
from .manager import VectorMemoryManager
from .model import (HistoryEntry, StoredDecision, SyncResult,
                    VectorCoordinate, format_timestamp, parse_timestamp)

__version__ = "0.1.0"

__all__ = [
    "VectorMemoryManager",
    "VectorCoordinate",
    "StoredDecision",
    "HistoryEntry",
    "SyncResult",
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
    "find_root",
    "fnv1a64",
    "socket_key",
    "socket_path",
    "format_timestamp",
    "parse_timestamp",
]

"""vmem: Python client of vmemd, the vector memory daemon (standard library
only, Python 3.9+).

    from vmem import VectorMemoryManager, VectorCoordinate
    with VectorMemoryManager("/path/to/repo", agent_id="claude-code-01") as m:
        m.store(VectorCoordinate(5, 2, 1), "Use PostgreSQL for persistence")
"""

from .discovery import find_root, fnv1a64, socket_key, socket_path
from .errors import (ConcurrencyError, ConflictError,
                     CoordinateOccupiedError, CoordinateValidationError,
                     DaemonConnectionError, ImmutableLayerError,
                     InvalidParamsError, ProtocolError, QueryError,
                     StorageError, UnavailableError, VectorMemoryError,
                     error_from_response)
from .index import MemoryIndex
from .layers import MemoryLayer
from .manager import VectorMemoryManager
from .model import (HistoryEntry, StoredDecision, SyncResult,
                    VectorCoordinate, format_timestamp, parse_timestamp)
from .query import PartialOrder

__version__ = "0.1.0"

__all__ = [
    "VectorMemoryManager",
    "VectorCoordinate",
    "StoredDecision",
    "MemoryLayer",
    "PartialOrder",
    "MemoryIndex",
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

"""Rename-only shim: the seed library's package names, re-exporting the
names of our public vmem package and nothing else."""
from vmem import (ConcurrencyError, CoordinateValidationError,  # noqa: F401
                  ImmutableLayerError, MemoryIndex, MemoryLayer,
                  PartialOrder, QueryError, StorageError, StoredDecision,
                  VectorCoordinate, VectorMemoryError, VectorMemoryManager)

__all__ = ["VectorMemoryManager", "VectorCoordinate", "StoredDecision",
           "MemoryLayer", "PartialOrder", "MemoryIndex", "VectorMemoryError",
           "CoordinateValidationError", "ImmutableLayerError",
           "ConcurrencyError", "StorageError", "QueryError"]

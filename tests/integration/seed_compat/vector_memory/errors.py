"""Rename-only shim (see __init__)."""
from vmem import (ConcurrencyError, CoordinateValidationError,  # noqa: F401
                  ImmutableLayerError, QueryError, StorageError,
                  VectorMemoryError)

"""Rename-only shim (see __init__)."""
from vmem import StoredDecision, VectorCoordinate  # noqa: F401

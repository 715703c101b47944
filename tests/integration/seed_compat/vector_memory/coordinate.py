"""Rename-only shim (see __init__)."""
from vmem import VectorCoordinate  # noqa: F401

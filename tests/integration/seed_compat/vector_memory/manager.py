"""Rename-only shim (see __init__)."""
from vmem import VectorMemoryManager  # noqa: F401

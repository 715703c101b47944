"""Rename-only shim (see __init__)."""
from vmem import MemoryIndex  # noqa: F401

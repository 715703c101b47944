"""Rename-only shim (see __init__)."""
from vmem import MemoryLayer  # noqa: F401

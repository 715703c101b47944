"""Rename-only shim: the package name of the seed-003 framework's users
(``from core.memory import MemoryManager``)."""

"""amplihack_memory: the seed 004 package name of vmem's experience memory
(vmem.experience), re-exported unchanged.

    from amplihack_memory import MemoryConnector, ExperienceStore
"""

from vmem.experience import (ConnectionError, Experience,  # noqa: A004
                             ExperienceQuery, ExperienceStats,
                             ExperienceStore, MemoryConnector,
                             MemoryLibError, QueryBuilder, QueryError,
                             StorageError, ValidationError)

__all__ = [
    "MemoryConnector",
    "ExperienceStore",
    "Experience",
    "ExperienceStats",
    "QueryBuilder",
    "ExperienceQuery",
    "MemoryLibError",
    "ConnectionError",
    "StorageError",
    "QueryError",
    "ValidationError",
]

"""MemoryLayer: the four layers of z and their write rules, as the seed
library names them (its ``MemoryLayer``). The daemon enforces the same
rules on every write; these checks are for callers that want to know
before asking.
"""

from enum import Enum
from typing import Any

from .errors import CoordinateValidationError, ImmutableLayerError

__all__ = ["MemoryLayer"]


class MemoryLayer(Enum):
    """A layer: ``MemoryLayer(z)`` or ``MemoryLayer.get_layer(z)``; the
    value is z. ``layer_name`` is the seed's layer name ("Architecture"),
    ``is_immutable`` true for the write-once z=1."""

    ARCHITECTURE = 1
    INTERFACES = 2
    IMPLEMENTATION = 3
    EPHEMERAL = 4

    @property
    def z(self) -> int:
        return self.value

    @property
    def layer_name(self) -> str:
        return self.name.capitalize()

    @property
    def is_immutable(self) -> bool:
        return self is MemoryLayer.ARCHITECTURE

    @classmethod
    def get_layer(cls, z: Any) -> "MemoryLayer":
        """The layer of z (1..4); CoordinateValidationError otherwise."""
        if isinstance(z, bool) or not isinstance(z, int) or \
                not 1 <= z <= 4:
            raise CoordinateValidationError(
                "z must be in [1, 2, 3, 4], got %r" % (z,))
        return cls(z)

    def validate_write(self, coord: Any, existing_decision: Any) -> None:
        """Raise ImmutableLayerError when a write at coord would replace
        existing_decision (not None) in the write-once layer."""
        if self.is_immutable and existing_decision is not None:
            raise ImmutableLayerError(
                "Cannot modify decision at %s in %s layer: the layer is "
                "immutable (write-once)" % (coord, self.layer_name))

    def validate_delete(self, coord: Any) -> bool:
        """False: the seed's API has no delete, so its rule is that no
        layer allows one. (VectorMemoryManager.delete() follows the
        daemon: z=2..4 may be deleted, z=1 never.)"""
        return False

    def __str__(self) -> str:
        return self.layer_name

"""PartialOrder: the seed library's ordering of (x, y) positions in the
DAG x cycle space, for rollback reasoning on the client side.

(x1, y1) < (x2, y2) when x1 <= x2 and y1 <= y2 and they differ: an
earlier or equal issue at an earlier or equal stage. It is a partial
order: (3, 4) and (5, 2) are incomparable. These are the seed's own
examples; note that decision.query_partial_order (the daemon's query) is
a different, total rule: x < X, or x = X and y < Y.
"""

from typing import Any, Iterable, List, Tuple

from .errors import CoordinateValidationError

__all__ = ["PartialOrder"]

Position = Tuple[int, int]


def _xy(value: Any) -> Position:
    """(x, y) of a VectorCoordinate, an (x, y) or an (x, y, z)."""
    if hasattr(value, "x") and hasattr(value, "y"):
        return (value.x, value.y)
    if isinstance(value, (tuple, list)) and len(value) in (2, 3):
        x, y = value[0], value[1]
        if all(isinstance(v, int) and not isinstance(v, bool)
               for v in (x, y)):
            return (x, y)
    raise CoordinateValidationError(
        "expected (x, y), (x, y, z) or a VectorCoordinate, got %r"
        % (value,))


class PartialOrder:
    """Static methods on (x, y) positions (or coordinates: z is
    ignored)."""

    @staticmethod
    def less_equal(a: Any, b: Any) -> bool:
        """a <= b: a is b, or before it."""
        (x1, y1), (x2, y2) = _xy(a), _xy(b)
        return x1 <= x2 and y1 <= y2

    @staticmethod
    def less_than(a: Any, b: Any) -> bool:
        """a < b: a <= b and a is not b."""
        return PartialOrder.less_equal(a, b) and _xy(a) != _xy(b)

    @staticmethod
    def greater_than(a: Any, b: Any) -> bool:
        return PartialOrder.less_than(b, a)

    @staticmethod
    def comparable(a: Any, b: Any) -> bool:
        """True unless neither a <= b nor b <= a ((3, 4) and (5, 2))."""
        return PartialOrder.less_equal(a, b) or \
            PartialOrder.less_equal(b, a)

    @staticmethod
    def find_before(coords: Iterable[Any], threshold: Any) -> List[Any]:
        """The items of coords strictly before threshold, in their
        order."""
        return [c for c in coords if PartialOrder.less_than(c, threshold)]

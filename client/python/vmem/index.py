"""MemoryIndex: the seed library's in-memory index of coordinates, kept
by callers that want one of their own (the daemon keeps the authoritative
index; VectorMemoryManager does not use this one).

coords maps (x, y, z) to the decision file's path; metadata to the
metadata given to add(); content_index a lower-cased word to the
coordinates whose content holds it; layer_index z to its coordinates, in
(x, y, z) order.
"""

import os
import re
from pathlib import Path
from typing import (Any, Dict, Iterable, List, Optional, Sequence, Set,
                    Tuple, Union)

from .errors import QueryError
from .model import StoredDecision, VectorCoordinate

__all__ = ["MemoryIndex"]

Key = Tuple[int, int, int]
_WORD = re.compile(r"\w+")


def _key(coord: Any) -> Key:
    return VectorCoordinate.of(coord).to_tuple()


def _words(text: str) -> Set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def _check_range(name: str, r: Optional[Sequence[int]]) -> None:
    if r is not None and (len(r) != 2 or r[0] > r[1]):
        raise QueryError("%s must be (min, max) with min <= max, got %r"
                         % (name, r))


class MemoryIndex:
    """Coordinates, their metadata, and word and layer indexes."""

    def __init__(self) -> None:
        self.coords: Dict[Key, Path] = {}
        self.metadata: Dict[Key, Dict[str, Any]] = {}
        self.content_index: Dict[str, Set[Key]] = {}
        self.layer_index: Dict[int, List[Key]] = {z: [] for z in (1, 2, 3,
                                                                  4)}
        #: (path, why) of the files the last rebuild() could not index.
        self.skipped: List[Tuple[Path, str]] = []

    def __len__(self) -> int:
        return len(self.coords)

    def __contains__(self, coord: Any) -> bool:
        return _key(coord) in self.coords

    def add(self, coord: Any, metadata: Optional[Dict[str, Any]] = None
            ) -> None:
        """Index coord with metadata (a dict; its "content", if any, is
        indexed by word). Adding a coordinate again replaces it."""
        key = _key(coord)
        if key in self.coords:
            self.remove(key)
        meta = dict(metadata or {})
        self.coords[key] = VectorCoordinate(*key).to_path()
        self.metadata[key] = meta
        content = meta.get("content")
        if isinstance(content, str):
            for word in _words(content):
                self.content_index.setdefault(word, set()).add(key)
        layer = self.layer_index[key[2]]
        layer.append(key)
        layer.sort()

    def remove(self, coord: Any) -> bool:
        """Forget coord (its file is not touched); True if it was
        indexed."""
        key = _key(coord)
        if key not in self.coords:
            return False
        del self.coords[key]
        meta = self.metadata.pop(key)
        content = meta.get("content")
        if isinstance(content, str):
            for word in _words(content):
                keys = self.content_index.get(word)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self.content_index[word]
        self.layer_index[key[2]].remove(key)
        return True

    def query_exact(self, coord: Any) -> Optional[Dict[str, Any]]:
        """The metadata of coord, or None."""
        return self.metadata.get(_key(coord))

    def query_range(self, x_range: Optional[Sequence[int]] = None,
                    y_range: Optional[Sequence[int]] = None,
                    z_range: Optional[Sequence[int]] = None) -> List[Key]:
        """Coordinates inside the inclusive ranges, in (x, y, z) order;
        QueryError when a range has min > max."""
        for name, r in (("x_range", x_range), ("y_range", y_range),
                        ("z_range", z_range)):
            _check_range(name, r)

        def inside(v: int, r: Optional[Sequence[int]]) -> bool:
            return r is None or r[0] <= v <= r[1]
        return sorted(k for k in self.coords
                      if inside(k[0], x_range) and inside(k[1], y_range)
                      and inside(k[2], z_range))

    def query_partial_order(self, x_threshold: int, y_threshold: int,
                            z_filter: Optional[int] = None) -> List[Key]:
        """Coordinates with x < x_threshold, or x = x_threshold and
        y < y_threshold (the manager's query_partial_order rule), in
        (x, y, z) order."""
        return sorted(k for k in self.coords
                      if (k[0] < x_threshold or
                          (k[0] == x_threshold and k[1] < y_threshold))
                      and (z_filter is None or k[2] == z_filter))

    def query_content(self, search_terms: Iterable[str],
                      match_all: bool = False) -> List[Key]:
        """Coordinates whose content holds the words of any (match_all:
        every) term, most terms matched first, then (x, y, z). QueryError
        for no terms or a term without words."""
        terms = [t for t in search_terms] if not isinstance(
            search_terms, str) else [search_terms]
        if not terms:
            raise QueryError("search_terms must not be empty")
        score: Dict[Key, int] = {}
        for term in terms:
            words = _words(term) if isinstance(term, str) else set()
            if not words:
                raise QueryError("search_terms: %r has no words" % (term,))
            hits: Optional[Set[Key]] = None
            for word in words:
                found = self.content_index.get(word, set())
                hits = set(found) if hits is None else hits & found
            for key in hits or ():
                score[key] = score.get(key, 0) + 1
        wanted = len(terms) if match_all else 1
        return sorted((k for k, n in score.items() if n >= wanted),
                      key=lambda k: (-score[k], k))

    def rebuild(self, root: Union[str, "os.PathLike[str]"]) -> int:
        """Index every decision file under root (a working tree, or its
        .vector-memory directory) afresh; returns how many. Files that
        do not parse are listed in skipped (the daemon quarantines
        them)."""
        base = Path(root)
        if base.name != ".vector-memory":
            base = base / ".vector-memory"
        self.__init__()  # type: ignore[misc]
        for path in sorted(base.glob("x-*/y-*-z-*.json")):
            try:
                coord = VectorCoordinate.from_path(path)
                d = StoredDecision.from_file(path)
            except (ValueError, OSError) as e:
                self.skipped.append((path, str(e)))
                continue
            if d.coordinate != coord:
                self.skipped.append((path, "coordinate %s does not match "
                                     "its path" % (d.coordinate,)))
                continue
            self.add(coord, {"content": d.content, "agent_id": d.agent_id,
                             "timestamp": d.timestamp,
                             "issue_context": d.issue_context,
                             "version": d.version})
        return len(self.coords)

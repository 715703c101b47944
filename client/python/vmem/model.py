"""Value types of the vmem client: VectorCoordinate, StoredDecision,
HistoryEntry and SyncResult, with their wire (JSON) forms.

A VectorCoordinate is valid by construction (x in 1..MAX_X, y in 1..5,
z in 1..4, each a plain int). Timestamps are timezone-aware UTC datetimes;
on the wire they are RFC 3339 with six fraction digits and ``Z``.
"""

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePath
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Union

from .errors import CoordinateValidationError

__all__ = [
    "VectorCoordinate",
    "StoredDecision",
    "HistoryEntry",
    "SyncResult",
    "format_timestamp",
    "parse_timestamp",
]

LAYER_NAMES = {1: "Architecture", 2: "Interfaces", 3: "Implementation",
               4: "Ephemeral"}
STAGE_NAMES = {1: "architect", 2: "test", 3: "implement", 4: "review",
               5: "merge"}

_PATH_RE = re.compile(r"(?:^|/)x-(\d{3,})/y-(\d+)-z-(\d+)\.json$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, order=True)
class VectorCoordinate:
    """A position (x issue, y stage, z layer); ordered by (x, y, z),
    hashable, immutable."""

    x: int
    y: int
    z: int

    #: Largest x accepted. 1000 is the daemon's default ``max_x``; raise
    #: it (``VectorCoordinate.MAX_X = n``) for a daemon run with
    #: ``--max-x n``.
    MAX_X: ClassVar[int] = 1000

    def __post_init__(self) -> None:
        for axis, value, top in (("x", self.x, self.MAX_X), ("y", self.y, 5),
                                 ("z", self.z, 4)):
            if not _is_int(value):
                raise CoordinateValidationError(
                    "%s must be an integer, got %r" % (axis, value))
            if not 1 <= value <= top:
                raise CoordinateValidationError(
                    "%s must be in [1, %d], got %d" % (axis, top, value))

    def __str__(self) -> str:
        return "(%d, %d, %d)" % (self.x, self.y, self.z)

    @property
    def layer_name(self) -> str:
        return LAYER_NAMES[self.z]

    @property
    def stage_name(self) -> str:
        return STAGE_NAMES[self.y]

    @property
    def is_immutable(self) -> bool:
        """True for the write-once layer z=1."""
        return self.z == 1

    def to_tuple(self) -> Tuple[int, int, int]:
        return (self.x, self.y, self.z)

    def to_path(self) -> Path:
        """The decision file, relative to the working-tree root, as the
        seed library has it: ``.vector-memory/x-005/y-2-z-1.json``."""
        return Path(".vector-memory", "x-%03d" % self.x,
                    "y-%d-z-%d.json" % (self.y, self.z))

    @staticmethod
    def from_path(path: Union[str, PurePath]) -> "VectorCoordinate":
        """Parse ``[...][.vector-memory/]x-NNN/y-Y-z-Z.json``, with ``/``
        or Windows ``\\`` separators. Raises ValueError ("Invalid
        coordinate path") for any other name (``x-5``, ``x-0005``) and
        CoordinateValidationError for values out of range."""
        text = str(path).replace("\\", "/") if isinstance(path, str) \
            else PurePath(path).as_posix().replace("\\", "/")
        match = _PATH_RE.search(text)
        if not match:
            raise ValueError("Invalid coordinate path: %s" % (path,))
        x, y, z = (int(g) for g in match.groups())
        if match.group(1) != "%03d" % x:
            raise ValueError("Invalid coordinate path: %s" % (path,))
        return VectorCoordinate(x, y, z)

    def to_json(self) -> Dict[str, int]:
        return {"x": self.x, "y": self.y, "z": self.z}

    @staticmethod
    def from_json(data: Any) -> "VectorCoordinate":
        if not isinstance(data, dict) or set(data) != {"x", "y", "z"}:
            raise CoordinateValidationError(
                "a coordinate is an object with x, y and z, got %r"
                % (data,))
        return VectorCoordinate(data["x"], data["y"], data["z"])

    @staticmethod
    def of(value: Any) -> "VectorCoordinate":
        """A VectorCoordinate from itself or an (x, y, z) sequence."""
        if isinstance(value, VectorCoordinate):
            return value
        if isinstance(value, (tuple, list)) and len(value) == 3:
            return VectorCoordinate(*value)
        raise CoordinateValidationError(
            "expected a VectorCoordinate or (x, y, z), got %r" % (value,))


def format_timestamp(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.uuuuuuZ`` (a naive datetime counts as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: Any) -> datetime:
    """A timezone-aware UTC datetime from an RFC 3339 timestamp."""
    if not isinstance(text, str):
        raise ValueError("timestamp must be a string, got %r" % (text,))
    src = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        value = datetime.fromisoformat(src)
    except ValueError:
        raise ValueError("invalid timestamp: %r" % (text,)) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _load(data: Any) -> Any:
    if isinstance(data, (str, bytes, bytearray)):
        return json.loads(data)
    return data


def _opt_str(data: Dict[str, Any], key: str) -> Optional[str]:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError("%s must be a string or null, got %r"
                         % (key, value))
    return value


@dataclass
class StoredDecision:
    """A decision record as the daemon returns and stores it. ``score``
    and ``matched_terms`` are set on search results only; they are not
    part of the record (``to_json`` leaves them out, equality ignores
    them)."""

    coordinate: VectorCoordinate
    content: str
    timestamp: datetime
    agent_id: str
    issue_context: Optional[Dict[str, str]] = None
    version: int = 1
    score: Optional[int] = field(default=None, compare=False)
    matched_terms: Optional[List[str]] = field(default=None, compare=False)

    def to_json(self) -> Dict[str, Any]:
        """The record, keys in file order (coordinate, content, timestamp,
        agent_id, issue_context, version)."""
        return {
            "coordinate": self.coordinate.to_json(),
            "content": self.content,
            "timestamp": format_timestamp(self.timestamp),
            "agent_id": self.agent_id,
            "issue_context": (None if self.issue_context is None
                              else dict(self.issue_context)),
            "version": self.version,
        }

    def to_file_text(self) -> str:
        """The exact text of the decision file the daemon writes."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    def to_file(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write the record to path in the daemon's file form
        (to_file_text, UTF-8). Only the file: the daemon learns of a file
        written under ``.vector-memory/`` on its next reload."""
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(self.to_file_text())

    @staticmethod
    def from_file(path: Union[str, "os.PathLike[str]"]) -> "StoredDecision":
        """Read a decision file: ours, or one the seed library wrote (no
        version: 1; any isoformat() timestamp)."""
        with open(path, encoding="utf-8") as f:
            return StoredDecision.from_json(json.load(f))

    @staticmethod
    def from_json(data: Any) -> "StoredDecision":
        """From a record (a dict, or its JSON text). ``version`` defaults
        to 1 for records written before versions existed."""
        data = _load(data)
        if not isinstance(data, dict):
            raise ValueError("a decision is a JSON object, got %r" % (data,))
        for key in ("coordinate", "content", "timestamp", "agent_id"):
            if key not in data:
                raise ValueError("decision has no %s" % key)
        content = data["content"]
        agent_id = data["agent_id"]
        if not isinstance(content, str) or not isinstance(agent_id, str):
            raise ValueError("content and agent_id must be strings")
        context = data.get("issue_context")
        if context is not None and not isinstance(context, dict):
            raise ValueError("issue_context must be an object or null")
        version = data.get("version", 1)
        if not _is_int(version) or version < 1:
            raise ValueError("version must be a positive integer")
        score = data.get("score")
        terms = data.get("matched_terms")
        return StoredDecision(
            coordinate=VectorCoordinate.from_json(data["coordinate"]),
            content=content,
            timestamp=parse_timestamp(data["timestamp"]),
            agent_id=agent_id,
            issue_context=context,
            version=version,
            score=score if _is_int(score) else None,
            matched_terms=list(terms) if isinstance(terms, list) else None,
        )


@dataclass
class HistoryEntry:
    """One version of a coordinate (``history()``): a deletion has
    ``deleted`` True and None content, agent_id, timestamp and version;
    the uncommitted current state has ``commit`` None."""

    content: Optional[str]
    agent_id: Optional[str]
    timestamp: Optional[datetime]
    version: Optional[int]
    deleted: bool
    commit: Optional[str]
    committed_at: Optional[datetime]

    @staticmethod
    def from_json(data: Any) -> "HistoryEntry":
        data = _load(data)
        if not isinstance(data, dict):
            raise ValueError("a history entry is a JSON object")
        ts = data.get("timestamp")
        at = data.get("committed_at")
        version = data.get("version")
        return HistoryEntry(
            content=_opt_str(data, "content"),
            agent_id=_opt_str(data, "agent_id"),
            timestamp=None if ts is None else parse_timestamp(ts),
            version=version if _is_int(version) else None,
            deleted=bool(data.get("deleted")),
            commit=_opt_str(data, "commit"),
            committed_at=None if at is None else parse_timestamp(at),
        )


@dataclass
class SyncResult:
    """What ``sync()`` committed: ``commit`` is None when nothing was
    pending."""

    commit: Optional[str]
    decisions: int
    coordinates: List[VectorCoordinate]
    ranges: Optional[Dict[str, Tuple[int, int]]]

    @staticmethod
    def from_json(data: Any) -> "SyncResult":
        if not isinstance(data, dict):
            raise ValueError("a sync result is a JSON object")
        ranges = data.get("ranges")
        return SyncResult(
            commit=_opt_str(data, "commit"),
            decisions=int(data.get("decisions") or 0),
            coordinates=[VectorCoordinate.from_json(c)
                         for c in data.get("coordinates") or []],
            ranges=None if not isinstance(ranges, dict) else
            {k: (v[0], v[1]) for k, v in ranges.items()},
        )

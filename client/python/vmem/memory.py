"""The models of the conversation and document memory (seed 003): Session,
Message, Document, and the agent framework's AgentResponse, ToolGapReport
and ApprovalRequest.

Standard library only. Each model validates its fields as its JSON Schema
says when it is built (ValidationError, a ValueError, otherwise) and
exposes that schema, equal to the seed's, as ``model_json_schema()``
(pydantic 2's name) and ``schema()`` (pydantic 1's). Ids are UUIDs,
times timezone-aware datetimes; the metadata field is ``metadata_`` (the
seed's SQLModel name; ``metadata`` on the wire). ``model_dump()`` gives
the field values, ``to_json()`` the JSON-ready form with the schema's
names.
"""

import copy
import math
from datetime import datetime, timezone
from typing import Any, ClassVar, Dict, List, Optional
from uuid import UUID

from .model import format_timestamp, parse_timestamp

__all__ = [
    "ValidationError",
    "Session",
    "Message",
    "Document",
    "AgentResponse",
    "ToolGapReport",
    "ApprovalRequest",
    "MESSAGE_ROLES",
    "RISK_LEVELS",
]

MESSAGE_ROLES = ("user", "assistant", "system")
RISK_LEVELS = ("reversible", "reversible_with_delay", "irreversible")


class ValidationError(ValueError):
    """A model's field does not satisfy its schema (pydantic's
    ValidationError plays this part in the seed)."""


# -- the seed's schemas (its contract, section "Pydantic Model Schemas") --

_DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _prop(kind: str, description: str, **more: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": kind}
    out.update(more)
    out["description"] = description
    return out


_SCHEMAS: Dict[str, Dict[str, Any]] = {
    "Session": {
        "$schema": _DRAFT7,
        "title": "Session",
        "type": "object",
        "properties": {
            "id": _prop("string", "Unique session identifier",
                        format="uuid"),
            "user_id": _prop("string", "User identifier", maxLength=255),
            "created_at": _prop("string", "Session creation timestamp (UTC)",
                                format="date-time"),
            "updated_at": _prop("string", "Last activity timestamp (UTC)",
                                format="date-time"),
            "metadata_": {"type": "object",
                          "description": "Flexible session metadata",
                          "additionalProperties": True},
        },
        "required": ["id", "user_id", "created_at", "updated_at"],
    },
    "Message": {
        "$schema": _DRAFT7,
        "title": "Message",
        "type": "object",
        "properties": {
            "id": _prop("string", "Unique message identifier",
                        format="uuid"),
            "session_id": _prop("string", "Parent session reference",
                                format="uuid"),
            "role": {"type": "string", "enum": list(MESSAGE_ROLES),
                     "description": "Message role"},
            "content": _prop("string", "Message content", minLength=1),
            "created_at": _prop("string", "Message creation timestamp (UTC)",
                                format="date-time"),
            "metadata_": {"type": "object",
                          "description": "Flexible message metadata",
                          "additionalProperties": True},
        },
        "required": ["id", "session_id", "role", "content", "created_at"],
    },
    "Document": {
        "$schema": _DRAFT7,
        "title": "Document",
        "type": "object",
        "properties": {
            "id": _prop("string", "Unique document identifier",
                        format="uuid"),
            "content": _prop("string", "Document content", minLength=1),
            "embedding": {"type": "array", "items": {"type": "number"},
                          "minItems": 1536, "maxItems": 1536,
                          "description": "1536-dimensional vector embedding "
                                         "(nullable)"},
            "metadata_": {"type": "object",
                          "description": "Flexible document metadata",
                          "additionalProperties": True},
            "created_at": _prop("string", "Document creation timestamp "
                                "(UTC)", format="date-time"),
            "updated_at": _prop("string", "Last update timestamp (UTC)",
                                format="date-time"),
        },
        "required": ["id", "content", "created_at", "updated_at"],
    },
    "AgentResponse": {
        "$schema": _DRAFT7,
        "title": "AgentResponse",
        "type": "object",
        "properties": {
            "answer": {"type": "string",
                       "description": "The agent's response text"},
            "reasoning": {"type": "string",
                          "description": "Explanation of agent's reasoning "
                                         "process (nullable)"},
            "tool_calls": {
                "type": "array",
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "args": {"type": "object"},
                    "result": {}}},
                "description": "List of tool calls made"},
            "confidence": {"type": "number", "minimum": 0.0,
                           "maximum": 1.0,
                           "description": "Confidence score (0.0-1.0)"},
            "timestamp": _prop("string", "Response generation timestamp "
                               "(UTC)", format="date-time"),
        },
        "required": ["answer", "confidence", "timestamp"],
    },
    "ToolGapReport": {
        "$schema": _DRAFT7,
        "title": "ToolGapReport",
        "type": "object",
        "properties": {
            "missing_tools": {"type": "array", "items": {"type": "string"},
                              "description": "List of required tool names "
                                             "that are missing"},
            "attempted_task": {"type": "string",
                               "description": "Description of the task that "
                                              "failed"},
            "existing_tools_checked": {
                "type": "array", "items": {"type": "string"},
                "description": "List of existing tools evaluated"},
            "proposed_mcp_server": {"type": "string",
                                    "description": "Proposed MCP server name "
                                                   "(nullable)"},
        },
        "required": ["missing_tools", "attempted_task",
                     "existing_tools_checked"],
    },
    "ApprovalRequest": {
        "$schema": _DRAFT7,
        "title": "ApprovalRequest",
        "type": "object",
        "properties": {
            "action_type": {"type": "string",
                            "description": "Type of action (e.g., "
                                           "'send_email', 'delete_file')"},
            "action_description": {"type": "string",
                                   "description": "Human-readable "
                                                  "description of the "
                                                  "action"},
            "confidence": {"type": "number", "minimum": 0.0, "maximum": 1.0,
                           "description": "Agent's confidence (0.0-1.0)"},
            "risk_level": {"type": "string", "enum": list(RISK_LEVELS),
                           "description": "Risk category"},
            "tool_name": {"type": "string",
                          "description": "Name of the tool that will "
                                         "execute"},
            "parameters": {"type": "object",
                           "description": "Parameters for the tool",
                           "additionalProperties": True},
            "requires_immediate_approval": {
                "type": "boolean",
                "description": "If true, action blocks until approval"},
            "timeout_seconds": {"type": "integer", "minimum": 1,
                                "description": "Auto-reject after N seconds "
                                               "(nullable)"},
        },
        "required": ["action_type", "action_description", "confidence",
                     "risk_level", "tool_name", "parameters",
                     "requires_immediate_approval"],
    },
}


# -- field checks --

def _fail(model: str, field: str, why: str) -> ValidationError:
    return ValidationError("%s.%s: %s" % (model, field, why))


def _uuid(model: str, field: str, value: Any) -> UUID:
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise _fail(model, field, "must be a UUID, got %r" % (value,))


def _when(model: str, field: str, value: Any) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value
    try:
        return parse_timestamp(value)
    except ValueError:
        raise _fail(model, field, "must be a date-time, got %r"
                    % (value,)) from None


def _str(model: str, field: str, value: Any, min_len: int = 0,
         max_len: Optional[int] = None) -> str:
    if not isinstance(value, str):
        raise _fail(model, field, "must be a string, got %r" % (value,))
    if len(value) < min_len:
        raise _fail(model, field, "must have at least %d characters"
                    % min_len)
    if max_len is not None and len(value) > max_len:
        raise _fail(model, field, "must have at most %d characters"
                    % max_len)
    return value


def _opt_str(model: str, field: str, value: Any) -> Optional[str]:
    return None if value is None else _str(model, field, value)


def _obj(model: str, field: str, value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str)
                                              for k in value):
        raise _fail(model, field, "must be an object, got %r" % (value,))
    return value


def _strs(model: str, field: str, value: Any) -> List[str]:
    if not isinstance(value, (list, tuple)) or \
            not all(isinstance(v, str) for v in value):
        raise _fail(model, field, "must be an array of strings")
    return list(value)


def _unit(model: str, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise _fail(model, field, "must be a number in 0.0..1.0, got %r"
                    % (value,))
    return float(value)


def _json_value(value: Any) -> Any:
    """The JSON form of a field value."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return format_timestamp(value)
    return value


class _Model:
    """Fields in _fields, checked by _check(name, value)."""

    _fields: ClassVar[tuple] = ()
    _wire: ClassVar[Dict[str, str]] = {"metadata_": "metadata"}

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self._fields)
        if unknown:
            raise ValidationError("%s: unknown fields %s"
                                  % (type(self).__name__,
                                     ", ".join(sorted(unknown))))
        for name in self._fields:
            setattr(self, name, self._check(name, values.get(name)))

    def _check(self, name: str, value: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def model_json_schema(cls) -> Dict[str, Any]:
        """The JSON Schema of the model (the seed's, a copy)."""
        return copy.deepcopy(_SCHEMAS[cls.__name__])

    schema = model_json_schema

    def model_dump(self) -> Dict[str, Any]:
        """The field values, by field name."""
        return {name: getattr(self, name) for name in self._fields}

    def to_json(self) -> Dict[str, Any]:
        """The JSON-ready form: the schema's names, UUIDs and times as
        strings, absent optional values left out."""
        out = {}
        for name in self._fields:
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = _json_value(value)
        return out

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % (n, getattr(self, n)) for n in self._fields))

    @classmethod
    def from_wire(cls, data: Any) -> Any:
        """A model from the daemon's JSON object (``metadata`` there)."""
        if not isinstance(data, dict):
            raise ValidationError("%s: expected an object, got %r"
                                  % (cls.__name__, data))
        values = {}
        for name in cls._fields:
            key = cls._wire.get(name, name)
            if key in data:
                values[name] = data[key]
        return cls(**values)


class Session(_Model):
    """A conversation session."""

    _fields = ("id", "user_id", "created_at", "updated_at", "metadata_")

    def _check(self, name: str, value: Any) -> Any:
        if name == "id":
            return _uuid("Session", name, value)
        if name == "user_id":
            return _str("Session", name, value, 0, 255)
        if name in ("created_at", "updated_at"):
            return _when("Session", name, value)
        return _obj("Session", name, value)


class Message(_Model):
    """One message of a session."""

    _fields = ("id", "session_id", "role", "content", "created_at",
               "metadata_")

    def _check(self, name: str, value: Any) -> Any:
        if name in ("id", "session_id"):
            return _uuid("Message", name, value)
        if name == "role":
            if value not in MESSAGE_ROLES:
                raise _fail("Message", name, "must be one of %s, got %r"
                            % (", ".join(MESSAGE_ROLES), value))
            return value
        if name == "content":
            return _str("Message", name, value, 1)
        if name == "created_at":
            return _when("Message", name, value)
        return _obj("Message", name, value)


class Document(_Model):
    """A document, with its embedding when it has one and it was asked
    for (searches leave it out: None)."""

    _fields = ("id", "content", "embedding", "metadata_", "created_at",
               "updated_at")
    #: The schema's dimension; the daemon checks its own (embedding_dim).
    EMBEDDING_DIM: ClassVar[int] = 1536

    def __init__(self, **values: Any) -> None:
        #: The cosine similarity of a search result, else None.
        self.score: Optional[float] = values.pop("score", None)
        super().__init__(**values)

    def _check(self, name: str, value: Any) -> Any:
        if name == "id":
            return _uuid("Document", name, value)
        if name == "content":
            return _str("Document", name, value, 1)
        if name == "embedding":
            if value is None:
                return None
            if not isinstance(value, (list, tuple)) or any(
                    isinstance(x, bool) or not isinstance(x, (int, float))
                    for x in value):
                raise _fail("Document", name, "must be an array of numbers")
            if len(value) != self.EMBEDDING_DIM:
                raise _fail("Document", name, "must have %d numbers, got %d"
                            % (self.EMBEDDING_DIM, len(value)))
            return [float(x) for x in value]
        if name in ("created_at", "updated_at"):
            return _when("Document", name, value)
        return _obj("Document", name, value)

    @classmethod
    def from_wire(cls, data: Any) -> "Document":
        doc = super().from_wire(data)
        if isinstance(data, dict) and isinstance(data.get("score"),
                                                 (int, float)):
            doc.score = float(data["score"])
        return doc


class AgentResponse(_Model):
    """An agent's answer."""

    _fields = ("answer", "reasoning", "tool_calls", "confidence",
               "timestamp")

    def _check(self, name: str, value: Any) -> Any:
        if name == "answer":
            return _str("AgentResponse", name, value)
        if name == "reasoning":
            return _opt_str("AgentResponse", name, value)
        if name == "tool_calls":
            if value is None:
                return []
            if not isinstance(value, (list, tuple)):
                raise _fail("AgentResponse", name, "must be an array")
            for call in value:
                if not isinstance(call, dict) or (
                        "name" in call and not isinstance(call["name"],
                                                          str)) or (
                        "args" in call and not isinstance(call["args"],
                                                          dict)):
                    raise _fail("AgentResponse", name,
                                "each must be an object {name: string, "
                                "args: object, result}")
            return list(value)
        if name == "confidence":
            return _unit("AgentResponse", name, value)
        return _when("AgentResponse", name, value)


class ToolGapReport(_Model):
    """What tools a task lacked."""

    _fields = ("missing_tools", "attempted_task", "existing_tools_checked",
               "proposed_mcp_server")

    def _check(self, name: str, value: Any) -> Any:
        if name in ("missing_tools", "existing_tools_checked"):
            return _strs("ToolGapReport", name, value)
        if name == "attempted_task":
            return _str("ToolGapReport", name, value)
        return _opt_str("ToolGapReport", name, value)


class ApprovalRequest(_Model):
    """An action waiting for a human's approval."""

    _fields = ("action_type", "action_description", "confidence",
               "risk_level", "tool_name", "parameters",
               "requires_immediate_approval", "timeout_seconds")

    def _check(self, name: str, value: Any) -> Any:
        if name in ("action_type", "action_description", "tool_name"):
            return _str("ApprovalRequest", name, value)
        if name == "confidence":
            return _unit("ApprovalRequest", name, value)
        if name == "risk_level":
            if value not in RISK_LEVELS:
                raise _fail("ApprovalRequest", name, "must be one of %s"
                            % ", ".join(RISK_LEVELS))
            return value
        if name == "parameters":
            if not isinstance(value, dict):
                raise _fail("ApprovalRequest", name, "must be an object")
            return value
        if name == "requires_immediate_approval":
            if not isinstance(value, bool):
                raise _fail("ApprovalRequest", name, "must be a boolean")
            return value
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or \
                value < 1:
            raise _fail("ApprovalRequest", name,
                        "must be an integer >= 1 or null")
        return value

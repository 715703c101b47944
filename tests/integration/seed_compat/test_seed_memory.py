"""The users of the seed-003 memory layer, tried on vmem: its usage
examples run unchanged (top-level await, ``from core.memory import
MemoryManager``: a rename-only shim of vmem.aio) against a real daemon
started on demand, under the seed's pytest settings (every warning an
error); its models and their JSON Schemas; its errors (ValueError,
DatabaseError); and the traceparent sent when opentelemetry is importable.

The one change to an example: Example 2's ``[0.1, 0.2, ..., 0.9]`` is a
placeholder ("Assume we have a query embedding"), replaced by a real
1536-number embedding.
"""

import ast
import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from core.memory import (AgentResponse, ApprovalRequest, DatabaseError,
                         Document, MemoryManager, Message, Session,
                         ToolGapReport, ValidationError)

from conftest import scaled

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.normpath(os.path.join(HERE, "..", "..", "..", "client",
                                       "python"))

# ---- the seed's usage examples, verbatim ----

EXAMPLE_1 = '''
from uuid import uuid4
from core.memory import MemoryManager

# Initialize MemoryManager
memory = MemoryManager()

# Create a new session ID
session_id = uuid4()

# Store user message
await memory.store_message(
    session_id=session_id,
    role="user",
    content="What is async programming?",
    metadata={"source": "web_ui"}
)

# Store assistant response
await memory.store_message(
    session_id=session_id,
    role="assistant",
    content="Async programming allows non-blocking I/O operations...",
    metadata={
        "model": "claude-3-5-sonnet",
        "confidence": 0.95,
        "token_count": 150
    }
)

# Retrieve conversation history
history = await memory.get_conversation_history(session_id, limit=10)
for msg in history:
    print(f"{msg.role}: {msg.content}")
'''

EXAMPLE_2 = '''
from core.memory import MemoryManager

memory = MemoryManager()

# Assume we have a query embedding from an embedding service
query_embedding = [0.1, 0.2, ..., 0.9]  # 1536 dimensions

# Perform semantic search
results = await memory.semantic_search(
    query_embedding=query_embedding,
    top_k=5,
    metadata_filters={"category": "research"}
)

# Display results
for doc in results:
    print(f"Document ID: {doc.id}")
    print(f"Content: {doc.content[:100]}...")
    print(f"Source: {doc.metadata_.get('source', 'unknown')}")
    print("---")
'''

EXAMPLE_3 = '''
from datetime import datetime, timedelta
from core.memory import MemoryManager

memory = MemoryManager()

# Query documents from the last 30 days
end_date = datetime.utcnow()
start_date = end_date - timedelta(days=30)

documents = await memory.temporal_query(
    start_date=start_date,
    end_date=end_date,
    metadata_filters={"source": "arxiv"}
)

print(f"Found {len(documents)} documents from the last 30 days")
'''

EXAMPLE_4 = '''
from core.memory import MemoryManager

memory = MemoryManager()

# Check database health
health = await memory.health_check()
print(f"Status: {health['status']}")
print(f"PostgreSQL Version: {health['postgres_version']}")
print(f"pgvector Version: {health.get('pgvector_version', 'unknown')}")
'''

PLACEHOLDER = "query_embedding = [0.1, 0.2, ..., 0.9]  # 1536 dimensions"


def run_example(source, repo, namespace=None):
    """Run an example's code unchanged (top-level await allowed) with the
    repository as the current directory; its printed output."""
    code = compile(source, "<seed example>", "exec",
                   flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    ns = dict(namespace or {})
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        with contextlib.redirect_stdout(out):
            result = eval(code, ns)  # noqa: S307 - the seed's own code
            if asyncio.iscoroutine(result):
                asyncio.run(result)
    finally:
        os.chdir(cwd)
    return out.getvalue()


def vector(seed, dim=1536):
    import random
    rng = random.Random(seed)
    return [rng.uniform(-1, 1) for _ in range(dim)]


@pytest.fixture
def memory(temp_repo):
    return MemoryManager(temp_repo, agent_id="seed-user")


def run(coro):
    return asyncio.run(coro)


# ---- the examples ----

def test_example_1_store_and_retrieve_conversation(temp_repo):
    out = run_example(EXAMPLE_1, temp_repo)
    assert out.splitlines() == [
        "user: What is async programming?",
        "assistant: Async programming allows non-blocking I/O "
        "operations...",
    ]


def test_example_2_semantic_search(temp_repo, memory):
    near, far = vector(1), vector(2)
    ids = run(_store_docs(memory, [
        ("Attention is all you need", {"category": "research",
                                       "source": "arxiv"}, near),
        ("A recipe", {"category": "cooking"}, near),
        ("Far away research", {"category": "research"}, far),
    ]))
    source = EXAMPLE_2.replace(PLACEHOLDER,
                               "query_embedding = %r" % (near,))
    assert source != EXAMPLE_2
    out = run_example(source, temp_repo)
    assert out.splitlines() == [
        "Document ID: %s" % ids[0], "Content: Attention is all you "
        "need...", "Source: arxiv", "---",
        "Document ID: %s" % ids[2], "Content: Far away research...",
        "Source: unknown", "---",
    ]


async def _store_docs(memory, docs):
    return [await memory.store_document(c, m, e) for c, m, e in docs]


def test_example_3_temporal_query(temp_repo, memory):
    run(_store_docs(memory, [("a", {"source": "arxiv"}, None),
                             ("b", {"source": "arxiv"}, None),
                             ("c", {"source": "blog"}, None)]))
    out = run_example(EXAMPLE_3, temp_repo)
    assert out == "Found 2 documents from the last 30 days\n"


def test_example_4_health_check(temp_repo):
    out = run_example(EXAMPLE_4, temp_repo).splitlines()
    assert out[0] == "Status: healthy"
    assert out[1] == "PostgreSQL Version: vmemd 0.1.0"
    assert out[2].startswith("pgvector Version: faiss ")


# ---- the API: signatures, defaults, results, errors ----

def test_sessions_and_history(memory):
    async def go():
        sid = await memory.create_session("ada", {"tags": ["t"]})
        assert isinstance(sid, uuid.UUID)
        mids = [await memory.store_message(sid, ("user", "assistant")[i % 2],
                                           "m%d" % i) for i in range(120)]
        assert all(isinstance(m, uuid.UUID) for m in mids)
        hist = await memory.get_conversation_history(sid)
        assert [m.content for m in hist] == ["m%d" % i
                                             for i in range(20, 120)]
        assert [m.id for m in hist] == mids[20:]
        assert all(isinstance(m, Message) and m.session_id == sid and
                   m.created_at.tzinfo is not None for m in hist)
        assert await memory.get_conversation_history(uuid.uuid4()) == []
        s = await memory.get_session(sid)
        assert isinstance(s, Session)
        assert (s.user_id, s.metadata_) == ("ada", {"tags": ["t"]})
        assert s.updated_at == hist[-1].created_at
        assert [x.id for x in await memory.list_sessions("ada")] == [sid]
        assert await memory.delete_session(sid) is True
        assert await memory.get_conversation_history(sid) == []
        # store_message creates a session for the manager's agent id.
        new = uuid.uuid4()
        await memory.store_message(new, "system", "hello")
        assert (await memory.get_session(new)).user_id == "seed-user"
    run(go())


def test_documents_search_and_update(memory):
    async def go():
        v1, v2 = vector(3), vector(4)
        d1 = await memory.store_document("one", {"category": "research"}, v1)
        d2 = await memory.store_document("two", None, v2)
        await memory.store_document("three, no embedding")
        res = await memory.semantic_search(v1, top_k=10)
        assert [d.id for d in res] == [d1, d2]
        assert res[0].score == pytest.approx(1.0, abs=1e-5)
        assert res[0].embedding is None and res[0].metadata_ == {
            "category": "research"}
        got = await memory.get_document(d1)
        assert isinstance(got, Document)
        assert got.embedding == pytest.approx(v1, rel=1e-5, abs=1e-6)
        upd = await memory.update_document(d2, metadata={"category":
                                                         "research"})
        assert upd.metadata_ == {"category": "research"}
        res = await memory.semantic_search(v2, 1, {"category": "research"})
        assert [d.id for d in res] == [d2]
        assert await memory.delete_document(d2) is True
        assert await memory.get_document(d2) is None
        now = datetime.now(timezone.utc)
        docs = await memory.temporal_query(now - timedelta(hours=1),
                                           now + timedelta(hours=1))
        assert len(docs) == 2
        assert docs[0].created_at > docs[1].created_at
    run(go())


def test_embeddings_packed(memory):
    """The client sends embeddings packed (base64url of little-endian
    float32, the daemon's own precision): lists of floats or ints and
    numpy arrays alike come back as the same float32 values; what is no
    number, a bool, beyond float32 or NaN is a ValueError."""
    import base64
    import struct
    from vmem.aio import _embedding

    v = [((i * 7919) % 1000 - 500) / 333.0 for i in range(1536)]
    f32 = list(struct.unpack("<1536f", struct.pack("<1536f", *v)))
    text = _embedding("embedding", v)
    assert isinstance(text, str) and len(text) == 8192
    assert list(struct.unpack("<1536f", base64.urlsafe_b64decode(text))) \
        == f32

    async def go():
        forms = [v, [int(x * 10) or 1 for x in v]]
        try:
            import numpy
            forms.append(numpy.array(v, dtype=numpy.float32))
        except ImportError:
            pass
        for form in forms:
            doc_id = await memory.store_document("packed", None, form)
            got = await memory.get_document(doc_id)
            want = list(struct.unpack("<1536f", struct.pack(
                "<1536f", *[float(x) for x in form])))
            assert got.embedding == pytest.approx(want, rel=1e-6,
                                                  abs=1e-7)
            res = await memory.semantic_search(form, top_k=1)
            assert res[0].id == doc_id
            await memory.delete_document(doc_id)
        for bad in (["x"] * 1536, [True] * 1536, [1e39] + v[1:],
                    [float("nan")] + v[1:], [0.0] * 1536, "x" * 1536):
            with pytest.raises(ValueError):
                await memory.store_document("x", None, bad)
            with pytest.raises(ValueError):
                await memory.semantic_search(bad)
    run(go())


def test_value_errors(memory):
    async def go():
        sid = uuid.uuid4()
        bad = [
            memory.create_session(""),
            memory.store_message(sid, "robot", "x"),
            memory.store_message(sid, "user", ""),
            memory.get_conversation_history(sid, 0),
            memory.get_conversation_history(sid, -5),
            memory.store_document(""),
            memory.store_document("x", None, [0.5] * 1535),
            memory.semantic_search([0.5] * 1536, 0),
            memory.semantic_search([0.5] * 10),
            memory.temporal_query(datetime(2025, 2, 1), datetime(2025, 1,
                                                                 1)),
        ]
        for coro in bad:
            with pytest.raises(ValueError):
                await coro
        with pytest.raises(ValueError) as e:
            await memory.store_document("x", None, [0.5] * 1535)
        assert "1535" in str(e.value) and "1536" in str(e.value)
    run(go())


def test_database_error_without_a_daemon(temp_repo, tmp_path):
    memory = MemoryManager(temp_repo, autostart=False,
                           socket_path=str(tmp_path / "none.sock"))
    with pytest.raises(DatabaseError):
        run(memory.health_check())
    with pytest.raises(DatabaseError):
        run(memory.store_message(uuid.uuid4(), "user", "x"))


def test_error_handling_pattern(memory):
    """The seed's error-handling example, with our exception names."""
    caught = []

    async def go():
        try:
            await memory.store_message(
                session_id=uuid.uuid4(),
                role="invalid_role",
                content="Test message"
            )
        except ValueError as e:
            caught.append(("value", str(e)))
        except DatabaseError as e:
            caught.append(("database", str(e)))
        except ValidationError as e:
            caught.append(("validation", str(e)))
    run(go())
    assert caught and caught[0][0] == "value"


# ---- the models ----

SEED_SCHEMAS = {
    "Session": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Session", "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid",
                   "description": "Unique session identifier"},
            "user_id": {"type": "string", "maxLength": 255,
                        "description": "User identifier"},
            "created_at": {"type": "string", "format": "date-time",
                           "description": "Session creation timestamp (UTC)"},
            "updated_at": {"type": "string", "format": "date-time",
                           "description": "Last activity timestamp (UTC)"},
            "metadata_": {"type": "object",
                          "description": "Flexible session metadata",
                          "additionalProperties": True}},
        "required": ["id", "user_id", "created_at", "updated_at"]},
    "Message": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Message", "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid",
                   "description": "Unique message identifier"},
            "session_id": {"type": "string", "format": "uuid",
                           "description": "Parent session reference"},
            "role": {"type": "string",
                     "enum": ["user", "assistant", "system"],
                     "description": "Message role"},
            "content": {"type": "string", "minLength": 1,
                        "description": "Message content"},
            "created_at": {"type": "string", "format": "date-time",
                           "description": "Message creation timestamp "
                                          "(UTC)"},
            "metadata_": {"type": "object",
                          "description": "Flexible message metadata",
                          "additionalProperties": True}},
        "required": ["id", "session_id", "role", "content", "created_at"]},
    "Document": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Document", "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid",
                   "description": "Unique document identifier"},
            "content": {"type": "string", "minLength": 1,
                        "description": "Document content"},
            "embedding": {"type": "array", "items": {"type": "number"},
                          "minItems": 1536, "maxItems": 1536,
                          "description": "1536-dimensional vector "
                                         "embedding (nullable)"},
            "metadata_": {"type": "object",
                          "description": "Flexible document metadata",
                          "additionalProperties": True},
            "created_at": {"type": "string", "format": "date-time",
                           "description": "Document creation timestamp "
                                          "(UTC)"},
            "updated_at": {"type": "string", "format": "date-time",
                           "description": "Last update timestamp (UTC)"}},
        "required": ["id", "content", "created_at", "updated_at"]},
    "AgentResponse": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "AgentResponse", "type": "object",
        "properties": {
            "answer": {"type": "string",
                       "description": "The agent's response text"},
            "reasoning": {"type": "string",
                          "description": "Explanation of agent's reasoning "
                                         "process (nullable)"},
            "tool_calls": {"type": "array", "items": {
                "type": "object", "properties": {
                    "name": {"type": "string"}, "args": {"type": "object"},
                    "result": {}}},
                "description": "List of tool calls made"},
            "confidence": {"type": "number", "minimum": 0.0, "maximum": 1.0,
                           "description": "Confidence score (0.0-1.0)"},
            "timestamp": {"type": "string", "format": "date-time",
                          "description": "Response generation timestamp "
                                         "(UTC)"}},
        "required": ["answer", "confidence", "timestamp"]},
    "ToolGapReport": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "ToolGapReport", "type": "object",
        "properties": {
            "missing_tools": {"type": "array", "items": {"type": "string"},
                              "description": "List of required tool names "
                                             "that are missing"},
            "attempted_task": {"type": "string",
                               "description": "Description of the task "
                                              "that failed"},
            "existing_tools_checked": {"type": "array",
                                       "items": {"type": "string"},
                                       "description": "List of existing "
                                                      "tools evaluated"},
            "proposed_mcp_server": {"type": "string",
                                    "description": "Proposed MCP server "
                                                   "name (nullable)"}},
        "required": ["missing_tools", "attempted_task",
                     "existing_tools_checked"]},
    "ApprovalRequest": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "ApprovalRequest", "type": "object",
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
            "risk_level": {"type": "string",
                           "enum": ["reversible", "reversible_with_delay",
                                    "irreversible"],
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
                                "description": "Auto-reject after N "
                                               "seconds (nullable)"}},
        "required": ["action_type", "action_description", "confidence",
                     "risk_level", "tool_name", "parameters",
                     "requires_immediate_approval"]},
}

MODELS = {"Session": Session, "Message": Message, "Document": Document,
          "AgentResponse": AgentResponse, "ToolGapReport": ToolGapReport,
          "ApprovalRequest": ApprovalRequest}


@pytest.mark.parametrize("name", sorted(SEED_SCHEMAS))
def test_schema_equals_the_seeds(name):
    model = MODELS[name]
    assert model.model_json_schema() == SEED_SCHEMAS[name]
    assert model.schema() == SEED_SCHEMAS[name]
    # A copy: changing it changes nothing.
    model.model_json_schema()["title"] = "x"
    assert model.model_json_schema()["title"] == name


NOW = datetime(2025, 1, 6, 15, 30, tzinfo=timezone.utc)
GOOD = {
    Session: dict(id=uuid.uuid4(), user_id="u", created_at=NOW,
                  updated_at=NOW),
    Message: dict(id=uuid.uuid4(), session_id=uuid.uuid4(), role="user",
                  content="x", created_at=NOW),
    Document: dict(id=uuid.uuid4(), content="x", created_at=NOW,
                   updated_at=NOW, embedding=[0.0] * 1536),
    AgentResponse: dict(answer="a", confidence=0.5, timestamp=NOW,
                        tool_calls=[{"name": "t", "args": {}, "result": 1}]),
    ToolGapReport: dict(missing_tools=["a"], attempted_task="t",
                        existing_tools_checked=[]),
    ApprovalRequest: dict(action_type="send_email", action_description="d",
                          confidence=1.0, risk_level="irreversible",
                          tool_name="mail", parameters={},
                          requires_immediate_approval=True,
                          timeout_seconds=5),
}
BAD = {
    Session: [dict(user_id="u" * 256), dict(id="nope"), dict(id=None),
              dict(created_at="yesterday"), dict(metadata_=[1])],
    Message: [dict(role="robot"), dict(content=""), dict(session_id=3),
              dict(created_at=None)],
    Document: [dict(content=""), dict(embedding=[0.0] * 1535),
               dict(embedding=["x"] * 1536), dict(updated_at=None)],
    AgentResponse: [dict(confidence=1.5), dict(confidence=-0.1),
                    dict(confidence=True), dict(answer=None),
                    dict(tool_calls=[{"name": 1}]), dict(timestamp=None)],
    ToolGapReport: [dict(missing_tools=[1]), dict(attempted_task=None),
                    dict(existing_tools_checked=None),
                    dict(proposed_mcp_server=3)],
    ApprovalRequest: [dict(risk_level="maybe"), dict(confidence=2),
                      dict(timeout_seconds=0), dict(timeout_seconds=1.5),
                      dict(parameters=None),
                      dict(requires_immediate_approval=1)],
}


@pytest.mark.parametrize("model", list(GOOD), ids=lambda m: m.__name__)
def test_models_validate(model):
    ok = model(**GOOD[model])
    assert ok == model(**GOOD[model])
    json.dumps(ok.to_json())
    for change in BAD[model]:
        with pytest.raises(ValidationError):
            model(**dict(GOOD[model], **change))
    with pytest.raises(ValidationError):
        model(**dict(GOOD[model], surprise=1))
    assert issubclass(ValidationError, ValueError)


def test_times_are_aware_and_ids_uuids():
    m = Message.from_wire({"id": str(uuid.uuid4()),
                           "session_id": str(uuid.uuid4()), "role": "user",
                           "content": "x",
                           "created_at": "2025-01-06T15:30:00.123456Z",
                           "metadata": {"a": 1}})
    assert m.created_at == datetime(2025, 1, 6, 15, 30, 0, 123456,
                                    tzinfo=timezone.utc)
    assert isinstance(m.id, uuid.UUID) and m.metadata_ == {"a": 1}


# ---- traceparent from opentelemetry ----

FAKE_OTEL = '''
"""A stand-in for opentelemetry.trace: a current span with fixed ids."""


class _Ctx:
    trace_id = 0x0AF7651916CD43DD8448EB211C80319C
    span_id = 0xB7AD6B7169203331
    trace_flags = 1
    is_valid = True


class _Span:
    def get_span_context(self):
        return _Ctx()


def get_current_span():
    return _Span()
'''


def test_traceparent_sent_when_opentelemetry_is_importable(temp_repo,
                                                           tmp_path):
    fake = tmp_path / "fake"
    (fake / "opentelemetry" / "trace").mkdir(parents=True)
    (fake / "opentelemetry" / "__init__.py").write_text("")
    (fake / "opentelemetry" / "trace" / "__init__.py").write_text(FAKE_OTEL)
    spans = tmp_path / "spans.jsonl"
    xdg = tmp_path / "xdg"
    (xdg / "vmem").mkdir(parents=True)
    (xdg / "vmem" / "config").write_text("trace_file = %s\n" % spans)
    script = textwrap.dedent('''
        import asyncio, sys, uuid
        from vmem.aio import MemoryManager

        async def main():
            m = MemoryManager(sys.argv[1], agent_id="otel")
            await m.store_message(uuid.uuid4(), "user", "traced")

        asyncio.run(main())
    ''')
    env = dict(os.environ, XDG_CONFIG_HOME=str(xdg),
               PYTHONPATH=os.pathsep.join([str(fake), CLIENT]))
    subprocess.run([sys.executable, "-W", "error", "-c", script,
                    str(temp_repo)], check=True, env=env,
                   timeout=scaled(60))
    deadline = time.monotonic() + scaled(5)
    found = []
    while time.monotonic() < deadline and not found:
        if spans.exists():
            for line in spans.read_text().splitlines():
                for rs in json.loads(line)["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        found += [s for s in ss["spans"]
                                  if s["name"] == "memory.store_message"]
        time.sleep(0.05)
    assert found, "no memory.store_message span in %s" % spans
    assert found[0]["traceId"] == "0af7651916cd43dd8448eb211c80319c"
    assert found[0]["parentSpanId"] == "b7ad6b7169203331"

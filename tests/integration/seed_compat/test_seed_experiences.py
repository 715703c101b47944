"""The experience memory seed (004, amplihack-memory-lib) on vmem: its
usage examples, unchanged, run in a git working tree (they name
"./agent_memory.db", a place inside it), then what they promise is
checked: ids, recency, similarity, statistics, QueryBuilder's queries (not
Cypher: ExperienceStore.run executes them), the dataclasses, the error
classes. The seed's pytest settings apply: every warning is an error.
"""

import os
from datetime import datetime, timedelta, timezone

import pytest

import amplihack_memory
from amplihack_memory import (ConnectionError, Experience, ExperienceStats,
                              ExperienceStore, MemoryConnector,
                              MemoryLibError, QueryBuilder, QueryError,
                              StorageError, ValidationError)


@pytest.fixture
def in_repo(temp_repo):
    old = os.getcwd()
    os.chdir(temp_repo)
    try:
        yield temp_repo
    finally:
        os.chdir(old)


def test_usage_examples(in_repo, capsys):
    # ---- Basic Storage and Retrieval (the seed's text) ----
    from amplihack_memory import MemoryConnector, ExperienceStore

    # Initialize
    with MemoryConnector("./agent_memory.db") as conn:
        store = ExperienceStore(conn)

        # Store experience
        exp_id = store.store(
            agent_id="goal_seeker_1",
            context="User requested file analysis",
            action="Analyzed src/ directory structure",
            outcome="Found 142 Python files, 2 test gaps",
            tags=["analysis", "codebase"],
            importance=7
        )

        # Retrieve recent
        recent = store.retrieve(
            agent_id="goal_seeker_1",
            limit=5
        )

        # Find similar
        similar = store.find_similar(
            agent_id="goal_seeker_1",
            context="User requested file analysis"
        )

    # ---- Statistics and Monitoring (the seed's text) ----
    # Get agent stats
    stats = store.get_stats(agent_id="goal_seeker_1")
    print(f"Total: {stats.total_count}")
    print(f"Avg importance: {stats.avg_importance:.1f}")
    print(f"Tags: {stats.tag_distribution}")

    # ---- Advanced Queries (the seed's text) ----
    from amplihack_memory import QueryBuilder

    # Recent by tag
    query = QueryBuilder.recent_by_tag(
        agent_id="goal_seeker_1",
        tag="analysis",
        days=7
    )

    # High importance only
    query = QueryBuilder.high_importance(
        agent_id="goal_seeker_1",
        min_importance=8
    )

    # ---- what they promise ----
    assert isinstance(exp_id, str) and len(exp_id) == 36
    assert [e.id for e in recent] == [exp_id]
    assert recent[0].context == "User requested file analysis"
    assert recent[0].tags == ["analysis", "codebase"]
    assert recent[0].importance == 7
    assert recent[0].timestamp.tzinfo is not None
    assert [e.id for e in similar] == [exp_id]
    assert similar[0].score > 0
    assert similar[0].matched_terms == ["user", "requested", "file",
                                        "analysis"]
    assert capsys.readouterr().out == (
        "Total: 1\nAvg importance: 7.0\n"
        "Tags: {'analysis': 1, 'codebase': 1}\n")
    assert store.run(query) == []
    assert [e.id for e in store.run(QueryBuilder.recent_by_tag(
        agent_id="goal_seeker_1", tag="analysis", days=7))] == [exp_id]
    store.connector.close()


def test_store_rules(in_repo):
    with MemoryConnector() as conn:
        store = ExperienceStore(conn)
        for bad in (0, 11, 5.5, "7", True):
            with pytest.raises(ValueError):
                store.store("a", "c", "a", "o", importance=bad)
        with pytest.raises(ValidationError):
            store.store("a", "", "a", "o")
        with pytest.raises(ValidationError):
            store.store("a", "c", "a", "o", tags=["t", "t"])
        with pytest.raises(ValidationError):
            store.store("a", "c", "a", "o", metadata={"k": "v" * 17000})
        with pytest.raises(QueryError):
            store.find_similar("a", "the and of")
        assert issubclass(ValidationError, MemoryLibError)
        assert issubclass(QueryError, MemoryLibError)
        assert issubclass(StorageError, MemoryLibError)
        assert issubclass(ConnectionError, MemoryLibError)


def test_retrieve_filters_and_stats(in_repo):
    with MemoryConnector(str(in_repo)) as conn:
        store = ExperienceStore(conn)
        ids = [store.store("bot", "context %d" % i, "acted", "done",
                           tags=["even" if i % 2 == 0 else "odd"],
                           importance=1 + i, metadata={"i": i})
               for i in range(6)]
        store.store("other", "context", "acted", "done")
        newest = ids[::-1]
        assert [e.id for e in store.retrieve("bot")] == newest
        assert [e.id for e in store.retrieve("bot", tags=["odd"])] == \
            [ids[5], ids[3], ids[1]]
        assert [e.id for e in store.retrieve("bot", min_importance=5)] == \
            [ids[5], ids[4]]
        first = store.get(ids[0])
        assert [e.id for e in store.retrieve("bot", since=first.timestamp)] \
            == newest
        assert store.retrieve("bot", since=datetime.now(timezone.utc) +
                              timedelta(days=1)) == []
        assert store.run(QueryBuilder.high_importance("bot", 6)) == \
            [store.get(ids[5])]
        found = store.run(QueryBuilder.context_contains("bot", ["context",
                                                                "4"]))
        assert found[0].id == ids[4]
        assert "not" not in str(QueryBuilder.high_importance("bot"))
        stats = store.get_stats("bot")
        assert isinstance(stats, ExperienceStats)
        assert (stats.total_count, stats.avg_importance) == (6, 3.5)
        assert stats.tag_distribution == {"even": 3, "odd": 3}
        assert stats.oldest == first.timestamp
        assert stats.newest == store.get(ids[5]).timestamp
        empty = store.get_stats("nobody")
        assert (empty.total_count, empty.oldest) == (0, None)
        e = store.get(ids[2])
        assert Experience.from_dict(e.to_dict()) == e
        assert e.to_dict()["metadata"] == {"i": 2}
        assert store.delete(ids[2], agent_id="bot")
        assert store.get(ids[2]) is None
        assert not store.delete(ids[2])
        with pytest.raises(QueryError):
            store.run("MATCH (e:Experience) RETURN e")


def test_connector(in_repo, tmp_path):
    conn = MemoryConnector()
    assert not conn.verify_connectivity()
    with pytest.raises(ValueError):
        ExperienceStore(conn)
    assert conn.connect() is conn
    assert conn.verify_connectivity()
    conn.close()
    with pytest.raises(ConnectionError):
        MemoryConnector(tmp_path / "nowhere" / "memory.db")
    assert set(amplihack_memory.__all__) >= {
        "MemoryConnector", "ExperienceStore", "Experience",
        "ExperienceStats", "QueryBuilder", "MemoryLibError",
        "ConnectionError", "StorageError", "QueryError", "ValidationError"}

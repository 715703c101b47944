"""The seed library's users, tried on vmem: a seed-style test module written
from the seed's documented API and behaviour (seeds 000-002: the API
contract, the data model, the specification), run under the seed's pytest
settings (every warning an error) through the rename-only shim package
vector_memory. Every case must pass but the one intended divergence
(VectorCoordinate(x=5.5) is refused), an expected failure.
"""

import gc
import json
import os
import shutil
import subprocess
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from vector_memory import (ConcurrencyError, CoordinateValidationError,
                           ImmutableLayerError, MemoryLayer, PartialOrder,
                           QueryError, StorageError, StoredDecision,
                           VectorCoordinate, VectorMemoryError,
                           VectorMemoryManager)
from vector_memory.validation import MemoryIndex

from conftest import _stop_daemons


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo)] + list(args), check=True,
                          capture_output=True, text=True).stdout


def seed_to_json(coord, content, timestamp, agent_id, issue_context):
    """StoredDecision.to_json() of the seed library (API contract)."""
    return {
        "coordinate": {"x": coord[0], "y": coord[1], "z": coord[2]},
        "content": content,
        "timestamp": timestamp if isinstance(timestamp, str)
        else timestamp.isoformat(),
        "agent_id": agent_id,
        "issue_context": issue_context,
    }


def seed_write(repo, data, newline=False):
    """The seed's to_file(): pretty-printed JSON (json.dump, indent=2,
    ASCII escapes), at .vector-memory/x-NNN/y-Y-z-Z.json."""
    c = data["coordinate"]
    path = Path(repo) / ".vector-memory" / ("x-%03d" % c["x"]) / \
        ("y-%d-z-%d.json" % (c["y"], c["z"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        if newline:
            f.write("\n")
    return path


# ---- the manager ---------------------------------------------------------

def test_constructor_creates_vector_memory_dir(temp_repo):
    manager = VectorMemoryManager(repo_path=temp_repo, agent_id="claude-01")
    assert (temp_repo / ".vector-memory").is_dir()
    assert manager.get(VectorCoordinate(1, 1, 1)) is None


def test_constructor_refuses_a_directory_without_git(tmp_path):
    with pytest.raises(StorageError, match="Not a Git repository"):
        VectorMemoryManager(tmp_path, "claude-01")
    with pytest.raises(StorageError, match="Not a Git repository"):
        VectorMemoryManager(tmp_path / "missing", "claude-01")


def test_constructor_refuses_an_empty_agent_id(temp_repo):
    with pytest.raises(ValueError):
        VectorMemoryManager(temp_repo, "")


def test_store_and_retrieve(manager):
    coord = VectorCoordinate(x=5, y=2, z=1)
    decision = manager.store(
        coord=coord, content="Use PostgreSQL for persistence layer",
        issue_context={"issue_id": "codeframe-aco-t49",
                       "issue_title": "Vector Memory Manager"})
    assert decision.coordinate == coord
    assert decision.agent_id == "test-agent"
    got = manager.get(coord)
    assert got.content == "Use PostgreSQL for persistence layer"
    assert got.issue_context["issue_id"] == "codeframe-aco-t49"
    assert manager.exists(coord)
    assert not manager.exists(VectorCoordinate(5, 2, 2))
    assert manager.get(VectorCoordinate(6, 2, 1)) is None


def test_store_writes_its_file_before_returning(manager, temp_repo):
    for x in range(1, 21):
        coord = VectorCoordinate(x, 3, 2)
        manager.store(coord, "decision %d" % x)
        path = temp_repo / coord.to_path()
        assert path.exists()  # no waiting
        assert StoredDecision.from_file(path).content == "decision %d" % x


def test_every_coordinate_of_a_small_space(manager):
    for x in (1, 2, 1000):
        for y in range(1, 6):
            for z in range(1, 5):
                manager.store(VectorCoordinate(x, y, z), "%d %d %d"
                              % (x, y, z))
    assert len(manager.query_range()) == 60
    assert manager.get(VectorCoordinate(1000, 5, 4)).content == "1000 5 4"


def test_architecture_layer_is_immutable(manager):
    coord = VectorCoordinate(x=3, y=2, z=1)
    manager.store(coord, "Use REST API")
    with pytest.raises(ImmutableLayerError, match="Cannot modify decision"):
        manager.store(coord, "Use GraphQL")
    with pytest.raises(ImmutableLayerError, match="immutable"):
        manager.store(coord, "Use GraphQL")
    assert manager.get(coord).content == "Use REST API"
    # A new coordinate supersedes it; both stay.
    manager.store(VectorCoordinate(10, 2, 1), "Use GraphQL after all")
    assert len(manager.query_range(z_range=(1, 1))) == 2


def test_mutable_layers_are_replaced(manager):
    coord = VectorCoordinate(x=5, y=2, z=3)
    manager.store(coord, "Implementation v1")
    manager.store(coord, "Implementation v2")  # OK, z=3 is mutable
    assert manager.get(coord).content == "Implementation v2"
    for z in (2, 4):
        c = VectorCoordinate(5, 2, z)
        manager.store(c, "a")
        manager.store(c, "b")
        assert manager.get(c).content == "b"


def test_ten_threads_at_one_mutable_coordinate(manager):
    coord = VectorCoordinate(1, 3, 3)
    errors = []

    def writer(i):
        try:
            manager.store(coord, "writer %d" % i)
        except VectorMemoryError as e:
            errors.append(e)
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    last = manager.get(coord)
    assert last.content in {"writer %d" % i for i in range(10)}
    assert last.version == 10


def test_concurrent_agents_on_different_coordinates(temp_repo):
    managers = [VectorMemoryManager(temp_repo, "agent-%d" % i)
                for i in range(4)]
    errors = []

    def work(i, m):
        try:
            for y in range(1, 6):
                m.store(VectorCoordinate(i + 1, y, 2), "a%d s%d" % (i, y))
        except VectorMemoryError as e:
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i, m))
               for i, m in enumerate(managers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    found = managers[0].query_range()
    assert len(found) == 20
    assert {d.agent_id for d in found} == {"agent-%d" % i for i in range(4)}


def test_content_rules(manager):
    coord = VectorCoordinate(2, 2, 2)
    for bad in ("", "   ", "\n\t"):
        with pytest.raises(ValueError):
            manager.store(coord, bad)
    with pytest.raises(ValueError, match="too large"):
        manager.store(coord, "x" * (100 * 1024 + 1))
    assert manager.store(coord, "x" * (100 * 1024)).content == \
        "x" * (100 * 1024)


def test_query_range(manager):
    for x in (1, 3, 5, 12):
        manager.store(VectorCoordinate(x, 2, 1), "arch %d" % x)
        manager.store(VectorCoordinate(x, 3, 3), "impl %d" % x)
    arch = manager.query_range(x_range=(1, 10), z_range=(1, 1))
    assert [d.coordinate.x for d in arch] == [1, 3, 5]
    stage = manager.query_range(y_range=(3, 3))
    assert [d.coordinate.to_tuple() for d in stage] == \
        [(1, 3, 3), (3, 3, 3), (5, 3, 3), (12, 3, 3)]
    with pytest.raises(QueryError):
        manager.query_range(x_range=(10, 1))
    assert manager.query_range(x_range=(100, 200)) == []


def test_query_partial_order(manager):
    for c in ((1, 2, 1), (3, 2, 1), (3, 4, 2), (5, 2, 1), (5, 3, 2)):
        manager.store(VectorCoordinate(*c), "at %s" % (c,))
    got = [d.coordinate.to_tuple()
           for d in manager.query_partial_order(x_threshold=5, y_threshold=3)]
    assert got == [(1, 2, 1), (3, 2, 1), (3, 4, 2), (5, 2, 1)]
    arch = manager.query_partial_order(7, 4, z_filter=1)
    for d in arch:
        assert d.coordinate.x < 7 or (d.coordinate.x == 7 and
                                      d.coordinate.y < 4)
    assert len(arch) == 3
    assert len(manager.query_partial_order(1001, 6)) == 5
    with pytest.raises(CoordinateValidationError):
        manager.query_partial_order(0, 3)


def test_search_content(manager):
    manager.store(VectorCoordinate(1, 2, 1), "Use PostgreSQL database")
    manager.store(VectorCoordinate(2, 2, 1),
                  "Authentication and security via OAuth")
    manager.store(VectorCoordinate(3, 2, 1), "Authentication tokens")
    found = manager.search_content(["database", "PostgreSQL"])
    assert [d.coordinate.x for d in found] == [1]
    both = manager.search_content(["authentication", "security"],
                                  match_all=True)
    assert [d.coordinate.x for d in both] == [2]
    anyof = manager.search_content(["authentication", "security"])
    assert [d.coordinate.x for d in anyof] == [2, 3]  # by relevance
    with pytest.raises(QueryError, match="search_terms"):
        manager.search_content([])


def test_sync_commits_and_a_new_manager_loads(manager, temp_repo):
    manager.store(VectorCoordinate(1, 2, 1), "Decision 1")
    manager.store(VectorCoordinate(2, 2, 1), "Decision 2")
    manager.sync(message="Store initial architecture decisions")
    assert "Store initial architecture decisions" in git(temp_repo, "log",
                                                         "-1")
    files = git(temp_repo, "ls-tree", "-r", "--name-only", "HEAD")
    assert VectorCoordinate(1, 2, 1).to_path().as_posix() in files
    other = VectorMemoryManager(temp_repo, "claude-02")
    assert other.load_from_git() == 2
    assert other.get(VectorCoordinate(2, 2, 1)).content == "Decision 2"


def test_load_from_git_from_several_threads(manager):
    manager.store(VectorCoordinate(4, 4, 4), "x")
    counts, errors = [], []

    def load():
        try:
            counts.append(manager.load_from_git())
        except VectorMemoryError as e:
            errors.append(e)
    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert counts == [1] * 6


def test_repository_deleted_right_after_the_last_store():
    """The seed's users delete their temporary repository as soon as a
    test ends: nothing may be written into it afterwards."""
    tmp = tempfile.mkdtemp(prefix="vmem-seed-del-", dir="/tmp")
    try:
        repo = Path(tmp) / "repo"
        git(tmp, "init", "-q", str(repo))
        for round_ in range(3):
            manager = VectorMemoryManager(repo, "short-lived")
            for x in range(1, 30):
                manager.store(VectorCoordinate(x, 1, 3), "round %d" % round_)
            del manager
            gc.collect()
        shutil.rmtree(repo)  # no "Directory not empty"
    finally:
        _stop_daemons(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def test_close_and_with(temp_repo):
    with VectorMemoryManager(temp_repo, "ctx") as manager:
        manager.store(VectorCoordinate(9, 9 % 5 + 1, 2), "in a with")
    assert manager.closed
    # close() came back once the decision was committed.
    assert "vector-memory: 1 decisions" in git(temp_repo, "log", "-1",
                                               "--format=%s")
    assert os.path.getsize(temp_repo / ".git" / "vmem" / "wal") == 0
    manager.close()  # twice is fine
    with pytest.raises(VectorMemoryError):
        manager.get(VectorCoordinate(1, 1, 1))


# ---- value types -----------------------------------------------------

def test_coordinate_validation():
    for bad in ((0, 1, 1), (1001, 1, 1), (-5, 1, 1), (1, 0, 1), (1, 6, 1),
                (1, 1, 0), (1, 1, 5)):
        with pytest.raises(CoordinateValidationError):
            VectorCoordinate(*bad)
    assert issubclass(CoordinateValidationError, VectorMemoryError)


@pytest.mark.xfail(strict=True, raises=CoordinateValidationError,
                   reason="intended divergence: the seed accepts a "
                   "fractional x by accident; vmem refuses every "
                   "non-integer coordinate (client/python/README.md)")
def test_fractional_coordinate_is_accepted_as_the_seed_does():
    assert VectorCoordinate(x=5.5, y=2, z=1).x == 5.5


def test_coordinate_paths():
    coord = VectorCoordinate(x=5, y=2, z=1)
    assert coord.to_path() == Path(".vector-memory/x-005/y-2-z-1.json")
    assert coord.to_tuple() == (5, 2, 1)
    assert VectorCoordinate.from_path(coord.to_path()) == coord
    assert VectorCoordinate.from_path(
        ".vector-memory\\x-010\\y-3-z-2.json") == VectorCoordinate(10, 3, 2)
    with pytest.raises(ValueError, match="Invalid coordinate path"):
        VectorCoordinate.from_path("notes/readme.md")
    assert sorted([VectorCoordinate(3, 1, 1), VectorCoordinate(1, 5, 4),
                   VectorCoordinate(1, 2, 3)]) == \
        [VectorCoordinate(1, 2, 3), VectorCoordinate(1, 5, 4),
         VectorCoordinate(3, 1, 1)]
    assert len({VectorCoordinate(1, 1, 1), VectorCoordinate(1, 1, 1)}) == 1


def test_stored_decision_json_and_files(tmp_path):
    decision = StoredDecision(
        coordinate=VectorCoordinate(5, 2, 1),
        content="Use PostgreSQL for persistence layer",
        timestamp=datetime(2025, 1, 6, 15, 30, tzinfo=timezone.utc),
        agent_id="claude-code-01",
        issue_context={"issue_id": "codeframe-aco-t49"})
    data = decision.to_json()
    assert list(data)[:5] == ["coordinate", "content", "timestamp",
                              "agent_id", "issue_context"]
    assert data["coordinate"] == {"x": 5, "y": 2, "z": 1}
    assert StoredDecision.from_json(data) == decision
    path = tmp_path / "decision.json"
    decision.to_file(path)
    assert json.loads(path.read_text())["content"] == decision.content
    assert StoredDecision.from_file(path) == decision
    # A file of the seed's own writer reads too.
    seed = seed_write(tmp_path, seed_to_json(
        (5, 2, 1), "caf\u00e9", datetime(2025, 1, 6, 15, 30, 0, 123456),
        "claude-code-01", None))
    back = StoredDecision.from_file(seed)
    assert (back.content, back.version) == ("caf\u00e9", 1)
    assert back.timestamp == datetime(2025, 1, 6, 15, 30, 0, 123456,
                                      tzinfo=timezone.utc)


def test_memory_layer():
    assert MemoryLayer.get_layer(1) is MemoryLayer.ARCHITECTURE
    assert MemoryLayer.ARCHITECTURE.is_immutable
    for layer in (MemoryLayer.INTERFACES, MemoryLayer.IMPLEMENTATION,
                  MemoryLayer.EPHEMERAL):
        assert not layer.is_immutable
    assert [layer.layer_name for layer in MemoryLayer] == \
        ["Architecture", "Interfaces", "Implementation", "Ephemeral"]
    coord = VectorCoordinate(5, 2, 1)
    MemoryLayer.ARCHITECTURE.validate_write(coord, None)
    with pytest.raises(ImmutableLayerError, match="Cannot modify decision"):
        MemoryLayer.ARCHITECTURE.validate_write(coord, object())
    MemoryLayer.IMPLEMENTATION.validate_write(coord, object())
    assert not MemoryLayer.INTERFACES.validate_delete(coord)
    with pytest.raises(CoordinateValidationError):
        MemoryLayer.get_layer(5)


def test_partial_order():
    assert PartialOrder.less_than((1, 2), (3, 4))
    assert PartialOrder.less_than((5, 2), (5, 3))
    assert not PartialOrder.less_than((5, 3), (5, 2))
    assert not PartialOrder.comparable((3, 4), (5, 2))
    assert not PartialOrder.less_than((3, 4), (5, 2))
    assert not PartialOrder.less_than((5, 2), (3, 4))
    assert PartialOrder.less_equal((4, 4), (4, 4))
    assert not PartialOrder.less_than((4, 4), (4, 4))
    all_coords = [(1, 2), (3, 2), (3, 4), (5, 2), (5, 3), (7, 2), (7, 4)]
    assert PartialOrder.find_before(all_coords, (7, 4)) == \
        [(1, 2), (3, 2), (3, 4), (5, 2), (5, 3), (7, 2)]
    assert PartialOrder.less_than(VectorCoordinate(1, 1, 4),
                                  VectorCoordinate(2, 3, 1))


def test_memory_index(tmp_path):
    index = MemoryIndex()
    index.add(VectorCoordinate(1, 2, 1), {"content": "PostgreSQL database"})
    index.add((3, 3, 3), {"content": "REST api"})
    index.add((3, 4, 2), {"content": "database schema"})
    assert index.query_exact((1, 2, 1))["content"] == "PostgreSQL database"
    assert index.coords[(3, 3, 3)] == Path(".vector-memory/x-003/"
                                           "y-3-z-3.json")
    assert index.query_range(x_range=(3, 3)) == [(3, 3, 3), (3, 4, 2)]
    assert index.query_partial_order(3, 4) == [(1, 2, 1), (3, 3, 3)]
    assert index.query_content(["database"]) == [(1, 2, 1), (3, 4, 2)]
    assert index.query_content(["database", "schema"], match_all=True) == \
        [(3, 4, 2)]
    assert index.layer_index[1] == [(1, 2, 1)]
    assert index.remove((3, 4, 2))
    assert index.query_content(["schema"]) == []
    with pytest.raises(QueryError):
        index.query_range(z_range=(4, 1))
    seed_write(tmp_path, seed_to_json((7, 1, 2), "rebuilt", "2025-01-06T"
                                      "15:30:00Z", "a", None))
    assert index.rebuild(tmp_path) == 1
    assert index.query_content(["rebuilt"]) == [(7, 1, 2)]


# ---- files the seed library wrote ------------------------------------

def test_a_tree_made_by_the_seed_loads_whole(temp_repo):
    now = datetime(2025, 1, 6, 15, 30, 0, 123456)
    stamps = ["2025-01-06T15:30:00Z",  # the data model's example
              now,  # datetime.now(): naive
              now.replace(tzinfo=timezone.utc),  # +00:00
              now.replace(microsecond=0, tzinfo=timezone.utc),
              now.replace(tzinfo=timezone(timedelta(hours=2))),
              now.replace(microsecond=0)]
    paths = {}
    for i, stamp in enumerate(stamps):
        for z in (1, 3):
            data = seed_to_json((i + 1, 2, z), "Decision %d \u00e9\u2713" % i,
                                stamp, "claude-code-0%d" % i,
                                {"issue_id": "t%d" % i,
                                 "cycle_stage_name": "test"}
                                if z == 1 else None)
            paths[(i + 1, 2, z)] = seed_write(temp_repo, data,
                                              newline=z == 3)
    vm = temp_repo / ".vector-memory"
    (vm / "metadata.json").write_text(json.dumps(
        {"version": "1.0", "project": "codeframe-aco"}, indent=2))
    (vm / "index.json").write_text(json.dumps(
        {"version": "1.0", "decision_count": len(paths)}, indent=2))
    before = {p: p.read_bytes() for p in paths.values()}
    git(temp_repo, "add", ".vector-memory")
    git(temp_repo, "commit", "-q", "-m", "the seed's memory")

    manager = VectorMemoryManager(temp_repo, "after-the-seed")
    assert manager.health()["quarantined"] == []
    assert manager.load_from_git() == len(paths)
    first = manager.get(VectorCoordinate(1, 2, 1))
    assert first.version == 1
    assert first.timestamp == datetime(2025, 1, 6, 15, 30,
                                       tzinfo=timezone.utc)
    assert first.issue_context == {"issue_id": "t0",
                                   "cycle_stage_name": "test"}
    assert manager.get(VectorCoordinate(5, 2, 3)).timestamp == \
        datetime(2025, 1, 6, 13, 30, 0, 123456, tzinfo=timezone.utc)
    # The files stay as the seed wrote them until written again.
    manager.store(VectorCoordinate(20, 1, 2), "a new one")
    manager.store(VectorCoordinate(2, 2, 3), "replaced")
    manager.sync()
    for coord, path in paths.items():
        if coord != (2, 2, 3):
            assert path.read_bytes() == before[path], path
    assert manager.get(VectorCoordinate(2, 2, 3)).version == 2
    assert manager.health()["quarantined"] == []
    assert (vm / "index.json").exists()

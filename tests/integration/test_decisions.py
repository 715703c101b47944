#!/usr/bin/env python3
"""The decision methods of vmemd against a real daemon: validation, layer
rules, versions, agent ids, concurrent writers and the decision files."""

import datetime
import json
import os
import threading

import vmemtest as vt

BAD_VALUES = [0, -1, 1001, 2.5, 2.0, "2", True, None, [2], {"v": 2}]
BAD_PER_AXIS = {"x": [], "y": [6, 10], "z": [5]}
NOT_OBJECTS = [[1, 1, 2], "1,1,2", None, 5]


def bad_coordinates():
    """Every coordinate that must be refused with -32001."""
    for axis in "xyz":
        for value in BAD_VALUES + BAD_PER_AXIS[axis]:
            c = vt.coord(1, 1, 2)
            c[axis] = value
            yield c
        c = vt.coord(1, 1, 2)
        del c[axis]
        yield c
    yield dict(vt.coord(1, 1, 2), w=1)
    yield {}
    yield from NOT_OBJECTS


def coordinate_methods(c):
    """(method, params) of every method taking a coordinate."""
    return [
        ("decision.store", {"coordinate": c, "content": "x", "agent_id": "a"}),
        ("decision.get", {"coordinate": c}),
        ("decision.exists", {"coordinate": c}),
        ("decision.delete", {"coordinate": c}),
    ]


class Coordinates(vt.VmemTestCase):
    def test_bad_coordinates_refused_by_every_method(self):
        conn = self.connect()
        for c in bad_coordinates():
            for method, params in coordinate_methods(c):
                with self.subTest(method=method, coordinate=c):
                    self.assertRpcError(vt.E_COORD, conn.call, method, params)
        self.assertEqual(conn.call("server.health")["decisions"], 0)

    def test_domain_bounds_accepted(self):
        conn = self.connect(agent_id="bounds")
        for x, y, z in [(1, 1, 1), (1000, 5, 4), (999, 3, 2), (10, 5, 3)]:
            rec = conn.store(x, y, z, "at %d %d %d" % (x, y, z))
            self.assertDecision(rec, x, y, z, "at %d %d %d" % (x, y, z),
                                agent_id="bounds")
            self.assertEqual(conn.get(x, y, z), rec)
            self.assertTrue(conn.exists(x, y, z))


class MaxX(vt.VmemTestCase):
    daemon_args = ("--max-x", "50")

    def test_max_x_option(self):
        conn = self.connect(agent_id="m")
        self.assertEqual(conn.call("server.hello")["limits"]["max_x"], 50)
        self.assertEqual(conn.store(50, 1, 2, "edge")["version"], 1)
        self.assertRpcError(vt.E_COORD, conn.store, 51, 1, 2, "over")
        self.assertRpcError(vt.E_COORD, conn.get, 51, 1, 2)


class Content(vt.VmemTestCase):
    def test_empty_refused(self):
        conn = self.connect(agent_id="c")
        self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 2, "")

    def test_exactly_max_bytes_accepted(self):
        conn = self.connect(agent_id="c")
        text = "a" * vt.CONTENT_MAX
        self.assertEqual(conn.store(1, 1, 2, text)["content"], text)
        self.assertEqual(conn.get(1, 1, 2)["content"], text)

    def test_one_byte_over_refused(self):
        conn = self.connect(agent_id="c")
        self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 2,
                            "a" * (vt.CONTENT_MAX + 1))
        self.assertIsNone(conn.get(1, 1, 2))

    def test_limit_counts_utf8_bytes(self):
        conn = self.connect(agent_id="c")
        fits = "\u00e9" * (vt.CONTENT_MAX // 2)  # 2 bytes each
        self.assertEqual(conn.store(1, 1, 2, fits)["content"], fits)
        self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 3, fits + "a")

    def test_non_string_refused(self):
        conn = self.connect(agent_id="c")
        for value in [None, 1, ["a"], {"a": "b"}, True]:
            with self.subTest(content=value):
                self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 2, value)

    def test_nul_in_content_refused(self):
        conn = self.connect(agent_id="c")
        conn.send_line('{"jsonrpc":"2.0","id":1,"method":"decision.store",'
                       '"params":{"coordinate":{"x":1,"y":1,"z":2},'
                       '"content":"a\\u0000b"}}')
        resp = conn.read_json()
        self.assertIn(resp["error"]["code"], (vt.PARSE_ERROR, -32602))
        self.assertIsNone(conn.get(1, 1, 2))

    def test_unicode_round_trip(self):
        conn = self.connect(agent_id="c")
        text = "caf\u00e9 \u2603 \U0001f600 \"q\" \\ \n\t line2 \u2028 </x>"
        rec = conn.store(2, 2, 2, text)
        self.assertEqual(rec["content"], text)
        self.assertEqual(conn.get(2, 2, 2)["content"], text)
        self.assertFileMatches(rec)


class AgentId(vt.VmemTestCase):
    def test_missing_agent_id_refused(self):
        conn = self.connect()
        self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 2, "who?")
        self.assertFalse(conn.exists(1, 1, 2))

    def test_from_hello(self):
        conn = self.connect(agent_id="hello-agent")
        self.assertEqual(conn.store(1, 1, 2, "x")["agent_id"], "hello-agent")

    def test_param_overrides_hello(self):
        conn = self.connect(agent_id="hello-agent")
        rec = conn.store(1, 1, 2, "x", agent_id="param-agent")
        self.assertEqual(rec["agent_id"], "param-agent")
        self.assertEqual(conn.store(1, 1, 3, "y")["agent_id"], "hello-agent")

    def test_hello_is_per_connection(self):
        self.connect(agent_id="a")
        other = self.connect()
        self.assertRpcError(vt.E_VALUE, other.store, 1, 1, 2, "x")

    def test_later_hello_replaces(self):
        conn = self.connect(agent_id="first")
        conn.call("server.hello", {"agent_id": "second"})
        self.assertEqual(conn.store(1, 1, 2, "x")["agent_id"], "second")

    def test_bad_agent_ids_refused(self):
        conn = self.connect()
        for agent in ["", "a" * 129, "new\nline", "del\x7f", "esc\x1b", 5]:
            with self.subTest(agent_id=agent):
                self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 2, "x",
                                    agent_id=agent)
        with self.assertRaises(vt.RpcError):  # -32700 or -32602
            conn.store(1, 1, 2, "x", agent_id="nul\u0000")
        self.assertFalse(conn.exists(1, 1, 2))

    def test_agent_id_limits_accepted(self):
        conn = self.connect()
        for i, agent in enumerate(["a" * 128, "\u00e9" * 64, "x", "a b-c_d"]):
            rec = conn.store(1, 1, 2 + i % 3, "x%d" % i, agent_id=agent,
                             overwrite=True)
            self.assertEqual(rec["agent_id"], agent)


class IssueContext(vt.VmemTestCase):
    def test_accepted_shapes(self):
        conn = self.connect(agent_id="ctx")
        shapes = [None, {}, {"issue_id": "t49", "issue_title": "VMM"},
                  {"k%d" % i: "v" for i in range(64)},
                  {"long": "v" * 4096, "unicode": "\u00e9\u2603"}]
        for i, ctx in enumerate(shapes):
            with self.subTest(issue_context=ctx):
                rec = conn.store(i + 1, 1, 2, "c", issue_context=ctx)
                self.assertEqual(rec["issue_context"], ctx)
                self.assertEqual(conn.get(i + 1, 1, 2)["issue_context"], ctx)
                self.assertFileMatches(rec)

    def test_absent_is_null(self):
        conn = self.connect(agent_id="ctx")
        self.assertIsNone(conn.store(1, 1, 2, "c")["issue_context"])

    def test_refused_shapes(self):
        conn = self.connect(agent_id="ctx")
        shapes = ["str", 1, [], ["a"], True, {"k": 1}, {"k": None},
                  {"k": {"n": "v"}}, {"k": ["v"]},
                  {"k%d" % i: "v" for i in range(65)},
                  {"long": "v" * 4097}]
        for ctx in shapes:
            with self.subTest(issue_context=str(ctx)[:60]):
                self.assertRpcError(vt.E_VALUE, conn.store, 1, 1, 2, "c",
                                    issue_context=ctx)
        self.assertIsNone(conn.get(1, 1, 2))


class Layers(vt.VmemTestCase):
    def test_z1_is_write_once(self):
        conn = self.connect(agent_id="arch")
        first = conn.store(7, 1, 1, "architecture")
        self.assertDecision(first, 7, 1, 1, "architecture", "arch")
        attempts = [{}, {"overwrite": True}, {"overwrite": False},
                    {"if_version": 1}, {"agent_id": "other"}]
        for kw in attempts:
            with self.subTest(**kw):
                self.assertRpcError(vt.E_IMMUTABLE, conn.store, 7, 1, 1,
                                    "changed", **kw)
        for kw in [{}, {"if_version": 1}]:
            self.assertRpcError(vt.E_IMMUTABLE, conn.delete, 7, 1, 1, **kw)
        other = self.connect(agent_id="someone-else")
        self.assertRpcError(vt.E_IMMUTABLE, other.store, 7, 1, 1, "x",
                            overwrite=True)
        self.assertEqual(conn.get(7, 1, 1), first)

    def test_z1_delete_refused_even_when_absent(self):
        conn = self.connect(agent_id="arch")
        self.assertRpcError(vt.E_IMMUTABLE, conn.delete, 8, 1, 1)

    def test_z2_to_z4_occupied_and_overwrite(self):
        conn = self.connect(agent_id="impl")
        for z in (2, 3, 4):
            with self.subTest(z=z):
                self.assertEqual(conn.store(3, 3, z, "v1")["version"], 1)
                self.assertRpcError(vt.E_OCCUPIED, conn.store, 3, 3, z, "no")
                self.assertRpcError(vt.E_OCCUPIED, conn.store, 3, 3, z, "no",
                                    overwrite=False)
                v2 = conn.store(3, 3, z, "v2", overwrite=True)
                self.assertDecision(v2, 3, 3, z, "v2", "impl", version=2)
                v3 = conn.store(3, 3, z, "v3", overwrite=True)
                self.assertEqual(v3["version"], 3)
                self.assertEqual(conn.get(3, 3, z), v3)

    def test_if_version(self):
        conn = self.connect(agent_id="cas")
        conn.store(4, 2, 3, "v1")
        self.assertRpcError(vt.E_CONCURRENCY, conn.store, 4, 2, 3, "x",
                            if_version=2)
        for bad in (0, -1, 1.0, True):  # versions start at 1
            self.assertRpcError(vt.E_VALUE, conn.store, 4, 2, 3, "x",
                                if_version=bad)
        v2 = conn.store(4, 2, 3, "v2", if_version=1)
        self.assertEqual((v2["version"], v2["content"]), (2, "v2"))
        self.assertRpcError(vt.E_CONCURRENCY, conn.store, 4, 2, 3, "x",
                            if_version=1)
        self.assertEqual(conn.store(4, 2, 3, "v3", if_version=2,
                                    overwrite=True)["version"], 3)
        self.assertEqual(conn.get(4, 2, 3)["content"], "v3")

    def test_if_version_on_empty_coordinate(self):
        conn = self.connect(agent_id="cas")
        self.assertRpcError(vt.E_CONCURRENCY, conn.store, 4, 2, 4, "x",
                            if_version=1)
        self.assertFalse(conn.exists(4, 2, 4))

    def test_delete(self):
        conn = self.connect(agent_id="del")
        self.assertFalse(conn.delete(6, 4, 4))
        conn.store(6, 4, 4, "tmp")
        self.assertTrue(conn.exists(6, 4, 4))
        self.assertRpcError(vt.E_CONCURRENCY, conn.delete, 6, 4, 4,
                            if_version=3)
        self.assertTrue(conn.delete(6, 4, 4))
        self.assertIsNone(conn.get(6, 4, 4))
        self.assertFalse(conn.exists(6, 4, 4))
        self.assertFalse(conn.delete(6, 4, 4))
        conn.store(6, 4, 4, "again")
        conn.store(6, 4, 4, "again 2", overwrite=True)
        self.assertTrue(conn.delete(6, 4, 4, if_version=2))
        self.assertIsNone(conn.get(6, 4, 4))

    def test_timeout_ms_accepted(self):
        conn = self.connect(agent_id="t")
        self.assertEqual(conn.store(5, 5, 4, "x", timeout_ms=1000)["version"],
                         1)
        self.assertTrue(conn.delete(5, 5, 4, timeout_ms=1000))
        self.assertRpcError(vt.E_VALUE, conn.store, 5, 5, 4, "x",
                            timeout_ms="soon")


class Timestamps(vt.VmemTestCase):
    def test_microsecond_utc_increasing(self):
        conn = self.connect(agent_id="ts")
        before = datetime.datetime.now(datetime.timezone.utc)
        stamps = []
        for i in range(20):
            rec = conn.store(1, 1, 4, "v%d" % i, overwrite=True)
            self.assertTimestamp(rec["timestamp"])
            stamps.append(rec["timestamp"])
        after = datetime.datetime.now(datetime.timezone.utc)
        self.assertEqual(stamps, sorted(stamps))
        self.assertEqual(len(set(stamps)), len(stamps), "equal timestamps")
        for s in (stamps[0], stamps[-1]):
            t = datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")
            t = t.replace(tzinfo=datetime.timezone.utc)
            slack = datetime.timedelta(seconds=2)
            self.assertTrue(before - slack <= t <= after + slack, s)


class Races(vt.VmemTestCase):
    CLIENTS = 10

    def race(self, x, y, z, **kw):
        """CLIENTS connections store at (x,y,z) at once: [(n, rec|err)]."""
        conns = [self.connect(agent_id="racer-%d" % n)
                 for n in range(self.CLIENTS)]
        barrier = threading.Barrier(self.CLIENTS)
        outcomes = [None] * self.CLIENTS

        def run(n):
            barrier.wait(vt.scaled(10))
            try:
                outcomes[n] = conns[n].store(x, y, z, "winner is %d" % n,
                                             **kw)
            except vt.RpcError as e:
                outcomes[n] = e
            except Exception as e:  # checked below
                outcomes[n] = repr(e)

        threads = [threading.Thread(target=run, args=(n,))
                   for n in range(self.CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(vt.scaled(30))
        return conns[0], outcomes

    def assertOneWinner(self, conn, outcomes, loser_error, x, y, z):
        wins = [(n, o) for n, o in enumerate(outcomes) if isinstance(o, dict)]
        losses = [o for o in outcomes if isinstance(o, vt.RpcError)]
        self.assertEqual(len(wins), 1, outcomes)
        self.assertEqual(len(losses), self.CLIENTS - 1, outcomes)
        for e in losses:
            self.assertEqual((e.code, e.type), loser_error)
        n, rec = wins[0]
        self.assertEqual(rec["content"], "winner is %d" % n)
        self.assertEqual(rec["agent_id"], "racer-%d" % n)
        self.assertEqual(conn.get(x, y, z), rec)
        self.assertFileMatches(rec)

    def test_z1_race_one_winner(self):
        conn, outcomes = self.race(11, 1, 1)
        self.assertOneWinner(conn, outcomes, vt.E_IMMUTABLE, 11, 1, 1)

    def test_z2_race_one_winner(self):
        conn, outcomes = self.race(12, 2, 2)
        self.assertOneWinner(conn, outcomes, vt.E_OCCUPIED, 12, 2, 2)

    def test_if_version_race_one_winner(self):
        self.connect(agent_id="seed").store(13, 3, 3, "v1")
        conn, outcomes = self.race(13, 3, 3, if_version=1)
        self.assertOneWinner(conn, outcomes, vt.E_CONCURRENCY, 13, 3, 3)
        self.assertEqual(conn.get(13, 3, 3)["version"], 2)

    def test_overwrite_race_counts_every_version(self):
        conn = self.connect(agent_id="seed")
        conn.store(14, 4, 4, "v1")
        _, outcomes = self.race(14, 4, 4, overwrite=True)
        versions = sorted(o["version"] for o in outcomes)
        self.assertEqual(versions, list(range(2, 2 + self.CLIENTS)))
        self.assertEqual(conn.get(14, 4, 4)["version"], 1 + self.CLIENTS)


class Files(vt.VmemTestCase):
    def test_store_writes_the_exact_file(self):
        conn = self.connect(agent_id="claude-code-01")
        ctx = {"issue_id": "codeframe-aco-t49",
               "issue_title": "Vector Memory Manager"}
        rec = conn.store(5, 2, 1, "Use PostgreSQL for persistence layer",
                         issue_context=ctx)
        self.assertFileMatches(rec)
        path = self.repo.decision_path(5, 2, 1)
        self.assertTrue(path.endswith("/.vector-memory/x-005/y-2-z-1.json"))

    def test_file_names(self):
        conn = self.connect(agent_id="f")
        for x, y, z in [(1, 1, 2), (42, 3, 3), (1000, 5, 4)]:
            self.assertFileMatches(conn.store(x, y, z, "n"))
        for rel in ["x-001/y-1-z-2.json", "x-042/y-3-z-3.json",
                    "x-1000/y-5-z-4.json"]:
            self.assertTrue(os.path.isfile(os.path.join(self.repo.vmdir, rel)))

    def test_overwrite_rewrites_the_file(self):
        conn = self.connect(agent_id="f")
        conn.store(9, 2, 3, "first")
        rec = conn.store(9, 2, 3, "second", overwrite=True)
        self.assertFileMatches(rec)

    def test_delete_removes_the_file(self):
        conn = self.connect(agent_id="f")
        self.assertFileMatches(conn.store(9, 3, 4, "short-lived"))
        self.assertFileMatches(conn.store(9, 2, 2, "longer-lived"))
        self.assertTrue(conn.delete(9, 3, 4))
        self.assertFileGone(9, 3, 4)
        xdir = os.path.dirname(self.repo.decision_path(9, 2, 2))
        self.assertTrue(os.path.isdir(xdir))
        # The last decision of an issue takes its directory with it.
        self.assertTrue(conn.delete(9, 2, 2))
        self.assertTrue(vt.wait_until(lambda: not os.path.exists(xdir)))
        self.assertFileMatches(conn.store(9, 1, 3, "back again"))

    def test_only_decision_files_and_metadata(self):
        conn = self.connect(agent_id="f")
        recs = [conn.store(x, 1 + x % 5, 1 + x % 4, "d%d" % x)
                for x in range(1, 21)]
        for rec in recs[:5]:
            c = rec["coordinate"]
            if c["z"] != 1:
                conn.delete(c["x"], c["y"], c["z"])
        self.daemon.stop()
        for rec in recs[5:]:
            self.assertFileMatches(rec, timeout=0)
        self.assertOnlyDecisionFiles()
        with open(os.path.join(self.repo.vmdir, "metadata.json")) as f:
            self.assertIsInstance(json.load(f), dict)

    def test_get_matches_file_after_many_overwrites(self):
        conn = self.connect(agent_id="f")
        conn.store(20, 4, 2, "0")
        for i in range(1, 50):
            last = conn.store(20, 4, 2, str(i), overwrite=True)
        self.assertEqual(last["version"], 50)
        self.assertFileMatches(last)


if __name__ == "__main__":
    vt.main()

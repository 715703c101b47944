#!/usr/bin/env python3
"""Documents (issue 15) against a real daemon: every document.* method
with its errors, cosine ranking, metadata filters with PostgreSQL's jsonb
containment examples, filtered searches that always fill min(top_k,
matches), exact and graph search agreeing, no ghost results after updates
and deletes, temporal queries, the vector index file across restarts,
kill -9 and damage, the tree's embedding dimension, subscriptions and
trace spans."""

import base64
import math
import os
import random
import struct
import subprocess
import threading
import uuid

import vmemtest as vt
from test_cli import CliTestCase
from test_mcp import McpMixin

E_VALUE = vt.E_VALUE
DIM = 8


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def cosine(a, b):
    a = [f32(x) for x in a]
    b = [f32(x) for x in b]
    return sum(x * y for x, y in zip(unit(a), unit(b)))


def rand_vec(rng, dim=DIM):
    return [rng.uniform(-1, 1) for _ in range(dim)]


def _b64(raw, pad=False):
    text = base64.urlsafe_b64encode(raw).decode()
    return text if pad else text.rstrip("=")


def packed(v, pad=False):
    """An embedding's packed form: base64url of little-endian float32."""
    return _b64(struct.pack("<%df" % len(v), *v), pad)


def index_file(repo):
    return os.path.join(repo.gitdir, "vmem", "documents", "vindex")


class DocCase(vt.VmemTestCase):
    daemon_args = ("--embedding-dim", str(DIM))

    def store(self, c, content="doc", metadata=None, embedding=None):
        params = {"content": content}
        if metadata is not None:
            params["metadata"] = metadata
        if embedding is not None:
            params["embedding"] = embedding
        return c.call("document.store", params)

    def search(self, c, q, k=10, **kw):
        params = dict(query_embedding=q, top_k=k, **kw)
        return c.call("document.semantic_search", params)


class Documents(DocCase):
    def test_store_get_update_delete(self):
        c = self.connect()
        e = [0.5, -1, 2, 0, 0.25, 3, -0.125, 1]
        d = self.store(c, "first", {"category": "research"}, e)
        self.assertEqual(sorted(d), ["content", "created_at", "has_embedding",
                                     "id", "metadata", "updated_at"])
        self.assertEqual(uuid.UUID(d["id"]).version, 4)
        self.assertEqual((d["content"], d["metadata"], d["has_embedding"]),
                         ("first", {"category": "research"}, True))
        self.assertEqual(d["created_at"], d["updated_at"])
        got = c.call("document.get", {"id": d["id"]})
        self.assertEqual({k: v for k, v in got.items() if k != "embedding"},
                         d)
        # float32, normalised and scaled back: equal to within a few ulps.
        for a, b in zip(got["embedding"], e):
            self.assertAlmostEqual(a, b, delta=abs(b) * 1e-6 + 1e-7)
        self.assertNotIn("embedding", c.call(
            "document.get", {"id": d["id"], "include_embedding": False}))
        self.assertIsNone(c.call("document.get", {"id": str(uuid.uuid4())}))
        # Update: content only keeps metadata and vector.
        u = c.call("document.update", {"id": d["id"], "content": "second"})
        self.assertEqual((u["content"], u["metadata"], u["has_embedding"],
                          u["created_at"]),
                         ("second", {"category": "research"}, True,
                          d["created_at"]))
        self.assertGreater(u["updated_at"], d["updated_at"])
        u = c.call("document.update", {"id": d["id"],
                                       "metadata": {"category": "news"}})
        self.assertEqual((u["content"], u["metadata"]),
                         ("second", {"category": "news"}))
        u = c.call("document.update", {"id": d["id"], "embedding": None})
        self.assertIs(u["has_embedding"], False)
        self.assertNotIn("embedding", c.call("document.get", {"id": d["id"]}))
        self.assertEqual(self.search(c, e), [])
        u = c.call("document.update", {"id": d["id"], "embedding": e})
        self.assertIs(u["has_embedding"], True)
        self.assertIsNone(c.call("document.update",
                                 {"id": str(uuid.uuid4()), "content": "x"}))
        self.assertIs(c.call("document.delete", {"id": d["id"]}), True)
        self.assertIs(c.call("document.delete", {"id": d["id"]}), False)
        self.assertIsNone(c.call("document.get", {"id": d["id"]}))
        self.assertEqual(self.search(c, e), [])
        h = c.call("server.health")["counts"]
        self.assertEqual((h["documents"], h["embeddings"]), (0, 0))

    def test_bad_documents_refused(self):
        c = self.connect()
        good = {"content": "x", "embedding": [1.0] * DIM}
        bad = [dict(good, content=""), dict(good, content=3),
               {"embedding": [1.0] * DIM}, dict(good, metadata=[1]),
               dict(good, embedding=[1.0] * (DIM - 1)),
               dict(good, embedding=[1.0] * (DIM + 1)),
               dict(good, embedding=[1e39] + [1.0] * (DIM - 1)),
               dict(good, embedding=[0.0] * DIM),
               dict(good, embedding=["1"] * DIM),
               dict(good, embedding="x"), dict(good, extra=1)]
        for params in bad:
            with self.subTest(params=str(params)[:80]):
                self.assertRpcError(E_VALUE, c.call, "document.store",
                                    params)
        err = self.assertRpcError(E_VALUE, c.call, "document.store",
                                  dict(good, embedding=[1.0] * 5))
        self.assertIn("5", err.message)
        self.assertIn(str(DIM), err.message)
        self.assertEqual(c.call("server.health")["counts"]["documents"], 0)
        d = self.store(c, "x")
        for params in ({"id": d["id"]}, {"id": "nope", "content": "y"},
                       {"content": "y"}, {"id": d["id"], "content": ""},
                       {"id": d["id"], "embedding": [1] * 3}):
            with self.subTest(params=params):
                self.assertRpcError(E_VALUE, c.call, "document.update",
                                    params)
        q = [1.0] * DIM
        for params in ({}, {"query_embedding": q[:-1]},
                       {"query_embedding": q, "top_k": 0},
                       {"query_embedding": q, "top_k": 1001},
                       {"query_embedding": q, "top_k": 2.5},
                       {"query_embedding": q, "metadata_filters": [1]},
                       {"query_embedding": q, "exact": "yes"},
                       {"query_embedding": [0.0] * DIM}):
            with self.subTest(params=params):
                self.assertRpcError(E_VALUE, c.call,
                                    "document.semantic_search", params)

    def test_packed_embeddings(self):
        """The packed form of an embedding (base64url of little-endian
        float32, what the Python client sends) is the same vector as the
        array of its numbers, in every method that takes one."""
        c = self.connect()
        rng = random.Random(11)
        vecs = [rand_vec(rng) for _ in range(30)]
        by_array = [self.store(c, "a%d" % i, {"i": i}, v)
                    for i, v in enumerate(vecs)]
        by_packed = [self.store(c, "p%d" % i, {"i": i}, packed(v))
                     for i, v in enumerate(vecs)]
        for a, p in zip(by_array, by_packed):
            self.assertTrue(p["has_embedding"])
            self.assertEqual(
                c.call("document.get", {"id": a["id"]})["embedding"],
                c.call("document.get", {"id": p["id"]})["embedding"])
        q = rand_vec(rng)
        for exact in (False, True):
            want = self.search(c, q, 20, exact=exact)
            got = self.search(c, packed(q), 20, exact=exact)
            self.assertEqual([(d["id"], d["score"]) for d in got],
                             [(d["id"], d["score"]) for d in want])
        # Padding is taken; an update takes the packed form too.
        u = c.call("document.update", {"id": by_packed[0]["id"],
                                       "embedding": packed(q, pad=True)})
        self.assertTrue(u["has_embedding"])
        top = self.search(c, packed(q), 1, exact=True)[0]
        self.assertEqual(top["id"], by_packed[0]["id"])
        self.assertAlmostEqual(top["score"], 1.0, places=5)
        # Refused as the array form's faults are, naming what is wrong.
        bad = [(packed(q)[:-2], "not base64url"),
               (packed(q).replace("A", "+") if "A" in packed(q)
                else "+" + packed(q)[1:], "not base64url"),
               (packed(q + [1.0]), "embedding_dim"),
               (packed(q[:-1]), "%d numbers" % (DIM - 1)),
               (_b64(struct.pack("<%df" % DIM, *q) + b"\0\0"),
                "not a whole number"),
               (_b64(struct.pack("<%df" % DIM, float("nan"), *q[1:])),
                "finite"),
               (packed([0.0] * DIM), "zeros"),
               ("", "embedding_dim")]
        for text, why in bad:
            with self.subTest(text=text, why=why):
                err = self.assertRpcError(
                    E_VALUE, c.call, "document.store",
                    {"content": "x", "embedding": text})
                self.assertIn(why, err.message)
                self.assertRpcError(E_VALUE, c.call,
                                    "document.semantic_search",
                                    {"query_embedding": text})
        self.assertEqual(c.call("server.health")["counts"]["documents"], 60)

    def test_cosine_order_and_scores(self):
        c = self.connect()
        rng = random.Random(7)
        vecs = [rand_vec(rng) for _ in range(60)]
        docs = [self.store(c, "d%d" % i, {"i": i}, v)
                for i, v in enumerate(vecs)]
        plain = self.store(c, "no vector")
        q = rand_vec(rng)
        want = sorted(range(60), key=lambda i: -cosine(q, vecs[i]))
        for exact in (False, True):
            got = self.search(c, q, 10, exact=exact)
            self.assertEqual([d["id"] for d in got],
                             [docs[i]["id"] for i in want[:10]])
            for d, i in zip(got, want):
                self.assertAlmostEqual(d["score"], cosine(q, vecs[i]),
                                       places=5)
                self.assertNotIn("embedding", d)
        got = self.search(c, q, 1000)
        self.assertEqual(len(got), 60)  # min(top_k, with a vector)
        self.assertNotIn(plain["id"], [d["id"] for d in got])
        with_e = self.search(c, q, 2, include_embedding=True)
        self.assertEqual(len(with_e[0]["embedding"]), DIM)

    def test_filters_fill_min_k(self):
        c = self.connect()
        rng = random.Random(3)
        cats = {}
        for i in range(200):
            cat = "c%d" % (i % 20)
            d = self.store(c, "d%d" % i, {"category": cat, "n": i},
                           rand_vec(rng) if i % 7 else None)
            if i % 7:
                cats.setdefault(cat, []).append(d["id"])
        q = rand_vec(rng)
        for cat, ids in cats.items():
            for k in (1, 3, len(ids), 50):
                got = self.search(c, q, k, metadata_filters={"category": cat})
                self.assertEqual(len(got), min(k, len(ids)), (cat, k))
                self.assertTrue(set(d["id"] for d in got) <= set(ids))
                self.assertTrue(all(d["metadata"]["category"] == cat
                                    for d in got))
        self.assertEqual(self.search(c, q, 5, metadata_filters={
            "category": "none"}), [])
        self.assertEqual(len(self.search(c, q, 1000, metadata_filters={})),
                         sum(len(v) for v in cats.values()))

    def test_postgresql_containment_examples(self):
        c = self.connect()
        e = [1.0] * DIM
        # (metadata of a document, filter, contained?) from PostgreSQL's
        # documentation (8.14.3), nested under a key.
        cases = [
            ({"v": "foo"}, {"v": "foo"}, True),
            ({"v": [1, 2, 3]}, {"v": [1, 3]}, True),
            ({"v": [1, 2, 3]}, {"v": [3, 1]}, True),
            ({"v": [1, 2, 3]}, {"v": [1, 2, 2]}, True),
            ({"product": "PostgreSQL", "version": 9.4, "jsonb": True},
             {"version": 9.4}, True),
            ({"v": [1, 2, [1, 3]]}, {"v": [1, 3]}, False),
            ({"v": [1, 2, [1, 3]]}, {"v": [[1, 3]]}, True),
            ({"foo": {"bar": "baz"}}, {"bar": "baz"}, False),
            ({"foo": {"bar": "baz"}}, {"foo": {}}, True),
            # The array-contains-a-scalar exception is for the top level
            # only: nested, structure must match.
            ({"v": ["foo", "bar"]}, {"v": "foo"}, False),
            ({"v": 1}, {"v": 1.0}, True),
            ({"v": 1}, {"v": "1"}, False),
            ({"v": True}, {"v": 1}, False),
            ({"v": None}, {"v": None}, True),
            ({"a": {"b": [{"c": 1, "d": 2}]}}, {"a": {"b": [{"c": 1}]}},
             True),
            ({"a": {"b": [{"c": 1, "d": 2}]}}, {"a": {"b": [{"c": 2}]}},
             False),
        ]
        ids = []
        for meta, _, _ in cases:
            ids.append(self.store(c, "x", meta, e)["id"])
        for (meta, flt, contained), did in zip(cases, ids):
            with self.subTest(metadata=meta, filter=flt):
                got = [d["id"] for d in self.search(
                    c, e, 1000, metadata_filters=flt)]
                self.assertEqual(did in got, contained)
                between = [d["id"] for d in c.call(
                    "document.temporal_query",
                    {"start": "2000-01-01T00:00:00Z",
                     "end": "2200-01-01T00:00:00Z",
                     "metadata_filters": flt, "limit": 1000})]
                self.assertEqual(did in between, contained)
                self.assertEqual(sorted(got), sorted(between))

    def test_no_ghosts_after_updates_and_deletes(self):
        c = self.connect()
        rng = random.Random(11)
        docs = {}
        for i in range(80):
            v = rand_vec(rng)
            docs[self.store(c, "d%d" % i, {"g": i % 2}, v)["id"]] = v
        q = rand_vec(rng)
        gone = set()
        for n, did in enumerate(list(docs)):
            if n % 3 == 0:
                c.call("document.delete", {"id": did})
                gone.add(did)
                del docs[did]
            elif n % 3 == 1:
                # Point the vector straight at the query: it must rank
                # first among the updated ones with its new vector.
                v = [x + 0.001 * n for x in q]
                c.call("document.update", {"id": did, "embedding": v})
                docs[did] = v
        for exact in (False, True):
            for flt in (None, {"g": 0}):
                kw = {"exact": exact}
                if flt:
                    kw["metadata_filters"] = flt
                got = self.search(c, q, 1000, **kw)
                ids = [d["id"] for d in got]
                self.assertFalse(gone & set(ids))
                self.assertEqual(len(ids), len(set(ids)))
                want = sorted(
                    (d for d in docs
                     if not flt or c.call("document.get", {"id": d})[
                         "metadata"]["g"] == 0),
                    key=lambda d: -cosine(q, docs[d]))
                self.assertEqual(ids[:5], want[:5])
                self.assertEqual(len(ids), len(want))

    def test_temporal_query(self):
        c = self.connect()
        made = [self.store(c, "d%d" % i, {"even": i % 2 == 0})
                for i in range(12)]
        times = [d["created_at"] for d in made]
        got = c.call("document.temporal_query",
                     {"start": times[2], "end": times[9]})
        self.assertEqual([d["id"] for d in got],
                         [d["id"] for d in made[2:10]][::-1])
        got = c.call("document.temporal_query",
                     {"start": times[2], "end": times[9], "limit": 3})
        self.assertEqual([d["id"] for d in got],
                         [made[9]["id"], made[8]["id"], made[7]["id"]])
        got = c.call("document.temporal_query",
                     {"start": times[0], "end": times[11],
                      "metadata_filters": {"even": True}})
        self.assertEqual([d["id"] for d in got],
                         [d["id"] for d in made[::2]][::-1])
        one = c.call("document.temporal_query",
                     {"start": times[5], "end": times[5]})
        self.assertEqual([d["id"] for d in one], [made[5]["id"]])
        # No offset is UTC; offsets are honoured.
        naive = times[5][:-1]
        self.assertEqual(c.call("document.temporal_query",
                                {"start": naive, "end": naive}), one)
        # The same instant two hours east (or, late in the UTC day, two
        # hours west: the local hour must stay within the same day).
        hour = int(naive[11:13])
        east = hour <= 21
        local = naive[:11] + "%02d" % (hour + 2 if east else hour - 2) + \
            naive[13:] + ("+02:00" if east else "-02:00")
        self.assertEqual(c.call("document.temporal_query",
                                {"start": local, "end": local}), one)
        self.assertEqual(c.call("document.temporal_query",
                                {"start": "1990-01-01T00:00:00Z",
                                 "end": "1990-01-02T00:00:00Z"}), [])
        for params in ({"start": times[9], "end": times[2]},
                       {"start": "yesterday", "end": times[2]},
                       {"end": times[2]}, {"start": times[2]},
                       {"start": times[0], "end": times[1], "limit": 0},
                       {"start": times[0], "end": times[1],
                        "metadata_filters": "x"}):
            with self.subTest(params=params):
                self.assertRpcError(E_VALUE, c.call,
                                    "document.temporal_query", params)


class Restarts(DocCase):
    def fill(self, c, n=40, seed=5):
        rng = random.Random(seed)
        out = {}
        for i in range(n):
            v = rand_vec(rng) if i % 5 else None
            d = self.store(c, "d%d" % i, {"i": i}, v)
            out[d["id"]] = (d, v)
        return out

    def check(self, made):
        c = self.connect()
        for did, (d, v) in made.items():
            got = c.call("document.get", {"id": did, "include_embedding":
                                          False})
            self.assertEqual(got, d)
        q = [1.0] * DIM
        got = self.search(c, q, 1000, exact=True)
        self.assertEqual(sorted(d["id"] for d in got),
                         sorted(k for k, (_, v) in made.items() if v))
        return c

    def test_restart_loads_the_index_file(self):
        made = self.fill(self.connect())
        self.daemon.restart()
        c = self.check(made)
        vi = c.call("server.health")["vector_index"]
        self.assertEqual(vi["state"], "loaded", vi)
        self.assertTrue(os.path.exists(index_file(self.repo)))

    def test_kill9_keeps_acknowledged_and_index_catches_up(self):
        c = self.connect()
        made = self.fill(c)
        self.daemon.restart()  # an index file now exists
        more = self.fill(self.connect(), 10, seed=9)
        made.update(more)
        self.daemon.kill()
        self.daemon.start()
        c = self.check(made)
        vi = c.call("server.health")["vector_index"]
        # Stored after the save: added to the loaded index.
        self.assertEqual(vi["state"], "loaded", vi)
        self.assertEqual(vi["vectors"], sum(1 for _, v in made.values()
                                            if v))

    def test_stale_damaged_or_missing_index_rebuilt(self):
        c = self.connect()
        made = self.fill(c)
        self.daemon.restart()
        victim = next(k for k, (_, v) in made.items() if v)
        for damage in ("delete after save", "truncate", "remove", "garbage"):
            with self.subTest(damage=damage):
                c = self.connect()
                if damage == "delete after save":
                    c.call("document.delete", {"id": victim})
                    del made[victim]
                    self.daemon.kill()  # the save at a stop never runs
                else:
                    self.daemon.stop()
                    path = index_file(self.repo)
                    if damage == "truncate":
                        with open(path, "r+b") as f:
                            f.truncate(os.path.getsize(path) // 2)
                    elif damage == "remove":
                        os.remove(path)
                    else:
                        with open(path, "r+b") as f:
                            f.seek(40)
                            f.write(b"\xff" * 16)
                self.daemon.start()
                c = self.check(made)
                h = c.call("server.health")
                vi = h["vector_index"]
                self.assertIn(vi["state"], ("rebuilding", "rebuilt"), vi)
                self.assertTrue(vi["note"], vi)
                self.assertEqual(h["status"], "ok")
                self.daemon.restart()
                vi = self.connect().call("server.health")["vector_index"]
                self.assertEqual(vi["state"], "loaded", vi)

    def test_embedding_dim_is_the_trees(self):
        c = self.connect()
        self.store(c, "x", None, [1.0] * DIM)
        self.daemon.stop()
        d = self.new_daemon("--embedding-dim", "16")
        d.spawn()
        self.assertEqual(d.wait(), 1)
        self.assertIn("embedding_dim is 16", d.stderr())
        self.assertIn("stored with embedding_dim %d" % DIM, d.stderr())
        self.daemon.start()
        self.assertEqual(len(self.connect().call(
            "document.semantic_search", {"query_embedding": [1.0] * DIM})), 1)

    def test_embedding_dim_free_without_documents(self):
        c = self.connect(agent_id="a")
        c.call("message.store", {"session_id": str(uuid.uuid4()),
                                 "role": "user", "content": "x"})
        d = self.store(c, "x")
        c.call("document.delete", {"id": d["id"]})
        self.daemon.stop()
        self.daemon = self.start_vmemd("--embedding-dim", "4")
        c = self.connect()
        self.store(c, "y", None, [1.0, 2.0, 3.0, 4.0])
        self.assertRpcError(E_VALUE, c.call, "document.store",
                            {"content": "z", "embedding": [1.0] * DIM})


class DefaultDimension(vt.VmemTestCase):
    def test_1536(self):
        c = self.connect()
        rng = random.Random(1)
        v = [rng.uniform(-1, 1) for _ in range(1536)]
        d = c.call("document.store", {"content": "big", "embedding": v})
        got = c.call("document.search" if False else
                     "document.semantic_search", {"query_embedding": v})
        self.assertEqual(got[0]["id"], d["id"])
        self.assertAlmostEqual(got[0]["score"], 1.0, places=5)
        err = self.assertRpcError(E_VALUE, c.call, "document.store",
                                  {"content": "x", "embedding": v[:-1]})
        self.assertIn("1535", err.message)
        self.assertIn("1536", err.message)


class Graph(DocCase):
    daemon_args = ("--embedding-dim", "16")

    def test_exact_and_graph_agree(self):
        n, dim = 5000, 16
        rng = random.Random(21)
        centres = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(20)]
        vecs = []
        for i in range(n):
            cen = centres[i % 20]
            vecs.append([x + rng.gauss(0, 0.3) for x in cen])
        ids = [None] * n
        errors = []

        def writer(part):
            try:
                c = vt.Conn(self.daemon.sock)
                for i in range(part, n, 8):
                    ids[i] = c.call("document.store", {
                        "content": "d%d" % i,
                        "metadata": {"one_pct": i % 100 == 0,
                                     "forty": i % 5 < 2},
                        "embedding": vecs[i]})["id"]
                c.close()
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(p,))
                   for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        c = self.connect()
        built = vt.wait_until(lambda: c.call("server.health")[
            "vector_index"]["graph_rows"] > 0, 60.0, 0.2)
        self.assertTrue(built, c.call("server.health")["vector_index"])
        overlap = []
        for qi in range(20):
            q = [x + rng.gauss(0, 0.3) for x in centres[qi % 20]]
            exact = [d["id"] for d in self.search(c, q, 10, exact=True)]
            approx = [d["id"] for d in self.search(c, q, 10)]
            overlap.append(len(set(exact) & set(approx)) / 10)
            for flt, count in (({"one_pct": True}, 50),
                               ({"forty": True}, 2000)):
                got = self.search(c, q, 10, metadata_filters=flt)
                self.assertEqual(len(got), 10)
                ex = self.search(c, q, 10, metadata_filters=flt, exact=True)
                self.assertEqual(len(ex), 10)
                if count == 50:  # few candidates: exact over them
                    self.assertEqual([d["id"] for d in got],
                                     [d["id"] for d in ex])
        vt.diag("recall@10 graph vs exact: %.3f" % (sum(overlap) /
                                                    len(overlap)))
        self.assertGreaterEqual(sum(overlap) / len(overlap), 0.9)
        # Deletes: never returned, and min(k, left) still met.
        one_pct = [ids[i] for i in range(0, n, 100)]
        for did in one_pct[:45]:
            c.call("document.delete", {"id": did})
        got = self.search(c, vecs[0], 10, metadata_filters={"one_pct": True})
        self.assertEqual(len(got), 5)
        self.assertFalse(set(one_pct[:45]) & set(d["id"] for d in got))
        for q in vecs[:300:30]:
            got = [d["id"] for d in self.search(c, q, 20)]
            self.assertFalse(set(one_pct[:45]) & set(got))
        # The published graph is saved without waiting for a stop: a
        # kill -9 after that loads it (the deletes since are the tail's
        # business: the file is stale for them, so delete nothing more
        # before the kill).
        saved = vt.wait_until(lambda: c.call("server.health")[
            "vector_index"]["saves"] > 0, 30.0, 0.2)
        self.assertTrue(saved, c.call("server.health")["vector_index"])
        # A graceful restart loads the graph, no rebuild.
        self.daemon.restart()
        c = self.connect()
        vi = c.call("server.health")["vector_index"]
        self.assertEqual(vi["state"], "loaded", vi)
        self.assertGreater(vi["graph_rows"], 0)
        self.assertFalse(vi["building"])
        got = self.search(c, vecs[0], 10, metadata_filters={"one_pct": True})
        self.assertEqual(len(got), 5)


class Watch(DocCase):
    def test_documents(self):
        w = self.connect()
        sub = w.call("watch.subscribe",
                     {"kinds": ["document"]})["subscription"]
        c = self.connect()
        d = self.store(c, "x", {"a": 1}, [1.0] * DIM)
        u = c.call("document.update", {"id": d["id"], "content": "y"})
        c.call("document.delete", {"id": d["id"]})
        got = w.notifications(0.5)
        self.assertEqual(got, [
            {"subscription": sub, "kind": "document", "event": "stored",
             "id": d["id"], "document": d},
            {"subscription": sub, "kind": "document", "event": "updated",
             "id": d["id"], "document": u},
            {"subscription": sub, "kind": "document", "event": "deleted",
             "id": d["id"], "document": None}])


class Tracing(DocCase):
    def setUp(self):
        self.start_daemon = False
        super().setUp()
        self.trace = self.repo.path("spans.jsonl")
        self.daemon = self.start_vmemd("--embedding-dim", str(DIM),
                                       "--trace-file", self.trace)

    def test_search_spans(self):
        c = self.connect()
        self.store(c, "abc", {"category": "r", "source": "s"}, [1.0] * DIM)
        self.search(c, [1.0] * DIM, 5, metadata_filters={"category": "r"})
        c.call("document.temporal_query", {"start": "2000-01-01T00:00:00Z",
                                           "end": "2200-01-01T00:00:00Z"})
        c.call("server.health")
        spans = vt.wait_until(lambda: len(vt.read_spans(self.trace)) >= 4
                              and vt.read_spans(self.trace), 3.0)
        by = {sp["name"]: sp["attributes"] for sp in spans}
        st = by["memory.store_document"]
        self.assertEqual((st["content_length"], st["has_embedding"],
                          st["metadata_keys"]), (3, True,
                                                 ["category", "source"]))
        ss = by["memory.semantic_search"]
        self.assertEqual((ss["top_k"], ss["filter_count"],
                          ss["result_count"]), (5, 1, 1))
        self.assertIsInstance(ss["query_time_ms"], float)
        tq = by["memory.temporal_query"]
        self.assertEqual((tq["start_date"], tq["end_date"],
                          tq["filter_count"], tq["result_count"]),
                         ("2000-01-01T00:00:00Z", "2200-01-01T00:00:00Z", 0,
                          1))
        hc = by["memory.health_check"]
        self.assertEqual(hc["status"], "ok")
        self.assertIn("vmemd", hc["postgres_version"])


class Cli(CliTestCase):
    daemon_args = ("--embedding-dim", "4")

    def test_doc_add_search_between(self):
        notes = self.repo.path("notes.md")
        with open(notes, "w") as f:
            f.write("Attention is all you need\nsecond line\n")
        vec = self.repo.path("a.vec")
        with open(vec, "w") as f:
            f.write("[1, 0, 0, 0]")
        out = self.ok("doc", "add", notes, "--meta", "category=research",
                      "--meta", "source=arxiv", "--embedding-file",
                      vec).stdout
        self.assertRegex(out, r"^stored document [0-9a-f-]{36}\n$")
        first = out.split()[-1]
        other = self.repo.path("b.vec")
        with open(other, "w") as f:
            f.write("0.5 0.5\n0, 0\n")
        second = self.json_of("doc", "add", "-", "--embedding-file", other,
                              "--meta", "category=news",
                              stdin="from stdin")["id"]
        got = self.json_of("--json", "doc", "search", "--embedding-file",
                           vec, "--top", "5")
        self.assertEqual([d["id"] for d in got], [first, second])
        self.assertEqual(got[0]["content"],
                         "Attention is all you need\nsecond line\n")
        self.assertEqual(got[0]["metadata"], {"category": "research",
                                              "source": "arxiv"})
        lines = self.ok("doc", "search", "--embedding-file", vec,
                        "--meta", "category=news").stdout.splitlines()
        self.assertEqual(lines[0].split(), ["DOCUMENT", "SCORE", "CONTENT"])
        self.assertEqual(lines[1].split()[:3], [second, "0.707107", "from"])
        between = self.ok("doc", "between", "2000-01-01T00:00:00Z",
                          "2200-01-01T00:00:00Z").stdout.splitlines()
        self.assertEqual([ln.split()[0] for ln in between[1:]],
                         [second, first])
        self.assertIn("Attention is all you need", between[2])
        self.assertNotIn("second line", between[2])
        self.assertEqual(len(self.json_of(
            "doc", "between", "2000-01-01T00:00:00Z",
            "2200-01-01T00:00:00Z", "--limit", "1",
            "--meta", "category=research")), 1)

    def test_doc_errors(self):
        vec = self.repo.path("bad.vec")
        with open(vec, "w") as f:
            f.write("1 2 3")
        text = self.repo.path("t.txt")
        with open(text, "w") as f:
            f.write("x")
        p = self.fails(1, "doc", "add", text, "--embedding-file", vec,
                       type_name="ValueError")
        self.assertIn("3", p.stderr)
        self.assertIn("4", p.stderr)
        self.fails(1, "doc", "between", "2020-01-02T00:00:00Z",
                   "2020-01-01T00:00:00Z", type_name="ValueError")
        empty = self.repo.path("empty.txt")
        open(empty, "w").close()
        for args in (("doc",), ("doc", "rm", "x"), ("doc", "add"),
                     ("doc", "add", empty), ("doc", "add", "/nonexistent"),
                     ("doc", "search"), ("doc", "search", "--top", "0",
                                         "--embedding-file", vec),
                     ("doc", "search", "--embedding-file", "/nonexistent"),
                     ("doc", "between", "2020-01-01T00:00:00Z"),
                     ("doc", "add", text, "--top", "3"),
                     ("doc", "search", "--embedding-file", vec, "--limit",
                      "2"),
                     ("doc", "add", text, "--meta", "novalue")):
            with self.subTest(args=args):
                self.fails(2, *args)
        self.assertEqual(self.connect().call("server.health")["counts"][
            "documents"], 0)


class Mcp(McpMixin, DocCase):
    def test_search_and_between(self):
        c = self.mcp()
        rng = random.Random(17)
        made = []
        for i in range(30):
            made.append(self.store(c, ("long " * 400) if i == 0 else
                                   "d%d" % i, {"even": i % 2 == 0},
                                   rand_vec(rng)))
        q = rand_vec(rng)
        direct = self.search(c, q, 12, metadata_filters={"even": True})
        got = self.tool_ok(c, "search_documents",
                           {"query_embedding": q, "top_k": 12,
                            "metadata_filters": {"even": True}})
        self.assertEqual((got["count"], got["more"]), (12, True))
        self.assertEqual([d["id"] for d in got["documents"]],
                         [d["id"] for d in direct])
        self.assertEqual([d["score"] for d in got["documents"]],
                         [d["score"] for d in direct])
        got = self.tool_ok(c, "search_documents",
                           {"query_embedding": q, "top_k": 200})
        self.assertEqual((got["count"], got["more"]), (30, False))
        first = [d for d in got["documents"] if d["id"] == made[0]["id"]]
        self.assertTrue(first[0]["content_truncated"])
        times = [d["created_at"] for d in made]
        got = self.tool_ok(c, "documents_between",
                           {"start": times[5], "end": times[20],
                            "limit": 10})
        self.assertEqual((got["count"], got["more"]), (10, True))
        self.assertEqual([d["id"] for d in got["documents"]],
                         [d["id"] for d in made[11:21]][::-1])
        got = self.tool_ok(c, "documents_between",
                           {"start": times[0], "end": times[-1],
                            "metadata_filters": {"even": False}})
        self.assertEqual((got["count"], got["more"]), (15, False))
        self.tool_error(c, "search_documents",
                        {"query_embedding": [1.0] * (DIM + 1)},
                        "ValueError")
        self.tool_error(c, "documents_between",
                        {"start": times[5], "end": times[1]}, "ValueError")
        self.tool_error(c, "search_documents",
                        {"query_embedding": q, "top_k": 201}, "ValueError")


if __name__ == "__main__":
    vt.main()

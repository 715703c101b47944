#!/usr/bin/env python3
"""The query methods of vmemd against a real daemon: decision.query_range,
decision.query_partial_order and decision.search, every rule and every error
of their contract, cross-checked against Python models on seeded random data
(VMEM_SEED=N replays a run), kept exact over overwrites, deletes and
restarts, answering while another connection writes; and the vmem ls, before
and search commands."""

import json
import os
import random
import re
import subprocess
import threading
import time

import vmemtest as vt

E_QUERY = (-32005, "QueryError")
LAYERS = {1: "Architecture", 2: "Interfaces", 3: "Implementation",
          4: "Ephemeral"}
SEARCH_KEYS = vt.DECISION_KEYS + ("score", "matched_terms")
BAD_BOUNDS = [2.5, "1", None, True, 1.0, [1], {"v": 1}]
BAD_LIMITS = [0, 10001, -1, 2.5, "5", True, None, [5]]
BAD_THRESHOLDS = [0, 2.5, "3", None, True, -1, 2.0, [3]]
BAD_AFTERS = [vt.coord(0, 1, 1), vt.coord(1, 6, 1), vt.coord(1, 1, 5),
              vt.coord(1001, 1, 1), vt.coord(1, 1, 2.5), vt.coord(1, "1", 1),
              {"x": 1, "y": 1}, dict(vt.coord(1, 1, 1), w=1), {},
              [1, 1, 1], "1,1,1", 5, True]


def seed_rng(name):
    """A random.Random seeded from VMEM_SEED or at random; the seed is
    printed so that a failing run can be replayed."""
    seed = int(os.environ.get("VMEM_SEED") or random.randrange(1 << 30))
    vt.diag("%s: seed %d (VMEM_SEED=%d replays it)" % (name, seed, seed))
    return random.Random(seed)


def ct(rec):
    """The coordinate of a decision as a tuple."""
    c = rec["coordinate"]
    return (c["x"], c["y"], c["z"])


def cts(recs):
    return [ct(r) for r in recs]


def plain(rec):
    """A search hit without its two extra members."""
    return {k: rec[k] for k in vt.DECISION_KEYS}


def store_all(conn, items, chunk=48):
    """Store (x, y, z, content[, extra params]) items, pipelining the
    requests on one connection; the stored records, in order."""
    out = []
    for start in range(0, len(items), chunk):
        rids = []
        for item in items[start:start + chunk]:
            params = {"coordinate": vt.coord(*item[:3]), "content": item[3]}
            if len(item) > 4:
                params.update(item[4])
            rids.append(conn.request("decision.store", params))
        out += [conn.response(rid) for rid in rids]
    return out


def random_coords(rng, n, max_x=1000, z_min=1):
    """n distinct random coordinates."""
    space = max_x * 5 * (5 - z_min)
    out = []
    for i in rng.sample(range(space), n):
        out.append((1 + i // (5 * (5 - z_min)), 1 + i // (5 - z_min) % 5,
                    z_min + i % (5 - z_min)))
    return out


# --------------------------------------------------------------------------
# A model of the search (exact for ASCII text)

TOKEN_RE = re.compile(r"[A-Za-z0-9_]+")


def tokens(text):
    return [t.lower() for t in TOKEN_RE.findall(text)]


def term_matches(term, toks):
    prefix = term.endswith("*")
    want = tokens(term[:-1] if prefix else term)
    k = len(want)
    for i in range(len(toks) - k + 1):
        if toks[i:i + k - 1] != want[:-1]:
            continue
        last = toks[i + k - 1]
        if last == want[-1] or (prefix and last.startswith(want[-1])):
            return True
    return False


def model_search(records, terms, match_all=False, limit=None):
    """[(coordinate, score, matched_terms)] as the daemon must answer."""
    distinct = list(dict.fromkeys(terms))
    hits = []
    for c, rec in records.items():
        toks = tokens(rec["content"])
        matched = [t for t in distinct if term_matches(t, toks)]
        if not matched or (match_all and len(matched) < len(distinct)):
            continue
        hits.append((c, len(matched), matched))
    hits.sort(key=lambda h: (-h[1], h[0]))
    return hits[:limit] if limit else hits


def hit_summary(hits):
    return [(ct(h), h["score"], h["matched_terms"]) for h in hits]


# --------------------------------------------------------------------------


class QueryCase(vt.VmemTestCase):
    def qr(self, conn, **params):
        return conn.call("decision.query_range", params)

    def po(self, conn, **params):
        return conn.call("decision.query_partial_order", params)

    def search(self, conn, terms, **params):
        params["terms"] = terms
        return conn.call("decision.search", params)

    def assertFull(self, got, stored):
        """Every result is exactly the stored decision at its coordinate."""
        for rec in got:
            self.assertEqual(list(rec.keys()), list(vt.DECISION_KEYS))
            self.assertEqual(rec, stored[ct(rec)])

    def assertHits(self, hits, stored):
        """Search hits: the stored decision plus score and matched_terms,
        appended after version."""
        for h in hits:
            self.assertEqual(list(h.keys()), list(SEARCH_KEYS))
            self.assertEqual(plain(h), stored[ct(h)])
            self.assertIs(type(h["score"]), int)
            self.assertEqual(h["score"], len(h["matched_terms"]))


# --------------------------------------------------------------------------
# decision.query_range

GRID_X = [1, 2, 3, 5, 10, 990, 1000]
GRID_Y = [1, 3, 5]
GRID_Z = [1, 2, 4]


class QueryRange(QueryCase):
    def setUp(self):
        super().setUp()
        self.conn = self.connect(agent_id="ranger")
        items = [(x, y, z, "grid %d %d %d" % (x, y, z),
                  {"issue_context": {"issue_id": "t%d" % x}})
                 for x in GRID_X for y in GRID_Y for z in GRID_Z]
        random.Random(7).shuffle(items)  # insertion order is not the order
        self.stored = {ct(r): r for r in store_all(self.conn, items)}

    def model(self, xr=None, yr=None, zr=None):
        def inside(v, r):
            return r is None or r[0] <= v <= r[1]
        return sorted(c for c in self.stored
                      if inside(c[0], xr) and inside(c[1], yr)
                      and inside(c[2], zr))

    def check(self, **params):
        got = self.qr(self.conn, **params)
        want = self.model(params.get("x_range"), params.get("y_range"),
                          params.get("z_range"))
        self.assertEqual(cts(got), want, params)
        self.assertFull(got, self.stored)
        return got

    def test_absent_and_null_mean_everything(self):
        everything = sorted(self.stored)
        self.assertEqual(len(everything), 63)
        for params in [{}, {"x_range": None}, {"y_range": None},
                       {"x_range": None, "y_range": None, "z_range": None}]:
            with self.subTest(params=params):
                got = self.qr(self.conn, **params)
                self.assertEqual(cts(got), everything)
                self.assertFull(got, self.stored)

    def test_each_axis_alone(self):
        for axis in ("x_range", "y_range", "z_range"):
            for r in [[1, 1], [2, 5], [3, 4], [1, 1000], [4, 4], [5, 5],
                      [6, 9], [999, 1000], [11, 989]]:
                with self.subTest(axis=axis, r=r):
                    self.check(**{axis: r})

    def test_axes_combined(self):
        cases = [([1, 5], [1, 3], None), ([2, 990], None, [2, 4]),
                 (None, [3, 5], [1, 2]), ([5, 5], [3, 3], [2, 2]),
                 ([1, 3], [2, 2], [1, 4]), ([10, 1000], [5, 5], [4, 4]),
                 ([4, 4], [1, 5], [1, 4])]
        for xr, yr, zr in cases:
            params = {k: v for k, v in (("x_range", xr), ("y_range", yr),
                                        ("z_range", zr)) if v is not None}
            with self.subTest(params=params):
                self.check(**params)
        got = self.check(x_range=[5, 5], y_range=[3, 3], z_range=[2, 2])
        self.assertEqual(cts(got), [(5, 3, 2)])
        self.assertEqual(got[0]["content"], "grid 5 3 2")
        self.assertEqual(got[0]["issue_context"], {"issue_id": "t5"})

    def test_sorted_whatever_the_insertion_order(self):
        got = self.qr(self.conn)
        self.assertEqual(cts(got), sorted(cts(got)))
        self.conn.store(4, 5, 4, "late")
        self.conn.store(4, 1, 1, "later")
        got = cts(self.qr(self.conn, x_range=[3, 5], z_range=[1, 1]))
        self.assertEqual(got, [(3, 1, 1), (3, 3, 1), (3, 5, 1), (4, 1, 1),
                               (5, 1, 1), (5, 3, 1), (5, 5, 1)])

    def test_bounds_outside_the_domain(self):
        self.assertEqual(
            sorted({c[0] for c in cts(self.qr(self.conn,
                                              x_range=[990, 2000]))}),
            [990, 1000])
        self.assertEqual(self.qr(self.conn, x_range=[0, 0]), [])
        self.assertEqual(self.qr(self.conn, x_range=[1001, 5000]), [])
        self.assertEqual(self.qr(self.conn, x_range=[-10, -1]), [])
        self.assertEqual(
            sorted({c[0] for c in cts(self.qr(self.conn, x_range=[-5, 3]))}),
            [1, 2, 3])
        self.check(x_range=[-5, 3])
        self.check(y_range=[-100, 2], z_range=[3, 99])
        self.assertEqual(self.qr(self.conn, y_range=[6, 9]), [])
        self.assertEqual(self.qr(self.conn, z_range=[5, 5]), [])
        self.assertEqual(self.qr(self.conn, y_range=[0, 0]), [])
        huge = [-(1 << 62), 1 << 62]
        self.assertEqual(cts(self.qr(self.conn, x_range=huge, y_range=huge,
                                     z_range=huge)), sorted(self.stored))

    def test_min_greater_than_max_is_a_query_error(self):
        for axis in ("x_range", "y_range", "z_range"):
            for r in [[3, 2], [1000, 1], [0, -1], [5000, 2000]]:
                with self.subTest(axis=axis, r=r):
                    self.assertRpcError(E_QUERY, self.qr, self.conn,
                                        **{axis: r})

    def test_non_integer_bounds_are_a_query_error(self):
        for axis in ("x_range", "y_range", "z_range"):
            for bad in BAD_BOUNDS:
                for r in ([bad, 3], [1, bad]):
                    with self.subTest(axis=axis, r=r):
                        self.assertRpcError(E_QUERY, self.qr, self.conn,
                                            **{axis: r})

    def test_not_a_pair_is_a_value_error(self):
        for axis in ("x_range", "y_range", "z_range"):
            for bad in [[], [1], [1, 2, 3], "1-3", 5, {"min": 1, "max": 2},
                        True, [[1, 2]]]:
                with self.subTest(axis=axis, value=bad):
                    self.assertRpcError(vt.E_VALUE, self.qr, self.conn,
                                        **{axis: bad})

    def test_unknown_param_is_a_value_error(self):
        for name in ("w_range", "x", "range", "offset", "X_range"):
            with self.subTest(param=name):
                self.assertRpcError(vt.E_VALUE, self.qr, self.conn,
                                    **{name: [1, 2]})

    def test_params_must_be_an_object(self):
        for method in ("decision.query_range", "decision.search",
                       "decision.query_partial_order"):
            for params in ([], [5, 3], ["post"]):
                with self.subTest(method=method, params=params):
                    self.assertRpcError(vt.E_VALUE, self.conn.call, method,
                                        params)

    def test_limit(self):
        everything = sorted(self.stored)
        self.assertEqual(cts(self.qr(self.conn, limit=1)), everything[:1])
        self.assertEqual(cts(self.qr(self.conn, limit=10)), everything[:10])
        self.assertEqual(cts(self.qr(self.conn, limit=10000)), everything)
        self.assertEqual(cts(self.qr(self.conn, limit=63)), everything)
        self.assertEqual(cts(self.qr(self.conn, z_range=[4, 4], limit=3)),
                         self.model(zr=[4, 4])[:3])
        for bad in BAD_LIMITS:
            with self.subTest(limit=bad):
                self.assertRpcError(vt.E_VALUE, self.qr, self.conn,
                                    limit=bad)

    def test_after(self):
        everything = sorted(self.stored)
        for after in [(1, 1, 1), (5, 3, 2), (5, 3, 3), (4, 5, 4),
                      (990, 5, 4), (1000, 5, 4), (1000, 5, 3), (1, 1, 2)]:
            with self.subTest(after=after):
                got = self.qr(self.conn, after=vt.coord(*after))
                self.assertEqual(cts(got), [c for c in everything
                                            if c > after])
                self.assertFull(got, self.stored)
        got = self.qr(self.conn, x_range=[2, 10], z_range=[2, 2],
                      after=vt.coord(3, 3, 2), limit=3)
        self.assertEqual(cts(got), [(3, 5, 2), (5, 1, 2), (5, 3, 2)])

    def test_bad_after_is_a_coordinate_error(self):
        for bad in BAD_AFTERS:
            with self.subTest(after=bad):
                self.assertRpcError(vt.E_COORD, self.qr, self.conn,
                                    after=bad)


class RangePaging(QueryCase):
    def test_paging_returns_each_decision_once(self):
        rng = seed_rng("paging")
        conn = self.connect(agent_id="pager")
        items = [(x, y, z, "decision %d at %d %d %d" % (i, x, y, z))
                 for i, (x, y, z) in enumerate(random_coords(rng, 300))]
        stored = {ct(r): r for r in store_all(conn, items)}
        filters = [{}, {"x_range": [100, 700]}, {"z_range": [2, 3]},
                   {"x_range": [1, 500], "y_range": [2, 4], "z_range": [1, 2]}]
        for f in filters:
            with self.subTest(filters=f):
                whole = self.qr(conn, **f)
                self.assertEqual(cts(whole), sorted(cts(whole)))
                if not f:
                    self.assertEqual(cts(whole), sorted(stored))
                self.assertFull(whole, stored)
                pages, after = [], None
                for _ in range(len(whole) // 7 + 3):
                    params = dict(f, limit=7)
                    if after:
                        params["after"] = after
                    page = self.qr(conn, **params)
                    self.assertLessEqual(len(page), 7)
                    pages += page
                    if len(page) < 7:
                        break
                    after = page[-1]["coordinate"]
                self.assertEqual(pages, whole)
                self.assertEqual(len(set(cts(pages))), len(pages))

    def test_results_equal_get(self):
        rng = seed_rng("range-get")
        conn = self.connect(agent_id="g")
        items = [(x, y, z, "v1 %d" % i, {"issue_context": {"i": str(i)}})
                 for i, (x, y, z) in enumerate(random_coords(rng, 40, 20))]
        store_all(conn, items)
        for x, y, z, *_ in items[:15]:
            if z != 1:
                conn.store(x, y, z, "v2", overwrite=True, agent_id="other")
        for x, y, z, *_ in items[15:22]:
            if z != 1:
                conn.delete(x, y, z)
        got = self.qr(conn)
        live = sorted(c for c in (it[:3] for it in items)
                      if conn.get(*c) is not None)
        self.assertEqual(cts(got), live)
        for rec in got:
            self.assertEqual(rec, conn.get(*ct(rec)))


# --------------------------------------------------------------------------
# decision.query_partial_order

SPEC_EXAMPLE = [(1, 2, 1), (3, 2, 1), (3, 4, 2), (5, 2, 1), (5, 3, 2)]


def before(c, xt, yt):
    return c[0] < xt or (c[0] == xt and c[1] < yt)


class PartialOrder(QueryCase):
    def store_example(self, conn):
        items = [c + ("spec %d %d %d" % c,) for c in reversed(SPEC_EXAMPLE)]
        return {ct(r): r for r in store_all(conn, items)}

    def test_spec_example(self):
        conn = self.connect(agent_id="spec")
        stored = self.store_example(conn)
        got = self.po(conn, x_threshold=5, y_threshold=3)
        self.assertEqual(cts(got), [(1, 2, 1), (3, 2, 1), (3, 4, 2),
                                    (5, 2, 1)])
        self.assertFull(got, stored)
        got = self.po(conn, x_threshold=7, y_threshold=4)
        self.assertEqual(cts(got), SPEC_EXAMPLE)
        self.assertFull(got, stored)
        # (3, 4) and (5, 2) are incomparable, yet both are below (5, 3)
        self.assertEqual(cts(self.po(conn, x_threshold=5, y_threshold=2)),
                         [(1, 2, 1), (3, 2, 1), (3, 4, 2)])
        self.assertEqual(cts(self.po(conn, x_threshold=3, y_threshold=4)),
                         [(1, 2, 1), (3, 2, 1)])

    def test_z_filter(self):
        conn = self.connect(agent_id="spec")
        self.store_example(conn)
        self.assertEqual(cts(self.po(conn, x_threshold=7, y_threshold=4,
                                     z_filter=1)),
                         [(1, 2, 1), (3, 2, 1), (5, 2, 1)])
        self.assertEqual(cts(self.po(conn, x_threshold=7, y_threshold=4,
                                     z_filter=2)), [(3, 4, 2), (5, 3, 2)])
        self.assertEqual(cts(self.po(conn, x_threshold=5, y_threshold=3,
                                     z_filter=2)), [(3, 4, 2)])
        for z in (3, 4):
            self.assertEqual(self.po(conn, x_threshold=1001, y_threshold=6,
                                     z_filter=z), [])

    def test_threshold_boundaries(self):
        conn = self.connect(agent_id="b")
        items = [(1, 1, 2, "first"), (1, 5, 4, "one five"),
                 (1000, 5, 4, "last"), (1000, 1, 1, "last x"),
                 (500, 3, 3, "middle")]
        stored = {ct(r): r for r in store_all(conn, items)}
        everything = sorted(stored)
        self.assertEqual(cts(self.po(conn, x_threshold=1, y_threshold=6)),
                         [(1, 1, 2), (1, 5, 4)])
        self.assertEqual(self.po(conn, x_threshold=1, y_threshold=1), [])
        self.assertEqual(cts(self.po(conn, x_threshold=1, y_threshold=2)),
                         [(1, 1, 2)])
        self.assertEqual(cts(self.po(conn, x_threshold=1, y_threshold=5)),
                         [(1, 1, 2)])
        self.assertEqual(cts(self.po(conn, x_threshold=2, y_threshold=1)),
                         [(1, 1, 2), (1, 5, 4)])
        got = self.po(conn, x_threshold=1001, y_threshold=1)
        self.assertEqual(cts(got), everything)
        self.assertFull(got, stored)
        self.assertEqual(cts(self.po(conn, x_threshold=1001, y_threshold=6)),
                         everything)
        self.assertEqual(cts(self.po(conn, x_threshold=1000, y_threshold=6)),
                         everything)
        self.assertEqual(cts(self.po(conn, x_threshold=1000, y_threshold=5)),
                         [(1, 1, 2), (1, 5, 4), (500, 3, 3), (1000, 1, 1)])
        self.assertEqual(cts(self.po(conn, x_threshold=1000, y_threshold=1)),
                         [(1, 1, 2), (1, 5, 4), (500, 3, 3)])
        self.assertEqual(cts(self.po(conn, x_threshold=500, y_threshold=3)),
                         [(1, 1, 2), (1, 5, 4)])
        self.assertEqual(cts(self.po(conn, x_threshold=500, y_threshold=4)),
                         [(1, 1, 2), (1, 5, 4), (500, 3, 3)])

    def test_bad_thresholds(self):
        conn = self.connect()
        for bad in BAD_THRESHOLDS + [1002, 5000]:
            with self.subTest(x_threshold=bad):
                self.assertRpcError(vt.E_COORD, self.po, conn,
                                    x_threshold=bad, y_threshold=3)
        for bad in BAD_THRESHOLDS + [7, 100]:
            with self.subTest(y_threshold=bad):
                self.assertRpcError(vt.E_COORD, self.po, conn,
                                    x_threshold=5, y_threshold=bad)
        for bad in BAD_THRESHOLDS + [5, 7]:
            with self.subTest(z_filter=bad):
                self.assertRpcError(vt.E_COORD, self.po, conn,
                                    x_threshold=5, y_threshold=3,
                                    z_filter=bad)

    def test_missing_threshold_and_unknown_param(self):
        conn = self.connect()
        self.assertRpcError(vt.E_VALUE, self.po, conn, y_threshold=3)
        self.assertRpcError(vt.E_VALUE, self.po, conn, x_threshold=3)
        self.assertRpcError(vt.E_VALUE, self.po, conn)
        self.assertRpcError(vt.E_VALUE, self.po, conn, z_filter=1)
        # limit and after page it (as decision.query_range); in range only.
        self.assertRpcError(vt.E_VALUE, self.po, conn, x_threshold=3,
                            y_threshold=3, limit=0)
        self.assertRpcError(vt.E_COORD, self.po, conn, x_threshold=3,
                            y_threshold=3, after={"x": 0, "y": 1, "z": 1})
        self.assertEqual(self.po(conn, x_threshold=3, y_threshold=3,
                                 limit=5), [])
        self.assertRpcError(vt.E_VALUE, self.po, conn, x_threshold=3,
                            y_threshold=3, w=1)

    def test_random_against_model(self):
        rng = seed_rng("partial-order")
        conn = self.connect(agent_id="po")
        coords = random_coords(rng, 300, max_x=60)
        items = [c + ("random %d %d %d" % c,) for c in coords]
        stored = {ct(r): r for r in store_all(conn, items)}
        for _ in range(60):
            xt = rng.choice([1, 61, 1001] + [rng.randint(1, 62)] * 5)
            yt = rng.randint(1, 6)
            zf = rng.choice([None, 1, 2, 3, 4])
            params = {"x_threshold": xt, "y_threshold": yt}
            if zf:
                params["z_filter"] = zf
            got = self.po(conn, **params)
            want = sorted(c for c in stored if before(c, xt, yt)
                          and (zf is None or c[2] == zf))
            self.assertEqual(cts(got), want, params)
            self.assertFull(got, stored)


class PartialOrderMaxX(QueryCase):
    daemon_args = ("--max-x", "10")

    def test_x_threshold_bound_follows_max_x(self):
        conn = self.connect(agent_id="m")
        store_all(conn, [(10, 5, 4, "edge"), (1, 1, 1, "start"),
                         (10, 1, 2, "edge low")])
        self.assertEqual(cts(self.po(conn, x_threshold=11, y_threshold=1)),
                         [(1, 1, 1), (10, 1, 2), (10, 5, 4)])
        self.assertEqual(cts(self.po(conn, x_threshold=10, y_threshold=5)),
                         [(1, 1, 1), (10, 1, 2)])
        for bad in (12, 1001, 0):
            with self.subTest(x_threshold=bad):
                self.assertRpcError(vt.E_COORD, self.po, conn,
                                    x_threshold=bad, y_threshold=1)
        # ranges simply stop at the domain; after is a coordinate of it
        self.assertEqual(cts(self.qr(conn, x_range=[5, 2000])),
                         [(10, 1, 2), (10, 5, 4)])
        self.assertRpcError(vt.E_COORD, self.qr, conn,
                            after=vt.coord(11, 1, 1))


# --------------------------------------------------------------------------
# decision.search


class Search(QueryCase):
    def setUp(self):
        super().setUp()
        self.conn = self.connect(agent_id="seeker")
        self.stored = {}

    def put(self, x, y, z, content, **kw):
        rec = self.conn.store(x, y, z, content, **kw)
        self.stored[(x, y, z)] = rec
        return rec

    def found(self, terms, **params):
        hits = self.search(self.conn, terms, **params)
        self.assertHits(hits, self.stored)
        return cts(hits)

    def test_words_and_prefixes(self):
        self.put(5, 2, 1, "Use PostgreSQL database")
        self.put(6, 1, 2, "Posting queue is separate")
        self.put(7, 1, 2, "post the results")
        self.assertEqual(self.found(["post"]), [(7, 1, 2)])
        self.assertEqual(self.found(["post*"]),
                         [(5, 2, 1), (6, 1, 2), (7, 1, 2)])
        self.assertEqual(self.found(["postgres*"]), [(5, 2, 1)])
        self.assertEqual(self.found(["PostgreSQL"]), [(5, 2, 1)])
        self.assertEqual(self.found(["postgresql*"]), [(5, 2, 1)])
        self.assertEqual(self.found(["postgres"]), [])
        self.assertEqual(self.found(["gres*"]), [])
        self.assertEqual(self.found(["sql"]), [])
        self.assertEqual(self.found(["postgresqlx*"]), [])
        self.assertEqual(self.found(["DATABASE"]), [(5, 2, 1)])
        self.assertEqual(self.found(["use"]), [(5, 2, 1)])
        self.assertEqual(self.found(["us"]), [])

    def test_phrases(self):
        self.put(1, 1, 2, "Expose a REST API for agents")
        self.put(2, 1, 2, "the rest-api module")
        self.put(3, 1, 2, "REST-API versioning")
        self.put(4, 1, 2, "call rest_api directly")
        self.put(5, 1, 2, "the rest of the api")
        self.put(6, 1, 2, "api rest order reversed")
        self.put(7, 1, 2, "Use PostgreSQL database now")
        self.put(8, 1, 2, "postgresql: database\n(second)")
        self.put(9, 1, 2, "PostgreSQL and a database")
        for term in ("rest-api", "REST API", "rest api", "Rest--Api!"):
            with self.subTest(term=term):
                self.assertEqual(self.found([term]),
                                 [(1, 1, 2), (2, 1, 2), (3, 1, 2)])
        self.assertEqual(self.found(["rest_api"]), [(4, 1, 2)])
        self.assertEqual(self.found(["rest"]),
                         [(1, 1, 2), (2, 1, 2), (3, 1, 2), (5, 1, 2),
                          (6, 1, 2)])
        self.assertEqual(self.found(["PostgreSQL database"]),
                         [(7, 1, 2), (8, 1, 2)])
        self.assertEqual(self.found(["postgresql-DATABASE"]),
                         [(7, 1, 2), (8, 1, 2)])
        self.assertEqual(self.found(["PostgreSQL data*"]),
                         [(7, 1, 2), (8, 1, 2)])
        self.assertEqual(self.found(["database postgresql"]), [])
        self.assertEqual(self.found(["use postgresql database now"]),
                         [(7, 1, 2)])
        self.assertEqual(self.found(["use database"]), [])

    def test_phrase_positions(self):
        self.put(1, 1, 2, "rest rest api")
        self.put(2, 1, 2, "api rest x api rest")
        self.put(3, 1, 2, "a b a b c")
        cases = {"rest api": [(1, 1, 2)], "rest a*": [(1, 1, 2)],
                 "api rest": [(2, 1, 2)], "x api rest": [(2, 1, 2)],
                 "rest x api": [(2, 1, 2)], "a b c": [(3, 1, 2)],
                 "b a b c": [(3, 1, 2)], "a b a b c a": [],
                 "rest rest": [(1, 1, 2)], "rest rest rest": [],
                 "api api": [], "rest rest a*": [(1, 1, 2)],
                 "api rest x*": [(2, 1, 2)], "c a": []}
        for term, want in cases.items():
            with self.subTest(term=term):
                self.assertEqual(self.found([term]), want)

    def test_large_content(self):
        big = "filler " * 14000 + "needle"
        self.put(1, 1, 2, big)
        self.put(2, 1, 2, "filler")
        self.assertEqual(self.found(["needle"]), [(1, 1, 2)])
        self.assertEqual(self.found(["filler needle"]), [(1, 1, 2)])
        self.assertEqual(self.found(["needle filler"]), [])
        self.assertEqual(self.found(["filler"]), [(1, 1, 2), (2, 1, 2)])
        self.put(1, 1, 2, "small now", overwrite=True)
        self.assertEqual(self.found(["filler"]), [(2, 1, 2)])
        self.assertEqual(self.found(["needle"]), [])

    def test_match_all_score_and_matched_terms(self):
        self.put(2, 1, 2, "alpha beta gamma")
        self.put(1, 1, 2, "alpha only")
        self.put(3, 1, 2, "beta and gamma")
        self.put(1, 2, 3, "Gamma, ALPHA; beta!")
        self.put(9, 1, 2, "unrelated")
        hits = self.search(self.conn, ["gamma", "alpha", "beta"])
        self.assertHits(hits, self.stored)
        self.assertEqual(hit_summary(hits), [
            ((1, 2, 3), 3, ["gamma", "alpha", "beta"]),
            ((2, 1, 2), 3, ["gamma", "alpha", "beta"]),
            ((3, 1, 2), 2, ["gamma", "beta"]),
            ((1, 1, 2), 1, ["alpha"])])
        hits = self.search(self.conn, ["ALPHA", "Beta*"])
        self.assertEqual(hit_summary(hits), [
            ((1, 2, 3), 2, ["ALPHA", "Beta*"]),
            ((2, 1, 2), 2, ["ALPHA", "Beta*"]),
            ((1, 1, 2), 1, ["ALPHA"]),
            ((3, 1, 2), 1, ["Beta*"])])
        hits = self.search(self.conn, ["alpha", "beta"], match_all=True)
        self.assertEqual(hit_summary(hits), [
            ((1, 2, 3), 2, ["alpha", "beta"]),
            ((2, 1, 2), 2, ["alpha", "beta"])])
        self.assertEqual(self.found(["alpha", "nothing"], match_all=True), [])
        self.assertEqual(self.found(["alpha"], match_all=False),
                         [(1, 1, 2), (1, 2, 3), (2, 1, 2)])
        self.assertEqual(self.found(["gamma", "beta"], match_all=True),
                         [(1, 2, 3), (2, 1, 2), (3, 1, 2)])
        self.assertRpcError(vt.E_VALUE, self.search, self.conn, ["alpha"],
                            match_all="yes")
        self.assertRpcError(vt.E_VALUE, self.search, self.conn, ["alpha"],
                            match_all=1)

    def test_identical_terms_count_once(self):
        self.put(1, 1, 2, "alpha beta")
        self.put(2, 1, 2, "alpha")
        # a repeated term (also one equal after folding) counts once and
        # is listed once, as first given: score == len(matched_terms)
        hits = self.search(self.conn, ["alpha", "alpha"])
        self.assertEqual(cts(hits), [(1, 1, 2), (2, 1, 2)])
        for h in hits:
            self.assertEqual(h["score"], 1)
            self.assertEqual(h["matched_terms"], ["alpha"])
        hits = self.search(self.conn, ["alpha", "beta", "ALPHA"],
                           match_all=True)
        self.assertEqual(cts(hits), [(1, 1, 2)])
        self.assertEqual(hits[0]["score"], 2)
        self.assertEqual(hits[0]["matched_terms"], ["alpha", "beta"])
        self.assertEqual(self.found(["alpha", "alpha", "gamma"],
                                    match_all=True), [])

    def test_limit(self):
        for x in range(1, 13):
            self.put(x, 1, 2, "common" + (" rare" if x % 4 == 0 else ""))
        full = self.search(self.conn, ["common", "rare"])
        self.assertEqual(cts(full)[:3], [(4, 1, 2), (8, 1, 2), (12, 1, 2)])
        self.assertEqual(len(full), 12)
        for limit in (1, 2, 3, 4, 5, 12, 10000):
            with self.subTest(limit=limit):
                self.assertEqual(self.search(self.conn, ["common", "rare"],
                                             limit=limit), full[:limit])
        for bad in BAD_LIMITS:
            with self.subTest(limit=bad):
                self.assertRpcError(vt.E_VALUE, self.search, self.conn,
                                    ["common"], limit=bad)

    def test_query_errors(self):
        self.put(1, 1, 2, "something to find")
        for terms in ([], [""], ["--"], ["*"], ["!!!"], ["ok", ""],
                      ["something", "--"], [" "], ["-*"],
                      ["t%d" % i for i in range(65)], ["a" * 1025],
                      ["something", "\u00e9" * 513]):
            with self.subTest(terms=str(terms)[:50]):
                self.assertRpcError(E_QUERY, self.search, self.conn, terms)
        # the limits themselves are accepted
        self.assertEqual(self.found(["t%d" % i for i in range(63)]
                                    + ["something"]), [(1, 1, 2)])
        self.assertEqual(self.found(["a" * 1024]), [])
        self.assertEqual(self.found(["something", "\u00e9" * 512]),
                         [(1, 1, 2)])

    def test_value_errors(self):
        conn = self.conn
        for params in ({}, {"terms": "post"}, {"terms": None},
                       {"terms": {"a": "b"}}, {"terms": 5},
                       {"terms": ["ok", 5]}, {"terms": [None]},
                       {"terms": [["post"]]}, {"terms": [True]},
                       {"terms": ["ok"], "unknown": 1},
                       {"terms": ["ok"], "match": True},
                       {"match_all": True}):
            with self.subTest(params=params):
                self.assertRpcError(vt.E_VALUE, conn.call, "decision.search",
                                    params)

    def test_unicode(self):
        self.put(1, 1, 2, "\u00dcber die DATENBANK")
        self.put(2, 1, 2, "PostgreSQL \u30c7\u30fc\u30bf\u30d9\u30fc\u30b9 "
                 "\u3092\u4f7f\u3046")
        self.put(3, 1, 2, "U\u0308BERSICHT and caf\u00e9")  # NFD content
        self.put(4, 1, 2, "datenbank klein")
        for term in ("\u00dcber", "\u00fcber", "\u00dcBER", "U\u0308ber",
                     "u\u0308ber", "\u00fcBeR"):
            with self.subTest(term=term):
                self.assertEqual(self.found([term]), [(1, 1, 2)])
        for term in ("DATENBANK", "datenbank", "Datenbank"):
            with self.subTest(term=term):
                self.assertEqual(self.found([term]), [(1, 1, 2), (4, 1, 2)])
        db = "\u30c7\u30fc\u30bf\u30d9\u30fc\u30b9"
        self.assertEqual(self.found([db]), [(2, 1, 2)])
        self.assertEqual(self.found(["\u30c7\u30fc\u30bf"]), [])
        self.assertEqual(self.found(["\u30c7\u30fc\u30bf*"]), [(2, 1, 2)])
        self.assertEqual(self.found(["postgresql " + db]), [(2, 1, 2)])
        self.assertEqual(self.found(["\u00fcbersicht"]), [(3, 1, 2)])
        self.assertEqual(self.found(["\u00fcber*"]), [(1, 1, 2), (3, 1, 2)])
        self.assertEqual(self.found(["CAFE\u0301"]), [(3, 1, 2)])
        self.assertEqual(self.found(["cafe"]), [])
        self.assertEqual(self.found(["uber"]), [])
        self.put(5, 1, 2, "\U0001f680launch\U0001f680 \u6570\u636e\u5e93 "
                 "nai\u0308ve")
        self.assertEqual(self.found(["launch"]), [(5, 1, 2)])
        self.assertEqual(self.found(["\u6570\u636e\u5e93"]), [(5, 1, 2)])
        self.assertEqual(self.found(["NA\u00cfVE"]), [(5, 1, 2)])
        self.assertEqual(self.found(["naive"]), [])
        hits = self.search(self.conn, ["U\u0308ber", "DATENBANK"])
        self.assertEqual(hit_summary(hits), [
            ((1, 1, 2), 2, ["U\u0308ber", "DATENBANK"]),
            ((4, 1, 2), 1, ["DATENBANK"])])

    def test_overwrite_and_delete_take_effect_at_once(self):
        self.put(1, 1, 2, "alpha first")
        self.put(2, 1, 3, "alpha second")
        self.put(3, 1, 1, "alpha immutable")
        self.assertEqual(self.found(["alpha"]),
                         [(1, 1, 2), (2, 1, 3), (3, 1, 1)])
        self.put(1, 1, 2, "beta replaces", overwrite=True)
        self.assertEqual(self.found(["alpha"]), [(2, 1, 3), (3, 1, 1)])
        self.assertEqual(self.found(["first"]), [])
        self.assertEqual(self.found(["beta"]), [(1, 1, 2)])
        self.assertEqual(self.found(["alpha first"]), [])
        self.assertEqual(self.found(["beta replaces"]), [(1, 1, 2)])
        self.put(1, 1, 2, "alpha is back", if_version=2)
        self.assertEqual(self.found(["alpha"]),
                         [(1, 1, 2), (2, 1, 3), (3, 1, 1)])
        self.assertEqual(self.found(["beta"]), [])
        self.assertTrue(self.conn.delete(2, 1, 3))
        del self.stored[(2, 1, 3)]
        self.assertEqual(self.found(["alpha"]), [(1, 1, 2), (3, 1, 1)])
        self.assertEqual(self.found(["second"]), [])
        self.put(2, 1, 3, "gamma in place")
        self.assertEqual(self.found(["alpha"]), [(1, 1, 2), (3, 1, 1)])
        self.assertEqual(self.found(["gamma"]), [(2, 1, 3)])
        # refused writes change nothing
        self.assertRpcError(vt.E_IMMUTABLE, self.conn.store, 3, 1, 1,
                            "delta", overwrite=True)
        self.assertRpcError(vt.E_OCCUPIED, self.conn.store, 2, 1, 3, "delta")
        self.assertEqual(self.found(["delta"]), [])
        self.assertEqual(self.found(["alpha"]), [(1, 1, 2), (3, 1, 1)])
        # range queries agree
        self.assertEqual(cts(self.qr(self.conn)),
                         [(1, 1, 2), (2, 1, 3), (3, 1, 1)])

    def test_restart_keeps_results(self):
        texts = ["Use PostgreSQL database", "REST API over HTTP",
                 "\u00dcber DATENBANK \u30c7\u30fc\u30bf\u30d9\u30fc\u30b9",
                 "alpha beta", "beta gamma", "old text to forget"]
        for i, text in enumerate(texts):
            self.put(i + 1, 1 + i % 5, 2 + i % 3, text)
        self.put(6, 1, 4, "new text replaces", overwrite=True)
        self.conn.delete(4, 4, 2)
        del self.stored[(4, 4, 2)]
        queries = [(["post*"], {}), (["rest-api"], {}), (["\u00fcber"], {}),
                   (["alpha", "beta"], {}), (["beta", "gamma"],
                                             {"match_all": True}),
                   (["old"], {}), (["forget"], {}), (["text"], {}),
                   (["\u30c7\u30fc\u30bf*"], {}), (["new text"], {})]

        def answers():
            conn = self.connect()
            return [self.search(conn, t, **p) for t, p in queries], \
                self.qr(conn), self.po(conn, x_threshold=4, y_threshold=1)

        first = answers()
        self.assertEqual(cts(first[0][5]), [])
        self.assertEqual(cts(first[0][3]), [(5, 5, 3)])
        self.conn.close()
        self.daemon.restart()
        self.assertEqual(answers(), first)
        self.daemon.kill()
        self.daemon.start()
        self.assertEqual(answers(), first)
        # and the rebuilt index still follows overwrites
        conn = self.connect(agent_id="after")
        conn.store(1, 1, 2, "MySQL instead", overwrite=True)
        self.assertEqual(cts(self.search(conn, ["post*"])), [])
        self.assertEqual(cts(self.search(conn, ["mysql"])), [(1, 1, 2)])

    def test_kill9_right_after_acks(self):
        for x in range(1, 21):
            self.put(x, 1, 3, "entry%d shared words" % x)
        self.put(3, 1, 3, "rewritten entry", overwrite=True)
        self.conn.delete(4, 1, 3)
        del self.stored[(4, 1, 3)]
        self.daemon.kill()  # no graceful flush: the log must be replayed
        self.daemon.start()
        self.conn = self.connect()
        self.assertEqual(self.found(["shared"]),
                         sorted(c for c in self.stored if c != (3, 1, 3)))
        self.assertEqual(self.found(["entry3"]), [])
        self.assertEqual(self.found(["entry4"]), [])
        self.assertEqual(self.found(["rewritten"]), [(3, 1, 3)])


VOCAB = ["alpha", "beta", "gamma", "delta", "post", "postgres",
         "postgresql", "posting", "rest", "api", "rest_api", "data",
         "database", "db", "cache", "cached", "caching", "x1", "x10",
         "x100", "v2", "2024", "io", "iot", "log", "logger", "lock"]
SEPARATORS = [" ", " ", " ", "-", ", ", ". ", "\n", "/", " (", ") ", ": ",
              "!", " * ", "\t"]


def random_text(rng):
    words = [rng.choice(VOCAB) for _ in range(rng.randint(1, 12))]
    out = ""
    for w in words:
        w = rng.choice([w, w, w.upper(), w.capitalize()])
        out += w + rng.choice(SEPARATORS)
    return out.strip() or "alpha"


def random_term(rng):
    kind = rng.randrange(6)
    word = rng.choice(VOCAB + ["zeta", "apis", "postgresqls"])
    if kind == 0:  # a prefix
        return word[:rng.randint(1, len(word))] + "*"
    if kind in (1, 2):  # a phrase of 2 or 3 words
        words = [rng.choice(VOCAB) for _ in range(rng.randint(2, 3))]
        term = rng.choice([" ", "-", ", "]).join(words)
        return term + ("*" if rng.random() < 0.3 else "")
    return rng.choice([word, word.upper(), word.capitalize()])


class SearchModel(QueryCase):
    def test_random_operations_against_model(self):
        rng = seed_rng("search-model")
        conn = self.connect(agent_id="model")
        coords = [(x, y, z) for x in range(1, 9) for y in range(1, 6)
                  for z in range(1, 5)]
        live = {}
        for step in range(200):
            if step % 20 == 19:  # no stale or missing postings on the way
                for _ in range(3):
                    terms = [random_term(rng)]
                    hits = self.search(conn, terms)
                    self.assertEqual(hit_summary(hits),
                                     model_search(live, terms), terms)
            c = rng.choice(coords)
            text = random_text(rng)
            if c not in live:
                live[c] = conn.store(*c, text)
            elif c[2] == 1:
                continue
            elif rng.random() < 0.3:
                self.assertTrue(conn.delete(*c))
                del live[c]
            else:
                live[c] = conn.store(*c, text, overwrite=True)
        vt.diag("%d decisions live" % len(live))
        queries = []
        for _ in range(100):
            terms, keys = [], set()
            for _ in range(rng.choice([1, 1, 2, 3])):
                # no two terms that differ only in case or punctuation
                t = random_term(rng)
                key = (tuple(tokens(t)), t.endswith("*"))
                if key not in keys:
                    keys.add(key)
                    terms.append(t)
            params = {}
            if rng.random() < 0.3:
                params["match_all"] = True
            if rng.random() < 0.2:
                params["limit"] = rng.randint(1, 5)
            queries.append((terms, params))
        nonempty = 0
        for terms, params in queries:
            hits = self.search(conn, terms, **params)
            want = model_search(live, terms, params.get("match_all", False),
                                params.get("limit"))
            self.assertEqual(hit_summary(hits), want, (terms, params))
            self.assertHits(hits, live)
            nonempty += bool(hits)
        self.assertGreater(nonempty, 20)  # the queries did find things
        self.assertEqual(cts(self.qr(conn)), sorted(live))
        # the same answers from the index rebuilt at start-up
        conn.close()
        self.daemon.restart()
        conn = self.connect()
        for terms, params in queries[:30]:
            hits = self.search(conn, terms, **params)
            want = model_search(live, terms, params.get("match_all", False),
                                params.get("limit"))
            self.assertEqual(hit_summary(hits), want, (terms, params))
            self.assertHits(hits, live)


# --------------------------------------------------------------------------
# Reads never wait for writes


class ReadsDuringWrites(QueryCase):
    def test_queries_answer_while_another_connection_writes(self):
        reader = self.connect(agent_id="reader")
        writer = self.connect(agent_id="writer")
        base = reader.store(500, 1, 2, "common base")
        acked = [base]
        stop = threading.Event()
        failure = []

        def write_loop():
            try:
                i = 0
                deadline = time.monotonic() + vt.scaled(1.5)
                while not stop.is_set() and time.monotonic() < deadline \
                        and i < 3000:
                    i += 1
                    acked.append(writer.store(500, 1 + i % 5, 3,
                                              "common write %d" % i,
                                              overwrite=True))
            except Exception as e:  # reported by the main thread
                failure.append(e)

        t = threading.Thread(target=write_loop)
        t.start()
        seen, slowest, reads = [], 0.0, 0
        last_version = {}
        try:
            while t.is_alive() and reads < 5000:
                for method, params in (
                        ("decision.query_range", {"x_range": [500, 500]}),
                        ("decision.search", {"terms": ["common"]}),
                        ("decision.query_partial_order",
                         {"x_threshold": 501, "y_threshold": 1})):
                    started = time.monotonic()
                    got = reader.call(method, params)
                    slowest = max(slowest, time.monotonic() - started)
                    reads += 1
                    self.assertEqual(cts(got), sorted(cts(got)))
                    for rec in got:
                        rec = plain(rec)
                        seen.append(rec)
                        # a later read never goes back to an older version
                        c = ct(rec)
                        self.assertGreaterEqual(rec["version"],
                                                last_version.get(c, 0))
                        last_version[c] = rec["version"]
        finally:
            stop.set()
            t.join()
        self.assertEqual(failure, [])
        vt.diag("%d writes, %d reads, slowest read %.1f ms"
                % (len(acked), reads, slowest * 1000))
        self.assertGreater(len(acked), 20)
        self.assertGreater(reads, 20)
        self.assertLess(slowest, 1.0)
        known = {json.dumps(r, sort_keys=True) for r in acked}
        for rec in seen:
            self.assertIn(json.dumps(rec, sort_keys=True), known)

    def test_query_while_a_store_is_half_sent(self):
        reader = self.connect(agent_id="reader")
        reader.store(1, 1, 2, "visible")
        writer = self.connect(agent_id="writer")
        line = json.dumps({"jsonrpc": "2.0", "id": 9,
                           "method": "decision.store",
                           "params": {"coordinate": vt.coord(2, 1, 2),
                                      "content": "in flight"}}) + "\n"
        writer.send_raw(line[:40].encode())
        started = time.monotonic()
        self.assertEqual(cts(self.qr(reader)), [(1, 1, 2)])
        self.assertEqual(cts(self.search(reader, ["visible"])), [(1, 1, 2)])
        self.assertEqual(cts(self.po(reader, x_threshold=3,
                                     y_threshold=1)), [(1, 1, 2)])
        self.assertLess(time.monotonic() - started, 1.0)
        writer.send_raw(line[40:].encode())
        self.assertEqual(writer.response(9)["content"], "in flight")
        self.assertEqual(cts(self.search(reader, ["flight"])), [(2, 1, 2)])


# --------------------------------------------------------------------------
# The command line


def cli_env():
    env = dict(os.environ)
    for name in ("VMEM_SOCKET", "VMEM_REPO", "VMEM_NO_AUTOSTART",
                 "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    env.update({"VMEMD": vt.VMEMD, "VMEM_AGENT_ID": "cli"})
    return env


class Cli(QueryCase):
    def setUp(self):
        super().setUp()
        self.conn = self.connect(agent_id="cli-seed")
        store_all(self.conn, [
            (5, 2, 1, "Use PostgreSQL database\nsecond line"),
            (1, 1, 2, "REST API for the postbox"),
            (3, 4, 3, "posting queue"),
            (2, 5, 4, "cache layer, nothing else"),
            (7, 3, 2, "PostgreSQL replication"),
        ])

    def vmem(self, *args):
        argv = [vt.VMEM, "--socket", self.daemon.sock, "--repo",
                self.repo.root, "--no-autostart"] + list(args)
        return subprocess.run(argv, capture_output=True, text=True,
                              env=cli_env(), timeout=vt.scaled(30))

    def ok(self, *args):
        p = self.vmem(*args)
        self.assertEqual(p.returncode, 0, "vmem %s: stdout %r stderr %r"
                         % (args, p.stdout, p.stderr))
        return p.stdout

    def fails(self, code, *args, type_name=None):
        p = self.vmem(*args)
        self.assertEqual(p.returncode, code, "vmem %s: stdout %r stderr %r"
                         % (args, p.stdout, p.stderr))
        self.assertTrue(p.stderr.strip(), "no message on stderr")
        if type_name:
            self.assertIn(type_name, p.stderr)
        return p

    def test_json_equals_the_daemon(self):
        cases = [
            (["ls", "--x", "1-3", "--json"], "decision.query_range",
             {"x_range": [1, 3]}),
            (["ls", "--json"], "decision.query_range", {}),
            (["ls", "--y", "2-4", "--z", "1-2", "--limit", "1", "--json"],
             "decision.query_range",
             {"y_range": [2, 4], "z_range": [1, 2], "limit": 1}),
            (["before", "5", "3", "--json"], "decision.query_partial_order",
             {"x_threshold": 5, "y_threshold": 3}),
            (["before", "8", "1", "--z", "2", "--json"],
             "decision.query_partial_order",
             {"x_threshold": 8, "y_threshold": 1, "z_filter": 2}),
            (["search", "post*", "--all", "--json"], "decision.search",
             {"terms": ["post*"], "match_all": True}),
            (["search", "post*", "database", "--json"], "decision.search",
             {"terms": ["post*", "database"]}),
            (["search", "postgresql", "database", "--all", "--json"],
             "decision.search",
             {"terms": ["postgresql", "database"], "match_all": True}),
            (["search", "post*", "--limit", "2", "--json"], "decision.search",
             {"terms": ["post*"], "limit": 2}),
        ]
        for args, method, params in cases:
            with self.subTest(args=args):
                got = json.loads(self.ok(*args))
                want = self.conn.call(method, params)
                self.assertTrue(want or args == ["ls", "--json"])
                self.assertEqual(got, want)

    def test_empty_results_exit_zero(self):
        self.assertEqual(json.loads(self.ok("ls", "--x", "900-901",
                                            "--json")), [])
        self.assertEqual(json.loads(self.ok("before", "1", "1", "--json")),
                         [])
        self.assertEqual(json.loads(self.ok("search", "zebra", "--json")),
                         [])
        self.ok("ls", "--x", "900-901")
        self.ok("before", "1", "1")
        self.ok("search", "zebra")

    def test_query_errors_exit_one(self):
        self.fails(1, "ls", "--x", "7-3", type_name="QueryError")
        self.fails(1, "ls", "--z", "4-1", "--json", type_name="QueryError")
        self.fails(1, "search", "!!!", "--json", type_name="QueryError")
        self.fails(1, "search", "--json", "--", "--", type_name="QueryError")

    def test_usage_errors_exit_two(self):
        for args in (["ls", "--x", "a-b"], ["ls", "--x"], ["before", "5"],
                     ["before"], ["search"], ["ls", "--limit", "x"],
                     ["before", "5", "x"]):
            with self.subTest(args=args):
                self.fails(2, *args)

    def test_human_output(self):
        out = self.ok("ls")
        self.assertIn("(5, 2, 1)", out)
        self.assertIn("Architecture", out)
        self.assertIn("Use PostgreSQL database", out)
        self.assertNotIn("second line", out)  # the first line only
        self.assertIn("(2, 5, 4)", out)
        self.assertIn("Ephemeral", out)
        out = self.ok("before", "6", "1")
        self.assertIn("(5, 2, 1)", out)
        self.assertIn("Architecture", out)
        self.assertNotIn("(7, 3, 2)", out)
        out = self.ok("search", "postgresql")
        self.assertIn("(5, 2, 1)", out)
        self.assertIn("(7, 3, 2)", out)
        self.assertIn("Architecture", out)
        self.assertIn("Interfaces", out)
        self.assertNotIn("(3, 4, 3)", out)


# --------------------------------------------------------------------------
# Big answers go out in slices, as the index was when they began


class BigAnswersInSlices(QueryCase):
    """A read whose answer is far over output_backlog goes out a slice at a
    time while other connections write, and answers the index as it was
    when the read began: the reader holds the answer half read while the
    writer overwrites, deletes and adds inside it, and every write is
    acknowledged meanwhile."""

    daemon_args = ("--output-backlog", "65536")
    N = 1200  # decisions of ~1 KB: the answer is ~1.5 MB

    def load(self, conn, words, n=None):
        """n (N) decisions at x 1..n/20, all y and z, stored with
        store_many; {(x, y, z): record}."""
        items = []
        for i in range(n or self.N):
            x, y, z = 1 + i // 20, 1 + i // 4 % 5, 1 + i % 4
            items.append({"coordinate": vt.coord(x, y, z),
                          "content": "%s %d %s" % (words, i, "pad " * 240)})
        stored = {}
        for start in range(0, len(items), 400):
            for rec in conn.call("decision.store_many",
                                 {"items": items[start:start + 400]}):
                stored[ct(rec)] = rec
        return stored

    def begin_read(self, reader, method, params):
        """Send a big read and read its first bytes only: it has begun."""
        rid = reader.request(method, params)
        head = b'{"jsonrpc":"2.0","id":%d,"result":[' % rid
        reader.sock.settimeout(vt.DEFAULT_TIMEOUT)
        first = b""
        while len(first) < len(head) + 1:
            chunk = reader.sock.recv(4096)
            self.assertTrue(chunk, "end of file in the answer's head")
            first += chunk
        self.assertTrue(first.startswith(head), first[:80])
        reader.buf += first
        return rid

    def write_meanwhile(self, writer, last_x, word):
        """Overwrite, delete and add inside the answer, early and late in
        its order; each write acknowledged while the reader waits."""
        for x in (1, 2, last_x - 1, last_x):
            writer.store(x, 2, 3, "%s overwritten" % word, overwrite=True)
            self.assertTrue(writer.call("decision.delete",
                                        {"coordinate": vt.coord(x, 3, 4)}))
        for x in (last_x + 1, last_x + 2):
            writer.store(x, 1, 2, "%s added after the read began" % word)

    def test_big_range_is_sliced_and_sees_its_beginning(self):
        writer = self.connect(agent_id="writer")
        reader = self.connect(agent_id="reader")
        stored = self.load(writer, "common")
        last_x = self.N // 20
        rid = self.begin_read(reader, "decision.query_range", {})
        self.write_meanwhile(writer, last_x, "common")
        got = reader.response(rid)
        self.assertEqual(cts(got), sorted(stored))
        self.assertFull(got, stored)
        # The next read sees the writes.
        now = self.qr(reader)
        self.assertEqual(len(now), self.N - 4 + 2)
        self.assertEqual(reader.get(1, 2, 3)["content"],
                         "common overwritten")

    def test_big_partial_order_is_sliced(self):
        writer = self.connect(agent_id="writer")
        reader = self.connect(agent_id="reader")
        stored = self.load(writer, "common")
        last_x = self.N // 20
        rid = self.begin_read(reader, "decision.query_partial_order",
                              {"x_threshold": last_x + 5, "y_threshold": 1})
        self.write_meanwhile(writer, last_x, "common")
        got = reader.response(rid)
        self.assertEqual(cts(got), sorted(stored))
        self.assertFull(got, stored)

    def test_big_search_is_sliced_and_sees_its_beginning(self):
        writer = self.connect(agent_id="writer")
        reader = self.connect(agent_id="reader")
        stored = self.load(writer, "common")
        last_x = self.N // 20
        rid = self.begin_read(reader, "decision.search",
                              {"terms": ["common", "absent"]})
        # The overwrites drop the word, the additions bring it.
        self.write_meanwhile(writer, last_x, "other")
        hits = reader.response(rid)
        self.assertEqual(cts(hits), sorted(stored))
        self.assertHits(hits, stored)
        self.assertEqual({h["score"] for h in hits}, {1})
        now = self.search(reader, ["common"])
        self.assertEqual(len(now), self.N - 8)

    def test_big_answer_in_a_batch_keeps_its_place(self):
        writer = self.connect(agent_id="writer")
        stored = self.load(writer, "common")
        reader = self.connect(agent_id="reader")
        reader.send([{"jsonrpc": "2.0", "id": 1, "method": "decision.get",
                      "params": {"coordinate": vt.coord(1, 1, 1)}},
                     {"jsonrpc": "2.0", "id": 2,
                      "method": "decision.query_range", "params": {}},
                     {"jsonrpc": "2.0", "method": "decision.get",
                      "params": {"coordinate": vt.coord(1, 1, 1)}},
                     {"jsonrpc": "2.0", "id": 3, "method": "decision.search",
                      "params": {"terms": ["common"]}},
                     {"jsonrpc": "2.0", "id": 4, "method": "decision.exists",
                      "params": {"coordinate": vt.coord(1, 1, 1)}}])
        got = json.loads(reader.read_line())
        self.assertEqual([r["id"] for r in got], [1, 2, 3, 4])
        self.assertEqual(got[0]["result"], stored[(1, 1, 1)])
        self.assertEqual(cts(got[1]["result"]), sorted(stored))
        self.assertEqual(len(got[2]["result"]), self.N)
        self.assertIs(got[3]["result"], True)
        # And the connection goes on.
        self.assertEqual(reader.get(1, 1, 1), stored[(1, 1, 1)])

    def test_unread_answer_is_not_built_whole(self):
        """An answer of ~8 MB that the reader leaves unread costs the
        daemon about output_backlog and a slice, not 8 MB (measured from
        /proc, with a generous bound)."""
        writer = self.connect(agent_id="writer")
        self.load(writer, "common", 6000)
        reader = self.connect(agent_id="reader")
        # The writes' own first-time memory is counted before.
        for i in range(20):
            writer.store(1, 1, 2, "warm-up %d" % i, overwrite=True)
        before = self.daemon.rss_kib()
        rid = self.begin_read(reader, "decision.query_range", {})
        # Writes still go through, then the answer has had its chance to
        # grow as far as the daemon lets it.
        for i in range(20):
            writer.store(1, 1, 2, "write %d" % i, overwrite=True)
        grown = self.daemon.rss_kib() - before
        vt.diag("RSS grew %d KiB while an ~8 MB answer waited unread"
                % grown)
        # Half the answer: building it whole costs all of it and more.
        if vt.daemon_is_sanitized():
            vt.diag("sanitized daemon: RSS bound not checked")
        else:
            self.assertLess(grown, 4 * 1024)
        self.assertEqual(len(reader.response(rid)), 6000)

    def test_reader_gone_in_the_middle(self):
        writer = self.connect(agent_id="writer")
        self.load(writer, "common")
        reader = self.connect(agent_id="reader")
        self.begin_read(reader, "decision.query_range", {})
        reader.close()
        # The daemon drops the answer and serves on.
        writer.store(1, 1, 2, "after the reader left", overwrite=True)
        self.assertEqual(len(self.qr(writer, x_range=[1, 1])), 20)


if __name__ == "__main__":
    vt.main()

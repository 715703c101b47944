#!/usr/bin/env python3
"""Experience memory (issue 14) against a real daemon on a real git
repository: every experience.* method's results and refusals, the shards
in the tree and in git, reloads after checkouts and pulls (two clones
merging their shards with merge=union), bad lines quarantined, a kill -9
in the middle of writes, subscriptions, and the CLI, MCP and Python
front doors."""

import base64
import datetime
import json
import os
import re
import subprocess
import sys
import threading

import test_cli
import test_mcp
import vmemtest as vt

ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                   r"[0-9a-f]{12}$")
RECORD_KEYS = ["id", "agent_id", "context", "action", "outcome", "timestamp",
               "importance", "tags", "metadata"]
E_QUERY = vt.E_QUERY
E_VALUE = vt.E_VALUE


def exp(conn, context="User requested file analysis",
        action="Analyzed src/ directory structure",
        outcome="Found 142 Python files, 2 test gaps", **kw):
    params = dict(context=context, action=action, outcome=outcome)
    params.update(kw)
    return conn.call("experience.store", params)


def segment(agent):
    """The shard directory of an agent (docs/protocol.md)."""
    if re.fullmatch(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*", agent):
        return agent
    return "~" + base64.urlsafe_b64encode(agent.encode()).decode().rstrip("=")


def shard_rel(rec):
    day = rec["timestamp"][:10]
    return os.path.join(".vector-memory", "experiences",
                        segment(rec["agent_id"]), day + ".jsonl")


class Records(vt.VmemTestCase):
    def assertRecord(self, rec, agent="a1", **fields):
        self.assertEqual(list(rec.keys()), RECORD_KEYS)
        self.assertRegex(rec["id"], ID_RE)
        self.assertTimestamp(rec["timestamp"])
        self.assertEqual(rec["agent_id"], agent)
        for k, v in fields.items():
            self.assertEqual(rec[k], v, k)

    def test_store_and_get(self):
        conn = self.connect(agent_id="a1")
        rec = exp(conn, tags=["analysis", "codebase"], importance=7,
                  metadata={"files": 142, "nested": {"k": [1, None]}})
        self.assertRecord(rec, context="User requested file analysis",
                          importance=7, tags=["analysis", "codebase"],
                          metadata={"files": 142, "nested": {"k": [1, None]}})
        self.assertEqual(conn.call("experience.get", {"id": rec["id"]}), rec)
        # Defaults: importance 5, no tags, metadata {}.
        plain = exp(conn)
        self.assertRecord(plain, importance=5, tags=[], metadata={})
        # An explicit agent wins over the connection's.
        other = exp(conn, agent_id="someone else")
        self.assertEqual(other["agent_id"], "someone else")
        # Ids and timestamps follow the order of writes, shared with
        # decisions.
        dec = conn.store(1, 1, 2, "a decision between")
        last = exp(conn)
        self.assertLess(plain["id"], other["id"])
        self.assertLess(other["timestamp"], dec["timestamp"])
        self.assertLess(dec["timestamp"], last["timestamp"])
        self.assertLess(other["id"], last["id"])
        # Unicode and the limits, exactly.
        big = "é" * (51200)  # 102400 bytes
        rec = exp(conn, context=big, action="x" * 102400, outcome="ok",
                  tags=["t" * 64] + ["t%d" % i for i in range(31)])
        self.assertEqual(rec["context"], big)
        self.assertEqual(len(rec["tags"]), 32)
        self.assertIsNone(conn.call("experience.get", {
            "id": "01943c3c-b93b-774b-8102-030405060708"}))
        self.assertEqual(conn.call("server.health")["experiences"], 5)

    def test_store_refusals(self):
        conn = self.connect(agent_id="a1")
        good = dict(context="c", action="a", outcome="o")
        cases = []
        for f in ("context", "action", "outcome"):
            for bad in ("", " \t\n", None, 5, ["x"], "x" * 102401):
                cases.append(dict(good, **{f: bad}))
            p = dict(good)
            del p[f]
            cases.append(p)
        for imp in (0, 11, -1, 5.0, "5", True, [5]):
            cases.append(dict(good, importance=imp))
        for tags in ("t", [""], [1], ["a", "a"], ["x" * 65], ["a\nb"],
                     ["t%d" % i for i in range(33)], {"a": 1}):
            cases.append(dict(good, tags=tags))
        for meta in ([1], "m", 3, {"k": "v" * 16400}):
            cases.append(dict(good, metadata=meta))
        cases.append(dict(good, extra=1))
        cases.append(dict(good, agent_id=""))
        cases.append(dict(good, agent_id="a\u0001"))
        for params in cases:
            with self.subTest(params={k: (v if len(str(v)) < 80 else "...")
                                      for k, v in params.items()}):
                self.assertRpcError(E_VALUE, conn.call, "experience.store",
                                    params)
        # No agent at all: neither in params nor from server.hello.
        anon = self.connect()
        self.assertRpcError(E_VALUE, anon.call, "experience.store", good)
        self.assertEqual(conn.call("server.health")["experiences"], 0)

    def test_get_and_delete(self):
        conn = self.connect(agent_id="a1")
        rec = exp(conn)
        for bad in ({}, {"id": 5}, {"id": "not-an-id"},
                    {"id": "01943c3c-b93b-474b-8102-030405060708"},
                    {"id": rec["id"], "x": 1}):
            self.assertRpcError(E_VALUE, conn.call, "experience.get", bad)
            self.assertRpcError(E_VALUE, conn.call, "experience.delete", bad)
        # Either case of hex reads.
        self.assertEqual(conn.call("experience.get",
                                   {"id": rec["id"].upper()}), rec)
        self.assertTrue(conn.call("experience.delete", {"id": rec["id"]}))
        self.assertIsNone(conn.call("experience.get", {"id": rec["id"]}))
        self.assertFalse(conn.call("experience.delete", {"id": rec["id"]}))
        self.assertEqual(conn.call("experience.retrieve", {}), [])
        self.assertEqual(conn.call("server.health")["experiences"], 0)
        # The deletion is a tombstone line after the record's.
        path = os.path.join(self.repo.root, shard_rel(rec))
        self.assertTrue(vt.wait_until(
            lambda: os.path.exists(path) and
            len(open(path).read().splitlines()) == 2))
        lines = [json.loads(ln) for ln in open(path).read().splitlines()]
        self.assertEqual(lines[0], rec)
        self.assertEqual(list(lines[1]), ["deleted", "agent_id", "timestamp",
                                          "deleted_by"])
        self.assertEqual(lines[1]["deleted"], rec["id"])
        self.assertEqual(lines[1]["deleted_by"], "a1")

    def test_retrieve(self):
        conn = self.connect(agent_id="r")
        made = []
        for i in range(12):
            made.append(exp(conn, context="step %d" % i,
                            importance=1 + i % 10,
                            tags=["even"] if i % 2 == 0 else ["odd", "x"]))
        exp(conn, agent_id="other", tags=["even"])
        newest = made[::-1]
        got = conn.call("experience.retrieve", {"agent_id": "r"})
        self.assertEqual(got, newest[:10])  # limit 10 by default
        self.assertEqual(conn.call("experience.retrieve", {}), newest[:10])
        self.assertEqual(conn.call("experience.retrieve", {"limit": 3}),
                         newest[:3])
        self.assertEqual(conn.call("experience.retrieve",
                                   {"tags": ["even"], "limit": 100}),
                         [r for r in newest if "even" in r["tags"]])
        self.assertEqual(conn.call("experience.retrieve",
                                   {"tags": ["odd", "x"], "limit": 100}),
                         [r for r in newest if "odd" in r["tags"]])
        self.assertEqual(conn.call("experience.retrieve",
                                   {"tags": ["even", "odd"]}), [])
        self.assertEqual(conn.call("experience.retrieve",
                                   {"min_importance": 8, "limit": 100}),
                         [r for r in newest if r["importance"] >= 8])
        since, until = made[3]["timestamp"], made[6]["timestamp"]
        self.assertEqual(conn.call("experience.retrieve",
                                   {"since": since, "until": until}),
                         newest[5:9])
        # Other forms of RFC 3339: an offset, no fraction.
        t = datetime.datetime.strptime(made[3]["timestamp"],
                                       "%Y-%m-%dT%H:%M:%S.%fZ")
        shifted = (t + datetime.timedelta(hours=2)).strftime(
            "%Y-%m-%dT%H:%M:%S.%f+02:00")
        self.assertEqual(conn.call("experience.retrieve",
                                   {"since": shifted, "limit": 100}),
                         newest[:9])
        # Paging with after.
        page1 = conn.call("experience.retrieve", {"limit": 5})
        page2 = conn.call("experience.retrieve",
                          {"limit": 5, "after": page1[-1]["id"]})
        self.assertEqual(page1 + page2, newest[:10])
        self.assertEqual(conn.call("experience.retrieve",
                                   {"agent_id": "nobody"}), [])
        for bad in ({"limit": 0}, {"limit": 10001}, {"limit": "3"},
                    {"min_importance": 0}, {"min_importance": 11},
                    {"tags": "even"}, {"tags": [""]}, {"since": "yesterday"},
                    {"until": 5}, {"after": "x"}, {"agent_id": ""},
                    {"extra": 1}):
            self.assertRpcError(E_VALUE, conn.call, "experience.retrieve",
                                bad)
        self.assertRpcError(E_QUERY, conn.call, "experience.retrieve",
                            {"since": until, "until": since})
        self.assertRpcError(E_VALUE, self.connect().call,
                            "experience.retrieve", {})

    def test_find_similar(self):
        conn = self.connect(agent_id="s")
        a = exp(conn, context="User requested file analysis of the repo",
                importance=5)
        b = exp(conn, context="Deploy the PostgreSQL database",
                action="ran migrations", outcome="deployed", importance=9)
        c = exp(conn, context="Write a blog post about the release",
                action="drafted", outcome="published", importance=3)
        d = exp(conn, context="Unrelated", action="file analysis",
                outcome="fine", agent_id="other")
        got = conn.call("experience.find_similar",
                        {"context": "file analysis requested"})
        self.assertEqual([r["id"] for r in got], [a["id"], d["id"]])
        self.assertEqual(list(got[0].keys()), RECORD_KEYS +
                         ["score", "matched_terms"])
        self.assertGreater(got[0]["score"], got[1]["score"])
        self.assertEqual(got[0]["matched_terms"],
                         ["file", "analysis", "requested"])
        self.assertEqual(got[1]["matched_terms"], ["file", "analysis"])
        # Whole words only: post is not PostgreSQL; post* is.
        self.assertEqual([r["id"] for r in conn.call(
            "experience.find_similar", {"context": "post"})], [c["id"]])
        self.assertEqual({r["id"] for r in conn.call(
            "experience.find_similar", {"context": "post*"})},
            {b["id"], c["id"]})
        self.assertEqual(conn.call("experience.find_similar",
                                   {"context": "post*"})[0]["matched_terms"],
                         ["post*"])
        self.assertEqual(conn.call("experience.find_similar",
                                   {"context": "postgres"}), [])
        self.assertEqual([r["id"] for r in conn.call(
            "experience.find_similar",
            {"context": "file analysis", "agent_id": "s"})], [a["id"]])
        self.assertEqual(conn.call("experience.find_similar",
                                   {"context": "file analysis",
                                    "min_importance": 6}), [])
        self.assertEqual(len(conn.call("experience.find_similar",
                                       {"context": "the deploy file",
                                        "limit": 1})), 1)
        for empty in ("", "   ", "the and of to", "!!! ---"):
            self.assertRpcError(E_QUERY, conn.call, "experience.find_similar",
                                {"context": empty})
        for bad in ({}, {"context": 5}, {"context": "x", "limit": 0},
                    {"context": "x", "min_importance": 11},
                    {"context": "x", "agent_id": 3},
                    {"context": "x", "extra": 1}):
            self.assertRpcError(E_VALUE, conn.call, "experience.find_similar",
                                bad)

    def test_similar_ties(self):
        conn = self.connect(agent_id="t")
        low = exp(conn, context="same words", importance=2)
        high = exp(conn, context="same words", importance=8)
        newer = exp(conn, context="same words", importance=2)
        got = conn.call("experience.find_similar", {"context": "same words"})
        self.assertEqual([r["id"] for r in got],
                         [high["id"], newer["id"], low["id"]])

    def test_stats(self):
        conn = self.connect(agent_id="st")
        empty = conn.call("experience.stats", {})
        self.assertEqual(empty, {"agent_id": None, "total_count": 0,
                                 "avg_importance": 0.0, "oldest": None,
                                 "newest": None, "tag_distribution": {},
                                 "tags_total": 0, "agents": {},
                                 "agents_total": 0})
        r1 = exp(conn, importance=4, tags=["a", "b"])
        exp(conn, importance=6, tags=["a"])
        r3 = exp(conn, importance=8, tags=["c"])
        exp(conn, agent_id="zz", importance=10, tags=["a"])
        s = conn.call("experience.stats", {"agent_id": "st"})
        self.assertEqual(s, {"agent_id": "st", "total_count": 3,
                             "avg_importance": 6.0,
                             "oldest": r1["timestamp"],
                             "newest": r3["timestamp"],
                             "tag_distribution": {"a": 2, "b": 1, "c": 1},
                             "tags_total": 3})
        all_ = conn.call("experience.stats")
        self.assertEqual(all_["total_count"], 4)
        self.assertEqual(all_["avg_importance"], 7.0)
        self.assertEqual(all_["agents"], {"st": 3, "zz": 1})
        self.assertEqual(all_["tag_distribution"], {"a": 3, "b": 1, "c": 1})
        self.assertEqual(conn.call("experience.stats", {"agent_id": "none"})
                         ["total_count"], 0)
        conn.call("experience.delete", {"id": r3["id"]})
        s = conn.call("experience.stats", {"agent_id": "st"})
        self.assertEqual((s["total_count"], s["avg_importance"],
                          s["tag_distribution"]), (2, 5.0, {"a": 2, "b": 1}))
        for bad in ({"agent_id": 5}, {"x": 1}):
            self.assertRpcError(E_VALUE, conn.call, "experience.stats", bad)


class Watch(vt.VmemTestCase):
    def test_subscribe_experiences(self):
        watcher = self.connect()
        mine = watcher.call("watch.subscribe", {"kinds": ["experience"]})
        only_b = watcher.call("watch.subscribe",
                              {"kinds": ["experience"], "agent_id": "b"})
        decisions = watcher.call("watch.subscribe", {})
        conn = self.connect(agent_id="a")
        rec = exp(conn)
        recb = exp(conn, agent_id="b")
        conn.store(1, 1, 2, "a decision")
        conn.call("experience.delete", {"id": rec["id"]})
        notes = watcher.notifications(1.0)
        by_sub = {}
        for n in notes:
            by_sub.setdefault(n["subscription"], []).append(
                (n.get("kind"), n["event"], n.get("id", n.get("coordinate"))))
        self.assertEqual(by_sub, {
            mine["subscription"]: [("experience", "stored", rec["id"]),
                                   ("experience", "stored", recb["id"]),
                                   ("experience", "deleted", rec["id"])],
            only_b["subscription"]: [("experience", "stored", recb["id"])],
            decisions["subscription"]: [(None, "stored", vt.coord(1, 1, 2))],
        })
        self.assertEqual(notes[0]["experience"], rec)
        self.assertIsNone(notes[-1]["experience"])
        for bad in ({"kinds": []}, {"kinds": ["nope"]}, {"kinds": "experience"},
                    {"kinds": ["experience"], "x_range": [1, 2]},
                    {"agent_id": "a"}, {"kinds": ["experience"],
                                        "agent_id": 5}):
            self.assertRpcError(E_VALUE, watcher.call, "watch.subscribe", bad)
        both = watcher.call("watch.subscribe",
                            {"kinds": ["decision", "experience"],
                             "x_range": [1, 1]})
        self.assertIsInstance(both["subscription"], int)


class Shards(vt.GitCase):
    def shard_lines(self, rec):
        path = os.path.join(self.repo.root, shard_rel(rec))
        try:
            with open(path) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def test_shards_committed(self):
        conn = self.connect(agent_id="goal_seeker_1")
        a = exp(conn)
        b = exp(conn, agent_id="with space/and slash")
        res = self.sync(conn)
        self.assertIsNotNone(res["commit"])
        self.assertEqual(self.subject(res["commit"]),
                         "vector-memory: 2 experience shards")
        for rec in (a, b):
            blob = self.git("show", "HEAD:" + shard_rel(rec))
            self.assertEqual([json.loads(ln) for ln in blob.splitlines()],
                             [rec])
        self.assertIn("~d2l0aCBzcGFjZS9hbmQgc2xhc2g", shard_rel(b))
        self.assertStatus([])
        # A deletion is recorded in history: the tombstone is committed.
        conn.call("experience.delete", {"id": a["id"]})
        self.sync(conn)
        blob = self.git("show", "HEAD:" + shard_rel(a)).splitlines()
        self.assertEqual(json.loads(blob[1])["deleted"], a["id"])
        self.assertEqual(json.loads(self.git(
            "show", "HEAD~1:" + shard_rel(a)).splitlines()[0]), a)

    def test_reload_after_checkout(self):
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        self.git("branch", "bare")
        conn = self.connect(agent_id="w")
        rec = exp(conn, tags=["t"])
        self.sync(conn)
        self.git("checkout", "-q", "bare")
        self.assertTrue(vt.wait_until(
            lambda: conn.call("experience.get", {"id": rec["id"]}) is None,
            5.0))
        self.assertEqual(conn.call("experience.stats")["total_count"], 0)
        self.git("checkout", "-q", "-")
        self.assertTrue(vt.wait_until(
            lambda: conn.call("experience.get", {"id": rec["id"]}) == rec,
            5.0))
        self.assertEqual(conn.call("experience.retrieve", {"tags": ["t"]}),
                         [rec])

    def test_two_clones_merge_shards(self):
        # The attributes vmem init writes: shards merge line by line.
        with open(os.path.join(self.repo.root, ".gitattributes"), "w") as f:
            f.write(".vector-memory/experiences/** merge=union\n")
        self.git("add", ".gitattributes")
        self.git("commit", "-q", "-m", "start")
        clone = self.repo.path("clone")
        subprocess.run(["git", "clone", "-q", self.repo.root, clone],
                       check=True, capture_output=True, env=self.git_env(),
                       timeout=vt.scaled(30))
        theirs = self.new_daemon(*self.daemon_args, root=clone,
                                 name="vmemd-clone",
                                 sock=self.repo.path("clone.sock")).start()
        other = self.connect(agent_id="shared-agent", daemon=theirs)
        conn = self.connect(agent_id="shared-agent")
        # Same agent, same day: the same shard file on both sides.
        ours = [exp(conn, context="ours %d" % i) for i in range(3)]
        mine = [exp(other, context="theirs %d" % i) for i in range(2)]
        self.sync(conn)
        self.sync(other)
        env = self.git_env()
        # Captured: git's "Auto-merging" lines would break the TAP stream.
        subprocess.run(["git", "-C", clone, "pull", "-q", "--no-rebase",
                        "--no-edit"], check=True, capture_output=True,
                       env=env, timeout=vt.scaled(30))
        everyone = sorted(ours + mine, key=lambda r: r["id"])
        self.assertTrue(vt.wait_until(
            lambda: other.call("experience.retrieve", {"limit": 100})
            == everyone[::-1], 5.0),
            other.call("experience.retrieve", {"limit": 100}))
        # And back: the first clone pulls the merge.
        self.sync(other)
        self.git("pull", "-q", "--no-rebase", "--no-edit", clone, "HEAD")
        self.assertTrue(vt.wait_until(
            lambda: conn.call("experience.retrieve", {"limit": 100})
            == everyone[::-1], 5.0))
        self.assertEqual(conn.call("experience.stats")["total_count"], 5)
        theirs.stop()

    def test_merge_without_union_markers_taken_out(self):
        # No merge=union: git leaves conflict markers in the shard; the
        # user commits the file as it is; the daemon serves both sides'
        # lines, takes the markers out and commits the clean shard.
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        self.git("branch", "other")
        conn = self.connect(agent_id="same")
        ours = [exp(conn, context="ours %d" % i) for i in range(2)]
        self.sync(conn)
        self.git("checkout", "-q", "other")
        self.assertTrue(vt.wait_until(
            lambda: conn.call("experience.retrieve") == [], 5.0))
        theirs = [exp(conn, context="theirs %d" % i) for i in range(2)]
        self.sync(conn)
        self.git("checkout", "-q", "-")
        p = self.git_run("merge", "--no-edit", "other")
        self.assertNotEqual(p.returncode, 0, "the shards did not conflict")
        path = shard_rel(ours[0])
        self.git("add", path)
        self.git("commit", "-q", "--no-edit")
        everyone = sorted(ours + theirs, key=lambda r: r["id"])[::-1]
        self.assertTrue(vt.wait_until(
            lambda: conn.call("experience.retrieve") == everyone, 5.0),
            conn.call("experience.retrieve"))
        # The markers are kept in the quarantine (a reload after a change
        # under the daemon logs it; health lists what start-up and
        # git.reload quarantined).
        kept = os.listdir(self.repo.quarantine)
        self.assertEqual(len(kept), 1, kept)
        with open(os.path.join(self.repo.quarantine, kept[0])) as f:
            self.assertEqual([ln[:7] for ln in f],
                             ["<<<<<<<", "=======", ">>>>>>>"])
        self.assertRegex(self.daemon.stderr(), r"1 quarantined")
        self.assertTrue(vt.wait_until(lambda: self.status() == [], 5.0),
                        self.status())
        blob = self.git("show", "HEAD:" + path)
        self.assertNotIn("<<<<<<<", blob)
        self.assertEqual(len(blob.splitlines()), 4)

    def test_bad_line_quarantined(self):
        conn = self.connect(agent_id="q")
        good = [exp(conn), exp(conn)]
        self.sync(conn)
        path = os.path.join(self.repo.root, shard_rel(good[0]))
        with open(path, "a") as f:
            f.write("{\"id\": this is not json\n")
        conn.call("git.reload")
        health = conn.call("server.health")
        self.assertEqual(health["status"], "degraded")
        q = [e for e in health["quarantined"]
             if e["path"] == shard_rel(good[0])]
        self.assertEqual(len(q), 1, health["quarantined"])
        self.assertIn("1 line taken out", q[0]["reason"])
        with open(q[0]["moved_to"]) as f:
            self.assertEqual(f.read(), "{\"id\": this is not json\n")
        self.assertEqual(conn.call("experience.retrieve"), good[::-1])
        with open(path) as f:
            self.assertEqual([json.loads(ln) for ln in f], good)
        # The shard without the bad line is committed.
        self.assertTrue(vt.wait_until(lambda: self.status() == [], 5.0),
                        self.status())

    def test_kill_during_writes(self):
        """kill -9 while clients write: every acknowledged experience is
        served after the restart, each in its shard exactly once."""
        acked, stop = [], threading.Event()
        errors = []

        def writer(n):
            c = vt.Conn(self.daemon.sock, agent_id="k%d" % (n % 2))
            try:
                i = 0
                while not stop.is_set():
                    rec = exp(c, context="writer %d item %d" % (n, i))
                    acked.append(rec)
                    i += 1
            except (OSError, EOFError, vt.RpcError) as e:
                errors.append(e)
            finally:
                c.close()

        threads = [threading.Thread(target=writer, args=(n,))
                   for n in range(4)]
        for t in threads:
            t.start()
        self.assertTrue(vt.wait_until(lambda: len(acked) >= 200, 20.0))
        self.daemon.kill()
        stop.set()
        for t in threads:
            t.join()
        self.daemon.start()
        conn = self.connect(agent_id="check")
        for rec in acked:
            self.assertEqual(conn.call("experience.get", {"id": rec["id"]}),
                             rec)
        seen = {}
        base = os.path.join(self.repo.vmdir, "experiences")
        for dirpath, _, files in os.walk(base):
            for name in files:
                with open(os.path.join(dirpath, name)) as f:
                    for line in f:
                        self.assertTrue(line.endswith("\n"))
                        rid = json.loads(line)["id"]
                        seen[rid] = seen.get(rid, 0) + 1
        self.assertEqual({k: v for k, v in seen.items() if v != 1}, {})
        for rec in acked:
            self.assertIn(rec["id"], seen)
        self.assertEqual(conn.call("experience.stats")["total_count"],
                         len(seen))
        # What the log replayed into the shards reaches git too.
        self.sync(conn)
        self.assertStatus([])


class SmallShards(Shards):
    """Every shard case again with shards of 4 KiB, so that an agent's day
    spans several; and what a full shard changes."""

    daemon_args = Shards.daemon_args + ("--experience-shard-bytes", "4096")

    def agent_shards(self, agent, rev=None):
        """{file name: its lines} of an agent's shards, in the tree or at
        a commit."""
        rel = os.path.join(".vector-memory", "experiences", segment(agent))
        if rev is None:
            d = os.path.join(self.repo.root, rel)
            out = {}
            for name in os.listdir(d):
                with open(os.path.join(d, name)) as f:
                    out[name] = f.read().splitlines()
            return out
        names = self.git("ls-tree", "--name-only", rev, rel + "/").split()
        return {os.path.basename(n): self.git(
            "show", "%s:%s" % (rev, n)).splitlines() for n in names}

    def test_shards_roll(self):
        conn = self.connect(agent_id="r")
        recs = [exp(conn, context="roll %d %s" % (i, "x" * 300))
                for i in range(40)]
        self.sync(conn)
        day = recs[0]["timestamp"][:10]
        for where in (None, "HEAD"):
            files = self.agent_shards("r", where)
            self.assertGreaterEqual(len(files), 4, files.keys())
            lines = [ln for f in files.values() for ln in f]
            self.assertEqual(sorted(json.loads(ln)["id"] for ln in lines),
                             sorted(r["id"] for r in recs))
            for name, f in files.items():
                self.assertLessEqual(sum(len(ln) + 1 for ln in f), 4096,
                                     name)
        if all(r["timestamp"][:10] == day for r in recs):
            names = sorted(self.agent_shards("r"),
                           key=lambda n: int(n.split(".")[1])
                           if n.count(".") == 2 else 1)
            self.assertEqual(names, [day + ".jsonl"] + [
                "%s.%d.jsonl" % (day, n) for n in range(2, len(names) + 1)])
        # A later batch changes only the newest shard of the day: a
        # commit hashes what it added, not the day.
        newest = max(self.agent_shards("r").items(),
                     key=lambda kv: int(kv[0].split(".")[1])
                     if kv[0].count(".") == 2 else 1)[0]
        conn.call("experience.delete", {"id": recs[0]["id"]})
        late = exp(conn, context="late")
        res = self.sync(conn)
        changed = self.git("diff-tree", "--no-commit-id", "--name-only",
                           "-r", res["commit"]).split()
        today = late["timestamp"][:10]
        self.assertEqual(len(changed), 1 if today == day else 2, changed)
        if today == day:
            self.assertEqual(os.path.basename(changed[0]), newest)
        # A restart goes on with what the shards say.
        self.daemon.stop()
        self.daemon.start()
        conn = self.connect(agent_id="r")
        self.assertIsNone(conn.call("experience.get", {"id": recs[0]["id"]}))
        self.assertEqual(conn.call("experience.stats")["total_count"], 40)
        more = exp(conn, context="after the restart")
        self.sync(conn)
        self.assertStatus([])
        files = self.agent_shards("r", "HEAD")
        self.assertEqual(sum(1 for f in files.values() for ln in f
                             if more["id"] in ln), 1)


class Cli(test_cli.CliTestCase):
    def test_commands(self):
        out = self.ok("--agent", "goal_seeker_1", "exp", "add", "--context",
                      "User requested file analysis", "--action",
                      "Analyzed src/", "--outcome", "Found 142 files",
                      "--tag", "analysis", "--tag", "codebase",
                      "--importance", "7", "--metadata", '{"files": 142}'
                      ).stdout
        m = re.fullmatch(r"stored (\S+)\n", out)
        self.assertIsNotNone(m, out)
        rid = m.group(1)
        conn = self.connect()
        rec = conn.call("experience.get", {"id": rid})
        self.assertEqual((rec["agent_id"], rec["tags"], rec["importance"],
                          rec["metadata"]),
                         ("goal_seeker_1", ["analysis", "codebase"], 7,
                          {"files": 142}))
        # The agent of writes (VMEM_AGENT_ID) by default.
        other = self.json_of("exp", "add", "--context", "deploy the db",
                             "--action", "ran migrations", "--outcome",
                             "ok", "--tag", "db")
        self.assertEqual(other["agent_id"], test_cli.AGENT)
        table = self.ok("--agent", "goal_seeker_1", "exp", "ls").stdout
        self.assertIn(rid, table)
        self.assertIn("analysis,codebase", table)
        self.assertIn("User requested", table)
        self.assertNotIn(other["id"], table)
        self.assertEqual(self.json_of("--agent", "goal_seeker_1", "exp",
                                      "ls", "--tag", "analysis",
                                      "--since", "1h",
                                      "--min-importance", "7"),
                         [rec])
        self.assertEqual(self.json_of("--agent", "goal_seeker_1", "exp",
                                      "ls", "--since", "2000-01-01",
                                      "--until", "2000-01-02"), [])
        self.assertEqual(self.json_of("exp", "ls"), [other])
        sim = self.json_of("exp", "similar", "file", "analysis")
        self.assertEqual([r["id"] for r in sim], [rid])
        self.assertIn("SCORE", self.ok("exp", "similar", "migrations").stdout)
        self.assertEqual(self.json_of("--agent", "nobody", "exp", "similar",
                                      "migrations"), [])
        stats = self.ok("exp", "stats").stdout
        self.assertRegex(stats, r"experiences\s+2\n")
        self.assertRegex(stats, r"analysis\s+1\s+\u2588+")
        self.assertRegex(stats, r"goal_seeker_1\s+1\s+\u2588+")
        self.assertEqual(self.json_of("--agent", "goal_seeker_1", "exp",
                                      "stats")["total_count"], 1)
        self.assertEqual(self.json_of("exp", "get", rid), rec)
        self.assertIn("Found 142 files", self.ok("exp", "get", rid).stdout)
        self.assertEqual(self.ok("exp", "rm", rid).stdout,
                         "deleted %s\n" % rid)
        self.fails(1, "exp", "rm", rid)
        self.fails(1, "exp", "get", rid)
        self.fails(1, "exp", "similar", "the", type_name="QueryError")
        self.fails(1, "exp", "get", "not-an-id", type_name="ValueError")

    def test_usage_errors(self):
        for args in (["exp"], ["exp", "nope"], ["exp", "add"],
                     ["exp", "add", "--context", "c", "--action", "a"],
                     ["exp", "add", "--context", "c", "--action", "a",
                      "--outcome", "o", "--importance", "11"],
                     ["exp", "add", "--context", "c", "--action", "a",
                      "--outcome", "o", "--metadata", "[1]"],
                     ["exp", "ls", "--since", "yesterday"],
                     ["exp", "ls", "--limit", "0"],
                     ["exp", "ls", "--x", "1-2"],
                     ["exp", "similar"], ["exp", "stats", "--tag", "t"],
                     ["exp", "get"], ["exp", "rm", "a", "b"],
                     ["ls", "--tag", "t"]):
            with self.subTest(args=args):
                self.fails(2, *args)
        self.assertEqual(self.connect().call("server.health")
                         ["experiences"], 0)


class Python(vt.VmemTestCase):
    def test_amplihack_memory(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
            __file__)), "..", "..", "client", "python"))
        import amplihack_memory as am
        os.environ["VMEM_SOCKET"] = self.daemon.sock
        try:
            with am.MemoryConnector(self.repo.root, autostart=False) as c:
                store = am.ExperienceStore(c)
                rid = store.store("py", "python client context", "acted",
                                  "done", tags=["p"], importance=9)
                got = store.retrieve("py")
        finally:
            del os.environ["VMEM_SOCKET"]
        rec = self.connect().call("experience.get", {"id": rid})
        self.assertEqual(got[0].to_dict(),
                         dict(rec, timestamp=got[0].timestamp.isoformat()))
        self.assertEqual(got[0].timestamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                         rec["timestamp"])


class Mcp(test_mcp.McpMixin, vt.VmemTestCase):
    def test_tools(self):
        c = self.mcp(agent_id="mcp-agent")
        tools = {t["name"]: t for t in c.call("tools/list")["tools"]}
        for name in ("record_experience", "recall_experiences",
                     "find_similar_experiences", "experience_stats"):
            self.assertIn(name, tools)
        self.assertIn("Before acting",
                      tools["find_similar_experiences"]["description"])
        self.assertIn("After acting",
                      tools["record_experience"]["description"])
        self.assertEqual(sorted(tools["record_experience"]["inputSchema"]
                                ["required"]),
                         ["action", "context", "outcome"])
        init = c.call("initialize", test_mcp.init_params())
        self.assertIn("find_similar_experiences", init["instructions"])
        rec = self.tool_ok(c, "record_experience",
                           {"context": "flaky test in CI",
                            "action": "reran with -j1",
                            "outcome": "passed: a race in the fixture",
                            "tags": ["ci", "flaky"], "importance": 8})
        self.assertRegex(rec["id"], ID_RE)
        self.assertEqual(rec["agent_id"], "mcp-agent")
        self.tool_error(c, "record_experience",
                        {"context": "x", "action": "y", "outcome": "z",
                         "importance": 11}, "ValueError")
        self.tool_error(c, "record_experience", {"context": "x"},
                        "ValueError")
        big = "w%d " * 400 % tuple(range(400))
        recs = [self.tool_ok(c, "record_experience",
                             {"context": "ci run %d %s" % (i, big),
                              "action": "a", "outcome": "o",
                              "tags": ["ci"]}) for i in range(5)]
        page = self.tool_ok(c, "recall_experiences",
                            {"tags": ["ci"], "limit": 2})
        self.assertEqual([r["id"] for r in page["experiences"]],
                         [recs[4]["id"], recs[3]["id"]])
        self.assertTrue(page["more"])
        self.assertTrue(page["experiences"][0]["context_truncated"])
        self.assertEqual(page["experiences"][0]["context_bytes"],
                         len(recs[4]["context"]))
        rest = self.tool_ok(c, "recall_experiences",
                            {"tags": ["ci"], "limit": 200,
                             "after": page["next_after"]})
        self.assertEqual([r["id"] for r in rest["experiences"]],
                         [r["id"] for r in recs[2::-1]] + [rec["id"]])
        self.assertFalse(rest["more"])
        found = self.tool_ok(c, "find_similar_experiences",
                             {"context": "the CI test is flaky"})
        self.assertEqual(found["experiences"][0]["id"], rec["id"])
        self.assertEqual(found["experiences"][0]["matched_terms"],
                         ["ci", "test", "flaky"])
        one = self.tool_ok(c, "find_similar_experiences",
                           {"context": "ci run", "limit": 1})
        self.assertTrue(one["more"])
        two = self.tool_ok(c, "find_similar_experiences",
                           {"context": "ci run", "limit": 1,
                            "after": one["next_after"]})
        self.assertNotEqual(two["experiences"][0]["id"],
                            one["experiences"][0]["id"])
        self.tool_error(c, "find_similar_experiences", {"context": "the of"},
                        "QueryError")
        stats = self.tool_ok(c, "experience_stats", {})
        self.assertEqual(stats["total_count"], 6)
        self.assertEqual(stats["tag_distribution"], {"ci": 6, "flaky": 1})
        self.assertEqual(self.tool_ok(c, "experience_stats",
                                      {"agent_id": "mcp-agent"})
                         ["agent_id"], "mcp-agent")


if __name__ == "__main__":
    vt.main()

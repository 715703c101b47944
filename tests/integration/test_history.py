#!/usr/bin/env python3
"""decision.history and git.rollback_point against a real vmemd on real
temporary repositories: histories are scripted through the daemon with
git.sync between the steps (the daemon's own commit delay is a minute, so
only git.sync commits), plus commits, branches and merges made by the git
program; every answer is checked against `git log`. Also `vmem history`
and `vmem rollback-point`."""

import datetime
import json
import re
import subprocess

import vmemtest as vt
from vmemtest import HEX40, GitCase, clean_env, rel_path

ELEMENT_KEYS = sorted(["content", "agent_id", "timestamp", "version",
                       "deleted", "commit", "committed_at"])
NULL_POINT = {"commit": None, "subject": None, "committed_at": None}
BAD_LIMITS = [0, -1, 10001, "2", 2.5, True, [2], {"n": 2}]
BAD_COORDINATES = [vt.coord(0, 1, 2), vt.coord(1001, 1, 2), vt.coord(1, 6, 2),
                   vt.coord(1, 1, 5), vt.coord(1, 1, 2.0),
                   vt.coord(1, "1", 2), {"x": 1, "y": 1},
                   dict(vt.coord(1, 1, 2), w=1), {}, [1, 1, 2], None, "1,1,2"]
BAD_THRESHOLDS = [0, -1, 2.5, "3", None, True, 2.0, [3]]


def rfc3339_of(seconds):
    """The committed_at form of a commit time in seconds."""
    moment = datetime.datetime.fromtimestamp(int(seconds),
                                             datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def version_of(rec, commit=None, committed_at=None):
    """The history element of a stored decision record."""
    return {"content": rec["content"], "agent_id": rec["agent_id"],
            "timestamp": rec["timestamp"], "version": rec["version"],
            "deleted": False, "commit": commit, "committed_at": committed_at}


def deletion(commit=None, committed_at=None):
    return {"content": None, "agent_id": None, "timestamp": None,
            "version": None, "deleted": True, "commit": commit,
            "committed_at": committed_at}


class HistoryCase(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    # -- the daemon
    def history(self, conn, x, y, z, **params):
        params["coordinate"] = vt.coord(x, y, z)
        got = conn.call("decision.history", params)
        self.assertIsInstance(got, list)
        for element in got:
            self.assertEqual(sorted(element), ELEMENT_KEYS, element)
            self.assertIs(type(element["deleted"]), bool)
            if element["commit"] is not None:
                self.assertRegex(element["commit"], HEX40)
                self.assertTimestamp(element["committed_at"])
        return got

    def rollback_point(self, conn, xt, yt):
        return conn.call("git.rollback_point",
                         {"x_threshold": xt, "y_threshold": yt})

    def commit(self, conn, message=None):
        """git.sync that must commit; returns the commit id (HEAD)."""
        res = self.sync(conn, message)
        self.assertRegex(res["commit"] or "", HEX40, res)
        self.assertEqual(res["commit"], self.head())
        return res["commit"]

    # -- git
    def committed_at(self, rev):
        return rfc3339_of(self.git("log", "-1", "--format=%ct", rev).strip())

    def at(self, rec, rev):
        """rec's history element as committed in rev."""
        return version_of(rec, rev, self.committed_at(rev))

    def deleted_at(self, rev):
        return deletion(rev, self.committed_at(rev))

    def point(self, rev):
        """The rollback_point answer naming rev."""
        return {"commit": rev, "subject": self.subject(rev),
                "committed_at": self.committed_at(rev)}

    def branch(self):
        return self.git("symbolic-ref", "--short", "HEAD").strip()

    def restart(self, settle=True):
        """Start the stopped daemon again (the git program may have
        worked on the tree meanwhile); returns a new connection. settle:
        a git.sync first, which finds nothing to commit (the files equal
        HEAD), so that nothing counts as pending any more."""
        if self.daemon.running():
            self.daemon.stop()
        self.daemon.start()
        conn = self.connect(agent_id="after-restart")
        if settle:
            self.assertIsNone(self.sync(conn)["commit"])
        return conn

    # -- the command line
    def vmem(self, *args):
        env = clean_env(self.repo.tmp)
        env.update(VMEMD=vt.VMEMD, VMEM_AGENT_ID="cli", VMEM_NO_AUTOSTART="1")
        env.pop("XDG_RUNTIME_DIR", None)
        return subprocess.run([vt.VMEM, "--socket", self.daemon.sock,
                               "--repo", self.repo.root] + list(args),
                              capture_output=True, text=True, env=env,
                              timeout=vt.scaled(30))

    def assertLineOf(self, line, rev):
        """A human history line starts with an abbreviation of rev (at
        least 7 hex digits)."""
        m = re.match(r"^([0-9a-f]{7,40})\s", line)
        self.assertTrue(m and rev.startswith(m.group(1)), (line, rev))

    def vmem_ok(self, *args):
        p = self.vmem(*args)
        self.assertEqual(p.returncode, 0, "vmem %s: %r %r"
                         % (args, p.stdout, p.stderr))
        return p.stdout


class History(HistoryCase):
    def test_changes_newest_first_with_commits_from_git_log(self):
        conn = self.connect(agent_id="alice")
        r1 = conn.store(5, 2, 3, "Use PostgreSQL\nsecond line")
        c1 = self.commit(conn)
        r2 = conn.store(5, 2, 3, "Use SQLite", overwrite=True,
                        agent_id="bob")
        self.assertEqual(r2["version"], 2)
        c2 = self.commit(conn)
        other = conn.store(6, 1, 2, "unrelated")
        c3 = self.commit(conn)
        user = self.user_commit("notes.txt", "user notes\n", "user notes")
        self.assertTrue(conn.delete(5, 2, 3))
        c4 = self.commit(conn, "delete 5,2,3 by hand")
        r5 = conn.store(5, 2, 3, "Back to PostgreSQL", agent_id="carol")
        c5 = self.commit(conn)
        log = self.git("log", "--format=%H").split()
        self.assertEqual(log, [c5, c4, user, c3, c2, c1])

        got = self.history(conn, 5, 2, 3)
        self.assertEqual(got, [self.at(r5, c5), self.deleted_at(c4),
                               self.at(r2, c2), self.at(r1, c1)])
        self.assertEqual([e["commit"] for e in got],
                         [h for h in log if h not in (user, c3)])
        cts = self.git("log", "--format=%H %ct").split("\n")
        for line in filter(None, cts):
            rev, seconds = line.split()
            for e in got:
                if e["commit"] == rev:
                    self.assertEqual(e["committed_at"], rfc3339_of(seconds))
        self.assertNotIn(c3, [e["commit"] for e in got])
        # The current decision is the newest element.
        self.assertEqual(version_of(conn.get(5, 2, 3), c5,
                                    self.committed_at(c5)), got[0])

        self.assertEqual(self.history(conn, 6, 1, 2), [self.at(other, c3)])
        self.assertEqual(self.history(conn, 6, 1, 3), [])
        self.assertEqual(self.history(conn, 999, 5, 4), [])

    def test_uncommitted_state_first(self):
        conn = self.connect(agent_id="pending")
        # A store that was never committed: only the pending element.
        r0 = conn.store(7, 3, 2, "first, not yet committed")
        self.assertEqual(self.history(conn, 7, 3, 2), [version_of(r0)])
        c1 = self.commit(conn)
        self.assertEqual(self.history(conn, 7, 3, 2), [self.at(r0, c1)])

        r2 = conn.store(7, 3, 2, "second, pending", overwrite=True,
                        agent_id="p2")
        got = self.history(conn, 7, 3, 2)
        self.assertEqual(got, [version_of(r2), self.at(r0, c1)])
        self.assertEqual(got[0], version_of(conn.get(7, 3, 2)))
        c2 = self.commit(conn)
        got = self.history(conn, 7, 3, 2)
        self.assertEqual(got, [self.at(r2, c2), self.at(r0, c1)])
        self.assertNotIn(None, [e["commit"] for e in got])

        self.assertTrue(conn.delete(7, 3, 2))
        self.assertEqual(self.history(conn, 7, 3, 2),
                         [deletion(), self.at(r2, c2), self.at(r0, c1)])
        c3 = self.commit(conn)
        got = self.history(conn, 7, 3, 2)
        self.assertEqual(got, [self.deleted_at(c3), self.at(r2, c2),
                               self.at(r0, c1)])
        self.assertNotIn(None, [e["commit"] for e in got])

        # Stored again after a committed deletion, pending.
        r4 = conn.store(7, 3, 2, "third, pending")
        self.assertEqual(self.history(conn, 7, 3, 2)[:2],
                         [version_of(r4), self.deleted_at(c3)])

        # Pending writes elsewhere leave a committed coordinate alone.
        r5 = conn.store(8, 1, 1, "architecture")
        c5 = self.commit(conn)
        conn.store(8, 2, 2, "pending elsewhere")
        self.assertEqual(self.history(conn, 8, 1, 1), [self.at(r5, c5)])

    def test_store_then_delete_uncommitted(self):
        """A store and a delete of a coordinate never committed: no
        committed element; at most the pending deletion."""
        conn = self.connect(agent_id="gone")
        self.commit_seed(conn)
        conn.store(9, 4, 4, "short-lived")
        self.assertTrue(conn.delete(9, 4, 4))
        got = self.history(conn, 9, 4, 4)
        self.assertIn(got, ([], [deletion()]))
        if got:
            vt.diag("note: a store+delete never committed is reported as "
                    "a pending deletion")

    def commit_seed(self, conn):
        conn.store(1, 1, 1, "seed")
        return self.commit(conn)

    def test_no_pending_element_after_a_restart(self):
        """Files equal to HEAD at start-up are no change: no element with
        commit null, even before the first commit job ran."""
        conn = self.connect(agent_id="restart")
        rec = conn.store(6, 2, 4, "committed before the restart")
        c1 = self.commit(conn)
        self.assertTrue(conn.delete(6, 2, 4))
        c2 = self.commit(conn)
        conn.store(6, 3, 4, "also committed")
        self.commit(conn)
        conn = self.restart(settle=False)
        self.assertEqual(self.history(conn, 6, 2, 4),
                         [self.deleted_at(c2), self.at(rec, c1)])
        self.assertNotIn(None, [e["commit"] for e in
                                self.history(conn, 6, 3, 4)])

    def test_unborn_head(self):
        conn = self.connect(agent_id="unborn")
        self.assertIsNone(self.head())
        self.assertEqual(self.history(conn, 5, 2, 1), [])
        self.assertEqual(self.history(conn, 5, 2, 1, limit=1), [])
        rec = conn.store(5, 2, 1, "before any commit")
        self.assertEqual(self.history(conn, 5, 2, 1), [version_of(rec)])
        self.assertEqual(self.history(conn, 5, 3, 1), [])
        self.assertIsNone(self.head())

    def test_limit(self):
        conn = self.connect(agent_id="limits")
        recs, commits = [], []
        recs.append(conn.store(4, 4, 4, "v1"))
        commits.append(self.commit(conn))
        for n in (2, 3):
            recs.append(conn.store(4, 4, 4, "v%d" % n, overwrite=True))
            commits.append(self.commit(conn))
        full = [self.at(r, c) for r, c in zip(recs, commits)][::-1]
        self.assertEqual(self.history(conn, 4, 4, 4), full)
        for limit in (1, 2, 3, 4, 10000):
            with self.subTest(limit=limit):
                self.assertEqual(self.history(conn, 4, 4, 4, limit=limit),
                                 full[:limit])
        # The uncommitted element counts.
        pending = conn.store(4, 4, 4, "v4", overwrite=True)
        full.insert(0, version_of(pending))
        for limit in (1, 2, 4, 5, 6):
            with self.subTest(limit=limit, pending=True):
                self.assertEqual(self.history(conn, 4, 4, 4, limit=limit),
                                 full[:limit])
        self.assertTrue(conn.delete(4, 4, 4))
        self.assertEqual(self.history(conn, 4, 4, 4, limit=1), [deletion()])
        self.assertEqual(self.history(conn, 4, 4, 4, limit=2),
                         [deletion(), full[1]])

    def test_long_history_and_four_digit_x(self):
        conn = self.connect(agent_id="long")
        mine, theirs = [], []
        for n in range(40):
            a = conn.store(1000, 5, 4, "a%d" % n, overwrite=n > 0)
            if n % 2:
                conn.store(1000, 5, 3, "b%d" % n, overwrite=n > 1)
            rev = self.commit(conn)
            mine.append(self.at(a, rev))
            theirs.append(rev)
        self.assertEqual(self.commits(), theirs[::-1])
        full = mine[::-1]
        self.assertEqual(self.history(conn, 1000, 5, 4), full)
        self.assertEqual(self.history(conn, 1000, 5, 4, limit=7), full[:7])
        self.assertEqual([e["version"] for e in full], list(range(40, 0, -1)))
        other = self.history(conn, 1000, 5, 3)
        self.assertEqual([e["commit"] for e in other], theirs[::-2])

    def test_bad_params(self):
        conn = self.connect(agent_id="bad")
        conn.store(3, 3, 3, "something")
        self.commit(conn)
        c = vt.coord(3, 3, 3)
        for bad in BAD_LIMITS:
            with self.subTest(limit=bad):
                self.assertRpcError(vt.E_VALUE, conn.call, "decision.history",
                                    {"coordinate": c, "limit": bad})
        for bad in BAD_COORDINATES:
            with self.subTest(coordinate=bad):
                self.assertRpcError(vt.E_COORD, conn.call, "decision.history",
                                    {"coordinate": bad})
        self.assertRpcError(vt.E_VALUE, conn.call, "decision.history",
                            {"coordinate": c, "since": 1})
        self.assertRpcError(vt.E_VALUE, conn.call, "decision.history",
                            {"coordinate": c, "limit": 1, "agent_id": "x"})
        # Missing coordinate: the same error as decision.get's.
        with self.assertRaises(vt.RpcError) as want:
            conn.call("decision.get", {})
        err = self.assertRpcError((want.exception.code, want.exception.type),
                                  conn.call, "decision.history", {})
        self.assertIn(err.type, ("ValueError", "CoordinateValidationError"))
        self.assertEqual(len(self.history(conn, 3, 3, 3)), 1)


class WhileCommitting(HistoryCase):
    daemon_args = ("--commit-delay-ms", "0")

    def test_newest_state_always_first(self):
        """With commits starting at once, a history read while a commit job
        runs still starts with the newest state (pending or committed),
        never twice."""
        conn = self.connect(agent_id="busy")
        problems = []
        for n in range(150):
            rec = conn.store(3, 3, 3, "v%d" % n, overwrite=n > 0)
            for _ in range(2):
                got = self.history(conn, 3, 3, 3, limit=2)
                if not got or got[0]["content"] != rec["content"]:
                    problems.append((n, got))
                elif (len(got) == 2 and got[0]["commit"] is None
                      and got[1]["timestamp"] == got[0]["timestamp"]):
                    problems.append(("twice", n, got))
        self.assertEqual(problems[:3], [])
        self.sync(conn)
        got = self.history(conn, 3, 3, 3)
        self.assertNotIn(None, [e["commit"] for e in got])
        self.assertEqual(got[0]["content"], "v149")
        self.assertEqual(len(set(e["commit"] for e in got)), len(got))


class FirstParent(HistoryCase):
    def test_side_branch_change_reported_at_the_merge(self):
        conn = self.connect(agent_id="main")
        r1 = conn.store(8, 2, 2, "main v1")
        c1 = self.commit(conn)
        main = self.branch()

        # On a side branch, the user commits a new version by hand.
        self.daemon.stop()
        self.git("checkout", "-q", "-b", "side")
        side_rec = dict(r1, content="side v2", agent_id="side-agent",
                        version=2, timestamp="2025-02-01T10:00:00.000000Z")
        with open(self.repo.decision_path(8, 2, 2), "wb") as f:
            f.write(vt.decision_file_bytes(side_rec))
        self.git("add", rel_path(8, 2, 2))
        self.git("commit", "-q", "-m", "side: 8,2,2 by hand")
        side = self.head()
        self.git("checkout", "-q", main)

        # Meanwhile vmemd commits on the main branch.
        conn = self.restart()
        other = conn.store(9, 1, 2, "on main meanwhile")
        c2 = self.commit(conn)

        self.daemon.stop()
        self.git("merge", "-q", "--no-ff", "-m", "Merge branch side", "side")
        merge = self.head()
        self.assertEqual(self.parents(merge), [c2, side])
        conn = self.restart()
        self.assertEqual(conn.get(8, 2, 2), side_rec)

        got = self.history(conn, 8, 2, 2)
        self.assertEqual(got, [self.at(side_rec, merge), self.at(r1, c1)])
        self.assertNotIn(side, [e["commit"] for e in got])
        self.assertEqual(self.history(conn, 9, 1, 2), [self.at(other, c2)])
        self.assertEqual(self.history(conn, 8, 2, 2, limit=1),
                         [self.at(side_rec, merge)])

        # A side-branch commit merged into a line that already had the
        # same content: the merge changes nothing, the side commit is not
        # reported either.
        self.daemon.stop()
        self.git("checkout", "-q", "-b", "side2")
        self.user_commit("side2.txt", "nothing of ours\n", "side2: no vm")
        self.git("checkout", "-q", main)
        self.git("merge", "-q", "--no-ff", "-m", "Merge side2", "side2")
        conn = self.restart()
        self.assertEqual(self.history(conn, 8, 2, 2), got)


class RollbackPoint(HistoryCase):
    def script(self, conn):
        """Commits adding decisions at (1,1), (2,3), (3,1), (5,2) in that
        order; returns their ids."""
        out = []
        for x, y, z in [(1, 1, 2), (2, 3, 4), (3, 1, 1), (5, 2, 3)]:
            conn.store(x, y, z, "decision at %d %d %d" % (x, y, z))
            out.append(self.commit(conn, "add %d,%d,%d\n\nbody" % (x, y, z)
                                   if x == 2 else None))
        return out

    def test_thresholds_after_a_user_commit(self):
        base = self.user_commit("README", "a project\n", "initial import")
        conn = self.connect(agent_id="rb")
        a, b, c, d = self.script(conn)
        self.assertEqual(self.commits(), [d, c, b, a, base])
        expected = {
            (1, 1): base, (1, 2): a, (1, 6): a, (2, 1): a, (2, 3): a,
            (2, 4): b, (3, 1): b, (3, 2): c, (4, 1): c, (5, 2): c,
            (5, 3): d, (6, 1): d, (1001, 6): d, (1001, 1): d,
        }
        for (xt, yt), rev in expected.items():
            with self.subTest(threshold=(xt, yt)):
                self.assertEqual(self.rollback_point(conn, xt, yt),
                                 self.point(rev))
        self.assertEqual(self.rollback_point(conn, 2, 4)["subject"],
                         "add 2,3,4")

        # Deleting (5,2) makes a newer commit qualify again for (3,2).
        self.assertTrue(conn.delete(5, 2, 3))
        e = self.commit(conn)
        self.assertEqual(self.rollback_point(conn, 3, 2), self.point(e))
        self.assertEqual(self.rollback_point(conn, 3, 1), self.point(b))
        # Pending (uncommitted) writes do not matter, only commits.
        conn.store(1, 1, 3, "pending")
        self.assertEqual(self.rollback_point(conn, 3, 2), self.point(e))
        self.assertEqual(self.rollback_point(conn, 1, 1), self.point(base))

    def test_null_without_an_earlier_commit(self):
        conn = self.connect(agent_id="rb")
        self.assertEqual(self.rollback_point(conn, 1, 1), NULL_POINT)
        self.assertEqual(self.rollback_point(conn, 1001, 6), NULL_POINT)
        a, b, c, d = self.script(conn)
        self.assertEqual(self.rollback_point(conn, 1, 1), NULL_POINT)
        self.assertEqual(self.rollback_point(conn, 1, 2), self.point(a))
        self.assertEqual(self.rollback_point(conn, 3, 1), self.point(b))

        # Only metadata.json left: that commit qualifies for anything.
        for x, y, z in [(1, 1, 2), (2, 3, 4), (5, 2, 3)]:
            self.assertTrue(conn.delete(x, y, z))
        self.commit(conn)
        self.assertEqual(self.rollback_point(conn, 1, 1), NULL_POINT)
        # (3,1,1) is immutable; a repository where everything went is
        # made on a fresh line by the git program.
        self.daemon.stop()
        self.git("rm", "-q", "-r", "--", ".vector-memory/x-003")
        self.git("commit", "-q", "-m", "only metadata left")
        only_meta = self.head()
        self.assertEqual(self.tree_files(), [".vector-memory/metadata.json"])
        conn = self.restart()
        self.assertEqual(self.rollback_point(conn, 1, 1),
                         self.point(only_meta))

    def test_bad_thresholds(self):
        conn = self.connect(agent_id="rb")
        for bad in BAD_THRESHOLDS + [1002, 5000]:
            with self.subTest(x_threshold=bad):
                self.assertRpcError(vt.E_COORD, self.rollback_point, conn,
                                    bad, 3)
        for bad in BAD_THRESHOLDS + [7, 100]:
            with self.subTest(y_threshold=bad):
                self.assertRpcError(vt.E_COORD, self.rollback_point, conn,
                                    5, bad)
        call = conn.call
        self.assertRpcError(vt.E_VALUE, call, "git.rollback_point",
                            {"x_threshold": 3})
        self.assertRpcError(vt.E_VALUE, call, "git.rollback_point",
                            {"y_threshold": 3})
        self.assertRpcError(vt.E_VALUE, call, "git.rollback_point", {})
        self.assertRpcError(vt.E_VALUE, call, "git.rollback_point",
                            {"x_threshold": 3, "y_threshold": 3, "z": 1})


class Cli(HistoryCase):
    def test_vmem_history(self):
        conn = self.connect(agent_id="cli-a")
        r1 = conn.store(5, 2, 1, "Architecture: one\nmore text")
        c1 = self.commit(conn)
        got = json.loads(self.vmem_ok("history", "5", "2", "1", "--json"))
        self.assertEqual(got, self.history(conn, 5, 2, 1))
        self.assertEqual(got, [self.at(r1, c1)])
        text = self.vmem_ok("history", "5", "2", "1")
        lines = text.splitlines()
        self.assertEqual(len(lines), 1, text)
        self.assertLineOf(lines[0], c1)
        self.assertIn("v1", lines[0].split())
        self.assertIn("cli-a", lines[0])
        self.assertIn("Architecture: one", lines[0])
        self.assertNotIn("more text", text)

        # A pending overwrite and a committed deletion, then a pending one.
        conn.store(5, 2, 2, "interfaces v1")
        c2 = self.commit(conn)
        conn.store(5, 2, 2, "interfaces v2", overwrite=True)
        lines = self.vmem_ok("history", "5", "2", "2").splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("(uncommitted)", lines[0])
        self.assertIn("interfaces v2", lines[0])
        self.assertLineOf(lines[1], c2)
        self.assertNotIn("(uncommitted)", lines[1])
        self.assertEqual(json.loads(self.vmem_ok(
            "history", "5", "2", "2", "--json", "--limit", "1")),
            self.history(conn, 5, 2, 2, limit=1))
        self.assertEqual(len(self.vmem_ok("history", "5", "2", "2",
                                          "--limit", "1").splitlines()), 1)
        self.assertTrue(conn.delete(5, 2, 2))
        lines = self.vmem_ok("history", "5", "2", "2").splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("(uncommitted)", lines[0])
        self.assertIn("deleted", lines[0])
        c3 = self.commit(conn)
        lines = self.vmem_ok("history", "5", "2", "2").splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertLineOf(lines[0], c3)
        self.assertIn("deleted", lines[0])
        self.assertNotIn("(uncommitted)", "\n".join(lines))
        self.assertEqual(json.loads(self.vmem_ok(
            "history", "5", "2", "2", "--json")),
            self.history(conn, 5, 2, 2))
        self.assertEqual(self.vmem_ok("history", "5", "2", "3", "--json")
                         .strip(), "[]")

    def test_vmem_rollback_point(self):
        conn = self.connect(agent_id="cli-r")
        self.assertEqual(self.vmem_ok("rollback-point", "3", "1"), "none\n")
        self.assertEqual(json.loads(self.vmem_ok("rollback-point", "3", "1",
                                                 "--json")), NULL_POINT)
        conn.store(1, 1, 2, "one")
        a = self.commit(conn, "first vm commit")
        conn.store(3, 1, 2, "three")
        self.commit(conn)
        out = self.vmem_ok("rollback-point", "3", "1")
        self.assertEqual(out.split()[0], a)
        self.assertIn("first vm commit", out)
        self.assertEqual(out, "%s  first vm commit\n" % a)
        self.assertEqual(json.loads(self.vmem_ok("--json", "rollback-point",
                                                 "3", "1")),
                         self.rollback_point(conn, 3, 1))
        self.assertEqual(self.vmem_ok("rollback-point", "1", "1"), "none\n")

    def test_usage_and_domain_errors(self):
        for args in [("history",), ("history", "5", "2"),
                     ("history", "5", "2", "1", "4"),
                     ("history", "5", "2", "1", "--limit"),
                     ("history", "5", "2", "1", "--bogus"),
                     ("history", "five", "2", "1"),
                     ("rollback-point",), ("rollback-point", "3"),
                     ("rollback-point", "3", "1", "4"),
                     ("rollback-point", "3", "1", "--bogus")]:
            with self.subTest(args=args):
                p = self.vmem(*args)
                self.assertEqual(p.returncode, 2, (p.stdout, p.stderr))
                self.assertTrue(p.stderr.strip())
        # A coordinate out of range is a usage error (x beyond the
        # daemon's max_x too); a threshold is the daemon's to refuse.
        p = self.vmem("history", "1001", "1", "1")
        self.assertEqual(p.returncode, 2, (p.stdout, p.stderr))
        self.assertIn("coordinate.x must be an integer in 1..1000", p.stderr)
        for args, name in [(("rollback-point", "3", "7"),
                            "CoordinateValidationError")]:
            with self.subTest(args=args):
                p = self.vmem(*args)
                self.assertEqual(p.returncode, 1, (p.stdout, p.stderr))
                self.assertIn(name, p.stderr)


if __name__ == "__main__":
    vt.main()

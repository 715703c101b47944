#!/usr/bin/env python3
"""vmemd's git commits, checked with the git program on real temporary
repositories: batching (delay, batch size, git.sync, graceful stop), the
message and identity, the user's staged and unstaged changes, unborn HEAD,
a tip moved by the user, deferral (index.lock, detached HEAD, merge and
rebase in progress), start-up after kill -9, and `vmem sync`. Every test
ends with `git fsck --strict`."""

import json
import os
import subprocess
import time

import vmemtest as vt
from vmemtest import (E_STORAGE, HEX40, METADATA, USER, GitCase,
                      clean_env, rel_path)

FALLBACK = "vmemd <vmemd@localhost>"


def body_line(x, y, z, agent=None):
    name = rel_path(x, y, z)[len(".vector-memory/"):]
    return "%s deleted" % name if agent is None else "%s by %s" % (name,
                                                                    agent)


class Batching(GitCase):
    def test_committed_after_the_delay_with_generated_message(self):
        conn = self.connect(agent_id="alice")
        recs = [conn.store(5, 2, 1, "Use PostgreSQL"),
                conn.store(5, 3, 3, "Pool of 10 connections"),
                conn.store(7, 1, 2, "REST interface", agent_id="bob")]
        history = self.wait_commits(1, 5.0)
        self.assertEqual(self.subject(),
                         "vector-memory: 3 decisions (x 5-7, y 1-3, z 1-3)")
        self.assertEqual(sorted(self.body_lines()),
                         [body_line(5, 2, 1, "alice"),
                          body_line(5, 3, 3, "alice"),
                          body_line(7, 1, 2, "bob")])
        self.assertEqual(self.raw_message().split("\n")[1], "")
        self.assertCommitted("HEAD", recs)
        self.assertEqual(self.tree_files(), sorted(
            [METADATA, rel_path(5, 2, 1), rel_path(5, 3, 3),
             rel_path(7, 1, 2)]))

        # A delete and a store: single values print once; only this batch.
        self.assertTrue(conn.delete(7, 1, 2))
        recs = [conn.store(7, 1, 3, "Handlers", agent_id="carol")]
        history = self.wait_commits(2, 5.0)
        self.assertEqual(self.subject(),
                         "vector-memory: 2 decisions (x 7, y 1, z 2-3)")
        self.assertEqual(sorted(self.body_lines()),
                         [body_line(7, 1, 2), body_line(7, 1, 3, "carol")])
        self.assertEqual(self.changed_in(),
                         [("A", rel_path(7, 1, 3)), ("D", rel_path(7, 1, 2))])
        self.assertCommitted("HEAD", recs)

        # The last decision of x-007 deleted: the directory goes.
        self.assertTrue(conn.delete(7, 1, 3))
        self.wait_commits(3, 5.0)
        self.assertEqual(self.subject(),
                         "vector-memory: 1 decisions (x 7, y 1, z 3)")
        self.assertEqual(self.body_lines(), [body_line(7, 1, 3)])
        self.assertEqual(self.tree_files(), sorted(
            [METADATA, rel_path(5, 2, 1), rel_path(5, 3, 3)]))
        self.assertStatus([])
        self.assertEqual(self.git("log", "--format=%P", "-1").split(),
                         [history[0]])

    def test_max_batch_commits_without_waiting(self):
        self.daemon.stop()
        self.daemon.args = ["--commit-delay-ms", "60000",
                            "--commit-max-batch", "4"]
        self.daemon.start()
        conn = self.connect(agent_id="batch")
        recs = [conn.store(x, 1, 1, "d%d" % x) for x in range(1, 4)]
        self.assertNoNewCommit([], 0.5)
        self.assertEqual(self.health(conn)["pending"], 3)
        recs.append(conn.store(4, 1, 1, "d4"))
        self.wait_commits(1, 3.0)
        self.assertEqual(self.subject(),
                         "vector-memory: 4 decisions (x 1-4, y 1, z 1)")
        self.assertCommitted("HEAD", recs)


class Sync(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    def test_sync_result_and_noop(self):
        conn = self.connect(agent_id="syncer")
        self.assertIsNone(self.health(conn)["last_commit"])
        recs = [conn.store(12, 4, 2, "a"), conn.store(3, 2, 4, "b"),
                conn.store(9, 5, 3, "c")]
        self.assertEqual(self.health(conn)["pending"], 3)
        res = self.sync(conn)
        self.assertEqual(sorted(res), ["commit", "coordinates", "decisions",
                                       "ranges"])
        self.assertRegex(res["commit"], HEX40)
        self.assertEqual(res["commit"], self.git("rev-parse", "HEAD").strip())
        self.assertEqual(res["decisions"], 3)
        self.assertEqual(sorted(tuple(c[k] for k in "xyz")
                                for c in res["coordinates"]),
                         [(3, 2, 4), (9, 5, 3), (12, 4, 2)])
        for c in res["coordinates"]:
            self.assertEqual(sorted(c), ["x", "y", "z"])
        self.assertEqual(res["ranges"],
                         {"x": [3, 12], "y": [2, 5], "z": [2, 4]})
        self.assertCommitted(res["commit"], recs)  # no polling: it is there
        health = self.health(conn)
        self.assertEqual(health["pending"], 0)
        self.assertIsNone(health["commit_deferred"])
        self.assertEqual(sorted(health["last_commit"]),
                         ["commit", "committed_at"])
        self.assertEqual(health["last_commit"]["commit"], res["commit"])
        self.assertTimestamp(health["last_commit"]["committed_at"])

        # Nothing pending: an immediate null answer and no commit.
        history = self.commits()
        self.assertEqual(self.sync(conn), {"commit": None, "decisions": 0,
                                           "coordinates": [], "ranges": None})
        self.assertEqual(self.sync(conn, "no-op message")["commit"], None)
        self.assertEqual(self.commits(), history)
        self.assertEqual(len(history), 1)

    def test_big_sync_answered_in_slices(self):
        """A sync of 5,000 decisions lists them all (110 KB: the answer
        is written in slices) and the line is the one compact JSON
        object."""
        conn = self.connect(agent_id="bulk")
        want = set()
        for y in range(1, 6):
            conn.call("decision.store_many", {"items": [
                {"coordinate": vt.coord(x, y, 3), "content": "d %d" % x}
                for x in range(1, 1001)]})
            want |= {(x, y, 3) for x in range(1, 1001)}
        rid = conn.request("git.sync", {})
        line = conn.read_line(timeout=60).decode()
        self.assertGreater(len(line), 100000)
        res = json.loads(line)["result"]
        self.assertEqual(line, json.dumps(
            {"jsonrpc": "2.0", "id": rid, "result": res},
            separators=(",", ":")))
        self.assertEqual(res["commit"], self.git("rev-parse", "HEAD").strip())
        self.assertEqual(res["decisions"], 5000)
        self.assertEqual({tuple(c[k] for k in "xyz")
                          for c in res["coordinates"]}, want)
        self.assertEqual(len(res["coordinates"]), 5000)
        self.assertEqual(res["ranges"],
                         {"x": [1, 1000], "y": [1, 5], "z": [3, 3]})

    def test_worktree_agrees_when_sync_returns(self):
        """`vmem sync && git commit -a` must not commit deletions of the
        decision files: when git.sync answers, the files of the commit are
        in the working tree."""
        conn = self.connect(agent_id="wt")
        for x in range(1, 21):
            conn.store(x, 1, 1, "decision %d" % x)
        self.sync(conn)
        self.assertEqual(self.status(), [])

    def test_three_syncs_make_three_commits(self):
        conn = self.connect(agent_id="rounds")
        ids = []
        for n in range(1, 4):
            rec = conn.store(n, n, 2, "round %d" % n)
            res = self.sync(conn)
            self.assertEqual((res["decisions"], res["ranges"]),
                             (1, {"x": [n, n], "y": [n, n], "z": [2, 2]}))
            self.assertEqual(self.subject(),
                             "vector-memory: 1 decisions (x %d, y %d, z 2)"
                             % (n, n))
            self.assertCommitted(res["commit"], [rec])
            ids.append(res["commit"])
        self.assertEqual(self.commits(), ids[::-1])
        self.assertEqual(self.parents(ids[0]), [])
        self.assertEqual(self.parents(ids[2]), [ids[1]])
        self.assertStatus([])

    def test_custom_message_verbatim(self):
        conn = self.connect(agent_id="writer")
        conn.store(4, 1, 1, "architecture")
        msg = "Architecture of issue 4\n\nDecided by the team: caf\u00e9 \u2713"
        res = self.sync(conn, msg)
        self.assertEqual(res["decisions"], 1)
        self.assertIn(self.raw_message(), (msg, msg + "\n"))
        self.assertEqual(self.git("log", "-1", "--format=%B").rstrip("\n"),
                         msg)
        conn.store(4, 1, 2, "interfaces")
        self.sync(conn, "one line, no newline")
        self.assertIn(self.raw_message(), ("one line, no newline",
                                           "one line, no newline\n"))
        # The message was for that commit only.
        conn.store(4, 1, 3, "implementation")
        self.sync(conn)
        self.assertEqual(self.subject(),
                         "vector-memory: 1 decisions (x 4, y 1, z 3)")
        self.assertEqual(len(self.commits()), 3)

    def test_concurrent_syncs(self):
        conns = [self.connect(agent_id="c%d" % i) for i in range(3)]
        recs = [c.store(15, i + 1, 2, "from %d" % i)
                for i, c in enumerate(conns)]
        rids = [c.request("git.sync", {}) for c in conns]
        results = [c.response(rid, 20) for c, rid in zip(conns, rids)]
        head = self.head()
        self.assertEqual(len(self.commits()), 1)
        for res in results:
            self.assertIn(res["commit"], (head, None), res)
        self.assertIn(head, [r["commit"] for r in results])
        self.assertCommitted(head, recs)

    def test_no_commit_for_a_net_zero_batch(self):
        conn = self.connect(agent_id="z")
        conn.store(1, 1, 1, "kept")
        history = [self.sync(conn)["commit"]]
        conn.store(2, 2, 2, "stored then deleted")
        self.assertTrue(conn.delete(2, 2, 2))
        res = self.sync(conn)
        self.assertEqual(self.commits(), history)
        self.assertEqual(res, {"commit": None, "decisions": 0,
                               "coordinates": [], "ranges": None})
        self.assertEqual(self.health(conn)["pending"], 0)
        self.assertStatus([])
        # None of the commits made is empty.
        conn.store(2, 2, 3, "real change")
        self.sync(conn)
        for rev in self.commits():
            self.assertTrue(self.changed_in(rev), rev)

    def test_four_digit_x(self):
        conn = self.connect(agent_id="big")
        rec = conn.store(1000, 5, 4, "the last issue")
        res = self.sync(conn)
        self.assertEqual(res["ranges"],
                         {"x": [1000, 1000], "y": [5, 5], "z": [4, 4]})
        self.assertEqual(self.subject(),
                         "vector-memory: 1 decisions (x 1000, y 5, z 4)")
        self.assertEqual(self.body_lines(), ["x-1000/y-5-z-4.json by big"])
        self.assertEqual(rel_path(1000, 5, 4),
                         ".vector-memory/x-1000/y-5-z-4.json")
        self.assertCommitted("HEAD", [rec])

    def test_sync_params_checked(self):
        conn = self.connect(agent_id="p")
        conn.store(1, 1, 1, "x")
        for params in ({"message": ""}, {"message": 5}, {"message": None},
                       {"msg": "typo"}):
            with self.subTest(params=params):
                self.assertRpcError(vt.E_VALUE, conn.call, "git.sync",
                                    params)
        self.assertEqual(self.commits(), [])
        self.assertEqual(self.health(conn)["pending"], 1)

    def test_sync_includes_writes_of_other_connections(self):
        a, b = self.connect(agent_id="a"), self.connect(agent_id="b")
        recs = [a.store(x, 2, 3, "from a %d" % x) for x in range(1, 6)]
        recs += [b.store(x, 3, 3, "from b %d" % x) for x in range(1, 6)]
        res = self.sync(a)
        self.assertEqual(res["decisions"], 10)
        self.assertCommitted(res["commit"], recs)
        lines = self.body_lines()
        self.assertEqual(len(lines), 10)
        self.assertIn(body_line(3, 3, 3, "b"), lines)
        self.assertIn(body_line(3, 2, 3, "a"), lines)


class RacyGit(GitCase):
    """A decision file is dated a second before the daemon wrote it, so a
    git status in the second of the commit finds it clean without reading
    it and without rewriting the index, and still sees a user's edit made
    in that very second (docs/architecture.md, "Racy git")."""
    daemon_args = ("--commit-delay-ms", "60000")

    def index_stamp(self):
        st = os.stat(os.path.join(self.repo.gitdir, "index"))
        return st.st_ino, st.st_mtime_ns, st.st_size

    def test_status_after_a_commit_and_an_edit_in_its_second(self):
        # For its first two seconds a daemon back-dates no new file (one
        # its predecessor removed might come back): let them pass.
        time.sleep(2.2)
        conn = self.connect(agent_id="racy")
        same_second = False
        for attempt in range(5):
            # a coordinate of its own each time: z=1 is write-once
            x = 5 + attempt
            path = self.repo.decision_path(x, 2, 1)
            conn.store(x, 2, 1, "Use PostgreSQL, take %d" % attempt)
            self.sync(conn)
            st = os.stat(path)
            self.assertGreaterEqual(st.st_ctime_ns - st.st_mtime_ns, 10**9)
            before = self.index_stamp()
            self.assertEqual(self.status(), [])
            self.assertEqual(self.index_stamp(), before,
                             "git status rewrote the index")
            # The user's edit: same size, in place, at once.
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "r+b") as f:
                f.write(data.replace(b"PostgreSQL", b"PostgreSQl"))
            edited = os.stat(path)
            self.assertEqual(edited.st_size, st.st_size)
            self.assertEqual(self.status(),
                             [" M " + rel_path(x, 2, 1)])
            same_second = (edited.st_mtime_ns // 10**9 ==
                           before[1] // 10**9)
            if same_second:
                break
            # put it back for the next attempt (the daemon reloads it),
            # and let git settle its index (an entry git wrote in its
            # file's second is re-checked, and the index rewritten, by
            # the next status: not the next attempt's)
            self.git("checkout", "--", rel_path(x, 2, 1))
            time.sleep(2.2)
            self.status()
        self.assertTrue(same_second, "no edit landed in its commit's second")


class NoDelay(GitCase):
    daemon_args = ("--commit-delay-ms", "0")

    def test_sync_races_background_commits(self):
        """With commits starting at once, a git.sync may arrive while a job
        that missed the last write runs: it still returns only once that
        write is committed."""
        conn = self.connect(agent_id="race")
        for i in range(30):
            x, z = 1 + i, 2 + i % 3
            rec = conn.store(x, 3, z, "race %d" % i)
            res = self.sync(conn)
            self.assertEqual(self.blob("HEAD", rel_path(x, 3, z)),
                             vt.decision_file_bytes(rec), (i, res))
            if res["commit"] is not None:
                self.assertIn(vt.coord(x, 3, z), res["coordinates"])
        for rev in self.commits():
            self.assertTrue(self.changed_in(rev), rev)


class UserWork(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    def test_staged_and_unstaged_changes_preserved(self):
        base = self.user_commit("tracked.txt", "one\n", "base")
        with open(os.path.join(self.repo.root, "tracked.txt"), "a") as f:
            f.write("unstaged line\n")
        with open(os.path.join(self.repo.root, "a.txt"), "w") as f:
            f.write("staged by the user\n")
        self.git("add", "a.txt")
        with open(os.path.join(self.repo.root, "untracked.txt"), "w") as f:
            f.write("nobody's\n")
        conn = self.connect(agent_id="keeper")
        rec = conn.store(8, 2, 2, "keep the user's work")
        self.assertFileMatches(rec)
        res = self.sync(conn)
        self.assertEqual(self.parents(res["commit"]), [base])
        self.assertEqual(self.git("diff", "--cached", "--name-only").split(),
                         ["a.txt"])
        self.assertEqual(self.git("diff", "--name-only").split(),
                         ["tracked.txt"])
        self.assertEqual(self.git("show", "--name-only", "--format=",
                                  "HEAD").split(),
                         sorted([METADATA, rel_path(8, 2, 2)]))
        self.assertStatus(sorted(
            ["A  a.txt", " M tracked.txt", "?? untracked.txt"]))
        self.assertEqual(self.blob("HEAD", "tracked.txt"), b"one\n")
        self.assertEqual(self.git_bytes("show", ":a.txt"),
                         b"staged by the user\n")
        with open(os.path.join(self.repo.root, "tracked.txt")) as f:
            self.assertEqual(f.read(), "one\nunstaged line\n")

    def test_unborn_head_gets_a_root_commit(self):
        self.assertIsNone(self.head())
        conn = self.connect(agent_id="first")
        rec = conn.store(1, 1, 1, "the very first decision")
        res = self.sync(conn)
        self.assertEqual(self.parents(res["commit"]), [])
        self.assertNotIn("\nparent ", self.git("cat-file", "-p", "HEAD"))
        self.assertEqual(self.tree_files(), [METADATA, rel_path(1, 1, 1)])
        self.assertCommitted("HEAD", [rec])
        with open(os.path.join(self.repo.root, METADATA), "rb") as f:
            self.assertEqual(self.blob("HEAD", METADATA), f.read())
        self.assertEqual(json.loads(self.blob("HEAD", METADATA)),
                         {"format": 1})
        self.assertEqual(self.git("symbolic-ref", "-q", "HEAD").strip(),
                         self.git("for-each-ref", "--format=%(refname)",
                                  "refs/heads/").strip())
        self.assertStatus([])

    def test_user_commit_between_batches(self):
        conn = self.connect(agent_id="d")
        rec1 = conn.store(2, 1, 1, "before the user")
        ours1 = self.sync(conn)["commit"]
        theirs = self.user_commit("user.txt", "user's file\n", "user work")
        self.assertEqual(self.parents(theirs), [ours1])
        rec2 = conn.store(2, 2, 1, "after the user")
        ours2 = self.sync(conn)["commit"]
        self.assertEqual(self.parents(ours2), [theirs])
        self.assertEqual(self.commits(), [ours2, theirs, ours1])
        self.assertEqual(self.tree_files(ours2), sorted(
            [METADATA, rel_path(2, 1, 1), rel_path(2, 2, 1), "user.txt"]))
        self.assertCommitted(ours2, [rec1, rec2])
        self.assertEqual(self.changed_in(ours2), [("A", rel_path(2, 2, 1))])
        self.assertStatus([])

    def test_user_commit_while_decisions_pending(self):
        conn = self.connect(agent_id="d")
        rec1 = conn.store(3, 1, 1, "pending while the user commits")
        theirs = self.user_commit("notes.txt", "notes\n", "user first")
        rec2 = conn.store(3, 1, 2, "also pending")
        res = self.sync(conn)
        self.assertEqual(res["decisions"], 2)
        self.assertEqual(self.parents(res["commit"]), [theirs])
        self.assertEqual(self.tree_files(), sorted(
            [METADATA, rel_path(3, 1, 1), rel_path(3, 1, 2), "notes.txt"]))
        self.assertCommitted("HEAD", [rec1, rec2])
        self.assertStatus([])


class Deferral(GitCase):
    """Nothing is committed while the repository is busy; stores go on;
    the batch is committed once the obstacle goes."""

    def test_index_lock_held_for_two_seconds(self):
        conn = self.connect(agent_id="locked")
        lock = os.path.join(self.repo.gitdir, "index.lock")
        with open(lock, "w"):
            pass
        held_until = time.monotonic() + vt.scaled(2.0)
        recs = [conn.store(6, 1, 1, "while locked")]
        self.assertDeferred(conn, "index.lock")
        recs.append(conn.store(6, 2, 2, "still accepted"))
        time.sleep(max(0.0, held_until - time.monotonic()))
        self.assertEqual(self.commits(), [])
        self.assertEqual(self.health(conn)["pending"], 2)
        self.assertEqual(conn.get(6, 2, 2), recs[1])
        self.assertTrue(os.path.exists(lock), "someone else's lock removed")
        os.unlink(lock)
        self.assertCommitResumes(conn, [], recs)
        self.assertEqual(self.subject(),
                         "vector-memory: 2 decisions (x 6, y 1-2, z 1-2)")

    def test_detached_head(self):
        conn = self.connect(agent_id="det")
        rec0 = conn.store(9, 1, 1, "on the branch")
        base = self.sync(conn)["commit"]
        self.git("checkout", "-q", "--detach")
        recs = [conn.store(9, 1, 2, "while detached")]
        health = self.assertDeferred(conn, "detached")
        self.assertEqual(health["pending"], 1)
        recs.append(conn.store(9, 1, 3, "still detached"))
        time.sleep(0.6)
        self.assertEqual(self.git("rev-parse", "HEAD").strip(), base)
        self.git("checkout", "-q", "-")
        self.assertTrue(self.git("symbolic-ref", "-q", "HEAD").strip())
        self.assertCommitResumes(conn, [base], [rec0] + recs)

    def test_cherry_pick_in_progress(self):
        conn = self.connect(agent_id="picker")
        self.make_conflict(merge=False)
        p = self.git_run("cherry-pick", "other")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertTrue(os.path.exists(os.path.join(self.repo.gitdir,
                                                    "CHERRY_PICK_HEAD")))
        tip = self.commits()
        recs = [conn.store(12, 1, 1, "during the cherry-pick")]
        self.assertDeferred(conn, "cherry-pick")
        time.sleep(0.6)
        self.assertEqual(self.commits(), tip)
        self.git("cherry-pick", "--abort")
        self.assertCommitResumes(conn, tip, recs)

    def test_bisect_in_progress(self):
        conn = self.connect(agent_id="bisector")
        good = self.user_commit("b.txt", "1\n", "one")
        self.user_commit("b.txt", "2\n", "two")
        self.user_commit("b.txt", "3\n", "three")
        self.git("bisect", "start", "HEAD", good)
        recs = [conn.store(14, 4, 4, "during the bisect")]
        self.assertDeferred(conn, "bisect")
        self.git("bisect", "reset")
        tip = self.commits()
        self.assertCommitResumes(conn, tip, recs)

    def test_merge_in_progress(self):
        conn = self.connect(agent_id="merger")
        self.make_conflict()
        tip = self.commits()
        recs = [conn.store(11, 3, 3, "during the merge")]
        self.assertDeferred(conn, "merge")
        recs.append(conn.store(11, 3, 4, "more during the merge"))
        time.sleep(0.6)
        self.assertEqual(self.commits(), tip)
        self.git("merge", "--abort")
        self.assertCommitResumes(conn, tip, recs)
        self.assertEqual(self.changed_in(),
                         [("A", METADATA), ("A", rel_path(11, 3, 3)),
                          ("A", rel_path(11, 3, 4))])
        self.assertEqual(self.blob("HEAD", "shared.txt"), b"mine\n")

    def test_rebase_in_progress_then_finished(self):
        conn = self.connect(agent_id="rebaser")
        self.user_commit("f.txt", "base\n", "base")
        branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.git("checkout", "-q", "-b", "topic")
        self.user_commit("f.txt", "topic\n", "topic change")
        self.git("checkout", "-q", branch)
        upstream = self.user_commit("f.txt", "upstream\n", "upstream change")
        self.git("checkout", "-q", "topic")
        p = self.git_run("rebase", branch)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        recs = [conn.store(13, 2, 2, "during the rebase")]
        self.assertDeferred(conn, "rebase")
        time.sleep(0.6)
        self.assertEqual(self.git("rev-parse", "HEAD").strip(), upstream)
        with open(os.path.join(self.repo.root, "f.txt"), "w") as f:
            f.write("resolved\n")
        self.git("add", "f.txt")
        self.git("rebase", "--continue")
        rebased = self.git("rev-parse", "topic").strip()
        self.assertEqual(self.parents(rebased), [upstream])
        now = self.assertCommitResumes(conn, self.commits(), recs)
        self.assertEqual(self.git("symbolic-ref", "--short", "HEAD").strip(),
                         "topic")
        self.assertEqual(self.parents(now[0]), [rebased])
        self.assertEqual(self.blob("HEAD", "f.txt"), b"resolved\n")


class Stop(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    def test_sigterm_commits_pending(self):
        conn = self.connect(agent_id="term")
        recs = [conn.store(x, 4, 3, "before SIGTERM %d" % x)
                for x in (20, 21)]
        self.daemon.stop()
        self.assertEqual(len(self.commits()), 1)
        self.assertEqual(self.subject(),
                         "vector-memory: 2 decisions (x 20-21, y 4, z 3)")
        self.assertCommitted("HEAD", recs)
        self.assertStatus([])

    def test_server_shutdown_commits_pending(self):
        conn = self.connect(agent_id="shut")
        rec = conn.store(30, 5, 1, "before server.shutdown")
        self.assertIs(conn.call("server.shutdown"), True)
        self.assertEqual(self.daemon.wait(), 0)
        self.assertEqual(len(self.commits()), 1)
        self.assertCommitted("HEAD", [rec])


class Restart(GitCase):
    def test_restart_after_sync_loads_everything(self):
        conn = self.connect(agent_id="r")
        recs = [conn.store(x, 1 + x % 5, 2, "r%d" % x) for x in range(1, 21)]
        self.assertTrue(conn.delete(5, 1, 2))
        res = self.sync(conn)
        # Stored then deleted before the commit: no difference to count.
        self.assertEqual(res["decisions"], 19)
        self.assertNotIn(body_line(5, 1, 2, "r"), self.body_lines())
        self.assertNotIn(rel_path(5, 1, 2), self.tree_files())
        history = self.commits()
        conn.close()
        self.daemon.restart()
        conn = self.connect()
        for rec in recs:
            c = rec["coordinate"]
            want = None if c["x"] == 5 else rec
            self.assertEqual(conn.get(c["x"], c["y"], c["z"]), want)
        self.assertEqual(self.health(conn)["decisions"], 19)
        self.assertPendingSettles(conn)
        self.assertNoNewCommit(history, 1.0)
        self.assertStatus([])

    def test_kill9_before_the_delay_then_committed_at_start(self):
        self.daemon.stop()
        self.daemon.args = ["--commit-delay-ms", "60000"]
        self.daemon.start()
        conn = self.connect(agent_id="k9")
        rec0 = conn.store(40, 1, 1, "committed before")
        base = self.sync(conn)["commit"]
        recs = [conn.store(41, 1, 1, "acknowledged, not committed"),
                conn.store(40, 2, 3, "another one")]
        self.daemon.kill()
        self.assertEqual(self.commits(), [base])
        self.daemon.args = ["--commit-delay-ms", "200"]
        self.daemon.start()
        now = self.wait_commits(2, 5.0)
        self.assertEqual(now[1], base)
        self.assertCommitted("HEAD", [rec0] + recs)
        self.assertEqual(self.changed_in(), [("A", rel_path(40, 2, 3)),
                                             ("A", rel_path(41, 1, 1))])
        conn = self.connect()
        self.assertEqual(self.health(conn)["pending"], 0)
        conn.close()
        # Nothing changed since: a restart commits nothing.
        self.daemon.restart()
        conn = self.connect()
        self.assertPendingSettles(conn)
        self.assertNoNewCommit(now, 1.0)
        self.assertIsNone(self.health(conn)["last_commit"])
        # The start-up commit counts only the real differences.
        self.assertEqual(sorted(self.body_lines()),
                         [body_line(40, 2, 3, "k9"), body_line(41, 1, 1, "k9")])
        self.assertEqual(self.subject(),
                         "vector-memory: 2 decisions (x 40-41, y 1-2, z 1-3)")

    def test_deletion_killed_before_its_commit_committed_at_start(self):
        """A deletion whose log record was already checkpointed away when
        the daemon was killed is known only from the files and HEAD: the
        next daemon still commits it."""
        self.daemon.stop()
        self.daemon.args = ["--commit-delay-ms", "60000"]
        self.daemon.start()
        conn = self.connect(agent_id="gone")
        keep = conn.store(42, 1, 2, "stays")
        conn.store(43, 1, 2, "goes")
        base = self.sync(conn)["commit"]
        self.assertTrue(conn.delete(43, 1, 2))
        # The file goes and the log is cut once writes are quiet.
        self.assertFileGone(43, 1, 2)
        wal = os.path.join(self.repo.gitdir, "vmem", "wal")
        self.assertTrue(vt.wait_until(
            lambda: self.health(conn)["pending"] == 1 and
            os.path.getsize(wal) == 0 or self.wal_empty(wal), timeout=vt.scaled(5)))
        self.daemon.kill()
        self.assertEqual(self.commits(), [base])
        self.daemon.args = ["--commit-delay-ms", "200"]
        self.daemon.start()
        now = self.wait_commits(2, 5.0)
        self.assertEqual(now[1], base)
        self.assertEqual(self.changed_in(), [("D", rel_path(43, 1, 2))])
        self.assertCommitted("HEAD", [keep])
        self.assertStatus([])

    def wal_empty(self, path):
        """No record in the log (it may run ahead of its records in
        zeros)."""
        with open(path, "rb") as f:
            return not f.read().strip(b"\0")

    def test_sync_right_after_restart_with_nothing_changed(self):
        conn = self.connect(agent_id="s")
        recs = [conn.store(x, 2, 2, "s%d" % x) for x in range(60, 66)]
        history = [self.sync(conn)["commit"]]
        conn.close()
        self.daemon.stop()
        self.daemon.args = ["--commit-delay-ms", "60000"]
        self.daemon.start()
        conn = self.connect()
        self.assertEqual(self.sync(conn), {"commit": None, "decisions": 0,
                                           "coordinates": [], "ranges": None})
        self.assertEqual(self.commits(), history)
        self.assertEqual(self.health(conn)["pending"], 0)
        self.assertCommitted("HEAD", recs)

    def test_deferred_at_stop_committed_by_next_daemon(self):
        conn = self.connect(agent_id="later")
        lock = os.path.join(self.repo.gitdir, "index.lock")
        with open(lock, "w"):
            pass
        rec = conn.store(50, 3, 2, "deferred at stop")
        conn.close()
        self.daemon.stop()  # must not hang on the deferred batch
        self.assertEqual(self.commits(), [])
        os.unlink(lock)
        self.daemon.start()
        self.wait_commits(1, 5.0)
        self.assertEqual(self.subject(),
                         "vector-memory: 1 decisions (x 50, y 3, z 2)")
        self.assertCommitted("HEAD", [rec])


class Identity(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    def who(self):
        return self.git("log", "-1", "--format=%an <%ae>|%cn <%ce>").strip()

    def test_author_from_repository_config(self):
        self.git("config", "user.name", "Alice")
        self.git("config", "user.email", "alice@example.com")
        conn = self.connect(agent_id="id")
        conn.store(1, 2, 3, "who wrote this")
        self.sync(conn)
        self.assertEqual(self.who(), "Alice <alice@example.com>|"
                         "Alice <alice@example.com>")

    def test_fallback_identity(self):
        # The daemon's HOME and XDG_CONFIG_HOME are empty directories and
        # the repository has no user config.
        self.assertNotEqual(self.git_run("config", "user.name").returncode,
                            0)
        conn = self.connect(agent_id="id")
        conn.store(1, 2, 3, "who wrote this")
        self.sync(conn)
        self.assertEqual(self.who(), "%s|%s" % (FALLBACK, FALLBACK))


class Worktrees(GitCase):
    def test_each_worktree_has_its_own_daemon_and_branch(self):
        conn = self.connect(agent_id="main")
        conn.store(1, 1, 1, "decided in the main tree")
        main_commit = self.sync(conn)["commit"]
        wt = os.path.join(self.repo.tmp, "wt")
        self.git("worktree", "add", "-q", "-b", "side", wt)
        other = self.new_daemon(*self.daemon_args, root=wt, name="vmemd-wt",
                                sock=self.repo.path("wt.sock")).start()
        side = self.connect(agent_id="side", daemon=other)
        # the worktree starts from its branch's files: (1, 1, 1) came along
        self.assertEqual(side.get(1, 1, 1)["content"],
                         "decided in the main tree")
        side.store(2, 1, 1, "decided in the worktree")
        res = self.sync(side)
        self.assertEqual(res["coordinates"], [vt.coord(2, 1, 1)])
        self.assertEqual(self.git("rev-parse", "side").strip(),
                         res["commit"])
        self.assertEqual(self.git("rev-parse", "HEAD").strip(), main_commit)
        self.assertIsNone(conn.get(2, 1, 1))
        self.assertTrue(os.path.exists(os.path.join(
            wt, ".vector-memory", "x-002", "y-1-z-1.json")))
        self.assertFalse(os.path.exists(self.repo.decision_path(2, 1, 1)))
        # separate state: the worktree's own git directory holds its lock
        self.assertTrue(os.path.exists(os.path.join(
            self.repo.gitdir, "worktrees", "wt", "vmem", "lock")))
        other.stop()


class Reload(GitCase):
    def reload(self, conn):
        return conn.call("git.reload", timeout=20)

    def test_checkout_without_memory_empties_and_back_restores(self):
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        self.git("branch", "bare")
        conn = self.connect(agent_id="r")
        recs = [conn.store(x, 2, 2, "r%d" % x) for x in range(1, 6)]
        self.sync(conn)
        self.git("checkout", "-q", "bare")
        self.assertEqual(self.reload(conn), {"count": 0, "quarantined": []})
        self.assertIsNone(conn.get(1, 2, 2))
        self.git("checkout", "-q", "-")
        self.assertEqual(self.reload(conn)["count"], 5)
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertEqual(self.sync(conn)["commit"], None)

    def test_hand_edit_and_bad_file(self):
        conn = self.connect(agent_id="r")
        rec = conn.store(6, 2, 2, "as stored")
        self.sync(conn)
        path = self.repo.decision_path(6, 2, 2)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace("as stored", "edited by hand"))
        with open(self.repo.decision_path(6, 2, 3), "w") as f:
            f.write("{not json")
        res = self.reload(conn)
        self.assertEqual(res["count"], 1)
        self.assertEqual([q["path"] for q in res["quarantined"]],
                         [".vector-memory/x-006/y-2-z-3.json"])
        self.assertEqual(conn.get(6, 2, 2)["content"], "edited by hand")
        self.assertEqual(conn.get(6, 2, 2)["version"], rec["version"])
        # the edit is committed; the quarantined file never is
        res = self.sync(conn)
        self.assertEqual(res["coordinates"], [vt.coord(6, 2, 2)])
        self.assertIn(".vector-memory/x-006/y-2-z-3.json",
                      [q["path"] for q in
                       self.health(conn)["quarantined"]])

    def test_reload_right_after_git_is_done(self):
        # A reload asked for the moment a git operation ends is not
        # refused for the operation the daemon saw a moment before.
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        conn = self.connect(agent_id="r")
        head = os.path.join(self.repo.gitdir, "MERGE_HEAD")
        for _ in range(5):
            with open(head, "w") as f:
                f.write(self.git("rev-parse", "HEAD"))
            self.assertTrue(vt.wait_until(lambda: conn.call(
                "server.health")["files_wait_for_git"], vt.DEFAULT_TIMEOUT,
                0.02))
            os.unlink(head)
            self.assertEqual(self.reload(conn)["count"], 0)

    def test_write_once_holds_across_a_reload(self):
        # another branch holds a z=1 decision this tree has not seen
        conn = self.connect(agent_id="r")
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        self.git("checkout", "-q", "-b", "other")
        conn.store(9, 1, 1, "theirs")
        self.sync(conn)
        self.git("checkout", "-q", "-")
        self.reload(conn)
        self.assertIsNone(conn.get(9, 1, 1))
        self.git("merge", "-q", "--no-edit", "other")
        self.reload(conn)
        self.assertRpcError(vt.E_IMMUTABLE, conn.store, 9, 1, 1, "ours")
        self.assertEqual(conn.get(9, 1, 1)["content"], "theirs")

    def test_writes_during_reloads_are_kept(self):
        conn = self.connect(agent_id="r")
        other = self.connect(agent_id="w")
        acked = []
        for i in range(20):
            other.send({"jsonrpc": "2.0", "id": i, "method": "git.reload"})
            acked.append(conn.store(1 + i, 3, 2, "w%d" % i))
            self.assertIn("result", other.read_json(timeout=20))
        for rec in acked:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
            self.assertFileMatches(rec)


    def test_concurrent_reloads_coalesce(self):
        """Reloads asked for together all succeed (no "already running"),
        each caller sees what the files held when it asked, and what one
        reload quarantined is listed once in health."""
        conn = self.connect(agent_id="r")
        items = [{"coordinate": vt.coord(x, y, 2), "content": "c%d-%d"
                  % (x, y)} for x in range(1, 301) for y in range(1, 6)]
        for at in range(0, len(items), 500):
            conn.call("decision.store_many", {"items": items[at:at + 500]},
                      timeout=vt.scaled(60))
        self.sync(conn, timeout=60)
        with open(self.repo.decision_path(7, 7 % 5 + 1, 3), "w") as f:
            f.write("{broken")
        others = [self.connect() for _ in range(6)]
        for rounds in range(3):
            # Every file looks changed, so each reload reads them all.
            now = time.time() + rounds + 1
            for dirpath, _, names in os.walk(self.repo.vmdir):
                for name in names:
                    os.utime(os.path.join(dirpath, name), (now, now))
            for i, other in enumerate(others):
                other.send({"jsonrpc": "2.0", "id": i, "method":
                            "git.reload"})
                if i == 2:
                    # Made after the first callers asked, before the
                    # last ones did: those must see it.
                    rec = conn.get(1, 1, 2)
                    rec["content"] = "edited %d" % rounds
                    # Renamed into place: a reload may be reading.
                    tmp = self.repo.path("edit.json")
                    with open(tmp, "wb") as f:
                        f.write(vt.decision_file_bytes(rec))
                    os.rename(tmp, self.repo.decision_path(1, 1, 2))
            for i, other in enumerate(others):
                resp = other.read_json(timeout=vt.DEFAULT_TIMEOUT * 3)
                self.assertEqual(resp.get("id"), i, resp)
                self.assertIn("result", resp, resp)
                self.assertEqual(resp["result"]["count"], 1500)
                if i > 2:
                    self.assertEqual(other.get(1, 1, 2)["content"],
                                     "edited %d" % rounds)
        health = self.health(conn)
        self.assertEqual([q["path"] for q in health["quarantined"]],
                         [".vector-memory/x-007/y-3-z-3.json"])

    def test_python_threads_load_from_git(self):
        """The seed's load_from_git() from several threads at once."""
        import threading
        sys_path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "client", "python")
        import sys
        sys.path.insert(0, os.path.normpath(sys_path))
        import vmem
        conn = self.connect(agent_id="r")
        conn.store(3, 3, 3, "one")
        with vmem.VectorMemoryManager(self.repo.root, "threads",
                                      socket_path=self.daemon.sock,
                                      autostart=False) as m:
            counts, errors = [], []

            def load():
                try:
                    counts.append(m.load_from_git())
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)
            threads = [threading.Thread(target=load) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self.assertEqual((errors, counts), ([], [1] * 8))


class Flush(GitCase):
    """server.flush: files written, log emptied and the batch committed
    now rather than after the commit delay."""

    daemon_args = ("--commit-delay-ms", "60000")

    def flush(self, conn, **params):
        return conn.call("server.flush", params, timeout=30)

    def wal_size(self):
        return os.path.getsize(os.path.join(self.repo.gitdir, "vmem", "wal"))

    def test_until_written(self):
        conn = self.connect(agent_id="f")
        for i in range(1, 30):
            rec = conn.store(i, 2, 3, "text %d" % i)
            self.assertEqual(self.flush(conn, until="written"),
                             {"written": True, "committed": False,
                              "commit": None})
            # No polling: the file is there when flush answers.
            self.assertEqual(self.repo.read_decision_bytes(i, 2, 3),
                             vt.decision_file_bytes(rec))
        self.assertEqual(self.commits(), [])

    def test_until_committed(self):
        conn = self.connect(agent_id="f")
        recs = [conn.store(x, 1, 2, "c%d" % x) for x in range(1, 6)]
        self.assertGreater(self.wal_size(), 0)
        res = self.flush(conn)
        self.assertRegex(res["commit"], HEX40)
        self.assertEqual(res, {"written": True, "committed": True,
                               "commit": self.head()})
        self.assertCommitted("HEAD", recs)
        self.assertEqual(self.wal_size(), 0)
        self.assertEqual(self.health(conn)["pending"], 0)
        self.assertEqual(self.status(), [])
        # Nothing left: answered at once, no new commit.
        self.assertEqual(self.flush(conn, timeout_ms=1000),
                         {"written": True, "committed": True,
                          "commit": None})
        self.assertEqual(len(self.commits()), 1)

    def test_params(self):
        conn = self.connect()
        for params in ({"until": "soon"}, {"until": 1}, {"timeout_ms": 0},
                       {"timeout_ms": 600001}, {"other": 1}):
            with self.subTest(params=params):
                self.assertRpcError(vt.E_VALUE, self.flush, conn, **params)

    def test_deferred_commit_is_a_storage_error(self):
        conn = self.connect(agent_id="f")
        conn.store(2, 2, 2, "base")
        self.flush(conn)
        self.git("checkout", "-q", "--detach")
        conn.store(2, 2, 3, "while detached")
        err = self.assertRpcError(E_STORAGE, self.flush, conn)
        self.assertIn("detached", err.message)
        self.git("checkout", "-q", "-")

    def test_timeout_while_files_cannot_be_written(self):
        conn = self.connect(agent_id="f")
        conn.store(4, 1, 2, "first")
        self.flush(conn, until="written")
        # A file where x-005 belongs: the writer fails and retries.
        xdir = os.path.dirname(self.repo.decision_path(5, 1, 3))
        with open(xdir, "w") as f:
            f.write("in the way")
        conn.store(5, 1, 3, "second")
        err = self.assertRpcError(vt.E_CONCURRENCY, self.flush, conn,
                                  until="written", timeout_ms=300)
        self.assertIn("timed out after 300 ms", err.message)
        os.unlink(xdir)
        res = self.flush(conn, timeout_ms=int(vt.scaled(30000)))
        self.assertTrue(res["committed"])
        self.assertEqual(self.repo.read_decision(5, 1, 3)["content"],
                         "second")


class Watch(GitCase):
    """Changes made under the daemon are picked up without git.reload."""

    def test_checkout_seen_without_reload(self):
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        self.git("branch", "bare")
        conn = self.connect(agent_id="w")
        rec = conn.store(4, 2, 2, "on main")
        self.sync(conn)
        self.git("checkout", "-q", "bare")
        self.assertTrue(vt.wait_until(
            lambda: conn.get(4, 2, 2) is None, 5.0))
        self.git("checkout", "-q", "-")
        self.assertTrue(vt.wait_until(
            lambda: conn.get(4, 2, 2) == rec, 5.0))

    def test_second_clone_pulls_and_sees_decisions(self):
        self.git("commit", "-q", "--allow-empty", "-m", "start")
        clone = self.repo.path("clone")
        subprocess.run(["git", "clone", "-q", self.repo.root, clone],
                       check=True, env=self.git_env())
        theirs = self.new_daemon(*self.daemon_args, root=clone,
                                 name="vmemd-clone",
                                 sock=self.repo.path("clone.sock")).start()
        other = self.connect(agent_id="c", daemon=theirs)
        self.assertIsNone(other.get(8, 1, 3))
        conn = self.connect(agent_id="w")
        rec = conn.store(8, 1, 3, "decided in the first clone")
        self.sync(conn)
        subprocess.run(["git", "-C", clone, "pull", "-q", "--ff-only"],
                       check=True, env=self.git_env())
        self.assertTrue(vt.wait_until(
            lambda: other.get(8, 1, 3) == rec, 5.0))
        theirs.stop()


class Log(GitCase):
    def test_memory_commits_newest_first(self):
        conn = self.connect(agent_id="l")
        made = []
        for i in range(3):
            conn.store(10 + i, 1, 2, "step %d" % i)
            made.append(self.sync(conn)["commit"])
            self.git("commit", "-q", "--allow-empty", "-m", "user %d" % i)
        log = conn.call("git.log")
        self.assertEqual([e["commit"] for e in log], made[::-1])
        self.assertEqual([e["subject"] for e in log],
                         [self.subject(c) for c in made[::-1]])
        for e in log:
            ct = int(self.git("log", "-1", "--format=%ct", e["commit"]))
            self.assertEqual(e["committed_at"], time.strftime(
                "%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(ct)))
        self.assertEqual(conn.call("git.log", {"limit": 1}), log[:1])
        self.assertRpcError(vt.E_VALUE, conn.call, "git.log", {"limit": 0})
        p = subprocess.run([vt.VMEM, "--socket", self.daemon.sock,
                            "--repo", self.repo.root, "log", "--limit", "2"],
                           capture_output=True, text=True, timeout=vt.scaled(30))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([ln.split()[0] for ln in p.stdout.splitlines()],
                         [c[:12] for c in made[::-1][:2]])


class Cli(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    def vmem(self, *args):
        env = clean_env(self.repo.tmp)
        env.update(VMEMD=vt.VMEMD, VMEM_AGENT_ID="cli", VMEM_NO_AUTOSTART="1")
        env.pop("XDG_RUNTIME_DIR", None)
        return subprocess.run([vt.VMEM, "--socket", self.daemon.sock,
                               "--repo", self.repo.root] + list(args),
                              capture_output=True, text=True, env=env,
                              timeout=vt.scaled(30))

    def test_vmem_sync(self):
        conn = self.connect(agent_id="c")
        conn.store(70, 1, 1, "one")
        conn.store(71, 1, 1, "two")
        p = self.vmem("sync")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "committed %s (2 decisions)\n"
                         % self.head())
        p = self.vmem("sync")
        self.assertEqual((p.returncode, p.stdout), (0, "nothing to commit\n"))
        self.assertEqual(len(self.commits()), 1)

        conn.store(72, 2, 2, "three")
        p = self.vmem("sync", "-m", "CLI message: three", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        res = json.loads(p.stdout)
        self.assertEqual(res["commit"], self.head())
        self.assertEqual((res["decisions"], res["ranges"]),
                         (1, {"x": [72, 72], "y": [2, 2], "z": [2, 2]}))
        self.assertEqual(self.git("log", "-1", "--format=%B").rstrip("\n"),
                         "CLI message: three")
        self.assertEqual(len(self.commits()), 2)

    def test_vmem_sync_deferred(self):
        conn = self.connect(agent_id="c")
        conn.store(73, 1, 1, "locked out")
        lock = os.path.join(self.repo.gitdir, "index.lock")
        with open(lock, "w"):
            pass
        p = self.vmem("sync")
        self.assertEqual(p.returncode, 1, (p.stdout, p.stderr))
        self.assertIn("StorageError", p.stderr)
        self.assertEqual(self.commits(), [])
        os.unlink(lock)
        p = self.vmem("sync")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "committed %s (1 decisions)\n"
                         % self.head())


if __name__ == "__main__":
    vt.main()

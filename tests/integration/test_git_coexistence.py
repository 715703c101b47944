#!/usr/bin/env python3
"""git_coexistence: vmemd sharing a working tree with its user's git.

Regression cases of issue 12 (conflicts as a state, the layer-aware merge
driver, the tree yielded to git during its operations), each on real
repositories, real daemons and the git program; then a scripted user who
runs VMEM_ROUNDS (16 by default, 200 in CI's normal stage: see ROUNDS)
seeded rounds of git commands (add, commit, commit -a, stash/pop, merges
with conflicts, pulls from a second clone with its own daemon, rebase
with autostash, cherry-pick, reset, checkout, worktree) over a plain
index, a split index, index v4 and the untracked cache, while four
writers store, and checks the invariants after every step. VMEM_SEED
replays a run (the seed is printed); VMEM_VIOLATION_DIR keeps both
daemons' logs of a round that broke an invariant. Run alone, this file
runs both; meson runs the regression cases as git_coexistence and each
index format of the scripted user as git_user_FORMAT."""

import json
import os
import random
import re
import subprocess
import threading
import time

import vmemtest as vt
from vmemtest import (DEFAULT_TIMEOUT, E_IMMUTABLE, E_STORAGE, GitCase,
                      clean_env, coord, decision_file_bytes, diag, rel_path,
                      wait_until)

E_CONFLICT = (-32008, "ConflictError")
MARKER_RE = re.compile(rb"^(<{7} |={7}$|>{7} )", re.M)
WAIT = DEFAULT_TIMEOUT


def conflict_records(gitdir):
    """The conflict records of a tree's git directory: {name: record}."""
    d = os.path.join(gitdir, "vmem", "conflicts")
    if not os.path.isdir(d):
        return {}
    out = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".json") and not name.startswith("."):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                out[name] = json.load(f)
    return out


class Coexist(GitCase):
    """A repository with a first commit; helpers for a second clone, the
    merge driver and the index."""

    daemon_args = ("--commit-delay-ms", "100")

    def setUp(self):
        super().setUp()
        # no background gc (it holds gc.log.lock for a while)
        self.git("config", "gc.auto", "0")
        self.git("config", "maintenance.auto", "false")
        self.user_commit("README", "a project\n", "start")

    # -- git elsewhere
    def git_at(self, root, *args, check=True):
        p = subprocess.run(["git", "-C", root] + list(args),
                           capture_output=True, env=self.git_env(),
                           timeout=60)
        if check:
            self.assertEqual(p.returncode, 0, "git %s in %s: %s%s" % (
                " ".join(args), root, p.stdout.decode(errors="replace"),
                p.stderr.decode(errors="replace")))
        return p

    def clone(self, name="clone"):
        path = self.repo.path(name)
        subprocess.run(["git", "clone", "-q", "-c", "gc.auto=0", "-c",
                        "maintenance.auto=false", self.repo.root, path],
                       check=True, env=self.git_env(), timeout=60)
        return path

    def daemon_at(self, root, name, *extra):
        return self.new_daemon(*(self.daemon_args + extra), root=root,
                               name=name,
                               sock=self.repo.path(name + ".sock")).start()

    def vmem(self, *args, root=None, sock=None):
        env = clean_env(self.repo.tmp)
        env.update(VMEMD=vt.VMEMD, VMEM_AGENT_ID="cli",
                   VMEM_NO_AUTOSTART="1")
        return subprocess.run(
            [vt.VMEM, "--socket", sock or self.daemon.sock, "--repo",
             root or self.repo.root] + list(args),
            capture_output=True, text=True, env=env, timeout=60)

    def init_driver(self, root):
        env = clean_env(self.repo.tmp)
        p = subprocess.run([vt.VMEM, "--repo", root, "init"],
                           capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    # -- checks
    def wait_health(self, conn, pred, what, timeout=WAIT):
        got = wait_until(lambda: (lambda h: pred(h) and h)(
            conn.call("server.health")), timeout, 0.05)
        self.assertTrue(got, "%s: %s" % (what, conn.call("server.health")))
        return got

    def wait_conflicts(self, conn, n, timeout=WAIT):
        return self.wait_health(
            conn, lambda h: len(h["conflicts"]) == n
            and not any(c["resolved_in_git"] for c in h["conflicts"]),
            "%d conflicts" % n, timeout)

    def stages(self, root=None):
        """{path: set of stages} of the index (every format git writes)."""
        out = self.git_at(root or self.repo.root, "ls-files", "-s",
                          "-z").stdout
        stages = {}
        for entry in out.split(b"\0"):
            if entry:
                meta, path = entry.split(b"\t", 1)
                stages.setdefault(path.decode(), set()).add(
                    int(meta.split()[2]))
        return stages

    def assertNoStageMix(self, root=None):
        bad = {p: s for p, s in self.stages(root).items()
               if 0 in s and len(s) > 1}
        self.assertEqual(bad, {}, "stage 0 next to stages 1-3")

    def resolve(self, x, y, z, how, sock=None, root=None):
        p = self.vmem("resolve", str(x), str(y), str(z), how, sock=sock,
                      root=root)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p.stdout

    def decision_text(self, x, y, z, content, version=1, agent="hand",
                      timestamp="2026-01-01T00:00:00.000000Z"):
        return decision_file_bytes({
            "coordinate": coord(x, y, z), "content": content,
            "timestamp": timestamp, "agent_id": agent,
            "issue_context": None, "version": version})


class Conflicts(Coexist):
    """Issue 12: conflicts in .vector-memory are a state, not a
    quarantine."""

    start_daemon = False

    def pair(self, *extra):
        """The repository and a clone of it, each with a daemon; the
        clone's does not register the merge driver."""
        clone = self.clone()
        a = self.daemon_at(self.repo.root, "vmemd", *extra)
        b = self.daemon_at(clone, "vmemd-clone", "--register-merge-driver",
                           "false", *extra)
        self.daemon = a
        return clone, a, b

    def pull_conflict(self):
        """A pull from the clone leaves (7, 2, 2) in conflict: both
        daemons, a connection to ours and the version it acknowledged."""
        clone, a, b = self.pair()
        ca, cb = self.connect("alice", daemon=a), self.connect("bob",
                                                               daemon=b)
        ra = ca.store(7, 2, 2, "A's interface")
        cb.store(7, 2, 2, "B's interface")
        self.sync(ca)
        self.sync(cb)
        p = self.git_run("pull", "--no-rebase", "--no-edit", clone)
        self.assertIn(b"CONFLICT", p.stdout)
        self.wait_conflicts(ca, 1)
        return a, b, ca, ra

    def test_pull_conflict_keeps_acknowledged_and_refuses_writes(self):
        clone, a, b = self.pair()
        ca, cb = self.connect("alice", daemon=a), self.connect("bob",
                                                               daemon=b)
        ra = [ca.store(7, 2, 2, "A's interface"),
              ca.store(9, 1, 1, "A's architecture")]
        rb = [cb.store(7, 2, 2, "B's interface"),
              cb.store(9, 1, 1, "B's architecture")]
        self.sync(ca)
        self.sync(cb)
        head = self.head()
        p = self.git_run("pull", "--no-rebase", "--no-edit", clone)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn(b"CONFLICT", p.stdout)
        texts = {c: self.repo.read_decision_bytes(*c)
                 for c in ((7, 2, 2), (9, 1, 1))}
        for t in texts.values():
            self.assertRegex(t, MARKER_RE)

        h = self.wait_conflicts(ca, 2)
        self.assertEqual(h["status"], "degraded")
        self.assertEqual(sorted(c["path"] for c in h["conflicts"]),
                         [rel_path(7, 2, 2), rel_path(9, 1, 1)])
        self.assertEqual(h["quarantined"], [])
        self.assertIn("conflict in .vector-memory/x-00", h["commit_deferred"])
        # both acknowledged decisions are still served
        self.assertEqual(ca.get(7, 2, 2), ra[0])
        self.assertEqual(ca.get(9, 1, 1), ra[1])
        self.assertTrue(ca.exists(9, 1, 1))
        # writes refused, naming the conflict; z=1 stays write-once
        err = self.assertRpcError(E_CONFLICT, ca.store, 7, 2, 2, "new",
                                  overwrite=True)
        self.assertIn(rel_path(7, 2, 2), err.message)
        self.assertRpcError(E_CONFLICT, ca.store, 9, 1, 1, "again")
        self.assertRpcError(E_CONFLICT, ca.delete, 7, 2, 2)
        self.assertRpcError(E_CONFLICT, ca.call, "decision.store_many",
                            {"items": [{"coordinate": coord(7, 2, 2),
                                        "content": "x", "overwrite": True}]})
        # a store elsewhere is pending, its commit deferred with the reason
        ca.store(3, 1, 2, "elsewhere")
        err = self.assertRpcError(E_STORAGE, self.sync, ca)
        self.assertIn("conflict in .vector-memory/", err.message)
        self.assertEqual(self.head(), head)
        # the conflict text stays; the index is not touched by us
        time.sleep(0.5)
        for c, t in texts.items():
            self.assertEqual(self.repo.read_decision_bytes(*c), t)
        self.assertNoStageMix()
        st = self.stages()
        self.assertEqual(st[rel_path(7, 2, 2)], {2, 3})
        # vmem status and vmem conflicts say so
        p = self.vmem("status")
        self.assertIn("conflicts:", p.stdout)
        self.assertIn(rel_path(9, 1, 1), p.stdout)
        p = self.vmem("conflicts")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(rel_path(7, 2, 2), p.stdout)
        listing = ca.call("conflict.list")
        self.assertEqual(listing["conflicts_total"], 2)
        held = [r for r in listing["records"] if r["kind"] == "held"]
        self.assertEqual(len(held), 2)

        # resolution: (9, 1, 1) by git, taking theirs (drops A's z=1),
        # (7, 2, 2) with vmem resolve keeping the acknowledged version
        self.git("checkout", "--theirs", "--", rel_path(9, 1, 1))
        self.git("add", "--", rel_path(9, 1, 1))
        out = self.resolve(7, 2, 2, "--keep-acknowledged")
        self.assertIn("resolved", out)
        self.assertNoStageMix()
        self.git("commit", "-q", "--no-edit")
        h = self.wait_health(ca, lambda h: not h["conflicts"]
                             and h["dropped"], "conflicts over")
        self.assertEqual(h["status"], "ok")
        self.assertEqual(ca.get(7, 2, 2), ra[0])
        self.assertEqual(ca.get(9, 1, 1), rb[1])
        dropped = h["dropped"]
        self.assertEqual([d["path"] for d in dropped], [rel_path(9, 1, 1)])
        self.assertEqual(dropped[0]["timestamp"], ra[1]["timestamp"])
        rec = conflict_records(self.repo.gitdir)[
            os.path.basename(dropped[0]["record"])]
        self.assertEqual(rec["kind"], "resolution")
        self.assertEqual(rec["lost"], ra[1])
        self.assertEqual(rec["kept"], rb[1])
        self.assertFalse([n for n in conflict_records(self.repo.gitdir)
                          if n.startswith("held-")])
        # write-once holds after the resolution too
        self.assertRpcError(E_IMMUTABLE, ca.store, 9, 1, 1, "mine again")
        # the pending store is committed now, on top of the merge
        res = self.sync(ca)
        self.assertIn(coord(3, 1, 2), res["coordinates"])
        self.assertEqual(self.blob("HEAD", rel_path(7, 2, 2)),
                         decision_file_bytes(ra[0]))
        b.stop()

    def test_resolution_in_git_ends_the_conflict_while_agents_write(self):
        # An agent that never stops writing keeps the file writer busy;
        # the look at the files that sees the conflict resolved must not
        # wait for the writer to catch up (it waited for good, and the
        # conflict stayed listed with commits deferred).
        a, b, ca, ra = self.pull_conflict()
        stop, errors = threading.Event(), []

        def agent():
            conn = self.connect("busy", daemon=a)
            n = 0
            try:
                while not stop.is_set():
                    n += 1
                    conn.store(20 + n % 20, n % 5 + 1, 2, "busy %d" % n,
                               overwrite=True)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))
            finally:
                conn.close()
        t = threading.Thread(target=agent)
        t.start()
        try:
            time.sleep(0.3)
            self.git("checkout", "--ours", "--", rel_path(7, 2, 2))
            self.git("add", "--", rel_path(7, 2, 2))
            self.git("commit", "-q", "--no-edit")
            self.wait_health(ca, lambda h: not h["conflicts"],
                             "the conflict over while an agent writes")
        finally:
            stop.set()
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(ca.get(7, 2, 2), ra)
        self.sync(ca)
        b.stop()

    def test_resolve_waits_out_a_moment_of_another_index_lock(self):
        # Another git command holding index.lock for a moment does not
        # make vmem resolve fail (git itself would not wait); one that
        # keeps holding it does, with a ConcurrencyError.
        _, b, ca, ra = self.pull_conflict()
        lock = os.path.join(self.repo.gitdir, "index.lock")
        with open(lock, "w"):
            pass
        p = self.vmem("resolve", "7", "2", "2", "--keep-acknowledged")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ConcurrencyError", p.stderr)
        timer = threading.Timer(0.3, os.unlink, (lock,))
        timer.start()
        try:
            self.resolve(7, 2, 2, "--keep-acknowledged")
        finally:
            timer.join()
        self.git("commit", "-q", "--no-edit")
        self.wait_health(ca, lambda h: not h["conflicts"], "resolved")
        self.assertEqual(ca.get(7, 2, 2), ra)
        b.stop()

    def test_merge_squash_conflict_is_not_committed_as_a_deletion(self):
        a = self.daemon = self.daemon_at(self.repo.root, "vmemd")
        conn = self.connect("a")
        conn.store(5, 2, 2, "base")
        self.sync(conn)
        branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.git("checkout", "-q", "-b", "side")
        self.assertTrue(wait_until(lambda: conn.get(5, 2, 2), WAIT))
        conn.store(5, 2, 2, "side", overwrite=True)
        self.sync(conn)
        self.git("checkout", "-q", branch)
        self.assertTrue(wait_until(
            lambda: conn.get(5, 2, 2)["content"] == "base", WAIT))
        mine = conn.store(5, 2, 2, "mine", overwrite=True)
        self.sync(conn)
        head = self.head()
        p = self.git_run("merge", "--squash", "side")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.repo.gitdir,
                                                     "MERGE_HEAD")))
        self.wait_conflicts(conn, 1)
        self.assertEqual(conn.get(5, 2, 2), mine)
        conn.store(6, 1, 1, "while squashing")
        err = self.assertRpcError(E_STORAGE, self.sync, conn)
        self.assertIn("conflict in %s" % rel_path(5, 2, 2), err.message)
        time.sleep(0.5)
        self.assertEqual(self.head(), head)
        self.assertIn(rel_path(5, 2, 2), self.tree_files())
        self.assertNoStageMix()
        # resolved by hand: an edit and git add, then the user's commit
        by_hand = dict(mine, content="mine and side, by hand",
                       version=mine["version"] + 1)
        with open(self.repo.decision_path(5, 2, 2), "wb") as f:
            f.write(decision_file_bytes(by_hand))
        self.git("add", rel_path(5, 2, 2))
        self.git("commit", "-q", "-m", "squashed side")
        # (the drop is listed once its record is written, a moment later)
        h = self.wait_health(conn, lambda h: not h["conflicts"] and
                             h["dropped"], "resolved, the drop listed")
        self.assertEqual(conn.get(5, 2, 2), by_hand)
        self.assertEqual([d["version"] for d in h["dropped"]],
                         [mine["version"]])
        # the write refused to commit during the conflict is committed
        # now (by this sync, or by the daemon's own commit before it)
        self.sync(conn)
        self.assertIn(rel_path(6, 1, 1), self.tree_files())
        self.assertIn(rel_path(5, 2, 2), self.tree_files())
        for rev in self.commits():
            self.assertNotIn(("D", rel_path(5, 2, 2)), self.changed_in(rev))

    def test_stash_pop_conflict_store_and_sync_leave_git_alone(self):
        # commits only on git.sync: the hand edit stays the user's
        a = self.daemon = self.daemon_at(self.repo.root, "vmemd",
                                         "--commit-delay-ms", "60000")
        conn = self.connect("a")
        v1 = conn.store(6, 2, 2, "v1")
        self.sync(conn)
        edited = dict(v1, content="edited by hand")
        with open(self.repo.decision_path(6, 2, 2), "wb") as f:
            f.write(decision_file_bytes(edited))
        conn.call("git.reload")
        self.assertEqual(conn.get(6, 2, 2), edited)
        self.git("stash", "-q")
        self.assertTrue(wait_until(lambda: conn.get(6, 2, 2) == v1, WAIT))
        v2 = conn.store(6, 2, 2, "v2", overwrite=True)
        self.sync(conn)
        head = self.head()
        p = self.git_run("stash", "pop")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        text = self.repo.read_decision_bytes(6, 2, 2)
        self.assertRegex(text, MARKER_RE)
        self.wait_conflicts(conn, 1)
        self.assertEqual(conn.get(6, 2, 2), v2)
        # a store there, and a git.sync: refused, deferred, nothing staged
        self.assertRpcError(E_CONFLICT, conn.store, 6, 2, 2, "v3",
                            overwrite=True)
        conn.store(8, 1, 4, "elsewhere")
        err = self.assertRpcError(E_STORAGE, self.sync, conn)
        self.assertIn("conflict in %s" % rel_path(6, 2, 2), err.message)
        time.sleep(0.5)
        self.assertEqual(self.repo.read_decision_bytes(6, 2, 2), text)
        self.assertNoStageMix()
        self.assertEqual(self.head(), head)
        for rev in self.commits():
            self.assertNotIn(("D", rel_path(6, 2, 2)), self.changed_in(rev))
        # resolved with the stashed version: the acknowledged v2 is
        # dropped, kept in a record, and reported
        self.resolve(6, 2, 2, "--theirs")
        # (the list also names the stash's replacement of the hand edit
        # at (6, 2, 2), listed before: wait for v2's own entry)
        self.wait_health(conn, lambda h: not h["conflicts"] and any(
            d["coordinate"] == v2["coordinate"]
            and d["version"] == v2["version"]
            and d["timestamp"] == v2["timestamp"] for d in h["dropped"]),
            "resolved, v2 listed as dropped")
        self.assertEqual(conn.get(6, 2, 2), edited)
        self.assertNoStageMix()
        res = self.sync(conn)
        self.assertEqual(sorted((c["x"], c["y"], c["z"])
                                for c in res["coordinates"]),
                         [(6, 2, 2), (8, 1, 4)])
        self.git("stash", "drop", "-q")

    def test_restart_while_conflicted_serves_the_held_version(self):
        a = self.daemon = self.daemon_at(self.repo.root, "vmemd")
        conn = self.connect("a")
        v1 = conn.store(4, 3, 2, "v1")
        self.sync(conn)
        branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.git("checkout", "-q", "-b", "other")
        self.assertTrue(wait_until(lambda: conn.get(4, 3, 2), WAIT))
        conn.store(4, 3, 2, "other side", overwrite=True)
        self.sync(conn)
        self.git("checkout", "-q", branch)
        self.assertTrue(wait_until(lambda: conn.get(4, 3, 2) == v1, WAIT))
        mine = conn.store(4, 3, 2, "my side", overwrite=True)
        self.sync(conn)
        p = self.git_run("merge", "other")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.wait_conflicts(conn, 1)
        conn.close()
        a.stop()
        a.start()
        conn = self.connect("a")
        h = self.wait_conflicts(conn, 1)
        self.assertEqual(h["conflicts"][0]["path"], rel_path(4, 3, 2))
        self.assertEqual(conn.get(4, 3, 2), mine)
        self.assertRpcError(E_CONFLICT, conn.store, 4, 3, 2, "x",
                            overwrite=True)
        self.git("merge", "--abort")
        self.wait_health(conn, lambda h: not h["conflicts"], "aborted")
        self.assertEqual(conn.get(4, 3, 2), mine)
        self.assertEqual(h["dropped"], [])


class WriteOnce(Coexist):
    """z=1 is never rewritten, nor deleted by a commit of the daemon's,
    whatever happens to its file in the tree."""

    def test_z1_file_removed_or_edited_in_the_tree_is_written_again(self):
        conn = self.connect("a")
        rec = conn.store(3, 3, 1, "architecture")
        head = self.sync(conn)["commit"]
        os.unlink(self.repo.decision_path(3, 3, 1))
        conn.call("git.reload")
        self.assertEqual(conn.get(3, 3, 1), rec)
        self.assertFileMatches(rec, WAIT)
        with open(self.repo.decision_path(3, 3, 1), "wb") as f:
            f.write(decision_file_bytes(dict(rec, content="rewritten")))
        conn.call("git.reload")
        self.assertEqual(conn.get(3, 3, 1), rec)
        self.assertFileMatches(rec, WAIT)
        self.assertEqual(self.sync(conn)["commit"], None)
        self.assertEqual(self.head(), head)
        self.assertIn("write-once (z=1)", self.daemon.stderr())
        # a commit of the user's that changes it is the user's to make
        with open(self.repo.decision_path(3, 3, 1), "wb") as f:
            f.write(decision_file_bytes(dict(rec, content="by the user")))
        self.git("commit", "-q", "-a", "-m", "the user's own change")
        self.assertTrue(wait_until(
            lambda: conn.get(3, 3, 1)["content"] == "by the user", WAIT))


class Driver(Coexist):
    """The layer-aware merge driver, between two clones that each run a
    daemon."""

    start_daemon = False

    def setUp(self):
        super().setUp()
        out = self.init_driver(self.repo.root)
        self.assertIn("merge.vmem.driver", out)
        self.git("add", ".gitattributes")
        self.git("commit", "-q", "-m", "vmem merge driver")
        self.clone_root = self.clone()
        self.a = self.daemon = self.daemon_at(self.repo.root, "vmemd")
        self.b = self.daemon_at(self.clone_root, "vmemd-clone")
        self.ca = self.connect("alice", daemon=self.a)
        self.cb = self.connect("bob", daemon=self.b)

    def diverge(self):
        """z=1 both sides (alice first), z=2 bob ahead by a version."""
        ca, cb = self.ca, self.cb
        ra = {"z1": ca.store(9, 1, 1, "A's architecture"),
              "z2": ca.store(7, 2, 2, "A v1")}
        time.sleep(0.01)
        rb = {"z1": cb.store(9, 1, 1, "B's architecture"),
              "z2": cb.store(7, 2, 2, "B v1")}
        rb["z2"] = cb.store(7, 2, 2, "B v2", overwrite=True)
        self.sync(ca)
        self.sync(cb)
        return ra, rb

    def check_driver_result(self, ra, rb):
        self.assertTrue(wait_until(
            lambda: self.ca.get(7, 2, 2) == rb["z2"], WAIT))
        self.assertEqual(self.ca.get(9, 1, 1), ra["z1"])
        self.assertEqual(self.ca.call("server.health")["conflicts"], [])
        recs = [r for r in conflict_records(self.repo.gitdir).values()
                if r["kind"] == "merge-driver"]
        lost = sorted(r["lost"]["content"] for r in recs)
        self.assertEqual(lost, ["A v1", "B's architecture"])
        for r in recs:
            self.assertEqual(r["kept"]["content"],
                             {"A v1": "B v2",
                              "B's architecture": "A's architecture"}
                             [r["lost"]["content"]])
        listing = self.vmem("conflicts").stdout
        self.assertIn("merge-driver", listing)
        self.assertNoStageMix()

    def test_registration_by_init_and_by_the_clone_daemon(self):
        cfg = self.git_at(self.clone_root, "config", "--get",
                          "merge.vmem.driver").stdout.decode()
        self.assertIn("merge-driver %O %A %B %P", cfg)
        self.assertIn(os.path.realpath(vt.VMEM), cfg)
        self.assertIn("first start in this clone", self.b.stderr())
        self.assertIn("never commits .gitattributes", self.b.stderr())
        # once only, and not again after a restart
        self.b.stop()
        self.b.start()
        self.assertEqual(self.b.stderr().count("first start in this clone: "
                                               "set merge.vmem.driver"), 1)
        self.assertEqual(self.init_driver(self.repo.root).strip(),
                         "the merge driver is registered in %s already"
                         % self.repo.root)

    def test_pull_merge(self):
        ra, rb = self.diverge()
        p = self.git_run("pull", "--no-rebase", "--no-edit",
                         self.clone_root)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.check_driver_result(ra, rb)

    def test_pull_rebase(self):
        ra, rb = self.diverge()
        p = self.git_run("-c", "rebase.autoStash=true", "pull", "--rebase",
                         self.clone_root)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.check_driver_result(ra, rb)

    def test_cherry_pick(self):
        ra, rb = self.diverge()
        self.git("fetch", "-q", self.clone_root,
                 "HEAD:refs/remotes/clone/main")
        picks = self.git("rev-list", "--reverse", "HEAD..clone/main").split()
        self.assertTrue(picks)
        for c in picks:
            p = self.git_run("cherry-pick", c)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.check_driver_result(ra, rb)

    def test_stash_pop(self):
        """The clone's versions, stashed by hand over ours: stash pop
        merges them with the driver."""
        ra, rb = self.diverge()
        for c in ((9, 1, 1), (7, 2, 2)):
            self.assertEqual(self.git_at(self.clone_root, "show",
                                         "HEAD:" + rel_path(*c)).returncode,
                             0)
        # the user stashes B's versions of the files over A's
        for c in ((9, 1, 1), (7, 2, 2)):
            with open(self.repo.decision_path(*c), "wb") as f:
                f.write(self.git_at(self.clone_root, "show",
                                    "HEAD:" + rel_path(*c)).stdout)
        self.git("stash", "-q")
        self.assertTrue(wait_until(
            lambda: self.ca.get(7, 2, 2) == ra["z2"], WAIT))
        self.ca.store(7, 2, 2, "A v2", overwrite=True)
        self.sync(self.ca)
        p = self.git_run("stash", "pop")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # the stash's (B's) z=2 v2 and our v2 tie on the version: the
        # later write wins (ours, stored after bob's)
        self.assertTrue(wait_until(
            lambda: self.ca.get(7, 2, 2)["content"] == "A v2", WAIT))
        self.assertEqual(self.ca.get(9, 1, 1), ra["z1"])
        self.assertEqual(self.ca.call("server.health")["conflicts"], [])

    def test_modify_delete_keeps_the_modification(self):
        ca = self.ca
        rec = ca.store(2, 4, 3, "kept")
        self.sync(ca)
        self.git_at(self.clone_root, "pull", "-q", "--ff-only")
        self.assertTrue(wait_until(lambda: self.cb.get(2, 4, 3), WAIT))
        self.assertTrue(self.cb.delete(2, 4, 3))
        self.sync(self.cb)
        modified = ca.store(2, 4, 3, "modified", overwrite=True)
        self.sync(ca)
        p = self.git_run("pull", "--no-rebase", "--no-edit",
                         self.clone_root)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        # vmemd applies the driver's rule git does not hand to drivers:
        # staged, reported, and taken once the merge is concluded
        self.wait_health(ca, lambda h: all(c["resolved_in_git"]
                                           for c in h["conflicts"])
                         and not [p for p, s in self.stages().items()
                                  if s != {0}], "resolved by the daemon")
        recs = [r for r in conflict_records(self.repo.gitdir).values()
                if r["kind"] == "merge-driver"]
        self.assertEqual([(r["kept"], r["lost"]) for r in recs],
                         [(modified, None)])
        self.assertEqual(ca.get(2, 4, 3), modified)
        self.git("commit", "-q", "--no-edit")
        self.wait_health(ca, lambda h: not h["conflicts"], "merge done")
        self.assertEqual(self.blob("HEAD", rel_path(2, 4, 3)),
                         decision_file_bytes(modified))
        self.assertEqual(rec["content"], "kept")

    def tearDown(self):
        if self.b.running():
            self.b.stop()
        super().tearDown()


class Yield(Coexist):
    """The working tree is git's while it runs an operation. Commits at
    the default pace (commit_delay_ms 1000)."""

    daemon_args = ()

    def writers(self, n, stop, acked, errors, xs=range(30, 60)):
        def run(i):
            conn = self.daemon.connect(agent_id="w%d" % i)
            rnd = random.Random(i)
            try:
                while not stop.is_set():
                    x, y, z = rnd.choice(xs), rnd.randint(1, 5), \
                        rnd.randint(2, 4)
                    try:
                        acked.append(conn.store(x, y, z, "w%d %f" % (
                            i, time.time()), overwrite=True))
                    except vt.RpcError as e:
                        if e.code != E_CONFLICT[0]:
                            errors.append(str(e))
                    time.sleep(0.002)
            finally:
                conn.close()
        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        return threads

    def test_rebase_with_autostash_while_writers_store(self):
        conn = self.connect("setup")
        branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.user_commit("f.txt", "base\n", "base")
        self.git("branch", "upstream")
        stop, acked, errors = threading.Event(), [], []
        refusals = []
        threads = self.writers(4, stop, acked, errors)
        try:
            for i in range(4):
                # upstream moves (in a worktree: no daemon there)
                wt = self.repo.path("up%d" % i)
                self.git("worktree", "add", "-q", wt, "upstream")
                with open(os.path.join(wt, "up.txt"), "w") as f:
                    f.write("upstream %d\n" % i)
                self.git_at(wt, "add", "up.txt")
                self.git_at(wt, "commit", "-q", "-m", "upstream %d" % i)
                self.git("worktree", "remove", wt)
                time.sleep(0.3)  # the daemon commits on our branch
                # git does not wait for index.lock, and a rebase checks
                # the tree before it writes the state the daemon yields
                # to: one that starts in the instant of a daemon commit
                # or file write is refused, as beside any other git
                # process, and the user runs it again (docs/operations.md §9,
                # "The window it cannot see"). A refusal must leave nothing
                # behind, and the rebase must go through when retried.
                for attempt in range(1, REBASE_ATTEMPTS + 1):
                    p = self.git_run("-c", "rebase.autoStash=true",
                                     "rebase", "upstream")
                    if p.returncode == 0:
                        break
                    refusals.append((p.stdout + p.stderr).decode(
                        errors="replace").strip())
                    diag("rebase %d refused (attempt %d): %s"
                         % (i, attempt, refusals[-1].splitlines()[-1:]))
                    state = os.path.join(self.repo.gitdir, "rebase-merge")
                    if os.path.exists(state):
                        # Refused after its autostash was made ("could
                        # not reset --hard"): nothing was reset; the
                        # user ends it as docs/operations.md says.
                        self.assertIn("could not reset --hard",
                                      refusals[-1])
                        self.assertEqual(os.listdir(state), ["autostash"])
                        self.git("rebase", "--quit")
                        self.assertFalse(os.path.exists(state))
                    self.assertFalse(os.path.exists(os.path.join(
                        self.repo.gitdir, "rebase-apply")))
                    time.sleep(0.2 * attempt)
                self.assertEqual(p.returncode, 0, "\n".join(refusals))
                self.assertEqual(self.git("symbolic-ref", "--short",
                                          "HEAD").strip(), branch)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])
        self.assertTrue(acked)
        self.sync(conn, timeout=60)
        latest = {}
        for rec in acked:
            c = tuple(rec["coordinate"].values())
            if c not in latest or rec["timestamp"] > latest[c]["timestamp"]:
                latest[c] = rec
        for c, rec in latest.items():
            self.assertEqual(conn.get(*c), rec)
            self.assertEqual(self.blob("HEAD", rel_path(*c)),
                             decision_file_bytes(rec))
        self.assertIn("up.txt", self.tree_files())
        diag("%d writes acknowledged during 4 rebases with autostash "
             "(%d refused and run again)" % (len(acked), len(refusals)))

    def test_files_wait_while_a_merge_is_in_progress(self):
        conn = self.connect("w")
        self.make_conflict()
        self.assertTrue(wait_until(
            lambda: conn.call("server.health")["files_wait_for_git"], WAIT))
        rec = conn.store(21, 1, 3, "while git merges")
        xp = conn.call("experience.store", {
            "context": "a merge", "action": "waited", "outcome": "ok"})
        shards = os.path.join(self.repo.root, ".vector-memory",
                              "experiences")
        time.sleep(0.5)
        self.assertIsNone(self.repo.read_decision_bytes(21, 1, 3))
        # The experience's shard waits too (nothing appended meanwhile).
        self.assertFalse(os.path.exists(shards))
        self.assertEqual(conn.get(21, 1, 3), rec)
        self.assertEqual(conn.call("experience.get", {"id": xp["id"]}), xp)
        self.assertEqual(conn.call("server.health")["files_wait_for_git"],
                         "merge in progress")
        self.git("merge", "--abort")
        self.assertFileMatches(rec, WAIT)
        self.assertTrue(wait_until(lambda: os.path.exists(shards), WAIT))
        self.assertIsNone(conn.call("server.health")["files_wait_for_git"])


    def test_files_moved_while_git_held_the_index_are_seen(self):
        # A git command that holds index.lock and leaves the index and
        # HEAD as they were (git clean, git restore, a git status) may
        # still create or remove decision files, as git writes them:
        # once it is done, the daemon looks where files moved (only
        # there: a git status beside a large memory costs what changed)
        # and serves what it found.
        conn = self.connect("w")
        conn.store(6, 1, 2, "removed by git")
        kept = conn.store(6, 2, 2, "kept")
        self.sync(conn)

        def git_writes():
            os.unlink(self.repo.decision_path(6, 1, 2))
            new = self.repo.decision_path(7, 3, 2)
            os.makedirs(os.path.dirname(new))
            with open(new, "wb") as f:
                f.write(self.decision_text(7, 3, 2, "created by git"))

        self.hold_index_lock(conn, git_writes)
        self.assertTrue(wait_until(
            lambda: not conn.exists(6, 1, 2), WAIT))
        self.assertEqual(conn.get(7, 3, 2)["content"], "created by git")
        self.assertEqual(conn.get(6, 2, 2), kept)
        self.assertIsNone(conn.call("server.health")["files_wait_for_git"])

    def hold_index_lock(self, conn, while_held=lambda: None):
        # As a git command holds it: the daemon leaves the tree, and once
        # the lock is gone it looks where files may have changed.
        lock = os.path.join(self.repo.gitdir, "index.lock")
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        try:
            self.assertTrue(wait_until(
                lambda: conn.call("server.health")["files_wait_for_git"],
                WAIT))
            while_held()
        finally:
            os.unlink(lock)
        self.assertTrue(wait_until(
            lambda: conn.call("server.health")["files_wait_for_git"] is None,
            WAIT))

    def test_a_file_written_in_place_while_git_held_the_index_is_seen(self):
        # A file rewritten in place (its inode and its directory's stamp
        # kept) while git held index.lock: the directory's stamp says
        # nothing moved, but inotify saw the write, so the look after the
        # lock lists that directory too.
        conn = self.connect("w")
        conn.store(6, 1, 2, "before")
        self.sync(conn)
        # x-006's stamp settles (vmdir.h: two seconds), and a first look
        # after a git command records it and watches the directory.
        time.sleep(2.5)
        self.hold_index_lock(conn)
        conn.store(8, 1, 2, "elsewhere")
        self.sync(conn)  # after the look: the writer waits for it
        path = self.repo.decision_path(6, 1, 2)
        ino = os.stat(path).st_ino
        dir_stamp = os.stat(os.path.dirname(path)).st_mtime_ns

        def rewrite():
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(self.decision_text(6, 1, 2, "written in place"))

        self.hold_index_lock(conn, rewrite)
        self.assertEqual(os.stat(path).st_ino, ino)
        self.assertEqual(os.stat(os.path.dirname(path)).st_mtime_ns,
                         dir_stamp)
        self.assertTrue(wait_until(
            lambda: conn.get(6, 1, 2)["content"] == "written in place",
            WAIT))

    def test_a_file_git_is_writing_is_not_quarantined(self):
        # While git has the tree, a look at the files (each change in the
        # git directory asks for one) moves nothing: git may be writing a
        # decision file, empty for a moment (the scripted user saw one
        # quarantined in the middle of a pull, and the merged z=1
        # decision overwritten by the daemon after). Once git is done, a
        # file that is still bad goes to quarantine as always.
        conn = self.connect("w")
        self.make_conflict()
        self.assertTrue(wait_until(
            lambda: conn.call("server.health")["files_wait_for_git"], WAIT))
        empty = self.repo.decision_path(9, 1, 2)
        os.makedirs(os.path.dirname(empty), exist_ok=True)
        open(empty, "w").close()
        for _ in range(3):  # changes in the git directory: probes
            self.git_run("update-index", "-q", "--refresh")
            time.sleep(0.3)
        self.assertTrue(os.path.exists(empty))
        self.assertEqual(conn.call("server.health")["quarantined"], [])
        self.git("merge", "--abort")
        h = self.wait_health(conn, lambda h: h["quarantined"],
                             "quarantined once git is done")
        self.assertEqual([q["path"] for q in h["quarantined"]],
                         [rel_path(9, 1, 2)])
        self.assertFalse(os.path.exists(empty))


# --------------------------------------------------------------------------
# The scripted user

# Rounds in all, a quarter per index format (each format is a test of its
# own, which meson runs as a suite of its own: git_user_FORMAT). A short
# run by default; .ci/run asks for 200 in its normal stage.
ROUNDS = int(os.environ.get("VMEM_ROUNDS") or "16")
# A user runs a refused rebase again; this many times at most.
REBASE_ATTEMPTS = 5
# git fsck --strict after every this many rounds (and the last).
STRICT_EVERY = 8
SEED = int(os.environ.get("VMEM_SEED") or random.SystemRandom().randrange(
    1 << 32))
USER_X = range(41, 46)   # coordinates only the scripted user writes
WRITER_X = range(1, 41)  # the writers' (writer i: x % 4 == i)


def blob_id(data):
    """git's object id of a blob with these bytes."""
    import hashlib
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Writers:
    """Four writers on one daemon, each on its own coordinates (x % 4),
    storing, overwriting and deleting until stopped; one more, slower, on
    a clone's daemon over the same coordinates (so that merges meet)."""

    def __init__(self, case, daemon, clone_daemon, rnd):
        self.case, self.stop = case, threading.Event()
        self.first_z1 = {}  # z=1 coordinate -> the first ack
        self.deleted = set()  # coordinates with an acknowledged delete
        self.clone_deleted = set()  # ... by the clone's writer
        # coordinate -> the content of a store in flight, or None for a
        # delete: a read may see it before its writer records the answer
        self.in_flight = {}
        # coordinate -> every acknowledged version in order (None: a
        # delete), so that a read is judged against what was acknowledged
        # from just before it on
        self.history = {}
        self.errors = []
        self.lock = threading.Lock()
        seeds = [rnd.randrange(1 << 30) for _ in range(5)]
        self.threads = [threading.Thread(target=self.run, args=(
            daemon, i, seeds[i], 0.01)) for i in range(4)]
        self.threads.append(threading.Thread(target=self.run, args=(
            clone_daemon, None, seeds[4], 0.05)))
        for t in self.threads:
            t.start()

    def run(self, daemon, i, seed, pause):
        rnd = random.Random(seed)
        conn = daemon.connect(agent_id="w%s" % ("B" if i is None else i))
        # the clone's writer meets ours on a few issues only
        xs = [x for x in WRITER_X if (x <= 6 if i is None else x % 4 == i)]
        try:
            while not self.stop.is_set():
                c = (rnd.choice(xs), rnd.randint(1, 5), rnd.randint(1, 4))
                delete = c[2] > 1 and rnd.random() < 0.15
                content = None if delete else "w%s %d" % (
                    "B" if i is None else i, rnd.randrange(10**9))
                if i is not None:
                    with self.lock:
                        self.in_flight[c] = content
                try:
                    if delete:
                        conn.delete(*c)
                        rec = None
                    else:
                        rec = conn.store(*c, content, overwrite=c[2] > 1)
                except vt.RpcError as e:
                    with self.lock:
                        self.in_flight.pop(c, None)
                    if e.code not in (E_CONFLICT[0], E_IMMUTABLE[0],
                                      -32003):
                        self.errors.append("%s: %s" % (c, e))
                    continue
                if i is None and rec is None:
                    with self.lock:
                        self.clone_deleted.add(c)
                if i is not None:
                    with self.lock:
                        self.in_flight.pop(c, None)
                        self.history.setdefault(c, []).append(rec)
                        if rec is None:
                            self.deleted.add(c)
                        elif c[2] == 1:
                            self.first_z1.setdefault(c, rec)
                time.sleep(pause * rnd.random() * 2)
        except (OSError, EOFError, TimeoutError) as e:
            if not self.stop.is_set():
                self.errors.append("writer %s: %r" % (i, e))
        finally:
            conn.close()

    def snapshot(self):
        with self.lock:
            return dict(self.first_z1), set(self.deleted)

    def deleted_in_the_clone(self):
        with self.lock:
            return set(self.clone_deleted)

    def marks(self):
        """Where each coordinate's history stands now."""
        with self.lock:
            return {c: len(h) for c, h in self.history.items()}

    def acknowledged(self, c, mark, served):
        """Is served at c, read after marks() gave mark, the version
        acknowledged last before it, one acknowledged since, or what a
        write in flight may have made (a read can see that write before
        its writer has the answer)?"""
        with self.lock:
            if served in self.history.get(c, [])[max(mark - 1, 0):]:
                return True
            if c not in self.in_flight:
                return False
            content = self.in_flight[c]
        if content is None:
            return served is None
        return served is not None and served["content"] == content

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class ScriptedUser(Coexist):
    """VMEM_ROUNDS rounds (a quarter per index format) of a user's git
    while writers store; the invariants are checked after every step."""

    start_daemon = False
    daemon_args = ("--commit-delay-ms", "500")
    figures = {"rounds": 0, "user operations checked": 0,
               "user commands retried": 0,
               "user commands failed after retries": 0,
               "acknowledged writes checked": 0,
               "conflicts resolved by the driver": 0,
               "conflicts resolved by hand": 0,
               "fsck objects made while it ran": 0}

    VARIANTS = {
        "plain": [],
        "split_index": [["config", "core.splitIndex", "true"],
                        ["update-index", "--split-index"]],
        "index_v4": [["config", "index.version", "4"],
                     ["update-index", "--index-version", "4"]],
        "untracked_cache": [["config", "core.untrackedCache", "true"],
                            ["update-index", "--untracked-cache"]],
    }

    # -- set-up
    def start(self, variant):
        self.rnd = random.Random("%d-%s" % (SEED, variant))
        diag("VMEM_SEED=%d VMEM_ROUNDS=%d (%s: %d rounds)"
             % (SEED, ROUNDS, variant, max(1, ROUNDS // 4)))
        self.init_driver(self.repo.root)
        with open(os.path.join(self.repo.root, "user.txt"), "w") as f:
            f.write("0\n")
        with open(os.path.join(self.repo.root, "shared.txt"), "w") as f:
            f.write("base\n")
        self.git("add", ".gitattributes", "user.txt", "shared.txt")
        self.git("commit", "-q", "-m", "user files and the merge driver")
        for args in self.VARIANTS[variant]:
            self.git(*args)
        self.branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.git("branch", "upstream")
        self.clone_root = self.clone()
        self.a = self.daemon = self.daemon_at(self.repo.root, "vmemd")
        self.b = self.daemon_at(self.clone_root, "vmemd-clone")
        self.user = self.connect("user", daemon=self.a)
        self.w = Writers(self, self.a, self.b, self.rnd)
        self.addCleanup(self.w.finish)
        self.violations = []
        self.checked_commits = set()
        self.serial = 0
        self.by_hand = 0

    def violation(self, what, detail):
        what = "%s (round %d, %s)" % (what, self.serial,
                                      getattr(self, "current_op", "-"))
        self.violations.append("%s: %s" % (what, detail))
        diag("VIOLATION %s: %s" % (what, str(detail)[:400]))
        keep = os.environ.get("VMEM_VIOLATION_DIR")
        if keep:  # both daemons' whole logs, for a diagnosis
            os.makedirs(keep, exist_ok=True)
            for d in (self.a, self.b):
                with open(os.path.join(keep, "%d-%d-%s" % (
                        SEED, self.serial, os.path.basename(
                            d.stderr_path))), "w") as f:
                    f.write(d.stderr())
        for args, rc, out in getattr(self, "round_log", [])[-8:]:
            diag("  git %s -> %d: %s" % (" ".join(args)[:120], rc,
                                         out[-300:]))

    def git_at(self, root, *args, check=True):
        p = super().git_at(root, *args, check=check)
        if hasattr(self, "round_log"):
            self.round_log.append((args, p.returncode, (
                p.stdout + p.stderr).decode(errors="replace")))
        return p

    def run_rounds(self, variant):
        self.start(variant)
        ops = [("add", 3), ("commit", 3), ("commit_a", 2), ("stash_pop", 2),
               ("merge_conflict", 2), ("pull_merge", 2), ("pull_rebase", 2),
               ("rebase_autostash", 2), ("cherry_pick", 1), ("reset", 2),
               ("checkout", 1), ("worktree", 1), ("hand_conflict", 1)]
        names = [n for n, w in ops for _ in range(w)]
        rounds = max(1, ROUNDS // 4)
        for rnd_i in range(rounds):
            self.last_round = rnd_i == rounds - 1
            op = self.current_op = self.rnd.choice(names)
            self.serial += 1
            self.round_log = []
            staged = self.staged()
            t0 = time.monotonic()
            getattr(self, "op_" + op)()
            t1 = time.monotonic()
            if self.git_run("symbolic-ref", "-q", "HEAD").returncode:
                diag("HEAD left detached (round %d): %s" % (
                    self.serial, self.git("reflog", "-4").splitlines()))
                self.abort_operation()
            self.check(op, staged)
            if os.environ.get("VMEM_ROUND_TIMES"):
                diag("round %d %s: %.2f s, checks %.2f s" % (
                    self.serial, op, t1 - t0, time.monotonic() - t1))
            self.figures["rounds"] += 1
        self.w.finish()
        self.assertEqual(self.w.errors, [])
        self.figures["conflicts resolved by the driver"] += sum(
            1 for g in (self.repo.gitdir,
                        os.path.join(self.clone_root, ".git"))
            for r in conflict_records(g).values()
            if r["kind"] == "merge-driver")
        self.figures["conflicts resolved by hand"] += self.by_hand
        diag("figures so far: %s" % json.dumps(self.figures))
        self.assertEqual(self.violations, [], "%d invariant violations "
                         "(seed %d)" % (len(self.violations), SEED))

    # -- the user
    def write(self, path, text, root=None):
        with open(os.path.join(root or self.repo.root, path), "w") as f:
            f.write(text)

    # What makes a user try again: another git process (the daemon's
    # commit) held a lock, or a decision file an agent wrote a moment ago
    # is in the way (committed by the next git.sync).
    RETRY_RE = re.compile(rb"index\.lock|would be overwritten|cannot lock "
                          rb"ref|You have unstaged changes")

    def must(self, *args, root=None, retries=3):
        for attempt in range(retries + 1):
            p = self.git_at(root or self.repo.root, *args, check=False)
            if not p.returncode:
                return p
            out = p.stdout + p.stderr
            if attempt == retries or not self.RETRY_RE.search(out):
                break
            self.figures["user commands retried"] += 1
            self.abort_operation()
            self.sync_until_committed()
        # Not one of the invariants: a git command that gives up (as it
        # would beside another git process) loses nothing; counted.
        self.figures["user commands failed after retries"] += 1
        diag("user command failed (round %d, %s): git %s: %s" % (
            self.serial, self.current_op, " ".join(args),
            out.decode(errors="replace")[-600:]))
        self.abort_operation()
        return p

    def abort_operation(self):
        """Leave what a failed command left (a user would)."""
        g = self.repo.gitdir
        if os.path.isdir(os.path.join(g, "rebase-merge")) or \
                os.path.isdir(os.path.join(g, "rebase-apply")):
            self.git_at(self.repo.root, "rebase", "--abort", check=False)
            self.git_at(self.repo.root, "rebase", "--quit", check=False)
        if os.path.exists(os.path.join(g, "MERGE_HEAD")):
            self.git_at(self.repo.root, "merge", "--abort", check=False)
        if os.path.exists(os.path.join(g, "CHERRY_PICK_HEAD")):
            self.git_at(self.repo.root, "cherry-pick", "--abort",
                        check=False)
        if self.git_at(self.repo.root, "symbolic-ref", "-q", "HEAD",
                       check=False).returncode:
            self.git_at(self.repo.root, "checkout", "-q", self.branch,
                        check=False)

    def sync_until_committed(self):
        """git.sync until it commits (it is refused while deferred)."""
        if wait_until(self.sync_quiet, WAIT, 0.1):
            return True
        diag("commits stay deferred (round %d): %s" % (
            self.serial, self.user.call("server.health")[
                "commit_deferred"]))
        return False

    def op_add(self):
        self.write("user-%d.txt" % self.serial, "added %d\n" % self.serial)
        self.must("add", "user-%d.txt" % self.serial)

    def op_commit(self):
        self.op_add()
        self.must("commit", "-q", "-m", "user commit %d" % self.serial)

    def op_commit_a(self):
        self.write("user.txt", "%d\n" % self.serial)
        self.must("commit", "-q", "-a", "-m", "commit -a %d" % self.serial)

    def op_stash_pop(self):
        self.write("user.txt", "stashed %d\n" % self.serial)
        self.must("stash", "push", "-q", "--", "user.txt")
        self.must("stash", "pop", "-q")

    def op_reset(self):
        self.write("user.txt", "staged then unstaged %d\n" % self.serial)
        self.must("add", "user.txt")
        self.must("reset", "-q", "--", "user.txt")

    def worktree_commit(self, branch, start, edit):
        wt = self.repo.path("wt-%d" % self.serial)
        self.must("worktree", "add", "-q", "-b", branch, wt, start)
        edit(wt)
        self.must("add", "-A", root=wt)
        self.must("commit", "-q", "-m", "%s %d" % (branch, self.serial),
                  root=wt)
        self.must("worktree", "remove", "--force", wt)

    def conclude_merge(self):
        """Resolve what a merge left to the user: shared.txt by hand,
        decisions in conflict with vmem resolve."""
        unmerged = sorted(p for p, s in self.stages().items() if s != {0})
        for path in unmerged:
            if path == "shared.txt":
                self.write("shared.txt", "resolved %d\n" % self.serial)
                self.must("add", "shared.txt")
        # decisions: wait for the daemon to see them, then resolve
        for path in unmerged:
            m = re.match(r"\.vector-memory/x-(\d+)/y-(\d)-z-(\d)\.json$",
                         path)
            if m:
                c = tuple(int(v) for v in m.groups())
                if not wait_until(lambda: any(
                        k["path"] == path for k in self.user.call(
                            "server.health")["conflicts"]), WAIT, 0.05):
                    self.violation("conflict not seen", path)
                for attempt in range(3):  # a user tries again
                    p = self.vmem("resolve", *map(str, c), "--ours")
                    if "ConcurrencyError" not in p.stderr:
                        break
                    self.figures["user commands retried"] += 1
                if p.returncode:
                    # git's rename detection may pair decision files of
                    # two coordinates: keep what the daemon acknowledged
                    diag("vmem resolve --ours: %s" % p.stderr.strip())
                    p = self.vmem("resolve", *map(str, c),
                                  "--keep-acknowledged")
                if p.returncode:
                    self.violation("vmem resolve failed", p.stderr)
                self.by_hand += 1
        if os.path.exists(os.path.join(self.repo.gitdir, "MERGE_HEAD")):
            self.must("commit", "-q", "--no-edit")

    def op_merge_conflict(self):
        """A side branch (made in a worktree) changes shared.txt and a
        decision of the user's; the user's branch does too."""
        c = (self.rnd.choice(USER_X), self.rnd.randint(1, 5),
             self.rnd.randint(2, 4))
        self.user.store(*c, "before the side %d" % self.serial,
                        overwrite=True)
        if not self.sync_until_committed():
            return
        side = "side-%d" % self.serial

        def edit(wt):
            self.write("shared.txt", "side %d\n" % self.serial, wt)
            path = os.path.join(wt, rel_path(*c))
            with open(path) as f:
                rec = json.load(f)
            rec.update(content="the side's %d" % self.serial,
                       version=rec["version"] + 5)
            with open(path, "wb") as f:
                f.write(decision_file_bytes(rec))
        self.worktree_commit(side, "HEAD", edit)
        self.write("shared.txt", "mine %d\n" % self.serial)
        self.must("commit", "-q", "-a", "-m", "mine %d" % self.serial)
        self.user.store(*c, "mine %d" % self.serial, overwrite=True)
        self.sync_quiet()
        self.git_at(self.repo.root, "-c", "merge.autoStash=true", "merge",
                    "--no-edit", side, check=False)
        self.conclude_merge()

    def op_hand_conflict(self):
        """The side branch leaves a decision the driver cannot read: the
        conflict is the user's, resolved with vmem resolve."""
        c = (self.rnd.choice(USER_X), self.rnd.randint(1, 5),
             self.rnd.randint(2, 4))
        self.user.store(*c, "base %d" % self.serial, overwrite=True)
        if not self.sync_until_committed():
            return

        def edit(wt):
            with open(os.path.join(wt, rel_path(*c)), "w") as f:
                f.write("not a decision\n")
        self.worktree_commit("hand-%d" % self.serial, "HEAD", edit)
        self.user.store(*c, "ours %d" % self.serial, overwrite=True)
        self.sync_quiet()
        p = self.git_at(self.repo.root, "-c", "merge.autoStash=true",
                        "merge", "--no-edit", "hand-%d" % self.serial,
                        check=False)
        if p.returncode == 0:
            self.violation("the driver took a file that is no decision",
                           rel_path(*c))
        elif not os.path.exists(os.path.join(self.repo.gitdir,
                                             "MERGE_HEAD")):
            # the merge did not start (an agent's file in the way)
            self.figures["user commands failed after retries"] += 1
            diag("merge of hand-%d did not start: %s" % (
                self.serial, p.stderr.decode(errors="replace")[-300:]))
        self.conclude_merge()

    def op_pull_merge(self):
        self.sync_until_committed()
        p = self.git_at(self.repo.root, "-c", "merge.autoStash=true", "pull",
                        "-q", "--no-rebase", "--no-edit", self.clone_root,
                        check=False)
        if p.returncode and not os.path.exists(
                os.path.join(self.repo.gitdir, "MERGE_HEAD")):
            self.must("-c", "merge.autoStash=true", "pull", "-q",
                      "--no-rebase", "--no-edit", self.clone_root)
        self.conclude_merge()

    def op_pull_rebase(self):
        self.sync_until_committed()
        self.must("-c", "rebase.autoStash=true", "pull", "-q", "--rebase",
                  self.clone_root)

    def op_rebase_autostash(self):
        self.worktree_commit("up-%d" % self.serial, "upstream",
                             lambda wt: self.write(
                                 "up.txt", "%d\n" % self.serial, wt))
        self.must("branch", "-f", "upstream", "up-%d" % self.serial)
        self.sync_until_committed()
        self.must("-c", "rebase.autoStash=true", "rebase", "-q",
                  "upstream")

    def op_cherry_pick(self):
        self.must("fetch", "-q", self.clone_root,
                  "+HEAD:refs/remotes/clone/main")
        picks = self.git("rev-list", "--reverse", "--no-merges",
                         "HEAD..clone/main").split()
        if not picks:
            return
        self.sync_until_committed()
        self.must("cherry-pick", "--allow-empty", "--keep-redundant-commits",
                  picks[0])

    def op_checkout(self):
        """A file of the user's restored, and a new branch to go on
        with (the daemon commits there from now on)."""
        self.write("user.txt", "scratch %d\n" % self.serial)
        self.must("checkout", "-q", "--", "user.txt")
        self.branch = "topic-%d" % self.serial
        self.must("checkout", "-q", "-b", self.branch)

    def op_worktree(self):
        self.worktree_commit("wt-%d" % self.serial, "HEAD",
                             lambda wt: self.write(
                                 "wt-%d.txt" % self.serial, "x\n", wt))
        self.git_at(self.repo.root, "-c", "merge.autoStash=true", "merge",
                    "-q", "--no-edit", "wt-%d" % self.serial, check=False)
        self.conclude_merge()

    # -- the checks
    def staged(self):
        """The user's staged changes (outside .vector-memory)."""
        return self.git("diff", "--cached", "--name-status", "--", ".",
                        ":(exclude).vector-memory")

    def sync_quiet(self):
        try:
            self.user.call("git.sync", {}, timeout=60)
            return True
        except vt.RpcError:
            return False

    def check(self, op, staged_before):
        # 1. the daemon's commits keep the user's staged changes
        staged = self.staged()
        synced = self.sync_quiet()
        if self.staged() != staged:
            self.violation("staged change lost after " + op,
                           (staged, self.staged()))
        self.figures["user operations checked"] += 1
        # 2. no conflict left behind, and git's index is whole
        if not wait_until(lambda: not self.user.call("server.health")[
                "conflicts"], WAIT, 0.05):
            self.violation("conflicts stay after " + op,
                           self.user.call("server.health")["conflicts"])
            diag([ln for ln in self.a.stderr().splitlines()
                  if "connection of" not in ln][-25:])
        mixed = {p: s for p, s in self.stages().items()
                 if 0 in s and len(s) > 1}
        if mixed:
            self.violation("stage 0 next to stages 1-3", mixed)
        # (git fsck reads every object each time: --strict's checks of
        # their contents every STRICT_EVERY rounds and after the last,
        # connectivity and the index every round)
        strict = self.serial % STRICT_EVERY == 0 or self.last_round
        bad = self.fsck_problems(strict)
        if bad:
            self.violation("git fsck%s" % (" --strict" if strict else ""),
                           bad)
        # 3. user commits delete only decisions someone deleted
        first_z1, deleted = self.w.snapshot()
        clone_deleted = self.w.deleted_in_the_clone()
        # who made each commit: the committer (a rebase re-commits the
        # daemon's commits as the user); its author says whose change a
        # rebase replayed
        for line in self.git("log", "--format=%H%x09%cn%x09%an",
                             "HEAD").splitlines():
            cid, author, original = line.split("\t", 2)
            if cid in self.checked_commits:
                continue
            self.checked_commits.add(cid)
            out = self.git("diff-tree", "-r", "--no-commit-id",
                           "--name-status", "-m", "--first-parent", cid,
                           "--", ".vector-memory")
            for st_path in out.splitlines():
                st, path = st_path.split("\t", 1)
                m = re.match(r"\.vector-memory/x-(\d+)/y-(\d)-z-(\d)",
                             path)
                c = m and tuple(int(v) for v in m.groups())
                # (a rebase without --rebase-merges replays the commits a
                # merge brought from the clone one by one, the clone
                # daemon's deletions among them: those are not the user's)
                replayed_clone_delete = original != vt.USER[0] and \
                    c in clone_deleted
                if author == vt.USER[0] and st == "D" and c and \
                        c not in deleted and c[0] not in USER_X and \
                        self.user.get(*c) is not None and \
                        not replayed_clone_delete and \
                        not self.deleted_by_the_other_side(cid, path):
                    self.violation("a user commit deletes a decision",
                                   (op, cid, path))
                if author == "vmemd" and c and c[2] == 1 and st in "MD":
                    self.violation("z=1 rewritten by a daemon commit",
                                   (op, cid, st, path))
        # 4. acknowledged writes are served, or findable (one read of
        # every decision, judged against what was acknowledged by then)
        marks = self.w.marks()
        served_all = {(r["coordinate"]["x"], r["coordinate"]["y"],
                       r["coordinate"]["z"]): r
                      for r in self.user.call("decision.query_range", {},
                                              timeout=60)}
        if synced:
            reach = kept = None
            for c, mark in marks.items():
                self.figures["acknowledged writes checked"] += 1
                served = served_all.get(c)
                if self.w.acknowledged(c, mark, served):
                    continue
                rec = self.w.history[c][mark - 1]
                if rec is None:
                    continue  # deleted, and brought back by a merge
                if kept is None:
                    kept = {json.dumps(r[k], sort_keys=True)
                            for r in conflict_records(
                                self.repo.gitdir).values()
                            for k in ("kept", "lost") if r[k]}
                if json.dumps(rec, sort_keys=True) in kept:
                    continue
                if reach is None:
                    reach = set(ln.split(" ", 1)[0] for ln in self.git(
                        "rev-list", "--objects", "--all", "--reflog",
                        "--", ".vector-memory").splitlines())
                if blob_id(decision_file_bytes(rec)) not in reach:
                    self.violation("an acknowledged decision is lost",
                                   (op, c, rec, self.user.get(*c)))
                    diag(self.git("log", "--all", "--format=%h %an %s",
                                  "-4", "--", rel_path(*c)),
                         [ln for ln in self.a.stderr().splitlines()
                          if "connection of" not in ln][-25:])
        # 5. z=1 stays what it was first, but for recorded conflicts
        for c, rec in first_z1.items():
            now = served_all.get(c)
            if now is not None and now != rec and not any(
                    r["lost"] == rec for r in conflict_records(
                        self.repo.gitdir).values()):
                self.violation("z=1 rewritten", (op, c, rec, now))
        # 6. no lock left behind
        locks = self.locks()
        if locks:
            time.sleep(2 * vt.TIMEOUT_SCALE)
            stray = locks & self.locks()
            if stray:
                self.violation("stray lock", sorted(stray))

    def deleted_by_the_other_side(self, cid, path):
        """Is cid a merge whose other side deleted path (the clone's
        writer deletes too), so that the merge carries that deletion?"""
        parents = self.git("rev-list", "--parents", "-n", "1",
                           cid).split()[1:]
        if len(parents) < 2:
            return False
        base = self.git_run("merge-base", parents[0], parents[1])
        if base.returncode:
            return False
        base = base.stdout.decode().strip()

        def has(rev):
            return not self.git_run("cat-file", "-e", "%s:%s" % (
                rev, path)).returncode
        return has(base) and not has(parents[1])

    # What git fsck says of a reachable object it did not find: it lists
    # the objects first and reads the refs and reflogs after, so a commit
    # made meanwhile (the daemon's, with writers storing) is "missing"
    # there though it is whole.
    FSCK_MISSING_RE = re.compile(
        r"^(?:missing \w+ |error: \S+: invalid reflog entry "
        r"|error: \S+: invalid sha1 pointer )([0-9a-f]{40})$")

    def fsck_problems(self, strict):
        """git fsck's complaints (--strict, or --connectivity-only) but
        those of a commit made while it ran (each named object is looked
        up again: one that exists now was made meanwhile); "" when it is
        clean."""
        p = self.git_run("fsck", "--strict" if strict else
                         "--connectivity-only", "--no-progress")
        if not p.returncode:
            return ""
        out = (p.stdout + p.stderr).decode(errors="replace")
        problems, made_meanwhile = [], 0
        for ln in out.splitlines():
            if not ln or ln.startswith(("dangling ", "notice: ")):
                continue
            m = self.FSCK_MISSING_RE.match(ln)
            if m and not self.git_run("cat-file", "-e",
                                      m.group(1)).returncode:
                made_meanwhile += 1
                continue
            problems.append(ln)
        self.figures["fsck objects made while it ran"] += made_meanwhile
        if not problems and made_meanwhile:
            return ""
        return "exit %d: %s" % (p.returncode,
                                "\n".join(problems) or "(no message)")

    def locks(self):
        found = set()
        for d, _, files in os.walk(self.repo.gitdir):
            for f in files:
                if f.endswith(".lock"):
                    st = os.stat(os.path.join(d, f))
                    found.add((os.path.join(d, f), st.st_ino, st.st_mtime))
        return found

    def tearDown(self):
        if hasattr(self, "w"):  # (not when skipped before start)
            self.w.finish()
            if self.b.running():
                self.b.stop()
        super().tearDown()

    def test_plain_index(self):
        self.run_rounds("plain")

    def test_split_index(self):
        self.run_rounds("split_index")

    def test_index_v4(self):
        self.run_rounds("index_v4")

    def test_untracked_cache(self):
        self.run_rounds("untracked_cache")


if __name__ == "__main__":
    vt.main()

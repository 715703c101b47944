#!/usr/bin/env python3
"""git_coexistence: vmemd sharing a working tree with its user's git.

Regression cases of issue 12 (conflicts as a state, the layer-aware merge
driver, the tree yielded to git during its operations), each on real
repositories, real daemons and the git program; then a scripted user who
runs VMEM_ROUNDS (default 200) seeded rounds of git commands (add, commit,
commit -a, stash/pop, merges with conflicts, pulls from a second clone
with its own daemon, rebase with autostash, cherry-pick, reset, checkout,
worktree) over a plain index, a split index, index v4 and the untracked
cache, while four writers store, and checks the invariants after every
step. VMEM_SEED replays a run (the seed is printed). Every test ends with
git fsck --strict."""

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
        subprocess.run(["git", "clone", "-q", self.repo.root, path],
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
        h = self.wait_health(conn, lambda h: not h["conflicts"], "resolved")
        self.assertEqual(conn.get(5, 2, 2), by_hand)
        self.assertEqual([d["version"] for d in h["dropped"]],
                         [mine["version"]])
        res = self.sync(conn)
        self.assertEqual(res["coordinates"], [coord(6, 1, 1)])
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
        h = self.wait_health(conn, lambda h: not h["conflicts"]
                             and h["dropped"], "resolved")
        self.assertEqual(conn.get(6, 2, 2), edited)
        self.assertEqual(h["dropped"][0]["version"], v2["version"])
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
                p = self.git_run("-c", "rebase.autoStash=true", "rebase",
                                 "upstream")
                if p.returncode:
                    diag(self.git("status", "--short").splitlines()[:10],
                         self.git("reflog", "-5").splitlines())
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
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
        diag("%d writes acknowledged during 4 rebases with autostash"
             % len(acked))

    def test_files_wait_while_a_merge_is_in_progress(self):
        conn = self.connect("w")
        self.user_commit("shared.txt", "base\n", "base")
        branch = self.git("symbolic-ref", "--short", "HEAD").strip()
        self.git("checkout", "-q", "-b", "other")
        self.user_commit("shared.txt", "other\n", "other side")
        self.git("checkout", "-q", branch)
        self.user_commit("shared.txt", "mine\n", "my side")
        p = self.git_run("merge", "other")
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue(wait_until(
            lambda: conn.call("server.health")["files_wait_for_git"], WAIT))
        rec = conn.store(21, 1, 3, "while git merges")
        time.sleep(0.5)
        self.assertIsNone(self.repo.read_decision_bytes(21, 1, 3))
        self.assertEqual(conn.get(21, 1, 3), rec)
        self.assertEqual(conn.call("server.health")["files_wait_for_git"],
                         "merge in progress")
        self.git("merge", "--abort")
        self.assertFileMatches(rec, WAIT)
        self.assertIsNone(conn.call("server.health")["files_wait_for_git"])


if __name__ == "__main__":
    vt.main()

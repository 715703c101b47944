#!/usr/bin/env python3
"""Starts from the index's snapshot (<gitdir>/vmem/snapshot): a graceful
stop saves every decision with its file's stamp, the next start takes a
decision from it only when its file is still the one it was made from,
and reads every other file. What changed while the daemon was down (an
edit, even of the same size with its mtime put back, a new file, a removed
one, a symlink in place of a file, a checkout to another branch) is what
the restarted daemon serves; a damaged snapshot is ignored, logged, and
every file read; one a crash left behind is still checked file by file.

The snapshot leaves out files changed less than a second before the stop
(a change within the same clock tick could leave a stamp as it was), so
these cases let a second pass after their writes before they stop the
daemon: a precondition of the case, not a measurement.
"""

import os
import re
import shutil
import time

import vmemtest as vt

SETTLE = 1.2  # past the snapshot's one-second window for racy entries


class Startup(vt.VmemTestCase):
    def snapshot_path(self):
        return os.path.join(self.repo.gitdir, "vmem", "snapshot")

    def last_run_log(self, d=None):
        return (d or self.daemon).stderr().rsplit("--- run ", 1)[-1]

    def taken_and_read(self, d=None):
        """(decisions taken from the snapshot, files read) of the last
        start, or None when it used no snapshot."""
        m = re.search(r"index snapshot: (\d+) decisions taken from it, "
                      r"(\d+) files read", self.last_run_log(d))
        return (int(m.group(1)), int(m.group(2))) if m else None

    def fill(self, conn, n=12):
        recs = {}
        for i in range(n):
            x, y, z = 1 + i // 4, 1 + i % 4 // 2, 2 + i % 2
            recs[(x, y, z)] = conn.store(x, y, z, "decision number %d of "
                                         "the snapshot" % i, overwrite=True)
        for rec in recs.values():
            self.assertFileMatches(rec)
        return recs

    def stop_settled(self):
        time.sleep(SETTLE)
        self.daemon.stop()
        self.assertTrue(os.path.exists(self.snapshot_path()))
        self.assertRegex(self.daemon.stderr(),
                         r"index snapshot: \d+ decisions saved")

    def assertServes(self, conn, recs):
        for (x, y, z), rec in recs.items():
            if rec is None:
                self.assertIsNone(conn.get(x, y, z), (x, y, z))
            else:
                self.assertEqual(conn.get(x, y, z), rec)

    def write_file(self, x, y, z, data):
        path = self.repo.decision_path(x, y, z)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def test_unchanged_files_come_from_the_snapshot(self):
        conn = self.connect("snap")
        recs = self.fill(conn)
        conn.close()
        self.stop_settled()
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (len(recs), 0))
        conn = self.connect("snap")
        self.assertServes(conn, recs)
        # The search index holds them too.
        hits = conn.call("decision.search", {"terms": ["snapshot"],
                                             "limit": 100})
        self.assertEqual(sorted(tuple(h["coordinate"].values())
                                for h in hits), sorted(recs))
        # A stop after a start that changed nothing keeps it as it is...
        conn.close()
        self.stop_settled()
        self.assertRegex(self.last_run_log(), r"index snapshot: kept \(%d "
                         r"decisions; the next start reads at most 0 files"
                         % len(recs))
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (len(recs), 0))
        # ... and one after a write saves it again, the write included.
        conn = self.connect("snap")
        recs[(9, 5, 4)] = conn.store(9, 5, 4, "one more")
        self.assertFileMatches(recs[(9, 5, 4)])
        conn.close()
        self.stop_settled()
        self.assertRegex(self.last_run_log(), r"index snapshot: %d "
                         r"decisions saved" % len(recs))
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (len(recs), 0))
        self.assertServes(self.connect("snap"), recs)

    def test_stop_keeps_a_snapshot_few_changes_behind(self):
        conn = self.connect("snap")
        items = [{"coordinate": vt.coord(1 + i // 8, 1 + i // 2 % 4,
                                         2 + i % 2),
                  "content": "bulk decision %d" % i} for i in range(128)]
        conn.call("decision.store_many", {"items": items})
        conn.call("server.flush")  # every file written (and committed)
        conn.close()
        self.stop_settled()
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (128, 0))
        conn = self.connect("snap")
        changed = conn.store(3, 2, 2, "changed after the snapshot",
                             overwrite=True)
        self.assertFileMatches(changed)
        conn.close()
        self.daemon.stop()
        # One change in 128: the snapshot stays, one file behind...
        self.assertRegex(self.last_run_log(), r"index snapshot: kept \(128 "
                         r"decisions; the next start reads at most \d+ "
                         r"files")
        # ... and the next start reads that file.
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (127, 1))
        conn = self.connect("snap")
        self.assertEqual(conn.get(3, 2, 2), changed)
        self.assertEqual(conn.get(1, 1, 2)["content"], "bulk decision 0")

    def test_same_size_edit_with_mtime_put_back_is_seen(self):
        conn = self.connect("snap")
        recs = self.fill(conn)
        conn.close()
        self.stop_settled()
        rec = dict(recs[(1, 1, 2)])
        path = self.repo.decision_path(1, 1, 2)
        st = os.stat(path)
        rec["content"] = rec["content"].replace("decision", "DECISION")
        data = vt.decision_file_bytes(rec)
        self.assertEqual(len(data), st.st_size)
        with open(path, "r+b") as f:  # in place: the inode stays
            f.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        self.assertEqual(os.stat(path).st_ino, st.st_ino)
        self.assertEqual(os.stat(path).st_mtime_ns, st.st_mtime_ns)
        recs[(1, 1, 2)] = rec
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (len(recs) - 1, 1))
        self.assertServes(self.connect("snap"), recs)

    def test_files_added_and_removed_while_down(self):
        conn = self.connect("snap")
        recs = self.fill(conn)
        conn.close()
        self.stop_settled()
        os.unlink(self.repo.decision_path(1, 1, 2))
        recs[(1, 1, 2)] = None
        added = dict(recs[(1, 1, 3)])
        added["coordinate"] = vt.coord(40, 5, 4)
        added["content"] = "added by hand while the daemon was down"
        self.write_file(40, 5, 4, vt.decision_file_bytes(added))
        recs[(40, 5, 4)] = added
        self.daemon.start()
        self.assertEqual(self.taken_and_read(), (len(recs) - 2, 1))
        self.assertServes(self.connect("snap"), recs)

    def test_symlink_in_place_of_a_file_is_quarantined(self):
        conn = self.connect("snap")
        recs = self.fill(conn)
        conn.close()
        self.stop_settled()
        path = self.repo.decision_path(2, 1, 2)
        outside = self.repo.path("outside.json")
        os.rename(path, outside)
        os.symlink(outside, path)
        recs[(2, 1, 2)] = None
        self.daemon.start()
        self.assertServes(self.connect("snap"), recs)
        self.assertFalse(os.path.lexists(path))
        self.assertRegex(self.last_run_log(), r"quarantined .*x-002")

    def test_corrupt_snapshot_is_ignored_and_every_file_read(self):
        for damage in ("flip", "truncate", "garbage"):
            with self.subTest(damage=damage):
                self.restart_with_damaged_snapshot(damage)

    def restart_with_damaged_snapshot(self, damage):
        if not self.daemon.running():
            self.daemon.start()
        conn = self.connect("snap")
        recs = self.fill(conn)
        conn.close()
        self.stop_settled()
        path = self.snapshot_path()
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            if damage == "flip":
                data[len(data) // 2] ^= 0x40
            elif damage == "truncate":
                data = data[:len(data) - 7]
            else:
                data = bytearray(b"not a snapshot at all\n" * 3)
            f.seek(0)
            f.truncate()
            f.write(data)
        # An edit the snapshot cannot know of: only a full read sees it.
        rec = dict(recs[(3, 1, 2)])
        rec["content"] = "edited while the snapshot was damaged"
        self.write_file(3, 1, 2, vt.decision_file_bytes(rec))
        recs[(3, 1, 2)] = rec
        self.daemon.start()
        log = self.last_run_log()
        self.assertRegex(log, r"ignoring the index snapshot")
        self.assertIsNone(self.taken_and_read())
        self.assertServes(self.connect("snap"), recs)
        self.daemon.stop()

    def test_snapshot_left_by_a_crash_is_checked_file_by_file(self):
        conn = self.connect("snap")
        recs = self.fill(conn)
        conn.close()
        self.stop_settled()
        self.daemon.start()
        conn = self.connect("snap")
        # Written after the snapshot: through the log, and some through
        # their files too, before the crash.
        recs[(1, 1, 2)] = conn.store(1, 1, 2, "newer than the snapshot",
                                     overwrite=True)
        self.assertFileMatches(recs[(1, 1, 2)])
        conn.delete(2, 1, 2)
        recs[(2, 1, 2)] = None
        recs[(3, 1, 2)] = conn.store(3, 1, 2, "only in the log at the "
                                     "crash, maybe", overwrite=True)
        self.daemon.kill()
        self.daemon.start()
        self.assertServes(self.connect("snap"), recs)


class StartupGit(vt.GitCase):
    def slow_git_env(self):
        """The daemon's environment with a git whose status never ends
        (an exec'd sleep: killing it leaves nothing behind)."""
        bindir = self.repo.path("slowbin")
        os.makedirs(bindir, exist_ok=True)
        real = shutil.which("git")
        script = os.path.join(bindir, "git")
        with open(script, "w") as f:
            f.write('#!/bin/sh\n'
                    'for a in "$@"; do\n'
                    '  [ "$a" = status ] && exec sleep 3600\n'
                    'done\n'
                    'exec %s "$@"\n' % real)
        os.chmod(script, 0o755)
        env = vt.clean_env(self.repo.tmp)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        return env

    def test_stop_gives_up_the_start_up_scan(self):
        conn = self.connect("snap")
        rec = conn.store(1, 1, 2, "committed before the stop")
        self.sync(conn)
        conn.close()
        self.daemon.stop()
        # Changed while down: for the start-up scan to find.
        edited = dict(rec)
        edited["content"] = "edited while the daemon was down"
        with open(self.repo.decision_path(1, 1, 2), "wb") as f:
            f.write(vt.decision_file_bytes(edited))
        slow = self.new_daemon("--commit-delay-ms", "200",
                               env=self.slow_git_env())
        slow.start()
        conn = slow.connect("snap")
        self.assertEqual(conn.get(1, 1, 2), edited)
        written = conn.store(2, 1, 2, "written while git status runs")
        conn.close()
        # The stop does not wait for a status that never ends...
        slow.stop()
        self.assertIn("stopped asking git what differs from HEAD",
                      slow.stderr())
        # ... and this run's own write was committed all the same.
        self.assertEqual(self.blob("HEAD", vt.rel_path(2, 1, 2)),
                         vt.decision_file_bytes(written))
        self.assertEqual(self.blob("HEAD", vt.rel_path(1, 1, 2)),
                         vt.decision_file_bytes(rec))
        # The next start asks git again and commits the edit.
        self.daemon.start()
        conn = self.connect("snap")
        self.sync(conn)
        self.assertEqual(self.blob("HEAD", vt.rel_path(1, 1, 2)),
                         vt.decision_file_bytes(edited))
        self.assertStatus([])

    def test_checkout_to_another_branch_while_down(self):
        conn = self.connect("snap")
        main_recs = {(1, 1, 2): conn.store(1, 1, 2, "on the first branch"),
                     (1, 1, 3): conn.store(1, 1, 3, "on both branches")}
        self.sync(conn)
        base = self.git("rev-parse", "--abbrev-ref", "HEAD").strip()
        self.git("checkout", "-q", "-b", "other")
        other = dict(main_recs)
        other[(1, 1, 2)] = None
        conn.delete(1, 1, 2)
        other[(2, 1, 2)] = conn.store(2, 1, 2, "only on the other branch")
        other[(1, 1, 3)] = conn.store(1, 1, 3, "changed on the other "
                                      "branch", overwrite=True)
        self.sync(conn)
        self.assertStatus([])
        conn.close()
        time.sleep(SETTLE)
        self.daemon.stop()
        self.assertRegex(self.daemon.stderr(),
                         r"index snapshot: [1-9]\d* decisions saved")
        self.git("checkout", "-q", base)
        main_recs[(2, 1, 2)] = None
        self.daemon.start()
        conn = self.connect("snap")
        for (x, y, z), rec in main_recs.items():
            if rec is None:
                self.assertIsNone(conn.get(x, y, z))
            else:
                self.assertEqual(conn.get(x, y, z), rec)
        # Nothing for the daemon to commit: the files are HEAD's.
        self.assertPendingSettles(conn, timeout=vt.scaled(5.0))
        self.assertStatus([])


if __name__ == "__main__":
    vt.main()

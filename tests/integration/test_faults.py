#!/usr/bin/env python3
"""I/O faults: errors injected with strace into a running vmemd, and a real
full disk (a small tmpfs in a private mount namespace).

Faults hit the write-ahead log (pwrite64 ENOSPC, fdatasync EIO), the file
writer (renameat EIO/ENOSPC, the checkpoint's syncfs EIO), the segments of
the local kinds (pwrite64 ENOSPC, fdatasync EIO, on the thread pool only:
the log's own thread is left alone) and the git job (link ENOSPC on
object and ref files, fsync EIO). For each: a write that
could not be made durable is refused with StorageError (-32004, data.reason),
never acknowledged; reads go on being served; once the fault is gone the
daemon recovers without a restart (new writes succeed, the files and the
commits catch up, health says so); and after a kill -9 and a restart nothing
acknowledged is missing and nothing refused appeared.

Seeded: VMEM_SEED=N replays the contents and sizes of a run. Needs strace
(skipped without it) and root for the full-disk case (skipped otherwise).
The number of faults injected is printed as a TAP diagnostic at the end.
"""

import atexit
import collections
import ctypes
import errno
import os
import random
import re
import shutil
import signal
import subprocess
import time

import vmemtest as vt

SEED = int(os.environ.get("VMEM_SEED", random.randrange(1 << 30)))
STRACE = shutil.which("strace")
E_STORAGE = vt.E_STORAGE
FAULTS = collections.Counter()  # "syscall ERRNO" -> injected count
DISK_FULL = collections.Counter()  # StorageErrors caused by a real full disk

INJECTED_RE = re.compile(r"^\s*\d+\s+(\w+)\(.*= -1 (\w+) .*\(INJECTED\)")


def summary():
    parts = ", ".join("%s %d" % (k, v) for k, v in sorted(FAULTS.items()))
    vt.diag("seed %d (VMEM_SEED=%d replays it)" % (SEED, SEED))
    vt.diag("faults: %d injected (%s)" % (sum(FAULTS.values()),
                                          parts or "none"))
    vt.diag("full disk: %d writes refused with StorageError"
            % DISK_FULL["refused"])


atexit.register(summary)


# --------------------------------------------------------------------------
# strace fault injection


def tracer_of(tid_status):
    with open(tid_status) as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


class Injector:
    """strace attached to every thread of a running daemon, failing each
    call of the given syscalls with the given errno until stop()."""

    serial = 0

    def __init__(self, case, pid, rules, tids=None):
        Injector.serial += 1
        self.case = case
        self.pid = pid
        self.rules = rules
        self.tids = tids  # only these threads (None: every thread)
        self.log = case.repo.path("strace-%d.log" % Injector.serial)
        syscalls = sorted({s for s, _ in rules})
        argv = [STRACE, "-qq", "-o", self.log,
                "-e", "trace=" + ",".join(syscalls)]
        if tids is None:
            argv.insert(1, "-f")
        for sc, err in rules:
            argv += ["-e", "inject=%s:error=%s" % (sc, err)]
        for t in tids or [pid]:
            argv += ["-p", str(t)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self.count = None
        case.addCleanup(self.stop)
        if not vt.wait_until(self.attached, 10.0, 0.02):
            self.stop()
            raise AssertionError("strace did not attach to %d" % pid)

    def attached(self):
        """Every thread of the daemon is traced by our strace."""
        task = "/proc/%d/task" % self.pid
        try:
            tids = self.tids or os.listdir(task)
            return tids and all(
                tracer_of("%s/%s/status" % (task, t)) == self.proc.pid
                for t in tids)
        except (FileNotFoundError, ProcessLookupError):
            return False

    def injected(self):
        """Faults injected so far, by "syscall ERRNO"."""
        found = collections.Counter()
        try:
            with open(self.log, errors="replace") as f:
                for line in f:
                    m = INJECTED_RE.match(line)
                    if m:
                        found["%s %s" % m.groups()] += 1
        except FileNotFoundError:
            pass
        return found

    def stop(self):
        """Detach (the fault is over); returns the faults injected."""
        if self.count is not None:
            return self.count
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(vt.scaled(10))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()
        self.count = self.injected()
        FAULTS.update(self.count)
        return self.count


# --------------------------------------------------------------------------
# Helpers


def all_decisions(conn):
    return conn.call("decision.query_range", {})


class Checks:
    """Checks shared by the fault cases (mixed into a GitCase)."""

    def text(self, tag):
        return "%s %d %s" % (tag, self.rng.randrange(1 << 30),
                             "pad " * self.rng.choice([0, 5, 300]))

    def repo_log(self):
        return self.daemon.stderr()

    def wal_size(self):
        return os.path.getsize(os.path.join(self.repo.gitdir, "vmem", "wal"))

    def assertStorageError(self, fn, *args, **kw):
        err = self.assertRpcError(E_STORAGE, fn, *args, **kw)
        self.assertIsInstance(err.data, dict, err)
        self.assertIsInstance(err.data.get("reason"), str, err.data)
        self.assertTrue(err.data["reason"], err.data)
        return err

    def assertSyncAnswered(self, coordinate, seconds=8.0):
        """While the files cannot be written, git.sync (on a connection of
        its own) must answer in bounded time: StorageError, or a commit
        that does not claim coordinate. A hang is reported as a failed
        subtest and the case goes on."""
        probe = self.connect(timeout=seconds)
        with self.subTest("git.sync answered during a file writer fault"):
            try:
                res = self.sync(probe, timeout=seconds)
                self.assertNotIn(coordinate, res.get("coordinates", []), res)
            except vt.RpcError as e:
                self.assertEqual((e.code, e.type), E_STORAGE, str(e))
                vt.diag("git.sync during the writer fault: %s" % e)
            except TimeoutError:
                self.fail("git.sync unanswered after %.0f s while the file "
                          "writer fails" % seconds)
        probe.close()

    def assertReadsServed(self, conn, recs):
        """get, query_range and search answer from the index."""
        for rec in recs:
            c = rec["coordinate"]
            self.assertEqual(conn.get(c["x"], c["y"], c["z"]), rec)
        got = all_decisions(conn)
        for rec in recs:
            self.assertIn(rec, got)
        found = conn.call("decision.search", {"terms": ["faultword"]})
        self.assertTrue(all("faultword" in d["content"] for d in found))
        self.assertEqual(conn.call("server.hello")["server"], "vmemd")

    def assertFilesEqualIndex(self, conn, timeout=10.0):
        """The files hold exactly the index (waits for the writer)."""
        recs = all_decisions(conn)
        for rec in recs:
            self.assertFileMatches(rec, timeout=timeout)
        want = sorted(vt.rel_path(*r["coordinate"].values())[
            len(".vector-memory/"):] for r in recs)

        def have():
            return sorted(p for p in self.repo.vm_files()
                          if p.endswith(".json") and p != "metadata.json")

        # Deletions reach the files with the writer too.
        vt.wait_until(lambda: have() == want, timeout)
        self.assertEqual(have(), want)
        self.assertEqual(self.repo.temp_files(), [])
        return recs

    def assertGitEqualIndex(self, conn, timeout=10.0):
        """git.sync succeeds and HEAD's tree holds exactly the index."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sync(conn)
                break
            except vt.RpcError as e:
                if time.monotonic() > deadline:
                    raise AssertionError("git.sync still failing: %s" % e)
                time.sleep(0.2)
        recs = all_decisions(conn)
        want = sorted([vt.METADATA] + [vt.rel_path(*r["coordinate"].values())
                                       for r in recs])
        self.assertEqual(self.tree_files(), want)
        self.assertCommitted("HEAD", recs)
        health = self.health(conn)
        self.assertEqual((health["pending"], health["commit_deferred"]),
                         (0, None), health)

    def restart_and_compare(self, expected, absent):
        """kill -9, start again: every acknowledged record is served as
        acknowledged, every refused coordinate is empty."""
        self.daemon.kill()
        self.daemon.start()
        conn = self.connect()
        for rec in expected:
            c = rec["coordinate"]
            self.assertEqual(conn.get(c["x"], c["y"], c["z"]), rec)
        for c in absent:
            self.assertIsNone(conn.get(*c), "refused write at %r served "
                              "after restart" % (c,))
        self.assertEqual(conn.call("server.health")["decisions"],
                         len(expected))
        return conn


class FaultCase(Checks, vt.GitCase):
    """A daemon with a short commit delay, and strace to inject faults."""

    daemon_args = ("--commit-delay-ms", "200")

    def setUp(self):
        if STRACE is None:
            self.skipTest("strace is not installed")
        self.injectors = []
        super().setUp()
        self.rng = random.Random("%d %s" % (SEED, self.id()))

    def inject(self, *rules):
        inj = Injector(self, self.daemon.pid, list(rules))
        self.injectors.append(inj)
        return inj

    def tearDown(self):
        """Detach strace first: GitCase's tearDown stops the daemon
        gracefully, which needs a working disk."""
        for inj in self.injectors:
            inj.stop()
        super().tearDown()


def pool_threads(pid):
    """The daemon's threads but its main one and the log's lane (named
    vmemd-log): the libuv thread pool, where the file writer and the
    segments' appends and syncs run."""
    found = []
    for tid in os.listdir("/proc/%d/task" % pid):
        if int(tid) == pid:
            continue
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            if f.read().strip() == "vmemd-log":
                continue
        found.append(int(tid))
    return sorted(found)


# --------------------------------------------------------------------------
# The write-ahead log


class LogFaults(FaultCase):
    def log_fault(self, rule, fail_writes):
        conn = self.connect(agent_id="log")
        acked = [conn.store(x, 2, 2, self.text("faultword before %d" % x))
                 for x in range(1, 6)]
        inj = self.inject(rule)
        refused = []
        for i in range(fail_writes):
            c = (10 + i, 1 + i % 5, 1 + i % 4)
            self.assertStorageError(conn.store, *c, self.text("lost"))
            refused.append(c)
        # An overwrite and a delete are refused too, and change nothing.
        self.assertStorageError(conn.store, 1, 2, 2, "x", overwrite=True)
        self.assertStorageError(conn.delete, 2, 2, 2)
        # A group is refused whole.
        items = [{"coordinate": vt.coord(40, y, 3), "content": "g%d" % y}
                 for y in range(1, 6)]
        self.assertStorageError(conn.call, "decision.store_many",
                                {"items": items})
        refused += [(40, y, 3) for y in range(1, 6)]
        for c in refused:
            self.assertIsNone(conn.get(*c))
        self.assertReadsServed(conn, acked)
        health = self.health(conn)
        self.assertEqual(health["status"], "degraded", health)
        self.assertIn("write-ahead log", health["last_error"] or "", health)
        self.assertEqual(health["decisions"], len(acked))
        # Still refusing while the fault lasts (never retried-and-assumed).
        self.assertStorageError(conn.store, 50, 1, 2, "still failing")
        refused.append((50, 1, 2))
        count = inj.stop()
        self.assertGreaterEqual(sum(count.values()), fail_writes + 4, count)
        # Recovered without a restart.
        acked.append(conn.store(50, 1, 2, self.text("faultword after")))
        acked.append(conn.store(1, 2, 2, "overwritten after",
                                overwrite=True))
        del acked[0]
        self.assertTrue(conn.delete(2, 2, 2))
        del acked[0]
        refused.remove((50, 1, 2))
        refused.append((2, 2, 2))
        health = vt.wait_until(
            lambda: (lambda h: h["status"] == "ok" and h)(self.health(conn)),
            3.0)
        self.assertTrue(health, self.health(conn))
        self.assertIn("write-ahead log", health["last_error"])
        self.assertFilesEqualIndex(conn)
        self.assertGitEqualIndex(conn)
        conn = self.restart_and_compare(acked, refused)
        self.assertFilesEqualIndex(conn)
        vt.diag("%s: %d writes refused, %d acknowledged kept"
                % (rule[0], len(refused), len(acked)))

    def test_log_pwrite_enospc(self):
        self.log_fault(("pwrite64", "ENOSPC"), 6)

    def test_log_fdatasync_eio(self):
        self.log_fault(("fdatasync", "EIO"), 6)

    def test_fdatasync_eio_batch_not_replayed(self):
        """The records of a batch whose fdatasync failed reached the file
        (pwrite succeeded): they must be cut back, so a kill -9 right after
        the refusal, with no later write, does not resurrect them."""
        conn = self.connect(agent_id="log")
        kept = conn.store(1, 1, 1, "kept")
        inj = self.inject(("fdatasync", "EIO"))
        for y in range(1, 6):
            self.assertStorageError(conn.store, 2, y, 2, "refused %d" % y)
        inj.stop()
        self.restart_and_compare([kept], [(2, y, 2) for y in range(1, 6)])

    def test_concurrent_writers_during_fault(self):
        """Several connections write through a short log fault: each
        answer is a success that survives or a StorageError whose write
        never appears."""
        conns = [self.connect(agent_id="w%d" % i) for i in range(4)]
        acked, refused = {}, set()
        inj = None
        for step in range(60):
            if step == 20:
                inj = self.inject(("fdatasync", "EIO"))
            if step == 40:
                inj.stop()
            rids = []
            for i, c in enumerate(conns):
                co = (100 + step, 1 + i, 3)
                rids.append((c, co, c.request("decision.store", {
                    "coordinate": vt.coord(*co), "content": "s%d" % step})))
            for c, co, rid in rids:
                try:
                    acked[co] = c.response(rid)
                except vt.RpcError as e:
                    self.assertEqual((e.code, e.type), E_STORAGE, str(e))
                    refused.add(co)
        self.assertGreaterEqual(len(refused), 4 * 20 - 4)
        self.assertTrue(all(100 + 20 <= co[0] < 100 + 41 for co in refused),
                        sorted(refused))
        self.restart_and_compare(list(acked.values()), sorted(refused))


# --------------------------------------------------------------------------
# The segments of the local kinds (sessions, messages, documents)


class SegmentFaults(FaultCase):
    daemon_args = ("--commit-delay-ms", "200", "--embedding-dim", "4")

    def local_writes(self, conn, tag, n=6):
        s = "%08x-0000-4000-8000-000000000000" % self.rng.randrange(1 << 30)
        msgs = [conn.call("message.store", {
            "session_id": s, "role": "user", "content": "%s m%d" % (tag, i),
            "user_id": "u"}) for i in range(n)]
        docs = [conn.call("document.store", {
            "content": "%s d%d" % (tag, i), "embedding": [1.0, i, 0, 1]})
            for i in range(n)]
        return s, msgs, docs

    def check_local(self, conn, written):
        for s, msgs, docs in written:
            self.assertEqual(conn.call("message.history",
                                       {"session_id": s}), msgs)
            for d in docs:
                got = conn.call("document.get",
                                {"id": d["id"], "include_embedding": False})
                self.assertEqual(got, d)

    def segment_fault(self, rule, what):
        conn = self.connect()
        written = [self.local_writes(conn, "before")]
        # The pool's threads exist once a writer pass has run.
        self.assertTrue(vt.wait_until(
            lambda: len(pool_threads(self.daemon.pid)) > 0, 3.0))
        tids = pool_threads(self.daemon.pid)
        inj = Injector(self, self.daemon.pid, [rule], tids)
        self.injectors.append(inj)
        # Acknowledged from the log: no storage error for the writer.
        written.append(self.local_writes(conn, "during"))
        self.check_local(conn, written)
        # A failed pass makes the writer retry (degraded); a failed
        # checkpoint sync is tried again a second later.
        health = vt.wait_until(
            lambda: (lambda h: what in (h["last_error"] or "") and h)(
                self.health(conn)), 5.0)
        self.assertTrue(health, self.health(conn))
        if what == "writing":
            self.assertEqual(health["status"], "degraded", health)
        # The log keeps what the segments could not take.
        time.sleep(1.5)
        self.assertGreater(self.wal_size(), 0)
        count = inj.stop()
        self.assertGreater(sum(count.values()), 0, count)
        written.append(self.local_writes(conn, "after"))
        self.assertTrue(vt.wait_until(
            lambda: self.health(conn)["status"] == "ok", 20.0),
            self.health(conn))
        self.assertTrue(vt.wait_until(lambda: self.wal_size() == 0, 20.0),
                        "log not emptied after the segments recovered: %s"
                        % (self.health(conn),))
        self.check_local(conn, written)
        # Nothing acknowledged lost by a crash now, nor by a replay from
        # the log while the fault lasted.
        self.daemon.kill()
        self.daemon.start()
        conn = self.connect()
        self.check_local(conn, written)
        self.assertEqual(conn.call("server.health")["counts"]["messages"],
                         18)
        vt.diag("%s %s on the pool: %d faults injected"
                % (rule + (sum(count.values()),)))

    def test_segment_pwrite_enospc(self):
        self.segment_fault(("pwrite64", "ENOSPC"), "writing")

    def test_segment_fdatasync_eio(self):
        self.segment_fault(("fdatasync", "EIO"), "syncing")

    def test_kill9_during_the_fault(self):
        """Acknowledged while the segments fail, then killed before they
        recover: the next start replays them from the log."""
        conn = self.connect()
        written = [self.local_writes(conn, "before")]
        self.assertTrue(vt.wait_until(
            lambda: len(pool_threads(self.daemon.pid)) > 0, 3.0))
        inj = Injector(self, self.daemon.pid, [("pwrite64", "ENOSPC")],
                       pool_threads(self.daemon.pid))
        self.injectors.append(inj)
        written.append(self.local_writes(conn, "during"))
        time.sleep(0.5)
        inj.stop()
        self.daemon.kill()
        self.daemon.start()
        self.check_local(self.connect(), written)


# --------------------------------------------------------------------------
# The file writer and the checkpoint


class WriterFaults(FaultCase):
    def writer_fault(self, rule):
        conn = self.connect(agent_id="files")
        first = [conn.store(x, 3, 2, self.text("faultword a%d" % x))
                 for x in range(1, 4)]
        self.assertFilesEqualIndex(conn)
        self.assertGitEqualIndex(conn)
        inj = self.inject(rule)
        # Writes are acknowledged from the log: not a storage failure.
        during = [conn.store(x, 3, 3, self.text("faultword b%d" % x))
                  for x in range(1, 6)]
        during.append(conn.store(1, 3, 2, "overwritten during",
                                 overwrite=True))
        self.assertTrue(conn.delete(2, 3, 2))
        health = vt.wait_until(
            lambda: (lambda h: h["status"] == "degraded" and h)(
                self.health(conn)), 3.0)
        self.assertTrue(health, self.health(conn))
        self.assertIn("writing decision files", health["last_error"])
        for rec in during[:-1]:
            self.assertIsNone(self.repo.read_decision_bytes(
                *rec["coordinate"].values()))
        # Old files stay as they were until the writer succeeds.
        self.assertEqual(self.repo.read_decision_bytes(1, 3, 2),
                         vt.decision_file_bytes(first[0]))
        self.assertEqual(self.repo.read_decision_bytes(2, 3, 2),
                         vt.decision_file_bytes(first[1]))
        self.assertReadsServed(conn, during)
        # The log is not cut while the files are not written, and the
        # writer retries with a backoff (100 ms doubling up to 5 s), not
        # in a loop: a few attempts in 2.5 s, not thousands.
        started = time.monotonic()
        before = sum(inj.injected().values())
        time.sleep(2.5)
        self.assertGreater(self.wal_size(), 0)
        attempts = sum(inj.injected().values()) - before
        vt.diag("%s %s: %d failed attempts in %.1f s"
                % (rule + (attempts, time.monotonic() - started)))
        with self.subTest("writer backoff"):
            self.assertLess(attempts, 100, "the file writer retries in a "
                            "busy loop instead of backing off")
        self.assertSyncAnswered(vt.coord(1, 3, 3))
        count = inj.stop()
        self.assertGreater(sum(count.values()), 0, count)
        # The writer's back-off reaches 5 s: its next try may come that
        # late after the fault is gone (and later on a slow build).
        recs = self.assertFilesEqualIndex(conn, timeout=20.0)
        self.assertEqual(len(recs), 7)
        self.assertTrue(vt.wait_until(
            lambda: self.health(conn)["status"] == "ok", 10.0),
            self.health(conn))
        self.assertTrue(vt.wait_until(lambda: self.wal_size() == 0, 10.0),
                        "log not emptied after the writer recovered")
        self.assertGitEqualIndex(conn)
        self.restart_and_compare(recs, [(2, 3, 2)])

    def test_writer_rename_eio(self):
        self.writer_fault(("renameat", "EIO"))

    def test_writer_rename_enospc(self):
        self.writer_fault(("renameat", "ENOSPC"))

    def test_checkpoint_syncfs_eio_keeps_the_log(self):
        conn = self.connect(agent_id="ckpt")
        inj = self.inject(("syncfs", "EIO"))
        recs = [conn.store(x, 4, 2, self.text("faultword c%d" % x))
                for x in range(1, 11)]
        for rec in recs:
            self.assertFileMatches(rec, timeout=3.0)
        # Files written but not synced: the log must stay.
        last = vt.wait_until(lambda: self.health(conn)["last_error"], 4.0)
        self.assertIn("sync", last or "")
        self.assertTrue(vt.wait_until(
            lambda: "syncing decision files" in self.repo_log(), 4.0),
            "no failed checkpoint sync in the log")
        self.assertGreater(self.wal_size(), 0)
        time.sleep(1.2)
        self.assertGreater(self.wal_size(), 0)
        self.assertReadsServed(conn, recs)
        count = inj.stop()
        self.assertGreater(count["syncfs EIO"], 0, count)
        self.assertTrue(vt.wait_until(lambda: self.wal_size() == 0, 8.0),
                        "log not emptied after syncfs recovered")
        self.assertGitEqualIndex(conn)
        self.restart_and_compare(recs, [])

    def test_sigterm_during_persistent_sync_fault(self):
        """A stop cannot flush while syncs keep failing. It must still end
        in bounded time (the log keeps every acknowledged write), and the
        next daemon serves them all."""
        conn = self.connect(agent_id="stop")
        inj = self.inject(("syncfs", "EIO"), ("fsync", "EIO"))
        recs = [conn.store(x, 4, 3, self.text("faultword s%d" % x))
                for x in range(1, 6)]
        conn.close()
        self.daemon.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.daemon.proc.wait(vt.scaled(15))
        except subprocess.TimeoutExpired:
            rc = None
        inj.stop()
        if rc is None:
            self.daemon.kill()
        self.assertIsNotNone(rc, "SIGTERM: vmemd still flushing after 15 s "
                             "of failing syncs (it never gives up)")
        vt.diag("SIGTERM under failing syncs: exit status %d" % rc)
        self.daemon.start()
        conn = self.connect()
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)


# --------------------------------------------------------------------------
# The git job


class GitFaults(FaultCase):
    def git_fault(self, *rules):
        conn = self.connect(agent_id="git")
        base = [conn.store(x, 5, 2, self.text("faultword g%d" % x))
                for x in range(1, 4)]
        self.assertGitEqualIndex(conn)
        history = self.commits()
        inj = self.inject(*rules)
        during = [conn.store(x, 5, 3, self.text("faultword h%d" % x))
                  for x in range(1, 6)]
        err = self.assertStorageError(self.sync, conn)
        self.assertIn("git", err.data["reason"].lower() + err.message.lower())
        vt.diag("git.sync under %r: %s" % (rules, err.data["reason"]))
        # Writes and reads go on.
        during.append(conn.store(9, 5, 3, "written after the failed sync"))
        self.assertReadsServed(conn, base + during)
        health = self.health(conn)
        self.assertIsInstance(health["last_error"], str, health)
        self.assertGreater(health["pending"], 0, health)
        self.assertIn("git commit", self.repo_log())
        self.assertFilesEqualIndex(conn)
        count = inj.stop()
        self.assertGreater(sum(count.values()), 0, count)
        # No broken commit on the branch: either untouched or a good one.
        now = self.commits()
        self.assertEqual(now[-len(history):], history)
        self.assertGitEqualIndex(conn)
        self.assertEqual(self.commits()[-len(history):], history)
        self.restart_and_compare(base + during, [])

    def test_git_objects_link_enospc(self):
        # libgit2 writes loose objects and refs as a temporary file that it
        # then link()s into place, falling back to rename().
        self.git_fault(("link", "ENOSPC"), ("rename", "ENOSPC"))

    def test_git_sync_eio(self):
        # The commit's objects are made durable by one syncfs() before the
        # branch may point to them (refs and the index are renamed into
        # place unsynced, as git does).
        self.git_fault(("syncfs", "EIO"))


# --------------------------------------------------------------------------
# A real full disk


CLONE_NEWNS = 0x00020000
_namespace_ready = False


def private_mount_namespace():
    """Move this process (and its children) into a mount namespace of its
    own, so the test's tmpfs mounts are invisible to the host."""
    global _namespace_ready
    if _namespace_ready:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "unshare(CLONE_NEWNS): %s" % os.strerror(e))
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    _namespace_ready = True


class DiskFull(Checks, vt.GitCase):
    """The working tree (git directory and log included) on an 8 MiB tmpfs
    that a filler file makes full."""

    start_daemon = False

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root for a tmpfs in a mount namespace")
        try:
            private_mount_namespace()
        except (OSError, subprocess.CalledProcessError) as e:
            self.skipTest("no private mount namespace: %s" % e)
        super().setUp()
        self.rng = random.Random("%d %s" % (SEED, self.id()))
        root = self.repo.root
        shutil.rmtree(root)
        os.mkdir(root)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755",
                        "vmem-full", root], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", root])
        subprocess.run(["git", "init", "-q", root], check=True)
        self.filler = os.path.join(root, ".git", "filler")
        self.daemon = self.start_vmemd("--commit-delay-ms", "200")

    def tearDown(self):
        """Free the disk first: GitCase's tearDown stops the daemon
        gracefully."""
        if os.path.exists(self.filler):
            os.unlink(self.filler)
        super().tearDown()

    def fill(self):
        """Write the filler until the file system is full."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (65536, 4096, 512):
                try:
                    while True:
                        os.write(fd, b"\xa5" * size)
                except OSError as e:
                    self.assertEqual(e.errno, errno.ENOSPC)
        finally:
            os.close(fd)

    def test_full_disk_refuses_then_recovers(self):
        conn = self.connect(agent_id="full")
        first = conn.store(1, 1, 2, "faultword before the disk filled")
        self.assertGitEqualIndex(conn)
        self.fill()
        acked, refused = [first], []
        size = 40000 + self.rng.randrange(20000)
        for x in range(2, 60):
            try:
                acked.append(conn.store(x, 1, 2, "faultword %d %s"
                                        % (x, "f" * size)))
            except vt.RpcError as e:
                self.assertEqual((e.code, e.type), E_STORAGE, str(e))
                self.assertIn("space", e.data["reason"], e.data)
                refused.append((x, 1, 2))
                if len(refused) >= 3:
                    break
        DISK_FULL["refused"] += len(refused)
        self.assertEqual(len(refused), 3, "no write refused on a full disk")
        vt.diag("full disk: %d acknowledged before the log could not grow"
                % (len(acked) - 1))
        self.assertReadsServed(conn, acked)
        health = self.health(conn)
        self.assertEqual(health["status"], "degraded", health)
        self.assertIsInstance(health["last_error"], str)
        self.assertSyncAnswered(vt.coord(2, 1, 2))
        os.unlink(self.filler)
        # Recovered without a restart.
        acked.append(conn.store(99, 1, 2, "faultword after"))
        self.assertFilesEqualIndex(conn, timeout=10.0)
        self.assertGitEqualIndex(conn)
        self.assertTrue(vt.wait_until(
            lambda: self.health(conn)["status"] == "ok", 3.0),
            self.health(conn))
        conn = self.restart_and_compare(acked, refused)
        self.assertFilesEqualIndex(conn)


if __name__ == "__main__":
    vt.main()

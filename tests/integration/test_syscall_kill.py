#!/usr/bin/env python3
"""Kill vmemd at an exact system call: strace injects SIGKILL at the N-th
call of one syscall (counted by strace per thread), for the write path's
steps in turn:

  wal-pwrite64   the log append (pwrite64 on <gitdir>/vmem/wal, the
                 zero-filling of a grown log included)
  wal-fdatasync  the log's fdatasync (the acknowledgement point)
  file-write     write(2) of a decision's temp file (strace attached to a
                 running daemon, -P naming the temp paths it will use)
  file-renameat  renameat(2) of a temp file over its decision file
  ref-link       the commit's ref lock: linkat(2) of a file the commit
                 marker already records (made in <gitdir>/vmem) onto
                 refs/heads/<b>.lock (git's lock protocol: exclusive, as
                 O_EXCL)
  replay-renameat  renameat(2) during the start-up replay of a log left
                 by a kill -9 (the daemon dies before it listens)

A client stores, overwrites, deletes and git.syncs on a few coordinates
until the daemon dies (or a cap, reported as "not reached"). After each
kill, vmemd is restarted without strace and must keep every acknowledged
write (the model of test_torture.py: unacknowledged ones may or may not be
there, never half), files must parse, the index must equal the files,
`git fsck --strict` must be clean and git.sync must work again. Seeded:
SEED=N; SYSKILL_N="1,2,3" picks the N values.
"""

import os
import random
import shutil
import subprocess
import time

import test_torture as tt
import vmemtest as vt

SEED = int(os.environ.get("SEED", "20250107"))
MAX_OPS = 150
SYNC_EVERY = 3
N_VALUES = [int(v) for v in os.environ.get(
    "SYSKILL_N", ",".join(str(n) for n in range(1, 16))).split(",")]
# The log is grown (zero-filled) 64 KiB at a time up to 1 MiB after the
# first append of a run: spread N past those calls too.
PWRITE_N = [int(v) for v in os.environ.get(
    "SYSKILL_PWRITE_N", "1,2,3,5,9,16,17,18,19,20,24,30,45,60,80").split(
        ",")]
WORK = [(1, 1, 1), (1, 1, 2), (1, 2, 3), (2, 1, 4), (2, 3, 2), (3, 5, 1),
        (3, 2, 2), (4, 4, 4)]
STRACE = os.environ.get("STRACE", "strace")


def vmemd_pid(strace_pid):
    """The pid of the process strace started (its only child)."""
    try:
        with open("/proc/%d/task/%d/children" % (strace_pid, strace_pid)) \
                as f:
            kids = f.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def traced(pid):
    """True once every thread of pid has a tracer."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
        for tid in tasks:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("TracerPid:") and \
                            int(line.split()[1]) == 0:
                        return False
    except OSError:
        return False
    return True


class StraceDaemon(vt.Daemon):
    """vmemd started under strace (launch mode) when trace is set."""

    trace = None

    def argv(self):
        base = super().argv()
        if self.trace is None:
            return base
        return self.trace + ["--"] + base

    def kill(self):
        """kill -9 vmemd itself (strace's tracee included), then reap."""
        if self.trace is not None and self.running():
            pid = vmemd_pid(self.proc.pid)
            if pid:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        super().kill()


class SyscallKill(vt.GitCase):
    start_daemon = False

    def setUp(self):
        if not shutil.which(STRACE):
            self.skipTest("%s not installed" % STRACE)
        super().setUp()
        self.env = vt.clean_env(self.repo.tmp)
        self.daemon = StraceDaemon(self.repo, args=("--commit-delay-ms",
                                                    "50"), env=self.env)
        self.addCleanup(self._reap, self.daemon)
        self.model = tt.Model()
        self.kills = 0
        self.not_reached = []
        self.startup_kills = 0
        self.rng = random.Random(SEED)
        self.seq = 0
        self.trace_log = self.repo.path("strace.log")
        branch = subprocess.run(
            ["git", "-C", self.repo.root, "symbolic-ref", "--short", "HEAD"],
            capture_output=True, env=self.env).stdout.decode().strip()
        self.branch = branch or "master"

    # -- the steps
    def wal(self):
        return os.path.join(self.repo.gitdir, "vmem", "wal")

    def strace_base(self, syscall, n):
        return [STRACE, "-f", "-q", "-o", self.trace_log,
                "-e", "trace=" + syscall,
                "-e", "inject=%s:signal=SIGKILL:when=%d" % (syscall, n)]

    def start_traced(self, trace):
        """Start vmemd under strace; False when it was killed before it
        listened (a kill during start-up)."""
        self.daemon.trace = trace
        self.daemon.spawn()
        deadline = time.monotonic() + vt.scaled(60)
        while not vt.accepts(self.daemon.sock):
            if self.daemon.proc.poll() is not None:
                return False
            self.assertLess(time.monotonic(), deadline,
                            "vmemd under strace not listening:\n%s"
                            % self.daemon.stderr()[-3000:])
            time.sleep(0.01)
        return True

    def attach(self, trace, pid):
        """Attach strace to the running vmemd pid; returns the process."""
        p = subprocess.Popen(trace + ["-p", str(pid)],
                             stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        ok = vt.wait_until(lambda: traced(pid), 30)
        self.assertTrue(ok, "strace did not attach to %d" % pid)
        return p

    def workload(self, conn, ops=MAX_OPS):
        """Operations until the connection dies or ops; True when it
        died."""
        for i in range(ops):
            self.seq += 1
            try:
                op = tt.next_op(self.rng, conn, 0, self.seq, WORK)
            except tt.LOST:
                return True
            op["agent"] = "syskill"
            ok = tt.run_op(conn, op)
            self.model.add(op)
            if not ok:
                return True
            if (i + 1) % SYNC_EVERY == 0:
                try:
                    conn.call("git.sync", {}, timeout=30)
                except vt.RpcError:
                    pass  # judged after the restart
                except tt.LOST:
                    return True
        return False

    def run_once(self, name, syscall, n, trace_extra=(), attach=False,
                 paths=None, recovery=False):
        """One kill at the n-th syscall (or none if never reached), then
        the checks. Returns the problems found. With recovery, a plain
        vmemd first takes some writes and is killed, so that the traced
        start replays the log."""
        where = "seed %d %s N=%d" % (SEED, name, n)
        trace = self.strace_base(syscall, n) + list(trace_extra)
        if os.path.exists(self.trace_log):
            os.unlink(self.trace_log)
        strace = None
        if recovery:
            self.daemon.trace = None
            self.daemon.start(timeout=vt.scaled(60))
            conn = vt.Conn(self.daemon.sock, agent_id="syskill", timeout=30)
            self.workload(conn, 12)
            conn.close()
            self.daemon.kill()
            self.model.reaped()
        if attach:
            self.daemon.trace = None
            self.daemon.start(timeout=vt.scaled(60))
            pid = self.daemon.pid
            for p in paths(pid):
                trace += ["-P", p]
            strace = self.attach(trace, pid)
            listening = True
        else:
            listening = self.start_traced(trace)
        died = True
        if listening:
            try:
                conn = vt.Conn(self.daemon.sock, agent_id="syskill",
                               timeout=vt.scaled(30))
            except tt.LOST:
                conn = None
            if conn is not None:
                died = self.workload(conn)
                conn.close()
        if not died:
            self.not_reached.append(n)
            c = vt.Conn(self.daemon.sock, timeout=30)
            c.call("server.shutdown")
            c.close()
        rc = self.daemon.wait(vt.scaled(60))
        if strace is not None:
            strace.wait(vt.scaled(60))
        self.model.reaped()
        log = ""
        if os.path.exists(self.trace_log):
            with open(self.trace_log, errors="replace") as f:
                log = f.read()
        if os.environ.get("SYSKILL_VERBOSE"):
            vt.diag("%s: died %s, strace log:" % (where, died),
                    "\n".join(log.splitlines()[-6:])[:1500])
        if died:
            self.assertIn("+++ killed by SIGKILL +++", log,
                          "%s: vmemd died (status %r) but not by the "
                          "injected SIGKILL:\n%s\n%s"
                          % (where, rc, log[-2000:],
                             self.daemon.stderr()[-3000:]))
            self.kills += 1
            if not listening:
                self.startup_kills += 1
        problems = tt.git_fsck(self.repo, self.env)
        self.daemon.trace = None
        self.daemon.start(timeout=vt.scaled(60))
        conn = vt.Conn(self.daemon.sock, timeout=30)
        try:
            found, _ = tt.check_files(self.model, self.repo, conn,
                                      self.daemon.pid, where)
            problems += found
            try:
                conn.call("git.sync", {}, timeout=30)
            except vt.RpcError as e:
                problems.append("%s: git.sync fails after the restart: %s"
                                % (where, e))
        finally:
            conn.close()
        self.daemon.stop(30)
        return ["%s: %s" % (where, p) if not p.startswith(where) else p
                for p in problems]

    def run_syscall(self, name, syscall, ns, **kw):
        vt.diag("seed %d (SEED=%d replays it), %s: %s at N in %s"
                % (SEED, SEED, name, syscall, ns))
        problems = []
        for i, n in enumerate(ns):
            problems += self.run_once(name, syscall, n, **kw)
            if problems:  # the first failure says it; the rest would echo
                if ns[i + 1:]:
                    problems.append("(stopped: N in %s not run)"
                                    % ns[i + 1:])
                break
        ours, git_tmp = tt.leftovers(self.repo)
        problems += ["left after a graceful stop: %s" % p for p in ours]
        vt.diag("syscall kills: %d kills over %s (%d during start-up), "
                "N not reached: %s, %d acknowledged writes checked"
                % (self.kills, syscall, self.startup_kills,
                   self.not_reached or "none", self.model.acked))
        if git_tmp:
            vt.diag("note: %d libgit2 temporary objects left in "
                    ".git/objects" % len(git_tmp))
        count, samples = tt.log_summary(self.daemon.stderr())
        vt.diag("vmemd logged %d warning/error lines" % count, *samples)
        self.assertEqual(problems, [], "\n".join(problems[:20]))
        self.assertGreater(self.kills, 0)

    # -- the cases
    def test_wal_pwrite64(self):
        self.run_syscall("wal-pwrite64", "pwrite64", PWRITE_N,
                         trace_extra=["-P", self.wal()])

    def test_wal_fdatasync(self):
        self.run_syscall("wal-fdatasync", "fdatasync", N_VALUES,
                         trace_extra=["-P", self.wal()])

    def test_file_write(self):
        def paths(pid):
            found = [os.path.join(self.repo.vmdir,
                                  ".tmp-%d-%d-metadata.json" % (pid, k))
                     for k in range(1, 4)]
            for x, y, z in WORK:
                for k in range(1, MAX_OPS + 40):
                    found.append(os.path.join(
                        self.repo.vmdir, "x-%03d" % x,
                        ".tmp-%d-%d-y-%d-z-%d.json" % (pid, k, y, z)))
            return found
        self.run_syscall("file-write", "write", N_VALUES, attach=True,
                         paths=paths)

    def test_file_renameat(self):
        self.run_syscall("file-renameat", "renameat", N_VALUES,
                         trace_extra=[])

    def test_replay_renameat(self):
        """Killed while the start-up replay materialises the log."""
        self.run_syscall("replay-renameat", "renameat", N_VALUES[:8],
                         recovery=True)

    def test_ref_link(self):
        lock = os.path.join(self.repo.gitdir, "refs", "heads",
                            self.branch + ".lock")
        self.run_syscall("ref-link", "linkat", N_VALUES,
                         trace_extra=["-P", lock])


if __name__ == "__main__":
    vt.main()

#!/usr/bin/env python3
"""The commit path against a user working in the same tree with git:
git's lock protocol end to end (a user's `git add` and `git commit`
while four writers store are never lost and never delete a decision, an
interactive `git commit` whose editor stays open succeeds), the user's
index kept in its format (split index, index v4, the untracked cache),
an index the daemon cannot bring in line stops commits (health and
`vmem status` say so) until it can, and only provably ours locks are
removed at start-up."""

import os
import struct
import subprocess
import threading
import time

import vmemtest as vt
from vmemtest import E_STORAGE, GitCase, wait_until

SCALE = vt.TIMEOUT_SCALE
ROUNDS = int(os.environ.get("VMEM_GIT_LOCK_ROUNDS", "200"))


def index_shape(path):
    """(version, [extension signatures]) of the index file at path."""
    with open(path, "rb") as f:
        data = f.read()
    sig, version, count = struct.unpack(">4sII", data[:12])
    assert sig == b"DIRC", sig
    off, prev = 12, b""
    for _ in range(count):
        flags = struct.unpack(">H", data[off + 60:off + 62])[0]
        fixed = 62 + (2 if flags & 0x4000 else 0)
        if version == 4:
            p = off + fixed
            strip, shift = 0, data[p]
            strip = shift & 127
            while shift & 128:  # git's offset varint
                p += 1
                shift = data[p]
                strip = ((strip + 1) << 7) | (shift & 127)
            p += 1
            end = data.index(b"\0", p)
            prev = prev[:len(prev) - strip] + data[p:end]
            off = end + 1
        else:
            namelen = flags & 0xfff
            if namelen == 0xfff:
                namelen = data.index(b"\0", off + fixed) - off - fixed
            off += (fixed + namelen + 8) & ~7
    exts = []
    while off + 8 <= len(data) - 20:
        exts.append(data[off:off + 4].decode())
        off += 8 + struct.unpack(">I", data[off + 4:off + 8])[0]
    return version, exts


class Writers:
    """Four connections storing (overwriting) their own coordinates until
    stopped; every acknowledged write is kept for the final check."""

    def __init__(self, case, n=4):
        self.case, self.stop_flag, self.errors = case, False, []
        self.acked = {}
        self.threads = [threading.Thread(target=self.run, args=(k,))
                        for k in range(n)]

    def run(self, k):
        conn = self.case.connect(agent_id="writer-%d" % k)
        i = 0
        while not self.stop_flag:
            x, y = 10 + k, i % 5 + 1
            try:
                rec = conn.store(x, y, 2, "writer %d round %d" % (k, i),
                                 overwrite=True)
                self.acked[(x, y, 2)] = rec
            except Exception as e:  # reported, never swallowed
                self.errors.append(repr(e))
                return
            i += 1
        conn.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag = True
        for t in self.threads:
            t.join()


class LockProtocol(GitCase):
    daemon_args = ("--commit-delay-ms", "0")

    def user_git(self, *args, tries=200):
        """A git command the user retries while another git process (the
        daemon) holds the lock, as a person would; the last result."""
        for _ in range(tries):
            p = self.git_run(*args)
            err = p.stderr.decode(errors="replace")
            if p.returncode == 0 or ".lock" not in err:
                return p
            time.sleep(0.005)
        return p

    def user_staged(self):
        """The user's staged paths (ours are checked under the lock)."""
        return {p for p in self.git("diff", "--cached", "--name-only",
                                    "--", ".", ":!.vector-memory").split()}

    def hold_index_lock(self):
        """Take index.lock as git does (O_EXCL), retrying while the daemon
        holds it; the caller removes it."""
        lock = os.path.join(self.repo.gitdir, "index.lock")
        deadline = time.monotonic() + vt.DEFAULT_TIMEOUT
        while True:
            try:
                os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return lock
            except FileExistsError:
                self.assertLess(time.monotonic(), deadline,
                                "index.lock never free")
                time.sleep(0.002)

    def test_user_add_and_commit_while_writers_store(self):
        user = os.path.join(self.repo.root, "user.txt")
        self.connect(agent_id="seed").store(1, 1, 1, "seed")
        self.sync(self.connect())
        problems, adds, commits, daemon_commits = [], 0, 0, 0
        with Writers(self) as w:
            for r in range(ROUNDS):
                # The index as the user left it: still holds the last add.
                if r:
                    staged = self.git_bytes("show", ":user.txt")
                    if staged != last:
                        problems.append("round %d: staged user.txt "
                                        "reverted to %r" % (r, staged))
                last = ("round %d\n" % r).encode()
                with open(user, "wb") as f:
                    f.write(last)
                before = self.user_staged()
                p = self.user_git("add", "user.txt")
                self.assertEqual(p.returncode, 0, p.stderr)
                adds += 1
                after = self.user_staged()
                if "user.txt" not in after:
                    problems.append("round %d: add not staged" % r)
                if self.git_bytes("show", ":user.txt") != last:
                    problems.append("round %d: add staged %r" % (
                        r, self.git_bytes("show", ":user.txt")))
                if before - after - {"user.txt"}:
                    problems.append("round %d: staged %r lost" %
                                    (r, before))
                # With the lock held, HEAD and the index are stable: our
                # paths must be in the index exactly as in HEAD.
                lock = self.hold_index_lock()
                try:
                    diff = self.git("diff-index", "--cached",
                                    "--name-status", "HEAD", "--",
                                    ".vector-memory")
                finally:
                    os.unlink(lock)
                if diff:
                    problems.append("round %d: index differs from HEAD "
                                    "under .vector-memory:\n%s" % (r, diff))
                if r % 20 == 19:
                    p = self.user_git("commit", "-q", "-m",
                                      "user %d" % r)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    commits += 1
                    # (HEAD may already be a commit of the daemon's)
                    mine = self.git("log", "-1", "--format=%H",
                                    "--author=" + vt.USER[0],
                                    "--grep=^user %d$" % r).strip()
                    changed = self.git("show", "--name-status",
                                       "--format=", mine)
                    if changed.strip() != "M\tuser.txt" and \
                            changed.strip() != "A\tuser.txt":
                        problems.append("user commit %d changed:\n%s" %
                                        (r, changed))
            daemon_commits = len(self.git(
                "log", "--format=%H", "--author=vmemd").split())
        self.assertEqual(w.errors, [])
        conn = self.connect()
        self.sync(conn)
        for (x, y, z), rec in w.acked.items():
            self.assertEqual(conn.get(x, y, z)["version"] >= rec["version"],
                             True)
        self.assertEqual(self.git("status", "--porcelain", "--",
                                  ".vector-memory"), "")
        deleted = self.git("log", "--diff-filter=D", "--name-only",
                           "--format=", "--", ".vector-memory")
        self.assertEqual(deleted, "")
        vt.diag("%d user adds, %d user commits, %d commits in all while "
                "4 writers stored %d coordinates" %
                (adds, commits, daemon_commits, len(w.acked)))
        self.assertEqual(problems, [], "\n".join(problems[:10]))

    def test_interactive_commit_with_the_editor_open(self):
        conn = self.connect(agent_id="alice")
        conn.store(1, 1, 1, "before")
        self.sync(conn)
        with open(os.path.join(self.repo.root, "user.txt"), "w") as f:
            f.write("user\n")
        self.git("add", "user.txt")
        editor = os.path.join(self.repo.tmp, "slow-editor")
        marker = os.path.join(self.repo.tmp, "editing")
        with open(editor, "w") as f:
            f.write("#!/bin/sh\ntouch '%s'\nsleep %s\n"
                    "echo 'user message' > \"$1\"\n" % (marker, 2 * SCALE))
        os.chmod(editor, 0o755)
        env = self.git_env(GIT_EDITOR=editor)
        user = subprocess.Popen(["git", "-C", self.repo.root, "commit"],
                                env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        self.assertTrue(wait_until(lambda: os.path.exists(marker),
                                   vt.DEFAULT_TIMEOUT))
        # The daemon must not move the branch under the user's commit
        # (git takes no lock while the editor is open: it would fail at
        # the end with "cannot lock ref 'HEAD'").
        recs = [conn.store(2, 1, 1, "during the editor")]
        err = self.assertRpcError(E_STORAGE, self.sync, conn)
        self.assertIn("git commit is in progress", err.message)
        before = self.head()
        out, errs = user.communicate(timeout=vt.DEFAULT_TIMEOUT)
        self.assertEqual(user.returncode, 0, errs)
        mine = self.git("log", "-1", "--format=%H",
                        "--grep=^user message$").strip()
        self.assertEqual(self.parents(mine), [before])
        self.assertEqual(self.git("show", "--name-only", "--format=", mine),
                         "user.txt\n")
        # Then the daemon's commit, on top of the user's.
        self.assertTrue(wait_until(
            lambda: self.head() != mine and self.health(conn)["pending"] == 0,
            10 * SCALE, 0.05), self.health(conn))
        self.assertEqual(self.parents("HEAD"), [mine])
        self.assertCommitted("HEAD", recs)
        self.assertStatus([])


class Formats(GitCase):
    start_daemon = False

    def check_kept(self, setup):
        self.git("commit", "-q", "--allow-empty", "-m", "base")
        for cmd in setup:
            self.git(*cmd)
        self.git("status")
        index = os.path.join(self.repo.gitdir, "index")
        shape = index_shape(index)
        self.daemon = self.start_vmemd("--commit-delay-ms", "60000")
        conn = self.connect(agent_id="fmt")
        recs = [conn.store(x, 2, 1, "format %d" % x) for x in range(1, 6)]
        self.sync(conn)
        self.assertEqual(index_shape(index), shape)
        self.assertStatus([])
        self.assertEqual(self.git("diff", "--cached", "--name-only"), "")
        self.assertCommitted("HEAD", recs)
        recs = [conn.store(1, 2, 2, "again")]
        self.sync(conn)
        self.assertEqual(index_shape(index), shape)
        self.assertStatus([])
        self.user_commit("user.txt", "user\n")
        self.assertEqual(self.git("show", "--name-only", "--format=",
                                  "HEAD"), "user.txt\n")
        return shape

    def test_split_index(self):
        shape = self.check_kept([("config", "core.splitIndex", "true"),
                                 ("update-index", "--split-index")])
        self.assertIn("link", shape[1])

    def test_index_v4(self):
        shape = self.check_kept([("config", "index.version", "4"),
                                 ("update-index", "--index-version", "4")])
        self.assertEqual(shape[0], 4)

    def test_untracked_cache(self):
        shape = self.check_kept([("config", "core.untrackedCache", "true"),
                                 ("update-index", "--untracked-cache")])
        self.assertIn("UNTR", shape[1])


class Stopped(GitCase):
    daemon_args = ("--commit-delay-ms", "60000")

    def test_unsyncable_index_stops_commits_until_fixed(self):
        conn = self.connect(agent_id="s")
        conn.store(1, 1, 1, "first")
        self.sync(conn)
        head = self.head()
        index = os.path.join(self.repo.gitdir, "index")
        with open(index, "rb") as f:
            good = f.read()
        with open(index, "wb") as f:
            f.write(b"DIRC\0\0\0\2\0\0\0\7" + b"garbage" * 8)
        recs = [conn.store(2, 1, 1, "while the index is broken")]
        err = self.assertRpcError(E_STORAGE, self.sync, conn)
        self.assertIn("index", err.message)
        health = self.health(conn)
        self.assertIsInstance(health["commits_stopped"], str, health)
        self.assertIn("index", health["commits_stopped"])
        self.assertIn("index", health["last_error"])
        self.assertEqual(health["status"], "degraded")
        self.assertGreater(health["pending"], 0)
        self.assertEqual(self.head(), head)  # the branch did not move
        st = subprocess.run([os.environ["VMEM"], "status"],
                            env=dict(os.environ, VMEM_SOCKET=self.daemon.sock,
                                     VMEM_NO_AUTOSTART="1"),
                            capture_output=True, text=True, timeout=30)
        self.assertIn("stopped:", st.stdout)
        self.assertEqual(conn.get(2, 1, 1), recs[0])
        with open(index, "wb") as f:
            f.write(good)
        # Retried with back-off: it recovers by itself.
        self.assertTrue(wait_until(
            lambda: self.health(conn)["commits_stopped"] is None,
            10 * SCALE, 0.1), self.health(conn))
        self.assertCommitResumes(conn, [head], recs)
        self.assertStatus([])


class StaleLocks(GitCase):
    start_daemon = False

    def marker(self, locks):
        """The marker of a commit of a process that is gone, naming locks
        [(path, (dev, ino, btime_s, btime_ns))]."""
        dead = subprocess.Popen(["true"])
        dead.wait()
        os.makedirs(os.path.join(self.repo.gitdir, "vmem"), mode=0o700,
                    exist_ok=True)
        with open(os.path.join(self.repo.gitdir, "vmem", "committing"),
                  "w") as f:
            f.write("vmemd-commit 1\npid %d\nstart 1\n" % dead.pid)
            for path, ident in locks:
                f.write("lock %d %d %d %d %s\n" % (ident + (path,)))

    def identity(self, path):
        out = subprocess.run(["stat", "-c", "%d %i %W", path],
                             capture_output=True, text=True, check=True)
        dev, ino, birth = out.stdout.split()
        # statx birth time in ns: python's os.stat has no birth time on
        # Linux; take it from a statx-based probe
        ns = subprocess.run(["stat", "-c", "%w", path], capture_output=True,
                            text=True, check=True).stdout.strip()
        frac = ns.split(".")[1].split()[0] if "." in ns else "0"
        return int(dev), int(ino), int(birth), int(frac[:9].ljust(9, "0"))

    def test_our_index_lock_is_gone_before_git_is_looked_at(self):
        # The killed commit's own index.lock is removed before start-up
        # looks at what git is doing: it is never taken for a git
        # command at work (the tree yielded, the replay held back).
        self.git("commit", "-q", "--allow-empty", "-m", "base")
        index_lock = os.path.join(self.repo.gitdir, "index.lock")
        with open(index_lock, "w"):
            pass
        self.marker([(index_lock, self.identity(index_lock))])
        self.daemon = self.start_vmemd("--commit-delay-ms", "0")
        self.assertFalse(os.path.exists(index_lock), "our lock stayed")
        conn = self.connect(agent_id="s")
        conn.store(1, 1, 1, "committed at once")
        self.sync(conn)
        log = self.daemon.stderr()
        self.assertIn("removed the git lock files", log)
        self.assertNotIn("leaving the working tree to git", log)

    def test_ours_removed_a_later_one_kept_and_reported(self):
        self.git("commit", "-q", "--allow-empty", "-m", "base")
        index_lock = os.path.join(self.repo.gitdir, "index.lock")
        ref_lock = os.path.join(self.repo.gitdir, "refs", "heads",
                                "%s.lock" % self.git(
                                    "branch", "--show-current").strip())
        # Ours: the ref lock the crashed commit made (identity recorded).
        with open(ref_lock, "w"):
            pass
        ours = self.identity(ref_lock)
        # Recorded too, but gone and made again since by a git command
        # (within the same second: the old time window would remove it).
        with open(index_lock, "w"):
            pass
        gone = self.identity(index_lock)
        os.unlink(index_lock)
        with open(index_lock, "w") as f:
            f.write("a running git command's\n")
        self.marker([(ref_lock, ours), (index_lock, gone)])
        self.daemon = self.start_vmemd("--commit-delay-ms", "0")
        self.assertFalse(os.path.exists(ref_lock), "our lock stayed")
        self.assertTrue(os.path.exists(index_lock), "their lock removed")
        conn = self.connect(agent_id="s")
        health = self.health(conn)
        self.assertEqual(health["git_locks"], [index_lock])
        log = self.daemon.stderr()
        self.assertIn("removed the git lock files", log)
        self.assertIn("left alone", log)
        conn.store(1, 1, 1, "waits for their lock")
        self.assertDeferred(conn, "index.lock")
        os.unlink(index_lock)
        self.sync(conn)
        self.assertStatus([])


if __name__ == "__main__":
    vt.main()

#!/usr/bin/env python3
"""The vmemd process: single instance, socket safety, signals, shutdown and
a client that never reads."""

import json
import os
import re
import signal
import socket
import shutil
import stat
import subprocess
import time

import vmemtest as vt

RSS_GROWTH_MAX_KIB = 64 * 1024


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class SingleInstance(vt.VmemTestCase):
    def assertRefusedAsRunning(self, second):
        second.spawn()
        rc = second.wait(vt.scaled(10))
        self.assertEqual(rc, 3, second.stderr())
        self.assertIn("already running", second.stderr())

    def test_second_daemon_same_socket(self):
        self.assertRefusedAsRunning(self.new_daemon(name="second"))
        self.connect().call("server.hello")  # the first still serves

    def test_second_daemon_other_socket(self):
        other = self.repo.path("other.sock")
        self.assertRefusedAsRunning(self.new_daemon(sock=other,
                                                    name="second"))
        self.assertFalse(vt.accepts(other))
        self.connect().call("server.hello")

    def test_many_daemons_at_once(self):
        self.daemon.stop()
        ds = [self.new_daemon(sock=self.repo.path("s%d.sock" % i),
                              name="d%d" % i) for i in range(6)]
        for d in ds:
            d.spawn()
        time.sleep(1.0)
        running = [d for d in ds if d.running()]
        self.assertEqual(len(running), 1, [d.stderr() for d in ds])
        for d in ds:
            if d is not running[0]:
                self.assertEqual(d.wait(), 3, d.stderr())
        self.assertTrue(vt.wait_until(lambda: vt.accepts(running[0].sock),
                                      5.0))
        running[0].stop()

    def test_restart_after_stop_takes_the_lock_again(self):
        self.daemon.stop()
        self.daemon.start()
        self.connect().call("server.hello")


class SocketSafety(vt.VmemTestCase):
    start_daemon = False

    def test_socket_and_directory_modes(self):
        sock = self.repo.path("run", "d.sock")
        self.start_vmemd(sock=sock)
        self.assertTrue(stat.S_ISSOCK(os.stat(sock).st_mode))
        self.assertEqual(mode_of(sock), 0o600)
        self.assertEqual(mode_of(os.path.dirname(sock)), 0o700)

    def test_stale_socket_replaced(self):
        sock = self.repo.path("stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(sock)
        s.close()
        self.assertTrue(os.path.exists(sock))
        d = self.start_vmemd(sock=sock)
        self.assertEqual(d.connect().call("server.hello")["server"], "vmemd")

    def test_regular_file_at_socket_path_not_removed(self):
        sock = self.repo.path("not-a-socket")
        with open(sock, "w") as f:
            f.write("precious")
        d = self.new_daemon(sock=sock).spawn()
        rc = d.wait()
        self.assertNotEqual(rc, 0)
        with open(sock) as f:
            self.assertEqual(f.read(), "precious")

    def refuse_directory(self, prepare):
        sub = self.repo.path("sockdir")
        os.mkdir(sub, 0o700)
        prepare(sub)
        d = self.new_daemon(sock=os.path.join(sub, "d.sock")).spawn()
        rc = d.wait()
        self.assertNotEqual(rc, 0, "vmemd accepted an unsafe directory")
        self.assertTrue(d.stderr().strip(), "no message on stderr")
        self.assertFalse(os.path.exists(os.path.join(sub, "d.sock")))

    def test_world_writable_directory_refused(self):
        self.refuse_directory(lambda sub: os.chmod(sub, 0o777))

    def test_group_accessible_directory_refused(self):
        self.refuse_directory(lambda sub: os.chmod(sub, 0o770))

    def test_directory_of_another_user_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown")
        self.refuse_directory(lambda sub: os.chown(sub, 65534, 65534))

    def test_peer_of_another_user_refused(self):
        python = shutil.which("python3", path="/usr/bin:/bin")
        if os.geteuid() != 0 or not python:
            self.skipTest("needs root and a system python3")
        d = self.start_vmemd(sock=self.repo.path("peer", "d.sock"))
        os.chmod(self.repo.tmp, 0o711)
        os.chmod(os.path.dirname(d.sock), 0o711)
        os.chmod(d.sock, 0o666)  # let the kernel pass; the daemon must not
        probe = ("import socket, sys\n"
                 "s = socket.socket(socket.AF_UNIX)\n"
                 "s.settimeout(5)\n"
                 "s.connect(sys.argv[1])\n"
                 "try:\n"
                 "    s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,"
                 "\"method\":\"server.hello\"}\\n')\n"
                 "    print(s.recv(4096).decode())\n"
                 "except OSError as e:\n"
                 "    print('error', e)\n")
        p = subprocess.run([python, "-c", probe, d.sock],
                           user=65534, group=65534, capture_output=True,
                           text=True, timeout=vt.scaled(20))
        self.assertEqual(p.returncode, 0, p.stderr)
        vt.diag("another user got: %r" % p.stdout.strip())
        self.assertNotIn('"result"', p.stdout)
        self.connect(daemon=d).call("server.hello")

    def test_socket_path_too_long_refused(self):
        deep = self.repo.path("d" * 60, "e" * 60)
        os.makedirs(deep, 0o700)
        d = self.new_daemon(sock=os.path.join(deep, "vmemd.sock")).spawn()
        self.assertNotEqual(d.wait(), 0)

    def test_not_a_repository_refused(self):
        plain = self.repo.path("plain")
        os.mkdir(plain)
        d = self.new_daemon(root=plain, name="plain").spawn()
        self.assertNotEqual(d.wait(), 0)


class Stopping(vt.VmemTestCase):
    def store_many(self, n=50):
        conn = self.connect(agent_id="stop")
        return [conn.store(x, 3, 2, "before stop %d" % x)
                for x in range(1, n + 1)]

    def test_sigterm_exits_0_with_files_written(self):
        recs = self.store_many()
        self.daemon.stop()  # asserts exit status 0
        for rec in recs:
            self.assertFileMatches(rec, timeout=0)
        self.assertEqual(self.repo.temp_files(), [])
        self.assertFalse(vt.accepts(self.daemon.sock))

    def test_sigint_exits_0(self):
        recs = self.store_many(5)
        self.daemon.proc.send_signal(signal.SIGINT)
        self.assertEqual(self.daemon.wait(), 0, self.daemon.stderr())
        for rec in recs:
            self.assertFileMatches(rec, timeout=0)

    def test_server_shutdown(self):
        recs = self.store_many(20)
        conn = self.connect()
        self.assertIs(conn.call("server.shutdown"), True)
        self.assertEqual(self.daemon.wait(), 0, self.daemon.stderr())
        self.assertTrue(conn.at_eof(2.0))
        for rec in recs:
            self.assertFileMatches(rec, timeout=0)

    def test_sigterm_with_idle_and_busy_clients(self):
        idle = self.connect()
        busy = self.connect(agent_id="busy")
        for x in range(1, 201):
            busy.request("decision.store", {"coordinate": vt.coord(x, 1, 4),
                                            "content": "q%d" % x})
        self.daemon.proc.send_signal(signal.SIGTERM)
        acked = []
        try:
            for x in range(1, 201):
                resp = busy.read_json()
                if "result" in resp:
                    acked.append(resp["result"])
                else:
                    self.assertEqual(resp["error"]["data"]["type"],
                                     "UnavailableError", resp)
        except EOFError:
            pass
        self.assertEqual(self.daemon.wait(), 0, self.daemon.stderr())
        self.assertTrue(idle.at_eof(2.0))
        for rec in acked:
            self.assertFileMatches(rec, timeout=0)


class SlowReader(vt.VmemTestCase):
    BIG = 100 * 1024 - 100

    def flood(self, sock, line, quiet_for=2.0, limit_s=30.0):
        """Send line repeatedly until sends block for quiet_for seconds.
        Returns (bytes sent, "blocked" | "closed" | "limit")."""
        sock.setblocking(False)
        payload = line * 64
        sent = 0
        last_progress = start = time.monotonic()
        while time.monotonic() - start < limit_s:
            try:
                sent += sock.send(payload)
                last_progress = time.monotonic()
            except BlockingIOError:
                if time.monotonic() - last_progress >= quiet_for:
                    return sent, "blocked"
                time.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                return sent, "closed"
        return sent, "limit"

    def test_client_that_never_reads(self):
        conn = self.connect(agent_id="big")
        conn.store(1, 1, 2, "b" * self.BIG)
        for _ in range(20):
            self.assertEqual(len(conn.get(1, 1, 2)["content"]), self.BIG)
        rss_before = self.daemon.rss_kib()
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(slow.close)
        slow.connect(self.daemon.sock)
        line = (json.dumps({"jsonrpc": "2.0", "id": 1,
                            "method": "decision.get",
                            "params": {"coordinate": vt.coord(1, 1, 2)}})
                + "\n").encode()
        sent, how = self.flood(slow, line)
        growth = self.daemon.rss_kib() - rss_before
        vt.diag("sent %d bytes (%d requests, %s); RSS grew %d KiB"
                % (sent, sent // len(line), how, growth))
        self.assertLess(growth, RSS_GROWTH_MAX_KIB)
        other = self.connect()
        t0 = time.monotonic()
        self.assertEqual(len(other.get(1, 1, 2)["content"]), self.BIG)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertTrue(self.daemon.running())
        slow.close()
        other.call("server.hello")
        self.daemon.stop()


class SmallBacklog(vt.VmemTestCase):
    """Back-pressure must pause a pipelining client, never stall it."""
    daemon_args = ("--output-backlog", "4096")

    def test_pipelined_requests_past_the_backlog_all_answered(self):
        conn = self.connect(agent_id="bp")
        rec = conn.store(2, 1, 2, "p" * 800)
        line = json.dumps({"jsonrpc": "2.0", "id": 7,
                           "method": "decision.get",
                           "params": {"coordinate": vt.coord(2, 1, 2)}})
        conn.send_raw((line + "\n").encode() * 20)
        for _ in range(20):
            reply = json.loads(conn.read_line(timeout=5.0))
            self.assertEqual(reply["result"], rec)
        self.daemon.stop()


class Stats(vt.VmemTestCase):
    def test_counts_latencies_layers_queues(self):
        conn = self.connect(agent_id="st")
        conn.store(1, 1, 1, "a")
        conn.store(1, 1, 2, "b")
        conn.store(2, 1, 2, "c")
        for _ in range(10):
            conn.get(1, 1, 1)
        self.assertRpcError(vt.E_COORD, conn.get, 0, 1, 1)
        st = conn.call("server.stats")
        get = st["methods"]["decision.get"]
        self.assertEqual((get["count"], get["errors"]), (11, 1))
        self.assertLessEqual(get["p50_us"], get["p99_us"])
        self.assertLessEqual(get["p99_us"], get["max_us"])
        self.assertGreater(get["p50_us"], 0)
        self.assertEqual(st["methods"]["decision.store"]["count"], 3)
        self.assertNotIn("decision.delete", st["methods"])
        self.assertEqual(st["decisions_by_layer"],
                         {"1": 1, "2": 2, "3": 0, "4": 0})
        self.assertEqual(set(st["queues"]), {"log", "files", "commit"})
        self.assertGreaterEqual(st["connections"], 1)
        self.assertGreater(st["resident_bytes"], 1 << 20)
        self.assertEqual((st["leases"], st["subscriptions"]), (0, 0))
        other = self.connect()
        other.call("lock.acquire", {"coordinates": [vt.coord(3, 1, 2)]})
        other.call("watch.subscribe", {})
        other.call("watch.subscribe", {"x_range": [1, 2]})
        st = conn.call("server.stats")
        self.assertEqual((st["leases"], st["subscriptions"]), (1, 2))
        other.close()
        self.assertTrue(vt.wait_until(
            lambda: conn.call("server.stats")["subscriptions"] == 0))
        self.assertEqual(conn.call("server.stats")["leases"], 0)
        self.assertRpcError(vt.E_VALUE, conn.call, "server.stats", {"x": 1})


class Logs(vt.VmemTestCase):
    """One line per event: a UTC timestamp in the foreground, a syslog
    priority prefix under systemd (JOURNAL_STREAM); connections, commits
    and quarantines logged; successful requests not (above debug)."""
    start_daemon = False

    LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                      r"vmemd\[\d+\] (error|warning|notice|info|debug): .+$")

    def lines(self, d):
        return [l for l in d.stderr().splitlines() if not l.startswith("---")]

    def test_foreground_lines_timestamped(self):
        d = self.start_vmemd()
        conn = self.connect(daemon=d, agent_id="logs")
        conn.store(1, 1, 2, "logged?")
        # The start-up scan's line comes when git answers, maybe later.
        self.assertTrue(vt.wait_until(
            lambda: "differ from HEAD (git status)" in d.stderr()),
            d.stderr())
        before = len(self.lines(d))
        for _ in range(50):
            conn.get(1, 1, 2)
            conn.store(1, 1, 2, "again", overwrite=True)
        # Successful requests leave no line.
        self.assertEqual(len(self.lines(d)), before)
        conn.close()
        self.assertTrue(vt.wait_until(
            lambda: "connection of pid %d closed after" % os.getpid()
            in d.stderr()), d.stderr())
        d.stop()
        for line in self.lines(d):
            self.assertRegex(line, self.LINE)

    def test_priority_prefixes_under_systemd(self):
        env = dict(os.environ, JOURNAL_STREAM="8:12345")
        d = self.start_vmemd(env=env)
        self.connect(daemon=d).call("server.hello")
        d.stop()
        lines = self.lines(d)
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^<[3-7]>[^<]")
        self.assertTrue(any(l.startswith("<6>serving ") for l in lines),
                        lines)

    def test_quarantine_is_a_warning(self):
        path = self.repo.decision_path(2, 1, 2)
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as f:
            f.write("{not json")
        d = self.start_vmemd()
        self.assertRegex(d.stderr(), r"warning: quarantined .*x-002")
        d.stop()



# --------------------------------------------------------------------------
# Daemons that go away by themselves


class TreeRemoved(vt.VmemTestCase):
    """A daemon whose working tree or git directory goes away exits 0,
    saying why, without trying to write into what is gone."""
    daemon_args = ("--commit-delay-ms", "5000")

    def assertLeaves(self, d, words):
        rc = d.wait()  # a bounded wait (scaled), then a failure
        err = d.stderr()
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"notice: .*%s.*: exiting" % words)
        self.assertNotIn("stopping with decision files not written", err)
        vt.diag([l for l in err.splitlines() if ": exiting" in l][-1])

    def test_working_tree_removed(self):
        conn = self.connect(agent_id="gone")
        self.assertFileMatches(conn.store(1, 2, 2, "soon gone"))
        shutil.rmtree(self.repo.root)
        self.assertLeaves(self.daemon, "the working tree .* was removed")
        self.assertTrue(conn.at_eof())

    def test_git_directory_removed(self):
        self.connect(agent_id="gone").store(1, 2, 2, "soon gone")
        shutil.rmtree(self.repo.gitdir)
        self.assertLeaves(self.daemon,
                          "the (git|state) directory .* was removed")

    def test_state_directory_removed(self):
        shutil.rmtree(os.path.join(self.repo.gitdir, "vmem"))
        self.assertLeaves(self.daemon, "the state directory .* was removed")

    def test_tree_replaced_at_the_same_path(self):
        os.rename(self.repo.root, self.repo.path("old-tree"))
        os.mkdir(self.repo.root)
        subprocess.run(["git", "init", "-q", self.repo.root], check=True)
        self.assertLeaves(self.daemon, "replaced by another directory")

    def test_sigterm_after_removal_exits_0_at_once(self):
        # The stop used to try to write the files into the removed tree
        # until it gave up after 10 s, and exit 1.
        conn = self.connect(agent_id="gone")
        recs = [conn.store(x, 1, 2, "pending %d" % x) for x in range(1, 30)]
        # written (so the removal is not raced by the writer), not yet
        # committed nor cut from the log
        self.assertFileMatches(recs[-1])
        shutil.rmtree(self.repo.root)
        self.daemon.proc.send_signal(signal.SIGTERM)
        self.assertLeaves(self.daemon, "was removed")

    def test_moved_tree_keeps_every_acknowledged_write(self):
        conn = self.connect(agent_id="moved")
        recs = [conn.store(x, 2, 3, "before the move %d" % x)
                for x in range(1, 40)]
        moved = self.repo.path("moved")
        os.rename(self.repo.root, moved)
        self.assertLeaves(self.daemon, "the working tree .* was removed")
        d = self.new_daemon(root=moved, name="moved").start()
        conn = d.connect()
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        d.stop()

    def test_linked_worktree_removed(self):
        subprocess.run(["git", "-C", self.repo.root, "-c", "user.name=U",
                        "-c", "user.email=u@example.com", "commit", "-q",
                        "--allow-empty", "-m", "base"], check=True)
        wt = self.repo.path("wt")
        subprocess.run(["git", "-C", self.repo.root, "worktree", "add", "-q",
                        wt], check=True)
        d = self.new_daemon(root=wt, sock=self.repo.path("wt.sock"),
                            name="wt").start()
        self.connect(daemon=d, agent_id="wt").store(3, 1, 2, "in a worktree")
        subprocess.run(["git", "-C", self.repo.root, "worktree", "remove",
                        "--force", wt], check=True)
        self.assertLeaves(d, "was removed")
        self.assertTrue(self.daemon.running())  # the main tree's stays


class IdleExit(vt.VmemTestCase):
    """A daemon a client started in the background exits after
    idle_exit_s without connections, writes or commits; one run with
    --foreground (or by systemd) stays unless the option is given."""
    start_daemon = False

    def cli_env(self, config):
        xdg = self.repo.path("xdg")
        os.makedirs(os.path.join(xdg, "vmem"), exist_ok=True)
        with open(os.path.join(xdg, "vmem", "config"), "w") as f:
            f.write(config)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("VMEM_", "NOTIFY_SOCKET", "LISTEN_",
                                    "JOURNAL_STREAM"))}
        env.update(VMEMD=vt.VMEMD, XDG_CONFIG_HOME=xdg,
                   VMEM_AGENT_ID="idle-tester")
        return env

    def vmem(self, env, *args):
        p = subprocess.run([vt.VMEM, "--socket", self.repo.path("cli.sock"),
                            "--repo", self.repo.root] + list(args),
                           capture_output=True, text=True, env=env,
                           timeout=vt.scaled(60))
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def daemon_log(self):
        try:
            with open(os.path.join(self.repo.gitdir, "vmem",
                                   "vmemd.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def test_auto_started_daemon_exits_when_idle(self):
        env = self.cli_env("idle_exit_s = 1\ncommit_delay_ms = 100\n")
        self.vmem(env, "store", "4", "2", "2", "then nothing")
        self.assertTrue(self.repo.lock_held(), "no daemon was started")
        gone = vt.wait_until(lambda: not self.repo.lock_held(),
                             vt.DEFAULT_TIMEOUT, 0.1)
        log = self.daemon_log()
        self.assertTrue(gone, "the daemon stays:\n%s" % log)
        self.assertIn("exiting (idle_exit_s)", log)
        self.assertFalse(vt.accepts(self.repo.path("cli.sock")))
        # it went the graceful way: file written and committed
        self.assertIn("then nothing", self.repo.read_decision(4, 2, 2)
                      ["content"])
        self.assertIn("all decisions written and committed", log)
        # and a client starts a new one when needed
        self.assertIn("then nothing", self.vmem(env, "get", "4", "2", "2"))
        self.assertTrue(vt.wait_until(lambda: not self.repo.lock_held(),
                                      vt.DEFAULT_TIMEOUT, 0.1))

    def test_default_depends_on_how_it_started(self):
        # in the background, started by a client: 900 s
        env = self.cli_env("log_level = debug\n")
        self.vmem(env, "status")
        self.assertTrue(vt.wait_until(
            lambda: "config: idle_exit_s = 900 (default)" in
            self.daemon_log()), self.daemon_log())
        self.assertIn("exiting after 900 s without a connection",
                      self.daemon_log())
        self.vmem(env, "daemon", "stop")
        # with --foreground (or under systemd): never, unless told (the
        # configuration is logged right after the socket listens)
        d = self.start_vmemd("--log-level", "debug", env=env)
        self.assertTrue(vt.wait_until(lambda: "serving " in d.stderr()),
                        d.stderr())
        self.assertIn("config: idle_exit_s = 0 (default)", d.stderr())
        self.assertNotIn("exiting after", d.stderr())
        d.stop()
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(notify.close)
        notify.bind(self.repo.path("notify.sock"))
        d = self.start_vmemd("--idle-exit-s", "5", "--log-level", "debug",
                             name="told",
                             env=dict(env,
                                      NOTIFY_SOCKET=self.repo.path(
                                          "notify.sock")))
        self.assertTrue(vt.wait_until(
            lambda: "exiting after 5 s without a connection" in d.stderr()),
            d.stderr())
        self.assertIn("config: idle_exit_s = 5\n", d.stderr())
        d.stop()

    def test_waits_for_connections_and_commits(self):
        d = self.start_vmemd("--idle-exit-s", "1", "--commit-delay-ms",
                             "2500")
        conn = self.connect(daemon=d, agent_id="busy")
        conn.store(6, 2, 2, "to commit")
        # a connection keeps it, idle or not
        time.sleep(2.5)
        self.assertTrue(d.running(), d.stderr())
        conn.close()
        self.assertEqual(d.wait(), 0, d.stderr())
        err = d.stderr()
        # the pending commit was made before the idle time started
        self.assertRegex(err, r"committed [0-9a-f]+ .*\n(.*\n)*.*idle for "
                         r"1 s .*exiting \(idle_exit_s\)")
        out = subprocess.run(["git", "-C", self.repo.root, "log",
                              "--format=%s"], capture_output=True,
                             text=True).stdout
        self.assertIn("vector-memory: 1 decisions", out)


# --------------------------------------------------------------------------
# A long start says what it is doing


class StartProgress(vt.VmemTestCase):
    """A start that replays a large log and writes and loads many files
    logs its progress (VMEMD_PROGRESS_MS=0: every report)."""
    start_daemon = False

    def test_big_log_replay_reports_progress(self):
        n, per_batch = 2100, 100
        # 2100 distinct coordinates: 10 in each of x-001..x-210
        payloads = [vt.wal_record_payload(1 + i // 10, 1 + i % 5,
                                          2 + (i // 5) % 2,
                                          "x" * 1000 + " %d" % i)
                    for i in range(n)]
        batches = [payloads[i:i + per_batch] for i in range(0, n, per_batch)]
        os.makedirs(os.path.join(self.repo.gitdir, "vmem"), mode=0o700)
        with open(os.path.join(self.repo.gitdir, "vmem", "wal"), "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(vt.wal_bytes(batches))
        env = dict(os.environ, VMEMD_PROGRESS_MS="0")
        d = self.start_vmemd(env=env, name="progress")
        lines = [l.split("start-up: ", 1)[1] for l in d.stderr().splitlines()
                 if "info: start-up: " in l]
        vt.diag(*lines[:8])
        replay = [l for l in lines if l.startswith("replaying")]
        self.assertGreaterEqual(len(replay), 3, lines)
        self.assertRegex(replay[0], r"^replaying the write-ahead log: 0\.0 "
                         r"of 2\.\d MiB, 0 records$")
        counts = [int(re.search(r"(\d+) records", l).group(1))
                  for l in replay]
        self.assertEqual(counts, sorted(counts))
        self.assertGreater(counts[-1], 1500)
        self.assertLessEqual(counts[-1], n)
        writing = [l for l in lines if l.startswith("writing")]
        self.assertIn("writing the replayed decisions to their files: 1024 "
                      "of 2100", writing)
        self.assertIn("writing the replayed decisions to their files: 2048 "
                      "of 2100", writing)
        loading = [l for l in lines if l.startswith("loading")]
        self.assertTrue(loading, lines)
        # x-001..x-210 and metadata.json
        self.assertRegex(loading[-1], r"^loading the decision files: 2100 "
                         r"loaded, 211 of 211 entries of \.vector-memory$")
        files = [int(l.split()[4]) for l in loading]
        self.assertEqual(files, sorted(files))
        self.assertLess(files[0], 100)
        conn = self.connect(daemon=d)
        self.assertEqual(conn.call("server.health")["decisions"], n)
        self.assertIn(" 2099", conn.get(210, 5, 3)["content"])
        d.stop()

    def test_short_start_says_nothing(self):
        d = self.start_vmemd()
        self.assertNotIn("start-up:", d.stderr())
        d.stop()


if __name__ == "__main__":
    vt.main()

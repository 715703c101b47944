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


if __name__ == "__main__":
    vt.main()

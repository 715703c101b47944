#!/usr/bin/env python3
"""vmemd under systemd, tested without a running systemd: the notify
protocol read from a datagram socket the test owns, socket activation
through systemd-socket-activate, the shipped units checked by
systemd-analyze verify, and `vmem service` against a fake systemctl that
records its arguments."""

import os
import shutil
import signal
import socket
import subprocess
import time

import vmemtest as vt

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = os.path.join(HERE, "..", "..", "systemd")

FAKE_SYSTEMCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$SYSTEMCTL_LOG"
if [ "$*" = "--user show-environment" ]; then
    exit "${SYSTEMCTL_BUS_EXIT:-0}"
fi
exit "${SYSTEMCTL_EXIT:-0}"
"""


class Notify(vt.VmemTestCase):
    """READY=1 once the daemon serves, STATUS lines, the watchdog from the
    loop, STOPPING=1 at a stop."""
    start_daemon = False

    def setUp(self):
        super().setUp()
        self.nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.npath = self.repo.path("notify.sock")
        self.nsock.bind(self.npath)
        self.addCleanup(self.nsock.close)

    def recv(self, timeout=vt.scaled(5.0)):
        self.nsock.settimeout(timeout)
        return self.nsock.recv(4096).decode()

    def messages_until(self, predicate, timeout=vt.scaled(10.0)):
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.recv(max(0.05, deadline - time.monotonic()))
            except socket.timeout:
                break
            got.append(msg)
            if predicate(msg):
                return got
        self.fail("no matching notification; got %r" % got)

    def start_notified(self, **env):
        e = dict(os.environ, NOTIFY_SOCKET=self.npath, **env)
        d = self.new_daemon(env=e)
        d.spawn()
        return d

    def test_ready_after_listening_then_stopping(self):
        d = self.start_notified()
        got = self.messages_until(lambda m: "READY=1" in m.split("\n"))
        ready = got[-1]
        # Ready means served: a connection works at once.
        self.assertTrue(vt.accepts(d.sock))
        self.assertRegex(ready, r"(^|\n)STATUS=serving .* \(\d+ decisions\)")
        self.assertNotIn("STOPPING=1", "".join(got))
        conn = self.connect(daemon=d, agent_id="notified")
        conn.store(1, 1, 1, "ready")
        os.kill(d.pid, signal.SIGTERM)
        got = self.messages_until(lambda m: "STOPPING=1" in m.split("\n"))
        self.assertIn("STATUS=stopping", got[-1])
        self.assertEqual(d.wait(), 0)

    def test_long_start_extends_the_timeout(self):
        # a log to replay; every progress report sent (VMEMD_PROGRESS_MS=0)
        os.makedirs(os.path.join(self.repo.gitdir, "vmem"), mode=0o700)
        batches = [[vt.wal_record_payload(x, 1, 2, "replayed %d" % x)
                    for x in range(1, 21)]]
        with open(os.path.join(self.repo.gitdir, "vmem", "wal"), "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(vt.wal_bytes(batches))
        d = self.start_notified(VMEMD_PROGRESS_MS="0")
        got = self.messages_until(lambda m: "READY=1" in m.split("\n"))
        progress = [m for m in got if "EXTEND_TIMEOUT_USEC=" in m]
        vt.diag(*progress[:3])
        self.assertTrue(progress, got)
        for m in progress:
            fields = dict(f.split("=", 1) for f in m.split("\n"))
            self.assertEqual(fields["EXTEND_TIMEOUT_USEC"], "60000000")
            self.assertTrue(fields["STATUS"].startswith("starting: "), m)
        self.assertRegex(progress[0], r"STATUS=starting: replaying the "
                         r"write-ahead log: 0\.0 of \d+\.\d MiB, 0 records")
        self.assertTrue(any("loading the decision files" in m
                            for m in progress), progress)
        # none after READY=1: the start is over
        self.assertNotIn("EXTEND_TIMEOUT_USEC", got[-1])
        self.assertEqual(self.connect(daemon=d).get(20, 1, 2)["content"],
                         "replayed 20")
        d.stop()

    def test_watchdog_pings_from_the_loop(self):
        d = self.start_notified(WATCHDOG_USEC="400000")
        self.messages_until(lambda m: "READY=1" in m.split("\n"))
        started = time.monotonic()
        pings = 0
        while time.monotonic() - started < 1.3:
            try:
                if "WATCHDOG=1" in self.recv(1.0).split("\n"):
                    pings += 1
            except socket.timeout:
                break
        # Every half interval (200 ms): about six in 1.3 s.
        self.assertGreaterEqual(pings, 4)
        d.stop()

    def test_watchdog_for_another_pid_ignored(self):
        d = self.start_notified(WATCHDOG_USEC="200000", WATCHDOG_PID="1")
        self.messages_until(lambda m: "READY=1" in m.split("\n"))
        try:
            while True:
                self.assertNotIn("WATCHDOG=1", self.recv(0.6).split("\n"))
        except socket.timeout:
            pass
        d.stop()

    def test_no_notify_socket_no_messages(self):
        d = self.new_daemon().start()
        try:
            self.recv(0.5)
            self.fail("a datagram without NOTIFY_SOCKET")
        except socket.timeout:
            pass
        d.stop()


class SocketActivation(vt.VmemTestCase):
    """systemd-socket-activate binds the socket and execs vmemd with
    LISTEN_FDS=1: vmemd serves on it and leaves it in place."""
    start_daemon = False

    def setUp(self):
        super().setUp()
        if not shutil.which("systemd-socket-activate"):
            self.fail("systemd-socket-activate is not installed")
        self.sdir = self.repo.path("sd")
        os.mkdir(self.sdir, 0o700)
        self.sock = os.path.join(self.sdir, "activated.sock")

    def activate(self, *args):
        log = open(self.repo.path("activate.stderr"), "wb")
        self.addCleanup(log.close)
        p = subprocess.Popen(
            ["systemd-socket-activate", "-l", self.sock, vt.VMEMD,
             "--foreground", "--repo", self.repo.root] + list(args),
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        # The socket file appears at bind, a moment before listen().
        self.assertTrue(vt.wait_until(lambda: vt.accepts(self.sock),
                                      timeout=vt.scaled(5)))
        return p

    def stderr(self):
        with open(self.repo.path("activate.stderr"), "rb") as f:
            return f.read().decode(errors="replace")

    def test_serves_on_the_passed_socket(self):
        p = self.activate()
        try:
            conn = vt.Conn(self.sock, agent_id="activated")
            rec = conn.store(2, 1, 2, "through systemd's socket")
        except EOFError as e:
            # Say what the daemon said: once seen under a loaded CI run.
            self.fail("%s; exit %s; daemon's stderr:\n%s"
                      % (e, p.poll(), self.stderr()))
        self.assertEqual(conn.get(2, 1, 2), rec)
        conn.close()
        # Our own daemon started on the socket systemd made, not a new one.
        self.assertIn("serving", self.stderr())
        self.assertIn("activated.sock", self.stderr())
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=vt.scaled(10)), 0)
        # The socket is systemd's: vmemd leaves it.
        self.assertTrue(os.path.exists(self.sock))
        self.assertEqual(self.repo.read_decision(2, 1, 2)["content"],
                         "through systemd's socket")

    def test_warns_when_clients_would_look_elsewhere(self):
        p = self.activate()
        self.assertTrue(vt.wait_until(lambda: "clients of this tree look for"
                                      in self.stderr(), timeout=vt.scaled(5)),
                        self.stderr())
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=vt.scaled(10))

    def test_several_sockets_refused(self):
        other = os.path.join(self.sdir, "second.sock")
        log = open(self.repo.path("activate.stderr"), "wb")
        self.addCleanup(log.close)
        p = subprocess.Popen(
            ["systemd-socket-activate", "-l", self.sock, "-l", other,
             vt.VMEMD, "--foreground", "--repo", self.repo.root],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        # The activator execs vmemd on the first connection (the socket
        # file appears at bind, a moment before listen()).
        self.assertTrue(vt.wait_until(lambda: vt.accepts(self.sock),
                                      timeout=vt.scaled(5)))
        self.assertNotEqual(p.wait(timeout=vt.scaled(10)), 0)
        self.assertIn("several sockets", self.stderr())


class UnitFiles(vt.VmemTestCase):
    start_daemon = False

    def verify(self, exe, tag):
        """systemd-analyze --user verify on instances of the shipped
        templates with ExecStart at exe: (exit status, output)."""
        if not shutil.which("systemd-analyze"):
            self.fail("systemd-analyze is not installed")
        tmp = self.repo.path("units-" + tag)
        run = self.repo.path("run-" + tag)
        os.mkdir(tmp)
        os.mkdir(run, 0o700)
        key = "0123456789abcdef"
        for name in ("vmemd@.socket", "vmemd@.service"):
            with open(os.path.join(UNITS, name + ".in")) as f:
                text = f.read().replace("@VMEMD@", exe)
            with open(os.path.join(tmp, name.replace("@", "@" + key)),
                      "w") as f:
                f.write(text)
        p = subprocess.run(
            ["systemd-analyze", "--user", "verify", "--man=no",
             os.path.join(tmp, "vmemd@%s.socket" % key),
             os.path.join(tmp, "vmemd@%s.service" % key)],
            capture_output=True, text=True, timeout=vt.scaled(60),
            env=dict(os.environ, XDG_CONFIG_HOME=self.repo.path("cfg"),
                     XDG_RUNTIME_DIR=run))
        return p.returncode, (p.stdout + p.stderr).strip()

    def test_shipped_units_verify(self):
        rc, out = self.verify(os.path.realpath(vt.VMEMD), "ok")
        self.assertEqual((rc, out), (0, ""))

    def test_verify_catches_a_broken_unit(self):
        # The check above can fail: a missing program is an error.
        rc, out = self.verify("/nonexistent/vmemd", "broken")
        self.assertNotEqual(rc, 0)
        self.assertIn("/nonexistent/vmemd", out)


class Service(vt.VmemTestCase):
    """vmem service install/uninstall/status against a fake systemctl."""
    start_daemon = False

    def setUp(self):
        super().setUp()
        self.bin = self.repo.path("bin")
        os.mkdir(self.bin)
        fake = os.path.join(self.bin, "systemctl")
        with open(fake, "w") as f:
            f.write(FAKE_SYSTEMCTL)
        os.chmod(fake, 0o755)
        self.log = self.repo.path("systemctl.log")
        self.cfg = self.repo.path("config")
        self.run_dir = self.repo.path("run")
        os.mkdir(self.run_dir, 0o700)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if k not in ("VMEM_SOCKET", "VMEM_REPO")}
        env.update(PATH=self.bin + ":" + os.environ.get("PATH", ""),
                   SYSTEMCTL_LOG=self.log, XDG_CONFIG_HOME=self.cfg,
                   XDG_RUNTIME_DIR=self.run_dir, VMEMD=vt.VMEMD, **extra)
        return env

    def vmem(self, *args, **extra):
        return subprocess.run([vt.VMEM, "--repo", self.repo.root] +
                              list(args), capture_output=True, text=True,
                              env=self.env(**extra), timeout=vt.scaled(60))

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().splitlines()

    def key(self):
        # The key is the socket's name under XDG_RUNTIME_DIR.
        p = self.vmem("daemon", "start")
        self.assertEqual(p.returncode, 0, p.stderr)
        path = p.stdout.strip()
        self.assertTrue(path.startswith(self.run_dir + "/vmem/"), path)
        self.vmem("daemon", "stop")
        return os.path.basename(path)[:-len(".sock")]

    def test_install_writes_units_and_enables_the_socket(self):
        key = self.key()
        p = self.vmem("service", "install")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(self.calls(), [
            "--user show-environment",
            "--user daemon-reload",
            "--user enable --now vmemd@%s.socket" % key])
        units = os.path.join(self.cfg, "systemd", "user")
        with open(os.path.join(units, "vmemd@.service")) as f:
            service = f.read()
        exe = os.path.realpath(vt.VMEMD)
        self.assertIn("ExecStart=%s --foreground" % exe, service)
        self.assertIn("Type=notify", service)
        self.assertIn("EnvironmentFile=%E/vmem/trees/%i.env", service)
        with open(os.path.join(units, "vmemd@.socket")) as f:
            self.assertIn("ListenStream=%t/vmem/%i.sock", f.read())
        env_file = os.path.join(self.cfg, "vmem", "trees", key + ".env")
        with open(env_file) as f:
            self.assertEqual(f.read(), 'VMEM_REPO="%s"\n' % self.repo.root)
        self.assertEqual(os.stat(env_file).st_mode & 0o777, 0o600)
        # It says what it did.
        self.assertIn("wrote %s" % env_file, p.stdout)
        self.assertIn("$ systemctl --user enable --now vmemd@%s.socket" % key,
                      p.stdout)
        # A second install changes no file and says so.
        p = self.vmem("service", "install")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.count("up to date"), 3, p.stdout)

    def test_install_stops_a_running_daemon_first(self):
        self.assertEqual(self.vmem("daemon", "start").returncode, 0)
        p = self.vmem("service", "install")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("stopping the vmemd", p.stdout)
        self.assertFalse(self.repo.lock_held())

    def test_install_without_a_user_bus_changes_nothing(self):
        """No user manager: install says so before stopping the running
        daemon or writing anything."""
        self.assertEqual(self.vmem("daemon", "start").returncode, 0)
        self.addCleanup(self.vmem, "daemon", "stop")
        p = self.vmem("service", "install", SYSTEMCTL_BUS_EXIT="1")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("no user manager", p.stderr)
        self.assertIn("nothing was changed", p.stderr)
        self.assertNotIn("stopping", p.stdout)
        self.assertTrue(self.repo.lock_held(), "the daemon was stopped")
        self.assertEqual(self.calls(), ["--user show-environment"])
        self.assertFalse(os.path.exists(os.path.join(self.cfg, "systemd")))

    def test_uninstall_removes_what_install_wrote(self):
        key = self.key()
        self.assertEqual(self.vmem("service", "install").returncode, 0)
        os.unlink(self.log)
        p = self.vmem("service", "uninstall")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(self.calls(), [
            "--user disable --now vmemd@%s.socket" % key,
            "--user stop vmemd@%s.service" % key,
            "--user daemon-reload"])
        self.assertFalse(os.path.exists(
            os.path.join(self.cfg, "vmem", "trees", key + ".env")))
        self.assertFalse(os.path.exists(
            os.path.join(self.cfg, "systemd", "user", "vmemd@.service")))

    def test_uninstall_keeps_units_another_tree_uses(self):
        self.assertEqual(self.vmem("service", "install").returncode, 0)
        other = os.path.join(self.cfg, "vmem", "trees", "ffffffffffffffff.env")
        with open(other, "w") as f:
            f.write('VMEM_REPO="/elsewhere"\n')
        self.assertEqual(self.vmem("service", "uninstall").returncode, 0)
        self.assertTrue(os.path.exists(
            os.path.join(self.cfg, "systemd", "user", "vmemd@.service")))

    def test_status_asks_systemctl(self):
        key = self.key()
        p = self.vmem("service", "status")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.calls(), [
            "--user status --no-pager vmemd@%s.socket vmemd@%s.service"
            % (key, key)])
        self.assertIn("key:       %s" % key, p.stdout)
        # systemctl's "not running" (3) is a failure for us.
        p = self.vmem("service", "status", SYSTEMCTL_EXIT="3")
        self.assertEqual(p.returncode, 1)

    def test_failing_systemctl_reported(self):
        p = self.vmem("service", "install", SYSTEMCTL_EXIT="1")
        self.assertEqual(p.returncode, 1)
        self.assertIn("systemctl failed", p.stderr)

    def test_usage(self):
        for args in (("service",), ("service", "start"),
                     ("--json", "service", "status")):
            p = self.vmem(*args)
            self.assertEqual(p.returncode, 2, args)


if __name__ == "__main__":
    vt.main()

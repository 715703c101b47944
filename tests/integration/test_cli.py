#!/usr/bin/env python3
"""The vmem command line against a real daemon: commands, exit codes
(0 ok, 1 domain error, 2 usage or connection error), --json output, and
auto-start of the daemon."""

import json
import os
import queue
import signal
import subprocess
import threading
import time

import vmemtest as vt

AGENT = "cli-tester"


def cli_env(**extra):
    env = dict(os.environ)
    for name in ("VMEM_SOCKET", "VMEM_REPO", "VMEM_NO_AUTOSTART",
                 "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    env.update({"VMEMD": vt.VMEMD, "VMEM_AGENT_ID": AGENT}, **extra)
    return env


class CliTestCase(vt.VmemTestCase):
    def vmem(self, *args, sock=None, stdin=None, env=None, timeout=vt.scaled(30)):
        """Run `vmem --socket S --repo R ARGS`: CompletedProcess (text)."""
        sock = sock or self.daemon.sock
        argv = [vt.VMEM, "--socket", sock, "--repo", self.repo.root]
        return subprocess.run(argv + list(args), input=stdin,
                              capture_output=True, text=True,
                              env=env or cli_env(), timeout=timeout)

    def ok(self, *args, **kw):
        p = self.vmem(*args, **kw)
        self.assertEqual(p.returncode, 0, "vmem %s: %s" % (args, p.stderr))
        return p

    def fails(self, code, *args, type_name=None, **kw):
        p = self.vmem(*args, **kw)
        self.assertEqual(p.returncode, code,
                         "vmem %s: stdout %r stderr %r"
                         % (args, p.stdout, p.stderr))
        self.assertTrue(p.stderr.strip(), "no message on stderr")
        if type_name:
            self.assertIn(type_name, p.stderr)
        return p

    def json_of(self, *args, **kw):
        return json.loads(self.ok("--json", *args, **kw).stdout)


class Commands(CliTestCase):
    def test_store_then_get(self):
        self.ok("store", "5", "2", "1", "Use PostgreSQL")
        got = self.connect().get(5, 2, 1)
        self.assertEqual(got["content"], "Use PostgreSQL")
        self.assertEqual(got["agent_id"], AGENT)
        self.assertIn("Use PostgreSQL", self.ok("get", "5", "2", "1").stdout)

    def test_json_outputs(self):
        stored = self.json_of("store", "5", "2", "2", "json text")
        self.assertDecision(stored, 5, 2, 2, "json text", AGENT)
        self.assertEqual(self.json_of("get", "5", "2", "2"), stored)
        self.assertIs(self.json_of("exists", "5", "2", "2"), True)
        status = self.json_of("status")
        self.assertIn(status["status"], ("ok", "degraded"))
        self.assertEqual(status["decisions"], 1)

    def test_store_from_stdin(self):
        text = "line one\nline two \u00e9\n\tend"
        self.ok("store", "7", "3", "3", "-", stdin=text)
        self.assertEqual(self.connect().get(7, 3, 3)["content"], text)

    def test_context(self):
        self.ok("store", "8", "1", "2", "ctx", "--context", "issue_id=t49",
                "--context", "issue_title=Vector Memory = VMM")
        self.assertEqual(self.connect().get(8, 1, 2)["issue_context"],
                         {"issue_id": "t49",
                          "issue_title": "Vector Memory = VMM"})

    def test_overwrite_and_if_version(self):
        self.ok("store", "9", "4", "3", "v1")
        self.fails(1, "store", "9", "4", "3", "v2",
                   type_name="CoordinateOccupiedError")
        self.ok("store", "9", "4", "3", "v2", "--overwrite")
        self.fails(1, "store", "9", "4", "3", "v3", "--if-version", "1",
                   type_name="ConcurrencyError")
        self.ok("store", "9", "4", "3", "v3", "--if-version", "2")
        got = self.connect().get(9, 4, 3)
        self.assertEqual((got["content"], got["version"]), ("v3", 3))

    def test_immutable_layer(self):
        self.ok("store", "1", "1", "1", "arch")
        self.fails(1, "store", "1", "1", "1", "x", "--overwrite",
                   type_name="ImmutableLayerError")
        self.fails(1, "rm", "1", "1", "1", type_name="ImmutableLayerError")

    def test_out_of_range_coordinates_are_usage_errors(self):
        # Checked here; x up to any max_x is the daemon's to judge, and
        # its refusal is a usage error too.
        p = self.fails(2, "get", "1001", "1", "1")
        self.assertIn("coordinate.x must be an integer in 1..1000",
                      p.stderr)
        self.assertIn("see 'vmem help get'", p.stderr)
        for args in (("store", "1", "6", "2", "x"), ("get", "0", "1", "1"),
                     ("rm", "1", "1", "5"), ("exists", "1000001", "1", "1"),
                     ("history", "-3", "1", "1")):
            with self.subTest(args=args):
                p = self.fails(2, *args)
                self.assertRegex(p.stderr, r"[XYZ] must be in 1\.\.")
        self.assertEqual(self.connect().call("server.health")["decisions"], 0)

    def test_usage_error_is_short_and_points_at_help(self):
        p = self.fails(2, "store", "1", "2")
        self.assertEqual(p.stderr, "vmem: expected a coordinate X Y Z\n"
                                   "see 'vmem help store'\n")
        p = self.fails(2, "frobnicate")
        self.assertEqual(p.stderr.splitlines()[-1], "see 'vmem help'")
        p = self.ok("help", "store")
        self.assertIn("  store X Y Z [TEXT|-]", p.stdout)
        self.assertNotIn("  get X Y Z", p.stdout)
        self.assertIn("  history X Y Z", self.ok("help", "history").stdout)
        self.fails(2, "help", "nothing")
        self.assertIn("  sync [-m MESSAGE]", self.ok("help").stdout)

    def test_occupied_names_the_flags(self):
        self.ok("store", "9", "4", "3", "v1")
        p = self.fails(1, "store", "9", "4", "3", "v2",
                       type_name="CoordinateOccupiedError")
        self.assertIn("--overwrite", p.stderr)
        self.assertIn("--if-version N", p.stderr)
        self.assertNotIn("pass overwrite or if_version", p.stderr)

    def test_blank_content_refused(self):
        self.fails(2, "store", "1", "2", "2", " \t ")
        self.fails(2, "store", "1", "2", "2", "-", stdin="\n  \n")
        # Unicode whitespace: the daemon refuses it.
        self.fails(1, "store", "1", "2", "2", "\u3000", type_name="ValueError")
        self.assertIsNone(self.connect().get(1, 2, 2))

    def test_empty_results_say_so(self):
        for args in (("ls",), ("before", "5", "2"), ("search", "nothing"),
                     ("ls", "--x", "3-4")):
            with self.subTest(args=args):
                self.assertEqual(self.ok(*args).stdout, "no decisions\n")
                self.assertEqual(self.json_of(*args), [])
        self.assertEqual(self.ok("history", "3", "3", "3").stdout,
                         "no versions of (3, 3, 3)\n")
        self.assertEqual(self.ok("log").stdout, "no commits of the memory\n")

    def test_status_shows_the_last_commit_readably(self):
        self.assertIn("last commit: none yet", self.ok("status").stdout)
        self.ok("store", "4", "4", "4", "x")
        commit = json.loads(self.ok("--json", "sync").stdout)["commit"]
        out = self.ok("status").stdout
        line = [ln for ln in out.splitlines()
                if ln.startswith("last commit:")][0]
        self.assertRegex(line, r"^last commit: %s at \d{4}-\d\d-\d\dT"
                         % commit[:12])
        self.assertNotIn("{", out)

    def test_repo_that_is_not_a_repository(self):
        for repo in (self.repo.path("nowhere"), self.repo.tmp):
            with self.subTest(repo=repo):
                p = subprocess.run([vt.VMEM, "--repo", repo, "status"],
                                   capture_output=True, text=True,
                                   env=cli_env(), timeout=vt.scaled(30))
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("Not a Git repository", p.stderr)
                self.assertNotIn("use --repo", p.stderr)
        p = subprocess.run([vt.VMEM, "status"], capture_output=True,
                           text=True, env=cli_env(), timeout=vt.scaled(30),
                           cwd=self.repo.tmp)
        self.assertIn("use --repo", p.stderr)

    def test_store_on_a_terminal_says_it_reads_stdin(self):
        import pty
        master, slave = pty.openpty()
        try:
            proc = subprocess.Popen(
                [vt.VMEM, "--socket", self.daemon.sock, "--repo",
                 self.repo.root, "store", "2", "3", "4"],
                stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=cli_env(), text=True)
            os.write(master, b"typed text\n\x04")
            out, err = proc.communicate(timeout=vt.DEFAULT_TIMEOUT)
        finally:
            os.close(master)
            os.close(slave)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("reading the decision from standard input", err)
        self.assertEqual(self.connect().get(2, 3, 4)["content"],
                         "typed text\n")
        # Not on a pipe.
        self.assertEqual(self.ok("store", "2", "3", "3", stdin="x").stderr,
                         "")

    def test_exists_and_rm(self):
        self.assertEqual(self.vmem("exists", "2", "2", "4").returncode, 1)
        self.ok("store", "2", "2", "4", "soon gone")
        self.ok("exists", "2", "2", "4")
        self.ok("rm", "2", "2", "4")
        self.assertEqual(self.vmem("exists", "2", "2", "4").returncode, 1)
        self.assertIsNone(self.connect().get(2, 2, 4))

    def test_get_absent(self):
        p = self.vmem("get", "3", "3", "3")
        self.assertEqual(p.returncode, 1, p.stderr)
        p = self.vmem("--json", "get", "3", "3", "3")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIsNone(json.loads(p.stdout))

    def test_agent_option(self):
        self.ok("--agent", "explicit", "store", "6", "1", "2", "a")
        self.assertEqual(self.connect().get(6, 1, 2)["agent_id"], "explicit")

    def test_rm_if_version(self):
        self.ok("store", "6", "2", "2", "a")
        self.fails(1, "rm", "6", "2", "2", "--if-version", "2",
                   type_name="ConcurrencyError")
        self.ok("rm", "6", "2", "2", "--if-version", "1")
        self.fails(1, "rm", "6", "2", "2")

    def test_status(self):
        self.ok("store", "4", "4", "4", "x")
        self.assertTrue(self.ok("status").stdout.strip())

    def test_usage_errors(self):
        for args in [(), ("frobnicate",), ("store", "1", "2"),
                     ("get", "1", "2"), ("store", "1", "2", "2", "x",
                                          "--bogus"),
                     ("store", "1", "2", "2", "x", "--if-version"),
                     ("store", "1", "2", "2", "x", "--context", "novalue"),
                     ("store", "1", "2", "2", ""),
                     ("get", "1", "2", "2", "--overwrite"),
                     ("get", "one", "2", "2")]:
            with self.subTest(args=args):
                self.fails(2, *args)
        self.assertEqual(self.connect().call("server.health")["decisions"], 0)

    def test_connection_error(self):
        p = self.vmem("--no-autostart", "status",
                      sock=self.repo.path("nothing.sock"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertTrue(p.stderr.strip())

    def test_daemon_stop(self):
        self.ok("daemon", "stop")
        self.assertEqual(self.daemon.wait(), 0, self.daemon.stderr())


class AutoStart(CliTestCase):
    start_daemon = False

    def sock(self):
        return self.repo.path("auto.sock")

    def setUp(self):
        super().setUp()
        self.addCleanup(vt.shutdown_any, self.sock())

    def stop_and_check(self):
        self.ok("daemon", "stop", sock=self.sock())
        self.assertFalse(vt.accepts(self.sock()),
                         "the daemon still answers after stop")
        exited = vt.wait_until(lambda: not self.repo.lock_held(), 10.0)
        self.assertTrue(exited, "the daemon still holds its lock after stop")

    def test_status_starts_the_daemon(self):
        self.assertFalse(vt.accepts(self.sock()))
        p = self.ok("status", sock=self.sock())
        self.assertTrue(p.stdout.strip())
        self.assertTrue(vt.accepts(self.sock()))
        self.assertTrue(os.path.exists(os.path.join(self.repo.gitdir, "vmem",
                                                    "vmemd.log")))
        self.ok("store", "1", "2", "3", "auto", sock=self.sock())
        self.stop_and_check()

    def test_no_autostart(self):
        p = self.vmem("--no-autostart", "status", sock=self.sock())
        self.assertEqual(p.returncode, 2)
        self.assertIn("vmemd is not running", p.stderr)
        p = self.vmem("status", sock=self.sock(),
                      env=cli_env(VMEM_NO_AUTOSTART="1"))
        self.assertEqual(p.returncode, 2)
        self.assertFalse(vt.accepts(self.sock()))

    def test_bad_coordinate_starts_no_daemon(self):
        self.fails(2, "store", "1", "6", "2", "x", sock=self.sock())
        self.fails(2, "get", "x", "1", "1", sock=self.sock())
        # x beyond the default max_x: only a running daemon with a larger
        # max_x could accept it, and none is started to be asked.
        p = self.fails(2, "store", "5000", "1", "1", "x", sock=self.sock())
        self.assertIn("X must be in 1..1000 unless the daemon runs with a "
                      "larger max_x", p.stderr)
        self.assertIn("see 'vmem help store'", p.stderr)
        self.assertFalse(vt.accepts(self.sock()))
        self.assertEqual(self.repo.processes(), [])

    def test_daemon_start_and_stop(self):
        self.ok("daemon", "start", sock=self.sock())
        self.assertTrue(vt.accepts(self.sock()))
        conn = vt.Conn(self.sock(), agent_id="x")
        self.assertEqual(conn.store(1, 1, 2, "y")["version"], 1)
        conn.close()
        self.stop_and_check()


class Watch(CliTestCase):
    """vmem watch: one line per change in its ranges, as it happens."""

    PROBE = "probe"

    def watch(self, *args):
        """Start `vmem watch ARGS`; a queue of its stdout lines."""
        argv = [vt.VMEM, "--socket", self.daemon.sock, "--repo",
                self.repo.root, "watch"] + list(args)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=cli_env())
        self.addCleanup(self.reap)
        self.lines = queue.Queue()
        self.stderr_text = []

        def pump(stream, sink):
            for line in stream:
                sink(line)
            sink(None)

        threading.Thread(target=pump, daemon=True,
                         args=(self.proc.stdout, self.lines.put)).start()
        self.err_thread = threading.Thread(
            target=pump, daemon=True,
            args=(self.proc.stderr,
                  lambda t: t is not None and self.stderr_text.append(t)))
        self.err_thread.start()
        return self.proc

    def reap(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def wait_subscribed(self, conn, x, y, z):
        """Store probes at (x, y, z), inside the watched ranges, until
        vmem watch prints one (it has subscribed by then)."""
        deadline = time.monotonic() + vt.scaled(10)
        while time.monotonic() < deadline:
            self.assertIsNone(self.proc.poll(), "".join(self.stderr_text))
            conn.store(x, y, z, self.PROBE, overwrite=True)
            try:
                line = self.lines.get(timeout=vt.scaled(0.3))
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(vt.scaled(5))
                self.err_thread.join(vt.scaled(5))
                self.fail("vmem watch closed its output (exit %s): %s"
                          % (self.proc.returncode,
                             "".join(self.stderr_text)))
            self.probe = (x, y, z)
            return
        self.fail("vmem watch printed nothing for 10 s")

    def is_probe(self, line):
        return self.PROBE in line and (
            "(%d, %d, %d)" % self.probe in line or
            '"x":%d,"y":%d,"z":%d' % self.probe in line.replace(" ", ""))

    def next_lines(self, n, timeout=5.0):
        """The next n lines that are not probes."""
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            try:
                line = self.lines.get(
                    timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.fail("%d lines of %d in %.0f s: %r"
                          % (len(got), n, timeout, got))
            self.assertIsNotNone(line, "vmem watch ended: %r %s"
                                 % (got, "".join(self.stderr_text)))
            self.assertTrue(line.endswith("\n"), line)
            if not self.is_probe(line):
                got.append(line.rstrip("\n"))
        return got

    def no_more_lines(self, seconds=0.5):
        extra = []
        deadline = time.monotonic() + seconds
        while True:
            try:
                line = self.lines.get(
                    timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None or not self.is_probe(line):
                extra.append(line)
        self.assertEqual(extra, [])

    def stop_with(self, sig):
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(vt.scaled(5))
        except subprocess.TimeoutExpired:
            self.fail("vmem watch ignores signal %d" % sig)
        self.err_thread.join(vt.scaled(5))
        return rc

    def test_json_lines_in_range(self):
        conn = self.connect(agent_id="writer")
        self.watch("--json", "--x", "1-3")
        self.wait_subscribed(conn, 3, 5, 4)
        inside = conn.store(1, 1, 2, "in \u00e9 one")
        conn.store(4, 1, 2, "out")
        conn.store(100, 1, 1, "out too")
        second = conn.store(3, 2, 3, "in two\nwith two lines",
                            issue_context={"issue_id": "w"})
        over = conn.store(1, 1, 2, "in v2", overwrite=True)
        self.assertTrue(conn.delete(1, 1, 2))
        conn.delete(4, 1, 2)
        lines = self.next_lines(4)
        got = [json.loads(line) for line in lines]
        for line in lines:
            self.assertNotIn("\n", line)
        for n in got:
            self.assertEqual(sorted(n), ["coordinate", "decision", "event",
                                         "subscription"])
            self.assertIs(type(n["subscription"]), int)
        self.assertEqual([(n["event"], n["coordinate"], n["decision"])
                          for n in got],
                         [("stored", inside["coordinate"], inside),
                          ("stored", second["coordinate"], second),
                          ("stored", over["coordinate"], over),
                          ("deleted", vt.coord(1, 1, 2), None)])
        self.no_more_lines()
        self.assertEqual(self.stop_with(signal.SIGINT), 0,
                         "".join(self.stderr_text))

    def test_y_and_z_ranges_single_numbers(self):
        conn = self.connect(agent_id="writer")
        self.watch("--json", "--y", "2", "--z", "3-4")
        self.wait_subscribed(conn, 9, 2, 4)
        rec = conn.store(1, 2, 3, "in")
        conn.store(1, 3, 3, "y out")
        conn.store(1, 2, 2, "z out")
        conn.store(1, 1, 4, "y out again")
        last = conn.store(500, 2, 4, "in too")
        got = [json.loads(line) for line in self.next_lines(2)]
        self.assertEqual([n["decision"] for n in got], [rec, last])
        self.no_more_lines()
        self.assertEqual(self.stop_with(signal.SIGTERM), 0)

    def test_human_format(self):
        conn = self.connect(agent_id="agent-a")
        self.watch("--x", "5")
        self.wait_subscribed(conn, 5, 5, 4)
        conn.store(5, 2, 4, "first line of content\nsecond line")
        conn.store(6, 2, 4, "outside")
        conn.store(4, 2, 4, "outside too")
        conn.store(5, 2, 4, "v2 text", overwrite=True, agent_id="agent-b")
        conn.delete(5, 2, 4)
        first, second, third = self.next_lines(3)
        self.assertTrue(first.startswith("stored"), first)
        for text in ("(5, 2, 4)", "v1", "agent-a", "first line of content"):
            self.assertIn(text, first)
        self.assertNotIn("second line", first)
        self.assertEqual(first, "stored (5, 2, 4) v1 agent-a: "
                                "first line of content")
        self.assertEqual(second, "stored (5, 2, 4) v2 agent-b: v2 text")
        self.assertTrue(third.startswith("deleted"), third)
        self.assertIn("(5, 2, 4)", third)
        self.no_more_lines()
        self.assertEqual(self.stop_with(signal.SIGINT), 0)

    def test_daemon_going_away(self):
        conn = self.connect(agent_id="writer")
        self.watch("--json")
        self.wait_subscribed(conn, 1, 1, 4)
        conn.close()
        self.daemon.stop()
        try:
            rc = self.proc.wait(vt.scaled(5))
        except subprocess.TimeoutExpired:
            self.fail("vmem watch still running after the daemon stopped")
        self.err_thread.join(vt.scaled(5))
        self.assertEqual(rc, 1, "".join(self.stderr_text))
        self.assertTrue("".join(self.stderr_text).strip(),
                        "no message on stderr")

    def test_bad_ranges(self):
        for args in (["--x", "a-b"], ["--x"], ["--z", "1-x"], ["--bogus"]):
            with self.subTest(args=args):
                self.fails(2, "watch", *args, timeout=vt.scaled(10))
        self.fails(1, "watch", "--x", "7-3", type_name="QueryError",
                   timeout=vt.scaled(10))


if __name__ == "__main__":
    vt.main()

#!/usr/bin/env python3
"""The vmem command line against a real daemon: commands, exit codes
(0 ok, 1 domain error, 2 usage or connection error), --json output, and
auto-start of the daemon."""

import json
import os
import subprocess

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
    def vmem(self, *args, sock=None, stdin=None, env=None, timeout=30):
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

    def test_invalid_coordinate_is_a_domain_error(self):
        self.fails(1, "get", "1001", "1", "1",
                   type_name="CoordinateValidationError")
        self.fails(1, "store", "1", "6", "2", "x",
                   type_name="CoordinateValidationError")

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
        p = self.vmem("status", sock=self.sock(),
                      env=cli_env(VMEM_NO_AUTOSTART="1"))
        self.assertEqual(p.returncode, 2)
        self.assertFalse(vt.accepts(self.sock()))

    def test_daemon_start_and_stop(self):
        self.ok("daemon", "start", sock=self.sock())
        self.assertTrue(vt.accepts(self.sock()))
        conn = vt.Conn(self.sock(), agent_id="x")
        self.assertEqual(conn.store(1, 1, 2, "y")["version"], 1)
        conn.close()
        self.stop_and_check()


if __name__ == "__main__":
    vt.main()

#!/usr/bin/env python3
"""vmemd's configuration file: --config and the XDG default path, the
precedence defaults < file < command line, start-up errors (exit 2 with
FILE:LINE on stderr), SIGHUP reloads (applied values, a bad file keeps
the old ones, max_x stays), and the commit identity from the file."""

import os
import re
import signal
import subprocess
import time

import vmemtest as vt
from vmemtest import GitCase, clean_env


def write(path, text, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


class ConfigCase(GitCase):
    """No daemon at set-up: each test starts its own with its own file."""

    start_daemon = False

    def env(self, **extra):
        env = clean_env(self.repo.tmp)
        env.pop("JOURNAL_STREAM", None)  # plain log lines
        env.update(extra)
        return env

    def cfg_path(self):
        return self.repo.path("vmemd.conf")

    def xdg_path(self):
        return os.path.join(self.repo.tmp, "xdg", "vmem", "config")

    def start(self, *args, env=None):
        self.daemon = self.new_daemon(*args, env=env or self.env())
        return self.daemon.start()

    def limits(self):
        return self.connect().call("server.hello")["limits"]

    def run_vmemd(self, *args, env=None, foreground=True):
        """Run a vmemd that must not start; (exit status, stderr)."""
        argv = [vt.VMEMD, "--repo", self.repo.root, "--socket",
                self.repo.path("never.sock")]
        if foreground:
            argv.append("--foreground")
        p = subprocess.run(argv + list(args), capture_output=True,
                           text=True, env=env or self.env(), timeout=vt.scaled(20))
        self.assertFalse(vt.accepts(self.repo.path("never.sock")))
        return p.returncode, p.stderr

    def log_since(self, mark):
        return self.daemon.stderr()[mark:]

    def hup(self, want):
        """SIGHUP the daemon and wait for a log line matching want (a
        regular expression); the log written since, as text."""
        mark = len(self.daemon.stderr())
        self.daemon.proc.send_signal(signal.SIGHUP)
        got = vt.wait_until(
            lambda: re.search(want, self.log_since(mark)), 5.0, 0.02)
        self.assertTrue(got, "no %r after SIGHUP in:\n%s"
                        % (want, self.log_since(mark)))
        return self.log_since(mark)

    def author_committer(self, rev="HEAD"):
        return self.git("log", "-1", "--format=%an <%ae>|%cn <%ce>",
                        rev).strip().split("|")


class StartUp(ConfigCase):
    def test_config_file_sets_limits(self):
        write(self.cfg_path(),
              "# limits\nmax_x = 50\nmax_line = 4096\nmax_batch = 7\n"
              "max_connections = 9\noutput_backlog = 8192\n"
              "line_deadline_ms = 500\n")
        self.start("--config", self.cfg_path())
        lim = self.limits()
        self.assertEqual((lim["max_x"], lim["max_line"], lim["max_batch"],
                          lim["max_connections"]), (50, 4096, 7, 9))
        conn = self.connect(agent_id="a")
        self.assertRpcError(vt.E_COORD, conn.store, 51, 1, 2, "too far")
        self.assertEqual(conn.store(50, 1, 2, "edge")["version"], 1)
        # max_line: a longer line is refused and the connection closed
        long_conn = self.connect()
        long_conn.send_line('{"jsonrpc":"2.0","id":1,"method":'
                            '"server.hello","params":{"client":"%s"}}'
                            % ("x" * 5000))
        err = long_conn.read_json()
        self.assertEqual(err["error"]["code"], vt.INVALID_REQUEST)
        self.assertTrue(long_conn.at_eof())
        long_conn.close()  # (the daemon waits for our close to drain)
        self.assertIn("configuration from %s" % self.cfg_path(),
                      self.daemon.stderr())

    def test_commit_delay_from_file(self):
        write(self.cfg_path(), "commit_delay_ms = 1500\n")
        self.start("--config", self.cfg_path())
        conn = self.connect(agent_id="a")
        started = time.monotonic()
        conn.store(1, 1, 2, "later")
        self.assertNoNewCommit([], 0.8)
        self.wait_commits(1, 5.0)
        self.assertGreaterEqual(time.monotonic() - started, 1.4)

    def test_log_level_from_file(self):
        write(self.cfg_path(), "log_level = debug\n")
        self.start("--config", self.cfg_path())
        self.limits()
        self.assertIn("debug: config: log_level = debug",
                      self.daemon.stderr())
        self.daemon.stop()
        write(self.cfg_path(), "log_level = warning\n")
        mark = len(self.daemon.stderr())
        self.daemon.start()
        self.limits()
        log = self.log_since(mark)
        self.assertNotIn(" info: ", log)
        self.assertNotIn(" debug: ", log)

    def test_xdg_default_path(self):
        write(self.xdg_path(), "max_batch = 11\ncommit_delay_ms = 0\n")
        self.start()
        self.assertEqual(self.limits()["max_batch"], 11)
        self.assertIn("configuration from %s" % self.xdg_path(),
                      self.daemon.stderr())

    def test_home_default_path_when_xdg_empty(self):
        home = os.path.join(self.repo.tmp, "home")
        write(os.path.join(home, ".config", "vmem", "config"),
              "max_batch = 12\n")
        write(self.xdg_path(), "max_batch = 99\n")
        self.start(env=self.env(XDG_CONFIG_HOME=""))
        self.assertEqual(self.limits()["max_batch"], 12)
        self.daemon.stop()
        env = self.env()
        del env["XDG_CONFIG_HOME"]
        self.daemon.env = env
        self.daemon.start()
        self.assertEqual(self.limits()["max_batch"], 12)

    def test_no_file_means_defaults(self):
        self.start()
        lim = self.limits()
        self.assertEqual((lim["max_x"], lim["max_line"], lim["max_batch"],
                          lim["max_connections"]),
                         (1000, 1 << 20, 1000, 256))

    def test_command_line_beats_file(self):
        write(self.cfg_path(), "max_batch = 11\nmax_connections = 30\n")
        self.start("--config", self.cfg_path(), "--max-batch", "22")
        lim = self.limits()
        self.assertEqual((lim["max_batch"], lim["max_connections"]),
                         (22, 30))
        # also after a reload
        write(self.cfg_path(), "max_batch = 33\nmax_connections = 31\n")
        log = self.hup(r"reloaded .*\n")
        self.assertIn("max_connections 30 -> 31", log)
        self.assertNotIn("max_batch", log)
        lim = self.limits()
        self.assertEqual((lim["max_batch"], lim["max_connections"]),
                         (22, 31))

    def test_command_line_beats_xdg_file(self):
        write(self.xdg_path(), "max_x = 20\n")
        self.start("--max-x", "30")
        self.assertEqual(self.limits()["max_x"], 30)


class BadFiles(ConfigCase):
    CASES = [
        ("max_x = 5\nbogus = 1\n", 2, 'unknown key "bogus"'),
        ("max_batch = 0\n", 1,
         'max_batch must be an integer in 1..100000 (got "0")'),
        ("# c\nmax_line = 100\n", 2,
         "max_line must be an integer in 1024..1073741824"),
        ("log_level = loud\n", 1, "log_level must be one of err, warning,"
         " notice, info, debug"),
        ("max_x = 5\n\nmax_x = 6\n", 3, "max_x repeated (first set on line"
         " 1)"),
        ("max_x 5\n", 1, "no '='"),
        ("max_x =\n", 1, "max_x has an empty value"),
        ("commit_name = Una\n", 1, "commit_name is set without"
         " commit_email"),
        ("commit_name = Una\ncommit_email = una\n", 2,
         "commit_email must be an e-mail address"),
    ]

    def assertOneLine(self, stderr, path, line, reason):
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertTrue(stderr.startswith("vmemd: %s:%d: " % (path, line)),
                        stderr)
        self.assertIn(reason, stderr)

    def test_bad_files_exit_2(self):
        path = self.cfg_path()
        for text, line, reason in self.CASES:
            for fg in (True, False):
                with self.subTest(text=text, foreground=fg):
                    write(path, text)
                    rc, err = self.run_vmemd("--config", path,
                                             foreground=fg)
                    self.assertEqual(rc, 2, err)
                    self.assertOneLine(err, path, line, reason)
        self.assertFalse(self.repo.lock_held())

    def test_not_utf8_and_nul(self):
        path = self.cfg_path()
        write(path, b"max_x = 5\r\n# caf\xe9\r\n", "wb")
        rc, err = self.run_vmemd("--config", path)
        self.assertEqual(rc, 2, err)
        self.assertOneLine(err, path, 2, "not valid UTF-8")
        write(path, b"max_x = 5\nmax_batch = 7\x00\n", "wb")
        rc, err = self.run_vmemd("--config", path)
        self.assertEqual(rc, 2, err)
        self.assertOneLine(err, path, 2, "NUL byte")

    def test_bad_default_file_exits_2(self):
        write(self.xdg_path(), "max_x = 5\nmax_batch = lots\n")
        rc, err = self.run_vmemd(foreground=False)
        self.assertEqual(rc, 2, err)
        self.assertOneLine(err, self.xdg_path(), 2, "max_batch must be")

    def test_missing_or_unreadable_config(self):
        missing = self.repo.path("nope.conf")
        rc, err = self.run_vmemd("--config", missing)
        self.assertEqual(rc, 2, err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertTrue(err.startswith("vmemd: %s: cannot open" % missing),
                        err)
        rc, err = self.run_vmemd("--config", self.repo.tmp)
        self.assertEqual(rc, 2, err)
        self.assertIn("not a regular file", err)

    def test_not_regular_files_refused_without_blocking(self):
        fifo = self.repo.path("fifo.conf")
        os.mkfifo(fifo)
        for path in (fifo, "/dev/null", self.repo.tmp):
            for fg in (True, False):
                with self.subTest(path=path, foreground=fg):
                    # run_vmemd's own timeout catches a daemon that waits
                    # on the fifo for a writer
                    rc, err = self.run_vmemd("--config", path,
                                             foreground=fg)
                    self.assertEqual(rc, 2, err)
                    self.assertEqual(err, "vmemd: %s: not a regular file\n"
                                     % path)
        self.assertFalse(self.repo.lock_held())

    def test_symlinked_config_file_followed(self):
        real = self.repo.path("dotfiles", "vmem.conf")
        write(real, "max_batch = 7\n")
        link = self.repo.path("linked.conf")
        os.symlink(real, link)
        self.start("--config", link)
        self.assertEqual(self.limits()["max_batch"], 7)

    def test_bad_option_values(self):
        rc, err = self.run_vmemd("--log-level", "loud")
        self.assertEqual(rc, 2)
        self.assertIn("--log-level must be one of", err)
        rc, err = self.run_vmemd("--max-x", "0")
        self.assertEqual(rc, 2)
        self.assertIn("--max-x must be an integer in 1..1000000", err)

    def test_vmem_daemon_start_reports_it(self):
        if not os.access(vt.VMEM, os.X_OK):
            self.skipTest("no vmem CLI at %s" % vt.VMEM)
        write(self.xdg_path(), "max_batch = lots\n")
        env = self.env(VMEMD=vt.VMEMD)
        p = subprocess.run([vt.VMEM, "--socket", self.repo.path("cli.sock"),
                            "--repo", self.repo.root, "daemon", "start"],
                           capture_output=True, text=True, env=env,
                           timeout=vt.scaled(30))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertIn("%s:1: max_batch must be" % self.xdg_path(), p.stderr)


class Reload(ConfigCase):
    def test_sighup_applies_commit_delay_batch_and_log_level(self):
        path = self.cfg_path()
        write(path, "commit_delay_ms = 60000\nmax_batch = 5\n")
        self.start("--config", path)
        conn = self.connect(agent_id="a")
        conn.store(1, 1, 2, "pending")
        self.assertNoNewCommit([], 0.5)
        self.assertNotIn(" debug: ", self.daemon.stderr())
        write(path, "commit_delay_ms = 200\nmax_batch = 9\n"
              "log_level = debug\n")
        started = time.monotonic()
        log = self.hup(r"reloaded %s: .*\n" % re.escape(path))
        line = re.search(r"info: (reloaded .*)\n", log).group(1)
        self.assertEqual(line, "reloaded %s: max_batch 5 -> 9, "
                         "commit_delay_ms 60000 -> 200, "
                         "log_level info -> debug" % path)
        # the pending decision is committed on the new delay
        history = self.wait_commits(1, 3.0)
        self.assertLess(time.monotonic() - started, 3.0)
        self.assertEqual(self.limits()["max_batch"], 9)
        self.assertIn(" debug: config: commit_delay_ms = 200",
                      self.daemon.stderr())
        # a new write too
        started = time.monotonic()
        conn.store(2, 1, 2, "soon")
        self.wait_commits(2, 3.0)
        self.assertEqual(self.commits()[1:], history)
        # back to info: no more debug lines
        write(path, "commit_delay_ms = 200\nmax_batch = 9\n")
        mark = len(self.daemon.stderr())
        self.hup(r"log_level debug -> info")
        self.hup(r"reloaded %s: no change" % re.escape(path))
        self.assertNotIn(" debug: ", self.log_since(mark).split(
            "log_level debug -> info", 1)[1])

    def test_sighup_commit_max_batch(self):
        path = self.cfg_path()
        write(path, "commit_delay_ms = 60000\n")
        self.start("--config", path)
        conn = self.connect(agent_id="a")
        for x in range(1, 4):
            conn.store(x, 1, 2, "d%d" % x)
        self.assertNoNewCommit([], 0.5)
        write(path, "commit_delay_ms = 60000\ncommit_max_batch = 2\n")
        self.hup(r"commit_max_batch 512 -> 2")
        self.wait_commits(1, 3.0)
        self.assertEqual(self.subject(),
                         "vector-memory: 3 decisions (x 1-3, y 1, z 2)")

    def test_sighup_bad_file_keeps_everything(self):
        path = self.cfg_path()
        write(path, "commit_delay_ms = 200\nmax_batch = 5\n")
        self.start("--config", path)
        write(path, "commit_delay_ms = 60000\nmax_batch = 6\nbogus = 1\n")
        log = self.hup(r"error: .*\n")
        self.assertIn("error: %s:3: unknown key \"bogus\"; keeping the "
                      "current configuration" % path, log)
        self.assertNotIn("reloaded", log)
        self.assertTrue(self.daemon.running())
        self.assertEqual(self.limits()["max_batch"], 5)
        # the old commit delay still holds
        self.connect(agent_id="a").store(1, 1, 2, "quick")
        self.wait_commits(1, 3.0)
        # the file gone: an error too, nothing changes
        os.unlink(path)
        log = self.hup(r"error: .*\n")
        self.assertIn("%s: cannot open" % path, log)
        self.assertEqual(self.limits()["max_batch"], 5)

    def test_sighup_config_replaced_by_a_fifo(self):
        path = self.cfg_path()
        write(path, "max_batch = 5\n")
        self.start("--config", path)
        conn = self.connect(agent_id="a")
        for kind in ("fifo", "directory"):
            with self.subTest(kind=kind):
                os.unlink(path)  # the file, then the fifo
                if kind == "fifo":
                    os.mkfifo(path)
                else:
                    os.mkdir(path)
                log = self.hup(r"error: .*\n")
                self.assertIn("error: %s: not a regular file; keeping the "
                              "current configuration" % path, log)
                # the loop did not block: this connection and a new one
                # are answered, with the configuration of before
                self.assertEqual(conn.store(1, 1, 2 + (kind == "fifo"),
                                            kind)["content"], kind)
                self.assertEqual(self.limits()["max_batch"], 5)
                self.assertTrue(self.daemon.running())

    def test_sighup_max_x_warns_and_stays(self):
        path = self.cfg_path()
        write(path, "max_x = 50\n")
        self.start("--config", path)
        write(path, "max_x = 100\nmax_batch = 8\n")
        log = self.hup(r"reloaded .*\n")
        self.assertRegex(log, r"warning: %s: max_x cannot change at run "
                         r"time: keeping 50" % re.escape(path))
        self.assertIn("reloaded %s: max_batch 1000 -> 8\n" % path, log)
        lim = self.limits()
        self.assertEqual((lim["max_x"], lim["max_batch"]), (50, 8))
        conn = self.connect(agent_id="a")
        self.assertRpcError(vt.E_COORD, conn.store, 51, 1, 2, "no")

    def test_sighup_no_change(self):
        write(self.cfg_path(), "max_batch = 8\n")
        self.start("--config", self.cfg_path())
        self.hup(r"reloaded %s: no change\n" % re.escape(self.cfg_path()))

    def test_sighup_finds_a_default_file_made_later(self):
        self.start()
        self.hup(r"no configuration file at %s" % re.escape(self.xdg_path()))
        write(self.xdg_path(), "max_batch = 13\n")
        self.hup(r"reloaded %s: max_batch 1000 -> 13"
                 % re.escape(self.xdg_path()))
        self.assertEqual(self.limits()["max_batch"], 13)

    def test_sighup_max_line_for_new_connections(self):
        path = self.cfg_path()
        write(path, "max_line = 4096\n")
        self.start("--config", path)
        old = self.connect()
        old.call("server.hello")
        write(path, "max_line = 2048\n")
        self.hup(r"max_line 4096 -> 2048")
        line = ('{"jsonrpc":"2.0","id":1,"method":"server.hello",'
                '"params":{"client":"%s"}}' % ("x" * 3000))
        old.send_line(line)
        self.assertEqual(old.read_json()["result"]["limits"]["max_line"],
                         2048)
        new = self.connect()
        new.send_line(line)
        self.assertEqual(new.read_json()["error"]["code"],
                         vt.INVALID_REQUEST)
        self.assertTrue(new.at_eof())
        new.close()  # (the daemon waits for our close to drain)


class Identity(ConfigCase):
    def test_commit_identity_from_file(self):
        path = self.cfg_path()
        write(path, "commit_delay_ms = 0\ncommit_name = Cora Config\n"
              "commit_email = cora@example.org\n")
        self.start("--config", path)
        conn = self.connect(agent_id="a")
        conn.store(1, 1, 2, "who")
        self.wait_commits(1, 3.0)
        self.assertEqual(self.author_committer(),
                         ["Cora Config <cora@example.org>"] * 2)
        # changed by a reload
        write(path, "commit_delay_ms = 0\ncommit_name = Rita Reload\n"
              "commit_email = rita@example.org\n")
        self.hup(r"commit_name Cora Config -> Rita Reload, commit_email "
                 r"cora@example.org -> rita@example.org")
        conn.store(2, 1, 2, "who now")
        self.wait_commits(2, 3.0)
        self.assertEqual(self.author_committer(),
                         ["Rita Reload <rita@example.org>"] * 2)
        # removed: back to the repository's identity (here the fallback)
        write(path, "commit_delay_ms = 0\n")
        self.hup(r"reloaded")
        conn.store(3, 1, 2, "default")
        self.wait_commits(3, 3.0)
        self.assertEqual(self.author_committer(),
                         ["vmemd <vmemd@localhost>"] * 2)

    def test_repository_identity_without_config(self):
        self.git("config", "user.name", "Repo Person")
        self.git("config", "user.email", "repo@example.com")
        self.start("--commit-delay-ms", "0")
        self.connect(agent_id="a").store(1, 1, 2, "x")
        self.wait_commits(1, 3.0)
        self.assertEqual(self.author_committer(),
                         ["Repo Person <repo@example.com>"] * 2)


if __name__ == "__main__":
    vt.main()

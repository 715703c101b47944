"""Fixtures of the seed-compatibility suite, and a TAP reporter so that
meson counts every case (pytest's own terminal output is off).

Each test gets a temporary git repository that is deleted right after the
test, as the seed's users do; the managers start their daemon themselves
(auto-start, $VMEMD), with sockets in a temporary XDG_RUNTIME_DIR. A
daemon left running by a test is killed before its repository is
deleted: it may still be writing its local state there (a compaction of
the conversations a test deleted begins in the background), which would
make the deletion race it.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "..",
                                                 "client", "python")))
sys.path.insert(0, HERE)

# The harness of the other suites: its sanitizer pattern and waits.
sys.path.insert(0, os.path.dirname(HERE))
from vmemtest import SANITIZER_RE, scaled  # noqa: E402
RUNTIME = tempfile.mkdtemp(prefix="vmem-seed-run-", dir="/tmp")
os.chmod(RUNTIME, 0o700)
os.environ["XDG_RUNTIME_DIR"] = RUNTIME
for name in ("VMEM_SOCKET", "VMEM_REPO", "VMEM_NO_AUTOSTART"):
    os.environ.pop(name, None)


def _daemons_of(path):
    """Pids of processes whose command line names path."""
    needle = os.fsencode(path)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def _stop_daemons(path):
    """Kill every daemon of path (its repository is gone by then, so
    there is nothing left for it to save; a daemon whose tree was
    deleted may take seconds to stop on SIGTERM, which is not what this
    suite is about)."""
    for pid in _daemons_of(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + scaled(10)
    while _daemons_of(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = _daemons_of(path)
    assert not left, "daemons still running: %r" % left


@pytest.fixture
def temp_repo():
    """A fresh git repository, deleted at teardown once its daemons are
    stopped (which must work: the manager's finalizer has run by then)."""
    tmp = tempfile.mkdtemp(prefix="vmem-seed-", dir="/tmp")
    repo = Path(tmp) / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.name", "Seed"],
                   check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.email",
                    "seed@example.com"], check=True)
    try:
        yield repo
        # A daemon built with sanitizers reports into its log, which
        # goes with the repository: look first.
        log = repo / ".git" / "vmem" / "vmemd.log"
        if log.exists():
            found = SANITIZER_RE.search(log.read_text(errors="replace"))
            assert not found, "%s: %s" % (log, found.group(0))
        _stop_daemons(tmp)
        shutil.rmtree(tmp)  # must not fail: nothing writes there now
    finally:
        _stop_daemons(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def manager(temp_repo):
    from vector_memory import VectorMemoryManager
    return VectorMemoryManager(temp_repo, "test-agent")


def pytest_sessionfinish(session):
    shutil.rmtree(RUNTIME, ignore_errors=True)


# ---- TAP --------------------------------------------------------------

class _Tap:
    """One TAP line per test, once its setup, call and teardown are
    over: not ok if any of them failed; an expected failure is a TODO."""

    def __init__(self):
        self.n = 0
        self.reports = {}

    def pytest_collection_finish(self, session):
        print("1..%d" % len(session.items), flush=True)

    def pytest_runtest_logreport(self, report):
        self.reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        reports = self.reports.pop(nodeid, [])
        self.n += 1
        name = nodeid.split("::", 1)[-1]
        failed = [r for r in reports if r.failed]
        xfail = [r for r in reports if hasattr(r, "wasxfail")]
        if failed:
            print("not ok %d - %s" % (self.n, name))
            for r in failed:
                print("# in %s:" % r.when)
                for line in str(r.longrepr).splitlines():
                    print("# " + line)
        elif xfail:
            # TAP: a failing TODO is an expected failure.
            print("not ok %d - %s # TODO %s" % (self.n, name,
                                                xfail[0].wasxfail))
        elif any(r.skipped for r in reports):
            print("not ok %d - %s # skipped, which counts as a failure"
                  % (self.n, name))
        else:
            print("ok %d - %s" % (self.n, name))
        print("# %s: %.2f s" % (name, sum(r.duration for r in reports)))
        sys.stdout.flush()


def pytest_configure(config):
    config.pluginmanager.register(_Tap(), "vmem-tap")

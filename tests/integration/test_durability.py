#!/usr/bin/env python3
"""Durability of vmemd: restarts, kill -9 under a stream of acknowledged
writes (seeded; VMEM_SEED=N replays a run), write-ahead log replay onto the
files, quarantine of corrupt files and removal of stray temp files."""

import json
import os
import random
import shutil
import threading
import time

import vmemtest as vt

KILL_ROUNDS = int(os.environ.get("VMEM_KILL_ROUNDS", "20"))
WRITERS = 4


def snapshot(conn, coords):
    return {c: conn.get(*c) for c in coords}


def raw_gets(conn, coords):
    """The response lines of decision.get (id 1), byte for byte."""
    lines = []
    for c in coords:
        conn.request("decision.get", {"coordinate": vt.coord(*c)}, rid=1)
        lines.append(conn.read_line())
    return lines


class Restart(vt.VmemTestCase):
    def store_some(self, conn):
        recs = []
        for x in range(1, 31):
            recs.append(conn.store(x, 1 + x % 5, 1 + x % 4, "d%d" % x,
                                   issue_context={"n": str(x)}))
        for x in range(1, 31, 3):
            if 1 + x % 4 != 1:
                recs.append(conn.store(x, 1 + x % 5, 1 + x % 4, "o%d" % x,
                                       overwrite=True))
        conn.delete(2, 3, 3)
        return recs

    def test_graceful_restart_keeps_everything(self):
        conn = self.connect(agent_id="r")
        recs = self.store_some(conn)
        coords = sorted({tuple(r["coordinate"].values()) for r in recs})
        before = snapshot(conn, coords)
        raw_before = raw_gets(conn, coords)
        health = conn.call("server.health")
        conn.close()
        self.daemon.restart()
        conn = self.connect()
        self.assertEqual(raw_gets(conn, coords), raw_before)
        self.assertEqual(conn.call("server.health")["decisions"],
                         health["decisions"])
        self.assertIsNone(before[(2, 3, 3)])
        for rec in before.values():
            if rec:
                self.assertFileMatches(rec, timeout=0)

    def test_restart_keeps_the_layer_rules(self):
        conn = self.connect(agent_id="r")
        conn.store(1, 1, 1, "arch")
        conn.store(1, 1, 2, "iface")
        conn.store(1, 1, 2, "iface 2", overwrite=True)
        conn.close()
        self.daemon.restart()
        conn = self.connect(agent_id="r")
        self.assertRpcError(vt.E_IMMUTABLE, conn.store, 1, 1, 1, "x",
                            overwrite=True)
        self.assertRpcError(vt.E_OCCUPIED, conn.store, 1, 1, 2, "x")
        self.assertEqual(conn.store(1, 1, 2, "v3", if_version=2)["version"],
                         3)


class Writer(threading.Thread):
    """One client storing at its own coordinates until the daemon dies.

    Coordinates: x in [base, base+40) at z=2..4 (overwritten) and fresh z=1
    coordinates at x in [base+40, base+200). `state` maps coordinate to
    ("present", content, version) or ("absent",) as known before the round;
    `acked` records every acknowledged result of the round and `pending`
    the write whose outcome is unknown (in flight at the kill).
    """

    def __init__(self, sock, n, state, rng, round_no):
        super().__init__(daemon=True)
        self.sock, self.n, self.state, self.rng = sock, n, state, rng
        self.round_no = round_no
        self.base = 1 + n * 200
        self.acked = {}
        self.pending = None
        self.error = None
        self.count = 0

    def known(self, c):
        if c in self.acked:
            return ("present",) + self.acked[c]
        return self.state.get(c, ("absent",))

    def next_write(self):
        if self.rng.random() < 0.15:
            for x in range(self.base + 40, self.base + 200):
                for y in range(1, 6):
                    c = (x, y, 1)
                    if self.known(c) == ("absent",):
                        return c, {}
        c = (self.base + self.rng.randrange(40), self.rng.randint(1, 5),
             self.rng.randint(2, 4))
        return c, ({} if self.known(c) == ("absent",) else
                   {"overwrite": True})

    def content(self):
        pad = "p" * self.rng.choice([0, 10, 1000, 20000])
        return "w%d r%d n%d %s" % (self.n, self.round_no, self.count, pad)

    def run(self):
        try:
            conn = vt.Conn(self.sock, agent_id="writer-%d" % self.n)
        except (OSError, EOFError, TimeoutError):
            return  # killed before we were connected
        try:
            while True:
                c, kw = self.next_write()
                text = self.content()
                self.pending = (c, text)
                rec = conn.store(*c, text, **kw)
                self.acked[c] = (rec["content"], rec["version"])
                self.pending = None
                self.count += 1
        except (OSError, EOFError, TimeoutError):
            return  # the daemon was killed
        except Exception as e:  # any RpcError is a bug here
            self.error = "%r after %d writes" % (e, self.count)
        finally:
            conn.close()


class KillNine(vt.VmemTestCase):
    def test_kill9_loses_no_acknowledged_write(self):
        seed = int(os.environ.get("VMEM_SEED", random.randrange(1 << 30)))
        vt.diag("seed %d (VMEM_SEED=%d replays it), %d rounds"
                % (seed, seed, KILL_ROUNDS))
        rng = random.Random(seed)
        state = {}
        total = 0
        for round_no in range(KILL_ROUNDS):
            total += self.kill_round(rng, state, round_no, seed)
        vt.diag("%d acknowledged writes verified" % total)
        self.assertGreater(total, KILL_ROUNDS)
        self.assertFilesEqualIndex(sorted(state))

    def assertFilesEqualIndex(self, coords):
        """After a graceful stop the files hold exactly what get served."""
        conn = self.connect()
        records = snapshot(conn, coords)
        conn.close()
        self.daemon.stop()
        for c, rec in records.items():
            if rec is None:
                self.assertIsNone(self.repo.read_decision_bytes(*c), c)
            else:
                self.assertFileMatches(rec, timeout=0)
        self.assertEqual(self.repo.temp_files(), [])
        self.assertOnlyDecisionFiles()

    def kill_round(self, rng, state, round_no, seed):
        where = "seed %d round %d" % (seed, round_no)
        writers = [Writer(self.daemon.sock, n, state,
                          random.Random(rng.random()), round_no)
                   for n in range(WRITERS)]
        for w in writers:
            w.start()
        time.sleep(rng.uniform(0.05, 0.4))
        self.daemon.kill()
        for w in writers:
            w.join(vt.scaled(30))
            self.assertIsNone(w.error, "%s: writer %d: %s"
                              % (where, w.n, w.error))
        self.daemon.start()
        conn = self.connect()
        for w in writers:
            self.verify_writer(conn, w, state, where)
        conn.close()
        return sum(len(w.acked) for w in writers)

    def verify_writer(self, conn, w, state, where):
        """Every acknowledged write is there (or the later in-flight one),
        nothing else changed, and state learns the outcome."""
        pend_c, pend_text = w.pending or (None, None)
        for c in set(w.acked) | ({pend_c} if pend_c else set()):
            got = conn.get(*c)
            msg = "%s: writer %d at %r: got %r" % (where, w.n, c, got)
            self.check_outcome(got, w.known(c),
                               pend_text if c == pend_c else None, msg)
            state[c] = ("present", got["content"], got["version"]) if got \
                else ("absent",)

    def check_outcome(self, got, before, pending_text, msg):
        """got is `before` (last acknowledged or known state) or the
        outcome of the pending write."""
        if pending_text is not None and got is not None \
                and got["content"] == pending_text:
            if before[0] == "present":
                self.assertGreater(got["version"], before[2], msg)
            return
        if before[0] == "absent":
            self.assertIsNone(got, msg)
        else:
            self.assertIsNotNone(got, msg)
            self.assertEqual((got["content"], got["version"]), before[1:],
                             msg)


class Replay(vt.VmemTestCase):
    def test_files_materialised_after_kill9(self):
        conn = self.connect(agent_id="wal")
        recs = [conn.store(x, 2, 3, "payload %d " % x + "z" * (x * 97))
                for x in range(1, 101)]
        recs += [conn.store(x, 2, 3, "second %d" % x, overwrite=True)
                 for x in range(1, 101, 2)]
        self.assertTrue(conn.delete(100, 2, 3))
        self.daemon.kill()
        self.daemon.start()
        conn = self.connect()
        latest = {}
        for rec in recs:
            latest[rec["coordinate"]["x"]] = rec
        del latest[100]
        for x, rec in latest.items():
            self.assertEqual(conn.get(x, 2, 3), rec)
            self.assertFileMatches(rec)
        self.assertFileGone(100, 2, 3)
        self.assertTrue(vt.wait_until(lambda: not self.repo.temp_files()),
                        self.repo.temp_files())
        self.assertOnlyDecisionFiles()

    def test_big_pass_written_in_chunks(self):
        """More decisions in one writer pass than it renders at a time
        (1,024): every file is written, by the pass and by the start-up
        replay after a kill -9."""
        conn = self.connect(agent_id="wal")
        recs = []
        for y in (1, 2, 3):
            recs += conn.call("decision.store_many", {"items": [
                {"coordinate": vt.coord(x, y, 2),
                 "content": "chunked %d %d" % (x, y)}
                for x in range(1, 1001)]})
        self.daemon.kill()
        self.daemon.start()
        for rec in recs:
            self.assertFileMatches(rec)
        conn = self.connect(agent_id="wal")
        recs = []
        for y in (1, 2, 3):
            recs += conn.call("decision.store_many", {"items": [
                {"coordinate": vt.coord(x, y, 2),
                 "content": "again %d %d" % (x, y), "overwrite": True}
                for x in range(1, 1001)]})
        for rec in recs:
            self.assertFileMatches(rec, timeout=30)
        self.assertTrue(vt.wait_until(lambda: not self.repo.temp_files()),
                        self.repo.temp_files())
        self.assertOnlyDecisionFiles()

    def test_torn_log_tail_cut(self):
        conn = self.connect(agent_id="wal")
        recs = [conn.store(x, 1, 4, "before the tear %d" % x)
                for x in range(1, 21)]
        self.daemon.kill()
        with open(os.path.join(self.repo.gitdir, "vmem", "wal"), "ab") as f:
            f.write(b"\x35\x00\x00\x00torn")  # a half-written record
        self.daemon.start()
        conn = self.connect(agent_id="wal")
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertFileMatches(conn.store(21, 1, 4, "after the tear"))
        self.daemon.restart()
        self.assertEqual(self.connect().call("server.health")["decisions"],
                         21)

    def test_files_written_when_killed_right_after_ack(self):
        for round_no in range(5):
            conn = self.connect(agent_id="wal")
            rec = conn.store(round_no + 1, 4, 4, "last words %d" % round_no)
            self.daemon.kill()
            self.daemon.start()
            self.assertFileMatches(rec)
            self.assertEqual(self.connect().get(round_no + 1, 4, 4), rec)


class Experiences(vt.VmemTestCase):
    """Experiences are as durable as decisions: acknowledged after the
    log's fdatasync, in their shards after a kill -9, once each."""

    def shard_lines(self):
        lines = []
        base = os.path.join(self.repo.vmdir, "experiences")
        for dirpath, _, files in os.walk(base):
            for name in files:
                with open(os.path.join(dirpath, name)) as f:
                    text = f.read()
                self.assertTrue(text.endswith("\n"), name)
                lines += text.splitlines()
        return lines

    def test_kill9_right_after_ack_and_mixed_with_decisions(self):
        made, gone = [], []
        for round_no in range(5):
            conn = self.connect(agent_id="dur-%d" % (round_no % 2))
            made += [conn.call("experience.store",
                               {"context": "round %d item %d" % (round_no,
                                                                 i),
                                "action": "a" * (i * 300), "outcome": "o",
                                "tags": ["r%d" % round_no]})
                     for i in range(1, 6)]
            conn.store(round_no + 1, 2, 2, "beside them %d" % round_no)
            self.assertTrue(conn.call("experience.delete",
                                      {"id": made[-1]["id"]}))
            gone.append(made.pop())
            self.daemon.kill()
            self.daemon.start()
        conn = self.connect()
        for rec in made:
            self.assertEqual(conn.call("experience.get", {"id": rec["id"]}),
                             rec)
        for rec in gone:
            self.assertIsNone(conn.call("experience.get", {"id": rec["id"]}))
        self.assertEqual(conn.call("server.health")["decisions"], 5)
        self.daemon.stop()
        lines = self.shard_lines()
        self.assertEqual(len(lines), len(set(lines)), "a line twice")
        ids = [json.loads(ln).get("id") for ln in lines]
        self.assertEqual(sorted(i for i in ids if i),
                         sorted(r["id"] for r in made + gone))

    def test_busy_log_cut_then_kill9(self):
        # Past 16 MiB of log the checkpoint cuts it while writes go on:
        # the shards it synced and the log's rest together hold all.
        conn = self.connect(agent_id="busy")
        text = "w" * (100 * 1024 - 20)
        recs = [conn.call("experience.store",
                          {"context": "%04d" % i, "action": text,
                           "outcome": "o"}) for i in range(250)]
        self.daemon.kill()
        self.daemon.start(timeout=vt.START_TIMEOUT * 3)
        conn = self.connect()
        for rec in recs:
            self.assertEqual(conn.call("experience.get", {"id": rec["id"]}),
                             rec)
        lines = self.shard_lines()
        self.assertEqual(len(lines), len(recs))


class Checkpoint(vt.VmemTestCase):
    """The log is cut once its writes are in synced files: after a quiet
    second, and while writes go on once it passes 16 MiB."""

    def wal_size(self):
        return os.path.getsize(os.path.join(self.repo.gitdir, "vmem", "wal"))

    def test_quiet_log_emptied(self):
        conn = self.connect(agent_id="ck")
        recs = [conn.store(x, 3, 3, "quiet %d" % x) for x in range(1, 31)]
        self.assertGreater(self.wal_size(), 0)
        self.assertTrue(vt.wait_until(lambda: self.wal_size() == 0, 5.0))
        for rec in recs:
            self.assertFileMatches(rec, timeout=0)

    def test_busy_log_cut_while_writing_then_kill9(self):
        conn = self.connect(agent_id="ck")
        big = "b" * (100 * 1024 - 20)
        recs, logged = [], 0
        for i in range(400):
            x, z = i % 200 + 1, 2 + i // 200
            recs.append(conn.store(x, 4, z, "%04d %s" % (i, big)))
            logged += len(big) + 300
        # Keep the log busy (a small store every 50 ms: never the quiet
        # second of the idle trigger) until the size trigger's checkpoint
        # has cut it; how soon depends on the machine, so wait for it.
        i, deadline = 0, time.monotonic() + vt.scaled(30)
        while self.wal_size() >= logged * 0.7:
            self.assertLess(time.monotonic(), deadline,
                            "the log was not cut while writes went on")
            recs.append(conn.store(i % 200 + 1, 5, 2 + i // 200 % 3,
                                   "busy %d" % i, overwrite=True))
            i += 1
            time.sleep(0.05)
        self.daemon.kill()
        # Up to 40 MB of log to replay and files to load: on a loaded
        # machine under a sanitizer that takes a while.
        self.daemon.start(timeout=vt.START_TIMEOUT * 3)
        conn = self.connect()
        latest = {tuple(r["coordinate"].values()): r for r in recs}
        for c, rec in latest.items():
            self.assertEqual(conn.get(*c), rec)


class WriterFailure(vt.VmemTestCase):
    def test_file_write_failure_reported_then_retried(self):
        conn = self.connect(agent_id="w")
        obstacle = os.path.join(self.repo.vmdir, "x-005")
        os.makedirs(self.repo.vmdir, exist_ok=True)
        with open(obstacle, "w") as f:
            f.write("a file where a directory belongs")
        rec = conn.store(5, 1, 2, "acknowledged from the log")
        health = vt.wait_until(
            lambda: conn.call("server.health")["last_error"], 3.0)
        self.assertIsInstance(health, str)
        self.assertIn("x-005", health)
        self.assertEqual(conn.call("server.health")["status"], "degraded")
        self.assertEqual(conn.get(5, 1, 2), rec)
        os.unlink(obstacle)
        self.assertFileMatches(rec, timeout=5.0)
        # Recovered: ok again, the last error is still there to read.
        self.assertEqual(vt.wait_until(
            lambda: conn.call("server.health")["status"] == "ok", 3.0), True)
        self.assertIn("x-005", conn.call("server.health")["last_error"])
        self.daemon.stop()


class StartupRecovery(vt.VmemTestCase):
    def write_file(self, rel, data):
        path = os.path.join(self.repo.vmdir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_corrupt_file_quarantined(self):
        conn = self.connect(agent_id="q")
        good = [conn.store(3, 1, 1, "arch"), conn.store(3, 1, 3, "impl"),
                conn.store(4, 2, 2, "other")]
        conn.store(3, 1, 2, "to be corrupted")
        conn.close()
        self.daemon.stop()
        bad = self.write_file("x-003/y-1-z-2.json", b"{\"coordinate\": garb")
        self.daemon.start()
        conn = self.connect()
        health = conn.call("server.health")
        self.assertEqual(health["status"], "degraded")
        self.assertEqual(health["decisions"], 3)
        self.assertEqual(len(health["quarantined"]), 1, health)
        entry = health["quarantined"][0]
        self.assertEqual(sorted(entry), ["moved_to", "path", "reason"])
        self.assertTrue(entry["path"].endswith("x-003/y-1-z-2.json"), entry)
        self.assertIsInstance(entry["reason"], str)
        self.assertTrue(entry["reason"])
        moved = entry["moved_to"]
        if not os.path.isabs(moved):
            moved = os.path.join(self.repo.root, moved)
        self.assertEqual(os.path.dirname(os.path.realpath(moved)),
                         self.repo.quarantine)
        with open(moved, "rb") as f:
            self.assertEqual(f.read(), b"{\"coordinate\": garb")
        self.assertFalse(os.path.exists(bad))
        self.assertIsNone(conn.get(3, 1, 2))
        for rec in good:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertOnlyDecisionFiles()

    def test_invalid_decisions_quarantined(self):
        conn = self.connect(agent_id="q")
        rec = conn.store(6, 1, 2, "valid")
        conn.close()
        self.daemon.stop()
        bad = {
            "x-006/y-1-z-3.json": vt.decision_file_bytes(rec),  # coord differs
            "x-006/y-2-z-2.json": b"",
            "x-006/y-3-z-2.json": vt.decision_file_bytes(
                dict(rec, coordinate=vt.coord(6, 3, 2), content="")),
            "x-006/y-4-z-2.json": b"\xff\xfe not utf-8",
        }
        for rel, data in bad.items():
            self.write_file(rel, data)
        self.daemon.start()
        conn = self.connect()
        health = conn.call("server.health")
        self.assertEqual(health["status"], "degraded")
        paths = sorted(e["path"][-len("x-006/y-1-z-3.json"):]
                       for e in health["quarantined"])
        self.assertEqual(paths, sorted(bad))
        self.assertEqual(conn.get(6, 1, 2), rec)
        for rel in bad:
            self.assertFalse(os.path.exists(os.path.join(self.repo.vmdir,
                                                         rel)))
        self.assertEqual(len(os.listdir(self.repo.quarantine)), len(bad))

    def test_stray_temp_files_removed(self):
        conn = self.connect(agent_id="t")
        rec = conn.store(2, 2, 2, "kept")
        conn.close()
        self.daemon.stop()
        strays = [self.write_file("x-001/.tmp-123-1-y-1-z-1.json", b"{\"x"),
                  self.write_file("x-002/.tmp-99-7-y-2-z-2.json", b"")]
        self.daemon.start()
        gone = vt.wait_until(lambda: not any(map(os.path.exists, strays)))
        self.assertTrue(gone, [p for p in strays if os.path.exists(p)])
        conn = self.connect()
        self.assertEqual(conn.get(2, 2, 2), rec)
        self.assertIsNone(conn.get(1, 1, 1))
        self.assertEqual(conn.call("server.health")["status"], "ok")

    def test_start_on_existing_files_without_log(self):
        conn = self.connect(agent_id="t")
        recs = [conn.store(x, 5, 2, "e%d" % x) for x in range(1, 11)]
        conn.close()
        self.daemon.stop()
        shutil.rmtree(os.path.join(self.repo.gitdir, "vmem"))
        self.daemon.start()
        conn = self.connect()
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertEqual(conn.call("server.health")["decisions"], 10)


if __name__ == "__main__":
    vt.main()

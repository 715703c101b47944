#!/usr/bin/env python3
"""The start-up recovery matrix: what vmemd finds on disk after a crash or a
hand edit, and the documented outcome of each case (docs/reliability.md):

| found at start-up                                   | outcome            |
|-----------------------------------------------------|--------------------|
| our temp files in .vector-memory, a wal.tmp         | removed            |
| a torn log tail (truncated, or zeroed)              | cut, reported      |
| a corrupt record followed by a later complete batch | refuses to start   |
| a record of a kind this vmemd does not know         | refuses to start   |
| a zero-byte, a truncated, a non-UTF-8 decision file | quarantined        |
| a record at the wrong path, a stray name            | quarantined        |
| a torn experience append (the log holds it)         | completed, once    |
| a shard line that does not parse                    | line quarantined   |
| a stray entry among the shards                      | quarantined        |
| a stale .git/index.lock                             | commits deferred   |
| a stale socket file                                 | replaced           |
| a torn tail of a local segment (cut short, garbage) | cut, reported      |
| a corrupt local segment record before later ones    | refuses to start   |
| a compaction's leftover seg-*.tmp                   | removed            |
| a segment file that is a symlink or not ours        | refuses to start   |
| a vector index file missing, torn, stale            | rebuilt, reported  |

"Reported" means server.health (last_error or quarantined, status
degraded) and a line in the daemon's log. Nothing is ever lost silently.
"""

import json
import os
import re
import struct
import time

import vmemtest as vt

WAL_HDR = 20


def wal_path(repo):
    return os.path.join(repo.gitdir, "vmem", "wal")


def wal_records(data):
    """(offset, batch, payload length, last-of-batch) of the records at the
    head of a log, up to the first that is not one."""
    recs, off = [], 0
    while off + WAL_HDR <= len(data):
        magic, batch, lenf = struct.unpack_from("<IQI", data, off)
        if magic not in (0x32574d56, 0x4c574d56):
            break
        length = lenf & 0x7fffffff
        if off + WAL_HDR + length > len(data):
            break
        recs.append((off, batch, length, bool(lenf & 0x80000000)))
        off += WAL_HDR + length
    return recs


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), as the log's records carry it."""
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82f63b78 if crc & 1 else crc >> 1
    return crc ^ 0xffffffff


def wal_record(batch, payload, last=True):
    """One valid record of the log (docs/architecture.md, section 4)."""
    head = struct.pack("<QI", batch,
                       len(payload) | (0x80000000 if last else 0))
    crc = crc32c(payload, crc32c(head))
    return struct.pack("<I", 0x32574d56) + head + struct.pack("<I", crc) \
        + payload


class Matrix(vt.VmemTestCase):
    """Each case: a daemon writes, is killed (or stopped), the disk is
    changed as a crash or a user would, and the next start is checked."""

    def write_vm(self, rel, data):
        path = os.path.join(self.repo.vmdir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def read_wal(self):
        with open(wal_path(self.repo), "rb") as f:
            return f.read()

    def health(self):
        return self.connect().call("server.health")

    def quarantined(self, health):
        """{path relative to .vector-memory: entry} of health's list."""
        found = {}
        for e in health["quarantined"]:
            self.assertEqual(sorted(e), ["moved_to", "path", "reason"], e)
            self.assertTrue(e["reason"], e)
            rel = e["path"].split(".vector-memory/", 1)[-1]
            found[rel] = e
        return found

    def assertQuarantined(self, cases, good):
        """cases: {rel path: original bytes}. Each was moved (bytes kept)
        to the quarantine, listed in health and logged; good records are
        served; .vector-memory holds only decision files."""
        health = self.health()
        self.assertEqual(health["status"], "degraded", health)
        found = self.quarantined(health)
        self.assertEqual(sorted(found), sorted(cases), health)
        for rel, data in cases.items():
            self.assertFalse(os.path.exists(os.path.join(self.repo.vmdir,
                                                         rel)))
            moved = found[rel]["moved_to"]
            if not os.path.isabs(moved):
                moved = os.path.join(self.repo.root, moved)
            self.assertEqual(os.path.dirname(moved), self.repo.quarantine)
            with open(moved, "rb") as f:
                self.assertEqual(f.read(), data, rel)
            self.assertRegex(self.daemon.stderr(),
                             r"warning: quarantined .*"
                             + ".".join(map(re.escape, rel.split("/"))))
        conn = self.connect()
        for rec in good:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertEqual(health["decisions"], len(good))
        self.assertOnlyDecisionFiles()
        return health

    def stored(self, n=3, y=2, z=2):
        conn = self.connect(agent_id="matrix")
        return [conn.store(x, y, z, "record %d" % x) for x in range(1, n + 1)]

    # -- temporary files

    def test_our_temp_files_removed(self):
        recs = self.stored()
        self.daemon.stop()
        strays = [self.write_vm("x-001/.tmp-4242-7-y-1-z-1.json", b"{\"x"),
                  self.write_vm("x-003/.tmp-1-1-y-5-z-4.json", b""),
                  self.write_vm(".tmp-99-2-metadata.json", b"{")]
        walt = wal_path(self.repo) + ".tmp"
        with open(walt, "wb") as f:
            f.write(b"VMW2 a cut that never finished")
        self.daemon.start()
        for p in strays + [walt]:
            self.assertFalse(os.path.exists(p), p)
        health = self.health()
        self.assertEqual((health["status"], health["quarantined"]),
                         ("ok", []), health)
        conn = self.connect()
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertOnlyDecisionFiles()

    # -- the write-ahead log

    def crash_with_log(self):
        """Batches in the log, then kill -9 before a checkpoint: the
        records before the last batch, and the last one."""
        conn = self.connect(agent_id="wal")
        early = [conn.store(x, 1, 3, "early %d" % x) for x in range(1, 6)]
        last = conn.store(9, 1, 3, "the last batch " + "t" * 3000)
        self.daemon.kill()
        recs = wal_records(self.read_wal())
        self.assertGreaterEqual(len(recs), 6, "log emptied before the kill")
        return early, last, recs

    def assertTornTailCut(self, early, last, cut_from):
        self.daemon.start()
        conn = self.connect(agent_id="wal")
        for rec in early:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertIsNone(conn.get(9, 1, 3))
        health = conn.call("server.health")
        self.assertIn("torn tail", health["last_error"] or "", health)
        self.assertRegex(self.daemon.stderr(), r"torn tail")
        self.assertEqual(health["decisions"], len(early))
        # The log is usable again and the next start is clean.
        rec = conn.store(9, 1, 3, "after the cut")
        self.daemon.restart()
        conn = self.connect()
        self.assertEqual(conn.get(9, 1, 3), rec)
        self.assertIsNone(conn.call("server.health")["last_error"])
        vt.diag("torn tail at offset %d cut" % cut_from)

    def test_truncated_log_tail_cut_and_reported(self):
        early, last, recs = self.crash_with_log()
        off, _, length, _ = recs[-1]
        with open(wal_path(self.repo), "r+b") as f:
            f.truncate(off + WAL_HDR + length // 2)
        self.assertTornTailCut(early, last, off)

    def test_zeroed_log_tail_cut_and_reported(self):
        # The file's size grew but the last record's end never reached the
        # disk (power loss): zeros where its payload should be.
        early, last, recs = self.crash_with_log()
        off, _, length, _ = recs[-1]
        with open(wal_path(self.repo), "r+b") as f:
            f.seek(off + WAL_HDR + 10)
            f.write(b"\0" * (length - 10))
        self.assertTornTailCut(early, last, off)

    def test_corrupt_record_before_a_later_batch_refused(self):
        early, last, recs = self.crash_with_log()
        off, _, length, _ = recs[1]
        data = bytearray(self.read_wal())
        data[off + WAL_HDR + length // 2] ^= 0x20  # one bit flips
        with open(wal_path(self.repo), "wb") as f:
            f.write(data)
        d = self.daemon.spawn()
        rc = d.wait()
        self.assertEqual(rc, 1, d.stderr())
        err = d.stderr()
        self.assertIn(wal_path(self.repo), err)
        self.assertIn("corrupt record at offset %d" % off, err)
        self.assertIn("later complete batch", err)
        # Nothing was cut or rewritten: the evidence stays for a human.
        self.assertEqual(self.read_wal(), bytes(data))
        self.assertFalse(self.repo.lock_held())

    def test_record_of_an_unknown_kind_refused(self):
        # A complete batch after the last one, of a kind a newer vmemd
        # would write (its first byte names it): never skipped.
        early, last, recs = self.crash_with_log()
        off, batch, length, _ = recs[-1]
        end = off + WAL_HDR + length
        rec = wal_record(batch + 1, b'Z{"context":"from a newer vmemd"}')
        data = bytearray(self.read_wal())
        data[end:end + len(rec)] = rec
        with open(wal_path(self.repo), "wb") as f:
            f.write(data)
        d = self.daemon.spawn()
        rc = d.wait()
        self.assertEqual(rc, 1, d.stderr())
        err = d.stderr()
        self.assertIn(wal_path(self.repo), err)
        self.assertIn("a record of a kind this vmemd does not know "
                      "(first byte 0x5a", err)
        self.assertIn("refusing to start rather than drop it", err)
        self.assertEqual(self.read_wal(), bytes(data))
        self.assertFalse(self.repo.lock_held())
        # A record of a kind we know at that place replays as usual.
        rec = wal_record(batch + 1, json.dumps(
            dict(last, version=2), separators=(",", ":")).encode())
        data[end:] = rec + bytes(max(0, len(data) - end - len(rec)))
        with open(wal_path(self.repo), "wb") as f:
            f.write(data)
        self.daemon.start()
        self.assertEqual(self.connect().get(9, 1, 3)["version"], 2)

    # -- experiences

    def test_torn_experience_append_completed_once(self):
        # Killed with experiences only in the log; their shard as an
        # interrupted append leaves it: the first line whole, the second
        # cut. The start completes it from the log, nothing twice.
        conn = self.connect(agent_id="exp")
        recs = [conn.call("experience.store",
                          {"context": "situation %d" % i, "action": "a",
                           "outcome": "o"}) for i in range(3)]
        self.daemon.kill()
        lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=False)
                 for r in recs]
        rel = "experiences/exp/%s.jsonl" % recs[0]["timestamp"][:10]
        path = os.path.join(self.repo.vmdir, rel)
        # (Whatever the writer managed before the kill is replaced: the
        # log, emptied only after a second of quiet, still holds all.)
        self.assertGreaterEqual(len(wal_records(self.read_wal())), 3)
        self.write_vm(rel, (lines[0] + "\n" + lines[1][:40]).encode())
        self.daemon.start()
        conn = self.connect()
        for r in recs:
            self.assertEqual(conn.call("experience.get", {"id": r["id"]}), r)
        with open(path) as f:
            self.assertEqual(f.read(), "".join(ln + "\n" for ln in lines))
        self.assertEqual(self.health()["quarantined"], [])

    def test_bad_shard_line_and_entries_quarantined(self):
        conn = self.connect(agent_id="exp")
        good = [conn.call("experience.store",
                          {"context": "good %d" % i, "action": "a",
                           "outcome": "o"}) for i in range(2)]
        self.daemon.stop()
        rel = "experiences/exp/%s.jsonl" % good[0]["timestamp"][:10]
        path = os.path.join(self.repo.vmdir, rel)
        with open(path, "a") as f:
            f.write("{\"id\": 1}\n")
        self.write_vm("experiences/exp/notes.txt", b"mine\n")
        self.write_vm("experiences/not an agent/2025-01-01.jsonl", b"{}\n")
        self.daemon.start()
        health = self.health()
        self.assertEqual(health["status"], "degraded")
        found = self.quarantined(health)
        self.assertEqual(sorted(found), sorted(
            [rel, "experiences/exp/notes.txt", "experiences/not an agent"]))
        self.assertIn("1 line taken out", found[rel]["reason"])
        with open(found[rel]["moved_to"], "rb") as f:
            self.assertEqual(f.read(), b'{"id": 1}\n')
        conn = self.connect()
        for r in good:
            self.assertEqual(conn.call("experience.get", {"id": r["id"]}), r)
        self.assertEqual(health["experiences"], 2)
        # The shard kept its good lines; a restart finds nothing more.
        with open(path) as f:
            self.assertEqual([json.loads(ln) for ln in f], good)
        self.daemon.restart()
        self.assertEqual(self.health()["quarantined"], [])

    # -- decision files

    def test_empty_and_truncated_files_quarantined(self):
        recs = self.stored()
        self.daemon.stop()
        full = self.repo.read_decision_bytes(2, 2, 2)
        cases = {"x-001/y-2-z-2.json": b"",
                 "x-002/y-2-z-2.json": full[:len(full) // 2]}
        for rel, data in cases.items():
            self.write_vm(rel, data)
        self.daemon.start()
        health = self.assertQuarantined(cases, recs[2:])
        reasons = [e["reason"] for e in health["quarantined"]]
        vt.diag("reasons: %r" % reasons)

    def test_invalid_utf8_quarantined(self):
        recs = self.stored()
        self.daemon.stop()
        bad = self.repo.read_decision_bytes(1, 2, 2).replace(
            b"record 1", b"record \xc3\x28 1")
        self.write_vm("x-001/y-2-z-2.json", bad)
        self.daemon.start()
        self.assertQuarantined({"x-001/y-2-z-2.json": bad}, recs[1:])

    def test_wrong_path_and_stray_names_quarantined(self):
        recs = self.stored()
        self.daemon.stop()
        # A valid record of (1,2,4) in the file of (1,2,3).
        moved = vt.decision_file_bytes(dict(recs[0],
                                            coordinate=vt.coord(1, 2, 4)))
        cases = {"x-001/y-2-z-3.json": moved,
                 "x-001/notes.txt": b"mine\n",
                 "x-002/y-6-z-1.json": vt.decision_file_bytes(recs[1]),
                 "x-02/y-1-z-1.json": vt.decision_file_bytes(recs[1]),
                 "stray.json": b"{}\n"}
        for rel, data in cases.items():
            self.write_vm(rel, data)
        self.daemon.start()
        health = self.health()
        found = self.quarantined(health)
        # A stray directory may be quarantined whole.
        want = {rel if not rel.startswith("x-02/") else "x-02"
                for rel in cases}
        got = {rel if not rel.startswith("x-02/") else "x-02"
               for rel in found}
        self.assertEqual(got, want, health)
        self.assertEqual(health["status"], "degraded")
        conn = self.connect()
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        self.assertIsNone(conn.get(1, 2, 3))
        self.assertIsNone(conn.get(1, 2, 4))
        self.assertEqual(health["decisions"], len(recs))
        self.assertOnlyDecisionFiles()
        self.assertRegex(self.daemon.stderr(), r"warning: quarantined")

    # -- the socket

    def test_stale_socket_replaced(self):
        self.daemon.kill()  # leaves its socket file behind
        self.assertTrue(os.path.exists(self.daemon.sock))
        self.assertFalse(vt.accepts(self.daemon.sock))
        self.daemon.start()
        self.assertEqual(self.connect().call("server.hello")["server"],
                         "vmemd")

    def test_socket_of_a_live_daemon_not_stolen(self):
        # The other side of "stale": a socket that answers is kept and the
        # second daemon (other repository) refuses to start.
        other = vt.Repo()
        self.addCleanup(other.cleanup)
        d = vt.Daemon(other, sock=self.daemon.sock, name="second")
        self.addCleanup(d.kill)
        rc = d.spawn().wait()
        self.assertNotEqual(rc, 0, d.stderr())
        self.assertEqual(self.connect().call("server.hello")["server"],
                         "vmemd")


class LocalMatrix(vt.VmemTestCase):
    """The local kinds' files under <gitdir>/vmem (conversations/main and
    documents/docs, documents/vectors, documents/vindex): a crash's
    leftovers are repaired and reported, damage is refused with its file
    and offset, never skipped."""

    daemon_args = ("--embedding-dim", "4")

    def segdir(self, *parts):
        return os.path.join(self.repo.gitdir, "vmem", *parts)

    def active_segment(self, *parts):
        d = self.segdir(*parts)
        return os.path.join(d, max(n for n in os.listdir(d)
                                   if n.startswith("seg-")))

    def fill(self):
        c = self.connect()
        s = "00000001-0000-4000-8000-000000000000"
        msgs = [c.call("message.store", {"session_id": s, "role": "user",
                                         "content": "m%d" % i,
                                         "user_id": "u"})
                for i in range(5)]
        docs = [c.call("document.store", {"content": "d%d" % i,
                                          "embedding": [1, i, 0, 1]})
                for i in range(5)]
        return s, msgs, docs

    def check(self, s, msgs, docs):
        c = self.connect()
        self.assertEqual(c.call("message.history", {"session_id": s}), msgs)
        for d in docs:
            self.assertEqual(c.call("document.get", {
                "id": d["id"], "include_embedding": False}), d)
        return c

    def test_torn_segment_tail_cut_and_reported(self):
        s, msgs, docs = self.fill()
        self.daemon.stop()
        for parts, junk in ((("conversations", "main"), b"VMSR\x00\x01"),
                            (("documents", "docs"), b"\x00" * 30)):
            with open(self.active_segment(*parts), "ab") as f:
                f.write(junk)
        self.daemon.start()
        c = self.check(s, msgs, docs)
        h = c.call("server.health")
        self.assertIn("cut a torn tail", h["last_error"] or "", h)
        self.assertRegex(self.daemon.stderr(), r"warning: (conversations|"
                         r"documents): cut a torn tail of \d+ bytes")
        self.daemon.restart()  # cut for good: nothing to report now
        self.assertIsNone(self.connect().call("server.health")[
            "last_error"])

    def test_corrupt_segment_record_refused(self):
        self.fill()
        self.daemon.stop()
        seg = self.active_segment("conversations", "main")
        with open(seg, "r+b") as f:
            f.seek(40 + 40 + 5)  # inside the first record's payload
            b = f.read(1)
            f.seek(40 + 40 + 5)
            f.write(bytes([b[0] ^ 0xff]))
        d = self.new_daemon(name="second")
        d.spawn()
        self.assertEqual(d.wait(), 1)
        err = d.stderr()
        self.assertIn("cannot load the conversations", err)
        self.assertRegex(err, r"corrupt record in seg-[0-9a-f]{16} at "
                              r"offset 40")

    def test_compaction_leftover_removed(self):
        s, msgs, docs = self.fill()
        self.daemon.stop()
        tmp = self.segdir("conversations", "main",
                          "seg-00000000000000ff.tmp")
        with open(tmp, "wb") as f:
            f.write(b"half a compaction")
        self.daemon.start()
        self.check(s, msgs, docs)
        self.assertFalse(os.path.exists(tmp))

    def test_unsafe_segment_files_refused(self):
        s, msgs, docs = self.fill()
        self.daemon.stop()
        seg = self.active_segment("documents", "vectors")
        os.chmod(seg, 0o666)
        d = self.new_daemon(name="second")
        d.spawn()
        self.assertEqual(d.wait(), 1)
        self.assertIn("documents", d.stderr())
        os.chmod(seg, 0o600)
        os.rename(seg, seg + ".real")
        os.symlink(seg + ".real", seg)
        d = self.new_daemon(name="third")
        d.spawn()
        self.assertEqual(d.wait(), 1)
        self.assertRegex(d.stderr(), r"symbolic link|not a regular")
        os.remove(seg)
        os.rename(seg + ".real", seg)
        self.daemon.start()
        self.check(s, msgs, docs)

    def test_vector_index_missing_torn_or_stale(self):
        s, msgs, docs = self.fill()
        self.daemon.stop()
        vindex = self.segdir("documents", "vindex")
        self.assertTrue(os.path.exists(vindex))
        good = open(vindex, "rb").read()
        for damage, data in (("missing", None), ("torn", good[:-9]),
                             ("stale", good)):
            with self.subTest(damage=damage):
                if damage == "stale":
                    # A vector changed behind the file's back: update it,
                    # then kill so the file is not saved again.
                    self.daemon.start()
                    self.connect().call("document.update", {
                        "id": docs[0]["id"], "embedding": [0, 0, 1, 1]})
                    self.daemon.kill()
                    with open(vindex, "wb") as f:
                        f.write(good)
                elif data is None:
                    os.remove(vindex)
                else:
                    with open(vindex, "wb") as f:
                        f.write(data)
                self.daemon.start()
                c = self.connect()
                vi = c.call("server.health")["vector_index"]
                self.assertIn(vi["state"], ("rebuilding", "rebuilt"), vi)
                self.assertIn({"missing": "absent", "torn": "torn",
                               "stale": "stale"}[damage], vi["note"])
                got = c.call("document.semantic_search", {
                    "query_embedding": [1, 2, 0, 1], "top_k": 10})
                self.assertEqual(len(got), 5)
                self.assertRegex(self.daemon.stderr(),
                                 r"the vector index file was not used")
                self.daemon.stop()
                good = open(vindex, "rb").read()


class StaleIndexLock(vt.GitCase):
    """A daemon killed inside a commit leaves .git/index.lock. Nobody can
    tell a stale lock from a live one (git itself refuses to go on), so
    vmemd never removes it: commits are deferred with the reason in health
    and in git.sync's error, writes go on being acknowledged, and commits
    resume once someone removes the lock."""

    start_daemon = False

    def test_stale_index_lock_defers_commits_with_a_reason(self):
        lock = os.path.join(self.repo.gitdir, "index.lock")
        with open(lock, "wb") as f:
            f.write(b"DIRC left by a killed process")
        old = time.time() - 3600
        os.utime(lock, (old, old))
        self.daemon = self.start_vmemd("--commit-delay-ms", "100")
        conn = self.connect(agent_id="stale")
        recs = [conn.store(7, 1, 2, "while the lock is stale")]
        health = self.assertDeferred(conn, "index.lock")
        vt.diag("deferred: %s" % health["commit_deferred"])
        time.sleep(2.0)
        recs.append(conn.store(7, 2, 2, "still acknowledged"))
        health = self.health(conn)
        self.assertIn("index.lock", health["commit_deferred"])
        self.assertEqual(health["pending"], 2, health)
        self.assertEqual(self.commits(), [])
        self.assertTrue(os.path.exists(lock), "someone else's lock removed")
        self.assertRegex(self.daemon.stderr(), r"commit deferred: .*index")
        # Deferred, not lost: a restart still has everything pending.
        self.daemon.kill()
        self.daemon.start()
        conn = self.connect()
        for rec in recs:
            self.assertEqual(conn.get(*rec["coordinate"].values()), rec)
        os.unlink(lock)
        self.assertCommitResumes(conn, [], recs, timeout=vt.scaled(10.0))


if __name__ == "__main__":
    vt.main()

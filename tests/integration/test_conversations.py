#!/usr/bin/env python3
"""Sessions and messages (issue 15) against a real daemon: every method of
session.* and message.*, success and error cases, activity order, paging,
history bounds, restarts and kill -9, subscriptions, trace spans, and
that nothing of it reaches the working tree or git."""

import json
import os
import threading
import uuid

import vmemtest as vt
from test_cli import CliTestCase
from test_mcp import McpMixin

E_VALUE = vt.E_VALUE
E_QUERY = vt.E_QUERY


def sid():
    return str(uuid.uuid4())


class Sessions(vt.VmemTestCase):
    def test_create_get_list_delete(self):
        c = self.connect()
        s = c.call("session.create", {"user_id": "ada",
                                      "metadata": {"tags": ["x"], "n": 1}})
        self.assertEqual(sorted(s), ["created_at", "id", "message_count",
                                     "metadata", "updated_at", "user_id"])
        self.assertEqual(str(uuid.UUID(s["id"])), s["id"])
        self.assertEqual(uuid.UUID(s["id"]).version, 4)
        vt.VmemTestCase.assertTimestamp(self, s["created_at"])
        self.assertEqual(s["created_at"], s["updated_at"])
        self.assertEqual((s["user_id"], s["metadata"], s["message_count"]),
                         ("ada", {"tags": ["x"], "n": 1}, 0))
        self.assertEqual(c.call("session.get", {"session_id": s["id"]}), s)
        self.assertEqual(c.call("session.get",
                                {"session_id": s["id"].upper()}), s)
        self.assertIsNone(c.call("session.get", {"session_id": sid()}))
        self.assertEqual(c.call("session.list", {}), [s])
        self.assertIs(c.call("session.delete", {"session_id": s["id"]}),
                      True)
        self.assertIs(c.call("session.delete", {"session_id": s["id"]}),
                      False)
        self.assertIsNone(c.call("session.get", {"session_id": s["id"]}))
        self.assertEqual(c.call("session.list", {}), [])

    def test_user_id_from_params_else_the_agent_id(self):
        c = self.connect()
        self.assertRpcError(E_VALUE, c.call, "session.create", {})
        c.call("server.hello", {"agent_id": "agent-7"})
        self.assertEqual(c.call("session.create", {})["user_id"], "agent-7")
        self.assertEqual(c.call("session.create",
                                {"user_id": "u"})["user_id"], "u")

    def test_bad_params_refused(self):
        c = self.connect(agent_id="a")
        bad = [
            {"user_id": ""}, {"user_id": "x" * 256}, {"user_id": "a\nb"},
            {"user_id": 5}, {"metadata": [1]}, {"metadata": "x"},
            {"metadata": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {
                "h": {"i": {"j": {"k": {"l": {"m": {"n": {"o": {"p": {
                    "q": 1}}}}}}}}}}}}}}}}}},
            {"metadata": {"k%d" % i: i for i in range(5000)}},
            {"surprise": 1},
        ]
        for params in bad:
            with self.subTest(params=str(params)[:80]):
                self.assertRpcError(E_VALUE, c.call, "session.create",
                                    params)
        self.assertEqual(c.call("session.create",
                                {"user_id": "é" * 127 + "x"})["user_id"],
                         "é" * 127 + "x")
        for method in ("session.get", "session.delete", "message.history"):
            for value in (None, 5, "", "not-a-uuid", sid()[:-1],
                          sid() + "0"):
                params = {} if value is None else {"session_id": value}
                with self.subTest(method=method, value=value):
                    self.assertRpcError(E_VALUE, c.call, method, params)
        self.assertEqual(c.call("server.health")["counts"]["sessions"], 1)

    def test_list_by_activity_user_and_pages(self):
        c = self.connect()
        ids = [c.call("session.create", {"user_id": "u%d" % (i % 2)})["id"]
               for i in range(6)]
        # Newest activity first: creation order reversed ...
        self.assertEqual([s["id"] for s in c.call("session.list", {})],
                         ids[::-1])
        # ... until a message makes an old session the newest.
        m = c.call("message.store", {"session_id": ids[1], "role": "user",
                                     "content": "wake up"})
        listed = c.call("session.list", {})
        self.assertEqual([s["id"] for s in listed],
                         [ids[1]] + [i for i in ids[::-1] if i != ids[1]])
        self.assertEqual(listed[0]["updated_at"], m["created_at"])
        self.assertEqual(listed[0]["message_count"], 1)
        self.assertEqual([s["id"] for s in c.call(
            "session.list", {"user_id": "u1"})], [ids[1], ids[5], ids[3]])
        self.assertEqual(c.call("session.list", {"user_id": "nobody"}), [])
        # Pages: after the last session of the previous page.
        seen, after = [], None
        while True:
            params = {"limit": 4}
            if after:
                params["after"] = after
            page = c.call("session.list", params)
            seen += [s["id"] for s in page]
            if len(page) < 4:
                break
            after = page[-1]
        self.assertEqual(seen, [s["id"] for s in listed])
        for bad in ({"limit": 0}, {"limit": 10001}, {"limit": "3"},
                    {"after": "x"}, {"after": {"id": ids[0]}},
                    {"after": {"updated_at": "soon", "id": ids[0]}},
                    {"user_id": 3}):
            with self.subTest(params=bad):
                self.assertRpcError(E_VALUE, c.call, "session.list", bad)


class Messages(vt.VmemTestCase):
    def test_store_creates_the_session_and_updates_it(self):
        c = self.connect(agent_id="claude")
        s = sid()
        m1 = c.call("message.store", {"session_id": s, "role": "user",
                                      "content": "What is async?",
                                      "metadata": {"source": "web_ui"}})
        self.assertEqual(sorted(m1), ["content", "created_at", "id",
                                      "metadata", "role", "session_id"])
        self.assertEqual((m1["session_id"], m1["role"], m1["content"],
                          m1["metadata"]),
                         (s, "user", "What is async?", {"source": "web_ui"}))
        sess = c.call("session.get", {"session_id": s})
        self.assertEqual((sess["user_id"], sess["message_count"],
                          sess["updated_at"]), ("claude", 1,
                                                m1["created_at"]))
        self.assertLessEqual(sess["created_at"], m1["created_at"])
        m2 = c.call("message.store", {"session_id": s, "role": "assistant",
                                      "content": "Non-blocking I/O...",
                                      "metadata": {"model": "m",
                                                   "confidence": 0.95,
                                                   "token_count": 150},
                                      "user_id": "ignored-for-an-old-one"})
        self.assertGreater(m2["created_at"], m1["created_at"])
        sess2 = c.call("session.get", {"session_id": s})
        self.assertEqual((sess2["user_id"], sess2["created_at"],
                          sess2["updated_at"], sess2["message_count"]),
                         ("claude", sess["created_at"], m2["created_at"], 2))
        self.assertEqual(c.call("message.history", {"session_id": s}),
                         [m1, m2])
        # user_id from params names the user of a new session.
        s2 = sid()
        c.call("message.store", {"session_id": s2, "role": "system",
                                 "content": "x", "user_id": "bob"})
        self.assertEqual(c.call("session.get",
                                {"session_id": s2})["user_id"], "bob")

    def test_store_without_any_user_refused(self):
        c = self.connect()
        self.assertRpcError(E_VALUE, c.call, "message.store",
                            {"session_id": sid(), "role": "user",
                             "content": "x"})
        s = c.call("session.create", {"user_id": "u"})["id"]
        # An existing session needs no user.
        c.call("message.store", {"session_id": s, "role": "user",
                                 "content": "x"})

    def test_bad_messages_refused(self):
        c = self.connect(agent_id="a")
        s = sid()
        good = {"session_id": s, "role": "user", "content": "x"}
        bad = [dict(good, role="robot"), dict(good, role="User"),
               dict(good, role=1), dict(good, content=""),
               dict(good, content=5), dict(good, metadata=[]),
               dict(good, session_id="x"), dict(good, extra=1),
               {"role": "user", "content": "x"},
               {"session_id": s, "content": "x"},
               {"session_id": s, "role": "user"},
               dict(good, user_id="")]
        for params in bad:
            with self.subTest(params=params):
                self.assertRpcError(E_VALUE, c.call, "message.store",
                                    params)
        self.assertIsNone(c.call("session.get", {"session_id": s}))
        # A message id is no session id.
        m = c.call("message.store", good)
        err = self.assertRpcError(E_VALUE, c.call, "message.store",
                                  dict(good, session_id=m["id"]))
        self.assertIn("message", err.message)

    def test_history_most_recent_oldest_first(self):
        c = self.connect(agent_id="a")
        s = sid()
        sent = [c.call("message.store",
                       {"session_id": s, "role": ("user", "assistant")[i % 2],
                        "content": "m%03d" % i}) for i in range(105)]
        got = c.call("message.history", {"session_id": s})
        self.assertEqual(got, sent[5:])  # limit 100 by default
        self.assertEqual(c.call("message.history",
                                {"session_id": s, "limit": 3}), sent[-3:])
        self.assertEqual(c.call("message.history",
                                {"session_id": s, "limit": 1000}), sent)
        self.assertEqual(c.call("message.history", {"session_id": sid()}),
                         [])
        for limit in (0, -1, -100, 1.5, "2", True, None):
            with self.subTest(limit=limit):
                self.assertRpcError(E_VALUE, c.call, "message.history",
                                    {"session_id": s, "limit": limit})

    def test_contents_round_trip(self):
        c = self.connect(agent_id="a")
        s = sid()
        texts = ["\"quoted\" \\ back\\slash", "tab\tnew\nline\r\x01\x1f",
                 "é ü 中文 😀", " ", "x" * 70000, "\u2028\u2029"]
        sent = [c.call("message.store", {"session_id": s, "role": "user",
                                         "content": t,
                                         "metadata": {"t": t[:10]}})
                for t in texts]
        self.assertEqual([m["content"] for m in sent], texts)
        self.assertEqual(c.call("message.history", {"session_id": s}), sent)

    def test_delete_takes_the_messages(self):
        c = self.connect(agent_id="a")
        s, other = sid(), sid()
        for i in range(5):
            c.call("message.store", {"session_id": s, "role": "user",
                                     "content": "m%d" % i})
        kept = c.call("message.store", {"session_id": other, "role": "user",
                                        "content": "stays"})
        self.assertEqual(c.call("server.health")["counts"]["messages"], 6)
        self.assertIs(c.call("session.delete", {"session_id": s}), True)
        self.assertEqual(c.call("message.history", {"session_id": s}), [])
        h = c.call("server.health")["counts"]
        self.assertEqual((h["sessions"], h["messages"]), (1, 1))
        self.assertEqual(c.call("message.history", {"session_id": other}),
                         [kept])
        # The id can be used again: a new session.
        again = c.call("message.store", {"session_id": s, "role": "user",
                                         "content": "again"})
        self.assertEqual(c.call("message.history", {"session_id": s}),
                         [again])

    def test_answers_bounded(self):
        self.daemon.stop()
        self.daemon = self.start_vmemd("--max-line", str(4 << 20))
        c = self.connect(agent_id="a")
        s = sid()
        big = "y" * (1 << 20)
        for _ in range(17):
            c.call("message.store", {"session_id": s, "role": "user",
                                     "content": big}, timeout=30)
        err = self.assertRpcError(E_QUERY, c.call, "message.history",
                                  {"session_id": s, "limit": 17})
        self.assertIn("limit", err.message)
        self.assertEqual(len(c.call("message.history",
                                    {"session_id": s, "limit": 15},
                                    timeout=30)), 15)
        # Content that escapes to six times its size counts as such: five
        # of 600,000 control characters are 18 MB of answer, four 14.4.
        s = sid()
        ctl = "\x01" * 600000
        for _ in range(5):
            c.call("message.store", {"session_id": s, "role": "user",
                                     "content": ctl}, timeout=30)
        self.assertRpcError(E_QUERY, c.call, "message.history",
                            {"session_id": s, "limit": 5})
        got = c.call("message.history", {"session_id": s, "limit": 4},
                     timeout=30)
        self.assertEqual([m["content"] for m in got], [ctl] * 4)

    def test_concurrent_writers_one_session(self):
        s = sid()
        errors = []

        def writer(n):
            try:
                c = vt.Conn(self.daemon.sock, agent_id="w%d" % n)
                for i in range(40):
                    c.call("message.store", {"session_id": s, "role": "user",
                                             "content": "%d-%d" % (n, i)})
                c.close()
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(n,))
                   for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        got = self.connect().call("message.history",
                                  {"session_id": s, "limit": 1000})
        self.assertEqual(len(got), 320)
        times = [m["created_at"] for m in got]
        self.assertEqual(times, sorted(times))
        self.assertEqual(len(set(times)), 320)
        for n in range(8):  # each writer's own order is kept
            mine = [m["content"] for m in got if m["content"].startswith(
                "%d-" % n)]
            self.assertEqual(mine, ["%d-%d" % (n, i) for i in range(40)])


class Durability(vt.VmemTestCase):
    def fill(self, c):
        s1, s2 = sid(), sid()
        made = {s1: [], s2: []}
        for i in range(30):
            s = (s1, s2)[i % 2]
            made[s].append(c.call("message.store", {
                "session_id": s, "role": "user", "content": "m%d" % i,
                "metadata": {"i": i}}))
        sess = c.call("session.create", {"user_id": "empty",
                                         "metadata": {"k": "v"}})
        return made, sess

    def check(self, made, sess):
        c = self.connect()
        for s, msgs in made.items():
            self.assertEqual(c.call("message.history", {"session_id": s}),
                             msgs)
        self.assertEqual(c.call("session.get", {"session_id": sess["id"]}),
                         sess)
        h = c.call("server.health")
        self.assertEqual((h["counts"]["sessions"], h["counts"]["messages"]),
                         (3, 30))
        return c

    def test_restart_keeps_everything(self):
        made, sess = self.fill(self.connect(agent_id="a"))
        listed = self.connect().call("session.list", {})
        self.daemon.restart()
        c = self.check(made, sess)
        self.assertEqual(c.call("session.list", {}), listed)
        segs = os.path.join(self.repo.gitdir, "vmem", "conversations", "main")
        self.assertTrue(any(f.startswith("seg-") for f in os.listdir(segs)))

    def test_kill9_keeps_acknowledged(self):
        made, sess = self.fill(self.connect(agent_id="a"))
        self.daemon.kill()
        self.daemon.start()
        self.check(made, sess)
        # And once more after the replay was materialised.
        self.daemon.kill()
        self.daemon.start()
        c = self.check(made, sess)
        self.assertEqual(c.call("server.health")["status"], "ok")

    def test_delete_survives_kill9(self):
        c = self.connect(agent_id="a")
        made, sess = self.fill(c)
        gone = list(made)[0]
        c.call("session.delete", {"session_id": gone})
        self.daemon.kill()
        self.daemon.start()
        c = self.connect()
        self.assertEqual(c.call("message.history", {"session_id": gone}), [])
        self.assertIsNone(c.call("session.get", {"session_id": gone}))
        self.assertEqual(c.call("server.health")["counts"]["messages"], 15)

    def test_nothing_in_the_working_tree(self):
        self.fill(self.connect(agent_id="a"))
        self.daemon.stop()
        out = os.popen("git -C %s status --porcelain --untracked-files=all"
                       % self.repo.root).read()
        self.assertEqual(out, "")
        self.daemon.start()


class Watch(vt.VmemTestCase):
    def test_messages_of_one_session(self):
        w = self.connect()
        s, other = sid(), sid()
        sub = w.call("watch.subscribe", {"kinds": ["message"],
                                         "session_id": s})["subscription"]
        every = w.call("watch.subscribe",
                       {"kinds": ["message"]})["subscription"]
        c = self.connect(agent_id="a")
        m = c.call("message.store", {"session_id": s, "role": "user",
                                     "content": "hi"})
        c.call("message.store", {"session_id": other, "role": "user",
                                 "content": "elsewhere"})
        c.call("session.delete", {"session_id": s})
        got = w.notifications(0.5)
        mine = [n for n in got if n["subscription"] == sub]
        self.assertEqual(mine, [
            {"subscription": sub, "kind": "message", "event": "stored",
             "session_id": s, "message": m},
            {"subscription": sub, "kind": "message", "event": "deleted",
             "session_id": s, "message": None}])
        self.assertEqual([(n["session_id"], n["event"]) for n in got
                          if n["subscription"] == every],
                         [(s, "stored"), (other, "stored"), (s, "deleted")])
        # No decision notifications for a messages-only subscription.
        c.store(1, 1, 2, "a decision")
        self.assertEqual(w.notifications(0.3), [])

    def test_bad_subscriptions(self):
        w = self.connect()
        for params in ({"kinds": []}, {"kinds": ["messages"]},
                       {"kinds": "message"},
                       {"kinds": ["message"], "x_range": [1, 2]},
                       {"session_id": sid()},
                       {"kinds": ["message"], "session_id": "x"}):
            with self.subTest(params=params):
                self.assertRpcError(E_VALUE, w.call, "watch.subscribe",
                                    params)


class Tracing(vt.VmemTestCase):
    def setUp(self):
        self.start_daemon = False
        super().setUp()
        self.trace = self.repo.path("spans.jsonl")
        self.daemon = self.start_vmemd("--trace-file", self.trace)

    def test_one_span_per_request_parented_to_the_caller(self):
        c = self.connect(agent_id="a")
        parent_trace, parent_span = "0af7651916cd43dd8448eb211c80319c", \
            "b7ad6b7169203331"
        tp = "00-%s-%s-01" % (parent_trace, parent_span)
        s = sid()
        c.call("message.store", {"session_id": s, "role": "user",
                                 "content": "twelve bytes",
                                 "metadata": {"source": "web", "n": 1},
                                 "_meta": {"traceparent": tp}})
        c.call("message.history", {"session_id": s, "limit": 5,
                                   "_meta": {"traceparent": tp}})
        c.call("session.create", {"user_id": "u", "metadata": {"k": 1}})
        c.store(1, 1, 2, "a decision", _meta={"traceparent": tp})
        self.assertRpcError(E_VALUE, c.call, "message.history",
                            {"session_id": s, "limit": 0})
        # Not sampled by the caller: no span.
        c.call("session.get", {"session_id": s, "_meta": {
            "traceparent": "00-%s-%s-00" % (parent_trace, parent_span)}})
        spans = vt.wait_until(lambda: len(vt.read_spans(self.trace)) >= 6
                              and vt.read_spans(self.trace), 3.0)
        self.assertTrue(spans, vt.read_spans(self.trace))
        by = {}
        for sp in spans:
            by.setdefault(sp["name"], []).append(sp)
        self.assertEqual(sorted(by), sorted([
            "server.hello", "memory.store_message",
            "memory.get_conversation_history", "memory.create_session",
            "decision.store"]))
        st = by["memory.store_message"][0]
        self.assertEqual((st["traceId"], st["parentSpanId"]),
                         (parent_trace, parent_span))
        self.assertEqual(st["attributes"]["session_id"], s)
        self.assertEqual(st["attributes"]["role"], "user")
        self.assertEqual(st["attributes"]["content_length"], 12)
        self.assertEqual(st["attributes"]["metadata_keys"], ["source", "n"])
        self.assertEqual(st["attributes"]["operation.type"], "store_message")
        self.assertIs(st["attributes"]["operation.success"], True)
        self.assertEqual(st["status"], {"code": 1})
        hist = by["memory.get_conversation_history"]
        self.assertEqual(len(hist), 2)
        self.assertEqual(hist[0]["attributes"]["result_count"], 1)
        self.assertEqual(hist[0]["attributes"]["limit"], 5)
        failed = hist[1]
        self.assertEqual(failed["status"]["code"], 2)
        self.assertIs(failed["attributes"]["operation.success"], False)
        self.assertNotIn("parentSpanId", failed)
        self.assertEqual(by["memory.create_session"][0]["attributes"][
            "metadata_keys"], ["k"])
        self.assertEqual(by["decision.store"][0]["parentSpanId"],
                         parent_span)
        for sp in spans:
            self.assertRegex(sp["spanId"], "^[0-9a-f]{16}$")
            self.assertGreaterEqual(int(sp["endTimeUnixNano"]),
                                    int(sp["startTimeUnixNano"]))

    def test_bad_meta(self):
        c = self.connect()
        self.assertRpcError(E_VALUE, c.call, "session.get",
                            {"session_id": sid(), "_meta": "x"})
        # An unusable traceparent starts a new trace.
        self.assertIsNone(c.call("session.get", {
            "session_id": sid(), "_meta": {"traceparent": "00-zz"}}))
        spans = vt.wait_until(lambda: vt.read_spans(self.trace), 3.0)
        self.assertTrue(spans)
        self.assertNotIn("parentSpanId", spans[-1])


class Cli(CliTestCase):
    def test_chat_ls_and_show(self):
        c = self.connect(agent_id="a")
        s1, s2 = sid(), sid()
        c.call("message.store", {"session_id": s1, "role": "user",
                                 "content": "first line\nsecond",
                                 "user_id": "ada"})
        for i in range(3):
            c.call("message.store", {"session_id": s2, "role": "assistant",
                                     "content": "answer %d" % i,
                                     "user_id": "bob"})
        out = self.ok("chat", "ls").stdout.splitlines()
        self.assertEqual(out[0].split(), ["SESSION", "UPDATED", "MESSAGES",
                                          "USER"])
        self.assertEqual([ln.split()[0] for ln in out[1:]], [s2, s1])
        self.assertEqual(out[1].split()[2:], ["3", "bob"])
        self.assertEqual([ln.split()[0] for ln in self.ok(
            "chat", "ls", "--user", "ada").stdout.splitlines()[1:]], [s1])
        self.assertEqual(len(self.ok("chat", "ls", "--limit", "1")
                             .stdout.splitlines()), 2)
        shown = self.ok("chat", "show", s2, "--limit", "2").stdout
        self.assertNotIn("answer 0", shown)
        self.assertRegex(shown, r"(?s)^\[\S+Z\] assistant:\nanswer 1\n"
                                r"\[\S+Z\] assistant:\nanswer 2\n$")
        self.assertIn("first line\nsecond",
                      self.ok("chat", "show", s1).stdout)
        got = self.json_of("chat", "show", s2)
        self.assertEqual([m["content"] for m in got],
                         ["answer 0", "answer 1", "answer 2"])
        self.assertEqual(self.ok("chat", "show", sid()).stdout,
                         "no messages\n")

    def test_chat_errors(self):
        for args in (("chat",), ("chat", "rm"), ("chat", "show"),
                     ("chat", "ls", "extra"), ("chat", "show", sid(),
                                               "--limit", "0"),
                     ("chat", "ls", "--meta", "a=b"),
                     ("chat", "show", sid(), "--user", "u")):
            with self.subTest(args=args):
                self.fails(2, *args)
        self.fails(1, "chat", "show", "not-a-uuid", type_name="ValueError")


class Mcp(McpMixin, vt.VmemTestCase):
    def test_remember_and_history(self):
        c = self.mcp(client="agent-one")
        s = sid()
        m = self.tool_ok(c, "remember_message", {
            "session_id": s, "role": "user", "content": "hello",
            "metadata": {"source": "chat"}})
        self.assertEqual(m, c.call("message.history", {"session_id": s})[0])
        self.assertEqual(c.call("session.get", {"session_id": s})[
            "user_id"], "agent-one")
        for i in range(60):
            self.tool_ok(c, "remember_message", {
                "session_id": s, "role": "assistant",
                "content": "%d %s" % (i, "x" * (1500 if i == 59 else 10))})
        h = self.tool_ok(c, "conversation_history", {"session_id": s})
        self.assertEqual((h["count"], h["older"]), (50, True))
        self.assertEqual(h["messages"][-1]["content_truncated"], True)
        self.assertEqual(h["messages"][-1]["content_bytes"], 1503)
        self.assertTrue(h["messages"][0]["content"].startswith("10 "))
        h = self.tool_ok(c, "conversation_history",
                         {"session_id": s, "limit": 200})
        self.assertEqual((h["count"], h["older"]), (61, False))
        self.assertEqual(h["messages"][0], m)
        empty = self.tool_ok(c, "conversation_history",
                             {"session_id": sid()})
        self.assertEqual(empty, {"messages": [], "count": 0,
                                 "older": False})
        big = "y" * 3000
        for _ in range(80):  # 80 previews of 1 KB: over the page
            self.tool_ok(c, "remember_message", {
                "session_id": s, "role": "user", "content": big})
        h = self.tool_ok(c, "conversation_history",
                         {"session_id": s, "limit": 200})
        self.assertLess(len(json.dumps(h)), 64 * 1024 + 4096)
        self.assertTrue(h["older"])

    def test_errors_are_tool_results(self):
        c = self.mcp()
        self.tool_error(c, "remember_message",
                        {"session_id": sid(), "role": "robot",
                         "content": "x"}, "ValueError")
        self.tool_error(c, "remember_message",
                        {"session_id": "x", "role": "user",
                         "content": "x"}, "ValueError")
        self.tool_error(c, "remember_message",
                        {"session_id": sid(), "role": "user"},
                        "ValueError")
        for limit in (0, 201, "5"):
            self.tool_error(c, "conversation_history",
                            {"session_id": sid(), "limit": limit},
                            "ValueError")


if __name__ == "__main__":
    vt.main()

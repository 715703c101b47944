#!/usr/bin/env python3
"""MCP (2025-06-18) on vmemd's own socket, against a real daemon:
initialize and version negotiation, the initialized notification, ping,
tools/list and its schemas, every tool compared with the protocol method
it runs, domain errors as isError results, protocol errors as JSON-RPC
errors, where the agent id comes from, MCP mixed with the native methods
on one connection, and pipelined tool calls answered in order."""

import json
import re

import vmemtest as vt
from vmemtest import HEX40

LATEST = "2025-06-18"
SUPPORTED = ["2025-06-18", "2025-03-26", "2024-11-05"]
TOOLS = {
    "store_decision": "decision.store",
    "get_decision": "decision.get",
    "query_decisions": "decision.query_range",
    "decisions_before": "decision.query_partial_order",
    "search_decisions": "decision.search",
    "decision_history": "decision.history",
    "delete_decision": "decision.delete",
    "sync_memory": "git.sync",
}
COORD_TOOLS = ["store_decision", "get_decision", "decision_history",
               "delete_decision"]
TYPE_RE = re.compile(r"^(\w+): (.+)$", re.S)


def init_params(name="test-client", version=LATEST):
    return {"protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": name, "version": "1.0"}}


class McpMixin:
    """Helpers to speak MCP over a vt.Conn."""

    def mcp(self, agent_id=None, client="test-client"):
        """A connection that has gone through initialize/initialized."""
        c = self.connect(agent_id=agent_id)
        if client is not None:
            c.call("initialize", init_params(client))
            c.notify("notifications/initialized")
        return c

    def tool(self, c, name, arguments=None, **kw):
        """tools/call; returns the CallToolResult (checked for shape)."""
        params = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        params.update(kw)
        res = c.call("tools/call", params)
        self.assertCallToolResult(res)
        return res

    def tool_ok(self, c, name, arguments=None):
        """A successful tool call's result, parsed from its text."""
        res = self.tool(c, name, arguments)
        self.assertFalse(res["isError"], res["content"][0]["text"])
        return json.loads(res["content"][0]["text"])

    def tool_error(self, c, name, arguments, expected_type):
        """A tool error: (type, message) from its "<Type>: <msg>" text."""
        res = self.tool(c, name, arguments)
        text = res["content"][0]["text"]
        self.assertTrue(res["isError"], text)
        m = TYPE_RE.match(text)
        self.assertIsNotNone(m, text)
        self.assertEqual(m.group(1), expected_type, text)
        return m.group(2)

    def assertCallToolResult(self, res):
        self.assertEqual(sorted(res), ["content", "isError"])
        self.assertIsInstance(res["isError"], bool)
        self.assertEqual(len(res["content"]), 1)
        self.assertEqual(sorted(res["content"][0]), ["text", "type"])
        self.assertEqual(res["content"][0]["type"], "text")
        self.assertIsInstance(res["content"][0]["text"], str)


class Lifecycle(McpMixin, vt.VmemTestCase):

    def test_initialize_echoes_supported_versions(self):
        c = self.connect()
        health = c.call("server.health")
        for version in SUPPORTED:
            with self.subTest(version=version):
                res = c.call("initialize", init_params(version=version))
                self.assertEqual(sorted(res), ["capabilities",
                                               "instructions",
                                               "protocolVersion",
                                               "serverInfo"])
                self.assertEqual(res["protocolVersion"], version)
                self.assertEqual(res["capabilities"],
                                 {"tools": {"listChanged": False}})
                self.assertEqual(res["serverInfo"]["name"], "vmemd")
                self.assertEqual(res["serverInfo"]["version"],
                                 health["version"])
                self.assertIn("coordinate", res["instructions"])
                self.assertIn("1..1000", res["instructions"])

    def test_initialize_unknown_version_gets_latest(self):
        c = self.connect()
        for version in ["2099-01-01", "2024-10-07", "", "1"]:
            with self.subTest(version=version):
                res = c.call("initialize", init_params(version=version))
                self.assertEqual(res["protocolVersion"], LATEST)

    def test_initialize_bad_params(self):
        c = self.connect()
        bad = [{}, {"protocolVersion": 20250618},
               dict(init_params(), clientInfo="me"),
               dict(init_params(), clientInfo={"name": 7}),
               dict(init_params(), capabilities=[])]
        for params in bad:
            with self.subTest(params=params):
                self.assertRpcError(vt.E_VALUE, c.call, "initialize",
                                    params)
        # Extra members (_meta, future fields) are accepted.
        res = c.call("initialize", dict(init_params(), _meta={"a": 1},
                                        future={"b": 2}))
        self.assertEqual(res["protocolVersion"], LATEST)

    def test_initialized_notification_is_not_answered(self):
        c = self.connect()
        c.call("initialize", init_params())
        c.notify("notifications/initialized")
        c.notify("notifications/cancelled", {"requestId": 1})
        self.assertTrue(c.silent_for(0.3))
        self.assertEqual(c.call("ping"), {})
        # Sent as a request by mistake it is answered, not refused.
        self.assertEqual(c.call("notifications/initialized"), {})

    def test_ping(self):
        c = self.connect()
        self.assertEqual(c.call("ping"), {})
        self.assertEqual(c.call("ping", {"_meta": {"x": 1}}), {})
        c.call("initialize", init_params())
        self.assertEqual(c.call("ping"), {})

    def test_tools_work_without_initialize(self):
        c = self.connect(agent_id="plain")
        rec = self.tool_ok(c, "store_decision",
                           {"x": 1, "y": 1, "z": 2, "content": "no init"})
        self.assertEqual(rec["agent_id"], "plain")


class ToolList(McpMixin, vt.VmemTestCase):

    daemon_args = ("--max-x", "50")

    def check_schema(self, name, schema, max_x):
        self.assertEqual(schema["type"], "object")
        self.assertIs(schema["additionalProperties"], False)
        props = schema["properties"]
        self.assertIsInstance(props, dict)
        self.assertIsInstance(schema["required"], list)
        self.assertTrue(set(schema["required"]) <= set(props),
                        schema["required"])
        self.assertEqual(len(set(schema["required"])),
                         len(schema["required"]))
        for pname, p in props.items():
            with self.subTest(tool=name, prop=pname):
                self.assertIn("type", p)
                self.assertTrue(p.get("description"), p)
                if p["type"] == "integer":
                    self.assertGreaterEqual(p["minimum"], 0)
                    self.assertGreaterEqual(p.get("maximum", 1 << 62),
                                            p["minimum"])
        if name in COORD_TOOLS:
            self.assertEqual(props["x"]["minimum"], 1)
            self.assertEqual(props["x"]["maximum"], max_x)
            self.assertEqual((props["y"]["minimum"], props["y"]["maximum"]),
                             (1, 5))
            self.assertEqual((props["z"]["minimum"], props["z"]["maximum"]),
                             (1, 4))
            self.assertTrue({"x", "y", "z"} <= set(schema["required"]))

    def test_tools_list(self):
        c = self.mcp()
        max_x = c.call("server.hello")["limits"]["max_x"]
        self.assertEqual(max_x, 50)
        res = c.call("tools/list")
        self.assertEqual(sorted(res), ["tools"])
        tools = {t["name"]: t for t in res["tools"]}
        self.assertEqual(len(res["tools"]), 8)
        self.assertEqual(sorted(tools), sorted(TOOLS))
        for name, t in tools.items():
            with self.subTest(tool=name):
                self.assertGreater(len(t["description"]), 60)
                self.check_schema(name, t["inputSchema"], max_x)
                self.assertIsInstance(t["annotations"]["readOnlyHint"],
                                      bool)
        store = tools["store_decision"]["inputSchema"]
        self.assertEqual(sorted(store["required"]),
                         ["content", "x", "y", "z"])
        self.assertEqual(store["properties"]["content"]["minLength"], 1)
        self.assertEqual(store["properties"]["content"]["maxLength"],
                         vt.CONTENT_MAX)
        self.assertEqual(store["properties"]["overwrite"]["type"],
                         "boolean")
        self.assertEqual(store["properties"]["agent_id"]["maxLength"], 128)
        self.assertIn("write-once", tools["store_decision"]["description"])
        before = tools["decisions_before"]["inputSchema"]["properties"]
        self.assertEqual(before["x_threshold"]["maximum"], max_x + 1)
        self.assertEqual(before["y_threshold"]["maximum"], 6)
        self.assertEqual(before["z_filter"]["maximum"], 4)
        ranges = tools["query_decisions"]["inputSchema"]
        self.assertEqual(ranges["required"], [])
        self.assertEqual(ranges["properties"]["x_range"]["items"]["maximum"],
                         max_x)
        self.assertEqual(ranges["properties"]["x_range"]["minItems"], 2)
        self.assertEqual(
            tools["search_decisions"]["inputSchema"]["required"], ["terms"])
        self.assertTrue(tools["get_decision"]["annotations"]["readOnlyHint"])
        self.assertTrue(
            tools["delete_decision"]["annotations"]["destructiveHint"])
        # A cursor is accepted; everything fits on one page.
        again = c.call("tools/list", {"cursor": "x"})
        self.assertEqual(again, res)
        self.assertNotIn("nextCursor", res)

    def test_schema_bounds_are_enforced(self):
        c = self.mcp()
        self.tool_error(c, "get_decision", {"x": 51, "y": 1, "z": 1},
                        "CoordinateValidationError")
        self.assertIsNone(self.tool_ok(c, "get_decision",
                                       {"x": 50, "y": 5, "z": 4}))
        self.tool_error(c, "decisions_before",
                        {"x_threshold": 52, "y_threshold": 1},
                        "CoordinateValidationError")
        self.assertEqual(self.tool_ok(c, "decisions_before",
                                      {"x_threshold": 51,
                                       "y_threshold": 6}), [])


class Tools(McpMixin, vt.VmemTestCase):

    def seed(self, c):
        self.tool_ok(c, "store_decision",
                     {"x": 5, "y": 2, "z": 1,
                      "content": "Use PostgreSQL for the persistence layer",
                      "issue_context": {"issue_id": "t-5"}})
        for x, y, z, text in [(3, 1, 2, "REST API with JSON bodies"),
                              (5, 1, 3, "Postgres connection pooling"),
                              (7, 4, 4, "review notes: rest-api naming"),
                              (9, 3, 2, "gRPC between services")]:
            self.tool_ok(c, "store_decision",
                         {"x": x, "y": y, "z": z, "content": text})

    def test_store_and_get_match_direct_calls(self):
        c = self.mcp(client="agent-one")
        rec = self.tool_ok(c, "store_decision",
                           {"x": 5, "y": 2, "z": 1, "content": "C11",
                            "issue_context": {"issue_id": "i-1"}})
        self.assertDecision(rec, 5, 2, 1, "C11", agent_id="agent-one",
                            issue_context={"issue_id": "i-1"})
        self.assertEqual(rec, c.get(5, 2, 1))
        self.assertEqual(self.tool_ok(c, "get_decision",
                                      {"x": 5, "y": 2, "z": 1}),
                         c.get(5, 2, 1))
        self.assertIsNone(self.tool_ok(c, "get_decision",
                                       {"x": 5, "y": 2, "z": 2}))
        self.assertFileMatches(rec)
        over = self.tool_ok(c, "store_decision",
                            {"x": 5, "y": 2, "z": 2, "content": "v1"})
        self.assertEqual(over["version"], 1)
        over = self.tool_ok(c, "store_decision",
                            {"x": 5, "y": 2, "z": 2, "content": "v2",
                             "overwrite": True})
        self.assertEqual((over["version"], over["content"]), (2, "v2"))
        over = self.tool_ok(c, "store_decision",
                            {"x": 5, "y": 2, "z": 2, "content": "v3",
                             "if_version": 2, "timeout_ms": 100})
        self.assertEqual(over["version"], 3)
        self.assertEqual(over, c.get(5, 2, 2))

    def test_queries_match_direct_calls(self):
        c = self.mcp()
        self.seed(c)
        cases = [
            ("query_decisions", {}, "decision.query_range", {}),
            ("query_decisions", {"x_range": [4, 9], "z_range": [2, 4]},
             "decision.query_range", {"x_range": [4, 9], "z_range": [2, 4]}),
            ("query_decisions", {"limit": 2, "after": vt.coord(3, 1, 2)},
             "decision.query_range",
             {"limit": 2, "after": vt.coord(3, 1, 2)}),
            ("decisions_before", {"x_threshold": 5, "y_threshold": 2},
             "decision.query_partial_order",
             {"x_threshold": 5, "y_threshold": 2}),
            ("decisions_before", {"x_threshold": 8, "y_threshold": 1,
                                  "z_filter": 2},
             "decision.query_partial_order",
             {"x_threshold": 8, "y_threshold": 1, "z_filter": 2}),
            ("search_decisions", {"terms": ["rest-api"]},
             "decision.search", {"terms": ["rest-api"]}),
            ("search_decisions", {"terms": ["postgres*", "rest"],
                                  "match_all": False, "limit": 5},
             "decision.search", {"terms": ["postgres*", "rest"],
                                 "match_all": False, "limit": 5}),
            ("search_decisions", {"terms": ["postgres*", "pooling"],
                                  "match_all": True},
             "decision.search", {"terms": ["postgres*", "pooling"],
                                 "match_all": True}),
        ]
        for name, args, method, params in cases:
            with self.subTest(tool=name, args=args):
                got = self.tool_ok(c, name, args)
                self.assertEqual(got, c.call(method, params))
                self.assertIsInstance(got, list)
        self.assertEqual(len(self.tool_ok(c, "query_decisions", {})), 5)
        hits = self.tool_ok(c, "search_decisions", {"terms": ["rest-api"]})
        self.assertEqual([h["coordinate"] for h in hits],
                         [vt.coord(3, 1, 2), vt.coord(7, 4, 4)])

    def test_history_delete_and_sync(self):
        c = self.mcp(client="hist")
        self.tool_ok(c, "store_decision",
                     {"x": 2, "y": 3, "z": 3, "content": "first"})
        synced = self.tool_ok(c, "sync_memory", {"message": "mcp sync"})
        self.assertRegex(synced["commit"], HEX40)
        self.assertEqual(synced["decisions"], 1)
        self.assertEqual(synced["coordinates"], [vt.coord(2, 3, 3)])
        self.tool_ok(c, "store_decision",
                     {"x": 2, "y": 3, "z": 3, "content": "second",
                      "overwrite": True})
        hist = self.tool_ok(c, "decision_history", {"x": 2, "y": 3, "z": 3})
        self.assertEqual(hist, c.call("decision.history",
                                      {"coordinate": vt.coord(2, 3, 3)}))
        self.assertEqual([(h["content"], h["commit"] is None) for h in hist],
                         [("second", True), ("first", False)])
        self.assertEqual(hist[1]["commit"], synced["commit"])
        one = self.tool_ok(c, "decision_history",
                           {"x": 2, "y": 3, "z": 3, "limit": 1})
        self.assertEqual(one, hist[:1])
        self.assertIs(self.tool_ok(c, "delete_decision",
                                   {"x": 2, "y": 3, "z": 3}), True)
        self.assertIsNone(c.get(2, 3, 3))
        self.assertFileGone(2, 3, 3)
        self.assertIs(self.tool_ok(c, "delete_decision",
                                   {"x": 2, "y": 3, "z": 3}), False)
        synced = self.tool_ok(c, "sync_memory")
        self.assertRegex(synced["commit"], HEX40)
        self.assertEqual(self.tool_ok(c, "sync_memory", {})["commit"], None)
        self.assertEqual(self.tool_ok(c, "sync_memory", None)["commit"],
                         None)
        res = self.tool(c, "sync_memory", arguments=None)
        self.assertFalse(res["isError"])
        self.assertEqual(c.call("tools/call", {"name": "query_decisions",
                                               "arguments": None}),
                         {"content": [{"type": "text", "text": "[]"}],
                          "isError": False})

    def test_stats_count_the_tool_call(self):
        c = self.mcp()
        self.tool_ok(c, "store_decision",
                     {"x": 1, "y": 1, "z": 4, "content": "s"})
        self.tool_ok(c, "get_decision", {"x": 1, "y": 1, "z": 4})
        self.tool_error(c, "get_decision", {"x": 0, "y": 1, "z": 4},
                        "CoordinateValidationError")
        methods = c.call("server.stats")["methods"]
        self.assertEqual(methods["tools/call"]["count"], 3)
        self.assertEqual(methods["tools/call"]["errors"], 1)
        self.assertEqual(methods["initialize"]["count"], 1)
        self.assertNotIn("decision.store", methods)
        self.assertNotIn("decision.get", methods)


class Errors(McpMixin, vt.VmemTestCase):

    def test_domain_errors_are_tool_results(self):
        c = self.mcp()
        self.tool_ok(c, "store_decision",
                     {"x": 1, "y": 1, "z": 1, "content": "fixed"})
        self.tool_ok(c, "store_decision",
                     {"x": 1, "y": 1, "z": 2, "content": "taken"})
        cases = [
            ("store_decision", {"x": 1, "y": 1, "z": 1, "content": "new",
                                "overwrite": True}, "ImmutableLayerError"),
            ("delete_decision", {"x": 1, "y": 1, "z": 1},
             "ImmutableLayerError"),
            ("store_decision", {"x": 1, "y": 1, "z": 2, "content": "again"},
             "CoordinateOccupiedError"),
            ("store_decision", {"x": 1, "y": 1, "z": 2, "content": "v",
                                "if_version": 7}, "ConcurrencyError"),
            ("store_decision", {"x": 0, "y": 1, "z": 2, "content": "c"},
             "CoordinateValidationError"),
            ("store_decision", {"x": 1001, "y": 1, "z": 2, "content": "c"},
             "CoordinateValidationError"),
            ("get_decision", {"x": 1, "y": "2", "z": 2},
             "CoordinateValidationError"),
            ("get_decision", {"x": 1, "y": 2, "z": 2.0},
             "CoordinateValidationError"),
            ("get_decision", {"x": 1, "y": 2, "z": True},
             "CoordinateValidationError"),
            ("store_decision", {"x": 1, "y": 1, "z": 3, "content": ""},
             "ValueError"),
            ("store_decision", {"x": 1, "y": 1, "z": 3, "content": 5},
             "ValueError"),
            ("store_decision", {"x": 1, "y": 1, "z": 3,
                                "content": "c" * (vt.CONTENT_MAX + 1)},
             "ValueError"),
            ("store_decision", {"x": 1, "y": 1, "z": 3, "content": "c",
                                "agent_id": "bad\nagent"}, "ValueError"),
            ("store_decision", {"x": 1, "y": 1, "z": 3, "content": "c",
                                "issue_context": {"k": 1}}, "ValueError"),
            ("store_decision", {"y": 1, "z": 3, "content": "c"},
             "ValueError"),
            ("store_decision", {"x": 1, "y": 1, "z": 3}, "ValueError"),
            ("get_decision", {"x": 1, "y": 1, "z": 1, "w": 1},
             "ValueError"),
            ("get_decision", {"coordinate": vt.coord(1, 1, 1)},
             "ValueError"),
            ("query_decisions", {"x_range": [5, 2]}, "QueryError"),
            ("search_decisions", {"terms": []}, "QueryError"),
            ("search_decisions", {"terms": ["--"]}, "QueryError"),
            ("search_decisions", {}, "ValueError"),
            ("decisions_before", {"x_threshold": 0, "y_threshold": 1},
             "CoordinateValidationError"),
            ("decision_history", {"x": 1, "y": 1, "z": 1, "limit": 0},
             "ValueError"),
            ("sync_memory", {"message": ""}, "ValueError"),
        ]
        for name, args, expected in cases:
            with self.subTest(tool=name, args=str(args)[:80]):
                msg = self.tool_error(c, name, args, expected)
                self.assertTrue(msg.strip())
        # Nothing was changed by the refused writes.
        self.assertEqual(c.get(1, 1, 1)["content"], "fixed")
        self.assertEqual(c.get(1, 1, 2)["version"], 1)
        self.assertIsNone(c.get(1, 1, 3))

    def test_lease_wait_then_concurrency_error(self):
        holder = self.connect(agent_id="holder")
        holder.call("lock.acquire", {"coordinates": [vt.coord(3, 3, 3)]})
        c = self.mcp()
        msg = self.tool_error(c, "store_decision",
                              {"x": 3, "y": 3, "z": 3, "content": "wait",
                               "timeout_ms": 150}, "ConcurrencyError")
        self.assertTrue(msg)
        # A queued tool call goes through once the lease is released.
        rid = c.request("tools/call", {
            "name": "store_decision",
            "arguments": {"x": 3, "y": 3, "z": 3, "content": "later",
                          "timeout_ms": 5000}})
        self.assertTrue(c.silent_for(0.2))
        holder.close()
        res = c.response(rid)
        self.assertFalse(res["isError"], res)
        self.assertEqual(c.get(3, 3, 3)["content"], "later")

    def test_missing_agent_is_a_tool_error(self):
        c = self.connect()  # neither server.hello nor initialize
        msg = self.tool_error(c, "store_decision",
                              {"x": 1, "y": 1, "z": 2, "content": "c"},
                              "ValueError")
        self.assertIn("agent_id", msg)
        self.assertIsNone(c.get(1, 1, 2))
        # Reads need no agent.
        self.assertEqual(self.tool_ok(c, "query_decisions", {}), [])

    def test_protocol_errors(self):
        c = self.mcp()
        bad = [{"name": "no_such_tool", "arguments": {}},
               {"name": "decision.store", "arguments": {}},
               {"name": "get_decision", "arguments": "x=1"},
               {"name": "get_decision", "arguments": [1, 1, 1]},
               {"name": "get_decision", "arguments": 3},
               {"arguments": {"x": 1, "y": 1, "z": 1}},
               {"name": 7},
               {"name": None}]
        for params in bad:
            with self.subTest(params=params):
                e = self.assertRpcError(vt.E_VALUE, c.call, "tools/call",
                                        params)
                if params.get("name") == "no_such_tool":
                    self.assertIn("Unknown tool", e.message)
        self.assertRpcError(vt.E_VALUE, c.call, "tools/call")
        # The connection still serves.
        self.assertEqual(c.call("ping"), {})


class Agents(McpMixin, vt.VmemTestCase):

    def stored_by(self, c, x, args=None):
        a = {"x": x, "y": 1, "z": 3, "content": "by whom"}
        a.update(args or {})
        return self.tool_ok(c, "store_decision", a)["agent_id"]

    def test_agent_id_precedence(self):
        # clientInfo.name alone
        c = self.mcp(client="client-a")
        self.assertEqual(self.stored_by(c, 1), "client-a")
        self.assertEqual(c.call("server.hello")["agent_id"], "client-a")
        # the argument beats it
        self.assertEqual(self.stored_by(c, 2, {"agent_id": "arg-c"}),
                         "arg-c")
        # server.hello before initialize beats the client's name
        c = self.mcp(agent_id="hello-b", client="client-a")
        self.assertEqual(self.stored_by(c, 3), "hello-b")
        self.assertEqual(self.stored_by(c, 4, {"agent_id": "arg-c"}),
                         "arg-c")
        # and so does server.hello after it
        c = self.mcp(client="client-a")
        c.call("server.hello", {"agent_id": "hello-b"})
        self.assertEqual(self.stored_by(c, 5), "hello-b")
        # a server.hello without an agent id keeps the client's name
        c = self.mcp(client="client-a")
        c.call("server.hello", {})
        self.assertEqual(self.stored_by(c, 6), "client-a")
        # the native methods see the same agent id
        rec = c.store(7, 1, 3, "native")
        self.assertEqual(rec["agent_id"], "client-a")

    def test_unusable_client_name_falls_back(self):
        names = ["", "bad\nname", "tab\there", "n" * 129, None]
        for x, name in enumerate(names, 1):
            with self.subTest(name=name):
                c = self.connect()
                params = init_params()
                if name is None:
                    del params["clientInfo"]
                else:
                    params["clientInfo"]["name"] = name
                c.call("initialize", params)
                self.assertEqual(self.stored_by(c, x), "mcp-client")
        c = self.mcp(client="n" * 128)
        self.assertEqual(self.stored_by(c, 20), "n" * 128)
        c = self.mcp(client="Claude Desktop \u00e9")
        self.assertEqual(self.stored_by(c, 21), "Claude Desktop \u00e9")


class Mixing(McpMixin, vt.VmemTestCase):

    def test_mcp_and_native_on_one_connection(self):
        c = self.mcp(client="mixer")
        c.store(1, 2, 3, "native store")
        got = self.tool_ok(c, "get_decision", {"x": 1, "y": 2, "z": 3})
        self.assertEqual(got, c.get(1, 2, 3))
        self.assertEqual(got["agent_id"], "mixer")
        rec = self.tool_ok(c, "store_decision",
                           {"x": 1, "y": 2, "z": 4, "content": "tool"})
        self.assertEqual(c.exists(1, 2, 4), True)
        self.assertEqual(c.call("tools/list")["tools"][0]["name"],
                         "store_decision")
        self.assertEqual(c.call("server.health")["decisions"], 2)
        self.assertEqual(rec, c.get(1, 2, 4))

    def test_batch_mixes_mcp_and_native(self):
        c = self.mcp(client="batcher")
        batch = [
            {"jsonrpc": "2.0", "id": "a", "method": "tools/call",
             "params": {"name": "store_decision",
                        "arguments": {"x": 4, "y": 4, "z": 4,
                                      "content": "in a batch"}}},
            {"jsonrpc": "2.0", "id": "b", "method": "decision.get",
             "params": {"coordinate": vt.coord(4, 4, 4)}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "c", "method": "ping"},
            {"jsonrpc": "2.0", "id": "d", "method": "tools/call",
             "params": {"name": "store_decision",
                        "arguments": {"x": 4, "y": 4, "z": 4,
                                      "content": "occupied"}}},
        ]
        c.send(batch)
        resp = c.read_json()
        self.assertEqual([r["id"] for r in resp], ["a", "b", "c", "d"])
        stored = json.loads(resp[0]["result"]["content"][0]["text"])
        self.assertEqual(stored, resp[1]["result"])
        self.assertEqual(stored["agent_id"], "batcher")
        self.assertEqual(resp[2]["result"], {})
        self.assertTrue(resp[3]["result"]["isError"])
        self.assertTrue(resp[3]["result"]["content"][0]["text"].startswith(
            "CoordinateOccupiedError: "))

    def test_tool_call_notification_runs_unanswered(self):
        c = self.mcp(client="quiet")
        c.notify("tools/call", {"name": "store_decision",
                                "arguments": {"x": 8, "y": 1, "z": 2,
                                              "content": "no answer"}})
        self.assertEqual(c.call("ping"), {})
        self.assertEqual(c.get(8, 1, 2)["content"], "no answer")

    def test_pipelined_tool_calls_answered_in_order(self):
        c = self.mcp(client="piper")
        ids = []
        expected = []
        for i in range(1, 41):
            x = (i + 1) // 2
            if i % 2:
                ids.append(c.request("tools/call", {
                    "name": "store_decision",
                    "arguments": {"x": x, "y": 2, "z": 2,
                                  "content": "pipelined %d" % x}}))
                expected.append(("store", x))
            else:
                ids.append(c.request("tools/call", {
                    "name": "get_decision",
                    "arguments": {"x": x, "y": 2, "z": 2}}))
                expected.append(("get", x))
        ids.append(c.request("tools/call", {"name": "sync_memory"}))
        ids.append(c.request("decision.query_range", {"y_range": [2, 2]}))
        for rid, (kind, x) in zip(ids, expected):
            res = c.response(rid)
            self.assertFalse(res["isError"])
            rec = json.loads(res["content"][0]["text"])
            self.assertEqual(rec["coordinate"], vt.coord(x, 2, 2), kind)
            self.assertEqual(rec["content"], "pipelined %d" % x)
        synced = json.loads(c.response(ids[-2])["content"][0]["text"])
        self.assertEqual(synced["decisions"], 20)
        self.assertEqual(len(c.response(ids[-1])), 20)

    def test_close_while_a_tool_call_waits(self):
        c = self.mcp(client="leaver")
        for x in range(1, 30):
            c.request("tools/call", {"name": "store_decision",
                                     "arguments": {"x": x, "y": 1, "z": 4,
                                                   "content": "gone"}})
        c.request("tools/call", {"name": "sync_memory"})
        c.close()
        d = self.connect()
        self.assertEqual(d.call("ping"), {})
        self.assertTrue(self.daemon.running())


if __name__ == "__main__":
    vt.main()

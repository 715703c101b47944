#!/usr/bin/env python3
"""MCP (2025-11-25 and older revisions) on vmemd's own socket, against a
real daemon: initialize and version negotiation, server/discover, the
initialized notification, ping, tools/list with input and output schemas,
every tool compared with the protocol method it runs and its structured
result checked against its outputSchema, bounded pages (limit, after, 64
KB, previews), domain errors as isError results, protocol errors as
JSON-RPC errors, where the agent id comes from, MCP mixed with the native
methods on one connection, requests answered as they finish (a waiting
write holds up nothing), cancellation of a write waiting for a lease,
resources (template, paged list, read, subscribe, list_changed), prompts
and logging."""

import json
import os
import re
import time

import vmemtest as vt
from vmemtest import HEX40

LATEST = "2025-11-25"
SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
PAGE = 50
CAPABILITIES = {"tools": {"listChanged": False},
                "resources": {"subscribe": True, "listChanged": True},
                "prompts": {"listChanged": False}, "logging": {}}
PAGE_BYTES = 64 * 1024
PREVIEW = 1024
LISTINGS = {"query_decisions": "decisions", "decisions_before": "decisions",
            "search_decisions": "decisions", "decision_history": "versions",
            "recall_experiences": "experiences",
            "find_similar_experiences": "experiences"}
TOOLS = {
    "store_decision": "decision.store",
    "get_decision": "decision.get",
    "query_decisions": "decision.query_range",
    "decisions_before": "decision.query_partial_order",
    "search_decisions": "decision.search",
    "decision_history": "decision.history",
    "delete_decision": "decision.delete",
    "sync_memory": "git.sync",
    "find_similar_experiences": "experience.find_similar",
    "record_experience": "experience.store",
    "recall_experiences": "experience.retrieve",
    "experience_stats": "experience.stats",
    # conversations and documents (issue 15)
    "remember_message": "message.store",
    "conversation_history": "message.history",
    "search_documents": "document.semantic_search",
    "documents_between": "document.temporal_query",
}
COORD_TOOLS = ["store_decision", "get_decision", "decision_history",
               "delete_decision"]
TYPE_RE = re.compile(r"^(\w+): (.+)$", re.S)


def validate(value, schema, where="$"):
    """A small JSON Schema check (the keywords our schemas use); raises
    AssertionError naming the first place that does not conform."""
    if "anyOf" in schema:
        errors = []
        for branch in schema["anyOf"]:
            try:
                validate(value, branch, where)
                break
            except AssertionError as e:
                errors.append(str(e))
        else:
            raise AssertionError("%s: no branch of anyOf: %s"
                                 % (where, errors))
    types = schema.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        kinds = {"object": dict, "array": list, "string": str,
                 "boolean": bool, "null": type(None)}
        ok = False
        for t in types:
            if t == "integer":
                ok |= isinstance(value, int) and not isinstance(value, bool)
            elif t == "number":
                ok |= isinstance(value, (int, float)) and \
                    not isinstance(value, bool)
            else:
                ok |= isinstance(value, kinds[t])
        if not ok:
            raise AssertionError("%s: %r is not %s" % (where, value, types))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise AssertionError("%s: %r < minimum" % (where, value))
        if "maximum" in schema and value > schema["maximum"]:
            raise AssertionError("%s: %r > maximum" % (where, value))
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or \
                len(value) > schema.get("maxLength", 1 << 60):
            raise AssertionError("%s: length %d" % (where, len(value)))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise AssertionError("%s: %r !~ %s" % (where, value,
                                                   schema["pattern"]))
    if isinstance(value, dict):
        for k in schema.get("required", []):
            if k not in value:
                raise AssertionError("%s: %s missing" % (where, k))
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                validate(v, props[k], where + "." + k)
            elif extra is False:
                raise AssertionError("%s: unexpected %s" % (where, k))
            elif isinstance(extra, dict):
                validate(v, extra, where + "." + k)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or \
                len(value) > schema.get("maxItems", 1 << 60):
            raise AssertionError("%s: %d items" % (where, len(value)))
        if "items" in schema:
            for i, v in enumerate(value):
                validate(v, schema["items"], "%s[%d]" % (where, i))


def answer_of(c, rid, held, timeout=None):
    """The message answering rid on an MCP connection (answered out of
    order); others read meanwhile are kept in held (id -> message, or
    None -> notifications)."""
    if rid in held:
        return held.pop(rid)
    deadline = time.monotonic() + (timeout or vt.DEFAULT_TIMEOUT)
    while True:
        msg = c.read_json(max(deadline - time.monotonic(), 0.001))
        if "id" not in msg:
            held.setdefault(None, []).append(msg)
            continue
        if msg["id"] == rid:
            return msg
        held[msg["id"]] = msg


def notes_of(c, held, method, timeout=None):
    """The params of the next notification called method."""
    deadline = time.monotonic() + (timeout or vt.DEFAULT_TIMEOUT)
    while True:
        for msg in held.get(None, []):
            if msg.get("method") == method:
                held[None].remove(msg)
                return msg.get("params")
        msg = c.read_json(max(deadline - time.monotonic(), 0.001))
        if "id" in msg:
            held[msg["id"]] = msg
        else:
            held.setdefault(None, []).append(msg)


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
        """A successful tool call's structured result (its text is the
        same JSON), checked against the tool's outputSchema."""
        res = self.tool(c, name, arguments)
        self.assertFalse(res["isError"], res["content"][0]["text"])
        structured = res["structuredContent"]
        self.assertEqual(json.loads(res["content"][0]["text"]), structured)
        validate(structured, self.output_schema(c, name))
        return structured

    def output_schema(self, c, name):
        cache = self.__dict__.setdefault("_schemas", {})
        if name not in cache:
            for t in c.call("tools/list")["tools"]:
                cache[t["name"]] = t["outputSchema"]
        return cache[name]

    def items(self, c, name, arguments=None):
        """A listing tool's items (one page)."""
        return self.tool_ok(c, name, arguments)[LISTINGS[name]]

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
        self.assertIsInstance(res["isError"], bool)
        self.assertEqual(sorted(res), ["content", "isError"] if res["isError"]
                         else ["content", "isError", "structuredContent"])
        self.assertIn(len(res["content"]), (1, 2))
        for part in res["content"]:
            self.assertEqual(sorted(part), ["text", "type"])
            self.assertEqual(part["type"], "text")
            self.assertIsInstance(part["text"], str)


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
                self.assertEqual(res["capabilities"], CAPABILITIES)
                self.assertEqual(res["serverInfo"]["name"], "vmemd")
                self.assertEqual(res["serverInfo"]["version"],
                                 health["version"])
                self.assertIn("coordinate", res["instructions"])
                self.assertIn("1..1000", res["instructions"])
                # The agent id the session writes as.
                self.assertIn('agent "test-client"', res["instructions"])

    def test_server_discover(self):
        c = self.connect()
        res = c.call("server/discover", {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}})
        self.assertEqual(res["resultType"], "complete")
        # Only the handshake revisions: a newer client falls back to
        # initialize.
        self.assertEqual(res["supportedVersions"], SUPPORTED)
        self.assertEqual(res["capabilities"], CAPABILITIES)
        self.assertEqual(res["serverInfo"]["name"], "vmemd")
        self.assertIn("coordinate", res["instructions"])
        # It changes nothing: the connection has no agent id yet.
        self.assertIsNone(c.call("server.hello")["agent_id"])

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
        c.notify("notifications/cancelled", {"requestId": "gone"})
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
        self.assertEqual(len(res["tools"]), len(TOOLS))
        self.assertEqual(sorted(tools), sorted(TOOLS))
        for name, t in tools.items():
            with self.subTest(tool=name):
                self.assertGreater(len(t["description"]), 60)
                self.check_schema(name, t["inputSchema"], max_x)
                self.assertIsInstance(t["annotations"]["readOnlyHint"],
                                      bool)
                out = t["outputSchema"]
                self.assertEqual(out["type"], "object")
                # Portable: one type per schema (anyOf for nullable).
                self.assertNotIn('"type": [', json.dumps(out))
                self.assertTrue(set(out["required"]) <=
                                set(out["properties"]))
                if name in LISTINGS:
                    props = t["inputSchema"]["properties"]
                    self.assertEqual(props["limit"]["maximum"], 200)
                    self.assertIn("after", props)
                    self.assertEqual(sorted(out["required"]),
                                     sorted([LISTINGS[name], "count", "more",
                                             "next_after"]))
        store = tools["store_decision"]["inputSchema"]
        self.assertEqual(sorted(store["required"]),
                         ["content", "x", "y", "z"])
        self.assertEqual(store["properties"]["content"]["minLength"], 1)
        self.assertEqual(store["properties"]["content"]["maxLength"],
                         vt.CONTENT_MAX)
        self.assertEqual(store["properties"]["overwrite"]["type"],
                         "boolean")
        self.assertEqual(store["properties"]["agent_id"]["maxLength"], 128)
        agent_re = re.compile(store["properties"]["agent_id"]["pattern"])
        self.assertTrue(agent_re.search("claude-code \u00e9"))
        for bad in ("a\nb", "tab\t", "del\x7f", "c1\x85"):
            self.assertIsNone(agent_re.search(bad), repr(bad))
        self.assertIn("bytes", store["properties"]["content"]["description"])
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
        self.assertEqual(self.tool_ok(c, "get_decision",
                                      {"x": 50, "y": 5, "z": 4}),
                         {"found": False, "decision": None})
        self.tool_error(c, "decisions_before",
                        {"x_threshold": 52, "y_threshold": 1},
                        "CoordinateValidationError")
        self.assertEqual(self.tool_ok(c, "decisions_before",
                                      {"x_threshold": 51,
                                       "y_threshold": 6}),
                         {"decisions": [], "count": 0, "more": False,
                          "next_after": None})
        for name in LISTINGS:
            args = {"x": 1, "y": 1, "z": 1, "terms": ["a"],
                    "x_threshold": 2, "y_threshold": 1}
            args = {k: v for k, v in args.items()
                    if k in self.tool_props(c, name)}
            for limit in (0, 201, "5"):
                with self.subTest(tool=name, limit=limit):
                    self.tool_error(c, name, dict(args, limit=limit),
                                    "ValueError")

    def tool_props(self, c, name):
        for t in c.call("tools/list")["tools"]:
            if t["name"] == name:
                return t["inputSchema"]["properties"]


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
                         {"found": True, "decision": c.get(5, 2, 1)})
        self.assertEqual(self.tool_ok(c, "get_decision",
                                      {"x": 5, "y": 2, "z": 2}),
                         {"found": False, "decision": None})
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
                native = c.call(method, params)
                self.assertEqual(got["decisions"], native)
                self.assertEqual(got["count"], len(native))
                more = len(c.call(method, dict(
                    params, limit=params.get("limit", 9999) + 1))) > \
                    len(native)
                self.assertEqual(got["more"], more)
                self.assertEqual(got["next_after"],
                                 native[-1]["coordinate"] if more else None)
        self.assertEqual(len(self.items(c, "query_decisions", {})), 5)
        hits = self.items(c, "search_decisions", {"terms": ["rest-api"]})
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
        hist = self.items(c, "decision_history", {"x": 2, "y": 3, "z": 3})
        self.assertEqual(hist, c.call("decision.history",
                                      {"coordinate": vt.coord(2, 3, 3)}))
        self.assertEqual([(h["content"], h["commit"] is None) for h in hist],
                         [("second", True), ("first", False)])
        self.assertEqual(hist[1]["commit"], synced["commit"])
        one = self.tool_ok(c, "decision_history",
                           {"x": 2, "y": 3, "z": 3, "limit": 1})
        self.assertEqual(one, {"versions": hist[:1], "count": 1,
                               "more": True, "next_after": "uncommitted"})
        two = self.tool_ok(c, "decision_history",
                           {"x": 2, "y": 3, "z": 3, "limit": 1,
                            "after": "uncommitted"})
        self.assertEqual(two["versions"], hist[1:])
        self.assertEqual(two["next_after"], None)
        self.assertEqual(self.tool_ok(c, "delete_decision",
                                      {"x": 2, "y": 3, "z": 3}),
                         {"deleted": True})
        self.assertIsNone(c.get(2, 3, 3))
        self.assertFileGone(2, 3, 3)
        self.assertEqual(self.tool_ok(c, "delete_decision",
                                      {"x": 2, "y": 3, "z": 3}),
                         {"deleted": False})
        synced = self.tool_ok(c, "sync_memory")
        self.assertRegex(synced["commit"], HEX40)
        self.assertEqual(self.tool_ok(c, "sync_memory", {})["commit"], None)
        self.assertEqual(self.tool_ok(c, "sync_memory", None)["commit"],
                         None)
        res = self.tool(c, "sync_memory", arguments=None)
        self.assertFalse(res["isError"])
        empty = {"decisions": [], "count": 0, "more": False,
                 "next_after": None}
        self.assertEqual(c.call("tools/call", {"name": "query_decisions",
                                               "arguments": None}),
                         {"content": [{"type": "text",
                                       "text": json.dumps(
                                           empty, separators=(",", ":"))}],
                          "structuredContent": empty, "isError": False})

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
        self.assertEqual(self.items(c, "query_decisions", {}), [])

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
        got = self.tool_ok(c, "get_decision",
                           {"x": 1, "y": 2, "z": 3})["decision"]
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
        # Not ordered after the write on an MCP session: wait for it.
        self.assertTrue(vt.wait_until(lambda: c.get(8, 1, 2) is not None,
                                      vt.DEFAULT_TIMEOUT))
        self.assertEqual(c.get(8, 1, 2)["content"], "no answer")

    def test_pipelined_tool_calls_all_answered(self):
        # Answered as they finish, matched by id: every one, once.
        c = self.mcp(client="piper")
        held = {}
        stores = [c.request("tools/call", {
            "name": "store_decision",
            "arguments": {"x": x, "y": 2, "z": 2,
                          "content": "pipelined %d" % x}})
            for x in range(1, 21)]
        pings = [c.request("ping") for _ in range(5)]
        for x, rid in enumerate(stores, 1):
            res = answer_of(c, rid, held)["result"]
            self.assertFalse(res["isError"], res)
            self.assertEqual(res["structuredContent"]["content"],
                             "pipelined %d" % x)
        for rid in pings:
            self.assertEqual(answer_of(c, rid, held)["result"], {})
        self.assertEqual(held, {})
        gets = [c.request("tools/call", {
            "name": "get_decision", "arguments": {"x": x, "y": 2, "z": 2}})
            for x in range(1, 21)]
        sync = c.request("tools/call", {"name": "sync_memory"})
        for x, rid in enumerate(gets, 1):
            got = answer_of(c, rid, held)["result"]["structuredContent"]
            self.assertEqual(got["decision"]["content"], "pipelined %d" % x)
        synced = answer_of(c, sync, held)["result"]["structuredContent"]
        self.assertEqual(synced["decisions"], 20)
        self.assertEqual(held, {})

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


def fill(conn, coords, content=lambda x, y, z: "decision %d %d %d" % (
        x, y, z)):
    """Store a decision at each coordinate (pipelined eight at a time on a
    native connection); returns the records in (x, y, z) order."""
    recs = []
    for i in range(0, len(coords), 8):
        rids = [conn.request("decision.store",
                             {"coordinate": vt.coord(*c),
                              "content": content(*c)})
                for c in coords[i:i + 8]]
        recs += [conn.response(rid, timeout=60) for rid in rids]
    return sorted(recs, key=lambda r: (r["coordinate"]["x"],
                                       r["coordinate"]["y"],
                                       r["coordinate"]["z"]))


class Paging(McpMixin, vt.VmemTestCase):

    def pages(self, c, name, args):
        """Every page of a listing, following next_after."""
        out = []
        after = None
        for _ in range(100):
            a = dict(args)
            if after is not None:
                a["after"] = after
            res = self.tool(c, name, a)
            page = self.tool_ok(c, name, a)
            out.append(page)
            if not page["more"]:
                self.assertEqual(len(res["content"]), 1)
                return out
            # A second text tells the model how to go on.
            self.assertEqual(len(res["content"]), 2, res["content"])
            self.assertIn('"after": ', res["content"][1]["text"])
            after = page["next_after"]
        self.fail("no last page")

    def test_default_page_and_after(self):
        w = self.connect(agent_id="filler")
        coords = [(x, y, 2) for x in range(1, 25) for y in range(1, 6)]
        recs = fill(w, coords)
        c = self.mcp()
        for name, args in (("query_decisions", {}),
                           ("decisions_before", {"x_threshold": 25,
                                                 "y_threshold": 1})):
            with self.subTest(tool=name):
                pages = self.pages(c, name, args)
                self.assertEqual([p["count"] for p in pages], [50, 50, 20])
                got = [d for p in pages for d in p["decisions"]]
                self.assertEqual(got, recs)
                self.assertEqual(pages[0]["next_after"],
                                 recs[49]["coordinate"])
        small = self.pages(c, "query_decisions", {"limit": 7,
                                                  "z_range": [2, 2]})
        self.assertEqual(len(small), 18)
        self.assertEqual([d for p in small for d in p["decisions"]], recs)
        # The daemon's own partial order pages the same way.
        part = c.call("decision.query_partial_order",
                      {"x_threshold": 25, "y_threshold": 1, "limit": 3,
                       "after": vt.coord(2, 5, 2)})
        self.assertEqual(part, recs[10:13])

    def test_twenty_megabytes_bounded(self):
        w = self.connect(agent_id="big")
        big = " zeta " + "\u00e9" * 51195  # 2-byte characters
        coords = [(x, 1, 3) for x in range(1, 201)]
        fill(w, coords, lambda x, y, z: "%03d" % x + big)
        c = self.mcp()
        res = self.tool(c, "query_decisions", {"limit": 200})
        text = res["content"][0]["text"]
        self.assertLessEqual(len(text.encode()), PAGE_BYTES)
        page = res["structuredContent"]
        validate(page, self.output_schema(c, "query_decisions"))
        self.assertTrue(page["more"])
        self.assertGreater(page["count"], 20)
        self.assertLess(page["count"], 200)
        for d in page["decisions"]:
            self.assertTrue(d["content_truncated"])
            self.assertEqual(d["content_bytes"], 3 + len(big.encode()))
            self.assertLessEqual(len(d["content"].encode()), PREVIEW)
            self.assertTrue(("%03d" % d["coordinate"]["x"] + big)
                            .startswith(d["content"]))
        # Paging goes on from there; get_decision shows a content whole.
        nxt = self.tool_ok(c, "query_decisions",
                           {"limit": 200, "after": page["next_after"]})
        self.assertEqual(nxt["decisions"][0]["coordinate"]["x"],
                         page["count"] + 1)
        whole = self.tool_ok(c, "get_decision", {"x": 7, "y": 1, "z": 3})
        self.assertEqual(whole["decision"]["content"], "007" + big)
        self.assertNotIn("content_truncated", whole["decision"])
        for name, args in (("decisions_before", {"x_threshold": 201,
                                                 "y_threshold": 1,
                                                 "limit": 200}),
                           ("search_decisions", {"terms": ["zeta"],
                                                 "limit": 200})):
            with self.subTest(tool=name):
                res = self.tool(c, name, args)
                self.assertLessEqual(len(res["content"][0]["text"]
                                         .encode()), PAGE_BYTES)
                self.assertTrue(res["structuredContent"]["more"])

    def test_search_pages(self):
        w = self.connect(agent_id="s")
        coords = [(x, y, 4) for x in range(1, 13) for y in range(1, 6)]
        fill(w, coords, lambda x, y, z: "alpha%s note %d" % (
            " beta" if (x + y) % 3 == 0 else "", x))
        c = self.mcp()
        args = {"terms": ["alpha", "beta"], "limit": 9}
        pages = self.pages(c, "search_decisions", args)
        got = [(d["score"], d["coordinate"]) for p in pages
               for d in p["decisions"]]
        native = c.call("decision.search", {"terms": ["alpha", "beta"]})
        self.assertEqual(got, [(d["score"], d["coordinate"])
                               for d in native])
        self.assertEqual(len(got), 60)
        self.assertEqual(pages[0]["next_after"],
                         dict(pages[0]["decisions"][-1]["coordinate"],
                              score=pages[0]["decisions"][-1]["score"]))
        self.assertRpcError(vt.E_VALUE, c.call, "decision.search",
                            {"terms": ["alpha"], "after": vt.coord(1, 1, 4)})
        self.tool_error(c, "search_decisions",
                        {"terms": ["alpha"], "after": vt.coord(1, 1, 4)},
                        "ValueError")


class Sessions(McpMixin, vt.VmemTestCase):

    def lease(self, x, y, z):
        holder = self.connect(agent_id="holder")
        holder.call("lock.acquire", {"coordinates": [vt.coord(x, y, z)],
                                     "ttl_ms": 600000})
        return holder

    def store_request(self, c, x, y, z, content):
        return c.request("tools/call", {
            "name": "store_decision",
            "arguments": {"x": x, "y": y, "z": z, "content": content,
                          "timeout_ms": 600000}})

    def test_reads_and_pings_answered_while_a_write_waits(self):
        c = self.mcp()
        c.store(1, 1, 4, "readable")
        holder = self.lease(3, 3, 3)
        held = {}
        w = self.store_request(c, 3, 3, 3, "waits for the lease")
        p = c.request("ping")
        g = c.request("tools/call", {"name": "get_decision",
                                     "arguments": {"x": 1, "y": 1, "z": 4}})
        self.assertEqual(answer_of(c, p, held)["result"], {})
        got = answer_of(c, g, held)["result"]["structuredContent"]
        self.assertEqual(got["decision"]["content"], "readable")
        self.assertNotIn(w, held)
        holder.close()
        res = answer_of(c, w, held)["result"]
        self.assertFalse(res["isError"], res)
        self.assertEqual(c.get(3, 3, 3)["content"], "waits for the lease")

    def test_cancel_a_write_waiting_for_a_lease(self):
        c = self.mcp()
        holder = self.lease(4, 4, 4)
        held = {}
        w = self.store_request(c, 4, 4, 4, "cancelled")
        self.assertEqual(answer_of(c, c.request("ping"), held)["result"], {})
        c.notify("notifications/cancelled", {"requestId": w,
                                              "reason": "user"})
        self.assertEqual(answer_of(c, c.request("ping"), held)["result"], {})
        holder.close()
        # Never answered, never written: a store after it is version 1.
        other = self.connect(agent_id="other")
        self.assertEqual(other.store(4, 4, 4, "after")["version"], 1)
        self.assertTrue(c.silent_for(0.5))
        self.assertEqual(held, {})
        methods = c.call("server.stats")["methods"]
        self.assertEqual(methods["tools/call"]["count"], 1)

    def test_cancel_too_late_is_reported(self):
        # The cancellation comes in the same read as the write: the write
        # has its lock and is in the log batch already, so it completes;
        # no answer is sent, a log message says it landed.
        c = self.mcp()
        held = {}
        store = {"jsonrpc": "2.0", "id": "late", "method": "tools/call",
                 "params": {"name": "store_decision",
                            "arguments": {"x": 9, "y": 9 % 5 + 1, "z": 3,
                                          "content": "landed anyway"}}}
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": "late"}}
        c.send_raw((json.dumps(store) + "\n" + json.dumps(cancel) +
                    "\n").encode())
        msg = notes_of(c, held, "notifications/message")
        self.assertEqual(msg["level"], "warning")
        self.assertEqual(msg["data"]["requestId"], "late")
        self.assertEqual(msg["data"]["tool"], "store_decision")
        self.assertEqual(msg["data"]["result"]["content"], "landed anyway")
        self.assertEqual(c.get(9, 5, 3)["content"], "landed anyway")
        self.assertTrue(c.silent_for(0.3))
        self.assertNotIn("late", held)
        self.assertFalse(held.get(None))

    def test_cancelled_after_the_answer_is_ignored(self):
        c = self.mcp()
        rec = self.tool_ok(c, "store_decision",
                           {"x": 2, "y": 2, "z": 2, "content": "done"})
        c.notify("notifications/cancelled", {"requestId": c.last_id})
        self.assertEqual(c.call("ping"), {})
        self.assertEqual(c.get(2, 2, 2), rec)

    def test_native_connection_answers_in_order(self):
        c = self.connect(agent_id="native")
        holder = self.lease(5, 5, 4)
        w = c.request("decision.store", {"coordinate": vt.coord(5, 5, 4),
                                         "content": "in order",
                                         "timeout_ms": 600000})
        p = c.request("ping")
        self.assertTrue(c.silent_for(0.3))
        holder.close()
        self.assertEqual(c.response(w)["content"], "in order")
        self.assertEqual(c.response(p), {})


class Resources(McpMixin, vt.VmemTestCase):

    def test_template_read_and_errors(self):
        c = self.mcp()
        rec = c.store(5, 2, 1, "Use PostgreSQL")
        t = c.call("resources/templates/list")["resourceTemplates"]
        self.assertEqual([x["uriTemplate"] for x in t],
                         ["vmem://decision/{x}/{y}/{z}"])
        res = c.call("resources/read", {"uri": "vmem://decision/5/2/1"})
        self.assertEqual(res["contents"][0]["uri"], "vmem://decision/5/2/1")
        self.assertEqual(res["contents"][0]["mimeType"], "application/json")
        self.assertEqual(json.loads(res["contents"][0]["text"]), rec)
        for uri in ("vmem://decision/5/2/2", "vmem://decision/05/2/1",
                    "vmem://decision/5/6/1", "vmem://decision/0/1/1",
                    "vmem://decision/5/2/1/", "file:///etc/passwd",
                    "vmem://decision/1001/1/1"):
            with self.subTest(uri=uri):
                e = self.assertRpcError((-32002, "ResourceNotFound"),
                                        c.call, "resources/read",
                                        {"uri": uri})
                self.assertIn("not found", e.message)
        self.assertRpcError(vt.E_VALUE, c.call, "resources/read", {})

    def test_list_newest_first_in_pages(self):
        w = self.connect(agent_id="w")
        order = []
        for i in range(55):
            x, y = 1 + i // 5, 1 + i % 5
            w.store(x, y, 2, "r%d" % i)
            order.append("vmem://decision/%d/%d/2" % (x, y))
        c = self.mcp()
        first = c.call("resources/list")
        uris = [r["uri"] for r in first["resources"]]
        self.assertEqual(uris, order[::-1][:50])
        r0 = first["resources"][0]
        self.assertEqual(r0["mimeType"], "application/json")
        self.assertEqual(r0["description"], "r54")
        self.assertRegex(r0["annotations"]["lastModified"], vt.TIMESTAMP_RE)
        second = c.call("resources/list", {"cursor": first["nextCursor"]})
        self.assertEqual([r["uri"] for r in second["resources"]],
                         order[::-1][50:])
        self.assertNotIn("nextCursor", second)
        self.assertRpcError(vt.E_VALUE, c.call, "resources/list",
                            {"cursor": "nonsense"})

    def test_subscribe_updated_and_list_changed(self):
        c = self.mcp()
        held = {}
        self.assertEqual(c.call("resources/subscribe",
                                {"uri": "vmem://decision/6/1/2"}), {})
        other = self.connect(agent_id="other")
        other.store(6, 1, 2, "watched")
        other.store(6, 1, 3, "not watched")
        note = notes_of(c, held, "notifications/resources/updated")
        self.assertEqual(note, {"uri": "vmem://decision/6/1/2"})
        other.delete(6, 1, 2)
        note = notes_of(c, held, "notifications/resources/updated")
        self.assertEqual(note, {"uri": "vmem://decision/6/1/2"})
        self.assertEqual(c.call("resources/unsubscribe",
                                {"uri": "vmem://decision/6/1/2"}), {})
        other.store(6, 1, 2, "again")
        self.assertTrue(c.silent_for(0.3))
        # After a listing, changes to the list are announced, a burst
        # as one.
        c.call("resources/list")
        other.call("decision.store_many", {"items": [
            {"coordinate": vt.coord(7, 1, z), "content": "burst"}
            for z in (2, 3, 4)]})
        self.assertIsNone(notes_of(c, held,
                                   "notifications/resources/list_changed"))
        self.assertTrue(c.silent_for(0.3))


class Prompts(McpMixin, vt.VmemTestCase):

    def text(self, res):
        self.assertEqual(len(res["messages"]), 1)
        self.assertEqual(res["messages"][0]["role"], "user")
        return res["messages"][0]["content"]["text"]

    def test_list_and_get(self):
        c = self.mcp()
        names = [p["name"] for p in c.call("prompts/list")["prompts"]]
        self.assertEqual(names, ["context_for", "record_decision"])
        w = self.connect(agent_id="arch")
        w.store(3, 1, 1, "Use PostgreSQL")
        w.store(4, 2, 3, "Pool connections")
        w.store(5, 1, 2, "REST interface")
        w.store(5, 3, 4, "not before (5, 3)")
        w.store(6, 1, 1, "later issue")
        text = self.text(c.call("prompts/get", {
            "name": "context_for", "arguments": {"x": "5", "y": "3"}}))
        self.assertIn("Use PostgreSQL", text)
        self.assertIn("Pool connections", text)
        self.assertIn("REST interface", text)
        self.assertNotIn("not before", text)
        self.assertNotIn("later issue", text)
        self.assertLess(text.index("Layer 1: Architecture"),
                        text.index("Layer 2: Interfaces"))
        self.assertLess(text.index("Layer 2: Interfaces"),
                        text.index("Layer 3: Implementation"))
        guide = self.text(c.call("prompts/get", {
            "name": "record_decision",
            "arguments": {"x": "9", "summary": "Use Redis for caching"}}))
        self.assertIn("x = 9", guide)
        self.assertIn("Use Redis for caching", guide)
        self.assertIn("Write-once", guide)
        for params in ({"name": "context_for", "arguments": {"x": "5"}},
                       {"name": "context_for",
                        "arguments": {"x": "0", "y": "1"}},
                       {"name": "nope"}, {}):
            with self.subTest(params=params):
                self.assertRpcError(vt.E_VALUE, c.call, "prompts/get",
                                    params)

    def test_context_is_bounded(self):
        w = self.connect(agent_id="big")
        fill(w, [(x, 1, 1 + x % 4) for x in range(1, 151)],
             lambda x, y, z: "x" * 5000)
        c = self.mcp()
        text = self.text(c.call("prompts/get", {
            "name": "context_for", "arguments": {"x": "151", "y": "1"}}))
        self.assertLess(len(text.encode()), PAGE_BYTES + 2 * PREVIEW)
        self.assertIn("more decisions are not shown", text)


class Logging(McpMixin, vt.VmemTestCase):

    def test_set_level(self):
        c = self.mcp()
        for level in ("debug", "info", "warning", "emergency"):
            self.assertEqual(c.call("logging/setLevel", {"level": level}),
                             {})
        self.assertRpcError(vt.E_VALUE, c.call, "logging/setLevel",
                            {"level": "loud"})

    def test_deferred_commits_are_told(self):
        c = self.mcp()
        held = {}
        c.call("logging/setLevel", {"level": "notice"})
        bisect = os.path.join(self.repo.gitdir, "BISECT_LOG")
        with open(bisect, "w"):
            pass
        c.store(1, 1, 2, "while bisecting")
        msg = notes_of(c, held, "notifications/message")
        self.assertEqual(msg["level"], "warning")
        self.assertEqual(msg["logger"], "vmemd")
        self.assertIn("bisect", msg["data"]["reason"])
        os.unlink(bisect)
        msg = notes_of(c, held, "notifications/message", timeout=vt.scaled(30))
        self.assertEqual(msg["level"], "notice")
        self.assertIn("go on again", msg["data"]["message"])
        # A native connection is sent nothing of the kind.
        n = self.connect(agent_id="n")
        with open(bisect, "w"):
            pass
        n.store(1, 1, 3, "again")
        self.assertTrue(n.silent_for(1.5))


class ConflictLogging(McpMixin, vt.GitCase):

    def test_new_conflicts_are_told(self):
        c = self.mcp()
        held = {}
        c.store(2, 1, 2, "before the conflict")
        path = os.path.join(self.repo.root, vt.rel_path(2, 1, 2))
        self.assertTrue(vt.wait_until(lambda: os.path.exists(path),
                                      vt.DEFAULT_TIMEOUT))
        with open(path, "w") as f:
            f.write("<<<<<<< HEAD\n{}\n=======\n{}\n>>>>>>> other\n")
        self.git("add", vt.rel_path(2, 1, 2))  # (the index is watched)
        while True:  # (the commits' deferral is told too)
            msg = notes_of(c, held, "notifications/message")
            if "path" in msg["data"]:
                break
        self.assertEqual(msg["level"], "warning")
        self.assertEqual(msg["data"]["path"], vt.rel_path(2, 1, 2))
        self.assertIn("conflict", msg["data"]["message"])
        self.assertIn("marker", msg["data"]["reason"])


if __name__ == "__main__":
    vt.main()

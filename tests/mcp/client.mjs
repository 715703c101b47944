// vmem mcp driven by the MCP TypeScript SDK 1.x's own client over stdio,
// as an MCP host would, with the environment a host passes (no VMEMD, no
// XDG_RUNTIME_DIR, no socket: the daemon is found from the tree): tools
// with structured results checked against their outputSchema (the SDK
// and ajv), a 20 MB tree listed in a bounded page, a 2 MiB argument, a
// read answered while a write waits for another session's lease, that
// write cancelled, resources read and subscribed, prompts, logging, and
// the daemon killed in the middle of a call and the session going on.
// Prints TAP.
//
// usage: node client.mjs VMEM REPO DAEMON_PID

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResourceUpdatedNotificationSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { ok, step, done, hostEnv, Native, outputValidator, sleep } from "./lib.mjs";

const [vmem, repo, daemonPid] = process.argv.slice(2);
if (!vmem || !repo) {
  console.error("usage: node client.mjs VMEM REPO DAEMON_PID");
  process.exit(2);
}

const AGENT = "mcp-sdk-tester";
const TOOLS = [
  "store_decision", "get_decision", "query_decisions", "decisions_before",
  "search_decisions", "decision_history", "delete_decision", "sync_memory",
];
const X = 1 + (Date.now() % 400);
const CONTENT = `Use PostgreSQL for the persistence layer (run ${X})`;

const transport = new StdioClientTransport({
  command: vmem,
  args: ["mcp", "--repo", repo, "--agent", AGENT],
  env: hostEnv(),
  stderr: "pipe",
});
let stderr = "";
transport.stderr?.on("data", (d) => { stderr += d; });
const client = new Client({ name: "vmem-mcp-tests", version: "0.1.0" });
const protocolErrors = [];
client.onerror = (e) => protocolErrors.push(String(e && e.message || e));
const updates = [];
const logs = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema,
  (n) => { updates.push(n.params.uri); });
client.setNotificationHandler(LoggingMessageNotificationSchema,
  (n) => { logs.push(n.params); });
let check;

async function call(name, args, options) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

async function waitFor(pred, ms = 10000) {
  const end = Date.now() + ms;
  while (!pred() && Date.now() < end)
    await sleep(20);
  return pred();
}

await step("initialize", async () => {
  await client.connect(transport);
  const info = client.getServerVersion();
  ok(info && info.name === "vmemd", "initialize: serverInfo.name is vmemd",
     JSON.stringify(info));
  const caps = client.getServerCapabilities() || {};
  ok(caps.tools && caps.resources && caps.resources.subscribe &&
       caps.prompts && caps.logging,
     "initialize: tools, resources (subscribe), prompts and logging",
     JSON.stringify(caps));
  ok(/agent "mcp-sdk-tester"/.test(client.getInstructions() || ""),
     "initialize: the instructions name the session's agent id",
     client.getInstructions());
});

const child = transport._process;
const exited = new Promise((resolve) => {
  if (!child)
    resolve(undefined);
  else
    child.once("exit", (code, signal) => resolve({ code, signal }));
});

await step("tools/list", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  ok(TOOLS.every((t) => names.includes(t)),
     "tools/list has every vmem tool", names.join(", "));
  ok(tools.every((t) => t.outputSchema && t.outputSchema.type === "object"),
     "every tool declares an outputSchema");
  check = outputValidator(tools);
});

await step("store and get", async () => {
  const r = await call("store_decision", { x: X, y: 2, z: 1, content: CONTENT });
  const d = r.structuredContent;
  ok(!r.isError && d && d.content === CONTENT && d.agent_id === AGENT,
     "store_decision stores as the --agent id", JSON.stringify(r));
  ok(check("store_decision", r) === null,
     "store_decision: structuredContent valid (ajv)", check("store_decision", r));
  const g = await call("get_decision", { x: X, y: 2, z: 1 });
  ok(g.structuredContent.found && g.structuredContent.decision.content === CONTENT,
     "get_decision returns it whole", JSON.stringify(g));
  ok(check("get_decision", g) === null, "get_decision: structuredContent valid (ajv)",
     check("get_decision", g));
  const s = await call("search_decisions", { terms: ["postgresql", `run ${X}`], match_all: true });
  ok(s.structuredContent.count === 1 && s.structuredContent.decisions[0].score === 2,
     "search_decisions finds it by a word and a phrase", JSON.stringify(s));
  ok(check("search_decisions", s) === null, "search_decisions: valid (ajv)",
     check("search_decisions", s));
  const e = await call("store_decision", { x: X, y: 2, z: 1, content: "again", overwrite: true });
  ok(e.isError === true && /ImmutableLayerError/.test(e.content[0].text),
     "overwriting layer 1 is a tool error", JSON.stringify(e));
});

await step("20 MB bounded", async () => {
  const native = await Native.open(repo, "filler");
  const big = " zeta " + "\u00e9".repeat(51195);
  for (let i = 0; i < 200; i += 10) {
    const batch = [];
    for (let x = 501 + i; x < 511 + i; x++)
      batch.push(native.call("decision.store", {
        coordinate: { x, y: 1, z: 3 }, content: String(x) + big }));
    await Promise.all(batch);
  }
  native.close();
  const r = await call("query_decisions", { x_range: [501, 700], limit: 200 });
  const text = r.content[0].text;
  const page = r.structuredContent;
  ok(Buffer.byteLength(text) <= 64 * 1024 && page.more === true &&
       page.count > 20 && page.count < 200 &&
       page.decisions.every((d) => d.content_truncated && d.content_bytes > 100000),
     "a 20 MB listing comes as a page under 64 KB, contents cut",
     `${Buffer.byteLength(text)} bytes, ${page.count} decisions`);
  ok(check("query_decisions", r) === null, "query_decisions: valid (ajv)",
     check("query_decisions", r));
  const next = await call("query_decisions", { x_range: [501, 700], limit: 200,
                                               after: page.next_after });
  ok(next.structuredContent.decisions[0].coordinate.x === 501 + page.count,
     "the next page starts after next_after", JSON.stringify(next.structuredContent.next_after));
  const before = await call("decisions_before", { x_threshold: 701, y_threshold: 1 });
  ok(before.structuredContent.count <= 50 && before.structuredContent.more,
     "decisions_before: 50 by default, and more", JSON.stringify(before.structuredContent.count));
});

await step("2 MiB argument", async () => {
  const r = await call("store_decision", { x: X, y: 3, z: 4, content: "y".repeat(2 << 20) });
  ok(r.isError === true && /^ValueError: .*nothing was done/.test(r.content[0].text),
     "a 2 MiB argument is a tool error, not the end of the session", JSON.stringify(r).slice(0, 300));
  ok((await client.ping()) !== undefined, "the session goes on after it");
});

await step("a waiting write, a read meanwhile, cancelled", async () => {
  const holder = await Native.open(repo, "holder");
  await holder.call("lock.acquire", { coordinates: [{ x: X, y: 4, z: 4 }], ttl_ms: 600000 });
  const ac = new AbortController();
  const pending = call("store_decision", { x: X, y: 4, z: 4, content: "cancelled",
                                           timeout_ms: 600000 },
                       { signal: ac.signal, timeout: 600000 });
  await sleep(200);
  const t0 = Date.now();
  await client.ping();
  const g = await call("get_decision", { x: X, y: 2, z: 1 });
  ok(g.structuredContent.found && Date.now() - t0 < 5000,
     "ping and a read are answered while a write waits for a lease");
  ac.abort("the user changed their mind");
  let rejected = false;
  try { await pending; } catch { rejected = true; }
  ok(rejected, "the aborted call rejects on the client side");
  await client.ping();
  holder.close();
  const other = await Native.open(repo, "after");
  const rec = await other.call("decision.store", { coordinate: { x: X, y: 4, z: 4 },
                                                   content: "after the cancel" });
  other.close();
  ok(rec.version === 1, "the cancelled write was never written", JSON.stringify(rec));
});

await step("resources and prompts", async () => {
  const t = await client.listResourceTemplates();
  ok(t.resourceTemplates[0].uriTemplate === "vmem://decision/{x}/{y}/{z}",
     "resources/templates/list", JSON.stringify(t));
  const list = await client.listResources();
  ok(list.resources.length === 50 && list.nextCursor,
     "resources/list: a page of 50 and a cursor", list.resources.length);
  const r = await client.readResource({ uri: `vmem://decision/${X}/2/1` });
  ok(JSON.parse(r.contents[0].text).content === CONTENT, "resources/read", JSON.stringify(r));
  await client.subscribeResource({ uri: `vmem://decision/${X}/5/2` });
  const w = await Native.open(repo, "watched");
  await w.call("decision.store", { coordinate: { x: X, y: 5, z: 2 }, content: "seen" });
  w.close();
  ok(await waitFor(() => updates.includes(`vmem://decision/${X}/5/2`)),
     "resources/subscribe: notifications/resources/updated", JSON.stringify(updates));
  const p = await client.getPrompt({ name: "context_for", arguments: { x: String(X + 1), y: "1" } });
  const text = p.messages[0].content.text;
  ok(/## Layer 1: Architecture/.test(text) && text.includes(CONTENT),
     "prompts/get context_for", text.slice(0, 300));
  await client.setLoggingLevel("info");
  ok(true, "logging/setLevel");
});

await step("the daemon killed mid-call", async () => {
  const holder = await Native.open(repo, "holder2");
  await holder.call("lock.acquire", { coordinates: [{ x: X, y: 5, z: 4 }], ttl_ms: 600000 });
  const inflight = call("store_decision", { x: X, y: 5, z: 4, content: "in flight",
                                            timeout_ms: 600000 }, { timeout: 600000 });
  await sleep(300);
  process.kill(Number(daemonPid), "SIGKILL");
  const r = await inflight;
  ok(r.isError === true && /outcome is unknown/.test(r.content[0].text),
     "the call in flight: a tool error saying the outcome is unknown", JSON.stringify(r));
  holder.close();
  ok((await client.ping()) !== undefined, "the session goes on (ping after the crash)");
  const g = await call("get_decision", { x: X, y: 2, z: 1 });
  ok(g.structuredContent.found && g.structuredContent.decision.content === CONTENT,
     "the restarted daemon serves the same tree", JSON.stringify(g));
  const h = await call("get_decision", { x: X, y: 5, z: 4 });
  ok(!h.structuredContent.found, "the write in flight was not sent again", JSON.stringify(h));
  const s = await call("store_decision", { x: X, y: 1, z: 4, content: "after the crash" });
  ok(s.structuredContent && s.structuredContent.agent_id === AGENT,
     "writes go on, as the same agent", JSON.stringify(s));
  updates.length = 0;
  const w = await Native.open(repo, "watched2");
  await w.call("decision.store", { coordinate: { x: X, y: 5, z: 2 }, content: "seen again",
                                   overwrite: true });
  w.close();
  ok(await waitFor(() => updates.includes(`vmem://decision/${X}/5/2`)),
     "the subscription was replayed", JSON.stringify(updates));
  ok(/reconnected/.test(stderr), "vmem mcp logged the reconnection", stderr);
});

await step("close", async () => {
  const t0 = Date.now();
  await client.close();
  const st = await Promise.race([
    exited, new Promise((r) => setTimeout(() => r("timeout"), 5000)),
  ]);
  ok(st && st.code === 0 && Date.now() - t0 < 2000,
     "vmem mcp exits 0 on stdin EOF, without a signal",
     `${JSON.stringify(st)} after ${Date.now() - t0} ms`);
});

ok(protocolErrors.length === 0,
   "stdout carried JSON-RPC messages only", protocolErrors.join("\n"));
done(stderr);

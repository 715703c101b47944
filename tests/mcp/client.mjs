// vmem mcp driven by the MCP TypeScript SDK's own client over stdio, as an
// MCP host would: initialize, ping, tools/list, tools/call (store, get,
// search, an error result), then close, which must end `vmem mcp` with
// status 0 on its stdin EOF. Prints TAP.
//
// usage: node client.mjs VMEM REPO [SOCKET]
// The daemon is found (or started, with $VMEMD) by vmem itself.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [vmem, repo, socket] = process.argv.slice(2);
if (!vmem || !repo) {
  console.error("usage: node client.mjs VMEM REPO [SOCKET]");
  process.exit(2);
}

const AGENT = "mcp-sdk-tester";
const TOOLS = [
  "store_decision", "get_decision", "query_decisions", "decisions_before",
  "search_decisions", "decision_history", "delete_decision", "sync_memory",
];
// Unique per run, so a rerun on the same tree stores afresh.
const X = 1 + (Date.now() % 900);
const CONTENT = `Use PostgreSQL for the persistence layer (run ${X})`;

let n = 0;
let failed = 0;
function ok(cond, name, detail) {
  n++;
  if (!cond)
    failed++;
  console.log(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond && detail !== undefined)
    for (const line of String(detail).split("\n"))
      console.log(`# ${line}`);
}

function textOf(result) {
  const c = result && Array.isArray(result.content) ? result.content : [];
  return c.length > 0 && c[0].type === "text" ? c[0].text : undefined;
}

function jsonOf(result) {
  try {
    return JSON.parse(textOf(result));
  } catch {
    return undefined;
  }
}

// Run one step; an exception is a failed test, never the end of the run.
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    ok(false, name, e && e.stack ? e.stack : e);
  }
}

const args = ["--repo", repo, "--agent", AGENT];
if (socket)
  args.push("--socket", socket);
args.push("mcp");
const transport = new StdioClientTransport({
  command: vmem,
  args,
  env: { ...process.env },
  stderr: "pipe",
});
let stderr = "";
transport.stderr?.on("data", (d) => { stderr += d; });
const client = new Client({ name: "vmem-mcp-tests", version: "0.1.0" });
// The SDK skips a stdout line that is not a JSON-RPC message, reporting it
// here: stdout must carry the protocol only.
const protocolErrors = [];
client.onerror = (e) => protocolErrors.push(String(e && e.message || e));

await step("initialize", async () => {
  await client.connect(transport);
  const info = client.getServerVersion();
  ok(info && info.name === "vmemd", "initialize: serverInfo.name is vmemd",
     JSON.stringify(info));
  ok(client.getServerCapabilities()?.tools !== undefined,
     "initialize: the tools capability is announced");
});

// Watch the child from now on: its exit status after close().
const child = transport._process;
const exited = new Promise((resolve) => {
  if (!child)
    resolve(undefined);
  else
    child.once("exit", (code, signal) => resolve({ code, signal }));
});

await step("ping", async () => {
  const r = await client.ping();
  ok(r !== undefined, "ping answered");
});

await step("tools/list", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  ok(TOOLS.every((t) => names.includes(t)),
     "tools/list has every vmem tool", names.join(", "));
  const store = tools.find((t) => t.name === "store_decision");
  ok(store && store.inputSchema && store.inputSchema.type === "object" &&
       ["x", "y", "z", "content"].every(
         (k) => store.inputSchema.required.includes(k)),
     "store_decision's schema requires x, y, z and content",
     JSON.stringify(store && store.inputSchema));
});

await step("store_decision", async () => {
  const r = await client.callTool({
    name: "store_decision",
    arguments: { x: X, y: 2, z: 1, content: CONTENT },
  });
  const d = jsonOf(r);
  ok(r.isError !== true && d && d.content === CONTENT &&
       d.coordinate.x === X && d.version === 1,
     "store_decision stores and returns the decision", JSON.stringify(r));
  ok(d && d.agent_id === AGENT, "the --agent id is the writer",
     JSON.stringify(d));
});

await step("get_decision", async () => {
  const r = await client.callTool({
    name: "get_decision", arguments: { x: X, y: 2, z: 1 },
  });
  const d = jsonOf(r);
  ok(r.isError !== true && d && d.content === CONTENT,
     "get_decision returns what was stored", JSON.stringify(r));
});

await step("search_decisions", async () => {
  const r = await client.callTool({
    name: "search_decisions",
    arguments: { terms: ["postgresql", `run ${X}`], match_all: true },
  });
  const d = jsonOf(r);
  ok(r.isError !== true && Array.isArray(d) && d.length === 1 &&
       d[0].content === CONTENT && d[0].score === 2,
     "search_decisions finds it by a word and a phrase", JSON.stringify(r));
});

await step("error result", async () => {
  const r = await client.callTool({
    name: "store_decision",
    arguments: { x: X, y: 2, z: 1, content: "overwrite layer 1",
                 overwrite: true },
  });
  ok(r.isError === true && /ImmutableLayerError/.test(textOf(r) || ""),
     "overwriting layer 1 is a tool error (isError, ImmutableLayerError)",
     JSON.stringify(r));
  const g = jsonOf(await client.callTool({
    name: "get_decision", arguments: { x: X, y: 2, z: 1 },
  }));
  ok(g && g.content === CONTENT, "the layer-1 decision is unchanged",
     JSON.stringify(g));
});

await step("close", async () => {
  const t0 = Date.now();
  await client.close();
  const st = await Promise.race([
    exited, new Promise((r) => setTimeout(() => r("timeout"), 5000)),
  ]);
  ok(st && st.code === 0 && Date.now() - t0 < 2000,
     "vmem mcp exits 0 on stdin EOF, without a signal",
     `${JSON.stringify(st)} after ${Date.now() - t0} ms; stderr: ${stderr}`);
});

ok(protocolErrors.length === 0,
   "stdout carried JSON-RPC messages only", protocolErrors.join("\n"));

console.log(`1..${n}`);
if (failed && stderr)
  console.log(`# vmem mcp stderr:\n# ${stderr.trim().split("\n").join("\n# ")}`);
process.exit(failed ? 1 : 0);

// vmem mcp driven by @modelcontextprotocol/client 2.x (the successor of
// the SDK's 1.x client) over stdio with a host's environment: handshake,
// tools with structured results checked against their outputSchema
// (ajv), a page and its next_after, resources, prompts, ping, close.
// Prints TAP.
//
// usage: node client2.mjs VMEM REPO

import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { ok, step, done, hostEnv, outputValidator } from "./lib.mjs";

const [vmem, repo] = process.argv.slice(2);
const X = 401 + (Date.now() % 90);
const transport = new StdioClientTransport({
  command: vmem,
  args: ["mcp", "--repo", repo],
  env: hostEnv(),
  stderr: "pipe",
});
let stderr = "";
transport.stderr?.on("data", (d) => { stderr += d; });
const client = new Client({ name: "client-v2", version: "2.4.0" });
const protocolErrors = [];
client.onerror = (e) => protocolErrors.push(String(e && e.message || e));
let check;

await step("connect", async () => {
  await client.connect(transport);
  ok(client.getServerVersion()?.name === "vmemd", "connected: serverInfo.name is vmemd",
     JSON.stringify(client.getServerVersion()));
  ok(/agent "client-v2"/.test(client.getInstructions() || ""),
     "without --agent the client's name is the agent id", client.getInstructions());
});

await step("tools", async () => {
  const { tools } = await client.listTools();
  check = outputValidator(tools);
  ok(tools.length === 16, "tools/list: 16 tools (decisions 8, conversations and documents 4, experiences 4)", tools.map((t) => t.name).join());
  for (let y = 1; y <= 5; y++) {
    const r = await client.callTool({ name: "store_decision",
      arguments: { x: X, y, z: 2, content: `interface ${y} of ${X}` } });
    if (y === 1)
      ok(!r.isError && check("store_decision", r) === null,
         "store_decision: structured result valid (ajv)", check("store_decision", r) || JSON.stringify(r));
  }
  const page = await client.callTool({ name: "query_decisions",
    arguments: { x_range: [X, X], limit: 3 } });
  ok(check("query_decisions", page) === null && page.structuredContent.more &&
       page.structuredContent.count === 3,
     "query_decisions: a page of 3 and more", check("query_decisions", page) || JSON.stringify(page.structuredContent));
  const rest = await client.callTool({ name: "query_decisions",
    arguments: { x_range: [X, X], limit: 3, after: page.structuredContent.next_after } });
  ok(rest.structuredContent.count === 2 && !rest.structuredContent.more,
     "following next_after gives the rest", JSON.stringify(rest.structuredContent));
  const h = await client.callTool({ name: "decision_history", arguments: { x: X, y: 1, z: 2 } });
  ok(check("decision_history", h) === null, "decision_history: valid (ajv)",
     check("decision_history", h));
  const d = await client.callTool({ name: "delete_decision", arguments: { x: X, y: 5, z: 2 } });
  ok(d.structuredContent && d.structuredContent.deleted === true,
     "delete_decision: {deleted: true}", JSON.stringify(d));
  const s = await client.callTool({ name: "sync_memory", arguments: {} });
  ok(check("sync_memory", s) === null && /^[0-9a-f]{40}$/.test(s.structuredContent.commit),
     "sync_memory commits; valid (ajv)", check("sync_memory", s) || JSON.stringify(s));
});

await step("resources and prompts", async () => {
  const r = await client.readResource({ uri: `vmem://decision/${X}/1/2` });
  ok(JSON.parse(r.contents[0].text).content === `interface 1 of ${X}`,
     "resources/read", JSON.stringify(r));
  const p = await client.listPrompts();
  ok(p.prompts.map((x) => x.name).join() === "context_for,record_decision",
     "prompts/list", JSON.stringify(p));
  const g = await client.getPrompt({ name: "record_decision", arguments: { x: String(X) } });
  ok(/Write-once/.test(g.messages[0].content.text), "prompts/get record_decision");
  ok((await client.ping()) !== undefined, "ping");
});

await step("close", async () => {
  await client.close();
  ok(true, "closed");
});
ok(protocolErrors.length === 0, "no protocol error", protocolErrors.join("\n"));
done(stderr);

// vmem mcp driven by a client not from the MCP project: the Vercel AI
// SDK's @ai-sdk/mcp, which tries server/discover (revision 2026-07-28)
// before initialize and sends no notifications/cancelled. Its tools()
// turns vmem's tools into AI SDK tools; they are executed as a model's
// tool calls would be. Prints TAP.
//
// usage: node aisdk.mjs VMEM REPO

import { createMCPClient } from "@ai-sdk/mcp";
import { Experimental_StdioMCPTransport } from "@ai-sdk/mcp/mcp-stdio";
import { ok, step, done, hostEnv, Native } from "./lib.mjs";

const [vmem, repo] = process.argv.slice(2);
const X = 301 + (Date.now() % 90);
let client;

await step("connect", async () => {
  const native = await Native.open(repo, "stats");
  const before = (await native.call("server.stats")).methods["server/discover"];
  client = await createMCPClient({
    transport: new Experimental_StdioMCPTransport({
      command: vmem, args: ["mcp", "--repo", repo, "--agent", "ai-sdk"], env: hostEnv(),
    }),
    name: "ai-sdk-tester",
  });
  const after = (await native.call("server.stats")).methods["server/discover"];
  native.close();
  ok((after?.count || 0) > (before?.count || 0),
     "it asked server/discover first, and fell back to initialize",
     JSON.stringify({ before, after }));
});

await step("tools", async () => {
  const tools = await client.tools();
  ok(["store_decision", "get_decision", "query_decisions"].every((t) => t in tools),
     "tools(): vmem's tools as AI SDK tools", Object.keys(tools).join());
  const opts = { toolCallId: "call-1", messages: [] };
  const stored = await tools.store_decision.execute(
    { x: X, y: 2, z: 3, content: "Cache with Redis" }, opts);
  ok(stored && !stored.isError && stored.structuredContent.agent_id === "ai-sdk",
     "store_decision executed as a tool call", JSON.stringify(stored));
  const got = await tools.get_decision.execute({ x: X, y: 2, z: 3 }, { ...opts, toolCallId: "call-2" });
  ok(got.structuredContent.decision.content === "Cache with Redis",
     "get_decision executed as a tool call", JSON.stringify(got));
  const bad = await tools.get_decision.execute({ x: 0, y: 2, z: 3 }, { ...opts, toolCallId: "call-3" });
  ok(bad.isError === true, "a domain error is a tool error", JSON.stringify(bad));
});

await step("resources", async () => {
  const r = await client.readResource({ uri: `vmem://decision/${X}/2/3` });
  ok(r.contents && JSON.parse(r.contents[0].text).content === "Cache with Redis",
     "readResource", JSON.stringify(r));
});

await step("close", async () => {
  await client.close();
  ok(true, "closed");
});
done();

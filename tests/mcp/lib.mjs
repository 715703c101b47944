// Helpers shared by the client scripts of tests/mcp: TAP output, a native
// connection to the daemon (for leases and for filling the tree), the
// environment an MCP host gives its servers, and outputSchema checks
// with ajv.

import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import Ajv from "ajv";

let n = 0;
let failed = 0;

export function ok(cond, name, detail) {
  n++;
  if (!cond)
    failed++;
  console.log(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond && detail !== undefined)
    for (const line of String(detail).split("\n"))
      console.log(`# ${line}`);
}

// Run one step; an exception is a failed test, never the end of the run.
export async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    ok(false, name, e && e.stack ? e.stack : e);
  }
}

export function done(stderr) {
  console.log(`1..${n}`);
  if (failed && stderr)
    console.log(`# vmem mcp stderr:\n# ${stderr.trim().split("\n").join("\n# ")}`);
  process.exit(failed ? 1 : 0);
}

// What MCP hosts pass to a server: these six variables and nothing else
// (no XDG_RUNTIME_DIR, no VMEM_*, no VMEMD).
export function hostEnv() {
  const env = {};
  for (const k of ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"])
    if (process.env[k] !== undefined)
      env[k] = process.env[k];
  return env;
}

// The socket the tree's daemon recorded (it changes when a killed daemon
// is started again elsewhere).
export function daemonSocket(repo) {
  return fs.readFileSync(path.join(repo, ".git", "vmem", "socket"), "utf8")
    .trimEnd();
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A native JSON-RPC connection to the daemon.
export class Native {
  static async open(repo, agent = "native-helper") {
    const c = new Native(daemonSocket(repo));
    await new Promise((resolve, reject) => {
      c.sock.once("connect", resolve);
      c.sock.once("error", reject);
    });
    await c.call("server.hello", { agent_id: agent });
    return c;
  }

  constructor(sockPath) {
    this.sock = net.createConnection(sockPath);
    this.buf = "";
    this.waiting = new Map();
    this.id = 0;
    this.sock.setEncoding("utf8");
    this.sock.on("data", (d) => {
      this.buf += d;
      let i;
      while ((i = this.buf.indexOf("\n")) >= 0) {
        const msg = JSON.parse(this.buf.slice(0, i));
        this.buf = this.buf.slice(i + 1);
        const w = this.waiting.get(msg.id);
        if (w) {
          this.waiting.delete(msg.id);
          w(msg);
        }
      }
    });
  }

  request(method, params) {
    const id = ++this.id;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.sock.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }

  async call(method, params) {
    const msg = await this.request(method, params);
    if (msg.error)
      throw new Error(`${method}: ${JSON.stringify(msg.error)}`);
    return msg.result;
  }

  close() {
    this.sock.end();
    this.sock.destroy();
  }
}

// ajv over the outputSchema each tool declares: structuredContent must
// conform.
export function outputValidator(tools) {
  const ajv = new Ajv({ strict: false, allErrors: true });
  const check = {};
  for (const t of tools)
    if (t.outputSchema)
      check[t.name] = ajv.compile(t.outputSchema);
  return (name, result) => {
    const v = check[name];
    if (!v)
      return `no outputSchema for ${name}`;
    if (!result || result.structuredContent === undefined)
      return `no structuredContent from ${name}`;
    if (!v(result.structuredContent))
      return ajv.errorsText(v.errors);
    const text = result.content && result.content[0] && result.content[0].text;
    if (JSON.stringify(JSON.parse(text)) !== JSON.stringify(result.structuredContent))
      return "the text is not the structured result";
    return null;
  };
}

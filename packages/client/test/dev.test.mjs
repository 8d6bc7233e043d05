// The local development path as docs/DEPLOY.md writes it: a shard under `wrangler dev` (which runs
// the [build] command first) with its token as a --var and the model uploaded into the local R2
// state it persists to, and the example inference Worker under `wrangler dev` pointed at it.
// The example's token equals `cobordism sample --local`; what wrangler leaves in the example's
// folder is ignored by git.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { createServer } from "node:net";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { CLI, cli, makeModel, hiddenBytes, tempDir } from "../../../tests/worker/helpers.mjs";

const ROOT = join(import.meta.dirname, "..", "..", "..");
const TOKEN = "dev-token-7c1e";

/** A free loopback port. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on("error", reject);
  });
}

/** `npx wrangler dev ARGS…` in its own process group, resolved once it says it is ready. */
function wranglerDev(args) {
  const child = spawn("npx", ["wrangler", "dev", ...args], { cwd: ROOT, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`wrangler dev never got ready:\n${out}`)), 180_000);
    for (const s of [child.stdout, child.stderr]) {
      s.on("data", (d) => {
        out += d;
        if (/Ready on http/.test(out)) (clearTimeout(timer), resolve());
      });
    }
    child.on("exit", (code) => (clearTimeout(timer), reject(new Error(`wrangler dev exited (${code}):\n${out}`))));
  });
  return { ready, stop: () => process.kill(-child.pid, "SIGTERM"), output: () => out };
}

test("wrangler dev: a shard and the example inference Worker, as docs/DEPLOY.md says", { timeout: 400_000 }, async () => {
  const model = makeModel({ type: "q6_k", hidden: 256, vocab: 3000, shards: 1, seed: 95 });
  const state = tempDir("dev-state");
  cli("upload", "--dir", model.slices, "--bucket", "cobordism-lm-head", "--prefix", "model", "--local", "--persist-to", state);
  const [shardPort, examplePort] = [await freePort(), await freePort()];
  const shard = wranglerDev(["--var", "SHARD_COUNT:1", "--var", `AUTH_TOKEN:${TOKEN}`, "--persist-to", state, "--ip", "127.0.0.1", "--port", `${shardPort}`]);
  let example;
  try {
    await shard.ready;
    const shardUrl = `http://127.0.0.1:${shardPort}`;
    example = wranglerDev(["-c", "examples/inference-worker/wrangler.toml", "--var", `SHARD_URLS:${shardUrl}`, "--var", `SHARD_TOKEN:${TOKEN}`, "--ip", "127.0.0.1", "--port", `${examplePort}`]);
    await example.ready;
    const base = `http://127.0.0.1:${examplePort}`;
    const session = await fetch(`${base}/session`, { method: "POST" });
    assert.equal(session.status, 200, await session.clone().text());
    assert.equal((await session.json()).shards.length, 1);
    const bytes = hiddenBytes(256, 21);
    const r = await fetch(`${base}/next-token?temperature=0.8&seed=3`, { method: "POST", body: bytes });
    const got = await r.json();
    assert.equal(r.status, 200, JSON.stringify(got));
    const file = join(tempDir("hidden"), "h.f32");
    writeFileSync(file, bytes);
    const { stdout } = await promisify(execFile)(CLI, ["sample", "--manifest", join(model.slices, "manifest.json"), "--hidden", file, "--local", "--temperature", "0.8", "--seed", "3"]);
    assert.equal(got.token, Number(/token (\d+)/.exec(stdout)[1]), "the CLI's token");
    const noToken = await fetch(`${shardUrl}/cobordism-lm-head`, { method: "POST", body: bytes });
    assert.equal(noToken.status, 401, "closed without the token");
  } finally {
    example?.stop();
    shard.stop();
  }
  // wrangler leaves .wrangler/ next to the example's config: git ignores it.
  execFileSync("git", ["check-ignore", "-q", "examples/inference-worker/.wrangler/"], { cwd: ROOT });
});

// The README's deploy block, run as written: its `sh` block under "Deploy to Cloudflare", line by
// line, in a shadow of the checkout (links to the repository's files, its own `.cobordism/` and
// model), with a stand-in for Cloudflare: `npx wrangler` and the CLI's and deploy-all's wrangler
// are a script that runs the real wrangler's R2 commands against a local R2 state instead of the
// account, and answers `deploy` with the URL of a local shard (workerd) reading that state. So
// every command of the block runs, in order, and the last two (`status`, `logits --verify`) check
// the shards it deployed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startShards, BUCKET } from "../../worker/local.mjs";
import { cli, tempDir } from "./helpers.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The README's deploy block: the first `sh` block after "## Deploy to Cloudflare". */
function deployBlock() {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Deploy to Cloudflare"));
  return /```sh\n([\s\S]*?)```/.exec(section)[1];
}

test("the README's deploy block runs as written, against a stand-in Cloudflare", { timeout: 600_000 }, async () => {
  const work = tempDir("readme");
  const shadow = join(work, "checkout");
  mkdirSync(shadow);
  for (const entry of readdirSync(root)) {
    if (![".cobordism", ".git", "slices", "model.gguf"].includes(entry)) symlinkSync(join(root, entry), join(shadow, entry));
  }
  cli("synth", "--out", join(shadow, "model.gguf"), "--shape", "tiny", "--type", "q6_k", "--seed", "5");
  const state = join(work, "state");
  const local = await startShards({ shards: 8, state, authToken: "made-by-deploy-all" });
  try {
    const log = join(work, "calls.jsonl");
    const standIn = join(work, "wrangler");
    writeFileSync(
      standIn,
      `#!/usr/bin/env node
// Cloudflare, locally: R2 commands go to the real wrangler on a local state; deploys answer
// with a local shard's URL; secrets are recorded.
const fs = require("node:fs");
const { spawnSync } = require("node:child_process");
const argv = process.argv.slice(2);
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify(argv) + "\\n");
if (argv[0] === "r2" && argv[1] === "object") {
  const args = argv.flatMap((a) => (a === "--remote" ? ["--local", "--persist-to", ${JSON.stringify(state)}] : [a]))
    .map((a) => a.replace(/^my-lm-head\\//, "${BUCKET}/"));
  // One local write at a time (the state is one SQLite file the running shards also hold), and
  // again when the file was busy.
  for (let attempt = 0; attempt < 4; attempt++) {
    const r = spawnSync("flock", [${JSON.stringify(join(work, "r2.lock"))}, ${JSON.stringify(join(root, "node_modules", ".bin", "wrangler"))}, ...args], { stdio: "inherit", cwd: ${JSON.stringify(root)} });
    if (r.status === 0) process.exit(0);
  }
  process.exit(1);
}
if (argv[0] === "secret") fs.readFileSync(0);
if (argv[0] === "deploy" && process.env.WRANGLER_OUTPUT_FILE_PATH) {
  const i = Number(/-s(\\d+)$/.exec(argv[argv.indexOf("--name") + 1])[1]);
  const targets = [${JSON.stringify(local.endpoints)}[i]];
  fs.appendFileSync(process.env.WRANGLER_OUTPUT_FILE_PATH, JSON.stringify({ type: "deploy", targets }) + "\\n");
}
`,
    );
    chmodSync(standIn, 0o755);
    // The block as written, with \`npx wrangler\` and \`npm ci\` meaning the stand-in and nothing
    // (the dependencies are installed already; a shadow checkout must not reinstall them).
    const prelude = `set -euo pipefail
npx() { if [ "$1" = wrangler ]; then shift; "${standIn}" "$@"; else command npx "$@"; fi; }
npm() { if [ "$1" = ci ]; then return 0; fi; command npm "$@"; }
mkdir -p .cobordism && printf 'made-by-deploy-all\\n' >.cobordism/token
`;
    const run = spawnSync("bash", ["-c", prelude + deployBlock()], {
      cwd: shadow,
      encoding: "utf8",
      env: { ...process.env, WRANGLER: standIn, COBORDISM_WRANGLER: standIn, COBORDISM_TOKEN: "" },
    });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /8 shards, 8 healthy/);
    assert.match(run.stdout, /identical/);
    const calls = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(calls[0], ["r2", "bucket", "create", "my-lm-head"]);
    assert.equal(calls.filter((c) => c[0] === "deploy").length, 8);
    assert.equal(readFileSync(join(shadow, ".cobordism", "endpoints"), "utf8").split("\n").filter((l) => l.startsWith("http")).length, 8);
  } finally {
    await local.dispose();
  }
});

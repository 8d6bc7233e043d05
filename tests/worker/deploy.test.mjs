// scripts/deploy-all.sh against a stand-in wrangler that records its arguments and standard
// input: eight deploys, one token put on all eight shards through stdin, never on a command line.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "./helpers.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Runs deploy-all.sh with the stand-in; returns its calls and output. */
function deployAll(dir, env = {}) {
  const log = join(dir, "calls.jsonl");
  const stub = join(dir, "wrangler");
  writeFileSync(log, "");
  writeFileSync(
    stub,
    `#!/usr/bin/env node
const fs = require("node:fs");
const stdin = process.argv[2] === "secret" ? fs.readFileSync(0, "utf8") : null;
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify({ argv: process.argv.slice(2), stdin }) + "\\n");
`,
  );
  chmodSync(stub, 0o755);
  const out = execFileSync(join(root, "scripts", "deploy-all.sh"), ["--dry-run"], {
    encoding: "utf8",
    env: { ...process.env, WRANGLER: stub, COBORDISM_TOKEN_FILE: join(dir, "token"), ...env },
  });
  const calls = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  return { out, calls };
}

test("deploy-all puts one token on all eight shards through stdin, never on a command line", () => {
  const dir = tempDir("deploy");
  const { out, calls } = deployAll(dir, { COBORDISM_TOKEN: "" });
  const token = readFileSync(join(dir, "token"), "utf8").trim();
  assert.match(token, /^[0-9a-f]{64}$/);
  assert.equal(statSync(join(dir, "token")).mode & 0o777, 0o600);
  const deploys = calls.filter((c) => c.argv[0] === "deploy");
  const secrets = calls.filter((c) => c.argv[0] === "secret");
  assert.ok(deploys.every((c) => c.argv.at(-1) === "--dry-run"), "extra arguments go to wrangler deploy");
  assert.deepEqual(
    deploys.map((c) => c.argv[c.argv.indexOf("--env") + 1]),
    ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"],
  );
  assert.deepEqual(
    secrets.map((c) => [c.argv.slice(0, 3).join(" "), c.argv[c.argv.indexOf("--env") + 1], c.stdin]),
    Array.from({ length: 8 }, (_, i) => ["secret put AUTH_TOKEN", `s${i}`, token]),
  );
  for (const c of calls) assert.ok(!c.argv.join(" ").includes(token), "the token is on a command line");
  assert.ok(!out.includes(token), "the token is printed");
  assert.match(out, /export COBORDISM_TOKEN=/);

  // A second deploy reuses the stored token; COBORDISM_TOKEN wins over it.
  assert.ok(deployAll(dir, { COBORDISM_TOKEN: "" }).calls.filter((c) => c.stdin !== null).every((c) => c.stdin === token));
  const given = deployAll(dir, { COBORDISM_TOKEN: "given-token" });
  assert.ok(given.calls.filter((c) => c.stdin !== null).every((c) => c.stdin === "given-token"));
});

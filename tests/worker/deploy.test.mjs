// scripts/deploy-all.sh against a stand-in wrangler that records its arguments and standard
// input: N deploys (8 by default, 12) with the right name, SHARD_INDEX and SHARD_COUNT, one token
// put on every shard through stdin, never on a command line; the shards' URLs in shard order; a
// bad --shards refused before anything is deployed. The real wrangler takes the deploy command.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "./helpers.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Writes the stand-in wrangler into dir: it records each call in calls.jsonl and, with `urls`,
 * reports a workers.dev URL for each deploy in wrangler's output file, as the real one does. */
function standIn(dir, { urls }) {
  const log = join(dir, "calls.jsonl");
  const stub = join(dir, "wrangler");
  writeFileSync(log, "");
  writeFileSync(
    stub,
    `#!/usr/bin/env node
const fs = require("node:fs");
const argv = process.argv.slice(2);
const stdin = argv[0] === "secret" && argv[1] === "put" ? fs.readFileSync(0, "utf8") : null;
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify({ argv, stdin }) + "\\n");
// No bucket exists while STAND_IN_NO_BUCKET is set.
if (argv[0] === "r2" && argv[2] === "info" && process.env.STAND_IN_NO_BUCKET) process.exit(1);
// A Worker that does not exist cannot be deleted (STAND_IN_WORKERS lists those that do).
if (argv[0] === "delete" && !(process.env.STAND_IN_WORKERS ?? "").split(",").includes(argv[1])) process.exit(1);
const output = process.env.WRANGLER_OUTPUT_FILE_PATH;
if (${urls} && argv[0] === "deploy" && output) {
  const targets = ["https://" + argv[argv.indexOf("--name") + 1] + ".you.workers.dev"];
  fs.appendFileSync(output, JSON.stringify({ type: "deploy", version: 1, targets }) + "\\n");
}
`,
  );
  chmodSync(stub, 0o755);
  return { log, stub };
}

/** Runs deploy-all.sh with the stand-in; returns its exit status, calls and output. */
function deployAll(dir, { args = [], env = {}, urls = false, dryRun = true } = {}) {
  const { log, stub } = standIn(dir, { urls });
  // A deploy is a dry run; the other modes change only secrets and Workers (of the stand-in).
  const mode = args.some((a) => ["--rotate-token", "--finish-rotation", "--delete"].includes(a));
  const run = spawnSync(join(root, "scripts", "deploy-all.sh"), mode || !dryRun ? args : ["--dry-run", ...args], {
    encoding: "utf8",
    env: {
      ...process.env,
      WRANGLER: stub,
      COBORDISM_TOKEN_FILE: join(dir, "token"),
      COBORDISM_ENDPOINTS_FILE: join(dir, "endpoints"),
      ...env,
    },
  });
  const text = readFileSync(log, "utf8").trim();
  const calls = text ? text.split("\n").map((l) => JSON.parse(l)) : [];
  return { status: run.status, out: run.stdout, err: run.stderr, calls };
}

const flag = (argv, name) => argv[argv.indexOf(name) + 1];
const vars = (argv) => argv.flatMap((a, i) => (argv[i - 1] === "--var" ? [a] : []));

/** Checks the calls of a deploy of n shards with the given token. */
function checkShards({ status, err, out, calls }, n, token) {
  assert.equal(status, 0, err);
  assert.equal(calls.length, 2 * n);
  for (let i = 0; i < n; i++) {
    const [deploy, secret] = calls.slice(2 * i, 2 * i + 2);
    const name = `cobordism-lm-head-s${i}`;
    assert.equal(deploy.argv[0], "deploy");
    assert.equal(flag(deploy.argv, "--name"), name);
    assert.deepEqual(vars(deploy.argv), [`SHARD_INDEX:${i}`, `SHARD_COUNT:${n}`]);
    assert.equal(deploy.argv.at(-1), "--dry-run", "extra arguments go to wrangler deploy");
    assert.ok(!deploy.argv.includes("--env"), "a deploy in an environment has its own vars");
    assert.deepEqual(secret.argv.slice(0, 3), ["secret", "put", "AUTH_TOKEN"]);
    assert.equal(flag(secret.argv, "--name"), name);
    assert.equal(flag(secret.argv, "-c"), flag(deploy.argv, "-c"));
    assert.equal(secret.stdin, token);
  }
  for (const c of calls) assert.ok(!c.argv.join(" ").includes(token), "the token is on a command line");
  assert.ok(!out.includes(token), "the token is printed");
  assert.match(out, new RegExp(`deploy-all: ${n} shards deployed`));
}

test("deploy-all deploys eight shards by default and puts one token on all through stdin", () => {
  const dir = tempDir("deploy");
  const first = deployAll(dir, { env: { COBORDISM_TOKEN: "" } });
  const token = readFileSync(join(dir, "token"), "utf8").trim();
  assert.match(token, /^[0-9a-f]{64}$/);
  assert.equal(statSync(join(dir, "token")).mode & 0o777, 0o600);
  checkShards(first, 8, token);
  assert.match(first.out, /export COBORDISM_TOKEN=/);
  // Without URLs from wrangler (a dry run) there is no endpoints file to trust.
  assert.match(first.out, /no workers\.dev URL for 8 of them/);
  assert.ok(!existsSync(join(dir, "endpoints")));

  // A second deploy reuses the stored token.
  checkShards(deployAll(dir, { args: ["--shards", "8"], env: { COBORDISM_TOKEN: "" } }), 8, token);
});

test("deploy-all --shards 12: twelve shards, COBORDISM_TOKEN on each, their URLs in shard order", () => {
  const dir = tempDir("deploy");
  const run = deployAll(dir, { args: ["--shards", "12"], env: { COBORDISM_TOKEN: "given-token" }, urls: true });
  checkShards(run, 12, "given-token");
  assert.ok(!existsSync(join(dir, "token")), "a given token is not stored");
  const urls = Array.from({ length: 12 }, (_, i) => `https://cobordism-lm-head-s${i}.you.workers.dev`);
  const lines = readFileSync(join(dir, "endpoints"), "utf8").split("\n");
  assert.deepEqual(lines.filter((l) => l && !l.startsWith("#")), urls);
  assert.equal(readFileSync(join(dir, "shard-urls"), "utf8"), `${urls.join(",")}\n`, "SHARD_URLS' form");
  assert.ok(run.out.includes(urls.map((u) => `  ${u}\n`).join("")), "the URLs are printed in shard order");

  // The command deploy-all gave the stand-in is one the real wrangler deploys (dry run).
  const last = run.calls.at(-2).argv;
  const real = spawnSync(join(root, "node_modules", ".bin", "wrangler"), [...last, "--outdir", join(dir, "out")], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  assert.equal(real.status, 0, real.stdout + real.stderr);
  assert.match(real.stdout, /env\.LM_HEAD \(cobordism-lm-head\)/);
  assert.match(real.stdout, /env\.SHARD_COUNT/);
  const config = readFileSync(join(root, flag(last, "-c")), "utf8");
  assert.ok(!/^\[(build|env\.)/m.test(config), "the deployed config has no [build] or environments");
});

test("deploy-all --residency object with settings: each given once, one object class and migration per script", () => {
  const dir = tempDir("deploy");
  const settings = ["--bucket", "my-models", "--prefix", "models/qwen", "--budget-mib", "110", "--residency", "object", "--replicas", "3", "--keep-warm-s", "600", "--name", "qwen-head", "--metrics", "lm_head"];
  const run = deployAll(dir, { args: ["--shards", "2", ...settings], env: { COBORDISM_TOKEN: "t0k3n" } });
  assert.equal(run.status, 0, run.err);
  const deploys = run.calls.filter((c) => c.argv[0] === "deploy");
  assert.deepEqual(deploys.map((c) => flag(c.argv, "--name")), ["qwen-head-s0", "qwen-head-s1"]);
  for (const [i, c] of deploys.entries()) {
    assert.deepEqual(vars(c.argv), [`SHARD_INDEX:${i}`, "SHARD_COUNT:2", "MODEL_PREFIX:models/qwen", "MEMORY_BUDGET_MIB:110", "RESIDENCY:object", "REPLICAS:3", "KEEP_WARM_S:600"]);
  }
  const configPath = join(root, flag(deploys[0].argv, "-c"));
  const config = readFileSync(configPath, "utf8");
  assert.match(config, /^bucket_name = "my-models"$/m);
  assert.equal(config.match(/^\[\[durable_objects\.bindings\]\]$/gm)?.length, 1);
  assert.match(config, /^class_name = "ShardObject"$/m);
  assert.equal(config.match(/^\[\[migrations\]\]$/gm)?.length, 1);
  assert.match(config, /^new_sqlite_classes = \["ShardObject"\]$/m);
  assert.match(config, /\[\[analytics_engine_datasets\]\]\nbinding = "METRICS"\ndataset = "lm_head"/);
  assert.match(config, /^\[observability\]\nenabled = true$/m);
  // The real wrangler takes it: the Durable Object binding, its class and the settings.
  const real = spawnSync(join(root, "node_modules", ".bin", "wrangler"), [...deploys[1].argv, "--outdir", join(dir, "out")], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  assert.equal(real.status, 0, real.stdout + real.stderr);
  assert.match(real.stdout, /env\.SHARD_OBJECT \(ShardObject\)/);
  assert.match(real.stdout, /env\.LM_HEAD \(my-models\)/);
  assert.match(real.stdout, /env\.RESIDENCY /);
  assert.match(real.stdout, /env\.METRICS \(lm_head\)/);
});

test("deploy-all --rotate-token: the old token stays accepted until --finish-rotation; both go through stdin", () => {
  const dir = tempDir("deploy");
  writeFileSync(join(dir, "token"), "old-token\n");
  const run = deployAll(dir, { args: ["--rotate-token", "--shards", "3"], env: { COBORDISM_TOKEN: "" } });
  assert.equal(run.status, 0, run.err);
  const next = readFileSync(join(dir, "token"), "utf8").trim();
  assert.match(next, /^[0-9a-f]{64}$/);
  assert.equal(readFileSync(join(dir, "token.previous"), "utf8").trim(), "old-token");
  assert.equal(statSync(join(dir, "token")).mode & 0o777, 0o600);
  assert.deepEqual(
    run.calls.map((c) => [c.argv.slice(0, 3).join(" "), flag(c.argv, "--name"), c.stdin]),
    [0, 1, 2].flatMap((i) => [
      ["secret put AUTH_TOKEN_PREVIOUS", `cobordism-lm-head-s${i}`, "old-token"],
      ["secret put AUTH_TOKEN", `cobordism-lm-head-s${i}`, next],
    ]),
    "the previous token is in place on a shard before its token changes",
  );
  for (const c of run.calls) assert.ok(!c.argv.join(" ").includes(next) && !c.argv.join(" ").includes("old-token"));
  assert.match(run.out, /--finish-rotation --shards 3/);

  const finish = deployAll(dir, { args: ["--finish-rotation", "--shards", "3"] });
  assert.equal(finish.status, 0, finish.err);
  assert.deepEqual(finish.calls.map((c) => c.argv.join(" ")), [0, 1, 2].map((i) => `secret delete AUTH_TOKEN_PREVIOUS --name cobordism-lm-head-s${i}`));
  assert.ok(!existsSync(join(dir, "token.previous")));
  const none = deployAll(tempDir("deploy"), { args: ["--rotate-token"], env: { COBORDISM_TOKEN: "" } });
  assert.equal(none.status, 1);
  assert.match(none.err, /no current token/);
});

test("deploy-all --delete: every shard Worker a deploy recorded, and any further one wrangler finds", () => {
  const dir = tempDir("deploy");
  const first = deployAll(dir, { args: ["--shards", "5"], env: { COBORDISM_TOKEN: "t" } });
  assert.equal(first.status, 0, first.err);
  assert.equal(readFileSync(join(dir, "deployed"), "utf8"), "cobordism-lm-head 5\n");
  assert.equal(deployAll(dir, { args: ["--shards", "3"], env: { COBORDISM_TOKEN: "t" } }).status, 0);
  assert.equal(readFileSync(join(dir, "deployed"), "utf8"), "cobordism-lm-head 5\n", "the largest count is kept");
  // Seven exist: five recorded here, two more deployed from elsewhere.
  const workers = Array.from({ length: 7 }, (_, i) => `cobordism-lm-head-s${i}`).join(",");
  const run = deployAll(dir, { args: ["--delete", "--shards", "3"], env: { STAND_IN_WORKERS: workers } });
  assert.equal(run.status, 0, run.err);
  const deleted = run.calls.map((c) => c.argv[1]);
  assert.deepEqual(deleted, Array.from({ length: 8 }, (_, i) => `cobordism-lm-head-s${i}`), "up to the first one not found past the recorded five");
  assert.match(run.out, /deleted 7 shard Workers/);
  assert.equal(readFileSync(join(dir, "deployed"), "utf8"), "");
  assert.equal(deployAll(dir, { args: ["--delete", "--prefix", "x"] }).status, 2, "--delete takes no settings");
});

test("deploy-all creates the R2 bucket when it does not exist (not in a dry run)", () => {
  const dir = tempDir("deploy");
  const run = deployAll(dir, { args: ["--shards", "2", "--bucket", "fresh-bucket"], env: { COBORDISM_TOKEN: "t", STAND_IN_NO_BUCKET: "1" }, dryRun: false });
  assert.equal(run.status, 0, run.err);
  assert.deepEqual(run.calls.slice(0, 2).map((c) => c.argv.join(" ")), ["r2 bucket info fresh-bucket", "r2 bucket create fresh-bucket"]);
  assert.match(run.out, /the R2 bucket fresh-bucket does not exist; creating it/);
  const there = deployAll(dir, { args: ["--shards", "2"], env: { COBORDISM_TOKEN: "t" }, dryRun: false });
  assert.deepEqual(there.calls.filter((c) => c.argv[0] === "r2").map((c) => c.argv.join(" ")), ["r2 bucket info cobordism-lm-head"]);
});

test("deploy-all refuses a bad setting before deploying anything", () => {
  const dir = tempDir("deploy");
  for (const [args, why] of [
    [["--residency", "durable"], /expected isolate or object/],
    [["--replicas", "0"], /expected 1…64/],
    [["--replicas", "65"], /expected 1…64/],
    [["--keep-warm-s", "-5"], /expected 0…86400/],
    [["--budget-mib", "1.5"], /expected whole MiB/],
    [["--bucket", "My_Bucket"], /expected an R2 bucket name/],
    [["--prefix"], /--prefix needs a value/],
  ]) {
    const run = deployAll(dir, { args });
    assert.equal(run.status, 2, `${args.join(" ")}: ${run.err}`);
    assert.match(run.err, why, args.join(" "));
    assert.deepEqual(run.calls, [], `${args.join(" ")} deployed`);
  }
});

test("deploy-all refuses a shard count that is not 1…500 (an account's Workers) before deploying anything", () => {
  const dir = tempDir("deploy");
  for (const args of [["--shards", "0"], ["--shards", "x"], ["--shards", "501"], ["--shards=-1"], ["--shards"]]) {
    const run = deployAll(dir, { args });
    assert.equal(run.status, 2, `${args.join(" ")}: ${run.err}`);
    assert.match(run.err, /usage: scripts\/deploy-all\.sh \[--shards N\]/);
    assert.deepEqual(run.calls, [], `${args.join(" ")} deployed`);
    assert.ok(!existsSync(join(dir, "token")), `${args.join(" ")} made a token`);
  }
});

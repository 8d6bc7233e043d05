// `cobordism deploy` against a stand-in Cloudflare (stand-in-cloudflare.mjs: the account's
// Workers, their variables, bindings, secrets and versions in a JSON file): a dry run's configs
// (and the real wrangler takes them), a deploy and its record, the token never on a command line,
// settings kept across redeploys, rotations that cannot strand a caller and restart no object, a
// teardown that fails loudly, and settings refused before anything runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { CLI, tempDir } from "./helpers.mjs";
import { readToml } from "./toml-subset.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const STAND_IN = join(root, "tests", "worker", "stand-in-cloudflare.mjs");

/** A deployment's directory: its state directory and its stand-in account. */
function place() {
  const dir = tempDir("deploy");
  return { dir, state: join(dir, "state"), account: join(dir, "account.json") };
}

/** Runs `cobordism deploy args…` (already built: --no-build) against the stand-in. */
function deploy(p, args, { env = {} } = {}) {
  const action = args.some((a) => ["--rotate-token", "--finish-rotation", "--delete", "--dry-run"].includes(a));
  const run = spawnSync(CLI, ["deploy", ...args, ...(action ? [] : ["--no-build"]), "--state-dir", p.state], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, COBORDISM_WRANGLER: STAND_IN, STAND_IN_ACCOUNT: p.account, COBORDISM_TOKEN: "", ...env },
  });
  return { status: run.status, out: run.stdout, err: run.stderr };
}

const account = (p) => (existsSync(p.account) ? JSON.parse(readFileSync(p.account, "utf8")) : { workers: {}, calls: [], deleted: [] });
const token = (p, name = "token") => readFileSync(join(p.state, name), "utf8").trim();
const ok = (r) => assert.equal(r.status, 0, `${r.out}\n${r.err}`);

test("--dry-run writes each Worker's config from wrangler.toml and calls nothing; wrangler takes them", () => {
  const p = place();
  const out = join(p.dir, "configs");
  const r = deploy(p, ["--dry-run", "--shards", "3", "--bucket", "bkt", "--prefix", "p/q", "--residency", "object", "--out", out]);
  ok(r);
  assert.equal(existsSync(p.account), false, "no call to wrangler");
  assert.equal(existsSync(p.state), false, "no record, no token");
  assert.deepEqual(readdirSync(out).sort(), ["0", "1", "2"].flatMap((i) => [`cobordism-lm-head-s${i}-objects.toml`, `cobordism-lm-head-s${i}.toml`]).sort());
  for (let i = 0; i < 3; i++) {
    const front = readToml(readFileSync(join(out, `cobordism-lm-head-s${i}.toml`), "utf8"));
    const objects = readToml(readFileSync(join(out, `cobordism-lm-head-s${i}-objects.toml`), "utf8"));
    for (const c of [front, objects]) {
      assert.equal(c.r2_buckets[0].bucket_name, "bkt");
      assert.deepEqual([c.vars.SHARD_INDEX, c.vars.SHARD_COUNT, c.vars.MODEL_PREFIX, c.vars.RESIDENCY], [`${i}`, "3", "p/q", "object"]);
      assert.equal(c.build, undefined, "built once, not by every wrangler call");
    }
    assert.deepEqual(front.durable_objects.bindings, [{ name: "SHARD_OBJECT", class_name: "ShardObject", script_name: `cobordism-lm-head-s${i}-objects` }]);
    assert.equal(front.migrations, undefined);
    assert.deepEqual(objects.durable_objects.bindings, [{ name: "SHARD_OBJECT", class_name: "ShardObject" }]);
    assert.deepEqual(objects.migrations, [{ tag: "v1", new_sqlite_classes: ["ShardObject"] }]);
    assert.equal(objects.workers_dev, false);
  }
  // The real wrangler reads both kinds (its own dry run bundles the built Worker).
  for (const name of ["cobordism-lm-head-s2", "cobordism-lm-head-s2-objects"]) {
    const real = spawnSync(join(root, "node_modules", ".bin", "wrangler"), ["deploy", "--dry-run", "-c", join(out, `${name}.toml`), "--outdir", join(p.dir, `bundle-${name}`)], {
      cwd: p.dir,
      encoding: "utf8",
      env: { ...process.env, CI: "1" },
    });
    assert.equal(real.status, 0, real.stdout + real.stderr);
    assert.match(real.stdout, /env\.SHARD_OBJECT \(ShardObject/);
  }
});

test("a deploy puts the token on each front with the deploy (never on a command line) and records it all", () => {
  const p = place();
  const r = deploy(p, ["--shards", "12", "--bucket", "my-bkt"], { env: { COBORDISM_TOKEN: "mine" } });
  ok(r);
  assert.match(r.err, /COBORDISM_TOKEN \(from your environment\)/);
  const a = account(p);
  assert.deepEqual(a.buckets, ["my-bkt"], "the missing bucket is created");
  const fronts = Object.keys(a.workers);
  assert.deepEqual(fronts.sort(), Array.from({ length: 12 }, (_, i) => `cobordism-lm-head-s${i}`).sort());
  for (let i = 0; i < 12; i++) {
    const w = a.workers[`cobordism-lm-head-s${i}`];
    assert.deepEqual(w.secrets, { AUTH_TOKEN: "mine" });
    assert.equal(w.versions, 1, "the secret comes with the deploy: one version");
    assert.equal(w.vars.SHARD_INDEX, `${i}`);
    assert.equal(w.bucket, "my-bkt");
    assert.deepEqual(w.objects, [], "isolate residency: no object binding");
  }
  assert.ok(a.calls.every((c) => !c.argv.includes("mine")), "the token never on a command line");
  assert.equal(token(p), "mine");
  assert.equal(statSync(join(p.state, "token")).mode & 0o777, 0o600);
  const endpoints = readFileSync(join(p.state, "endpoints"), "utf8").split("\n").filter((l) => l.startsWith("http"));
  assert.deepEqual(endpoints, Array.from({ length: 12 }, (_, i) => `https://cobordism-lm-head-s${i}.stand-in.workers.dev`));
  assert.equal(readFileSync(join(p.state, "shard-urls"), "utf8").trim(), endpoints.join(","));
  const record = readToml(readFileSync(join(p.state, "deployment.toml"), "utf8"));
  assert.equal(record.shards, 12);
  assert.match(record.build.module_sha256, /^[0-9a-f]{64}$/);
  // A stale COBORDISM_TOKEN later is warned about, never put on the shards.
  const again = deploy(p, ["--no-warm"], { env: { COBORDISM_TOKEN: "stale" } });
  ok(again);
  assert.match(again.err, /COBORDISM_TOKEN differs/);
  assert.equal(account(p).workers["cobordism-lm-head-s3"].secrets.AUTH_TOKEN, "mine");
});

test("a redeploy changes the one setting given and keeps the others", () => {
  const p = place();
  ok(deploy(p, ["--shards", "3", "--bucket", "head-v2", "--prefix", "p2", "--residency", "object", "--metrics", "lm_head"]));
  const r = deploy(p, ["--keep-warm-s", "300", "--no-warm"]);
  ok(r);
  assert.match(r.out, /keep-warm \(s\): 0 → 300/);
  assert.doesNotMatch(r.out, /bucket:|prefix:|residency:/);
  for (const [name, w] of Object.entries(account(p).workers)) {
    assert.equal(w.bucket, "head-v2", name);
    assert.equal(w.metrics, "lm_head", name);
    assert.deepEqual([w.vars.MODEL_PREFIX, w.vars.RESIDENCY, w.vars.KEEP_WARM_S, w.vars.SHARD_COUNT], ["p2", "object", "300", "3"], name);
  }
});

test("rotations: the second is refused until the first finishes, a cut one resumes, no object restarts", () => {
  const p = place();
  ok(deploy(p, ["--shards", "3", "--residency", "object"], { env: { COBORDISM_TOKEN: "t0" } }));
  const versions = (a) => Object.fromEntries(Object.entries(a.workers).map(([n, w]) => [n, w.versions]));
  const before = versions(account(p));
  const secrets = (i) => account(p).workers[`cobordism-lm-head-s${i}`].secrets;
  // Cut short at shard 1 (an expired login): shard 0 accepts both, shard 1 and 2 still the old.
  const cut = deploy(p, ["--rotate-token"], { env: { STAND_IN_FAIL: "secret:cobordism-lm-head-s1" } });
  assert.notEqual(cut.status, 0);
  const t1 = token(p, "token.next");
  assert.equal(token(p), "t0", "callers keep the current token until every front has the new one");
  assert.deepEqual(secrets(0), { AUTH_TOKEN: t1, AUTH_TOKEN_PREVIOUS: "t0" });
  assert.deepEqual(secrets(1), { AUTH_TOKEN: "t0" });
  const early = deploy(p, ["--finish-rotation"]);
  assert.notEqual(early.status, 0, "finishing before every front has the new token is refused");
  assert.match(early.err, /--rotate-token` resumes/);
  ok(deploy(p, ["--rotate-token"]));
  assert.equal(token(p), t1, "the resumed rotation keeps the token it started with");
  for (let i = 0; i < 3; i++) assert.deepEqual(secrets(i), { AUTH_TOKEN: t1, AUTH_TOKEN_PREVIOUS: "t0" });
  const calls = account(p).calls.length;
  const second = deploy(p, ["--rotate-token"]);
  assert.notEqual(second.status, 0, "a second rotation is refused");
  assert.match(second.err, /--finish-rotation/);
  assert.equal(account(p).calls.length, calls, "and calls nothing");
  assert.notEqual(deploy(p, ["--no-warm"]).status, 0, "no deploy during a rotation");
  ok(deploy(p, ["--finish-rotation"]));
  for (let i = 0; i < 3; i++) assert.deepEqual(secrets(i), { AUTH_TOKEN: t1 });
  assert.equal(existsSync(join(p.state, "token.previous")), false);
  ok(deploy(p, ["--rotate-token"]));
  const t2 = token(p);
  assert.notEqual(t2, t1);
  ok(deploy(p, ["--finish-rotation"]));
  const after = versions(account(p));
  for (let i = 0; i < 3; i++) {
    assert.equal(after[`cobordism-lm-head-s${i}-objects`], before[`cobordism-lm-head-s${i}-objects`], "no new version of an objects' Worker: no object restarts");
    assert.deepEqual(account(p).workers[`cobordism-lm-head-s${i}-objects`].secrets, {}, "objects hold no token");
  }
});

test("a teardown that fails keeps the record and exits non-zero; the next one finishes", () => {
  const p = place();
  ok(deploy(p, ["--shards", "2", "--residency", "object"]));
  const failed = deploy(p, ["--delete"], { env: { STAND_IN_FAIL: "delete:cobordism-lm-head-s1" } });
  assert.notEqual(failed.status, 0);
  assert.match(failed.err, /billing: cobordism-lm-head-s1 /);
  assert.deepEqual(Object.keys(account(p).workers), ["cobordism-lm-head-s1"]);
  assert.match(readFileSync(join(p.state, "deployment.toml"), "utf8"), /"cobordism-lm-head-s1"/);
  ok(deploy(p, ["--delete"]));
  assert.deepEqual(account(p).workers, {});
  assert.equal(existsSync(join(p.state, "deployment.toml")), false);
  assert.equal(existsSync(join(p.state, "endpoints")), false);
  assert.notEqual(deploy(p, ["--delete"]).status, 0, "nothing recorded: nothing to delete");
});

test("a smaller deployment and isolate residency delete what the shape no longer has", () => {
  const p = place();
  ok(deploy(p, ["--shards", "4", "--residency", "object"]));
  const r = deploy(p, ["--shards", "2", "--residency", "isolate", "--no-warm"]);
  ok(r);
  assert.deepEqual(Object.keys(account(p).workers).sort(), ["cobordism-lm-head-s0", "cobordism-lm-head-s1"]);
  assert.deepEqual(account(p).workers["cobordism-lm-head-s0"].objects, []);
});

test("settings the account or the shard would refuse are refused before any call", () => {
  const p = place();
  for (const [args, why] of [
    [["--shards", "501"], /1 to 500/],
    [["--shards", "251", "--residency", "object"], /1 to 250/],
    [["--replicas", "65"], /REPLICAS 65 is not in 1…64/],
    [["--var", "LOAD_STREAMS:9"], /LOAD_STREAMS 9/],
    [["--var", "SHARD_INDEX:1"], /its own flag/],
    [["--var", "AUTH_TOKEN:x"], /secret/],
    [["--bucket", "No_Such"], /R2 bucket name/],
    [["--name", "x".repeat(60)], /at most/],
    [["--metrics", "a-b"], /dataset name/],
  ]) {
    const r = deploy(p, args);
    assert.equal(r.status, 1, `${args.join(" ")}: ${r.err}`);
    assert.match(r.err, why);
  }
  assert.equal(deploy(p, ["--rotate-token", "--shards", "3"]).status, 2, "an action takes no setting");
  assert.equal(existsSync(p.account), false, "nothing called");
});

test("scripts/local-shards.mjs refuses what the shard would, by the shard's rule (cobordism settings)", () => {
  for (const [args, why] of [
    [["--replicas", "65"], /REPLICAS 65 is not in 1…64/],
    [["--var", "LOAD_STREAMS=0"], /LOAD_STREAMS 0 is not in 1…6/],
    [["--var", "MEMORY_BUDGET_MIB=lots"], /MEMORY_BUDGET_MIB/],
  ]) {
    const r = spawnSync("node", [join(root, "scripts", "local-shards.mjs"), "--token", "t", ...args], { encoding: "utf8", timeout: 60_000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, why);
  }
});

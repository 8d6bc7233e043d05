// `cobordism status` against local shards: eight healthy ones exit 0; each way a shard can be
// unhealthy — failed (no manifest under its prefix), serving another version, down, refusing
// the token — exits 5 naming that shard and why, in the table and in `--json`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { startShards } from "../../worker/local.mjs";
import { CLI, makeModel, seed, warm, TOKEN } from "./helpers.mjs";

/** `cobordism status` over `endpoints`: { code, stdout, stderr }. */
async function status(endpoints, ...extra) {
  const args = ["status", ...endpoints.flatMap((e) => ["--endpoint", e]), ...extra];
  try {
    const { stdout, stderr } = await promisify(execFile)(CLI, args, { env: { ...process.env, COBORDISM_TOKEN: TOKEN } });
    return { code: 0, stdout, stderr };
  } catch (e) {
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

test("cobordism status: eight healthy shards exit 0; a failed, another version's, a down and an unauthorized shard are named", async () => {
  const a = makeModel({ type: "q6_k", hidden: 256, vocab: 4096, shards: 8, seed: 71 });
  const b = makeModel({ type: "q6_k", hidden: 256, vocab: 4096, shards: 8, seed: 72 });
  const one = (i, o) => startShards({ shards: 1, authToken: TOKEN, vars: { SHARD_INDEX: `${i}`, SHARD_COUNT: "8" }, ...o });
  const fleet = await startShards({ shards: 8, authToken: TOKEN });
  const [missing, other, locked] = await Promise.all([one(3, { prefix: "nothing-here" }), one(5), one(2, { authToken: "another-token" })]);
  try {
    await seed(await fleet.bucket(), a);
    await seed(await other.bucket(), b);
    for (const e of [...fleet.endpoints, ...other.endpoints, ...missing.endpoints]) await warm(e);
    // Until every slice is in (the warm-ups load after their answers), shards may say loading.
    for (let i = 0; i < 100 && (await status(fleet.endpoints)).stdout.includes("loading"); i++) await new Promise((r) => setTimeout(r, 50));

    const healthy = await status(fleet.endpoints);
    assert.equal(healthy.code, 0, healthy.stderr);
    assert.match(healthy.stdout, new RegExp(`8 shards, 8 healthy, manifest version ${a.manifest.version}`));
    assert.equal(healthy.stdout.match(/ ready /g)?.length, 8, healthy.stdout);

    const swap = (i, e) => fleet.endpoints.map((x, j) => (j === i ? e : x));
    for (const [endpoints, shard, why] of [
      [swap(3, missing.endpoints[0]), 3, /shard 3: failed: .*manifest_missing/],
      [swap(5, other.endpoints[0]), 5, new RegExp(`shard 5: serves manifest version ${b.manifest.version}, the others ${a.manifest.version}`)],
      [swap(6, "http://127.0.0.1:9"), 6, /shard 6: unreachable/],
      [swap(2, locked.endpoints[0]), 2, /shard 2: the token is missing or wrong/],
    ]) {
      const r = await status(endpoints);
      assert.equal(r.code, 5, `shard ${shard}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, new RegExp(`shard ${shard} unhealthy`));
      assert.match(r.stderr, why);
      assert.match(r.stdout, /8 shards, 7 healthy/);
      const json = JSON.parse((await status(endpoints, "--json")).stdout);
      assert.equal(json.healthy, false);
      assert.deepEqual(json.rows.filter((row) => row.problem).map((row) => row.index), [shard]);
    }
    const seven = await status(fleet.endpoints.slice(0, 7));
    assert.equal(seven.code, 5);
    assert.match(seven.stderr, /configured for SHARD_COUNT 8, 7 endpoints given/);
  } finally {
    await Promise.all([fleet, missing, other, locked].map((s) => s.dispose()));
  }
});

test("cobordism status right after a deploy: an empty shard whose prefix holds no manifest is named before any request, in both residencies", async () => {
  const a = makeModel({ type: "q6_k", hidden: 256, vocab: 4096, shards: 8, seed: 73 });
  for (const residency of ["isolate", "object"]) {
    const fleet = await startShards({ shards: 8, authToken: TOKEN, residency });
    const misplaced = await startShards({ shards: 1, authToken: TOKEN, residency, prefix: "nothing-here", vars: { SHARD_INDEX: "3", SHARD_COUNT: "8" } });
    try {
      await seed(await fleet.bucket(), a);
      const healthy = await status(fleet.endpoints);
      assert.equal(healthy.code, 0, `${residency}: ${healthy.stdout}${healthy.stderr}`);
      assert.equal(healthy.stdout.match(/ empty /g)?.length, 8, healthy.stdout);
      const endpoints = fleet.endpoints.map((e, i) => (i === 3 ? misplaced.endpoints[0] : e));
      const r = await status(endpoints);
      assert.equal(r.code, 5, `${residency}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, /shard 3 unhealthy/);
      assert.match(r.stderr, /shard 3: nothing loaded, and its manifest cannot be: 503 manifest_missing/);
      const json = JSON.parse((await status(endpoints, "--json")).stdout);
      assert.equal(json.rows[3].health.state, "empty", "nothing was loaded");
      assert.equal(json.rows[0].health.manifest.version, a.manifest.version);
      assert.equal(json.rows[0].health.loads, 0);
    } finally {
      await Promise.all([fleet.dispose(), misplaced.dispose()]);
    }
  }
});

test("cobordism status asks every replica of an object-resident shard: a row each, /healthz?replica=R reaching replica R", async () => {
  const a = makeModel({ type: "q6_k", hidden: 256, vocab: 4096, shards: 2, seed: 74 });
  const fleet = await startShards({ shards: 2, authToken: TOKEN, residency: "object", replicas: 3 });
  try {
    await seed(await fleet.bucket(), a);
    const r = await status(fleet.endpoints, "--json");
    assert.equal(r.code, 0, `${r.stdout}${r.stderr}`);
    const rows = JSON.parse(r.stdout).rows;
    assert.deepEqual(rows.map((row) => [row.index, row.replica, row.health.object]), [0, 1].flatMap((i) => [0, 1, 2].map((k) => [i, k, `shard-${i}/${k}`])));
    assert.ok(rows.every((row) => row.health.replicas === 3 && row.problem === null));
    const table = await status(fleet.endpoints);
    assert.match(table.stdout, /^ +1\/2 +empty /m, table.stdout);
    assert.match(table.stdout, /2 shards, 2 healthy/);
    const beyond = await fetch(`${fleet.endpoints[0]}/healthz?replica=3`, { headers: { Authorization: `Bearer ${TOKEN}` } });
    assert.equal(beyond.status, 400);
    assert.match((await beyond.json()).detail, /from 0 to 2 \(REPLICAS is 3\)/);
  } finally {
    await fleet.dispose();
  }
});

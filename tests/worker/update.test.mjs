// A model update under traffic: `cobordism upload` of a new version (slices first, under
// content-addressed keys, then the manifest) into the local R2 state that eight running shards
// read, while every shard is queried without pause. No answer may be wrong (each is compared
// with kquant's bits for the version its X-Manifest-Version names), none may be
// `slice_corrupt`, and every shard must end on the new version. Then `upload --prune`: the old
// version's slices stay for the grace period and go after it, while the shards keep answering.
// Run with the slice in whichever isolate serves the shard and in the shard's Durable Object.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { startShards } from "../../worker/local.mjs";
import { CLI, cli, makeModel, hiddenBytes, localLogits, post, json, tempDir, TOKEN } from "./helpers.mjs";

function part(full, manifest, i) {
  const s = manifest.shards[i];
  return full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count));
}

/** Runs `cobordism upload` without blocking the event loop (Miniflare's proxy lives in it). */
function upload(model, state, ...extra) {
  const args = ["upload", "--dir", model.slices, "--bucket", "cobordism-lm-head", "--prefix", "model", "--local", "--persist-to", state, ...extra];
  return new Promise((resolve, reject) => {
    const child = spawn(CLI, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`upload failed (${code}): ${err}`))));
  });
}

for (const residency of ["isolate", "object"]) test(`cobordism upload of a new version under traffic to eight shards (${residency} residency): no wrong answer, every shard switches`, async (t) => {
  const a = makeModel({ type: "q6_k", hidden: 512, vocab: 8000, shards: 8, seed: 51 });
  const b = makeModel({ type: "q6_k", hidden: 512, vocab: 8000, shards: 8, seed: 52 });
  const state = tempDir("state");
  cli("upload", "--dir", a.slices, "--bucket", "cobordism-lm-head", "--prefix", "model", "--local", "--persist-to", state);
  const local = await startShards({ shards: 8, state, vars: { MANIFEST_TTL_MS: "200" }, authToken: TOKEN, residency });
  try {
    const h = hiddenBytes(512, 5);
    const full = { [a.manifest.version]: localLogits(a, h), [b.manifest.version]: localLogits(b, h) };
    const manifests = { [a.manifest.version]: a.manifest, [b.manifest.version]: b.manifest };
    const seen = local.endpoints.map(() => ({ 200: 0, 503: 0, versions: [] }));
    let stop = false;
    const traffic = local.endpoints.map(async (endpoint, i) => {
      while (!stop) {
        const r = await post(endpoint, h);
        if (r.status === 200) {
          const v = r.headers.get("x-manifest-version");
          assert.ok(manifests[v], `shard ${i}: unknown version ${v}`);
          assert.deepEqual(r.body, part(full[v], manifests[v], i), `shard ${i}: bits of version ${v}`);
          if (seen[i].versions.at(-1) !== v) seen[i].versions.push(v);
        } else {
          assert.deepEqual([r.status, json(r).error], [503, "slice_loading"], `shard ${i}`);
        }
        seen[i][r.status]++;
      }
    });
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    await upload(b, state);
    const uploadMs = Date.now() - started;
    // Every shard must reach B; none may go back to A.
    const deadline = Date.now() + 20_000;
    while (seen.some((s) => s.versions.at(-1) !== b.manifest.version) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    stop = true;
    await Promise.all(traffic);
    for (const [i, s] of seen.entries()) {
      assert.deepEqual(s.versions, [a.manifest.version, b.manifest.version], `shard ${i}`);
    }
    const counts = seen.map((s) => `${s[200]}/${s[503]}`);
    t.diagnostic(`figures: ${JSON.stringify({ upload_ms: uploadMs, per_shard_200_503: counts })}`);

    const kept = await upload(b, state, "--prune");
    assert.match(kept, /put 0 slices, 8 already there/);
    assert.match(kept, /pruned 0 objects/);
    assert.match(kept, /8 older objects wait for the grace period/);
    assert.match(await upload(b, state, "--prune", "--grace", "0s"), /pruned 8 objects/);
    // Read back through the shards' own runtime: a third process (wrangler) opening the state
    // while they hold it met SQLITE_BUSY once in CI.
    const bucket = await local.bucket();
    const get = async (key) => ((await bucket.head(`model/${key}`)) === null ? "gone" : "present");
    for (const s of a.manifest.shards) assert.equal(await get(s.key), "gone", `${s.key} of the old version`);
    assert.equal(await get(b.manifest.shards[0].key), "present", "the new version's slices stay");
    for (const [i, endpoint] of local.endpoints.entries()) {
      const r = await post(endpoint, h);
      assert.equal(r.status, 200, `shard ${i} after the prune`);
      assert.deepEqual(r.body, part(full[b.manifest.version], b.manifest, i), `shard ${i}`);
    }
  } finally {
    await local.dispose();
  }
});

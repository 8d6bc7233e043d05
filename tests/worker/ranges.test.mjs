// The slice loaded as concurrent ranged reads, in workerd against the local R2 bucket behind a
// binding that delays, fails, truncates or rewrites single reads on demand (worker/local.mjs):
// whatever happens, the shard keeps one version's every byte, checked, or nothing, and its
// answers equal kquant's natively. Also the warm-up route, and a load that goes on after its
// caller went away (ctx.waitUntil).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startShards } from "../../worker/local.mjs";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { CLI, makeModel, seed, hiddenBytes, localLogits, post, health, warm, TOKEN } from "./helpers.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One shard of 4096 rows × 420 bytes (1.72 MB): four ranges at the default LOAD_STREAMS.
const model = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 1, seed: 61 });
const slice = model.manifest.shards[0];
const sliceKey = `model/${slice.key}`;
const quarter = Math.floor(slice.bytes / 4);
const h = hiddenBytes(512, 5);
const want = localLogits(model, h);

/** Shards over the wrapped bucket; `onGet` decides each read of the slice (the manifest's pass). */
async function shards(onGet, { vars = {}, r2Shape } = {}) {
  const reads = [];
  const faults = {
    onGet: (d) => {
      if (d.key !== sliceKey) return {};
      reads.push(d);
      return onGet(d, reads.length - 1);
    },
  };
  const local = await startShards({ shards: 1, authToken: TOKEN, vars: { LOAD_RETRY_MS: "0", ...vars }, r2Faults: faults, r2Shape });
  const bucket = await local.bucket();
  await seed(bucket, model);
  return { local, bucket, reads, endpoint: local.endpoints[0] };
}

async function answersRight(endpoint, cache = "miss") {
  const r = await post(endpoint, h);
  assert.equal(r.status, 200, new TextDecoder().decode(r.body));
  assert.equal(r.headers.get("x-cache"), cache);
  assert.deepEqual(r.body, want, "the bits kquant computes natively");
}

test("ranges arriving out of order give kquant's bits", async () => {
  const { local, reads, endpoint } = await shards((d) => (d.offset === 0 ? { delayMs: 400 } : {}));
  try {
    await answersRight(endpoint);
    // The reads start concurrently: the bucket may see them in any order.
    const offsets = reads.map((d) => d.offset).sort((a, b) => a - b);
    assert.deepEqual(offsets, [0, quarter, 2 * quarter, 3 * quarter], "four ranges, each read once");
    assert.equal(reads.reduce((n, d) => n + d.length, 0), slice.bytes);
    await answersRight(endpoint, "hit");
  } finally {
    await local.dispose();
  }
});

test("a failed range is read again alone; a truncated one resumes at its first missing byte", async () => {
  let failed = false;
  const { local, reads, endpoint } = await shards((d) => {
    if (d.offset === quarter && !failed) return (failed = true), { fail: true };
    if (d.offset === 2 * quarter) return { truncateAfter: 100_000 };
    return {};
  });
  try {
    await answersRight(endpoint);
    const offsets = reads.map((d) => d.offset);
    assert.equal(offsets.filter((o) => o === quarter).length, 2, `${offsets}`);
    assert.ok(offsets.includes(2 * quarter + 100_000), `resumed after the cut: ${offsets}`);
    assert.equal(reads.length, 6);
  } finally {
    await local.dispose();
  }
});

test("a range that keeps failing fails the load (retryable) and keeps nothing", async () => {
  let broken = true;
  const { local, endpoint } = await shards((d) => (broken && d.offset === 3 * quarter ? { fail: true } : {}));
  try {
    const r = await post(endpoint, h);
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(new TextDecoder().decode(r.body)).error, "storage_unavailable");
    assert.ok(r.headers.has("retry-after"), "worth a retry");
    const s = await health(endpoint);
    assert.equal(s.resident, false, "nothing kept");
    assert.equal(s.state, "failed");
    broken = false;
    await answersRight(endpoint);
  } finally {
    await local.dispose();
  }
});

test("an object written between two of its reads is never kept", async () => {
  let rewrite = true;
  let bucketRef;
  const bytes = new Uint8Array(readFileSync(join(model.slices, slice.key)));
  const other = bytes.slice();
  other[10] ^= 1; // R2's etag is the content's MD5: the same bytes would keep it
  const { local, bucket, endpoint } = await shards(async (d) => {
    if (rewrite && d.offset === 2 * quarter) {
      rewrite = false;
      await bucketRef.put(sliceKey, other);
    }
    return {};
  });
  bucketRef = bucket;
  try {
    const r = await post(endpoint, h);
    assert.equal(r.status, 503);
    const e = JSON.parse(new TextDecoder().decode(r.body));
    assert.equal(e.error, "storage_unavailable", "a mix of two versions is a retry, not a corrupt slice");
    assert.equal((await health(endpoint)).resident, false, "nothing kept");
    await bucket.put(sliceKey, bytes);
    await answersRight(endpoint);
  } finally {
    await local.dispose();
  }
});

test("warm-up: 202 at once, the load goes on after the answer, then hits", async () => {
  // 1.72 MB at 600 KB/s per stream, four streams: ~0.7 s of loading.
  const { local, endpoint } = await shards(() => ({}), { r2Shape: { firstByteMs: 50, bytesPerSec: 600_000 } });
  try {
    assert.equal((await warm(endpoint, { token: null })).status, 401, "closed like every route");
    const wrongMethod = await fetch(`${endpoint}/cobordism-lm-head/warm`, { headers: { Authorization: `Bearer ${TOKEN}` } });
    assert.equal(wrongMethod.status, 405);
    const started = Date.now();
    const first = await warm(endpoint);
    assert.equal(first.status, 202, JSON.stringify(first.body));
    assert.equal(first.body.state, "loading");
    assert.ok(Date.now() - started < 300, "answered before the load ends");
    const again = await warm(endpoint);
    assert.equal(again.status, 202, "a second warm-up joins the load");
    let state;
    while ((state = (await health(endpoint)).state) === "loading" && Date.now() - started < 10_000) await sleep(50);
    assert.equal(state, "ready");
    assert.deepEqual((await warm(endpoint)).body.state, "ready");
    assert.equal((await warm(endpoint)).status, 200);
    await answersRight(endpoint, "hit");
  } finally {
    await local.dispose();
  }
});

// Local workerd does not cancel a request whose client went away (checked: this test passes
// with the load spawned outside ctx.waitUntil too), so here it cannot fail for want of
// waitUntil; it pins that an abandoned load ends resident and right. The warm-up test above is
// the one that fails without waitUntil (workerd drops work left after an answer).
test("a caller gone mid-load does not stop the load", async () => {
  const { local, endpoint } = await shards(() => ({}), { r2Shape: { firstByteMs: 50, bytesPerSec: 600_000 } });
  try {
    const gone = new AbortController();
    const request = fetch(`${endpoint}/cobordism-lm-head`, { method: "POST", body: h, headers: { Authorization: `Bearer ${TOKEN}` }, signal: gone.signal });
    await sleep(250);
    gone.abort();
    await assert.rejects(request);
    const started = Date.now();
    let s;
    while ((s = await health(endpoint)).state === "loading" && Date.now() - started < 10_000) await sleep(50);
    assert.equal(s.state, "ready", "the load finished without its caller");
    await answersRight(endpoint, "hit");
  } finally {
    await local.dispose();
  }
});

test("warm-up reports what stops a load; LOAD_STREAMS is checked", async () => {
  const local = await startShards({ shards: 1, authToken: TOKEN, prefix: "nothing-here" });
  const bad = await startShards({ shards: 1, authToken: TOKEN, vars: { LOAD_STREAMS: "7" } });
  try {
    // The first warm-up answers at once; the failure is known once storage answered.
    let r = await warm(local.endpoints[0]);
    assert.equal(r.status, 202);
    for (let i = 0; r.status === 202 && i < 100; i++) (await sleep(20), (r = await warm(local.endpoints[0])));
    assert.equal(r.status, 503);
    assert.equal(r.body.error, "manifest_missing");
    assert.equal(r.headers.has("retry-after"), false);
    const b = await warm(bad.endpoints[0]);
    assert.equal(b.status, 503);
    assert.equal(b.body.error, "misconfigured"); // why goes to the Worker's log
  } finally {
    await local.dispose();
    await bad.dispose();
  }
});

test("cobordism warm: states at once, --wait until ready; a shard that cannot load or sits at the wrong position fails it", async () => {
  const two = makeModel({ type: "q4_k", hidden: 512, vocab: 4096, shards: 2, seed: 62 });
  const local = await startShards({ shards: 2, authToken: TOKEN, r2Shape: { firstByteMs: 50, bytesPerSec: 600_000 } });
  const empty = await startShards({ shards: 2, authToken: TOKEN, prefix: "nothing-here" });
  const run = (endpoints, ...extra) =>
    promisify(execFile)(CLI, ["warm", "--manifest", join(two.slices, "manifest.json"), ...endpoints.flatMap((e) => ["--endpoint", e]), ...extra], {
      env: { ...process.env, COBORDISM_TOKEN: TOKEN },
    });
  try {
    await seed(await local.bucket(), two);
    const first = await run(local.endpoints);
    assert.match(first.stdout, /shard 0: loading\nshard 1: loading\n2 shards: 0 ready, 2 loading/);
    const waited = await run(local.endpoints, "--wait", "30");
    assert.match(waited.stdout, /all 2 shards ready after/);
    for (const e of local.endpoints) assert.equal((await post(e, hiddenBytes(512, 1))).headers.get("x-cache"), "hit");
    await assert.rejects(run([...local.endpoints].reverse()), (e) => /shard 0 .* is shard 1; the endpoints must be in shard order/.test(e.stderr));
    await assert.rejects(run(empty.endpoints, "--wait", "30"), (e) => /manifest_missing/.test(e.stderr) && /nothing-here/.test(e.stderr));
    await assert.rejects(run(local.endpoints.slice(0, 1)), (e) => e.code === 1 && /shard 1 would have no endpoint/.test(e.stderr));
  } finally {
    await local.dispose();
    await empty.dispose();
  }
});

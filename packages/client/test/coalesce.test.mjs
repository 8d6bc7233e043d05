// Coalescing always settles: when a request that merged several calls fails after it was
// taken — a shard answers a truncated body, or sending throws — every call of the batch
// rejects, none waits forever. One stub shard (a fetcher), no workerd.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LmHeadClient, ShardError } from "../src/node.mjs";
import { Batcher } from "../src/batcher.mjs";

const HIDDEN = 4;
const ROWS = 10;

/** One top-2 section `u32 k | f32 max | f32 lse | k × (u32 id, f32 z)` (tokens 3 and 7). */
function section() {
  const view = new DataView(new ArrayBuffer(12 + 2 * 8));
  view.setUint32(0, 2, true);
  view.setFloat32(4, 1, true);
  view.setFloat32(8, 3, true);
  [[3, 1], [7, 0.5]].forEach(([id, z], e) => {
    view.setUint32(12 + 8 * e, id, true);
    view.setFloat32(16 + 8 * e, z, true);
  });
  return new Uint8Array(view.buffer);
}

/** A stub of shard 0 of 1 whose bodies, for `n` vectors, are `bodyOf(n, url)`; it counts requests. */
function stubShard(bodyOf) {
  const stub = {
    requests: [],
    async fetch(url, init) {
      const n = init.body.byteLength / (4 * HIDDEN);
      stub.requests.push({ url, n });
      const headers = { "X-Shard-Index": "0", "X-Shard-Count": "1", "X-Vocab": `${ROWS}`, "X-Row-Start": "0", "X-Row-Count": `${ROWS}`, "X-Batch": `${n}`, "X-Manifest-Version": "v1" };
      return new Response(bodyOf(n, url), { headers });
    },
  };
  return stub;
}

/** `n` sections with the last 4 bytes cut off. */
const truncatedSections = (n) => {
  const all = new Uint8Array(n * section().length);
  for (let v = 0; v < n; v++) all.set(section(), v * section().length);
  return all.subarray(0, all.length - 4);
};

const vector = (x) => new Float32Array(HIDDEN).fill(x);

/** Every outcome rejected with a ShardError naming shard 0 and what was wrong. */
function allRejectedByShard0(outcomes, why) {
  for (const [i, o] of outcomes.entries()) {
    assert.equal(o.status, "rejected", `call ${i} resolved: ${JSON.stringify(o.value)}`);
    assert.ok(o.reason instanceof ShardError, `call ${i}: ${o.reason}`);
    assert.equal(o.reason.shard, 0, `call ${i}`);
    assert.match(o.reason.message, why, `call ${i}`);
  }
}

test("a truncated answer to a merged request rejects every coalesced call with a ShardError", { timeout: 5000 }, async () => {
  const stub = stubShard((n, url) => (url.includes("top_k") ? truncatedSections(n) : new Uint8Array(4 * ROWS * n - 4)));
  const c = new LmHeadClient({ fetchers: [stub], coalesce: true, retries: 0 });
  const tops = await Promise.allSettled([c.topK(vector(1), 2), c.topK(vector(2), 2), c.topK([vector(3), vector(4)], 2)]);
  allRejectedByShard0(tops, /shard 0 \(https:\/\/shard-0\/cobordism-lm-head\?top_k=2&temperature=1\): malformed top-k answer/);
  const logits = await Promise.allSettled([c.logits(vector(1)), c.logits(vector(2)), c.logits(vector(3))]);
  allRejectedByShard0(logits, /shard 0 .*: 116 bytes for 3 × 10 logits/);
  assert.deepEqual(stub.requests.map((r) => r.n), [4, 3], "one merged request per kind");
});

test("a sound answer to a merged request gives each call its part", { timeout: 5000 }, async () => {
  const stub = stubShard((n) => {
    const all = new Uint8Array(n * section().length);
    for (let v = 0; v < n; v++) all.set(section(), v * section().length);
    return all;
  });
  const c = new LmHeadClient({ fetchers: [stub], coalesce: true, retries: 0 });
  const [one, [two, three]] = await Promise.all([c.topK(vector(1), 2), c.topK([vector(2), vector(3)], 2)]);
  assert.deepEqual(stub.requests.map((r) => r.n), [3]);
  for (const t of [one, two, three]) assert.deepEqual(t.entries.map((e) => [e.token, e.logit, e.logprob]), [[3, 1, 1 - 3], [7, 0.5, 0.5 - 3]]);
});

test("a throw while sending a coalesced batch rejects every call of it", { timeout: 5000 }, async () => {
  const boom = new Error("the form cannot be written");
  const batcher = new Batcher(() => {
    throw boom;
  }, true);
  const b = (n) => ({ bytes: new Uint8Array(4 * HIDDEN * n), n });
  // Three calls merged (5 + 2 vectors, then 3 more: two batches) and one alone of another kind.
  const outcomes = await Promise.allSettled([batcher.ask({}, b(5)), batcher.ask({}, b(2)), batcher.ask({}, b(3)), batcher.ask({ topK: 2 }, b(1))]);
  for (const [i, o] of outcomes.entries()) {
    assert.equal(o.status, "rejected", `call ${i}`);
    assert.equal(o.reason, boom, `call ${i}`);
  }
});

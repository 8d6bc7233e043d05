// Faults in the real runtime: instance resets (panic, out of memory), a slowly streamed body, a
// new manifest version uploaded mid-traffic. Each ends in a documented status and a clean
// recovery, never in wrong logits. These run the test shard (`scripts/build-worker.sh --test`):
// fault routes, and wasm memory capped as production caps it.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, localLogits, post, health, TOKEN } from "./helpers.mjs";

const VARS = { MANIFEST_TTL_MS: "0", LOAD_RETRY_MS: "0" };
const start = (shards) => startShards({ shards, vars: VARS, authToken: TOKEN, testBuild: true });
let model;
before(() => {
  model = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 21 });
});

function part(full, manifest, i) {
  const s = manifest.shards[i];
  return full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count));
}

for (const fault of ["panic", "oom"]) {
  test(`after a ${fault} resets the wasm instance the next request reloads cleanly`, async () => {
    const local = await start(2);
    try {
      await seed(await local.bucket(), model);
      const h = hiddenBytes(512, 3);
      const expected = part(localLogits(model, h), model.manifest, 0);
      assert.equal((await post(local.endpoints[0], h)).headers.get("x-cache"), "miss");
      const r = await fetch(`${local.endpoints[0]}/__fault/${fault}`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
      assert.equal(r.status, 500);
      await r.arrayBuffer();
      assert.equal((await health(local.endpoints[0])).resident, false);
      const after = await post(local.endpoints[0], h);
      assert.equal(after.status, 200);
      assert.equal(after.headers.get("x-cache"), "miss");
      assert.deepEqual(after.body, expected);
    } finally {
      await local.dispose();
    }
  });
}

test("a slowly streamed body is answered correctly", async () => {
  const local = await start(2);
  try {
    await seed(await local.bucket(), model);
    const h = hiddenBytes(512, 4);
    let i = 0;
    const body = new ReadableStream({
      async pull(controller) {
        if (i >= h.length) return controller.close();
        await new Promise((r) => setTimeout(r, 20));
        controller.enqueue(h.slice(i, i + 256));
        i += 256;
      },
    });
    const r = await fetch(`${local.endpoints[1]}/cobordism-lm-head`, { method: "POST", body, duplex: "half", headers: { Authorization: `Bearer ${TOKEN}` } });
    assert.equal(r.status, 200);
    assert.deepEqual(new Uint8Array(await r.arrayBuffer()), part(localLogits(model, h), model.manifest, 1));
  } finally {
    await local.dispose();
  }
});

test("a new manifest version uploaded mid-traffic never yields wrong logits", async () => {
  const next = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 22 });
  const local = await start(2);
  try {
    const bucket = await local.bucket();
    await seed(bucket, model);
    const h = hiddenBytes(512, 5);
    const expected = {
      [model.manifest.version]: part(localLogits(model, h), model.manifest, 0),
      [next.manifest.version]: part(localLogits(next, h), next.manifest, 0),
    };
    let stop = false;
    const seen = { 200: 0, 503: 0 };
    const versions = new Set();
    const traffic = (async () => {
      while (!stop) {
        const r = await post(local.endpoints[0], h);
        seen[r.status] = (seen[r.status] ?? 0) + 1;
        if (r.status === 200) {
          const v = r.headers.get("x-manifest-version");
          versions.add(v);
          assert.deepEqual(r.body, expected[v], `logits for version ${v}`);
        } else {
          assert.equal(r.status, 503);
        }
      }
    })();
    await new Promise((r) => setTimeout(r, 200));
    await seed(bucket, next);
    await new Promise((r) => setTimeout(r, 300));
    stop = true;
    await traffic;
    assert.ok(versions.has(next.manifest.version), JSON.stringify(seen));
    assert.deepEqual(Object.keys(seen).filter((s) => s !== "200" && s !== "503"), []);
  } finally {
    await local.dispose();
  }
});

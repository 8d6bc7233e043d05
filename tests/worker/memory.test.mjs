// Memory no caller can exhaust, in the test shard whose wasm memory is capped as production caps
// it (112 MiB: `scripts/build-worker.sh --test`). Local workerd enforces no isolate limit, so
// without the cap an out-of-memory reset could not happen here at all.
//
// A resident 94.5 MiB slice, then at once: 32 slowly trickled uploads of the largest size a
// request may have (half of them exactly 8 vectors, half streamed on past the cap as 2 MiB, the
// largest body any manifest allows) and 32 anonymous requests. Every request must end in 200,
// 401, 413 or 503 busy; the slice must stay resident (no reset, so no second cold load) and
// answer the same bits afterwards. `node --test tests/worker/memory.test.mjs` prints the figures
// that docs/RELIABILITY.md quotes.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { request } from "node:http";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, localLogits, post, health, json, bearer, TOKEN } from "./helpers.mjs";

const HIDDEN = 5376;
const VOCAB = 32768;
let model;
let batch;
let expected;

before(() => {
  model = makeModel({ type: "q4_k", hidden: HIDDEN, vocab: VOCAB, shards: 1, seed: 31 });
  const h = hiddenBytes(HIDDEN, 7);
  batch = new Uint8Array(8 * h.length);
  for (let i = 0; i < 8; i++) batch.set(h, i * h.length);
  const one = localLogits(model, h);
  expected = new Uint8Array(8 * one.length);
  for (let i = 0; i < 8; i++) expected.set(one, i * one.length);
});

/**
 * POSTs `total` bytes (repeating `body`) in `chunk`-byte pieces every `everyMs`, chunked. With
 * `headersFirstMs`, the headers go alone and the first body byte only after that many ms, so an
 * answer given on the headers alone arrives before any body byte is sent.
 */
function trickle(endpoint, body, { total = body.length, chunk = 16384, everyMs = 40, token = TOKEN, headersFirstMs = 0 } = {}) {
  return new Promise((resolve) => {
    const url = new URL(`${endpoint}/cobordism-lm-head`);
    const req = request(url, { method: "POST", headers: { ...bearer(token), "Content-Type": "application/octet-stream" } });
    let answered = false;
    let sent = 0;
    let timer;
    req.on("response", (res) => {
      answered = true;
      clearTimeout(timer);
      const parts = [];
      res.on("data", (d) => parts.push(d));
      res.on("end", () => {
        const bytes = new Uint8Array(Buffer.concat(parts));
        resolve({ status: res.statusCode, headers: res.headers, body: bytes, sent });
        req.destroy();
      });
    });
    // The server may answer and close before the upload ends: that is the point.
    req.on("error", (e) => answered || resolve({ status: 0, error: String(e), sent }));
    const next = () => {
      if (answered) return;
      if (sent >= total) return req.end();
      const n = Math.min(chunk, total - sent);
      const piece = new Uint8Array(n);
      for (let i = 0; i < n; i++) piece[i] = body[(sent + i) % body.length];
      req.write(piece);
      sent += n;
      timer = setTimeout(next, everyMs);
    };
    if (headersFirstMs > 0) {
      req.flushHeaders();
      timer = setTimeout(next, headersFirstMs);
    } else {
      next();
    }
  });
}

test("32 trickled maximum-size uploads and 32 anonymous requests next to a 94.5 MiB slice: no reset", async (t) => {
  const local = await startShards({ shards: 1, vars: { MANIFEST_TTL_MS: "60000" }, authToken: TOKEN, testBuild: true });
  try {
    await seed(await local.bucket(), model);
    const endpoint = local.endpoints[0];
    const cold = await post(endpoint, batch);
    assert.equal(cold.status, 200, new TextDecoder().decode(cold.body));
    assert.equal(cold.headers.get("x-cache"), "miss");
    assert.deepEqual(cold.body, expected);
    const before = await health(endpoint);
    const started = performance.now();
    const uploads = Array.from({ length: 32 }, (_, i) =>
      trickle(endpoint, batch, { total: i % 2 ? 2 << 20 : batch.length }),
    );
    // Half send their headers alone and their body only if no answer came within 5 s; half
    // stream their body at once.
    const anonymous = Array.from({ length: 32 }, (_, i) =>
      trickle(endpoint, batch, { token: null, everyMs: 5, headersFirstMs: i % 2 ? 0 : 5000 }),
    );
    // Midway, the shard holds as many bodies as its budget allows, and no more.
    await new Promise((r) => setTimeout(r, 150));
    const midway = await health(endpoint);
    const answers = await Promise.all(uploads);
    const refused = await Promise.all(anonymous);
    const ms = performance.now() - started;

    const count = (list) => list.reduce((c, a) => ({ ...c, [a.status]: (c[a.status] ?? 0) + 1 }), {});
    for (const [i, a] of answers.entries()) {
      if (a.status === 200) {
        assert.equal(i % 2, 0, "an oversized body was accepted");
        assert.deepEqual(a.body, expected, `upload ${i}`);
      } else if (a.status === 413) {
        assert.equal(i % 2, 1, "a body of the right size was refused as too large");
        assert.ok(a.sent < 2 << 20, "the shard read the whole oversized body");
      } else {
        assert.equal(a.status, 503, `upload ${i}: ${a.status} ${a.error ?? ""}`);
        assert.equal(json(a).error, "busy");
        assert.ok(Number(a.headers["retry-after"]) >= 1);
      }
    }
    // Refused before a byte of the body is read: the headers-first requests get their 401 with no
    // body byte sent; the streaming ones get 401 or — when the shard's answer and close overtake
    // the client still writing its body — a reset connection (never a 200 or a 503).
    for (const [i, r] of refused.entries()) {
      if (i % 2 === 0) {
        assert.equal(r.status, 401, `headers-first request ${i}: ${r.status} ${r.error ?? ""}`);
        assert.equal(r.sent, 0, `request ${i}: the shard waited for the body before refusing it`);
      } else {
        assert.ok(r.status === 401 || (r.status === 0 && /ECONNRESET|EPIPE/.test(r.error)), `${r.status} ${r.error ?? ""}`);
      }
    }
    const statuses = count(answers);
    assert.ok(statuses[200] > 0 && statuses[413] > 0 && statuses[503] > 0, JSON.stringify(statuses));
    assert.ok(midway.bodies_in_flight <= midway.slice.bodies_in_flight_max, JSON.stringify(midway));

    const after = await post(endpoint, batch);
    assert.equal(after.status, 200);
    assert.equal(after.headers.get("x-cache"), "hit", "the instance was reset: the slice was loaded again");
    assert.deepEqual(after.body, expected);
    const end = await health(endpoint);
    assert.equal(end.slice.load_ms, before.slice.load_ms, "one load only");
    t.diagnostic(
      `figures: ${JSON.stringify({
        ms: Math.round(ms),
        uploads: statuses,
        anonymous: count(refused),
        bodies_in_flight_max: before.slice.bodies_in_flight_max,
        bodies_in_flight_midway: midway.bodies_in_flight,
        wasm_memory_mib: [before, midway, end].map((h) => +(h.wasm_memory_bytes / 1048576).toFixed(1)),
        budget_need_mib: +(before.slice.budget_need_bytes / 1048576).toFixed(1),
      })}`,
    );
  } finally {
    await local.dispose();
  }
});

test("a failed allocation and a manifest with absurd sizes leave the shard answering correctly", async (t) => {
  // B's slice (189 MiB) passes a generous budget but cannot be reserved under the 112 MiB cap.
  const small = makeModel({ type: "q4_k", hidden: 512, vocab: 4096, shards: 1, seed: 32 });
  const huge = makeModel({ type: "q4_k", hidden: HIDDEN, vocab: 2 * VOCAB, shards: 1, seed: 33, budgetMib: 4000 });
  const local = await startShards({
    shards: 1,
    vars: { MANIFEST_TTL_MS: "0", LOAD_RETRY_MS: "0", MEMORY_BUDGET_MIB: "4000" },
    authToken: TOKEN,
    testBuild: true,
  });
  try {
    const bucket = await local.bucket();
    const endpoint = local.endpoints[0];
    const h = hiddenBytes(512, 9);
    const want = localLogits(small, h);
    // Cold: the reservation fails, the shard says so and lives on.
    await seed(bucket, huge);
    const cold = await post(endpoint, hiddenBytes(HIDDEN, 9));
    assert.deepEqual([cold.status, json(cold).error], [503, "out_of_memory"]);
    await seed(bucket, small);
    const first = await post(endpoint, h);
    assert.equal(first.status, 200, new TextDecoder().decode(first.body));
    assert.deepEqual(first.body, want);
    // Warm: a new version that cannot be reserved, then a manifest whose sizes would overflow
    // 32-bit arithmetic. The resident slice answers throughout.
    await seed(bucket, huge);
    const absurd = structuredClone(small.manifest);
    Object.assign(absurd, { vocab: 2 ** 31 - 1, version: "absurd" }); // a usize on wasm32
    Object.assign(absurd.shards[0], { row_count: 2 ** 31 - 1, bytes: (2 ** 31 - 1) * 288 });
    const errors = [];
    for (const next of [null, absurd]) {
      if (next) await bucket.put("model/manifest.json", JSON.stringify(next));
      const r = await post(endpoint, h);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("x-cache"), "hit");
      assert.deepEqual(r.body, want);
      errors.push((await health(endpoint)).last_check_error);
      await new Promise((r) => setTimeout(r, 1100)); // past the first backoff
    }
    assert.match(errors[0], /could not reserve/);
    assert.match(errors[1], /vocab/);
    const hz = await health(endpoint);
    t.diagnostic(`figures: ${JSON.stringify({ cold: json(cold).error, warm_check_errors: errors, wasm_memory_mib: +(hz.wasm_memory_bytes / 1048576).toFixed(1) })}`);
  } finally {
    await local.dispose();
  }
});

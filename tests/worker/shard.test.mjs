// The shard Worker in its real runtime (workerd through Miniflare) against a local R2 bucket.
// Needs `scripts/build-worker.sh` and `cargo build --release -p cobordism` (scripts/test.sh
// does both).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startShards, SCRIPT } from "../../worker/local.mjs";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { makeModel, seed, hiddenBytes, localLogits, post, health, json, cli, CLI, TOKEN } from "./helpers.mjs";
import { dirname, join } from "node:path";
import { spawnSync } from "node:child_process";

const FAST = { MANIFEST_TTL_MS: "0", LOAD_RETRY_MS: "0" };
let q6, q4;

before(() => {
  q6 = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 1 });
  q4 = makeModel({ type: "q4_k", hidden: 768, vocab: 3000, shards: 2, seed: 2, softcap: 30 });
});

async function withShards(opts, fn) {
  const local = await startShards({ shards: 2, vars: FAST, authToken: TOKEN, ...opts });
  try {
    return await fn(local);
  } finally {
    await local.dispose();
  }
}

function shardPart(full, manifest, i) {
  const s = manifest.shards[i];
  return full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count));
}

for (const [name, model] of [["q6_k", () => q6], ["q4_k with softcap", () => q4]]) {
  test(`${name}: logits are bit-identical to native kquant, cold then warm`, async () => {
    const m = model();
    await withShards({}, async (local) => {
      await seed(await local.bucket(), m);
      const h = hiddenBytes(m.manifest.hidden, 5);
      const expected = localLogits(m, h);
      for (const [i, endpoint] of local.endpoints.entries()) {
        const cold = await post(endpoint, h);
        assert.equal(cold.status, 200, new TextDecoder().decode(cold.body));
        assert.equal(cold.headers.get("x-cache"), "miss");
        assert.equal(cold.headers.get("x-shard-index"), `${i}`);
        assert.equal(cold.headers.get("x-row-start"), `${m.manifest.shards[i].row_start}`);
        assert.equal(cold.headers.get("x-row-count"), `${m.manifest.shards[i].row_count}`);
        assert.equal(cold.headers.get("x-shard-count"), `${m.manifest.shard_count}`);
        assert.equal(cold.headers.get("x-vocab"), `${m.manifest.vocab}`);
        assert.match(cold.headers.get("server-timing"), /^load;dur=\d+(, compute;dur=\d+)?$/);
        assert.deepEqual(cold.body, shardPart(expected, m.manifest, i));
        const warm = await post(endpoint, h);
        assert.equal(warm.headers.get("x-cache"), "hit");
        assert.deepEqual(warm.body, cold.body);
      }
    });
  });
}

test("?precision=int8: the fast mode gives the bits of kquant's native fast mode", async () => {
  await withShards({}, async (local) => {
    await seed(await local.bucket(), q4);
    const h = hiddenBytes(q4.manifest.hidden, 12);
    const expected = localLogits(q4, h, { int8: true });
    for (const [i, endpoint] of local.endpoints.entries()) {
      const r = await post(endpoint, h, { query: "?precision=int8" });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("x-precision"), "int8");
      assert.deepEqual(r.body, shardPart(expected, q4.manifest, i));
    }
    const exact = await post(local.endpoints[0], h);
    assert.equal(exact.headers.get("x-precision"), "exact");
    assert.notDeepEqual(exact.body, shardPart(expected, q4.manifest, 0));
    const bad = await post(local.endpoints[0], h, { query: "?precision=fp16" });
    assert.deepEqual([bad.status, json(bad).error], [400, "bad_precision"]);
  });
});

test("packed6 slices: both modes give the bits of the ggml slices' native logits", async () => {
  const packed = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 1, layout: "packed6" });
  assert.equal(packed.manifest.layout, "packed6");
  await withShards({}, async (local) => {
    await seed(await local.bucket(), packed);
    const h = hiddenBytes(512, 21);
    for (const int8 of [false, true]) {
      const expected = localLogits(q6, h, { int8 }); // the same tensor, in ggml's layout
      for (const [i, endpoint] of local.endpoints.entries()) {
        const r = await post(endpoint, h, { query: int8 ? "?precision=int8" : "" });
        assert.equal(r.status, 200, new TextDecoder().decode(r.body));
        assert.deepEqual(r.body, shardPart(expected, packed.manifest, i), `int8: ${int8}`);
      }
    }
  });
});

test("a batch of hidden vectors equals single calls", async () => {
  await withShards({}, async (local) => {
    await seed(await local.bucket(), q6);
    const hidden = q6.manifest.hidden;
    const batch = hiddenBytes(hidden, 9, 3);
    const res = await post(local.endpoints[1], batch);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-batch"), "3");
    const rows = q6.manifest.shards[1].row_count;
    for (let b = 0; b < 3; b++) {
      const one = await post(local.endpoints[1], batch.slice(4 * hidden * b, 4 * hidden * (b + 1)));
      assert.deepEqual(res.body.subarray(4 * rows * b, 4 * rows * (b + 1)), one.body);
    }
  });
});

test("top_k agrees with the full logits", async () => {
  await withShards({}, async (local) => {
    await seed(await local.bucket(), q6);
    const h = hiddenBytes(q6.manifest.hidden, 11);
    const full = await post(local.endpoints[1], h);
    const logits = new Float32Array(full.body.slice().buffer);
    const top = await post(local.endpoints[1], h, { query: "?top_k=5" });
    assert.equal(top.status, 200);
    const v = new DataView(top.body.buffer, top.body.byteOffset);
    assert.equal(v.getUint32(0, true), 5);
    const max = v.getFloat32(4, true);
    assert.equal(max, Math.max(...logits));
    const lse = v.getFloat32(8, true);
    const ref = max + Math.log(logits.reduce((a, z) => a + Math.exp(z - max), 0));
    assert.ok(Math.abs(lse - ref) < 1e-4, `${lse} vs ${ref}`);
    const rowStart = q6.manifest.shards[1].row_start;
    const sorted = [...logits.keys()].sort((a, b) => logits[b] - logits[a] || a - b);
    for (let e = 0; e < 5; e++) {
      assert.equal(v.getUint32(12 + 8 * e, true), rowStart + sorted[e]);
      assert.equal(v.getFloat32(16 + 8 * e, true), logits[sorted[e]]);
    }
    for (const bad of ["?top_k=0", "?top_k=1025", "?top_k=x"]) {
      const r = await post(local.endpoints[1], h, { query: bad });
      assert.equal(r.status, 400);
      assert.equal(json(r).error, "bad_top_k");
    }
  });
});

test("every error has its status and a JSON body", async () => {
  await withShards({ vars: { ...FAST, MEMORY_BUDGET_MIB: "100" } }, async (local) => {
    const e = local.endpoints[0];
    // Not loaded yet: the manifest is missing.
    let r = await post(e, hiddenBytes(512, 1));
    assert.equal(r.status, 503);
    assert.equal(r.headers.get("retry-after"), null, "only its operator can fix it: no retry");
    assert.equal(json(r).error, "manifest_missing");
    assert.match(json(r).detail, /"model\/manifest\.json"/, "names the key it looked for");
    const failed = await health(e);
    assert.equal(failed.state, "failed");
    assert.match(failed.last_check_error, /manifest_missing.*model\/manifest\.json/);
    await seed(await local.bucket(), q6);
    r = await post(e, hiddenBytes(512, 1).subarray(0, 100));
    assert.deepEqual([r.status, json(r).error], [400, "bad_length"]);
    const nan = new Float32Array(512);
    nan[3] = NaN;
    r = await post(e, new Uint8Array(nan.buffer));
    assert.deepEqual([r.status, json(r).error], [400, "non_finite"]);
    assert.match(json(r).detail, /value 3/);
    r = await post(e, undefined);
    assert.deepEqual([r.status, json(r).error], [411, "length_required"]);
    r = await post(e, new Uint8Array(4 * 512 * 9));
    assert.deepEqual([r.status, json(r).error], [413, "payload_too_large"]);
    r = await post(e, new Uint8Array(3 << 20));
    assert.equal(r.status, 413);
    // Details are for the caller: the key to fix, no parser positions. (Shard 1 has loaded
    // nothing: a resident shard would keep serving its slice through a broken manifest.)
    await (await local.bucket()).put("model/manifest.json", "{\"format\": 1,");
    r = await post(local.endpoints[1], hiddenBytes(512, 1));
    assert.deepEqual([r.status, json(r).error, r.headers.get("retry-after")], [503, "manifest_invalid", null]);
    assert.doesNotMatch(json(r).detail, /line|column/);
    const get = await fetch(`${e}/cobordism-lm-head`);
    assert.equal(get.status, 405);
    assert.equal(get.headers.get("allow"), "POST");
    assert.equal((await get.json()).error, "method_not_allowed");
    assert.equal((await fetch(`${e}/other`)).status, 404);
  });
});

test("with AUTH_TOKEN set, a Bearer token is required; /healthz says only the state without it", async () => {
  await withShards({ authToken: "s3cret-token" }, async (local) => {
    await seed(await local.bucket(), q6);
    const h = hiddenBytes(512, 2);
    for (const headers of [{}, { Authorization: "Bearer wrong" }, { Authorization: "s3cret-token" }]) {
      const r = await post(local.endpoints[0], h, { headers, token: null });
      assert.deepEqual([r.status, json(r).error], [401, "unauthorized"]);
      assert.equal(r.headers.get("www-authenticate"), "Bearer");
    }
    for (const scheme of ["Bearer", "bearer", "BEARER"]) {
      const ok = await post(local.endpoints[0], h, { headers: { Authorization: `${scheme} s3cret-token` }, token: null });
      assert.equal(ok.status, 200, scheme);
    }
    assert.deepEqual(await health(local.endpoints[0], { token: null }), { state: "ready" });
    assert.deepEqual(await health(local.endpoints[0], { token: "wrong" }), { state: "ready" });
    const full = await health(local.endpoints[0], { token: "s3cret-token" });
    assert.equal(full.slice.manifest_version, q6.manifest.version);
    // The build names its module: the bytes workerd runs, hashed here.
    const wasm = readFileSync(join(dirname(SCRIPT), "index_bg.wasm"));
    assert.equal(full.module_sha256, createHash("sha256").update(wasm).digest("hex"));
    assert.equal(full.protocol_version, 1);
  });
});

test("a token rotation: AUTH_TOKEN and AUTH_TOKEN_PREVIOUS both get 200, anything else 401", async () => {
  await withShards({ authToken: "a", vars: { ...FAST, AUTH_TOKEN_PREVIOUS: "b" } }, async (local) => {
    await seed(await local.bucket(), q6);
    const h = hiddenBytes(512, 2);
    for (const [credential, status] of [
      ["Bearer a", 200],
      ["Bearer b", 200],
      ["Bearer \ta\t", 200],
      ["Bearer ab", 401],
      ["Bearer c", 401],
      ["Bearer a, Bearer b", 401],
      ["Bearer a\u00a0", 401], // only spaces and tabs are white space around a credential
      [null, 401],
    ]) {
      const headers = credential === null ? {} : { Authorization: credential };
      const r = await post(local.endpoints[0], h, { headers, token: null });
      assert.equal(r.status, status, JSON.stringify(credential));
    }
  });
});

test("closed by default: without AUTH_TOKEN a shard serves nobody unless ALLOW_ANONYMOUS is 1", async () => {
  await withShards({ authToken: undefined }, async (local) => {
    await seed(await local.bucket(), q6);
    const r = await post(local.endpoints[0], hiddenBytes(512, 2), { token: null });
    assert.deepEqual([r.status, json(r).error, r.headers.get("retry-after")], [503, "auth_not_configured", null]);
    assert.match(json(r).detail, /AUTH_TOKEN/);
    assert.deepEqual(await health(local.endpoints[0], { token: null }), { state: "empty" });
  });
  await withShards({ authToken: undefined, anonymous: true }, async (local) => {
    await seed(await local.bucket(), q6);
    const r = await post(local.endpoints[0], hiddenBytes(512, 2), { token: null });
    assert.equal(r.status, 200);
    assert.equal((await health(local.endpoints[0], { token: null })).slice.row_start, 0);
  });
});

test("cobordism logits against shards only their operator can fix fails at once, with the shard's reason", async () => {
  const manifest = join(q6.slices, "manifest.json");
  const logits = (endpoints, token) => {
    const started = Date.now();
    const args = ["logits", "--manifest", manifest, "--hidden-seed", "1", ...endpoints.flatMap((e) => ["--endpoint", e])];
    if (token) args.push("--token", token);
    const out = spawnSync(CLI, args, { encoding: "utf8" });
    return { code: out.status, stderr: out.stderr, ms: Date.now() - started };
  };
  await withShards({ authToken: undefined }, async (local) => {
    await seed(await local.bucket(), q6);
    const r = logits(local.endpoints);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /HTTP 503 auth_not_configured: this shard has no AUTH_TOKEN secret/);
    assert.ok(r.ms < 2000, `${r.ms} ms`);
  });
  await withShards({ vars: { ...FAST, SHARD_COUNT: "3" } }, async (local) => {
    await seed(await local.bucket(), q6);
    const r = logits(local.endpoints, TOKEN);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /HTTP 503 misconfigured: the model's manifest has 2 shards, this shard is configured for SHARD_COUNT 3/);
    assert.ok(r.ms < 2000, `${r.ms} ms`);
    const anonymous = logits(local.endpoints);
    assert.match(anonymous.stderr, /HTTP 401 unauthorized: .*--token or COBORDISM_TOKEN/);
  });
});

test("access is decided before the configuration is read, and configuration errors stay in the log", async () => {
  await withShards({ vars: { ...FAST, MEMORY_BUDGET_MIB: "lots" } }, async (local) => {
    const anonymous = await post(local.endpoints[0], hiddenBytes(512, 2), { token: null });
    assert.deepEqual([anonymous.status, json(anonymous).error], [401, "unauthorized"]);
    const r = await post(local.endpoints[0], hiddenBytes(512, 2));
    assert.deepEqual([r.status, json(r).error], [503, "misconfigured"]);
    assert.doesNotMatch(json(r).detail, /lots|MEMORY_BUDGET_MIB/);
  });
});

test("the production build has no fault routes, whatever FAULT_INJECTION says", async () => {
  await withShards({ vars: { ...FAST, FAULT_INJECTION: "1" } }, async (local) => {
    for (const fault of ["panic", "oom"]) {
      const r = await fetch(`${local.endpoints[0]}/__fault/${fault}`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
      assert.equal(r.status, 404, fault);
      await r.arrayBuffer();
    }
  });
});

test("a body over 8 × 4 × hidden is refused from its Content-Length, before it is sent", async () => {
  await withShards({}, async (local) => {
    await seed(await local.bucket(), q6);
    assert.equal((await post(local.endpoints[0], hiddenBytes(512, 1))).status, 200);
    const { request } = await import("node:http");
    const url = new URL(`${local.endpoints[0]}/cobordism-lm-head`);
    // Declares 9 vectors, sends 1 KiB and waits: the answer must come without the rest.
    const status = await new Promise((resolve, reject) => {
      const req = request(url, { method: "POST", headers: { "Content-Length": `${4 * 512 * 9}`, Authorization: `Bearer ${TOKEN}` } });
      req.on("response", (res) => { res.resume(); resolve(res.statusCode); req.destroy(); });
      req.on("error", reject);
      req.setTimeout(10_000, () => reject(new Error("no answer: the shard is waiting for the body")));
      req.write(new Uint8Array(1024));
    });
    assert.equal(status, 413);
  });
});

test("cobordism plan and the shard agree on what fits a budget", async () => {
  // Q6_K 512 × 4096 in two shards of 2048 rows: 0.82 MiB of blocks, ~1.2 MiB with its buffers.
  const gguf = join(q6.dir, "model.gguf");
  for (const mib of [1, 2]) {
    let planFits = true;
    try {
      cli("plan", "--gguf", gguf, "--shards", "2", "--budget-mib", `${mib}`);
    } catch (e) {
      assert.equal(e.status, 3, `${e.stderr}`);
      planFits = false;
    }
    await withShards({ vars: { ...FAST, MEMORY_BUDGET_MIB: `${mib}` } }, async (local) => {
      await seed(await local.bucket(), q6);
      const r = await post(local.endpoints[0], hiddenBytes(512, 1));
      assert.equal(r.status, planFits ? 200 : 503, `${mib} MiB: plan says fits=${planFits}`);
    });
    assert.equal(planFits, mib === 2, `${mib} MiB`);
  }
});

test("concurrent requests during a cold load: one load, the others wait for it, right bits", async () => {
  const big = makeModel({ type: "q6_k", hidden: 2048, vocab: 16384, shards: 2, seed: 3 });
  await withShards({}, async (local) => {
    await seed(await local.bucket(), big);
    const h = hiddenBytes(2048, 4);
    const expected = shardPart(localLogits(big, h), big.manifest, 0);
    const answers = await Promise.all(Array.from({ length: 16 }, () => post(local.endpoints[0], h)));
    for (const a of answers) {
      assert.equal(a.status, 200, "no 503 slice_loading: a request waits for the load under way");
      assert.deepEqual(a.body, expected);
    }
    assert.equal(answers.filter((a) => a.headers.get("x-cache") === "miss").length, 1, "one load");
    const after = await post(local.endpoints[0], h);
    assert.equal(after.headers.get("x-cache"), "hit");
    assert.deepEqual(after.body, expected);
  });
});

test("a corrupt or missing slice is refused and nothing is cached", async () => {
  await withShards({}, async (local) => {
    const bucket = await local.bucket();
    await seed(bucket, q6);
    const key = `model/${q6.manifest.shards[0].key}`;
    const good = new Uint8Array(await (await bucket.get(key)).arrayBuffer());
    const bad = good.slice();
    bad[1000] ^= 0x40;
    await bucket.put(key, bad);
    const h = hiddenBytes(512, 6);
    let r = await post(local.endpoints[0], h);
    assert.deepEqual([r.status, json(r).error], [503, "slice_corrupt"]);
    assert.match(json(r).detail, /checksum/);
    assert.equal((await health(local.endpoints[0])).resident, false);
    await bucket.put(key, good.subarray(0, good.length - 210));
    r = await post(local.endpoints[0], h);
    assert.deepEqual([r.status, json(r).error], [503, "slice_corrupt"]);
    await bucket.delete(key);
    r = await post(local.endpoints[0], h);
    assert.deepEqual([r.status, json(r).error], [503, "slice_missing"]);
    await bucket.put(key, good);
    r = await post(local.endpoints[0], h);
    assert.equal(r.status, 200);
    assert.equal((await health(local.endpoints[0])).resident, true);
  });
});

test("a new manifest version replaces the resident slice", async () => {
  const other = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 99 });
  await withShards({}, async (local) => {
    const bucket = await local.bucket();
    await seed(bucket, q6);
    const h = hiddenBytes(512, 7);
    const first = await post(local.endpoints[0], h);
    assert.equal(first.headers.get("x-manifest-version"), q6.manifest.version);
    await seed(bucket, other);
    const second = await post(local.endpoints[0], h);
    assert.equal(second.status, 200);
    assert.equal(second.headers.get("x-cache"), "miss");
    assert.equal(second.headers.get("x-manifest-version"), other.manifest.version);
    assert.deepEqual(second.body, shardPart(localLogits(other, h), other.manifest, 0));
    assert.notDeepEqual(second.body, first.body);
    const hz = await health(local.endpoints[0]);
    assert.equal(hz.slice.manifest_version, other.manifest.version);
  });
});

test("a slice over the memory budget is refused, not half-loaded", async () => {
  await withShards({ vars: { ...FAST, MEMORY_BUDGET_MIB: "0" } }, async (local) => {
    await seed(await local.bucket(), q6);
    const r = await post(local.endpoints[0], hiddenBytes(512, 1));
    assert.deepEqual([r.status, json(r).error], [503, "over_budget"]);
    assert.match(json(r).detail, /MEMORY_BUDGET_MIB/);
    const hz = await health(local.endpoints[0]);
    assert.equal(hz.resident, false);
    assert.ok(hz.wasm_memory_bytes < 8 << 20, `${hz.wasm_memory_bytes}`);
  });
});

test("eight shards answer at once and assemble the full logits", async () => {
  const m = makeModel({ type: "q4_k", hidden: 512, vocab: 8000, shards: 8, seed: 8 });
  const local = await startShards({ shards: 8, vars: FAST, authToken: TOKEN });
  try {
    await seed(await local.bucket(), m);
    const h = hiddenBytes(512, 8);
    const parts = await Promise.all(local.endpoints.map((e) => post(e, h)));
    assert.deepEqual(parts.map((p) => p.status), Array(8).fill(200));
    const full = new Uint8Array(parts.reduce((n, p) => n + p.body.length, 0));
    let at = 0;
    for (const p of parts) {
      full.set(p.body, at);
      at += p.body.length;
    }
    assert.deepEqual(full, localLogits(m, h));
    const hz = await health(local.endpoints[7]);
    assert.equal(hz.shard_index, 7);
    assert.equal(hz.state, "ready");
    assert.equal(hz.backend, "simd128-relaxed");
    assert.equal(hz.slice.checksum, m.manifest.shards[7].checksum);
  } finally {
    await local.dispose();
  }
});

test("16 concurrent callers on one shard share passes and each gets the bits it gets alone", async (t) => {
  await withShards({}, async (local) => {
    await seed(await local.bucket(), q6);
    const e = local.endpoints[0];
    const s = q6.manifest.shards[0];
    const callers = Array.from({ length: 16 }, (_, i) => ({
      h: hiddenBytes(512, 100 + i, 1 + (i % 3)), // 1 to 3 vectors each
      query: ["", "?top_k=5", "?precision=int8", "?temperature=0.8&seed=7"][i % 4],
    }));
    // Alone, one after another (nothing else in flight): each request is its own pass.
    await post(e, callers[0].h); // load the slice first
    const alone = [];
    for (const c of callers) alone.push(await post(e, c.h, { query: c.query }));
    assert.ok(alone.every((r) => r.headers.get("x-pass-vectors") === r.headers.get("x-batch")));
    const before = (await health(e)).passes;
    const together = await Promise.all(callers.map((c) => post(e, c.h, { query: c.query })));
    const after = (await health(e)).passes;
    for (const [i, r] of together.entries()) {
      assert.equal(r.status, 200);
      assert.deepEqual(r.body, alone[i].body, `caller ${i} (${callers[i].query || "logits"})`);
    }
    // The one-vector plain-logits callers also match kquant natively.
    for (const i of [0, 12]) {
      const full = localLogits(q6, callers[i].h);
      assert.deepEqual(together[i].body, full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count)));
    }
    const vectors = callers.reduce((sum, c) => sum + c.h.length / (4 * 512), 0);
    assert.equal(after.vectors - before.vectors, vectors);
    const shared = after.by_vectors.slice(1).reduce((a, b) => a + b, 0) - before.by_vectors.slice(1).reduce((a, b) => a + b, 0);
    assert.ok(after.count - before.count < callers.length, `${after.count - before.count} passes for ${callers.length} requests`);
    assert.ok(shared > 0, "passes of more than one vector");
    t.diagnostic(`figures: ${JSON.stringify({ requests: callers.length, vectors, passes: after.count - before.count, by_vectors: after.by_vectors.map((n, i) => n - before.by_vectors[i]) })}`);
    assert.ok(together.some((r) => Number(r.headers.get("x-pass-vectors")) > Number(r.headers.get("x-batch"))));
  });
});

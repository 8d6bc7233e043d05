// The shard's two builds over HTTP in workerd: the relaxed-SIMD one (worker/build, what
// scripts/build-worker.sh makes by default and what deploys) and the plain simd128 one
// (`COBORDISM_WASM_SIMD=plain scripts/build-worker.sh --out target/worker-plain/build`), each
// against native kquant's bits, on the int8 mode's edge cases: weights at the quants' and scales'
// extremes (`cobordism synth --extreme`), hidden vectors at ±amax and on the 8-bit quantization's
// rounding edges, passes of 1…8 vectors, Q6_K in each of its layouts and Q4_K in both of its.
// The relaxed dot product's results are only defined for a 7-bit second operand
// (crates/kquant/src/arch/wasm32/simd128.rs): workerd's V8 is where a wrong operand would show
// (scripts/must-fail.sh's `signed_i7`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { startShards, SCRIPT, PLAIN_SCRIPT } from "../../worker/local.mjs";
import { makeModel, seed, edgeHiddenBytes, localLogits, post, health, TOKEN } from "./helpers.mjs";

// COBORDISM_RELAXED_SHARD: another relaxed build in place of worker/build (scripts/must-fail.sh's).
const BUILDS = [
  { name: "relaxed", script: process.env.COBORDISM_RELAXED_SHARD ?? SCRIPT, backend: "simd128-relaxed" },
  { name: "plain", script: PLAIN_SCRIPT, backend: "simd128" },
];
const MODELS = [
  { type: "q6_k", hidden: 1280, vocab: 1001, seed: 3 },
  { type: "q6_k", hidden: 1280, vocab: 1001, seed: 3, layout: "packed6" },
  { type: "q6_k", hidden: 1280, vocab: 1001, seed: 3, layout: "interleaved" },
  { type: "q4_k", hidden: 768, vocab: 777, seed: 4 },
  { type: "q4_k", hidden: 768, vocab: 777, seed: 4, layout: "interleaved" },
];
const HIDDEN_SEED = 29;

for (const build of BUILDS) {
  test(`the ${build.name} shard build: int8 and exact bits of native kquant on extreme weights and edge vectors, 1…8 vectors per pass`, async (t) => {
    assert.ok(existsSync(build.script), `${build.script} is missing: scripts/test.sh builds it (see this file's header)`);
    for (const spec of MODELS) {
      const model = makeModel({ ...spec, shards: 2, extreme: true });
      const local = await startShards({ shards: 2, script: build.script, authToken: TOKEN });
      try {
        await seed(await local.bucket(), model);
        const hidden = model.manifest.hidden;
        const vectors = edgeHiddenBytes(hidden, HIDDEN_SEED, 8);
        const one = (v) => vectors.subarray(4 * hidden * v, 4 * hidden * (v + 1));
        for (const int8 of [true, false]) {
          const expected = Array.from({ length: 8 }, (_, v) => localLogits(model, one(v), { int8 }));
          for (const [i, endpoint] of local.endpoints.entries()) {
            const { row_start: start, row_count: rows } = model.manifest.shards[i];
            for (let n = 1; n <= 8; n++) {
              const r = await post(endpoint, vectors.subarray(0, 4 * hidden * n), { query: int8 ? "?precision=int8" : "" });
              assert.equal(r.status, 200, new TextDecoder().decode(r.body));
              for (let v = 0; v < n; v++) {
                const got = r.body.subarray(4 * rows * v, 4 * rows * (v + 1));
                const want = expected[v].subarray(4 * start, 4 * (start + rows));
                assert.ok(Buffer.compare(got, want) === 0, `${spec.type} ${spec.layout ?? "ggml"}, int8 ${int8}, shard ${i}, ${n} vectors: vector ${v} differs from native`);
              }
            }
          }
        }
        const h = await health(local.endpoints[0]);
        assert.equal(h.backend, build.backend);
        assert.deepEqual(h.passes.by_vectors.slice(0, 8).map((c) => c > 0), Array(8).fill(true), `passes of every width ran: ${h.passes.by_vectors}`);
      } finally {
        await local.dispose();
      }
    }
    t.diagnostic(`${build.backend}: ${MODELS.length} models × 2 shards × 2 modes × passes of 1…8 vectors`);
  });
}

// The example Worker (example/worker.mjs) bundled by wrangler as for a deploy, run in workerd
// through Miniflare against a local R2 bucket: it streams the matrix from R2 into a
// ResidentSlice on the first request and answers with the same bits as native kquant.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { Miniflare } from "miniflare";
import { nativeFixtures, assertSameBits, ROOT } from "../dev/native.mjs";
import { bundleForDeploy } from "../../../tests/worker/helpers.mjs";

const EXAMPLE = join(ROOT, "packages", "kquant", "example");
let f, dir, mf;

before(async () => {
  f = nativeFixtures({ dequantize: false });
  dir = mkdtempSync(join(tmpdir(), "kquant-worker-"));
  const script = bundleForDeploy(EXAMPLE, dir);
  mf = new Miniflare({
    workers: ["q4_k", "q6_k"].map((dtype) => ({
      name: dtype,
      modules: true,
      scriptPath: script,
      modulesRoot: dirname(script),
      modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
      compatibilityDate: "2026-04-01",
      bindings: { KEY: `lm-head.${dtype}`, DTYPE: dtype, ROWS: `${f.rows}`, COLS: `${f.cols}` },
      r2Buckets: { WEIGHTS: "kquant-example" },
    })),
    r2Persist: false,
  });
  await mf.ready;
});

after(async () => {
  await mf?.dispose();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const floats = (bytes) => new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);

for (const dtype of ["q4_k", "q6_k"]) {
  test(`${dtype}: cold then warm, the logits are native kquant's bits`, async () => {
    const worker = await mf.getWorker(dtype);
    const call = async (body, query = "") => {
      const r = await worker.fetch(`http://example.invalid/${query}`, { method: "POST", body });
      return {
        status: r.status,
        cache: r.headers.get("x-cache"),
        backend: r.headers.get("x-kquant-backend"),
        text: r.status === 200 ? "" : await r.text(),
        body: r.status === 200 ? new Uint8Array(await r.arrayBuffer()) : null,
      };
    };
    const missing = await call(new Uint8Array(f.x.buffer));
    assert.equal(missing.status, 503);
    assert.match(missing.text, new RegExp(`no R2 object lm-head.${dtype}`));

    const bucket = await mf.getR2Bucket("WEIGHTS", dtype);
    await bucket.put(`lm-head.${dtype}`, f[dtype].weights);
    const cold = await call(new Uint8Array(f.x.buffer));
    assert.equal(cold.status, 200, cold.text);
    assert.equal(cold.cache, "miss");
    assertSameBits(floats(cold.body), f[dtype].matvec, `${dtype} cold`);
    const warm = await call(new Uint8Array(f.x.buffer));
    assert.equal(warm.cache, "hit");
    assertSameBits(floats(warm.body), f[dtype].matvec, `${dtype} warm`);
    // workerd runs the package's relaxed-SIMD build; its int8 mode gives native kquant's bits.
    assert.equal(warm.backend, "simd128-relaxed");
    const int8 = await call(new Uint8Array(f.x.buffer), "?precision=int8");
    assert.equal(int8.status, 200, int8.text);
    assertSameBits(floats(int8.body), f[dtype].matvecInt8, `${dtype} int8 (relaxed SIMD)`);

    const bad = await call(new Uint8Array(f.x.buffer).subarray(0, 4 * (f.cols - 1)));
    assert.equal(bad.status, 400);
    assert.equal(bad.text, `ResidentSlice.matVec: x has ${f.cols - 1} floats, expected ${f.cols} (cols)\n`);
  });
}

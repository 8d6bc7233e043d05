// @cobordism/kquant as a Worker author installs it: its `npm pack` tarball installed into a new
// Worker project outside the repository, bundled by wrangler (tests/packed/project.mjs) and run
// in workerd (Miniflare). The Worker's mat-vecs of Q4_K and Q6_K blocks equal, bit for bit, the
// same package's under Node; zero blocks give zeros.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Miniflare } from "miniflare";
import { packedWorkerProject, workerOptions } from "../../../tests/packed/project.mjs";

/** The Worker: POST /matvec?dtype=…&rows=…&cols=… with the blocks then x (f32) → W·x (f32). */
const WORKER = `import { ResidentSlice } from "@cobordism/kquant";
export default {
  async fetch(request) {
    const q = new URL(request.url).searchParams;
    const [rows, cols] = [Number(q.get("rows")), Number(q.get("cols"))];
    const body = new Uint8Array(await request.arrayBuffer());
    const split = body.length - cols * 4;
    const slice = new ResidentSlice(q.get("dtype"), rows, cols);
    slice.fill(body.subarray(0, split));
    const y = slice.matVec(new Float32Array(body.slice(split).buffer));
    slice.free();
    return new Response(y);
  },
};
`;
/** Bytes per 256-column block and where its f16 scales sit (d; Q4_K's dmin after it). */
const BLOCK = { q4_k: { bytes: 144, scales: 0 }, q6_k: { bytes: 210, scales: 208 } };
const ROWS = 16, COLS = 512;
let project, mf, kquant;

before(async () => {
  project = packedWorkerProject("kquant", WORKER);
  const entry = createRequire(join(project.dir, "package.json")).resolve("@cobordism/kquant");
  kquant = await import(pathToFileURL(entry).href);
  mf = new Miniflare(workerOptions(project.script));
  await mf.ready;
});

after(async () => {
  await mf?.dispose();
  project?.dispose();
});

/**
 * Deterministic blocks of `dtype` (xorshift bytes) with finite f16 scales (≈ 2^-6).
 * @param {"q4_k" | "q6_k"} dtype
 * @param {number} seed
 */
function blocks(dtype, seed) {
  const { bytes, scales } = BLOCK[dtype];
  const out = new Uint8Array((ROWS * COLS / 256) * bytes);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < out.length; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    out[i] = s & 0xff;
  }
  for (let b = 0; b < out.length; b += bytes) {
    for (let k = 0; k < (dtype === "q4_k" ? 2 : 1); k++) out.set([0x00, 0x24], b + scales + 2 * k);
  }
  return out;
}

/**
 * The Worker's W·x for `w` and `x`.
 * @param {string} dtype
 * @param {Uint8Array} w
 * @param {Float32Array} x
 */
async function workerMatVec(dtype, w, x) {
  const body = new Uint8Array(w.length + x.byteLength);
  body.set(w);
  body.set(new Uint8Array(x.buffer), w.length);
  const r = await mf.dispatchFetch(`http://localhost/matvec?dtype=${dtype}&rows=${ROWS}&cols=${COLS}`, { method: "POST", body });
  assert.equal(r.status, 200, await r.clone().text());
  return new Float32Array(await r.arrayBuffer());
}

/**
 * The installed package's W·x under Node.
 * @param {string} dtype
 * @param {Uint8Array} w
 * @param {Float32Array} x
 */
function nodeMatVec(dtype, w, x) {
  const slice = new kquant.ResidentSlice(dtype, ROWS, COLS);
  slice.fill(w);
  const y = slice.matVec(x);
  slice.free();
  return y;
}

for (const dtype of ["q4_k", "q6_k"]) {
  test(`the packed package's Worker computes ${dtype} mat-vecs bit-identical to it under Node`, async () => {
    const x = Float32Array.from({ length: COLS }, (_, i) => Math.sin(i * 0.37) * 2);
    const w = blocks(dtype, dtype === "q4_k" ? 7 : 11);
    const got = await workerMatVec(dtype, w, x);
    const want = nodeMatVec(dtype, w, x);
    assert.equal(got.length, ROWS);
    assert.ok(want.some((v) => v !== 0) && want.every(Number.isFinite), `${want}`);
    assert.deepEqual(new Uint32Array(got.buffer), new Uint32Array(want.buffer));
    const zeros = await workerMatVec(dtype, new Uint8Array(w.length), x);
    assert.deepEqual([...zeros], new Array(ROWS).fill(0));
  });
}

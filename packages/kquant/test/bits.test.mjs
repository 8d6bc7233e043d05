// Bit-identical to native kquant: the one-shot functions, ResidentSlice however it is filled,
// and the plain-JS baseline's dequantization (so the benchmark compares against ggml's formulas).
// The expected bits come from the kquant-js `fixtures` example, built natively.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import * as kquant from "@cobordism/kquant";
import { nativeFixtures, assertSameBits, DTYPES } from "../dev/native.mjs";
import * as baseline from "../dev/baseline.mjs";

const SUFFIX = { q4_k: "Q4K", q6_k: "Q6K" };
let shapes; // [name, fixtures]

before(() => {
  shapes = [
    // Several windows of the one-shot functions' streaming, 3 blocks per row.
    ["1000×768", nativeFixtures()],
    ["1×256", nativeFixtures({ rows: 1, cols: 256, seed: 9 })],
  ];
});

function chunked(bytes, size) {
  const chunks = [];
  for (let i = 0; i < bytes.length; i += size) chunks.push(bytes.subarray(i, i + size));
  return chunks;
}

for (const dtype of DTYPES) {
  const suffix = SUFFIX[dtype];

  test(`${dtype}: matVec${suffix} and dequantize${suffix} are bit-identical to native kquant`, () => {
    for (const [name, f] of shapes) {
      const out = new Float32Array(f.rows);
      kquant[`matVec${suffix}`](out, f.x, f[dtype].weights, f.rows, f.cols);
      assertSameBits(out, f[dtype].matvec, `${name} matVec${suffix}`);
      const floats = new Float32Array(f.rows * f.cols);
      kquant[`dequantize${suffix}`](f[dtype].weights, floats);
      assertSameBits(floats, f[dtype].dequant, `${name} dequantize${suffix}`);
    }
  });

  test(`${dtype}: ResidentSlice filled at once or appended in chunks gives the same bits`, () => {
    for (const [name, f] of shapes) {
      const { weights, matvec } = f[dtype];
      const ways = {
        "fill": (s) => s.fill(weights),
        "append(whole)": (s) => s.append(weights),
        "append(1 byte at a time)": (s) => chunked(weights, 1).forEach((c) => s.append(c)),
        "append(7-byte chunks)": (s) => chunked(weights, 7).forEach((c) => s.append(c)),
        "append(65536-byte chunks, as R2 streams)": (s) => chunked(weights, 65536).forEach((c) => s.append(c)),
        "append(empty chunks too)": (s) => [new Uint8Array(0), weights, new Uint8Array(0)].forEach((c) => s.append(c)),
        "half appended, then fill": (s) => { s.append(weights.subarray(0, 100)); s.fill(weights); },
      };
      for (const [way, load] of Object.entries(ways)) {
        if (way.startsWith("append(1 byte") && weights.length > 100_000) continue;
        const slice = new kquant.ResidentSlice(dtype, f.rows, f.cols);
        try {
          load(slice);
          assert.equal(slice.isComplete, true, way);
          assert.equal(slice.byteLength, weights.length, way);
          assertSameBits(slice.matVec(f.x), matvec, `${name} ${way}: matVec`);
          // Twice: the kept scratch does not change the result.
          assertSameBits(slice.matVec(f.x), matvec, `${name} ${way}: second matVec`);
          const out = new Float32Array(f.rows);
          slice.matVecInto(f.x, out);
          assertSameBits(out, matvec, `${name} ${way}: matVecInto`);
          assertSameBits(slice.matVecInt8(f.x), f[dtype].matvecInt8, `${name} ${way}: matVecInt8`);
        } finally {
          slice.free();
        }
      }
    }
  });

  test(`${dtype}: the plain-JS baseline dequantizes to ggml's bits`, () => {
    for (const [name, f] of shapes) {
      const floats = new Float32Array(f.rows * f.cols);
      baseline.dequantize(dtype, f[dtype].weights, floats);
      assertSameBits(floats, f[dtype].dequant, `${name} baseline dequantize`);
      // Its dot products sum in another order: close, not equal.
      const out = new Float32Array(f.rows);
      baseline.matVec(dtype, f[dtype].weights, f.rows, f.cols, f.x, out);
      const scale = Math.max(...f[dtype].matvec.map(Math.abs));
      out.forEach((v, i) => assert.ok(Math.abs(v - f[dtype].matvec[i]) <= 1e-5 * scale, `${name} row ${i}`));
    }
  });
}

for (const [dtype, layout] of [["q6_k", "packed6"], ["q6_k", "interleaved"], ["q4_k", "interleaved"]]) {
  test(`${dtype}: a ResidentSlice of ${layout} blocks gives the bits of ggml's`, () => {
    for (const [name, f] of shapes) {
      const slice = new kquant.ResidentSlice(dtype, f.rows, f.cols, layout);
      try {
        assert.equal(slice.layout, layout);
        chunked(f[dtype][layout], 65536).forEach((c) => slice.append(c));
        assertSameBits(slice.matVec(f.x), f[dtype].matvec, `${name} ${layout} matVec`);
        assertSameBits(slice.matVecInt8(f.x), f[dtype].matvecInt8, `${name} ${layout} matVecInt8`);
      } finally {
        slice.free();
      }
    }
  });
}

test("a slice keeps its shape and format", () => {
  const slice = new kquant.ResidentSlice("Q4_K", 3, 512);
  try {
    assert.equal(slice.dtype, "q4_k");
    assert.equal(slice.layout, "ggml");
    assert.equal(slice.rows, 3);
    assert.equal(slice.cols, 512);
    assert.equal(slice.expectedBytes, 3 * 2 * 144);
    assert.equal(slice.byteLength, 0);
    assert.equal(slice.isComplete, false);
  } finally {
    slice.free();
  }
});

test("Node 20 runs the plain simd128 build (its relaxed SIMD is not the final instruction)", () => {
  const [major, minor] = process.versions.v8.split(".").map(Number);
  const expected = major > 11 || (major === 11 && minor >= 4) ? "simd128-relaxed" : "simd128";
  assert.equal(kquant.kernelBackend(), expected);
});

// ResidentSlice.matVec against the plain-JS path (ggml's dequantize formulas in scalar JS into a
// Float32Array row, then a dot product), on a 32768 × 5376 lm-head of seeded random valid blocks,
// in the same run; plus the one-shot matVec, which copies the weights into wasm memory each call.
// Median of RUNS timed runs after WARMUP untimed ones.
//
//   scripts/build-kquant-js.sh && node packages/kquant/bench/matvec.mjs [--rows N] [--cols N] [--runs N]
import { cpus } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import * as kquant from "@cobordism/kquant";
import { nativeFixtures, assertSameBits, DTYPES, ROOT } from "../dev/native.mjs";
import * as baseline from "../dev/baseline.mjs";

const { values } = parseArgs({
  options: {
    rows: { type: "string", default: "32768" },
    cols: { type: "string", default: "5376" },
    runs: { type: "string", default: "7" },
    warmup: { type: "string", default: "2" },
  },
});
const [rows, cols, runs, warmup] = [values.rows, values.cols, values.runs, values.warmup].map(Number);
if (runs < 5) throw new Error("--runs: at least 5");

/** Median milliseconds of `runs` calls of `fn` after `warmup` untimed ones. */
function median(fn) {
  for (let i = 0; i < warmup; i++) fn();
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    fn();
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  return times[runs >> 1];
}

console.error(`writing ${rows} × ${cols} fixtures with native kquant…`);
const f = nativeFixtures({ rows, cols, dequantize: false, dir: join(ROOT, "target", "kquant-js-bench") });
const SUFFIX = { q4_k: "Q4K", q6_k: "Q6K" };
const results = [];
for (const dtype of DTYPES) {
  const { weights, matvec } = f[dtype];
  const slice = new kquant.ResidentSlice(dtype, rows, cols);
  for (let i = 0; i < weights.length; i += 1 << 20) slice.append(weights.subarray(i, i + (1 << 20)));
  assertSameBits(slice.matVec(f.x), matvec, `${dtype} ResidentSlice.matVec`);
  const resident = median(() => slice.matVec(f.x));
  assertSameBits(slice.matVecInt8(f.x), f[dtype].matvecInt8, `${dtype} ResidentSlice.matVecInt8`);
  const int8 = median(() => slice.matVecInt8(f.x));
  slice.free();

  const out = new Float32Array(rows);
  const oneShot = median(() => kquant[`matVec${SUFFIX[dtype]}`](out, f.x, weights, rows, cols));
  assertSameBits(out, matvec, `${dtype} matVec${SUFFIX[dtype]}`);

  const js = median(() => baseline.matVec(dtype, weights, rows, cols, f.x, out));
  results.push({ dtype, mib: weights.length / 2 ** 20, resident, int8, oneShot, js });
  console.error(`${dtype}: resident ${resident.toFixed(1)} ms, one-shot ${oneShot.toFixed(1)} ms, plain JS ${js.toFixed(1)} ms`);
}

const ms = (t) => t.toFixed(1);
console.log(`${rows} × ${cols}, median of ${runs} runs after ${warmup} warm-up; Node ${process.version}, ${cpus()[0].model}; wasm simd128 (kquant), native reference backend ${f.backend}\n`);
console.log("| format | weights | `ResidentSlice.matVec` | `matVecInt8` (fast mode) | one-shot `matVec…` (copies weights) | plain JS dequantize + dot | speedup vs plain JS (exact / int8) |");
console.log("|---|---:|---:|---:|---:|---:|---:|");
for (const r of results) {
  console.log(`| ${r.dtype} | ${r.mib.toFixed(1)} MiB | ${ms(r.resident)} ms | ${ms(r.int8)} ms | ${ms(r.oneShot)} ms | ${ms(r.js)} ms | ${(r.js / r.resident).toFixed(1)}× / ${(r.js / r.int8).toFixed(1)}× |`);
}

// What native kquant computes, for the tests and the benchmark to compare against: runs the
// kquant-js `fixtures` example (a native build) and loads the little-endian files it writes.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const DTYPES = ["q4_k", "q6_k"];

/**
 * Writes seeded fixtures with native kquant into `dir` (by default a temporary directory, removed
 * once they are loaded) and loads them.
 * @param {{rows?: number, cols?: number, seed?: number, dequantize?: boolean, dir?: string}} o
 * @returns {{rows: number, cols: number, backend: string, x: Float32Array,
 *   q4_k: {weights: Uint8Array, interleaved: Uint8Array, matvec: Float32Array,
 *     matvecInt8: Float32Array, dequant?: Float32Array},
 *   q6_k: {weights: Uint8Array, packed6: Uint8Array, interleaved: Uint8Array, matvec: Float32Array,
 *     matvecInt8: Float32Array, dequant?: Float32Array}}}
 */
export function nativeFixtures({ rows, cols, seed, dequantize = true, dir } = {}) {
  if (dir === undefined) {
    const scratch = mkdtempSync(join(tmpdir(), "kquant-fixtures-"));
    try {
      return nativeFixtures({ rows, cols, seed, dequantize, dir: scratch });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }
  const args = [dir];
  if (rows !== undefined) args.push("--rows", `${rows}`);
  if (cols !== undefined) args.push("--cols", `${cols}`);
  if (seed !== undefined) args.push("--seed", `${seed}`);
  if (!dequantize) args.push("--no-dequantize");
  execFileSync(
    "cargo",
    ["run", "--release", "--quiet", "-p", "kquant-js", "--example", "fixtures", "--", ...args],
    { cwd: ROOT, stdio: ["ignore", "inherit", "inherit"] },
  );
  const bytes = (name) => new Uint8Array(readFileSync(join(dir, name)));
  const floats = (name) => {
    const b = bytes(name);
    return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  };
  const meta = JSON.parse(readFileSync(join(dir, "fixtures.json"), "utf8"));
  const f = { ...meta, x: floats("x.f32") };
  for (const dtype of DTYPES) {
    f[dtype] = {
      weights: bytes(`${dtype}.weights`),
      matvec: floats(`${dtype}.matvec.f32`),
      matvecInt8: floats(`${dtype}.matvec-int8.f32`),
    };
    if (dequantize) f[dtype].dequant = floats(`${dtype}.dequant.f32`);
    if (dtype === "q6_k") f[dtype].packed6 = bytes(`${dtype}.packed6.weights`);
    f[dtype].interleaved = bytes(`${dtype}.interleaved.weights`);
  }
  return f;
}

/** Asserts that two Float32Arrays hold the same bits, naming the first difference. */
export function assertSameBits(actual, expected, what) {
  assert.ok(actual instanceof Float32Array, `${what}: not a Float32Array`);
  assert.equal(actual.length, expected.length, `${what}: length`);
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== e[i]) {
      assert.fail(`${what}: element ${i} is ${actual[i]} (0x${a[i].toString(16)}), native kquant gives ${expected[i]} (0x${e[i].toString(16)})`);
    }
  }
}

// Bad input throws a JS Error that says what was expected; nothing traps, and the module and the
// slice keep working afterwards.
import { test } from "node:test";
import assert from "node:assert/strict";
import { matVecQ6K, matVecQ4K, dequantizeQ6K, dequantizeQ4K, ResidentSlice } from "@cobordism/kquant";

const f32 = (n) => new Float32Array(n);
const u8 = (n) => new Uint8Array(n);

/** Asserts that `fn` throws an `Error` (not a wasm trap) whose message is exactly `message`. */
function throwsMessage(fn, message) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof Error, `not an Error: ${e}`);
    assert.ok(!(e instanceof WebAssembly.RuntimeError), `a wasm trap: ${e.message}`);
    assert.equal(e.message, message);
    return true;
  });
}

test("one-shot mat-vec: shapes and lengths", () => {
  // 2 × 512 Q6_K: 2 rows of 420 bytes.
  throwsMessage(() => matVecQ6K(f32(2), f32(512), u8(839), 2, 512),
    "matVecQ6K: weights has 839 bytes, expected 840 (rows × bytes per row)");
  throwsMessage(() => matVecQ6K(f32(2), f32(511), u8(840), 2, 512),
    "matVecQ6K: x has 511 floats, expected 512 (cols)");
  throwsMessage(() => matVecQ6K(f32(3), f32(512), u8(840), 2, 512),
    "matVecQ6K: out has 3 floats, expected 2 (rows)");
  throwsMessage(() => matVecQ4K(f32(2), f32(500), u8(840), 2, 500),
    "matVecQ4K: cols must be a multiple of 256 (one super-block), got 500");
  throwsMessage(() => matVecQ4K(f32(0), f32(256), u8(0), 0, 256),
    "matVecQ4K: rows must be a positive integer below 2^32, got 0");
  throwsMessage(() => matVecQ4K(f32(1), f32(256), u8(144), -1, 256),
    "matVecQ4K: rows must be a positive integer below 2^32, got -1");
  throwsMessage(() => matVecQ4K(f32(1), f32(256), u8(144), 1.5, 256),
    "matVecQ4K: rows must be a positive integer below 2^32, got 1.5");
  throwsMessage(() => matVecQ4K(f32(1), f32(256), u8(144), 1, undefined),
    "matVecQ4K: cols must be a positive integer below 2^32, got NaN");
  throwsMessage(() => matVecQ6K(f32(1), f32(256), u8(210), 2 ** 31, 2 ** 20),
    "matVecQ6K: the matrix (rows × bytes per row) would not fit in 32-bit wasm memory");
});

test("one-shot dequantize: whole blocks, 256 floats each", () => {
  throwsMessage(() => dequantizeQ6K(u8(211), f32(256)),
    "dequantizeQ6K: blocks has 211 bytes, expected a multiple of 210 (the size of one q6_k block)");
  throwsMessage(() => dequantizeQ4K(u8(288), f32(256)),
    "dequantizeQ4K: out has 256 floats, expected 512 (256 per block)");
  dequantizeQ4K(u8(0), f32(0)); // nothing to do is fine
});

test("a refused call leaves the output untouched", () => {
  const out = new Float32Array([1, 2]);
  assert.throws(() => matVecQ6K(out, f32(511), u8(840), 2, 512));
  assert.deepEqual([...out], [1, 2]);
});

test("ResidentSlice: dtype and shape", () => {
  throwsMessage(() => new ResidentSlice("q8_0", 2, 256),
    'new ResidentSlice: unknown dtype "q8_0", expected "q4_k" or "q6_k"');
  throwsMessage(() => new ResidentSlice("q4_k", 2, 100),
    "new ResidentSlice: cols must be a multiple of 256 (one super-block), got 100");
  throwsMessage(() => new ResidentSlice("q4_k", 0, 256),
    "new ResidentSlice: rows must be a positive integer below 2^32, got 0");
});

test("ResidentSlice: layout", () => {
  throwsMessage(() => new ResidentSlice("q6_k", 2, 256, "packed4"),
    'new ResidentSlice: unknown layout "packed4", expected "ggml", "packed6" or "interleaved"');
  throwsMessage(() => new ResidentSlice("q4_k", 2, 256, "packed6"),
    "new ResidentSlice: q4_k blocks cannot be stored in the packed6 layout");
  throwsMessage(() => new ResidentSlice("q6_k", 2, 256, 6),
    'new ResidentSlice: layout must be "ggml", "packed6", "interleaved" or undefined, got number');
  throwsMessage(() => new ResidentSlice("q4_k", 2, 64 * 256 + 256, "interleaved"),
    "new ResidentSlice: rows of 16640 columns are too long for the interleaved layout (at most 16384)");
});

test("ResidentSlice: more memory than wasm can give is an Error, and the module still works", () => {
  // 20 000 000 rows × 210 bytes = 4.2 GB: fits in a 32-bit size, not in wasm memory.
  throwsMessage(() => new ResidentSlice("q6_k", 20_000_000, 256),
    "new ResidentSlice: could not reserve 4200000000 bytes of wasm memory for the slice");
  const slice = new ResidentSlice("q6_k", 1, 256);
  slice.free();
});

test("ResidentSlice: append refuses overflow, saying how many bytes remain", () => {
  const slice = new ResidentSlice("q6_k", 2, 256); // 420 bytes
  try {
    slice.append(u8(400));
    throwsMessage(() => slice.append(u8(21)),
      "ResidentSlice.append: a chunk of 21 bytes overflows the slice: only 20 of its 420 bytes remain");
    assert.equal(slice.byteLength, 400, "the refused chunk appended nothing");
    slice.append(u8(20));
    assert.equal(slice.isComplete, true);
    throwsMessage(() => slice.append(u8(1)),
      "ResidentSlice.append: a chunk of 1 bytes overflows the slice: only 0 of its 420 bytes remain");
  } finally {
    slice.free();
  }
});

test("ResidentSlice: fill needs exactly the whole slice", () => {
  const slice = new ResidentSlice("q4_k", 2, 256); // 288 bytes
  try {
    throwsMessage(() => slice.fill(u8(287)),
      "ResidentSlice.fill: bytes has 287 bytes, expected 288 (rows × bytes per row)");
    assert.equal(slice.byteLength, 0);
  } finally {
    slice.free();
  }
});

test("ResidentSlice: matVec before complete, wrong x, wrong out", () => {
  const slice = new ResidentSlice("q4_k", 2, 256);
  try {
    slice.append(u8(100));
    throwsMessage(() => slice.matVec(f32(256)),
      "ResidentSlice.matVec: the slice is incomplete: 100 of 288 bytes appended (188 missing)");
    slice.append(u8(188));
    throwsMessage(() => slice.matVec(f32(255)),
      "ResidentSlice.matVec: x has 255 floats, expected 256 (cols)");
    throwsMessage(() => slice.matVecInto(f32(256), f32(3)),
      "ResidentSlice.matVecInto: out has 3 floats, expected 2 (rows)");
    throwsMessage(() => slice.matVecInto(f32(7), f32(2)),
      "ResidentSlice.matVecInto: x has 7 floats, expected 256 (cols)");
    // All-zero blocks: zero scales, so zero outputs.
    assert.deepEqual([...slice.matVec(f32(256))], [0, 0]);
  } finally {
    slice.free();
  }
});

test("arguments of the wrong type: a clear Error, and the slice keeps working", () => {
  throwsMessage(() => matVecQ6K(null, f32(256), u8(210), 1, 256),
    "matVecQ6K: out must be a Float32Array, got null");
  throwsMessage(() => matVecQ4K(f32(1), [0.5], u8(144), 1, 256),
    "matVecQ4K: x must be a Float32Array, got Array");
  throwsMessage(() => dequantizeQ6K(new Float64Array(2), f32(0)),
    "dequantizeQ6K: blocks must be a Uint8Array, got Float64Array");
  throwsMessage(() => new ResidentSlice(6, 1, 256),
    'new ResidentSlice: dtype must be "q4_k" or "q6_k", got number');
  const slice = new ResidentSlice("q4_k", 1, 256);
  try {
    throwsMessage(() => slice.append("abc"), "ResidentSlice.append: chunk must be a Uint8Array, got string");
    throwsMessage(() => slice.fill(undefined), "ResidentSlice.fill: bytes must be a Uint8Array, got undefined");
    slice.append(Buffer.alloc(144)); // a Node Buffer is a Uint8Array
    throwsMessage(() => slice.matVec(new Array(256).fill(0)), "ResidentSlice.matVec: x must be a Float32Array, got Array");
    throwsMessage(() => slice.matVecInto(f32(256), {}), "ResidentSlice.matVecInto: out must be a Float32Array, got Object");
    assert.deepEqual([...slice.matVec(f32(256))], [0]);
  } finally {
    slice.free();
  }
});

test("ResidentSlice: use after free() throws", () => {
  const slice = new ResidentSlice("q4_k", 1, 256);
  slice.free();
  assert.throws(() => slice.matVec(f32(256)), Error);
  assert.throws(() => slice.append(u8(1)), Error);
});

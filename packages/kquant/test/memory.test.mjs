// Wasm memory: a slice holds what it says, free() gives it back for reuse (the linear memory
// never shrinks, so "given back" means: allocating again does not grow it), and one-shot calls
// stream their input instead of copying it whole.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ResidentSlice, matVecQ6K, dequantizeQ4K, wasmMemoryBytes } from "@cobordism/kquant";

const MiB = 1 << 20;

test("memoryBytes: the reserved blocks plus the float buffers", () => {
  const slice = new ResidentSlice("q6_k", 1000, 4096);
  try {
    assert.equal(slice.expectedBytes, 1000 * 16 * 210);
    assert.ok(slice.memoryBytes >= slice.expectedBytes);
    // x, the outputs and the prepared activations: a few floats per column and row.
    assert.ok(slice.memoryBytes - slice.expectedBytes <= 4 * (4 * 4096 + 1000), `${slice.memoryBytes}`);
  } finally {
    slice.free();
  }
});

test("free() releases the slice: allocating 64 MiB again and again does not grow wasm memory", () => {
  const rows = Math.ceil((64 * MiB) / (21 * 210)); // 5376 columns of Q6_K: 4410 bytes a row
  const chunk = new Uint8Array(MiB).fill(0x11);
  const sizes = [];
  for (let i = 0; i < 12; i++) {
    const slice = new ResidentSlice("q6_k", rows, 5376);
    while (!slice.isComplete) slice.append(chunk.subarray(0, Math.min(MiB, slice.expectedBytes - slice.byteLength)));
    assert.equal(slice.matVec(new Float32Array(5376)).length, rows);
    slice.free();
    sizes.push(wasmMemoryBytes());
  }
  assert.ok(sizes[0] >= 64 * MiB);
  assert.ok(sizes.every((s) => s === sizes[0]), `wasm memory after each free (MiB): ${sizes.map((s) => s / MiB)}`);
});

test("one-shot calls stream the weights: a 32 MiB matrix grows wasm memory by at most 4 MiB", () => {
  const rows = Math.ceil((32 * MiB) / 4410);
  const weights = new Uint8Array(rows * 4410);
  const before = wasmMemoryBytes();
  matVecQ6K(new Float32Array(rows), new Float32Array(5376), weights, rows, 5376);
  const blocks = new Uint8Array(144 * 65536); // 9 MiB of Q4_K, 64 MiB of floats
  dequantizeQ4K(blocks, new Float32Array(256 * 65536));
  const grown = wasmMemoryBytes() - before;
  assert.ok(grown <= 4 * MiB, `grew by ${grown / MiB} MiB`);
});

#!/usr/bin/env node
// The HTTP leg of scripts/bit-exact.sh: a seeded model per format, served by two shards in workerd
// (wasm simd128) and computed natively by `cobordism logits --local` (the best x86_64 backend), for
// four seeded hidden vectors in both modes. Prints `arch backend format mode hash` lines like
// the kquant example; the two sides of each format and mode must hash the same.
import { startShards } from "../worker/local.mjs";
import { makeModel, seed, hiddenBytes, post, localLogits, TOKEN } from "../tests/worker/helpers.mjs";

/** FNV-1a over f32 bits, any NaN as the canonical quiet NaN (as tests/common's hash_bits). */
function hash(chunks) {
  let h = 0xcbf29ce484222325n;
  for (const bytes of chunks) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < bytes.length; i += 4) {
      const bits = Number.isNaN(view.getFloat32(i, true)) ? 0x7fc00000 : view.getUint32(i, true);
      for (let k = 0; k < 4; k++) {
        h ^= BigInt((bits >>> (8 * k)) & 0xff);
        h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
      }
    }
  }
  return h.toString(16).padStart(16, "0");
}

const vectors = [1, 2, 3, 4];
for (const [type, format] of [["q4_k", "Q4K"], ["q6_k", "Q6K"]]) {
  const model = makeModel({ type, hidden: 1024, vocab: 6000, shards: 2, seed: 0xb17e });
  const local = await startShards({ shards: 2, authToken: TOKEN });
  try {
    await seed(await local.bucket(), model);
    for (const mode of ["exact", "int8"]) {
      const remote = [];
      const native = [];
      for (const v of vectors) {
        const h = hiddenBytes(1024, v);
        for (const endpoint of local.endpoints) {
          const r = await post(endpoint, h, { query: mode === "int8" ? "?precision=int8" : "" });
          if (r.status !== 200) throw new Error(`shard answered ${r.status}`);
          remote.push(r.body);
        }
        native.push(localLogits(model, h, { int8: mode === "int8" }));
      }
      console.log(`workerd-http simd128 ${format} ${mode} ${hash(remote)}`);
      console.log(`${process.arch === "x64" ? "x86_64" : process.arch}-cli best ${format} ${mode} ${hash(native)}`);
    }
  } finally {
    await local.dispose();
  }
}

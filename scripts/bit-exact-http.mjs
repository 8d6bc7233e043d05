#!/usr/bin/env node
// The HTTP leg of scripts/bit-exact.sh: a seeded model per format, served by two shards in workerd
// — the relaxed-SIMD build (worker/build) and the plain simd128 one (target/worker-plain/build),
// each row named by the backend its /healthz reports — and computed natively by `cobordism logits
// --local` (the best x86_64 backend), for four seeded hidden vectors in both modes. Prints `arch
// backend format mode hash` lines like the kquant example; every row of a format and mode must
// hash the same.
import { startShards, SCRIPT, PLAIN_SCRIPT } from "../worker/local.mjs";
import { makeModel, seed, hiddenBytes, post, health, localLogits, TOKEN } from "../tests/worker/helpers.mjs";

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
const builds = [SCRIPT, PLAIN_SCRIPT];
for (const [type, format] of [["q4_k", "Q4K"], ["q6_k", "Q6K"]]) {
  const model = makeModel({ type, hidden: 1024, vocab: 6000, shards: 2, seed: 0xb17e });
  const lines = [];
  for (const script of builds) {
    const local = await startShards({ shards: 2, authToken: TOKEN, script });
    try {
      await seed(await local.bucket(), model);
      const { backend } = await health(local.endpoints[0]);
      for (const mode of ["exact", "int8"]) {
        const remote = [];
        for (const v of vectors) {
          for (const endpoint of local.endpoints) {
            const r = await post(endpoint, hiddenBytes(1024, v), { query: mode === "int8" ? "?precision=int8" : "" });
            if (r.status !== 200) throw new Error(`shard answered ${r.status}`);
            remote.push(r.body);
          }
        }
        lines.push(`workerd-http ${backend} ${format} ${mode} ${hash(remote)}`);
      }
    } finally {
      await local.dispose();
    }
  }
  for (const mode of ["exact", "int8"]) {
    const native = vectors.map((v) => localLogits(model, hiddenBytes(1024, v), { int8: mode === "int8" }));
    lines.push(`${process.arch === "x64" ? "x86_64" : process.arch}-cli best ${format} ${mode} ${hash(native)}`);
  }
  console.log(lines.join("\n"));
}

// The shards' answers cut per hidden vector: sections where cobordism_protocol's decoder finds
// them (through the wasm module), logits by the shard's row count. A body that is not the
// vectors asked for is a ShardError naming its shard.
import * as wasm from "../dist/client_js.js";
import { shardError } from "./transport.mjs";

/**
 * Where the parts of the `n` vectors lie in answer `a`'s body: `n + 1` byte offsets, vector v
 * from `offsets[v]` to `offsets[v + 1]` (`logits`: the body is all the logits of its rows).
 */
function bounds(a, n, logits) {
  if (logits) {
    if (a.body.length !== 4 * a.rows * n) throw shardError(a, `${a.body.length} bytes for ${n} × ${a.rows} logits`);
    return Array.from({ length: n + 1 }, (_, v) => 4 * a.rows * v);
  }
  try {
    return wasm.sectionBounds(a.body, n);
  } catch (e) {
    throw shardError(a, e.message);
  }
}

/** Concatenates byte arrays. */
export function concat(parts) {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Per vector: the shards' sections of it, concatenated in shard order (what the merges take). */
export function sectionsPerVector(answers, n) {
  const all = answers.map((a) => bounds(a, n, false));
  return Array.from({ length: n }, (_, v) => concat(answers.map((a, i) => a.body.subarray(all[i][v], all[i][v + 1]))));
}

/** Per vector: all its logits, each shard's rows from its first row on. */
export function logitsPerVector(answers, n) {
  const vocab = answers.reduce((s, a) => s + a.rows, 0);
  const all = answers.map((a) => bounds(a, n, true));
  return Array.from({ length: n }, (_, v) => {
    const out = new Float32Array(vocab);
    answers.forEach((a, i) => out.set(new Float32Array(a.body.slice(all[i][v], all[i][v + 1]).buffer), a.rowStart));
    return out;
  });
}

/**
 * The answers to a request that merged several calls, cut into each call's answers (`sizes`:
 * each call's vector count, in request order; `logits`: the form is all logits).
 */
export function split(answers, sizes, logits) {
  const n = sizes.reduce((s, k) => s + k, 0);
  const all = answers.map((a) => bounds(a, n, logits));
  let at = 0;
  return sizes.map((k) => {
    const from = at;
    at += k;
    return answers.map((a, i) => ({ ...a, batch: k, body: a.body.subarray(all[i][from], all[i][at]) }));
  });
}

// The wire contract of cobordism_protocol as the wasm module (../dist) states it: the constants,
// read once it is instantiated (node.mjs and workerd.mjs instantiate it after the modules they
// import are evaluated, so nothing here reads it at import), and the query string of a request.
import * as wasm from "../dist/client_js.js";

let constants;

/**
 * The protocol's constants: `route` and `warmRoute` (paths), `maxBatch` (hidden vectors per
 * request), `maxTopK` (largest K, most tokens), `defaultRetries`, `answerHeaders` (index, shard
 * count, vocabulary, first row, rows, batch, manifest version) and `sessionHeader`.
 */
export const protocol = () =>
  (constants ??= {
    route: wasm.route(),
    warmRoute: wasm.warmRoute(),
    maxBatch: wasm.maxBatch(),
    maxTopK: wasm.maxTopK(),
    defaultRetries: wasm.defaultRetries(),
    answerHeaders: wasm.answerHeaderNames(),
    sessionHeader: wasm.sessionHeaderName(),
  });

/**
 * The query string for `form` ({ tokens, topK, temperature }; empty: all logits) with Gumbel
 * noise `seeds` (one seed: `seed=S`; with `vectors`: vector j draws (seeds[j], vectors[j])) and
 * an adjustments' section of `adjust` bytes after the vectors (undefined: none), written by
 * cobordism_protocol::Query.
 */
export const queryOf = ({ tokens = [], topK = 0, temperature }, precision, seeds = [], vectors = [], adjust = undefined) =>
  wasm.queryString(Uint32Array.from(tokens), topK, BigUint64Array.from(seeds, BigInt), Uint32Array.from(vectors), temperature, precision === "int8", adjust);

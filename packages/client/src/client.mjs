// @cobordism/client: one call per decoding step to the shards of a cobordism lm-head.
//
// A shard answers POST /cobordism-lm-head with its slice's logits or, per hidden vector, a small
// section (docs/API.md): its top-K, its Gumbel-max winner, or the logits of asked tokens, each
// with its log-sum-exp. This client checks the caller's arguments, fans the request out to every
// shard in parallel (transport.mjs: retries, the answers' checks; batcher.mjs: coalescing), and
// merges the answers with the Rust code of cobordism_protocol compiled to wasm (../dist), so its
// results are the Rust CLI's bits and its questions the CLI's: the route, the limits, the top-K
// ladder of a filtered draw, the adjustments' layout (adjust.mjs) and the retry rules are the
// protocol crate's. Options are checked before anything is sent; an unknown one is refused.
import * as wasm from "../dist/client_js.js";
import { ADJUST_OPTIONS, adjustRecord, withSection } from "./adjust.mjs";
import { logitsPerVector, sectionsPerVector } from "./answers.mjs";
import { Batcher } from "./batcher.mjs";
import { protocol, queryOf } from "./protocol.mjs";
import { ShardError, Transport } from "./transport.mjs";

export { ShardError };

/**
 * Throws a TypeError for an option `known` does not list (a misspelt option would be ignored
 * silently otherwise), naming the client's spelling of an OpenAI-style snake_case name.
 */
function checkOptions(options, known) {
  if (typeof options !== "object" || options === null) throw new TypeError("options must be an object");
  for (const name of Object.keys(options)) {
    if (known.includes(name)) continue;
    const camel = name.replace(/_(\w)/g, (_, c) => c.toUpperCase());
    const hint = known.includes(camel) ? `: this client calls it ${camel}` : ` (known: ${known.join(", ")})`;
    throw new TypeError(`unknown option ${name}${hint}`);
  }
}

/**
 * Hidden vectors as one body: a Float32Array (one vector) or an array of them (a batch), with
 * the record of the adjustments in `options` for each of its vectors (null: none).
 */
function body(hidden, options = {}) {
  if (Array.isArray(hidden) && hidden.length > 0 && typeof hidden[0] === "number") {
    throw new TypeError(`a hidden vector is a Float32Array, not an array of ${hidden.length} numbers: pass new Float32Array(hidden)`);
  }
  const batch = Array.isArray(hidden);
  const vectors = batch ? hidden : [hidden];
  const { maxBatch } = protocol();
  if (vectors.length < 1 || vectors.length > maxBatch) throw new RangeError(`1 to ${maxBatch} hidden vectors, not ${vectors.length}`);
  const n = vectors[0].length;
  for (const v of vectors) {
    if (!(v instanceof Float32Array) || v.length !== n || n === 0) throw new TypeError("hidden vectors must be Float32Arrays of one non-zero length");
    const bad = v.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) throw new RangeError(`hidden value ${bad} is ${v[bad]}: every value must be finite`);
  }
  const out = new Float32Array(n * vectors.length);
  vectors.forEach((v, i) => out.set(v, i * n));
  return { bytes: new Uint8Array(out.buffer), n: vectors.length, batch, record: adjustRecord(options) };
}

function u64(seed) {
  let s;
  try {
    s = BigInt(seed);
  } catch {}
  if (s === undefined || s < 0n || s >= 1n << 64n) throw new RangeError(`seed must be an integer from 0 to 2^64 - 1, not ${seed}`);
  return s;
}

/** Throws a RangeError unless the sampling options are valid (the shards' own rule, in wasm). */
function checkSampling(temperature, topK = 0, topP = 0, minP = 0) {
  if (typeof temperature !== "number") throw new RangeError(`temperature must be a number, not ${typeof temperature}`);
  if (!Number.isInteger(topK) || topK < 0 || topK > 2 ** 32 - 1) throw new RangeError(`topK must be a non-negative integer, not ${topK}`);
  for (const [name, v] of [["topP", topP], ["minP", minP]]) {
    if (typeof v !== "number" || Number.isNaN(v)) throw new RangeError(`${name} must be a number, not ${v}`);
  }
  try {
    wasm.checkSampling(temperature, topK, topP, minP);
  } catch (e) {
    throw new RangeError(e.message);
  }
}

/** The shards, shard i at index i: `{ base, fetch }` from `endpoints` (URLs) or `fetchers`. */
function shardsOf(endpoints, fetchers, fetch) {
  if (!!endpoints === !!fetchers) throw new TypeError("give endpoints or fetchers (one per shard)");
  const list = endpoints ?? fetchers;
  if (!Array.isArray(list) || list.length === 0) throw new TypeError("endpoints/fetchers must be a non-empty array");
  return list.map((s, i) => {
    if (endpoints) {
      if (!/^https?:\/\//.test(s)) throw new TypeError(`endpoint ${i}: expected an http(s) URL, not ${s}`);
      return { base: s.replace(/\/+$/, ""), fetch: (url, init) => fetch(url, init) };
    }
    if (typeof s?.fetch !== "function") throw new TypeError(`fetcher ${i} has no fetch method`);
    return { base: `https://shard-${i}`, fetch: (url, init) => s.fetch(url, init) };
  });
}

export class LmHeadClient {
  #transport;
  #batcher;

  /**
   * @param {object} o
   * @param {string[]} [o.endpoints] shard base URLs, shard i at index i
   * @param {{fetch: Function}[]} [o.fetchers] or service bindings (or any object with `fetch`), shard i at index i
   * @param {string} [o.token] the shards' bearer token
   * @param {string} [o.manifestVersion] refuse answers from any other version
   * @param {number} [o.timeoutMs=30000] per request
   * @param {number} [o.retries=5] per shard, after the first attempt (cobordism_protocol::DEFAULT_RETRIES)
   * @param {Function} [o.fetch=globalThis.fetch] with `endpoints`
   * @param {"exact"|"int8"} [o.precision="exact"] the shards' mode (`?precision=`)
   * @param {boolean} [o.coalesce=false] merge calls of the same kind made in one turn of the
   *   event loop into one request per shard (up to 8 vectors): fewer subrequests, same results.
   *   Only for calls of one request, or outside Workers: workerd cancels a request that waits on
   *   another request's fetch.
   * @param {string} [o.session] the session key sent with every call (X-Cobordism-Session): with
   *   object residency and replicas, the same key reaches the same replica of each shard, so
   *   give one per decoding stream (a conversation id) and use it from warm() to the last
   *   token; default: a random key per client
   */
  constructor({ endpoints, fetchers, token, manifestVersion, timeoutMs = 30_000, retries = protocol().defaultRetries, fetch = globalThis.fetch, precision = "exact", coalesce = false, session = crypto.randomUUID() } = {}) {
    if (typeof session !== "string" || session === "") throw new TypeError("session must be a non-empty string");
    if (precision !== "exact" && precision !== "int8") throw new TypeError(`precision must be "exact" or "int8", not ${precision}`);
    const shards = shardsOf(endpoints, fetchers, fetch);
    this.#transport = new Transport({ shards, token, manifestVersion, timeoutMs, retries, session });
    const send = (form, b, seeds, vectors) => {
      const sent = withSection(b);
      return this.#transport.askAll(queryOf(form, precision, seeds, vectors, sent.adjust), sent);
    };
    this.#batcher = new Batcher(send, coalesce);
    Object.assign(this, { shards, token, manifestVersion, timeoutMs, retries, precision, coalesce, session });
  }

  /**
   * Starts every shard loading its slice and resolves as soon as each has answered (at once:
   * a shard loads after its answer). Call it when a session starts, before the prompt's
   * prefill: a cold shard first reads its slice from storage (seconds), and a token waits for
   * the slowest of the shards. Resolves to each shard's state, `"ready"` (resident) or
   * `"loading"`; rejects with a ShardError on what fails at once (a wrong token, endpoints out
   * of shard order, a shard whose last load failed for good), retried like any call when
   * retrying may help. A first call answers before storage has: a missing manifest shows in
   * the calls after it.
   * @returns {Promise<string[]>}
   */
  async warm() {
    const t = this.#transport;
    return Promise.all(
      this.shards.map((_, i) => {
        const url = t.url(i, protocol().warmRoute, queryOf({}, this.precision));
        return t.post(i, url, undefined, async (r) => {
          const said = await r.json();
          if (said.shard_index !== i) throw new ShardError(`shard ${i} (${url}) is shard ${said.shard_index}: give the endpoints in shard order`, { shard: i, url });
          if (said.shard_count !== undefined && said.shard_count !== this.shards.length) {
            throw new ShardError(`shard ${i} (${url}) belongs to a deployment of ${said.shard_count} shards, ${this.shards.length} endpoints given`, { shard: i, url });
          }
          return said.state;
        });
      }),
    );
  }

  /**
   * One token per hidden vector, drawn exactly from softmax(z / temperature) narrowed by topK,
   * topP, minP (0 or absent: off); temperature 0 is greedy. The same seed gives the same token
   * for any number of shards. Use one seed per decoding step. The adjustments (logitBias,
   * presencePenalty, frequencyPenalty, repetitionPenalty over `history`, allowedTokens) change
   * the logits z first, on the shards; the logit and logprob returned are the adjusted ones.
   * @returns {Promise<{token: number, logit: number, logprob: number} | Array<...>>}
   */
  async sample(hidden, options = {}) {
    checkOptions(options, ["temperature", "topK", "topP", "minP", "seed", ...ADJUST_OPTIONS]);
    const { temperature = 1, topK = 0, topP = 0, minP = 0, seed = 0 } = options;
    const b = body(hidden, options);
    if (temperature === 0) return this.#greedy(b);
    checkSampling(temperature, topK, topP, minP);
    const s = u64(seed);
    const filters = { temperature, topK, topP, minP };
    const out = !topK && !topP && !minP ? await this.#plain(b, temperature, s) : await this.#filtered(b, filters, s);
    return b.batch ? out : out[0];
  }

  /** Each vector's most likely token (ties: the smaller id), from each shard's top-1. */
  async #greedy(b) {
    const tops = await this.#topK(b, 1);
    const best = ({ entries }) => {
      if (entries.length === 0) throw new ShardError("the shards sent no token: every top-1 section is empty");
      return entries[0];
    };
    return b.batch ? tops.map(best) : best(tops[0]);
  }

  /** Each vector's Gumbel-max token from the shards' winners. */
  async #plain(b, temperature, seed) {
    const answers = await this.#batcher.ask({ temperature }, b, seed);
    return sectionsPerVector(answers, b.n).map((bytes, v) => wasm.mergeWinners(bytes, answers.length, temperature, seed, v));
  }

  /**
   * Each vector's token under the filters: from the union of the shards' top-K for each K of
   * the protocol's ladder until it decides, else from all the logits (as the CLI draws).
   */
  async #filtered(b, { temperature, topK, topP, minP }, seed) {
    const out = new Array(b.n);
    let pending = [...out.keys()];
    for (const k of wasm.topKLadder(topK)) {
      const answers = await this.#batcher.ask({ topK: k, temperature }, b);
      const rows = Uint32Array.from(answers, (a) => a.rows);
      const vectors = sectionsPerVector(answers, b.n);
      pending = pending.filter((v) => {
        const drawn = wasm.sample(vectors[v], rows, temperature, seed, topK, topP, minP, v);
        if ("undecided" in drawn) return true;
        out[v] = drawn;
        return false;
      });
      if (pending.length === 0) return out;
    }
    const logits = await this.#logits(b);
    for (const v of pending) out[v] = wasm.sampleAll(logits[v], temperature, seed, topK, topP, minP, v);
    return out;
  }

  /**
   * The k most likely tokens (k ≤ 1024) with logits and log-probabilities over the whole
   * vocabulary; ties by token id. With adjustments (`options`: see sample), of the adjusted
   * logits: a token outside allowedTokens or banned has logit and logprob -Infinity.
   * @returns {Promise<{entries: {token: number, logit: number, logprob: number}[], logSumExp: number} | Array<...>>}
   */
  async topK(hidden, k, options = {}) {
    checkOptions(options, ADJUST_OPTIONS);
    const { maxTopK } = protocol();
    if (!Number.isInteger(k) || k < 1 || k > maxTopK) throw new RangeError(`k must be an integer from 1 to ${maxTopK}`);
    const b = body(hidden, options);
    const out = await this.#topK(b, k);
    return b.batch ? out : out[0];
  }

  /** Each vector's merged top-k. */
  async #topK(b, k) {
    const answers = await this.#batcher.ask({ topK: k, temperature: 1 }, b);
    return sectionsPerVector(answers, b.n).map((bytes) => wasm.topK(bytes, answers.length, k));
  }

  /**
   * log p(token) at `temperature` (default 1) for each of `tokens`, in the order given; with
   * adjustments (see sample), of the adjusted logits (-Infinity for a token outside
   * allowedTokens or banned), as OpenAI's logprobs with logit_bias.
   * @returns {Promise<number[] | number[][]>}
   */
  async logprobs(hidden, tokens, options = {}) {
    checkOptions(options, ["temperature", ...ADJUST_OPTIONS]);
    const { temperature = 1 } = options;
    const { maxTopK } = protocol();
    if (!Array.isArray(tokens) || tokens.length < 1 || tokens.length > maxTopK || !tokens.every((t) => Number.isInteger(t) && t >= 0 && t < 2 ** 32)) {
      throw new RangeError(`tokens must be 1 to ${maxTopK} token ids`);
    }
    checkSampling(temperature);
    const b = body(hidden, options);
    const answers = await this.#batcher.ask({ tokens, temperature }, b);
    const out = sectionsPerVector(answers, b.n).map((bytes) => {
      const lp = Array.from(wasm.logprobs(bytes, answers.length, Uint32Array.from(tokens), temperature));
      lp.forEach((l, i) => {
        if (Number.isNaN(l)) throw new ShardError(`token ${tokens[i]} is outside the vocabulary the shards serve`);
      });
      return lp;
    });
    return b.batch ? out : out[0];
  }

  /**
   * All logits (for debugging: 4 bytes per token per vector), adjusted when `options` say so
   * (see sample). @returns {Promise<Float32Array | Float32Array[]>}
   */
  async logits(hidden, options = {}) {
    checkOptions(options, ADJUST_OPTIONS);
    const b = body(hidden, options);
    const out = await this.#logits(b);
    return b.batch ? out : out[0];
  }

  /** Each vector's logits. */
  async #logits(b) {
    const answers = await this.#batcher.ask({}, b);
    return logitsPerVector(answers, b.n);
  }
}

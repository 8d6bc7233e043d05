// @cobordism/client: one call per decoding step to the shards of a cobordism lm-head.
//
// A shard answers POST /cobordism-lm-head with its slice's logits or, per hidden vector, a small
// section (docs/API.md): its top-K, its Gumbel-max winner, or the logits of asked tokens, each
// with its log-sum-exp. This client fans the request out to every shard in parallel, retries
// only what can succeed on retry (network errors, timeouts, the shard's 503s that carry
// Retry-After, the platform's own 429/5xx: cobordism_protocol::worth_retrying), checks that the
// answers tile the whole vocabulary (as many as the shards' X-Shard-Count, shard i at index i,
// rows contiguous from 0 to X-Vocab: cobordism_protocol::check_tiling) and come from one manifest
// version, and merges them with the Rust code of cobordism_protocol::sampling compiled to wasm
// (../dist), so its results are the Rust CLI's bits. Options are checked before anything is sent.
import * as math from "../dist/client_js.js";

const ROUTE = "/cobordism-lm-head";
const MAX_BATCH = 8;
const MAX_TOP_K = 1024;
const FIRST_TOP_K = 64;
/** The answer headers' names, from cobordism_protocol::wire through the wasm module (read once
 * it is instantiated, not at import). */
let answerHeaders;
const answerHeaderNames = () => (answerHeaders ??= math.answerHeaderNames());
let sessionHeader;
const sessionHeaderName = () => (sessionHeader ??= math.sessionHeaderName());
/**
 * The query string for `form` ({ tokens, topK, temperature }; empty: all logits) with Gumbel
 * noise `seeds` (one seed: `seed=S`; with `vectors`: vector j draws (seeds[j], vectors[j])),
 * written by cobordism_protocol::Query through the wasm module.
 */
const queryOf = ({ tokens = [], topK = 0, temperature }, precision, seeds = [], vectors = []) =>
  math.queryString(Uint32Array.from(tokens), topK, BigUint64Array.from(seeds, BigInt), Uint32Array.from(vectors), temperature, precision === "int8");

/**
 * A failure of one shard, or of the answers taken together. `status` and `code` are the shard's
 * HTTP status and JSON error code when it answered; `retryable` says whether the same call may
 * succeed later (it was retried already: the shard was loading, busy or unreachable), and is
 * false for what only a fix can change (a wrong request, token, endpoint list or deployment).
 */
export class ShardError extends Error {
  constructor(message, { shard, url, status, code, retryable = false } = {}) {
    super(message);
    this.name = "ShardError";
    Object.assign(this, { shard, url, status, code, retryable });
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Hidden vectors as one body: a Float32Array (one vector) or an array of them (a batch). */
function body(hidden) {
  if (Array.isArray(hidden) && hidden.length > 0 && typeof hidden[0] === "number") {
    throw new TypeError(`a hidden vector is a Float32Array, not an array of ${hidden.length} numbers: pass new Float32Array(hidden)`);
  }
  const batch = Array.isArray(hidden);
  const vectors = batch ? hidden : [hidden];
  if (vectors.length < 1 || vectors.length > MAX_BATCH) throw new RangeError(`1 to ${MAX_BATCH} hidden vectors, not ${vectors.length}`);
  const n = vectors[0].length;
  for (const v of vectors) {
    if (!(v instanceof Float32Array) || v.length !== n || n === 0) throw new TypeError("hidden vectors must be Float32Arrays of one non-zero length");
    const bad = v.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) throw new RangeError(`hidden value ${bad} is ${v[bad]}: every value must be finite`);
  }
  const out = new Float32Array(n * vectors.length);
  vectors.forEach((v, i) => out.set(v, i * n));
  return { bytes: new Uint8Array(out.buffer), n: vectors.length, batch };
}

/** Splits a section-form body into its `n` sections. */
function splitSections(bytes, n) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = [];
  let at = 0;
  for (let v = 0; v < n; v++) {
    if (at + 12 > bytes.length) throw new Error(`section ${v} is missing`);
    const len = 12 + 8 * view.getUint32(at, true);
    if (at + len > bytes.length) throw new Error(`section ${v} is truncated`);
    out.push(bytes.subarray(at, at + len));
    at += len;
  }
  if (at !== bytes.length) throw new Error(`${bytes.length - at} bytes after ${n} sections`);
  return out;
}

/** Concatenates byte arrays. */
function concat(parts) {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** `[token, logit, logprob]` from the wasm as an object. */
const sampled = ([token, logit, logprob]) => ({ token, logit, logprob });

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
    math.checkSampling(temperature, topK, topP, minP);
  } catch (e) {
    throw new RangeError(e.message);
  }
}

export class LmHeadClient {
  /**
   * @param {object} o
   * @param {string[]} [o.endpoints] shard base URLs, shard i at index i
   * @param {{fetch: Function}[]} [o.fetchers] or service bindings (or any object with `fetch`), shard i at index i
   * @param {string} [o.token] the shards' bearer token
   * @param {string} [o.manifestVersion] refuse answers from any other version
   * @param {number} [o.timeoutMs=30000] per request
   * @param {number} [o.retries=4] per shard, after the first attempt
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
  constructor({ endpoints, fetchers, token, manifestVersion, timeoutMs = 30_000, retries = 4, fetch = globalThis.fetch, precision = "exact", coalesce = false, session = crypto.randomUUID() } = {}) {
    if (typeof session !== "string" || session === "") throw new TypeError("session must be a non-empty string");
    if (precision !== "exact" && precision !== "int8") throw new TypeError(`precision must be "exact" or "int8", not ${precision}`);
    if (!!endpoints === !!fetchers) throw new TypeError("give endpoints or fetchers (one per shard)");
    const list = endpoints ?? fetchers;
    if (!Array.isArray(list) || list.length === 0) throw new TypeError("endpoints/fetchers must be a non-empty array");
    this.shards = list.map((s, i) => {
      if (endpoints) {
        if (!/^https?:\/\//.test(s)) throw new TypeError(`endpoint ${i}: expected an http(s) URL, not ${s}`);
        return { url: `${s.replace(/\/+$/, "")}${ROUTE}`, fetch: (url, init) => fetch(url, init) };
      }
      if (typeof s?.fetch !== "function") throw new TypeError(`fetcher ${i} has no fetch method`);
      return { url: `https://shard-${i}${ROUTE}`, fetch: (url, init) => s.fetch(url, init) };
    });
    Object.assign(this, { token, manifestVersion, timeoutMs, retries, precision, coalesce, session });
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
    return Promise.all(
      this.shards.map((s, i) => {
        const q = queryOf({}, this.precision);
        const url = `${s.url}/warm${q ? `?${q}` : ""}`;
        return this.#post(i, url, undefined, async (r) => {
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
   * for any number of shards. Use one seed per decoding step.
   * @returns {Promise<{token: number, logit: number, logprob: number} | Array<...>>}
   */
  async sample(hidden, { temperature = 1, topK = 0, topP = 0, minP = 0, seed = 0 } = {}) {
    const b = body(hidden);
    if (temperature !== 0) checkSampling(temperature, topK, topP, minP);
    let out;
    if (temperature === 0) {
      const tops = await this.topK(hidden, 1);
      const greedy = (t) => ({ ...t.entries[0] });
      return b.batch ? tops.map(greedy) : greedy(tops);
    }
    const s = u64(seed);
    if (!topK && !topP && !minP) {
      const answers = await this.#ask({ temperature }, b, s);
      out = this.#perVector(answers, b.n, (bytes, v) => sampled(math.mergeWinners(bytes, answers.length, temperature, s, v)));
      return b.batch ? out : out[0];
    }
    out = new Array(b.n);
    let pending = [...out.keys()];
    for (const k of [Math.min(MAX_TOP_K, Math.max(FIRST_TOP_K, topK)), MAX_TOP_K]) {
      const answers = await this.#ask({ topK: k, temperature }, b);
      const rows = Uint32Array.from(answers, (a) => a.rows);
      const sections = answers.map((a) => splitSections(a.body, b.n));
      pending = pending.filter((v) => {
        try {
          out[v] = sampled(math.sample(concat(sections.map((s) => s[v])), rows, temperature, s, topK, topP, minP, v));
          return false;
        } catch (e) {
          if (!String(e.message).startsWith("undecided:")) throw e;
          return true;
        }
      });
      if (pending.length === 0 || k === MAX_TOP_K) break;
    }
    if (pending.length > 0) {
      const all = await this.logits(hidden);
      const vectors = b.batch ? all : [all];
      for (const v of pending) out[v] = sampled(math.sampleAll(vectors[v], temperature, s, topK, topP, minP, v));
    }
    return b.batch ? out : out[0];
  }

  /**
   * The k most likely tokens (k ≤ 1024) with logits and log-probabilities over the whole
   * vocabulary; ties by token id.
   * @returns {Promise<{entries: {token: number, logit: number, logprob: number}[], logSumExp: number} | Array<...>>}
   */
  async topK(hidden, k) {
    if (!Number.isInteger(k) || k < 1 || k > MAX_TOP_K) throw new RangeError(`k must be an integer from 1 to ${MAX_TOP_K}`);
    const b = body(hidden);
    const answers = await this.#ask({ topK: k, temperature: 1 }, b);
    const out = this.#perVector(answers, b.n, (bytes) => {
      const merged = math.mergeTopK(bytes, answers.length, k);
      const lse = math.logSumExp(bytes, answers.length);
      const view = new DataView(merged.buffer, merged.byteOffset, merged.byteLength);
      const entries = [];
      for (let e = 0; e < view.getUint32(0, true); e++) {
        const token = view.getUint32(12 + 8 * e, true);
        const logit = view.getFloat32(16 + 8 * e, true);
        entries.push({ token, logit, logprob: logit - lse });
      }
      return { entries, logSumExp: lse };
    });
    return b.batch ? out : out[0];
  }

  /**
   * log p(token) at `temperature` (default 1) for each of `tokens`, in the order given.
   * @returns {Promise<number[] | number[][]>}
   */
  async logprobs(hidden, tokens, { temperature = 1 } = {}) {
    if (!Array.isArray(tokens) || tokens.length < 1 || tokens.length > MAX_TOP_K || !tokens.every((t) => Number.isInteger(t) && t >= 0 && t < 2 ** 32)) {
      throw new RangeError(`tokens must be 1 to ${MAX_TOP_K} token ids`);
    }
    checkSampling(temperature);
    const b = body(hidden);
    const answers = await this.#ask({ tokens, temperature }, b);
    const out = this.#perVector(answers, b.n, (bytes) => {
      const lp = Array.from(math.logprobs(bytes, answers.length, Uint32Array.from(tokens), temperature));
      lp.forEach((l, i) => {
        if (Number.isNaN(l)) throw new ShardError(`token ${tokens[i]} is outside the vocabulary the shards serve`);
      });
      return lp;
    });
    return b.batch ? out : out[0];
  }

  /** All logits (for debugging: 4 bytes per token per vector). @returns {Promise<Float32Array | Float32Array[]>} */
  async logits(hidden) {
    const b = body(hidden);
    const answers = await this.#ask({}, b);
    const vocab = answers.reduce((s, a) => s + a.rows, 0);
    const out = [];
    for (let v = 0; v < b.n; v++) {
      const all = new Float32Array(vocab);
      for (const a of answers) {
        if (a.body.length !== 4 * a.rows * b.n) throw new ShardError(`shard ${a.shard}: ${a.body.length} bytes for ${b.n} × ${a.rows} logits`, { shard: a.shard, url: a.url });
        const bytes = a.body.slice(4 * a.rows * v, 4 * a.rows * (v + 1));
        all.set(new Float32Array(bytes.buffer), a.rowStart);
      }
      out.push(all);
    }
    return b.batch ? out : out[0];
  }

  /** Per vector: the shards' sections of that vector concatenated, through `f(bytes, v)`. */
  #perVector(answers, n, f) {
    const sections = answers.map((a) => {
      try {
        return splitSections(a.body, n);
      } catch (e) {
        throw new ShardError(`shard ${a.shard} (${a.url}): ${e.message}`, { shard: a.shard, url: a.url });
      }
    });
    return Array.from({ length: n }, (_, v) => f(concat(sections.map((s) => s[v])), v));
  }

  /** Calls waiting for the next turn of the event loop, by kind (`coalesce`). */
  #waiting = new Map();

  /**
   * Every shard's answer for the vectors of `b` in reply form `form` (`seed`: plain sampling's).
   * With `coalesce`, the calls of one kind (same form, same vector length) made in this turn
   * of the event loop share requests of up to 8 vectors; each call gets its own part of every
   * answer, and sampled vectors keep their own noise (`seeds=SEED:VECTOR,…`), so the results
   * are those of the calls alone.
   */
  #ask(form, b, seed) {
    const sampling = seed !== undefined;
    if (!this.coalesce) return this.#askNow(queryOf(form, this.precision, sampling ? [seed] : []), b);
    const key = `${sampling ? "seed" : ""}|${b.bytes.length / b.n}|${JSON.stringify(form)}`;
    return new Promise((resolve, reject) => {
      let calls = this.#waiting.get(key);
      if (!calls) {
        calls = [];
        this.#waiting.set(key, calls);
        setTimeout(() => {
          this.#waiting.delete(key);
          this.#flush(form, sampling, calls);
        }, 0);
      }
      calls.push({ b, seed, resolve, reject });
    });
  }

  /** Sends waiting calls of one kind, packed in order into requests of at most 8 vectors. */
  #flush(form, sampling, calls) {
    const batches = [];
    for (const call of calls) {
      const last = batches.at(-1);
      if (last && last.n + call.b.n <= MAX_BATCH) {
        last.calls.push(call);
        last.n += call.b.n;
      } else batches.push({ calls: [call], n: call.b.n });
    }
    const alone = (c) => this.#askNow(queryOf(form, this.precision, sampling ? [c.seed] : []), c.b);
    const logits = !sampling && !form.topK && !form.tokens;
    for (const { calls, n } of batches) {
      if (calls.length === 1) {
        alone(calls[0]).then(calls[0].resolve, calls[0].reject);
        continue;
      }
      const seeds = sampling ? calls.flatMap((c) => Array(c.b.n).fill(c.seed)) : [];
      const vectors = sampling ? calls.flatMap((c) => [...Array(c.b.n).keys()]) : [];
      const merged = { bytes: concat(calls.map((c) => c.b.bytes)), n };
      this.#askNow(queryOf(form, this.precision, seeds, vectors), merged).then(
        (answers) => {
          let at = 0;
          for (const c of calls) {
            const part = (a) => (logits ? a.body.subarray(4 * a.rows * at, 4 * a.rows * (at + c.b.n)) : concat(splitSections(a.body, n).slice(at, at + c.b.n)));
            c.resolve(answers.map((a) => ({ ...a, batch: c.b.n, body: part(a) })));
            at += c.b.n;
          }
        },
        (e) => {
          // A shard refused the merged request (e.g. one caller's products overflow): each
          // call alone, so that it gets exactly its own answer or error.
          if (e instanceof ShardError && e.status >= 400 && e.status < 500) {
            for (const c of calls) alone(c).then(c.resolve, c.reject);
          } else for (const c of calls) c.reject(e);
        },
      );
    }
  }

  /** Every shard's answer; retried as a whole while shards disagree on the version (an update). */
  async #askNow(query, b) {
    for (let round = 0; ; round++) {
      const answers = await Promise.all(this.shards.map((s, i) => this.#askShard(i, query, b)));
      const versions = new Set(answers.map((a) => a.version));
      if (versions.size > 1 && round < this.retries) {
        await sleep(500 * 2 ** round);
        continue;
      }
      this.#check(answers, b.n);
      return answers;
    }
  }

  /** Refuses answers that do not make up the whole vocabulary of one manifest version. */
  #check(answers, n) {
    const first = answers[0].version;
    for (const a of answers) {
      const where = { shard: a.shard, url: a.url };
      if (a.batch !== n) throw new ShardError(`shard ${a.shard} (${a.url}) answered ${a.batch} vectors, asked ${n}`, where);
      if (this.manifestVersion && a.version !== this.manifestVersion) {
        throw new ShardError(`shard ${a.shard} (${a.url}) serves manifest version ${a.version}, expected ${this.manifestVersion}`, where);
      }
      if (a.version !== first) throw new ShardError(`shard ${a.shard} (${a.url}) serves manifest version ${a.version}, shard 0 serves ${first}`, where);
    }
    const column = (key) => Uint32Array.from(answers, (a) => a[key]);
    try {
      math.checkTiling(column("index"), column("shardCount"), column("rowStart"), column("rows"), column("vocab"));
    } catch (e) {
      throw new ShardError(`the shards' answers do not make up the vocabulary: ${e.message}`);
    }
  }

  /** A successful answer: its headers (each a required number, else the shard is refused) and body. */
  async #answer(i, url, r) {
    const number = (name) => {
      const v = r.headers.get(name);
      if (v === null || !/^\d+$/.test(v.trim())) {
        throw new ShardError(`shard ${i} (${url}): header ${name} is ${v === null ? "missing" : JSON.stringify(v)} (a shard older than this client? deploy the shards again)`, { shard: i, url });
      }
      return Number(v);
    };
    const [index, shardCount, vocab, rowStart, rows, batch, version] = answerHeaderNames();
    return {
      shard: i,
      url,
      index: number(index),
      shardCount: number(shardCount),
      vocab: number(vocab),
      rowStart: number(rowStart),
      rows: number(rows),
      batch: number(batch),
      version: r.headers.get(version),
      body: new Uint8Array(await r.arrayBuffer()),
    };
  }

  async #askShard(i, query, b) {
    const shard = this.shards[i];
    const url = query ? `${shard.url}?${query}` : shard.url;
    return this.#post(i, url, b.bytes, (r) => this.#answer(i, url, r));
  }

  /** POSTs `body` to shard i until it answers 2xx, then `read(response)`; retries what is worth it. */
  async #post(i, url, body, read) {
    const shard = this.shards[i];
    const headers = { "Content-Type": "application/octet-stream" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    headers[sessionHeaderName()] = this.session;
    for (let attempt = 0; ; attempt++) {
      let failure;
      let wait = 200 * 2 ** attempt;
      try {
        const r = await shard.fetch(url, { method: "POST", body, headers, signal: AbortSignal.timeout(this.timeoutMs) });
        if (r.ok) return await read(r);
        const text = await r.text();
        let code, detail;
        try {
          ({ error: code, detail } = JSON.parse(text));
        } catch {}
        const retryable = math.worthRetrying(r.status, typeof code === "string", r.headers.has("retry-after"));
        const hint = r.status === 401 ? " (give the client the shards' bearer token: new LmHeadClient({ token }))" : "";
        const said = typeof code === "string" ? `${code}: ${detail}` : text.slice(0, 300);
        failure = new ShardError(`shard ${i} (${url}): HTTP ${r.status} ${said}${hint}`, { shard: i, url, status: r.status, code, retryable });
        if (!retryable) throw failure;
        const after = Number(r.headers.get("retry-after"));
        if (Number.isFinite(after) && after >= 0 && r.headers.has("retry-after")) wait = Math.min(after * 1000, 30_000);
      } catch (e) {
        if (e instanceof ShardError && !e.retryable) throw e;
        failure ??= new ShardError(`shard ${i} (${url}): ${e.name === "TimeoutError" ? `no answer in ${this.timeoutMs} ms` : e.message}`, { shard: i, url, retryable: true });
      }
      if (attempt >= this.retries) {
        failure.message += ` (after ${attempt + 1} attempts)`;
        throw failure;
      }
      await sleep(wait);
    }
  }
}

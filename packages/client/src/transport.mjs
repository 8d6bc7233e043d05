// The client's transport: one POST per shard with the caller's token and session key, retried
// only when retrying can help (cobordism_protocol::worth_retrying, after the shard's Retry-After
// or the protocol's backoff: retry_wait), and the answers' headers read and checked: one
// manifest version, the whole vocabulary (cobordism_protocol::check_tiling).
import * as wasm from "../dist/client_js.js";
import { protocol } from "./protocol.mjs";

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

/** The ShardError of answer `a`'s shard, its message prefixed with the shard and its URL. */
export const shardError = (a, message) => new ShardError(`shard ${a.shard} (${a.url}): ${message}`, { shard: a.shard, url: a.url });

/** While the shards answer from different manifest versions (an update rolling out), the whole
 * request is asked again after this wait, doubled per round. */
const VERSION_WAIT_MS = 500;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Transport {
  /**
   * @param {object} o
   * @param {{base: string, fetch: Function}[]} o.shards shard i's base URL and fetch, at index i
   * @param {string} [o.token] @param {string} [o.manifestVersion] @param {number} o.timeoutMs
   * @param {number} o.retries @param {string} o.session (see LmHeadClient)
   */
  constructor({ shards, token, manifestVersion, timeoutMs, retries, session }) {
    Object.assign(this, { shards, token, manifestVersion, timeoutMs, retries, session });
  }

  /** Shard i's URL for `path` and `query`. */
  url(i, path, query) {
    return `${this.shards[i].base}${path}${query ? `?${query}` : ""}`;
  }

  /**
   * Every shard's answer to `query` for the hidden vectors `b` ({ bytes, n }): `{ shard, url,
   * index, shardCount, vocab, rowStart, rows, batch, version, body }`, in shard order, checked
   * to be one manifest version's whole vocabulary; asked again while the shards disagree on the
   * version (an update).
   */
  async askAll(query, b) {
    for (let round = 0; ; round++) {
      const answers = await Promise.all(this.shards.map((_, i) => this.#askShard(i, query, b)));
      const versions = new Set(answers.map((a) => a.version));
      if (versions.size > 1 && round < this.retries) {
        await sleep(VERSION_WAIT_MS * 2 ** round);
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
      if (a.batch !== n) throw shardError(a, `answered ${a.batch} vectors, asked ${n}`);
      if (this.manifestVersion && a.version !== this.manifestVersion) {
        throw shardError(a, `serves manifest version ${a.version}, expected ${this.manifestVersion}`);
      }
      if (a.version !== first) throw shardError(a, `serves manifest version ${a.version}, shard 0 serves ${first}`);
    }
    const column = (key) => Uint32Array.from(answers, (a) => a[key]);
    try {
      wasm.checkTiling(column("index"), column("shardCount"), column("rowStart"), column("rows"), column("vocab"));
    } catch (e) {
      throw new ShardError(`the shards' answers do not make up the vocabulary: ${e.message}`);
    }
  }

  /** A successful answer: its headers (each a required number, else the shard is refused) and body. */
  async #answer(i, url, r) {
    const where = { shard: i, url };
    const number = (name) => {
      const v = r.headers.get(name);
      if (v === null || !/^\d+$/.test(v.trim())) {
        throw shardError(where, `header ${name} is ${v === null ? "missing" : JSON.stringify(v)} (a shard older than this client? deploy the shards again)`);
      }
      return Number(v);
    };
    const [index, shardCount, vocab, rowStart, rows, batch, version] = protocol().answerHeaders;
    return {
      ...where,
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
    const url = this.url(i, protocol().route, query);
    return this.post(i, url, b.bytes, (r) => this.#answer(i, url, r));
  }

  /** POSTs `body` to shard i until it answers 2xx, then `read(response)`; retries what is worth it. */
  async post(i, url, body, read) {
    const headers = { "Content-Type": "application/octet-stream" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    headers[protocol().sessionHeader] = this.session;
    for (let attempt = 0; ; attempt++) {
      let failure, retryAfter;
      try {
        const r = await this.shards[i].fetch(url, { method: "POST", body, headers, signal: AbortSignal.timeout(this.timeoutMs) });
        if (r.ok) return await read(r);
        retryAfter = r.headers.get("retry-after") ?? undefined;
        failure = await refusal(i, url, r);
        if (!failure.retryable) throw failure;
      } catch (e) {
        if (e instanceof ShardError && !e.retryable) throw e;
        failure ??= new ShardError(`shard ${i} (${url}): ${e.name === "TimeoutError" ? `no answer in ${this.timeoutMs} ms` : e.message}`, { shard: i, url, retryable: true });
      }
      if (attempt >= this.retries) {
        failure.message += ` (after ${attempt + 1} attempts)`;
        throw failure;
      }
      await sleep(wasm.retryWaitMs(attempt + 1, retryAfter));
    }
  }
}

/** The ShardError for a non-2xx answer: the shard's code and detail when it sent them. */
async function refusal(i, url, r) {
  const text = await r.text();
  let code, detail;
  try {
    ({ error: code, detail } = JSON.parse(text));
  } catch {}
  const retryable = wasm.worthRetrying(r.status, typeof code === "string", r.headers.has("retry-after"));
  const hint = r.status === 401 ? " (give the client the shards' bearer token: new LmHeadClient({ token }))" : "";
  const said = typeof code === "string" ? `${code}: ${detail}` : text.slice(0, 300);
  return new ShardError(`shard ${i} (${url}): HTTP ${r.status} ${said}${hint}`, { shard: i, url, status: r.status, code, retryable });
}

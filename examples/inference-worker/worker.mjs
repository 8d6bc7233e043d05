// An inference Worker's last step: a hidden state in, a sampled token out, through the eight
// lm-head shards. POST the hidden vector (little-endian f32) to /next-token?temperature=…&top_p=…
// &seed=…[&precision=int8][&session=ID]; the answer is {"token", "logprob"}. The logits may be
// adjusted first, with OpenAI's and llama.cpp's names: logit_bias=ID:B,… (B = -inf bans),
// presence_penalty, frequency_penalty, repetition_penalty over history=ID,… (the tokens so far),
// and allowed_tokens=ID,… (ids and ranges A..B: a grammar's set for this step). The same
// parameters may come as JSON instead, with the hidden vector (Content-Type: application/json,
// {"hidden": [floats], "temperature": 0.8, "history": [ids], "logit_bias": {"ID": B}, …}): a
// long history does not fit Cloudflare's 16 KB URLs. POST /session[?id=ID]
// starts a session: it warms the shards (they load their slices while the prompt's prefill
// runs), answering {"shards": ["ready" | "loading", …]}. With object residency and replicas, the
// session's ID picks the shards' replicas: give the same one from /session to the last token.
// See README.md.
//
// A caller's mistake (a malformed parameter, a hidden vector the shards refuse) is answered with
// 400 and what was wrong; a failure of the shards with 502 (503 when retrying later may help).
import { LmHeadClient, ShardError } from "@cobordism/client";

/** One client per precision, made on first use and kept by the isolate. */
const clients = {};

/** A caller's mistake. */
class BadRequest extends Error {}

/** The query's sampling options, checked: numbers where numbers belong, seed a u64. */
function options(q) {
  const list = (name) => q.get(name).split(",").map((item) => item.trim());
  const id = (name, text) => {
    if (!/^\d{1,10}$/.test(text)) throw new BadRequest(`${name} must list token ids, not ${JSON.stringify(text)}`);
    return Number(text);
  };
  const ids = (name) => (q.has(name) ? list(name).map((text) => id(name, text)) : undefined);
  const idsAndRanges = (name) => {
    if (!q.has(name)) return undefined;
    const out = [];
    for (const item of list(name)) {
      const [a, b] = item.split("..");
      const [start, end] = b === undefined ? [id(name, a), id(name, a) + 1] : [id(name, a), id(name, b)];
      if (out.length + end - start > 1 << 24) throw new BadRequest(`${name} holds more than 2^24 tokens`);
      for (let t = start; t < end; t++) out.push(t);
    }
    return out;
  };
  const bias = (pair) => {
    const [token, value] = pair.split(":");
    const b = value?.trim() === "-inf" ? -Infinity : Number(value);
    if (value === undefined || value.trim() === "" || Number.isNaN(b)) throw new BadRequest(`logit_bias must be ID:BIAS pairs, not ${JSON.stringify(pair)}`);
    return [id("logit_bias", token), b];
  };
  const number = (name, fallback) => {
    if (!q.has(name)) return fallback;
    const text = q.get(name).trim();
    const value = Number(text);
    if (text === "" || !Number.isFinite(value)) throw new BadRequest(`${name} must be a number, not ${JSON.stringify(q.get(name))}`);
    return value;
  };
  const seed = q.get("seed") ?? "0";
  if (!/^\d{1,20}$/.test(seed) || BigInt(seed) >= 1n << 64n) throw new BadRequest(`seed must be an integer from 0 to 2^64 - 1, not ${JSON.stringify(seed)}`);
  const adjustments = {
    logitBias: q.has("logit_bias") ? Object.fromEntries(list("logit_bias").map(bias)) : undefined,
    presencePenalty: number("presence_penalty", undefined),
    frequencyPenalty: number("frequency_penalty", undefined),
    repetitionPenalty: number("repetition_penalty", undefined),
    history: ids("history"),
    allowedTokens: idsAndRanges("allowed_tokens"),
  };
  return {
    temperature: number("temperature", 1),
    topK: number("top_k", 0),
    topP: number("top_p", 0),
    minP: number("min_p", 0),
    seed: BigInt(seed),
    ...Object.fromEntries(Object.entries(adjustments).filter(([, v]) => v !== undefined)),
  };
}

/**
 * The request's hidden vector and parameters: the body's f32 and the query, or a JSON body's
 * `hidden` and its other fields, read as the query's values (lists comma-joined, `logit_bias`
 * as ID:B pairs).
 */
async function readRequest(request, query) {
  if (!(request.headers.get("content-type") ?? "").startsWith("application/json")) {
    const bytes = await request.arrayBuffer();
    if (bytes.byteLength === 0 || bytes.byteLength % 4 !== 0) throw new BadRequest("send the hidden state as little-endian f32");
    return { hidden: new Float32Array(bytes), q: query };
  }
  let json;
  try {
    json = await request.json();
  } catch (e) {
    throw new BadRequest(`the body is not JSON: ${e.message}`);
  }
  const { hidden, ...fields } = json ?? {};
  if (!Array.isArray(hidden) || hidden.length === 0 || !hidden.every((x) => typeof x === "number")) {
    throw new BadRequest("a JSON body needs hidden: an array of numbers");
  }
  const text = (v) => {
    if (Array.isArray(v)) return v.join(",");
    if (typeof v === "object" && v !== null) return Object.entries(v).map(([t, b]) => `${t}:${b}`).join(",");
    return String(v);
  };
  const q = new URLSearchParams(query);
  for (const [name, value] of Object.entries(fields)) q.set(name, text(value));
  return { hidden: new Float32Array(hidden), q };
}

/** The answer to a failure: the caller's mistakes are 400s, the shards' failures 502/503. */
function failure(e) {
  const caller = e instanceof BadRequest || e instanceof RangeError || e instanceof TypeError
    // The shards refused the hidden vector itself (its length, a NaN): the caller's doing too.
    || (e instanceof ShardError && e.status >= 400 && e.status < 500 && e.status !== 401 && e.status !== 403);
  if (caller) return Response.json({ error: "bad_request", detail: e.message }, { status: 400 });
  if (!(e instanceof ShardError)) throw e;
  const status = e.retryable ? 503 : 502;
  return Response.json({ error: "shard_error", detail: e.message, retryable: e.retryable }, { status, headers: e.retryable ? { "Retry-After": "1" } : {} });
}

/** The client of `precision` for `session` (one kept per precision for calls without one). */
function client(env, precision, session) {
  // No client `coalesce` here: it would merge calls of different requests, and workerd
  // cancels a request that waits on another request's fetch. The shards coalesce instead.
  const make = () => new LmHeadClient({ endpoints: env.SHARD_URLS.split(",").map((u) => u.trim()), token: env.SHARD_TOKEN, precision, session });
  return session === undefined ? (clients[precision] ??= make()) : make();
}

/** The caller's session ID (`name` in the query), if any. */
function sessionOf(q, name) {
  const id = q.get(name);
  if (id === null) return undefined;
  if (!/^[\w.:-]{1,128}$/.test(id)) throw new BadRequest(`${name} must be 1 to 128 letters, digits or ._:-, not ${JSON.stringify(id)}`);
  return id;
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const path = url.pathname;
    if (request.method === "POST" && path === "/session") {
      // A session's first call, before its prompt's prefill: every shard starts loading its
      // slice now, so that the first token, seconds later, finds them resident. (A Worker that
      // runs the prefill itself calls client.warm() first thing and awaits it after.)
      try {
        return Response.json({ shards: await client(env, "exact", sessionOf(url.searchParams, "id")).warm() });
      } catch (e) {
        return failure(e);
      }
    }
    if (request.method !== "POST" || path !== "/next-token") {
      return new Response("POST /session, then a hidden vector to /next-token\n", { status: 404 });
    }
    try {
      const { hidden, q } = await readRequest(request, url.searchParams);
      const precision = q.get("precision") ?? "exact";
      if (precision !== "exact" && precision !== "int8") throw new BadRequest(`precision must be exact or int8, not ${JSON.stringify(precision)}`);
      const lmHead = client(env, precision, sessionOf(q, "session"));
      const { token, logprob } = await lmHead.sample(hidden, options(q));
      return Response.json({ token, logprob });
    } catch (e) {
      return failure(e);
    }
  },
};

// @cobordism/client in Node against eight local shards (workerd through Miniflare, local R2):
// its samples, top-K and log-probabilities equal the Rust CLI's (`cobordism … --local`), and it
// survives a slow shard and a shard that answers 503 before it recovers (HTTP proxies in front of
// real shards), and refuses answers from another manifest version, from a shard at the wrong
// index, with the wrong token, or from fewer shards than the vocabulary is cut into (naming the
// missing rows); bad options fail before a request, a shard without a token at once.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startShards } from "../../../worker/local.mjs";
import { parseSample, runLocal, faultyProxy, makeModel, seed, hiddenBytes, tempDir, TOKEN } from "../../../tests/worker/helpers.mjs";
import { LmHeadClient, ShardError } from "../src/node.mjs";

const HIDDEN = 256;
let model, other, shards, others, hidden, hiddenFile;

before(async () => {
  model = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 6000, shards: 8, seed: 80 });
  other = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 6000, shards: 8, seed: 81 });
  shards = await startShards({ shards: 8, authToken: TOKEN });
  await seed(await shards.bucket(), model);
  others = await startShards({ shards: 8, authToken: TOKEN });
  await seed(await others.bucket(), other);
  const bytes = hiddenBytes(HIDDEN, 9);
  hidden = new Float32Array(bytes.buffer);
  hiddenFile = join(tempDir("hidden"), "h.f32");
  writeFileSync(hiddenFile, bytes);
});

after(async () => {
  await shards?.dispose();
  await others?.dispose();
});

/** The CLI's output computed locally from the same slices. */
const local = (...args) => runLocal(model, hiddenFile, ...args);

const client = (o = {}) => new LmHeadClient({ endpoints: shards.endpoints, token: TOKEN, ...o });

test("sample equals the CLI's local sample: plain temperatures, filters, greedy", async () => {
  const c = client();
  const settings = [];
  for (const temperature of [0.3, 1, 2]) for (const s of [1, 2, 3]) settings.push({ temperature, seed: s });
  settings.push({ temperature: 1, topK: 5, seed: 4 }, { temperature: 0.7, topP: 0.9, seed: 5 }, { temperature: 1.3, minP: 0.1, seed: 6 }, { temperature: 0 });
  for (const o of settings) {
    const got = await c.sample(hidden, o);
    const args = ["sample", "--temperature", `${o.temperature}`, "--seed", `${o.seed ?? 0}`];
    if (o.topK) args.push("--top-k", `${o.topK}`);
    if (o.topP) args.push("--top-p", `${o.topP}`);
    if (o.minP) args.push("--min-p", `${o.minP}`);
    const want = parseSample(await local(...args));
    assert.deepEqual({ token: got.token, logit: got.logit, logprob: got.logprob.toFixed(6) }, want, JSON.stringify(o));
  }
});

test("precision int8: the shards' fast mode, the CLI's --int8 sample", async () => {
  const got = await client({ precision: "int8" }).sample(hidden, { temperature: 0.9, seed: 12 });
  const want = parseSample(await local("sample", "--temperature", "0.9", "--seed", "12", "--int8"));
  assert.deepEqual({ token: got.token, logit: got.logit, logprob: got.logprob.toFixed(6) }, want);
  assert.throws(() => client({ precision: "fp16" }), TypeError);
});

test("coalesce: concurrent calls share requests and get exactly their results alone", async () => {
  let requests = 0;
  const counting = (o) => client({ ...o, fetch: (...a) => (requests++, fetch(...a)) });
  const vectors = Array.from({ length: 6 }, (_, i) => new Float32Array(hiddenBytes(HIDDEN, 40 + i).buffer));
  const calls = (c) => [
    ...vectors.map((v, i) => c.sample(v, { temperature: 0.8, seed: 100 + i })),
    c.sample([vectors[0], vectors[1]], { temperature: 0.8, seed: 7 }), // a batch keeps its (seed, v) noise
    c.sample(vectors[2], { temperature: 1.3, topP: 0.9, seed: 3 }),
    c.topK(vectors[3], 5),
    c.topK(vectors[4], 5),
    c.logprobs(vectors[5], [1, 2, 3]),
    c.logits(vectors[0]),
    c.logits(vectors[1]),
  ];
  const alone = await Promise.all(calls(counting()));
  const unmerged = requests;
  requests = 0;
  const merged = await Promise.all(calls(counting({ coalesce: true })));
  assert.deepEqual(merged, alone);
  // The 8 plain-sampled vectors in one request per shard, the other kinds one each (two rounds
  // at most for the top-p draw).
  assert.ok(requests <= 6 * 8 && requests < unmerged, `${requests} requests merged, ${unmerged} alone`);
  // A caller's mistake fails that call alone; the others still get their answers.
  const bad = new Float32Array(HIDDEN).fill(3.4e38); // finite, but the products overflow
  const c = client({ coalesce: true });
  const [ok, overflow] = await Promise.allSettled([c.sample(vectors[0], { temperature: 0.8, seed: 100 }), c.sample(bad, { temperature: 0.8, seed: 1 })]);
  assert.deepEqual(ok.value, alone[0]);
  assert.equal(overflow.reason.code, "non_finite");
  await assert.rejects(c.sample(new Float32Array(HIDDEN).fill(NaN)), RangeError);
});

test("topK and logprobs equal the CLI's local results", async () => {
  const c = client();
  const top = await c.topK(hidden, 20);
  const table = (await local("logits", "--full", "--top-k", "20")).split("\n").filter((l) => /^\s+\d+\s+\d+\s+-?\d/.test(l));
  assert.deepEqual(
    top.entries.map((e) => [e.token, e.logit]),
    table.map((l) => l.trim().split(/\s+/)).map(([, token, logit]) => [Number(token), Math.fround(Number(logit))]),
  );
  const tokens = [0, 17, 5999, 3000];
  const lp = await c.logprobs(hidden, tokens);
  const rows = (await local("logprobs", "--tokens", tokens.join(","))).split("\n").filter((l) => /^\s+\d+\s+-?\d/.test(l));
  assert.deepEqual(lp.map((l) => l.toFixed(6)), rows.map((l) => l.trim().split(/\s+/)[1]));
  await assert.rejects(c.logprobs(hidden, [6000]), /outside the vocabulary/);
});

test("batches: each vector's logits and top-K are those of the vector alone", async () => {
  const c = client();
  const second = new Float32Array(hiddenBytes(HIDDEN, 10).buffer);
  const [a, b] = await c.logits([hidden, second]);
  assert.deepEqual(a, await c.logits(hidden));
  assert.deepEqual(b, await c.logits(second));
  const [ta, tb] = await c.topK([hidden, second], 5);
  assert.deepEqual(ta, await c.topK(hidden, 5));
  assert.deepEqual(tb, await c.topK(second, 5));
  const draws = await c.sample([hidden, second, hidden], { temperature: 1, seed: 11 });
  assert.equal(draws.length, 3);
  await assert.rejects(c.sample(Array(9).fill(hidden)), /1 to 8 hidden vectors/);
});

test("a slow shard and a shard that answers 503 then recovers: the same answer", async () => {
  const want = await client().sample(hidden, { temperature: 1, seed: 21 });
  const slow = await faultyProxy(shards.endpoints[2], { delayMs: 300 });
  const flaky = await faultyProxy(shards.endpoints[5], { refuse: 2 });
  const down = await faultyProxy(shards.endpoints[5], { refuse: 1000 });
  try {
    const endpoints = shards.endpoints.map((e, i) => (i === 2 ? slow.url : i === 5 ? flaky.url : e));
    assert.deepEqual(await client({ endpoints }).sample(hidden, { temperature: 1, seed: 21 }), want);
    assert.equal(flaky.refused(), 2);
    const broken = shards.endpoints.map((e, i) => (i === 5 ? down.url : e));
    await assert.rejects(client({ endpoints: broken, retries: 1 }).sample(hidden), (e) => e instanceof ShardError && e.shard === 5 && e.code === "slice_loading" && e.retryable && /after 2 attempts/.test(e.message));
  } finally {
    await Promise.all([slow.close(), flaky.close(), down.close()]);
  }
});

test("warm() starts every shard loading and answers at once; the shards then serve the same tokens", async () => {
  // Fresh shards over R2 paced like production, only slower: each load takes a few hundred ms.
  const cold = await startShards({ shards: 8, authToken: TOKEN, r2Shape: { firstByteMs: 20, bytesPerSec: 300_000 } });
  try {
    await seed(await cold.bucket(), model);
    const c = new LmHeadClient({ endpoints: cold.endpoints, token: TOKEN });
    assert.deepEqual(await c.warm(), Array(8).fill("loading"), "every shard answers before its slice is in");
    let states;
    for (let i = 0; i < 200 && (states = await c.warm()).some((s) => s !== "ready"); i++) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(states, Array(8).fill("ready"));
    const o = { temperature: 0.8, seed: 5 };
    assert.deepEqual(await c.sample(hidden, o), await client().sample(hidden, o));
    const swapped = [cold.endpoints[1], cold.endpoints[0], ...cold.endpoints.slice(2)];
    await assert.rejects(new LmHeadClient({ endpoints: swapped, token: TOKEN }).warm(), (e) => e instanceof ShardError && !e.retryable && /is shard 1/.test(e.message));
    await assert.rejects(new LmHeadClient({ endpoints: cold.endpoints, token: "wrong" }).warm(), (e) => e.status === 401 && !e.retryable);
    await assert.rejects(new LmHeadClient({ endpoints: cold.endpoints.slice(0, 2), token: TOKEN }).warm(), (e) => e instanceof ShardError && !e.retryable && /deployment of 8 shards, 2 endpoints given/.test(e.message));
    await assert.rejects(client().sample(Array.from(hidden)), (e) => e instanceof TypeError && /pass new Float32Array\(hidden\)/.test(e.message));
  } finally {
    await cold.dispose();
  }
});

test("object residency with replicas: every call carries the session key, warm-up and tokens reach the same objects", async () => {
  const objects = await startShards({ shards: 8, authToken: TOKEN, residency: "object", replicas: 3 });
  try {
    await seed(await objects.bucket(), model);
    const sent = new Set();
    const spy = (url, init) => (sent.add(init.headers["X-Cobordism-Session"]), fetch(url, init));
    const c = new LmHeadClient({ endpoints: objects.endpoints, token: TOKEN, fetch: spy, session: "conversation-42" });
    await c.warm();
    const o = { temperature: 0.8, seed: 5 };
    assert.deepEqual(await c.sample(hidden, o), await client().sample(hidden, o), "the plain shards' token");
    assert.deepEqual(await c.topK(hidden, 4), await client().topK(hidden, 4));
    assert.deepEqual([...sent], ["conversation-42"]);
    const health = await fetch(`${objects.endpoints[5]}/healthz`, { headers: { Authorization: `Bearer ${TOKEN}`, "X-Cobordism-Session": "conversation-42" } });
    const reported = await health.json();
    assert.match(reported.object, /^shard-5\/[012]$/);
    assert.equal(reported.state, "ready", "the object the session reaches holds the slice");
    assert.throws(() => client({ session: "" }), /session must be a non-empty string/);
  } finally {
    await objects.dispose();
  }
});

test("answers from another version, the wrong shard or without the token are refused", async () => {
  const mixed = shards.endpoints.map((e, i) => (i === 3 ? others.endpoints[3] : e));
  await assert.rejects(client({ endpoints: mixed, retries: 1 }).sample(hidden), (e) => e instanceof ShardError && e.shard === 3 && /manifest version/.test(e.message));
  await assert.rejects(client({ manifestVersion: other.manifest.version }).topK(hidden, 3), (e) => e.shard === 0 && /expected/.test(e.message));
  assert.equal((await client({ manifestVersion: model.manifest.version }).topK(hidden, 3)).entries.length, 3);
  const swapped = [shards.endpoints[1], shards.endpoints[0], ...shards.endpoints.slice(2)];
  await assert.rejects(client({ endpoints: swapped }).topK(hidden, 3), (e) => e instanceof ShardError && !e.retryable && /endpoint 0 is shard 1/.test(e.message));
  await assert.rejects(client({ token: "wrong" }).topK(hidden, 3), (e) => e.status === 401 && e.code === "unauthorized" && !e.retryable && /token/.test(e.message) && !/attempts/.test(e.message));
});

test("seven of eight endpoints (or eight of twelve) give no token: an error naming the missing rows", async () => {
  const vocab = model.manifest.vocab;
  const seven = client({ endpoints: shards.endpoints.slice(0, 7) });
  const missing = new RegExp(`rows ${model.manifest.shards[7].row_start}\\.\\.${vocab} of ${vocab} are missing`);
  for (const [name, call] of [
    ["sample", () => seven.sample(hidden, { temperature: 1, seed: 1 })],
    ["sample with top-p", () => seven.sample(hidden, { temperature: 1, topP: 0.9, seed: 1 })],
    ["greedy", () => seven.sample(hidden, { temperature: 0 })],
    ["topK", () => seven.topK(hidden, 5)],
    ["logprobs", () => seven.logprobs(hidden, [0])],
    ["logits", () => seven.logits(hidden)],
  ]) {
    await assert.rejects(call(), (e) => e instanceof ShardError && !e.retryable && missing.test(e.message), name);
  }
  const twelve = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 6000, shards: 12, seed: 83 });
  const local12 = await startShards({ shards: 12, authToken: TOKEN });
  try {
    await seed(await local12.bucket(), twelve);
    const eight = new LmHeadClient({ endpoints: local12.endpoints.slice(0, 8), token: TOKEN });
    const rows = new RegExp(`8 endpoints answered for a vocabulary cut into 12 shards.*rows ${twelve.manifest.shards[8].row_start}\\.\\.${vocab} of ${vocab} are missing`);
    await assert.rejects(eight.sample(hidden, { temperature: 1, seed: 1 }), rows);
    const all = new LmHeadClient({ endpoints: local12.endpoints, token: TOKEN });
    assert.equal((await all.logits(hidden)).length, vocab);
  } finally {
    await local12.dispose();
  }
});

test("options are checked before anything is sent; a shard without a token fails at once", async () => {
  let calls = 0;
  const counting = client({ fetch: (...a) => (calls++, fetch(...a)) });
  for (const o of [{ temperature: NaN }, { temperature: "abc" }, { temperature: 0.001 }, { temperature: 1, topK: 2.5 }, { temperature: 1, topP: 2 }, { temperature: 1, seed: 1.5 }, { temperature: 1, seed: "x" }]) {
    await assert.rejects(counting.sample(hidden, o), RangeError, JSON.stringify(o));
  }
  await assert.rejects(counting.logprobs(hidden, [1], { temperature: 0 }), RangeError);
  assert.equal(calls, 0);
  const closed = await startShards({ shards: 8 }); // no AUTH_TOKEN, no ALLOW_ANONYMOUS
  try {
    const started = Date.now();
    await assert.rejects(
      new LmHeadClient({ endpoints: closed.endpoints }).sample(hidden, { temperature: 1, seed: 1 }),
      (e) => e instanceof ShardError && e.code === "auth_not_configured" && !e.retryable && /AUTH_TOKEN/.test(e.message),
    );
    assert.ok(Date.now() - started < 2000, `${Date.now() - started} ms`);
  } finally {
    await closed.dispose();
  }
});

test("filters the shards' top-1024 cannot decide fall back to all logits, as the CLI does", async () => {
  const wide = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 5000, shards: 2, seed: 82 });
  const two = await startShards({ shards: 2, authToken: TOKEN });
  try {
    await seed(await two.bucket(), wide);
    const c = new LmHeadClient({ endpoints: two.endpoints, token: TOKEN });
    const o = { temperature: 100, minP: 1e-6, seed: 3 }; // nearly flat: every token is kept
    const got = await c.sample(hidden, o);
    const stdout = await runLocal(wide, hiddenFile, "sample", "--temperature", "100", "--min-p", "1e-6", "--seed", "3");
    assert.match(stdout, /from all logits/);
    assert.deepEqual({ token: got.token, logit: got.logit, logprob: got.logprob.toFixed(6) }, parseSample(stdout));
  } finally {
    await two.dispose();
  }
});

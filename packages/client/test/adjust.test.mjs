// @cobordism/client's adjustments (logitBias, the penalties over a history, allowedTokens)
// against eight local shards in workerd: the tokens, top-K and log-probabilities equal the Rust
// CLI's with the same flags and --local; coalesced calls keep each their own adjustments; an
// allowed set of three tokens is never left in 10,000 draws over two shards; wrong options fail
// before anything is sent, naming the client's spelling of OpenAI's snake_case names.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startShards } from "../../../worker/local.mjs";
import { parseSample, runLocal, makeModel, seed, hiddenBytes, tempDir, TOKEN } from "../../../tests/worker/helpers.mjs";
import { LmHeadClient, ShardError } from "../src/node.mjs";

const HIDDEN = 256;
const VOCAB = 6000;
let model, shards, hidden, hiddenFile;

before(async () => {
  model = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: VOCAB, shards: 8, seed: 90 });
  shards = await startShards({ shards: 8, authToken: TOKEN });
  await seed(await shards.bucket(), model);
  const bytes = hiddenBytes(HIDDEN, 19);
  hidden = new Float32Array(bytes.buffer);
  hiddenFile = join(tempDir("hidden"), "h.f32");
  writeFileSync(hiddenFile, bytes);
});

after(async () => {
  await shards?.dispose();
});

const client = (o = {}) => new LmHeadClient({ endpoints: shards.endpoints, token: TOKEN, ...o });

/** The CLI's output computed locally from the same slices. */
const local = (...args) => runLocal(model, hiddenFile, ...args);

/** The CLI's flags for the client's adjustment options. */
function flags({ logitBias, presencePenalty, frequencyPenalty, repetitionPenalty, history, allowedTokens }) {
  const out = [];
  if (logitBias) out.push("--logit-bias", Object.entries(logitBias).map(([t, b]) => `${t}:${b === -Infinity ? "-inf" : b}`).join(","));
  if (presencePenalty !== undefined) out.push("--presence-penalty", `${presencePenalty}`);
  if (frequencyPenalty !== undefined) out.push("--frequency-penalty", `${frequencyPenalty}`);
  if (repetitionPenalty !== undefined) out.push("--repetition-penalty", `${repetitionPenalty}`);
  if (history) out.push("--history", history.join(","));
  if (allowedTokens) out.push("--allow", allowedTokens.join(","));
  return out;
}

const range = (lo, hi) => Array.from({ length: hi - lo }, (_, i) => lo + i);
const ADJUSTMENTS = [
  { logitBias: { 17: 3.5, 750: -2, 4242: -Infinity, 5999: 1.25 } },
  { presencePenalty: 0.8, history: [5, 5, 5, 17, 749, 750, 750, 3001] },
  { frequencyPenalty: 0.6, history: [5, 5, 5, 17, 750, 3001] },
  { repetitionPenalty: 1.7, history: [5, 17, 749, 750, 3001, 5999] },
  { allowedTokens: [...range(3, 9), ...range(740, 760), ...range(5990, 6000)] },
  { logitBias: { 17: 2, 4242: -Infinity }, repetitionPenalty: 1.3, presencePenalty: 0.2, frequencyPenalty: 0.1, history: [17, 17, 740], allowedTokens: range(0, 800) },
];

test("sample, topK and logprobs with adjustments equal the CLI's --local with the same flags", async () => {
  const c = client();
  for (const adjust of ADJUSTMENTS) {
    for (const o of [{ temperature: 1.5, seed: 1 }, { temperature: 0.8, seed: 2, topP: 0.9 }, { temperature: 0 }]) {
      const got = await c.sample(hidden, { ...o, ...adjust });
      const args = ["sample", "--temperature", `${o.temperature}`, "--seed", `${o.seed ?? 0}`, ...flags(adjust)];
      if (o.topP) args.push("--top-p", `${o.topP}`);
      const want = parseSample(await local(...args));
      assert.deepEqual({ token: got.token, logit: got.logit, logprob: got.logprob.toFixed(6) }, want, JSON.stringify({ o, adjust }));
    }
    const tokens = [5, 17, 750, 4242, 5999];
    const lp = await c.logprobs(hidden, tokens, { temperature: 0.7, ...adjust });
    const rows = (await local("logprobs", "--tokens", tokens.join(","), "--temperature", "0.7", ...flags(adjust))).split("\n").filter((l) => /^\s+\d+\s+-?(\d|inf)/.test(l));
    assert.deepEqual(lp.map((l) => (l === -Infinity ? "-inf" : l.toFixed(6))), rows.map((l) => l.trim().split(/\s+/)[1]), JSON.stringify(adjust));
  }
  const top = await c.topK(hidden, 3, { allowedTokens: [7, 42, 5000] });
  assert.deepEqual(top.entries.map((e) => e.token).sort((a, b) => a - b), [7, 42, 5000]);
  const logits = await c.logits(hidden, { allowedTokens: [7], logitBias: { 7: 1 } });
  const plain = await c.logits(hidden);
  assert.equal(logits[7], Math.fround(plain[7] + 1));
  assert.equal(logits.filter((z) => z === -Infinity).length, VOCAB - 1);
});

test("coalesced calls keep each their own adjustments and share requests", async () => {
  let requests = 0;
  const counting = (o) => client({ ...o, fetch: (...a) => (requests++, fetch(...a)) });
  const vectors = Array.from({ length: 6 }, (_, i) => new Float32Array(hiddenBytes(HIDDEN, 50 + i).buffer));
  const calls = (c) => [
    ...vectors.map((v, i) => c.sample(v, { temperature: 1.2, seed: 200 + i, ...ADJUSTMENTS[i] })),
    c.sample([vectors[0], vectors[1]], { temperature: 1.2, seed: 9 }),
    c.topK(vectors[2], 4, ADJUSTMENTS[4]),
    c.topK(vectors[3], 4),
    c.logprobs(vectors[4], [5, 17], ADJUSTMENTS[1]),
    c.logprobs(vectors[5], [5, 17]),
  ];
  const alone = await Promise.all(calls(counting()));
  const unmerged = requests;
  requests = 0;
  const merged = await Promise.all(calls(counting({ coalesce: true })));
  assert.deepEqual(merged, alone);
  assert.ok(requests < unmerged, `${requests} requests merged, ${unmerged} alone`);
  // One call's adjustments refused by the shards (a token past the vocabulary) fail it alone.
  const c = client({ coalesce: true });
  const [ok, bad] = await Promise.allSettled([c.sample(vectors[0], { temperature: 1.2, seed: 200, ...ADJUSTMENTS[0] }), c.sample(vectors[1], { temperature: 1, history: [VOCAB], presencePenalty: 1 })]);
  assert.deepEqual(ok.value, alone[0]);
  assert.ok(bad.reason instanceof ShardError && bad.reason.code === "bad_adjust" && /vocabulary/.test(bad.reason.message), bad.reason.message);
});

test("an allowed set of three tokens is never left in 10,000 draws over two shards", async () => {
  const two = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 4000, shards: 2, seed: 91 });
  const pair = await startShards({ shards: 2, authToken: TOKEN });
  try {
    await seed(await pair.bucket(), two);
    const c = new LmHeadClient({ endpoints: pair.endpoints, token: TOKEN, coalesce: true });
    const allowed = [3, 1999, 2000]; // the last row of shard 0, the first of shard 1
    const batch = Array.from({ length: 8 }, (_, i) => new Float32Array(hiddenBytes(HIDDEN, 300 + i).buffer));
    const counts = new Map();
    for (let s = 0; s < 1250; s++) {
      for (const { token } of await c.sample(batch, { temperature: 2, seed: s, allowedTokens: allowed })) {
        counts.set(token, (counts.get(token) ?? 0) + 1);
      }
    }
    assert.deepEqual([...counts.keys()].sort((a, b) => a - b), allowed, JSON.stringify([...counts]));
    assert.equal([...counts.values()].reduce((a, b) => a + b), 10_000);
  } finally {
    await pair.dispose();
  }
});

test("wrong adjustment options fail before anything is sent", async () => {
  let calls = 0;
  const c = client({ fetch: (...a) => (calls++, fetch(...a)) });
  for (const [o, error, message] of [
    [{ logit_bias: { 1: 2 } }, TypeError, /this client calls it logitBias/],
    [{ presence_penalty: 1 }, TypeError, /presencePenalty/],
    [{ bogus: 1 }, TypeError, /unknown option bogus/],
    [{ logitBias: [1, 2] }, TypeError, /object \(or Map\) of token id/],
    [{ logitBias: { 1: NaN } }, RangeError, /-Infinity to ban/],
    [{ logitBias: { 1: Infinity } }, RangeError, /finite number/],
    [{ logitBias: { x: 1 } }, RangeError, /not a token id/],
    [{ history: [1.5] }, RangeError, /history\[0\]/],
    [{ history: [-1] }, RangeError, /history\[0\]/],
    [{ repetitionPenalty: 0, history: [1] }, RangeError, /repetition penalty/],
    [{ presencePenalty: Infinity, history: [1] }, RangeError, /presence penalty/],
    [{ allowedTokens: [] }, RangeError, /allowed set is empty/],
    [{ allowedTokens: [1], logitBias: { 1: -Infinity } }, RangeError, /none could be drawn/],
    [{ history: "1,2" }, TypeError, /array of token ids/],
  ]) {
    await assert.rejects(c.sample(hidden, { temperature: 1, ...o }), (e) => e instanceof error && message.test(e.message), JSON.stringify(o));
  }
  await assert.rejects(c.topK(hidden, 3, { temperature: 1 }), /unknown option temperature/);
  await assert.rejects(c.logits(hidden, { seed: 1 }), /unknown option seed/);
  assert.equal(calls, 0);
});

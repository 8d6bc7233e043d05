#!/usr/bin/env node
// Bytes and milliseconds per token through eight local shards (workerd via Miniflare, HTTP on
// loopback) for each reply form: all logits, top-K, and the exact sample (Gumbel-max winners),
// then the sample with adjustments after the vector (a 4,096-token history under the three
// penalties; an allowed set of every token but 300; a grammar's 20 tokens), each section written
// by @cobordism/client's encoder. One token = one hidden vector POSTed to all eight shards at
// once and every answer read; the client's merge is not timed (microseconds). Medians over
// --runs tokens, after one warm-up; the forms alternate token by token, so that the machine's
// drift falls on all of them alike.
//
//   node benches/http/forms-bench.mjs [--runs 21]      (after scripts/build-worker.sh,
//     scripts/build-client-js.sh and cargo build --release -p cobordism)
import { parseArgs } from "node:util";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, post, TOKEN } from "../../tests/worker/helpers.mjs";
import "../../packages/client/src/node.mjs"; // instantiates the protocol's wasm
import { adjustRecord, withSection } from "../../packages/client/src/adjust.mjs";

const { values } = parseArgs({ options: { runs: { type: "string", default: "21" } } });
const runs = Number(values.runs);
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

const [hidden, vocab] = [1024, 152064];
const m = makeModel({ type: "q6_k", hidden, vocab, shards: 8, seed: 5 });
const local = await startShards({ shards: 8, authToken: TOKEN });
try {
  await seed(await local.bucket(), m);
  // Token ids from a fixed 64-bit LCG.
  let state = 0x9e3779b97f4a7c15n;
  const ids = (n) =>
    Array.from({ length: n }, () => {
      state = (state * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
      return Number((state >> 32n) % BigInt(vocab));
    });
  const banned = new Set(ids(300));
  const adjustments = {
    "4,096-token history": { history: ids(4096), presencePenalty: 0.4, frequencyPenalty: 0.3, repetitionPenalty: 1.1 },
    "allowed: all but 300": { allowedTokens: Array.from({ length: vocab }, (_, t) => t).filter((t) => !banned.has(t)) },
    "allowed: 20 tokens": { allowedTokens: ids(20) },
  };
  const forms = [
    ["all logits", ""],
    ["top-K (K = 64)", "?top_k=64"],
    ["sample (T = 1, one seed per token)", "?temperature=1&seed="],
    ...Object.entries(adjustments).map(([name, o]) => [`sample + ${name}`, "?temperature=1&seed=", adjustRecord(o)]),
  ];
  const token = async ([, query, record], i) => {
    const q = query.endsWith("seed=") ? `${query}${i}` : query;
    const vector = hiddenBytes(hidden, i + 1);
    const sent = withSection({ bytes: vector, n: 1, record });
    const full = sent.adjust ? `${q}&adjust=${sent.adjust}` : q;
    const t0 = performance.now();
    const answers = await Promise.all(local.endpoints.map((e) => post(e, sent.bytes, { query: full })));
    const ms = performance.now() - t0;
    for (const a of answers) if (a.status !== 200) throw new Error(`HTTP ${a.status}: ${new TextDecoder().decode(a.body)}`);
    return { ms, sent: sent.bytes.length, answered: answers.reduce((n, a) => n + a.body.length, 0) };
  };
  await token(forms[0], 0); // cold loads
  const results = forms.map(() => []);
  const last = [];
  for (const form of forms) await token(form, 0); // one warm-up each
  for (let i = 1; i <= runs; i++) {
    for (const [f, form] of forms.entries()) {
      last[f] = await token(form, i);
      results[f].push(last[f].ms);
    }
  }
  console.log(`q6_k ${vocab} × ${hidden}, 8 shards of ${vocab / 8} rows; ${runs} tokens per form (alternated), medians`);
  console.log("| reply form | request bytes per shard | answer bytes per shard | answer bytes per token (8 shards) | ms per token |");
  console.log("|---|---:|---:|---:|---:|");
  for (const [f, [name]] of forms.entries()) {
    console.log(`| ${name} | ${last[f].sent} | ${last[f].answered / 8} | ${last[f].answered} | ${median(results[f]).toFixed(1)} |`);
  }
} finally {
  await local.dispose();
}

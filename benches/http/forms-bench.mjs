#!/usr/bin/env node
// Bytes and milliseconds per token through eight local shards (workerd via Miniflare, HTTP on
// loopback) for each reply form: all logits, top-K, and the exact sample (Gumbel-max winners).
// One token = one hidden vector POSTed to all eight shards at once and every answer read; the
// client's merge is not timed (microseconds). Medians over --runs tokens, after one warm-up.
//
//   node benches/http/forms-bench.mjs [--runs 21]      (after scripts/build-worker.sh and
//                                                       cargo build --release -p cobordism)
import { parseArgs } from "node:util";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, post, TOKEN } from "../../tests/worker/helpers.mjs";

const { values } = parseArgs({ options: { runs: { type: "string", default: "21" } } });
const runs = Number(values.runs);
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

const [hidden, vocab] = [1024, 152064];
const m = makeModel({ type: "q6_k", hidden, vocab, shards: 8, seed: 5 });
const local = await startShards({ shards: 8, authToken: TOKEN });
try {
  await seed(await local.bucket(), m);
  const forms = [
    ["all logits", ""],
    ["top-K (K = 64)", "?top_k=64"],
    ["sample (T = 1, one seed per token)", "?temperature=1&seed="],
  ];
  const token = async (query, i) => {
    const q = query.endsWith("seed=") ? `${query}${i}` : query;
    const h = hiddenBytes(hidden, i + 1);
    const answers = await Promise.all(local.endpoints.map((e) => post(e, h, { query: q })));
    for (const a of answers) if (a.status !== 200) throw new Error(`HTTP ${a.status}`);
    return answers.reduce((n, a) => n + a.body.length, 0);
  };
  await token("", 0); // cold loads
  console.log(`q6_k ${vocab} × ${hidden}, 8 shards of ${vocab / 8} rows; ${runs} tokens per form, medians`);
  console.log("| reply form | bytes per token per shard | bytes per token (8 shards) | ms per token |");
  console.log("|---|---:|---:|---:|");
  for (const [name, query] of forms) {
    await token(query, 0);
    const ms = [];
    let bytes = 0;
    for (let i = 1; i <= runs; i++) {
      const t0 = performance.now();
      bytes = await token(query, i);
      ms.push(performance.now() - t0);
    }
    console.log(`| ${name} | ${bytes / 8} | ${bytes} | ${median(ms).toFixed(1)} |`);
  }
} finally {
  await local.dispose();
}

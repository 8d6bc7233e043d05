#!/usr/bin/env node
// The decode-loop benchmark a user reads: C concurrent decoding streams, each a closed loop of
// `POST /next-token` (a fresh hidden vector per step, plain sampling at T = 0.8) through the
// example inference Worker (examples/inference-worker, bundled as for a deploy, in its own
// workerd) and eight shards of an lm-head (its own workerd, local R2), on loopback. Per C:
// tokens/s, p50/p99 per-token latency, shard compute per token (the shards' own pass timings,
// from /healthz), subrequests and body bytes per token, mean vectors per pass — with the shards'
// coalescing off (`COALESCE = "0"`) and on, in the same run, exact and int8. (The client's
// `coalesce` cannot merge calls of different requests in a Worker: workerd cancels a request that
// waits on another request's fetch, so the example Worker does not use it.)
//
// With --adjust, each step also carries adjustments (logit bias, penalties, an allowed set:
// docs/API.md, "Adjustments") as JSON with the hidden vector: `json` (no adjustment, the JSON
// body's own cost), `history` (a 4,096-token history under the three penalties), `allowed` (an
// allowed set of every token but 300, as ranges); `none` is the plain f32 body.
//
//   node benches/serving/run.mjs [--shape qwen2.5-7b] [--concurrency 1,4,16,32] [--tokens 24]
//        [--adjust none,json,history,allowed] [--json FILE] [--svg FILE]      (after scripts/build-worker.sh, build-client-js.sh and
//                                         cargo build --release -p cobordism; see
//                                         scripts/serving-bench.sh)
import { parseArgs } from "node:util";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Miniflare } from "miniflare";
import { startShards } from "../../worker/local.mjs";
import { bundleForDeploy, hiddenBytes, seed, TOKEN } from "../../tests/worker/helpers.mjs";
import { benchModel, WORK } from "../model.mjs";

const ROOT = join(import.meta.dirname, "..", "..");
const { values } = parseArgs({
  options: {
    shape: { type: "string", default: "qwen2.5-7b" },
    type: { type: "string", default: "q6_k" },
    layout: { type: "string", default: "packed6" },
    concurrency: { type: "string", default: "1,4,16,32" },
    precisions: { type: "string", default: "exact,int8" },
    modes: { type: "string", default: "off,on" }, // the shards' coalescing
    adjust: { type: "string", default: "none" },
    tokens: { type: "string", default: "24" }, // at least this many measured tokens per C, 4 per stream at least
    json: { type: "string" },
    svg: { type: "string" },
  },
});
const levels = values.concurrency.split(",").map(Number);
const precisions = values.precisions.split(",");
const variants = values.adjust.split(",");
const work = WORK;
mkdirSync(work, { recursive: true });
const log = (...a) => console.error("[serving]", ...a);

const model = benchModel({ shape: values.shape, type: values.type, layout: values.layout, log });
const manifest = model.manifest;
const hidden = manifest.hidden;

/** Token ids below the vocabulary, from a fixed 64-bit LCG. */
function ids(n, seedValue) {
  let state = BigInt(seedValue);
  return Array.from({ length: n }, () => {
    state = (state * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return Number((state >> 32n) % BigInt(manifest.vocab));
  });
}

/** The JSON fields of each adjustment variant (`none`: the f32 body, no JSON). */
function adjustmentOf(variant) {
  switch (variant) {
    case "none":
    case "json":
      return {};
    case "history":
      return { history: ids(4096, 11), presence_penalty: 0.4, frequency_penalty: 0.3, repetition_penalty: 1.1 };
    case "allowed": {
      const banned = [...new Set(ids(300, 13))].sort((a, b) => a - b);
      const ranges = [];
      let start = 0;
      for (const b of banned) {
        if (b > start) ranges.push(`${start}..${b}`);
        start = b + 1;
      }
      ranges.push(`${start}..${manifest.vocab}`);
      return { allowed_tokens: ranges.join(",") };
    }
    default:
      throw new Error(`--adjust: ${variant} is not none, json, history or allowed`);
  }
}

const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/** Sum over shards of their /healthz pass counters. */
async function passes(endpoints) {
  const all = await Promise.all(endpoints.map(async (e) => (await (await fetch(`${e}/healthz`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json()).passes));
  const add = (s, p) => ({ count: s.count + p.count, vectors: s.vectors + p.vectors, compute_ms: s.compute_ms + p.compute_ms, by_vectors: s.by_vectors.map((n, i) => n + p.by_vectors[i]) });
  const sum = all.reduce(add, { count: 0, vectors: 0, compute_ms: 0, by_vectors: Array(8).fill(0) });
  return { ...sum, requests: all.reduce((s, p) => s + p.requests, 0) };
}

/** One `/next-token`; retried once if loopback closed a kept-alive connection before answering. */
async function nextToken(url, body, query, headers = {}) {
  const send = () => fetch(`${url}/next-token?${query}`, { method: "POST", body, headers });
  let r;
  try {
    r = await send();
  } catch (e) {
    if (!["UND_ERR_SOCKET", "ECONNRESET"].includes(e?.cause?.code)) throw e;
    r = await send();
  }
  const got = await r.json();
  if (r.status !== 200) throw new Error(`next-token: ${r.status} ${JSON.stringify(got)}`);
  return got;
}

/** C closed-loop streams of `steps` tokens each (after one unmeasured step per stream). */
async function run(url, shardEndpoints, precision, c, steps, variant = "none") {
  const adjustment = adjustmentOf(variant);
  const stream = async (s, from, count, latencies) => {
    for (let step = from; step < from + count; step++) {
      const bytes = hiddenBytes(hidden, 1 + s * 10_000 + step);
      const query = `temperature=0.8&seed=${step}&precision=${precision}`;
      const json = variant !== "none";
      const body = json ? JSON.stringify({ hidden: Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, hidden)), ...adjustment }) : bytes;
      const headers = json ? { "Content-Type": "application/json" } : {};
      const t = performance.now();
      await nextToken(url, body, query, headers);
      latencies?.push(performance.now() - t);
    }
  };
  await Promise.all(Array.from({ length: c }, (_, s) => stream(s, 0, 1)));
  const before = await passes(shardEndpoints);
  const latencies = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, (_, s) => stream(s, 1, steps, latencies)));
  const seconds = (performance.now() - t0) / 1000;
  const after = await passes(shardEndpoints);
  const tokens = latencies.length;
  latencies.sort((a, b) => a - b);
  const d = { count: after.count - before.count, vectors: after.vectors - before.vectors, requests: after.requests - before.requests, compute_ms: after.compute_ms - before.compute_ms };
  const byVectors = after.by_vectors.map((n, i) => n - before.by_vectors[i]);
  return {
    tokens,
    tokens_per_s: tokens / seconds,
    p50_ms: quantile(latencies, 0.5),
    p99_ms: quantile(latencies, 0.99),
    shard_compute_ms_per_token: d.compute_ms / tokens,
    subrequests_per_token: d.requests / tokens,
    bytes_up_per_token: (d.vectors / tokens) * 4 * hidden,
    bytes_down_per_token: (d.vectors / tokens) * 20, // a 20-byte section per vector and shard
    vectors_per_pass: d.vectors / d.count,
    passes_by_vectors: byVectors,
  };
}

const bundleDir = join(work, "bundle");
mkdirSync(bundleDir, { recursive: true });
const script = bundleForDeploy(join(ROOT, "examples", "inference-worker"), bundleDir);
const state = join(work, "state");
let seeded = false;
const rows = [];
for (const coalesce of values.modes.split(",")) {
  const shards = await startShards({ shards: 8, state, authToken: TOKEN, vars: { COALESCE: coalesce === "off" ? "0" : "1" } });
  const inference = new Miniflare({
    name: "inference",
    modules: true,
    scriptPath: script,
    modulesRoot: join(bundleDir, "out"),
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: "2026-04-01",
    bindings: { SHARD_URLS: shards.endpoints.join(","), SHARD_TOKEN: TOKEN },
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  });
  try {
    if (!seeded) {
      log("uploading the slices into the local R2 state…");
      await seed(await shards.bucket(), model);
      seeded = true;
    }
    await inference.ready;
    const url = (await inference.unsafeGetDirectURL()).toString().replace(/\/$/, "");
    for (const precision of precisions) {
      for (const c of levels) {
        for (const variant of variants) {
          const steps = Math.max(4, Math.ceil(Number(values.tokens) / c));
          const r = await run(url, shards.endpoints, precision, c, steps, variant);
          log(`coalescing ${coalesce}, ${precision}, C = ${c}, ${variant}: ${r.tokens_per_s.toFixed(2)} tokens/s, p50 ${r.p50_ms.toFixed(0)} ms, p99 ${r.p99_ms.toFixed(0)} ms, ${r.vectors_per_pass.toFixed(2)} vectors/pass ${JSON.stringify(r.passes_by_vectors)}`);
          rows.push({ coalesce, precision, c, adjust: variant, ...r });
        }
      }
    }
  } finally {
    await inference.dispose();
    await shards.dispose();
  }
}

const f = (x, d = 1) => x.toFixed(d);
if (variants.length > 1 || variants[0] !== "none") {
  // Markdown: one row per precision, C, mode and adjustment, with the ratio to the first variant.
  console.log(`${manifest.model} ${manifest.dtype} (${values.layout}) ${hidden} × ${manifest.vocab}, 8 shards; sampling at T = 0.8, one fresh hidden vector per step, each with the adjustments of its row.\n`);
  console.log(`| precision | C | coalescing | adjustments | tokens/s | × ${variants[0]} | p50 ms | p99 ms | shard compute ms/token | vectors/pass |`);
  console.log("|---|---:|---|---|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) {
    const base = rows.find((x) => x.coalesce === r.coalesce && x.precision === r.precision && x.c === r.c && x.adjust === variants[0]);
    console.log(`| ${r.precision} | ${r.c} | ${r.coalesce} | ${r.adjust} | ${f(r.tokens_per_s, 2)} | ${f(r.tokens_per_s / base.tokens_per_s, 2)}× | ${f(r.p50_ms, 0)} | ${f(r.p99_ms, 0)} | ${f(r.shard_compute_ms_per_token)} | ${f(r.vectors_per_pass, 2)} |`);
  }
  if (values.json) writeFileSync(values.json, JSON.stringify(rows, null, 1));
  process.exit(0);
}

// Markdown: one row per precision, C and mode, with the ratio to coalescing off at that C.
const modes = values.modes.split(",");
const label = { off: "off", on: "on" };
console.log(`${manifest.model} ${manifest.dtype} (${values.layout}) ${hidden} × ${manifest.vocab}, 8 shards of ${(manifest.shards[0].bytes / 1048576).toFixed(1)} MiB; plain sampling (T = 0.8), one fresh hidden vector per step.\n`);
console.log("| precision | C | coalescing | tokens/s | × off | p50 ms | p99 ms | shard compute ms/token | vectors/pass | subrequests/token | body bytes/token up + down |");
console.log("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const precision of precisions) {
  for (const c of levels) {
    const off = rows.find((r) => r.coalesce === "off" && r.precision === precision && r.c === c);
    for (const mode of modes) {
      const r = rows.find((x) => x.coalesce === mode && x.precision === precision && x.c === c);
      const ratio = off ? `${f(r.tokens_per_s / off.tokens_per_s, 2)}×` : "–";
      console.log(`| ${precision} | ${c} | ${label[mode] ?? mode} | ${f(r.tokens_per_s, 2)} | ${ratio} | ${f(r.p50_ms, 0)} | ${f(r.p99_ms, 0)} | ${f(r.shard_compute_ms_per_token)} | ${f(r.vectors_per_pass, 2)} | ${f(r.subrequests_per_token, 1)} | ${r.bytes_up_per_token} + ${r.bytes_down_per_token} |`);
    }
  }
}
if (values.json) writeFileSync(values.json, JSON.stringify(rows, null, 1));
if (values.svg) writeFileSync(values.svg, chart(rows));

/** Tokens/s and p99 against C, a line per precision and coalescing mode. */
function chart(rows) {
  const panel = (key, label, x0) => {
    const w = 360, h = 220, top = 40, left = x0 + 50;
    const max = Math.max(...rows.map((r) => r[key])) * 1.1;
    const xs = (c) => left + (levels.indexOf(c) / Math.max(1, levels.length - 1)) * w;
    const ys = (v) => top + h - (v / max) * h;
    const colors = { "exact off": "#9bb7e8", "exact on": "#2a6fdb", "int8 off": "#f0b27a", "int8 on": "#d35400" };
    const out = [`<text x="${left}" y="${top - 16}" font-weight="bold">${label}</text>`,
      `<line x1="${left}" y1="${top + h}" x2="${left + w}" y2="${top + h}" stroke="#444"/>`,
      `<line x1="${left}" y1="${top}" x2="${left}" y2="${top + h}" stroke="#444"/>`];
    for (const c of levels) out.push(`<text x="${xs(c)}" y="${top + h + 16}" text-anchor="middle">C = ${c}</text>`);
    for (let i = 0; i <= 4; i++) out.push(`<text x="${left - 6}" y="${ys((max * i) / 4) + 4}" text-anchor="end">${((max * i) / 4).toFixed(max < 10 ? 1 : 0)}</text>`);
    for (const [name, color] of Object.entries(colors)) {
      const [precision, mode] = name.split(" ");
      const pts = rows.filter((r) => r.precision === precision && r.coalesce === mode).map((r) => `${xs(r.c).toFixed(1)},${ys(r[key]).toFixed(1)}`);
      if (pts.length) out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.join(" ")}"/>`);
    }
    return out.join("\n");
  };
  const legend = Object.entries({ "exact, coalescing off": "#9bb7e8", "exact, on": "#2a6fdb", "int8, off": "#f0b27a", "int8, on": "#d35400" })
    .map(([name, color], i) => `<rect x="${40 + i * 200}" y="300" width="14" height="4" fill="${color}"/><text x="${60 + i * 200}" y="306">${name}</text>`).join("\n");
  return `<svg xmlns="http://www.w3.org/2000/svg" width="880" height="336" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
${panel("tokens_per_s", "tokens/s (higher is better)", 0)}
${panel("p99_ms", "p99 ms per token (lower is better)", 440)}
${legend}
</svg>
`;
}

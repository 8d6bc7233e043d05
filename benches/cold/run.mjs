#!/usr/bin/env node
// The cold path a user meets: a qwen2.5-7b Q6_K shard (55.9 MB) loaded from R2 by a fresh
// isolate, and the first token of eight cold shards with and without a warm-up.
//
// R2 as production shows it, not as a local disk does: the shards' R2 binding is wrapped
// (worker/local.mjs `r2Shape`) so that every get answers after a first-byte latency and each
// body streams at a capped rate per stream (default 50 ms and 15 MB/s: the order of the
// production figures in ../shared/context, a 4.75 s cold miss for a 38 MiB slice). Also the
// unwrapped local R2, and optionally the previous shard build on it (`--baseline-script`).
//
// 1. One shard, fresh workerd per run: the first request's latency (manifest + slice + compute)
//    and the shard's own load time (/healthz `slice.load_ms`), for LOAD_STREAMS = 1, 2, 4, 6.
// 2. Eight shards, each in its own workerd process (as each runs in its own isolate on
//    Cloudflare; here they share two cores), through @cobordism/client: the first token's
//    latency (all eight cold) without a warm-up, with `client.warm()` issued `--lead` ms
//    before it, and a warm token's for reference.
//
//   node benches/cold/run.mjs [--runs 5] [--streams 1,2,4,6] [--first-byte-ms 50] [--mb-per-s 15]
//        [--lead 2000] [--baseline-script DIR/build/index.js] [--json FILE]
//   (after scripts/build-worker.sh, build-client-js.sh and cargo build --release -p cobordism;
//    see scripts/cold-bench.sh)
import { parseArgs } from "node:util";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startShards } from "../../worker/local.mjs";
import { hiddenBytes, post, health, seed, TOKEN } from "../../tests/worker/helpers.mjs";
import { LmHeadClient } from "../../packages/client/src/node.mjs";
import { benchModel, shardState, WORK } from "../model.mjs";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "7" },
    streams: { type: "string", default: "1,2,4,6" },
    "first-byte-ms": { type: "string", default: "50" },
    "mb-per-s": { type: "string", default: "15" },
    lead: { type: "string", default: "2000" },
    "baseline-script": { type: "string" },
    parts: { type: "string", default: "shard,token" }, // which of the two measurements
    json: { type: "string" },
  },
});
const runs = Number(values.runs);
const streams = values.streams.split(",").map(Number);
const shape = { firstByteMs: Number(values["first-byte-ms"]), bytesPerSec: Number(values["mb-per-s"]) * 1e6 };
const lead = Number(values.lead);
const log = (...a) => console.error("[cold]", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const model = benchModel({ log });
const { manifest } = model;
const state = join(WORK, "state");
const sliceMb = manifest.shards[0].bytes / 1e6;

{
  log("seeding the local R2 state…");
  const s = await startShards({ shards: 1, state, authToken: TOKEN, vars: { SHARD_COUNT: "8" } });
  try {
    await seed(await s.bucket(), model);
  } finally {
    await s.dispose();
  }
}

/** One fresh shard 0: its first request's latency, its load time, a warm request's latency. */
async function coldShard({ loadStreams, r2Shape, script }) {
  const s = await startShards({ shards: 1, state, authToken: TOKEN, script, r2Shape, vars: { SHARD_COUNT: "8", LOAD_STREAMS: String(loadStreams ?? 4) } });
  try {
    const h = hiddenBytes(manifest.hidden, 1);
    const t0 = performance.now();
    const cold = await post(s.endpoints[0], h);
    const firstMs = performance.now() - t0;
    if (cold.status !== 200) throw new Error(`cold request: HTTP ${cold.status} ${new TextDecoder().decode(cold.body)}`);
    const loadMs = (await health(s.endpoints[0])).slice.load_ms;
    const t1 = performance.now();
    await post(s.endpoints[0], hiddenBytes(manifest.hidden, 2));
    return { firstMs, loadMs, warmMs: performance.now() - t1 };
  } finally {
    await s.dispose();
  }
}

/** Eight fresh shards, each in its own workerd process: the first token (logits through the
 * client) after `warmLead` ms of warm-up (none if null). */
async function coldToken(warmLead) {
  const states = [];
  for (let i = 0; i < 8; i++) states.push(await shardState(model, i));
  const shards = await Promise.all(
    states.map((dir, i) => startShards({ shards: 1, state: dir, authToken: TOKEN, r2Shape: shape, vars: { SHARD_INDEX: String(i), SHARD_COUNT: "8" } })),
  );
  try {
    const client = new LmHeadClient({ endpoints: shards.map((s) => s.endpoints[0]), token: TOKEN });
    const x = (seedNo) => new Float32Array(hiddenBytes(manifest.hidden, seedNo).buffer);
    if (warmLead !== null) {
      await client.warm();
      await sleep(warmLead);
    }
    const t0 = performance.now();
    await client.logits(x(3));
    const firstMs = performance.now() - t0;
    const t1 = performance.now();
    await client.logits(x(4));
    return { firstMs, warmMs: performance.now() - t1 };
  } finally {
    await Promise.all(shards.map((s) => s.dispose()));
  }
}

const result = { slice_mb: sliceMb, shape, runs, lead_ms: lead, shard: [], token: [] };
const parts = values.parts.split(",");
const configs = !parts.includes("shard") ? [] : [
  ...(values["baseline-script"] ? [{ r2: "local", label: "previous build (one get)", script: values["baseline-script"] }] : []),
  ...streams.map((n) => ({ r2: "local", label: `LOAD_STREAMS ${n}`, loadStreams: n })),
  ...streams.map((n) => ({ r2: "shaped", label: `LOAD_STREAMS ${n}`, loadStreams: n, r2Shape: shape })),
];
// Runs interleaved (every configuration once per round), so that a drift of the machine's speed
// moves all of them alike.
const samples = configs.map(() => []);
for (let i = 0; i < runs; i++) {
  for (const [j, c] of configs.entries()) samples[j].push(await coldShard(c));
}
for (const [j, c] of configs.entries()) {
  const row = {
    r2: c.r2,
    label: c.label,
    load_streams: c.loadStreams ?? null,
    first_ms: median(samples[j].map((s) => s.firstMs)),
    load_ms: median(samples[j].map((s) => s.loadMs)),
    warm_ms: median(samples[j].map((s) => s.warmMs)),
    samples: samples[j],
  };
  log(`${c.r2} R2, ${c.label}: first request ${row.first_ms.toFixed(0)} ms, load ${row.load_ms.toFixed(0)} ms (median of ${runs})`);
  result.shard.push(row);
}
const leads = !parts.includes("token") ? [] : [["no warm-up", null], [`warm-up ${lead} ms before`, lead]];
const tokens = leads.map(() => []);
for (let i = 0; i < runs; i++) {
  for (const [j, [, warmLead]] of leads.entries()) tokens[j].push(await coldToken(warmLead));
}
for (const [j, [label]] of leads.entries()) {
  const row = { label, first_ms: median(tokens[j].map((s) => s.firstMs)), warm_ms: median(tokens[j].map((s) => s.warmMs)), samples: tokens[j] };
  log(`eight shards, ${label}: first token ${row.first_ms.toFixed(0)} ms, warm token ${row.warm_ms.toFixed(0)} ms`);
  result.token.push(row);
}
if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));

// The report (markdown on stdout).
const f = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`);
const base = (r2) => result.shard.find((r) => r.r2 === r2 && r.load_streams === 1) ?? result.shard.find((r) => r.r2 === r2);
console.log(`### One shard cold (${sliceMb.toFixed(1)} MB slice), median of ${runs} fresh isolates\n`);
console.log("| R2 | reads | slice load | first request | load vs 1 stream | first request vs 1 stream |");
console.log("|---|---|---:|---:|---:|---:|");
for (const r of result.shard) {
  const b = base(r.r2);
  const name = r.r2 === "shaped" ? `${shape.firstByteMs} ms first byte, ${values["mb-per-s"]} MB/s per stream` : "local (disk), unthrottled";
  console.log(`| ${name} | ${r.label} | ${f(r.load_ms)} | ${f(r.first_ms)} | ${(b.load_ms / r.load_ms).toFixed(2)}× | ${(b.first_ms / r.first_ms).toFixed(2)}× |`);
}
console.log(`\n### Eight shards cold, the first token through \`@cobordism/client\` (shaped R2, default LOAD_STREAMS), median of ${runs}\n`);
console.log("| | first token | a warm token after it | first / warm |");
console.log("|---|---:|---:|---:|");
for (const r of result.token) {
  console.log(`| ${r.label} | ${f(r.first_ms)} | ${f(r.warm_ms)} | ${(r.first_ms / r.warm_ms).toFixed(2)}× |`);
}

#!/usr/bin/env node
// What idle gaps between sessions cost each residency: sessions of L tokens (a closed decoding
// loop, one stream) separated by idle gaps drawn from an exponential distribution of mean m
// (5 s, 30 s, 300 s by default), under the local Cloudflare lifecycle emulation
// (worker/local.mjs `lifecycle: "cloudflare"`), time-scaled.
//
// Gaps. g_k = −m·ln(1 − u_k), with u_k from one xorshift64* generator seeded with `--seed`: the
// same u_k for every mode and mean, so the modes meet the same gaps. Every session, the first
// one too, follows a gap; before the first gap every shard is warmed.
//
// Modes:
// * isolate: RESIDENCY = "isolate", one front per shard. How long an idle isolate keeps its
//   slice is not documented by Cloudflare: here it is an assumption, `--t-isolate` (60 s): when a
//   gap exceeds it every front drops its slice (the test shard's `POST /__fault/forget`, as in a
//   new isolate) before the session. Nothing else depends on the gap (but for the manifest
//   check every 5 s, a `head`), so it is not slept. This is idle eviction alone, without the
//   replacements under load of ./run.mjs.
// * object: RESIDENCY = "object", no keep-warm, the emulation at `--scale` (0.1: hibernation
//   after 1 s of real time). A gap is slept as min(g, `--cap`)·scale: the object has nothing
//   pending, so past the 10 s hibernation nothing more can happen to it (the lifecycle events
//   counted per cell show each hibernation).
// * keep-warm: RESIDENCY = "object" with KEEP_WARM_S = S·`--keep-warm-scale` real seconds (S =
//   `--keep-warm-s`, 300), the emulation at that scale (0.5), gaps slept in full. The shard's
//   30 s keep-warm tick (alarm and timer) is real time, not scaled: at 0.5 it is 60 s of the
//   emulated clock, still inside the 70 s before an idle, non-hibernateable object may be
//   evicted; below ~0.45 the emulation would evict held objects wrongly. So this mode runs only
//   the means of `--keep-warm-means` (5 and 30 s; 300 s would take hours of real time).
//
// Variants (`--variants`): "cold", the session's first token is sent right after the gap (the
// prompt's prefill is part of the idle time); "warm", `POST /cobordism-lm-head/warm` to every
// shard when the session starts, overlapping a prefill of `--prefill-ms` real time (the
// recommended pattern), then the first token. The prefill is not scaled: the load it overlaps
// is not either (at 0.1, 500 ms is 5 s of the emulated clock, within the 10 s hibernation).
//
// A token is one request per shard (`?temperature=1&seed=…`, the sampling form), all at once; its
// latency is the slowest shard's. It "waited for a load" when any answer says `X-Cache: miss` or
// `wait`. R2 bytes are counted at the R2 binding (every ranged `get` of a slice, a warm-up's
// included); slice loads are those bytes / the slice's size. R2 is paced as production's (50 ms
// first byte, 15 MB/s per stream).
//
// The model is small, so that the run takes ~9 minutes on two cores: a synthetic Q6_K lm-head,
// hidden size 2048, vocabulary 32,768, in four shards of 13.8 MB (all in one workerd process).
//
// Derived, not measured (printed beside the measurements): the probability that a session
// starts cold, P(g > t) = e^(−t/m) with t = the idle time after which the slice is gone (isolate:
// T_isolate; object: 10 s; keep-warm: S + U + 10 s, U uniform in the 30 s tick, so e^(−(S+10)/m)
// · (m/30)(1 − e^(−30/m))); and keep-warm's cost per shard-day of back-to-back sessions: duration
// at 128 MB for the idle time held, E[min(g, S + 15 s)] = m(1 − e^(−(S+15)/m)) per gap, and an
// alarm request per 30 s held, at docs/PLATFORM.md's list prices (included amounts ignored), with
// a session lasting L × `--token-ms` (85 ms, the qwen2.5-7b warm token of BENCHMARKS-residency).
//
//   node benches/residency/idle-gaps.mjs [--sessions 10] [--tokens 32] [--means 5,30,300]
//        [--seed 43] [--t-isolate 60] [--scale 0.1] [--cap 20] [--keep-warm-s 300]
//        [--keep-warm-scale 0.5] [--keep-warm-means 5,30] [--prefill-ms 500]
//        [--modes isolate,object,keep-warm] [--variants cold,warm] [--json FILE]
//   (after the test shard, scripts/build-worker.sh --test; see scripts/residency-bench.sh)
import { parseArgs } from "node:util";
import { writeFileSync } from "node:fs";
import { startShards } from "../../worker/local.mjs";
import { forget } from "../model.mjs";
import { generator } from "../random.mjs";
import { hiddenBytes, makeModel, post, seed, TOKEN, warm } from "../../tests/worker/helpers.mjs";

const { values } = parseArgs({
  options: {
    sessions: { type: "string", default: "10" },
    tokens: { type: "string", default: "32" },
    means: { type: "string", default: "5,30,300" },
    seed: { type: "string", default: "43" },
    "t-isolate": { type: "string", default: "60" },
    scale: { type: "string", default: "0.1" },
    cap: { type: "string", default: "20" },
    "keep-warm-s": { type: "string", default: "300" },
    "keep-warm-scale": { type: "string", default: "0.5" },
    "keep-warm-means": { type: "string", default: "5,30" },
    "prefill-ms": { type: "string", default: "500" },
    "token-ms": { type: "string", default: "85" },
    modes: { type: "string", default: "isolate,object,keep-warm" },
    variants: { type: "string", default: "cold,warm" },
    json: { type: "string" },
  },
});
const num = (k) => Number(values[k]);
const list = (k) => values[k].split(",").filter(Boolean);
const SESSIONS = num("sessions");
const L = num("tokens");
const T_ISOLATE = num("t-isolate");
const KEEP_S = num("keep-warm-s");
const PREFILL_MS = num("prefill-ms");
const r2Shape = { firstByteMs: 50, bytesPerSec: 15e6 };
const log = (...a) => console.error("[idle-gaps]", ...a);

/** The model: a small synthetic Q6_K lm-head (hidden 2048, vocabulary 32,768) in four shards. */
const SHARDS = 4;
const model = makeModel({ type: "q6_k", hidden: 2048, vocab: 32768, shards: SHARDS, seed: 43 });
const sliceBytes = model.manifest.shards[0].bytes;
const hidden = Array.from({ length: 8 }, (_, i) => hiddenBytes(model.manifest.hidden, 900 + i));

/** The gaps (s) of mean `m`: the same uniforms for every mean and mode. */
function gaps(m) {
  const u = generator(num("seed"));
  return Array.from({ length: SESSIONS }, () => -m * Math.log(1 - u()));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const percentile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

/** How each mode starts its shards and spends a gap (`g` seconds, emulated). */
const MODES = {
  isolate: {
    options: {},
    async gap(local, g) {
      if (g > T_ISOLATE) await Promise.all(local.endpoints.map(forget));
    },
  },
  object: {
    options: { residency: "object", lifecycle: "cloudflare", timeScale: num("scale") },
    gap: (_, g) => sleep(Math.min(g, num("cap")) * num("scale") * 1000),
  },
  "keep-warm": {
    options: { residency: "object", lifecycle: "cloudflare", timeScale: num("keep-warm-scale"), vars: { KEEP_WARM_S: String(KEEP_S * num("keep-warm-scale")) } },
    gap: (_, g) => sleep(g * num("keep-warm-scale") * 1000),
  },
};

/** One token: every shard's sampling answer; its latency and X-Cache answers. */
async function token(local, t) {
  const h = hidden[t % hidden.length];
  const t0 = performance.now();
  const answers = await Promise.all(local.endpoints.map((u) => post(u, h, { query: `?temperature=1&seed=${t}` })));
  const ms = performance.now() - t0;
  for (const a of answers) if (a.status !== 200) throw new Error(`HTTP ${a.status}: ${new TextDecoder().decode(a.body)}`);
  return { ms, caches: answers.map((a) => a.headers.get("x-cache")) };
}

/** One session: in the "warm" variant `warm()` beside the prefill first; then L tokens. */
async function session(local, variant) {
  if (variant === "warm") await Promise.all([sleep(PREFILL_MS), ...local.endpoints.map(warm)]);
  const tokens = [];
  for (let t = 0; t < L; t++) tokens.push(await token(local, t));
  return tokens;
}

/** A mode and variant over every mean: one row per mean. */
async function run(mode, variant, means) {
  const { options, gap } = MODES[mode];
  const r2 = { bytes: 0 };
  const r2Faults = { onGet: ({ key, length }) => void (key.endsWith(".bin") && (r2.bytes += length ?? sliceBytes)) };
  const local = await startShards({ shards: SHARDS, authToken: TOKEN, testBuild: true, r2Shape, r2Faults, onLog: () => {}, ...options });
  try {
    await seed(await local.bucket(), model);
    for (const round of [0, 1]) await Promise.all(local.endpoints.map((u) => post(u, hidden[round])));
    const rows = [];
    for (const m of means) {
      const [events, bytes] = [local.lifecycleEvents.length, r2.bytes];
      const sessions = [];
      for (const g of gaps(m)) {
        await gap(local, g);
        sessions.push(await session(local, variant));
      }
      const happened = local.lifecycleEvents.slice(events);
      rows.push(summarize(mode, variant, m, sessions, happened, r2.bytes - bytes));
      log(JSON.stringify(rows.at(-1)));
    }
    return rows;
  } finally {
    await local.dispose();
  }
}

/** A cell's figures from its sessions' tokens. */
function summarize(mode, variant, m, sessions, events, r2Bytes) {
  const tokens = sessions.flat();
  const waited = (t) => t.caches.some((c) => c !== "hit");
  const per1000 = 1000 / tokens.length;
  const first = sessions.map((s) => s[0].ms);
  return {
    mode,
    variant,
    mean_gap_s: m,
    sessions: sessions.length,
    tokens: tokens.length,
    cold_sessions: sessions.filter((s) => waited(s[0])).length,
    p_cold_derived: pCold(mode, m),
    waited_per_1000: tokens.filter(waited).length * per1000,
    loads: r2Bytes / sliceBytes,
    r2_mb_per_1000: (r2Bytes * per1000) / 1e6,
    first_p50_ms: percentile(first, 0.5),
    first_p99_ms: percentile(first, 0.99),
    warm_p50_ms: percentile(tokens.filter((t) => !waited(t)).map((t) => t.ms), 0.5),
    hibernated: events.filter((e) => e.what === "hibernated").length,
    evicted: events.filter((e) => e.what === "evicted").length,
    keep_warm_usd_per_shard_day: mode === "keep-warm" ? keepWarmCost(m) : 0,
  };
}

/** P(a session starts cold), derived: the gap outlasts what holds the slice (see the top). */
function pCold(mode, m) {
  if (mode === "isolate") return Math.exp(-T_ISOLATE / m);
  if (mode === "object") return Math.exp(-10 / m);
  return Math.exp(-(KEEP_S + 10) / m) * (m / 30) * (1 - Math.exp(-30 / m));
}

/** Keep-warm's cost per shard-day of back-to-back sessions, derived (see the top). */
function keepWarmCost(m) {
  const heldPerGap = m * (1 - Math.exp(-(KEEP_S + 15) / m));
  const heldFraction = heldPerGap / (m + (L * num("token-ms")) / 1000);
  const heldS = 86_400 * heldFraction;
  return (heldS * 0.125 * 12.5) / 1e6 + ((heldS / 30) * 0.15) / 1e6;
}

const rows = [];
const kwMeans = list("keep-warm-means").map(Number);
for (const mode of list("modes")) {
  for (const variant of list("variants")) {
    if (mode === "keep-warm" && variant === "warm") continue; // a held object is warm: nothing to hide
    const means = list("means").map(Number).filter((m) => mode !== "keep-warm" || kwMeans.includes(m));
    log(`${mode}, ${variant}…`);
    rows.push(...(await run(mode, variant, means)));
  }
}
for (const m of list("means").map(Number).filter((m) => list("modes").includes("keep-warm") && !kwMeans.includes(m))) {
  rows.push({ mode: "keep-warm", variant: "cold", mean_gap_s: m, derived_only: true, p_cold_derived: pCold("keep-warm", m), keep_warm_usd_per_shard_day: keepWarmCost(m) });
}
const meta = { ...values, shards: SHARDS, slice_mb: sliceBytes / 1e6, r2_shape: r2Shape };
if (values.json) writeFileSync(values.json, JSON.stringify({ meta, rows }, null, 2));
report(rows);

/** The table (markdown on stdout). */
function report(rows) {
  const ms = (x) => (x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(0)} ms`);
  const pct = (p) => `${(100 * p).toFixed(p < 0.001 && p > 0 ? 3 : 1)} %`;
  console.log("| mode | session start | mean gap | cold sessions (measured) | P(cold), derived | tokens that waited, per 1,000 | slice loads | R2 MB per 1,000 tokens | first token p50 | first token p99 | lifecycle events | keep-warm $ per shard-day (derived) |");
  console.log("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|");
  for (const r of rows) {
    const label = r.variant === "warm" ? `\`warm()\` + ${PREFILL_MS} ms prefill` : "first token at once";
    const cost = r.mode === "keep-warm" ? `$${r.keep_warm_usd_per_shard_day.toFixed(3)}` : "$0";
    if (r.derived_only) {
      console.log(`| ${r.mode} | ${label} | ${r.mean_gap_s} s | not run | ${pct(r.p_cold_derived)} | ≈ ${((r.p_cold_derived * 1000) / L).toFixed(0)} (derived) | — | — | — | — | — | ${cost} |`);
      continue;
    }
    const events = r.mode === "isolate" ? "—" : `${r.hibernated} hibernated, ${r.evicted} evicted`;
    console.log(`| ${r.mode} | ${label} | ${r.mean_gap_s} s | ${r.cold_sessions} / ${r.sessions} | ${pct(r.p_cold_derived)} | ${r.waited_per_1000.toFixed(0)} | ${Number(r.loads.toFixed(1))} | ${r.r2_mb_per_1000.toFixed(0)} | ${ms(r.first_p50_ms)} | ${ms(r.first_p99_ms)} | ${events} | ${cost} |`);
  }
}

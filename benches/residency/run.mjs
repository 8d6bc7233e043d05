#!/usr/bin/env node
// What object residency changes for a decoding loop when the platform keeps replacing isolates:
// eight shards of a qwen2.5-7b Q6_K lm-head, closed decoding loops of C streams (1 and 16), in
// three configurations on one schedule of isolate replacements:
//
// * warm: the plain Worker (RESIDENCY = "isolate"), no isolate ever replaced: what every other
//   benchmark here measures;
// * isolate: the plain Worker with its isolates replaced (each new one loads its slice again);
// * object: RESIDENCY = "object", the same replacements hitting the Worker's isolates, which hold
//   nothing: the slice stays in the shard's Durable Object.
//
// Emulation. Each shard is its own workerd process (they compute in parallel, on this machine's
// two cores), holding K front isolates in service (workers that serve the shard's URL,
// `worker/local.mjs` `fronts`), spare ones, and, with object residency, the object's own
// isolate. A random balancer picks a front for each request. Before a request, with
// probability P (default 0.25), the balancer replaces the front it picked with a fresh isolate
// (a spare that dropped its slice: nothing resident, as in a new isolate; the start-up of a new
// isolate itself, a few milliseconds of wasm instantiation, is not emulated); the old one
// finishes its requests first, as on Cloudflare (`Balancer`). P is the
// calibration: in the plain mode a replaced front's first request loads the slice, so ~P of a
// shard's requests are cold (more at C = 16, where other streams' requests wait for that load),
// i.e. a per-shard warm fraction of ~1 − P = 75 %, the seed proposal's production figure. The
// decisions come from one seeded generator per stream, so every mode meets the same schedule.
// R2 is paced as production's (benches/cold: first byte after 50 ms, 15 MB/s per stream).
// Before the measured tokens every front (and object) is warmed.
//
// A token is one request per shard (`?temperature=1&seed=…`, the sampling form), all eight at
// once; its latency is the slowest shard's. A token "waited for a load" when any of its answers
// says `X-Cache: miss` (it loaded the slice) or `wait` (it waited for another request's load).
// Slice loads are the `miss` answers; R2 bytes are loads × the slice's size (each load reads the
// whole slice once; manifest checks add a few hundred bytes each, left out).
//
//   node benches/residency/run.mjs [--fronts 2] [--spares 8] [--replace 0.25] [--tokens 128] [--streams 1,16]
//        [--modes warm,isolate,object] [--json FILE] [--svg FILE]
//   (--tokens: per configuration, shared by its streams)
//   (after scripts/build-for-bench.sh and the test shard, scripts/build-worker.sh --test; see
//    scripts/residency-bench.sh)
import { parseArgs } from "node:util";
import { writeFileSync } from "node:fs";
import { startShards } from "../../worker/local.mjs";
import { generator } from "../random.mjs";
import { hiddenBytes, post, TOKEN } from "../../tests/worker/helpers.mjs";
import { benchModel, forget, shardState } from "../model.mjs";

const { values } = parseArgs({
  options: {
    fronts: { type: "string", default: "2" },
    spares: { type: "string", default: "8" },
    replace: { type: "string", default: "0.25" },
    tokens: { type: "string", default: "128" },
    streams: { type: "string", default: "1,16" },
    modes: { type: "string", default: "warm,isolate,object" },
    "first-byte-ms": { type: "string", default: "50" },
    "mb-per-s": { type: "string", default: "15" },
    json: { type: "string" },
    svg: { type: "string" },
  },
});
const fronts = Number(values.fronts);
const spares = Number(values.spares);
const replaceP = Number(values.replace);
const tokensPerConfig = Number(values.tokens);
const r2Shape = { firstByteMs: Number(values["first-byte-ms"]), bytesPerSec: Number(values["mb-per-s"]) * 1e6 };
const log = (...a) => console.error("[residency]", ...a);
const SHARDS = 8;

const model = benchModel({ log });
const { manifest } = model;
const sliceBytes = manifest.shards[0].bytes;
const hidden = Array.from({ length: 8 }, (_, i) => hiddenBytes(manifest.hidden, 700 + i));

const percentile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

/** A shard's fronts as the balancer sees them: `fronts` in service, the rest spare. Replacing a
 * front puts a fresh spare in its place; the old one finishes its requests, then drops its slice
 * (`POST /__fault/forget`: nothing resident, as in a new isolate) and becomes a spare. */
class Balancer {
  constructor(urls) {
    this.active = urls.slice(0, fronts);
    this.spares = urls.slice(fronts);
    this.inFlight = new Map(urls.map((u) => [u, 0]));
    this.retiring = new Set();
    this.replaced = 0;
    this.skipped = 0;
  }

  /** The front for a request (`fresh`: replace it first, if a spare is ready; else the
   * replacement is skipped and counted), counted in flight from now on. */
  pick(random, fresh) {
    const slot = Math.floor(random() * this.active.length);
    if (fresh && this.spares.length === 0) this.skipped++;
    else if (fresh) {
      const old = this.active[slot];
      this.active[slot] = this.spares.shift();
      this.replaced++;
      this.retire(old);
    }
    const url = this.active[slot];
    this.inFlight.set(url, this.inFlight.get(url) + 1);
    return url;
  }

  retire(url) {
    this.retiring.add(url);
    if (this.inFlight.get(url) === 0) this.reset(url);
  }

  async reset(url) {
    this.retiring.delete(url);
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        await forget(url);
        break;
      } catch {} // a kept-alive connection the runtime closed: again
    }
    this.spares.push(url);
  }

  /** The shard's answer from `url` (as `pick` gave it) for token `t`. */
  async ask(url, h, t) {
    try {
      const a = await post(url, h, { query: `?temperature=1&seed=${t}` });
      if (a.status !== 200) throw new Error(`HTTP ${a.status}: ${new TextDecoder().decode(a.body)}`);
      return a;
    } finally {
      this.inFlight.set(url, this.inFlight.get(url) - 1);
      if (this.inFlight.get(url) === 0 && this.retiring.has(url)) this.reset(url);
    }
  }
}

/** One mode at C streams: the per-token figures. */
async function run(mode, streams) {
  const residency = mode === "object" ? "object" : "isolate";
  const states = [];
  for (let i = 0; i < SHARDS; i++) states.push(await shardState(model, i));
  const shards = await Promise.all(
    states.map((state, i) =>
      // The shards' log lines (a line per load) would go to standard output, the report's.
      startShards({ shards: 1, state, authToken: TOKEN, testBuild: true, r2Shape, fronts: fronts + spares, residency, vars: { SHARD_INDEX: String(i), SHARD_COUNT: String(SHARDS) }, onLog: () => {} }),
    ),
  );
  try {
    const balancers = shards.map((s) => new Balancer(s.frontEndpoints[0]));
    // Warm the fronts in service (and, through them, the objects) before the measured tokens.
    for (const round of [0, 1]) {
      await Promise.all(balancers.flatMap((b) => b.active.map((u) => post(u, hidden[round]))));
    }
    const replace = mode !== "warm" && replaceP > 0;
    const tokens = [];
    const tokensPerStream = Math.ceil(tokensPerConfig / streams);
    await Promise.all(
      Array.from({ length: streams }, async (_, s) => {
        const random = generator(1 + s);
        for (let t = 0; t < tokensPerStream; t++) {
          const picks = balancers.map((b) => {
            const [r, fresh] = [random(), random() < replaceP];
            return b.pick(() => r, fresh && replace);
          });
          const t0 = performance.now();
          const h = hidden[(s + t) % hidden.length];
          const answers = await Promise.all(picks.map((url, i) => balancers[i].ask(url, h, t)));
          const ms = performance.now() - t0;
          const caches = answers.map((a) => a.headers.get("x-cache"));
          tokens.push({ ms, caches });
        }
      }),
    );
    const ms = tokens.map((t) => t.ms);
    const caches = tokens.flatMap((t) => t.caches);
    const loads = caches.filter((c) => c === "miss").length;
    const per1000 = 1000 / tokens.length;
    return {
      mode,
      streams,
      tokens: tokens.length,
      replaced_fronts: balancers.reduce((n, b) => n + b.replaced, 0),
      replacements_skipped: balancers.reduce((n, b) => n + b.skipped, 0),
      shard_warm_fraction: caches.filter((c) => c === "hit").length / caches.length,
      waited_per_1000: tokens.filter((t) => t.caches.some((c) => c !== "hit")).length * per1000,
      loads,
      r2_mb_per_1000: (loads * sliceBytes * per1000) / 1e6,
      p50_ms: percentile(ms, 0.5),
      p99_ms: percentile(ms, 0.99),
      mean_ms: ms.reduce((a, b) => a + b, 0) / ms.length,
    };
  } finally {
    await Promise.all(shards.map((s) => s.dispose()));
  }
}

const results = [];
for (const streams of values.streams.split(",").map(Number)) {
  for (const mode of values.modes.split(",")) {
    log(`${mode}, ${streams} stream(s)…`);
    const r = await run(mode, streams);
    log(JSON.stringify(r));
    results.push(r);
  }
}
const meta = { fronts, spares, replace: replaceP, tokens_per_config: tokensPerConfig, r2_shape: r2Shape, slice_mb: sliceBytes / 1e6 };
if (values.json) writeFileSync(values.json, JSON.stringify({ ...meta, results }, null, 2));

// The report (markdown on stdout).
function f(ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`;
}
console.log("| streams | mode | tokens | shard requests warm | tokens that waited for a load, per 1,000 | slice loads | R2 MB per 1,000 tokens | p50 | p99 | mean | mean vs warm |");
console.log("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const r of results) {
  const warm = results.find((w) => w.mode === "warm" && w.streams === r.streams);
  const ratio = warm ? `${(r.mean_ms / warm.mean_ms).toFixed(2)}×` : "—";
  console.log(`| ${r.streams} | ${r.mode} | ${r.tokens} | ${(100 * r.shard_warm_fraction).toFixed(0)} % | ${r.waited_per_1000.toFixed(0)} | ${r.loads} | ${r.r2_mb_per_1000.toFixed(0)} | ${f(r.p50_ms)} | ${f(r.p99_ms)} | ${f(r.mean_ms)} | ${ratio} |`);
}

// The chart: mean and p99 per-token latency, one group of bars per stream count.
if (values.svg) {
  const max = Math.max(...results.map((r) => r.p99_ms));
  const bar = 14, gap = 4, left = 170, width = 480;
  let y = 30;
  const parts = [`<text x="8" y="18" font-weight="bold">Per-token latency, eight shards (mean: bar; p99: tick)</text>`];
  const colour = { warm: "#999", isolate: "#d9534f", object: "#2a6fdb" };
  for (const streams of [...new Set(results.map((r) => r.streams))]) {
    parts.push(`<text x="8" y="${y + 11}" font-weight="bold">${streams} stream${streams > 1 ? "s" : ""}</text>`);
    y += bar + gap;
    for (const r of results.filter((r) => r.streams === streams)) {
      const w = Math.max(1, (r.mean_ms / max) * width);
      const p99 = left + (r.p99_ms / max) * width;
      parts.push(
        `<text x="${left - 6}" y="${y + 11}" text-anchor="end">${r.mode === "warm" ? "isolate, never replaced" : `${r.mode} residency`}</text>`,
        `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${bar}" fill="${colour[r.mode] ?? "#2a6fdb"}"/>`,
        `<line x1="${p99.toFixed(1)}" x2="${p99.toFixed(1)}" y1="${y}" y2="${y + bar}" stroke="#000"/>`,
        `<text x="${Math.max(left + w, p99) + 6}" y="${y + 11}">${f(r.mean_ms)} (p99 ${f(r.p99_ms)})</text>`,
      );
      y += bar + gap;
    }
    y += gap * 2;
  }
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="860" height="${y + 10}" font-family="sans-serif" font-size="12">\n${parts.join("\n")}\n</svg>\n`;
  writeFileSync(values.svg, svg);
}

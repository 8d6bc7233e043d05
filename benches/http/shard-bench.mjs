#!/usr/bin/env node
// End-to-end benchmark of one shard in workerd (Miniflare) over HTTP on loopback: a cold
// request (R2 stream + checksum + first mat-vec) and warm requests (exact, then int8), for
// 32768×5376 Q4_K and Q6_K slices (Q6_K also in the packed6 layout), with the wasm memory the
// shard reports and workerd's peak RSS. Each slice is served by both shard builds in turn: the
// relaxed-SIMD one (worker/build) and the plain simd128 one (target/worker-plain/build), rows
// named by the backend /healthz reports; the int8 / exact column is the ratio of their median
// compute times in the same process.
//
//   node benches/http/shard-bench.mjs [--runs 9]   (after scripts/build-worker.sh,
//     COBORDISM_WASM_SIMD=plain scripts/build-worker.sh --out target/worker-plain/build and
//     cargo build --release -p cobordism)
import { parseArgs } from "node:util";
import { execSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { startShards, SCRIPT, PLAIN_SCRIPT } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, post, health } from "../../tests/worker/helpers.mjs";

const { values } = parseArgs({ options: { runs: { type: "string", default: "9" } } });
const runs = Number(values.runs);
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

function workerdPeakRssMiB() {
  const pids = execSync("pgrep -f 'workerd serve' || true", { encoding: "utf8" }).trim().split("\n");
  const peaks = pids.map((pid) => {
    try {
      return Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;
    } catch {
      return 0; // the pgrep shell itself, already gone
    }
  });
  return Math.max(0, ...peaks);
}

const builds = [SCRIPT, PLAIN_SCRIPT];
console.log(`| slice | kernels | MiB | cold request ms | warm request ms (median of ${runs}) | server compute ms | per-request overhead ms (warm − compute) | int8: warm request / compute ms | int8 / exact compute | wasm memory MiB | workerd peak RSS MiB |`);
console.log("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const [type, layout] of [["q4_k"], ["q6_k"], ["q6_k", "packed6"]]) {
  const model = makeModel({ type, hidden: 5376, vocab: 32768, shards: 1, seed: 1, budgetMib: 200, layout });
  for (const script of builds) {
    // A Q6_K slice of this shape (138 MiB) is over the default budget: raise it for the benchmark.
    const local = await startShards({ shards: 1, anonymous: true, script, vars: { MEMORY_BUDGET_MIB: "200" } });
    try {
      await seed(await local.bucket(), model);
      const h = hiddenBytes(5376, 1);
      let t = performance.now();
      const cold = await post(local.endpoints[0], h);
      const coldMs = performance.now() - t;
      if (cold.status !== 200) throw new Error(`cold request: ${cold.status} ${new TextDecoder().decode(cold.body)}`);
      const timeWarm = async (query) => {
        const warm = [];
        const compute = [];
        for (let i = 0; i < runs; i++) {
          t = performance.now();
          const r = await post(local.endpoints[0], h, { query });
          if (r.status !== 200) throw new Error(`warm request${query}: ${r.status}`);
          warm.push(performance.now() - t);
          compute.push(Number(/compute;dur=([\d.]+)/.exec(r.headers.get("server-timing") ?? "")?.[1] ?? NaN));
        }
        return [median(warm), median(compute)];
      };
      const [warm, compute] = await timeWarm("");
      const [warm8, compute8] = await timeWarm("?precision=int8");
      const hz = await health(local.endpoints[0]);
      const mib = (b) => (b / 1048576).toFixed(1);
      console.log(`| ${type} 32768×5376${layout ? ` (${layout} layout)` : ""} | ${hz.backend} | ${mib(model.manifest.shards[0].bytes)} | ${coldMs.toFixed(0)} | ${warm.toFixed(1)} | ${compute} | ${(warm - compute).toFixed(1)} | ${warm8.toFixed(1)} / ${compute8} | ${(compute8 / compute).toFixed(2)} | ${mib(hz.wasm_memory_bytes)} | ${workerdPeakRssMiB().toFixed(0)} |`);
    } finally {
      await local.dispose();
    }
  }
}

// The engine benchmark in Node: `node [V8 flags] node.mjs WASM JOB_JSON [GGML_WASM]` prints the
// results as JSON (run.mjs starts one process per job, so each job meets a fresh engine); the
// candle job also times llama.cpp's ggml module when its path is given.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { candle, idioms, imports, int8Check, kernel, layout } from "./harness.mjs";

const [wasmPath, jobJson, ggmlPath] = process.argv.slice(2);
const job = JSON.parse(jobJson);
const instantiate = (path) => {
  const module = new WebAssembly.Module(readFileSync(path));
  return new WebAssembly.Instance(module, imports(module)).exports;
};
const ex = instantiate(wasmPath);
const now = () => performance.now();
let result;
if (job.what === "idioms") result = idioms(ex, now, job);
else if (job.what === "kernel") result = kernel(ex, now, job);
else if (job.what === "layout") result = layout(ex, now, job);
else if (job.what === "candle") result = candle(ex, now, job, ggmlPath && instantiate(ggmlPath));
else if (job.what === "int8-check") result = int8Check(ex, now, job);
else if (job.what === "engine") result = (await import("./natives.mjs")).engine();
else throw new Error(`unknown job ${job.what}`);
console.log(JSON.stringify(result));

#!/usr/bin/env node
// The engine benchmark: the same wasm module (benches/engine/src) and the same harness
// (harness.mjs) in workerd — the runtime Workers run, V8 14.x — and in Node 20 (V8 11.3), each
// job in a fresh process, so a kernel's first call meets an engine that has not yet optimized it.
//
//   cargo build --release -p cobordism-engine-bench --target wasm32-unknown-unknown
//   node benches/engine/run.mjs [--runs 5] [--jobs idioms,kernels,batches,layout,candle,relaxed]
//     [--procs 1] [--ggml-wasm FILE] [--v8-flags "…"] [--json FILE]
//
// `candle` times candle-core's simd128 kernel from the module built with feature `candle`
// (`--candle-wasm`, default where scripts/bench.sh builds it) and llama.cpp's ggml simd128
// kernels from their own module (`--ggml-wasm`, default where scripts/build-ggml-wasm.sh builds
// it; left out with a line saying so when it is not there or the option is empty), after
// checking ggml's results against kquant int8's; `layout` the Q6_K kernels on kquant's packed6
// layout against ggml's, after checking their bits on every row.
//
// `--v8-flags` passes engine flags to both runtimes, to test a hypothesis (tiering, bounds checks,
// SIMD lowering); production runs Cloudflare's own V8 settings, so no flag is ever shipped.
// Prints Markdown tables: idioms in ns per operation, kernels in ms per call.
import { spawn, execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { median } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "5" },
    procs: { type: "string", default: "1" },
    jobs: { type: "string", default: "idioms,kernels" },
    "v8-flags": { type: "string", default: "" },
    wasm: { type: "string", default: join(root, "target/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm") },
    "candle-wasm": {
      type: "string",
      default: join(root, "target/engine-candle/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm"),
    },
    "ggml-wasm": { type: "string", default: join(root, "target/ggml-wasm/ggml.wasm") },
    "relaxed-wasm": {
      type: "string",
      default: join(root, "target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm"),
    },
    json: { type: "string" },
  },
});
const runs = Number(values.runs);
const procs = Number(values.procs);
if (!(Number.isInteger(procs) && procs >= 1)) throw new Error(`--procs must be a whole number ≥ 1, not ${values.procs}`);
const flags = values["v8-flags"].split(/\s+/).filter(Boolean);
const natives = flags.includes("--allow-natives-syntax");
const workerdBin = join(root, "node_modules/@cloudflare/workerd-linux-64/bin/workerd");

const freePort = () =>
  new Promise((ok) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });

/// Runs one job in a fresh workerd process; `extra` names further wasm modules to embed (the
/// relaxed build, ggml's), as { "name.wasm": path }.
async function inWorkerd(job, wasm = values.wasm, extra = {}) {
  const dir = mkdtempSync(join(tmpdir(), "engine-bench-"));
  try {
    for (const f of ["worker.mjs", "harness.mjs", "natives.mjs"]) copyFileSync(join(here, f), join(dir, f));
    copyFileSync(wasm, join(dir, "engine.wasm"));
    for (const [name, path] of Object.entries(extra)) copyFileSync(path, join(dir, name));
    const port = await freePort();
    const modules = [
      `(name = "worker.mjs", esModule = embed "worker.mjs")`,
      `(name = "harness.mjs", esModule = embed "harness.mjs")`,
      `(name = "engine.wasm", wasm = embed "engine.wasm")`,
      ...Object.keys(extra).map((name) => `(name = "${name}", wasm = embed "${name}")`),
      ...(natives ? [`(name = "natives.mjs", esModule = embed "natives.mjs")`] : []),
    ];
    writeFileSync(
      join(dir, "config.capnp"),
      `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "main", worker = .bench)],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
  v8Flags = ${JSON.stringify(flags)},
);
const bench :Workerd.Worker = (
  modules = [${modules.join(", ")}],
  compatibilityDate = "2026-04-26",
);
`,
    );
    const child = spawn(workerdBin, ["serve", join(dir, "config.capnp")], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    try {
      for (let i = 0; ; i++) {
        try {
          const r = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: JSON.stringify(job) });
          if (!r.ok) throw new Error(`workerd answered ${r.status}: ${await r.text()}`);
          return await r.json();
        } catch (e) {
          if (i > 100 || e.message.startsWith("workerd answered")) throw new Error(`${e.message}\n${stderr}`);
          await new Promise((ok) => setTimeout(ok, 100));
        }
      }
    } finally {
      child.kill();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/// Runs one job in a fresh Node process (`ggml`: the path of ggml's module, for the candle job).
function inNode(job, wasm = values.wasm, ggml = null) {
  const args = [...flags, join(here, "node.mjs"), wasm, JSON.stringify(job)];
  if (ggml) args.push(ggml);
  const out = execFileSync(process.execPath, args, {
    encoding: "utf8",
    maxBuffer: 1 << 24,
  });
  return JSON.parse(out);
}

const CASES = [
  { kase: 0, label: "q6_k 32768×5376" },
  { kase: 1, label: "q4_k 32768×5376" },
];
const fmt = (v, d = 1) => v.toFixed(d);
const json = [];
const wanted = values.jobs.split(",");

if (natives) {
  console.log(`engine: workerd ${JSON.stringify(await inWorkerd({ what: "engine" }))}, node ${JSON.stringify(inNode({ what: "engine" }))}\n`);
}
if (flags.length) console.log(`V8 flags (both engines, diagnosis only): \`${flags.join(" ")}\`\n`);

if (wanted.includes("idioms")) {
  const job = { what: "idioms", runs };
  const [w, n] = [await inWorkerd(job), inNode(job)];
  console.log("| idiom (16 KiB in L1, 4 accumulators) | workerd ns/op | Node ns/op | workerd / Node |");
  console.log("|---|---:|---:|---:|");
  w.forEach((r, i) => {
    console.log(`| ${r.name} | ${fmt(r.nsPerOp, 3)} | ${fmt(n[i].nsPerOp, 3)} | ${fmt(r.nsPerOp / n[i].nsPerOp, 2)} |`);
    json.push({ job: "idiom", name: r.name, workerd: r.nsPerOp, node: n[i].nsPerOp });
  });
  console.log();
}

if (wanted.includes("kernels")) {
  console.log("| case | mode | workerd ms | Node ms | workerd / Node | workerd first call ms | Node first call ms | memory floor ms (workerd / Node) |");
  console.log("|---|---|---:|---:|---:|---:|---:|---:|");
  for (const c of CASES) {
    for (const int8 of [false, true]) {
      const job = { what: "kernel", kase: c.kase, int8, runs };
      const [w, n] = [await inWorkerd(job), inNode(job)];
      const mode = int8 ? "int8" : "exact";
      console.log(`| ${c.label} | ${mode} | ${fmt(w.warm)} | ${fmt(n.warm)} | ${fmt(w.warm / n.warm, 2)} | ${fmt(w.first, 0)} | ${fmt(n.first, 0)} | ${fmt(w.floor)} / ${fmt(n.floor)} |`);
      json.push({ job: "kernel", case: c.label, mode, workerd: w, node: n });
    }
  }
  console.log();
}

if (wanted.includes("batches")) {
  console.log("| case | mode | vectors | workerd ms per call | ms per vector | per vector vs single | Node ms per vector |");
  console.log("|---|---|---:|---:|---:|---:|---:|");
  for (const c of CASES) {
    let single;
    for (const batch of [1, 2, 4, 8]) {
      const job = { what: "kernel", kase: c.kase, int8: true, batch, runs };
      const [w, n] = [await inWorkerd(job), inNode(job)];
      single ??= w.warm;
      console.log(`| ${c.label} | int8 | ${batch} | ${fmt(w.warm)} | ${fmt(w.warm / batch)} | ${fmt((w.warm / batch) / single, 2)} | ${fmt(n.warm / batch)} |`);
      json.push({ job: "batch", case: c.label, batch, workerd: w, node: n });
    }
  }
  console.log();
}

if (wanted.includes("layout")) {
  console.log("| q6_k 32768×5376 | vectors | ggml's layout, workerd ms | packed6 (same bits, checked on every row), workerd ms | packed6 / ggml (workerd) | packed6 / ggml (Node) |");
  console.log("|---|---:|---:|---:|---:|---:|");
  for (const batch of [1, 8]) {
    const job = { what: "layout", runs, batch };
    const [w, n] = [await inWorkerd(job), inNode(job)];
    for (const [mode, a, b] of [["exact", "ggml", "packed"], ["int8", "ggmlInt8", "packedInt8"]]) {
      console.log(`| ${mode} | ${batch} | ${fmt(w[a])} | ${fmt(w[b])} | ${fmt(w[b] / w[a], 2)} | ${fmt(n[b] / n[a], 2)} |`);
    }
    json.push({ job: "layout", batch, workerd: w, node: n });
  }
  console.log();
}

if (wanted.includes("candle")) {
  // The module built with feature `candle` (scripts/bench.sh builds it in its own target dir),
  // and ggml's module when it was built (scripts/build-ggml-wasm.sh). Each cell: workerd / Node.
  const ggml = values["ggml-wasm"] && existsSync(values["ggml-wasm"]) ? values["ggml-wasm"] : null;
  const both = (w, n, f, d = 1) => `${fmt(f(w), d)} / ${fmt(f(n), d)}`;
  const head = [
    "case, one vector (ms: workerd / Node)",
    ...(ggml ? ["ggml"] : []),
    "candle (8-bit x)",
    "kquant int8",
    "kquant exact",
    ...(ggml ? ["kquant int8 / ggml speed", "ggml vs int8: max \\|Δy\\| / max \\|y\\|"] : []),
    "candle / kquant int8",
  ];
  console.log(`| ${head.join(" | ")} |`);
  console.log(`|---|${head.slice(1).map(() => "---:").join("|")}|`);
  for (const c of CASES) {
    const job = { what: "candle", kase: c.kase, runs, ggml: Boolean(ggml) };
    const w = await inWorkerd(job, values["candle-wasm"], ggml ? { "ggml.wasm": ggml } : {});
    const n = inNode(job, values["candle-wasm"], ggml);
    const cells = [
      c.label,
      ...(ggml ? [both(w, n, (r) => r.ggml)] : []),
      both(w, n, (r) => r.candle),
      both(w, n, (r) => r.int8),
      both(w, n, (r) => r.exact),
      ...(ggml ? [both(w, n, (r) => r.ggml / r.int8, 2), w.ggmlDiff.toExponential(1)] : []),
      both(w, n, (r) => r.candle / r.int8, 2),
    ];
    console.log(`| ${cells.join(" | ")} |`);
    json.push({ job: "candle", case: c.label, workerd: w, node: n });
  }
  const where = values["ggml-wasm"] || "(none given)";
  if (!ggml) console.log(`\nggml left out: no module at \`${where}\` (scripts/build-ggml-wasm.sh)`);
  console.log();
}

if (wanted.includes("relaxed")) {
  // The same module built twice, plain simd128 and with relaxed SIMD (`--relaxed-wasm`: the int8
  // kernels on relaxed SIMD's 8-bit dot product), both in one workerd process and alternated
  // call by call (their ratio moves far less than either alone: this VM's speed varies 2× over
  // minutes); workerd only, since Node 20's relaxed SIMD is not the final instruction.
  // The read floor is the faster of the two read-only passes timed beside the kernels (each
  // 64-byte line touched; every byte loaded into a v128): "/ floor" is a kernel's time per
  // vector over it. With `--procs N` each row is N such processes, every figure and ratio the
  // median of the processes' own.
  console.log("| case | vectors | plain int8 workerd ms per vector | relaxed int8 workerd ms per vector | relaxed / plain | relaxed, per vector vs one vector | exact workerd ms | relaxed int8 / exact | read floor ms (lines / v128 loads) | plain int8 / floor | relaxed int8 / floor |");
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const c of CASES) {
    let single, singlePacked, singleInterleaved;
    for (const batch of [1, 8]) {
      const extra = { "relaxed.wasm": values["relaxed-wasm"] };
      const ws = [];
      for (let i = 0; i < procs; i++) {
        ws.push(await inWorkerd({ what: "relaxed", kase: c.kase, batch, runs }, values.wasm, extra));
      }
      // Each figure and each ratio: the median over the processes of each process's own (the
      // same kernel's time moves between processes far more than within one).
      const med = (f) => median(ws.map(f));
      const floorOf = (w) => Math.min(w.floor, w.floorSimd);
      single ??= med((w) => w.relaxed / batch);
      const floors = `${fmt(med((w) => w.floor), 2)} / ${fmt(med((w) => w.floorSimd), 2)}`;
      const exact = med((w) => w.exact / batch);
      const row = (label, plain, relaxed, single) => {
        const [pp, xp] = [med((w) => w[plain] / batch), med((w) => w[relaxed] / batch)];
        const [toPlain, pFloor, xFloor] = [
          med((w) => w[relaxed] / w[plain]),
          med((w) => w[plain] / batch / floorOf(w)),
          med((w) => w[relaxed] / batch / floorOf(w)),
        ];
        return { line: `| ${label} | ${batch} | ${fmt(pp, 2)} | ${fmt(xp, 2)} | ${fmt(toPlain, 2)} | ${fmt(xp / (single ?? xp), 2)} |`, xp, pFloor, xFloor };
      };
      const main = row(c.label, "plain", "relaxed", single);
      console.log(`${main.line} ${fmt(exact, 2)} | ${fmt(med((w) => w.relaxed / w.exact), 2)} | ${floors} | ${fmt(main.pFloor, 2)} | ${fmt(main.xFloor, 2)} |`);
      if (ws[0].relaxedPacked6 !== undefined) {
        const r = row(`${c.label}, packed6`, "plainPacked6", "relaxedPacked6", singlePacked);
        singlePacked ??= r.xp;
        console.log(`${r.line} | | ${floors} | ${fmt(r.pFloor, 2)} | ${fmt(r.xFloor, 2)} |`);
      }
      const r = row(`${c.label}, interleaved`, "plainInterleaved", "relaxedInterleaved", singleInterleaved);
      singleInterleaved ??= r.xp;
      console.log(`${r.line} | | ${floors} | ${fmt(r.pFloor, 2)} | ${fmt(r.xFloor, 2)} |`);
      const w = Object.fromEntries(Object.keys(ws[0]).map((k) => [k, med((one) => one[k])]));
      json.push({ job: "relaxed", case: c.label, batch, workerd: w, processes: ws });
    }
  }
  console.log();
}

if (wanted.includes("bit-exact")) {
  // The bit-exact table's lines from the module in workerd (scripts/bit-exact.sh), one per
  // backend, format and mode.
  const r = await inWorkerd({ what: "bit-exact" });
  console.log(r.lines.join("\n"));
}

if (wanted.includes("check")) {
  // A test, not a measurement: the best backend's int8 products against the scalar backend's
  // (src/int8_check.rs), in workerd only, where a relaxed build's results count.
  const r = await inWorkerd({ what: "int8-check", first: 0, count: 300 });
  console.log(`int8 check in workerd: ${r.cases} cases, ${r.differing} results differ from the scalar backend's`);
}

if (values.json) writeFileSync(values.json, json.map((j) => JSON.stringify(j)).join("\n") + "\n");

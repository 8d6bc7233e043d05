#!/usr/bin/env -S node --no-warnings=ExperimentalWarning
// Cargo runner for wasm32-wasip1: runs a test binary under Node's built-in WASI.
// Usage (set in .cargo/config.toml): node scripts/wasi-run.mjs file.wasm [args…]
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";
import process from "node:process";
import { setFlagsFromString } from "node:v8";

// Every function compiled optimized up front instead of tiered up in the background: Node 20's
// V8 (11.3) sometimes crashes at exit (SIGSEGV after the program finished, ~1 run in 12 of the
// kernel benchmark) while a background tier-up job is still running. The optimized code is the
// same either way.
setFlagsFromString("--no-wasm-dynamic-tiering");

const [file, ...args] = process.argv.slice(2);
if (!file) {
  console.error("usage: wasi-run.mjs FILE.wasm [ARGS…]");
  process.exit(2);
}
const wasi = new WASI({
  version: "preview1",
  args: [file, ...args],
  env: { RUST_BACKTRACE: "0" },
  preopens: { "/": "/" },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(file));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance);

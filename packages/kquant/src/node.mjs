// The Node entry of @cobordism/kquant: instantiates a wasm module synchronously, so the exports
// are ready to use on import. The package holds two builds of the same crate with the same glue:
// the relaxed one (int8 kernels on relaxed SIMD's 8-bit dot product, the same bits) where this
// engine runs relaxed SIMD as specified, else plain simd128. Node 20's relaxed SIMD (V8 11.3,
// behind a flag) predates the final instruction and computes other sums, so it is never used:
// V8 shipped the final one in 11.4. `kernelBackend()` says which build runs.
import { readFileSync } from "node:fs";
import { initSync } from "../dist/kquant_js.js";

const file = (name) => readFileSync(new URL(`../dist/${name}`, import.meta.url));
const [major, minor] = process.versions.v8.split(".").map(Number);
const finalRelaxedSimd = major > 11 || (major === 11 && minor >= 4);
const relaxed = finalRelaxedSimd ? file("kquant_js_relaxed_bg.wasm") : null;
initSync({ module: relaxed && WebAssembly.validate(relaxed) ? relaxed : file("kquant_js_bg.wasm") });

export * from "../dist/kquant_js.js";
export { default } from "../dist/kquant_js.js";

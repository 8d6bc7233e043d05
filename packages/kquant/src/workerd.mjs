// The Workers (workerd) entry of @cobordism/kquant: in Workers a `.wasm` import is a compiled
// `WebAssembly.Module` (wrangler's CompiledWasm rule), instantiated here synchronously, so the
// exports are ready to use on import. The relaxed-SIMD build (int8 kernels on relaxed SIMD's
// 8-bit dot product, the same bits; one glue serves both builds) is the one used: the Workers
// runtime compiles every imported module when the Worker loads, so importing it already
// required relaxed SIMD (which Workers' V8 has), and a runtime cannot compile wasm from bytes
// to choose later. `kernelBackend()` says which build runs.
import relaxed from "../dist/kquant_js_relaxed_bg.wasm";
import { initSync } from "../dist/kquant_js.js";

initSync({ module: relaxed });

export * from "../dist/kquant_js.js";
export { default } from "../dist/kquant_js.js";

// The Workers (workerd) entry of @cobordism/kquant: in Workers a `.wasm` import is a compiled
// `WebAssembly.Module` (wrangler's CompiledWasm rule), instantiated here synchronously, so the
// exports are ready to use on import.
import wasm from "../dist/kquant_js_bg.wasm";
import { initSync } from "../dist/kquant_js.js";

initSync({ module: wasm });

export * from "../dist/kquant_js.js";
export { default } from "../dist/kquant_js.js";

// The Workers (workerd) entry of @cobordism/client: a `.wasm` import is a compiled
// `WebAssembly.Module` there (wrangler's CompiledWasm rule), instantiated synchronously.
import wasm from "../dist/client_js_bg.wasm";
import { initSync } from "../dist/client_js.js";

initSync({ module: wasm });

export * from "./client.mjs";

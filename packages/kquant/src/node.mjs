// The Node entry of @cobordism/kquant: instantiates the wasm module synchronously from the file
// next to the glue, so the exports are ready to use on import.
import { readFileSync } from "node:fs";
import { initSync } from "../dist/kquant_js.js";

initSync({ module: readFileSync(new URL("../dist/kquant_js_bg.wasm", import.meta.url)) });

export * from "../dist/kquant_js.js";
export { default } from "../dist/kquant_js.js";

// The Node entry of @cobordism/client: instantiates the merge and sampling wasm synchronously
// from the file next to the glue, then exports the client.
import { readFileSync } from "node:fs";
import { initSync } from "../dist/client_js.js";

initSync({ module: readFileSync(new URL("../dist/client_js_bg.wasm", import.meta.url)) });

export * from "./client.mjs";

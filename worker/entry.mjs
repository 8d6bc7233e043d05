// The shard Worker's entry module, bundled with wasm-bindgen's output (`index.js`) into
// worker/build/index.js by scripts/build-worker.sh.
//
// It hands each request to the Rust `fetch` handler and keeps one failure from disabling the
// isolate (workerd issue 3264): workers-rs's panic hook marks the shared init state as broken,
// and so does a wasm trap seen here; the next request first resets the wasm instance (a fresh
// linear memory, wasm-bindgen's `--experimental-reset-state-function`), so the shard answers
// again — it reloads its slice on that request. An abort (failed allocation) makes
// wasm-bindgen's own abort handler schedule the same reset (`--force-enable-abort-handler`).
import { WorkerEntrypoint } from "cloudflare:workers";
import * as shard from "./index.js";

const state = shard.__worker_init_state();

function noteTrap(error) {
  if (error instanceof WebAssembly.RuntimeError) state.criticalError = true;
}

addEventListener("error", (event) => noteTrap(event.error));

export default class Shard extends WorkerEntrypoint {
  async fetch(request) {
    if (state.criticalError) {
      console.log("cobordism shard: resetting the wasm instance after a panic");
      shard.__wbg_reset_state();
      state.criticalError = false;
    }
    try {
      return await shard.fetch(request, this.env, this.ctx);
    } catch (e) {
      noteTrap(e);
      throw e;
    }
  }
}

// The shard Worker's entry module, bundled with wasm-bindgen's output (`index.js`) into
// worker/build/index.js by scripts/build-worker.sh.
//
// It hands each request to the Rust `fetch` handler and keeps one failure from disabling the
// isolate (workerd issue 3264): workers-rs's panic hook marks the shared init state as broken,
// and so does a wasm trap seen here; the next request first resets the wasm instance (a fresh
// linear memory, wasm-bindgen's `--experimental-reset-state-function`) and logs the
// `instance_reset` line (the one line printed here; its text comes from Rust), so the shard
// answers again — it reloads its slice on that request. An abort (failed allocation) makes
// wasm-bindgen's own abort handler schedule the same reset (`--force-enable-abort-handler`).
//
// The requests still in flight in a broken instance can never finish: their futures live in its
// memory, and after the reset their callbacks throw ("closure from previous WASM instance"). The
// moment the instance is marked broken they fail (an exception, as the panicking request's own),
// rather than hang: in a Durable Object, whose requests share one I/O context, the runtime would
// not notice them, and the front's forward would wait its whole timeout.
//
// `ShardObject` is the shard's Durable Object class for object residency (`RESIDENCY =
// "object"`, worker/src/object.rs): its requests and its keep-warm alarm go to the Rust
// `objectFetch` and `objectAlarm` under the same reset rule. A deployment without the
// `SHARD_OBJECT` binding never instantiates it.
import { DurableObject, WorkerEntrypoint } from "cloudflare:workers";
import * as shard from "./index.js";

// The wasm module's SHA-256, written into the bundle by scripts/build-worker.sh (esbuild's
// `--define`) once the module is built: `/healthz` names it (worker/src/handlers.rs).
globalThis.cobordismModuleSha256 = typeof COBORDISM_MODULE_SHA256 === "string" ? COBORDISM_MODULE_SHA256 : "";

const state = shard.__worker_init_state();

/** The `instance_reset` log line, from Rust (cobordism_shard::events): read now, while the
 * instance is sound, since it is printed when the instance is broken. */
const RESET_LINE = shard.instanceResetLine();

/** How each call into the current instance that has not settled yet can be failed. */
let inFlight = new Set();

/** Fails every call in flight in the instance just marked broken (see the top). */
function abandonInFlight() {
  const broken = inFlight;
  inFlight = new Set();
  const why = new Error("cobordism shard: the wasm instance broke (a panic or trap) under this request; retry");
  for (const fail of broken) fail(why);
}

// workers-rs's panic hook sets `state.criticalError`: seen here as it happens.
let broken = state.criticalError;
Object.defineProperty(state, "criticalError", {
  get: () => broken,
  set(value) {
    if (value && !broken) queueMicrotask(abandonInFlight);
    broken = value;
  },
});

function noteTrap(error) {
  if (error instanceof WebAssembly.RuntimeError) state.criticalError = true;
}

addEventListener("error", (event) => noteTrap(event.error));

/** Runs `call` into the wasm instance, resetting it first if a panic or trap broke it. */
async function guarded(call) {
  if (state.criticalError) {
    console.log(RESET_LINE);
    abandonInFlight();
    shard.__wbg_reset_state();
    state.criticalError = false;
  }
  let fail;
  const abandoned = new Promise((_, reject) => (fail = reject));
  const calls = inFlight;
  calls.add(fail);
  try {
    return await Promise.race([call(), abandoned]);
  } catch (e) {
    noteTrap(e);
    throw e;
  } finally {
    calls.delete(fail);
  }
}

export default class Shard extends WorkerEntrypoint {
  fetch(request) {
    return guarded(() => shard.fetch(request, this.env, this.ctx));
  }
}

export class ShardObject extends DurableObject {
  fetch(request) {
    return guarded(() => shard.objectFetch(request, this.env, this.ctx));
  }

  alarm() {
    return guarded(() => shard.objectAlarm(this.env, this.ctx));
  }
}

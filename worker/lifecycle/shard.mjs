// The entry module of a shard's object worker under the local lifecycle emulation (worker/local.mjs,
// `lifecycle: "cloudflare"`): the shard's `ShardObject` under ./object.mjs's wrapper, and the
// harness's control as the default export. worker/local.mjs loads it with the shard's build
// beside it: `./index.js` is that build's bundle (worker/entry.mjs with wasm-bindgen's glue,
// scripts/build-worker.sh), given to workerd under this directory. Never deployed.
//
// ./pending.mjs is imported first, so that its timer and fetch wrappers are in place before the
// bundle is evaluated.
//
// **Discarding the slice.** The slice lives in the wasm instance's linear memory, which belongs to
// the isolate. The bundle's own instance reset (worker/entry.mjs: after a panic or trap, the next
// call replaces the instance with a new one, a new linear memory) is what discards it here:
// `discardMemory` marks the instance broken through the state object the glue keeps on
// `globalThis.__worker_init_state`, and the next request or alarm builds a new instance and loads
// the slice again, as one in a new isolate would. The old memory is dropped then, at that call,
// not at the hibernation itself. The entry module logs the `instance_reset` event at that reset,
// which here reports no panic: that one line is left out of the log (`hideResetLine`).
import "./pending.mjs";
import { lifecycle, control } from "./object.mjs";
import { ShardObject as Shard } from "./index.js";

/** The shard's object binding (worker/local.mjs `OBJECT_BINDING`). */
const BINDING = "SHARD_OBJECT";

/** Marks the shard's wasm instance broken, so that its next call replaces it (see the top). */
function discardMemory() {
  const state = globalThis.__worker_init_state;
  if (!Object.getOwnPropertyDescriptor(state ?? {}, "criticalError")?.set) {
    throw new Error("lifecycle emulation: the shard's bundle has no instance reset (worker/entry.mjs) to discard its memory with");
  }
  if (state.criticalError) return; // already broken: the reset to come, and its line, are real
  state.criticalError = true;
  hideResetLine();
}

/** Leaves the next `instance_reset` log line out (the one the reset just asked for prints). */
function hideResetLine() {
  const log = console.log;
  console.log = (...args) => {
    if (!isResetLine(args)) return log(...args);
    console.log = log;
  };
}

function isResetLine(args) {
  try {
    return args.length === 1 && JSON.parse(args[0]).event === "instance_reset";
  } catch {
    return false;
  }
}

export const ShardObject = lifecycle(Shard, discardMemory);
export default control(BINDING);

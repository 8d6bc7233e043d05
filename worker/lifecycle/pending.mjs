// What an object's isolate has pending, as Cloudflare's hibernation rule counts it
// (docs/PLATFORM.md, "Durable Object lifecycle"): scheduled `setTimeout`/`setInterval` callbacks
// and `fetch()` subrequests in progress. Part of the local lifecycle emulation (worker/local.mjs,
// `lifecycle: "cloudflare"`); never deployed.
//
// Evaluating this module replaces the isolate's `setTimeout`, `setInterval`, `clearTimeout`,
// `clearInterval` and `fetch` with counting wrappers around the runtime's own. An entry module
// imports it first, so that it runs before the code it watches is evaluated (ES modules are
// evaluated in the order of their imports): whatever that code calls, at start-up or later, goes
// through the wrappers, whether it looks the functions up on `globalThis` at each call (as
// wasm-bindgen's glue does) or keeps them. What is counted is what the isolate really has
// scheduled, not what the code says about itself.
//
// `forget()` is the isolate's end (a hibernation or eviction of its last object, a new version):
// the timers it had never fire (their callbacks, still scheduled in workerd, are skipped), and its
// subrequests still in progress no longer count. The harness's own waits use `harnessSleep`, the
// runtime's `setTimeout`, which is not counted.

const native = {
  setTimeout: globalThis.setTimeout,
  setInterval: globalThis.setInterval,
  clearTimeout: globalThis.clearTimeout,
  clearInterval: globalThis.clearInterval,
  fetch: globalThis.fetch,
};

/** The isolate's incarnation: `forget()` starts a new one. */
let generation = 0;
/** The handles of the timers scheduled in this incarnation and not yet fired or cleared. */
const timers = new Set();
/** The `fetch()` calls of this incarnation not yet settled. */
let fetches = 0;
/** When the isolate last had nothing pending (ms since the epoch). */
let quietSince = Date.now();

/** What the isolate has pending now, and since when it has had nothing (`quietSince`). */
export function pending() {
  return { timers: timers.size, fetches, quietSince };
}

/** The isolate ends: its timers never fire, its subrequests are no longer counted. */
export function forget() {
  generation++;
  timers.clear();
  fetches = 0;
  quietSince = Date.now();
}

/** Waits `ms` on the runtime's own timer, which the count leaves out (the harness's waits). */
export function harnessSleep(ms) {
  return new Promise((resolve) => native.setTimeout.call(globalThis, resolve, ms));
}

/** Notes that the timer `handle` is no longer pending. */
function settle(handle) {
  if (timers.delete(handle)) noteQuiet();
}

function noteQuiet() {
  if (timers.size === 0 && fetches === 0) quietSince = Date.now();
}

globalThis.setTimeout = function setTimeout(callback, ms, ...args) {
  const born = generation;
  const handle = native.setTimeout.call(globalThis, (...a) => {
    if (born !== generation) return; // the isolate it was scheduled in is gone
    settle(handle);
    callback(...a);
  }, ms, ...args);
  timers.add(handle);
  return handle;
};

globalThis.setInterval = function setInterval(callback, ms, ...args) {
  const born = generation;
  const handle = native.setInterval.call(globalThis, (...a) => {
    if (born !== generation) return void native.clearInterval.call(globalThis, handle);
    callback(...a);
  }, ms, ...args);
  timers.add(handle);
  return handle;
};

globalThis.clearTimeout = function clearTimeout(handle) {
  native.clearTimeout.call(globalThis, handle);
  settle(handle);
};

globalThis.clearInterval = function clearInterval(handle) {
  native.clearInterval.call(globalThis, handle);
  settle(handle);
};

globalThis.fetch = function fetch(...args) {
  const born = generation;
  fetches++;
  const done = () => {
    if (born !== generation) return;
    fetches--;
    noteQuiet();
  };
  const call = native.fetch.apply(globalThis, args);
  call.then(done, done);
  return call;
};

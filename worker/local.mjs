// Local shards: N copies of the shard Worker in workerd (through Miniflare's Node API), each on
// its own loopback port, sharing one local R2 bucket (the state `wrangler r2 object put --local
// --persist-to DIR` writes). Used by the demo, the CLI's tests and the worker tests.
//
// Durable Objects' lifecycle (object residency): local workerd never hibernates, evicts or
// restarts an object by itself, so by default (`lifecycle: "workerd"`) a slice stays loaded until
// the shards stop. `lifecycle: "cloudflare"` emulates Cloudflare's (docs/PLATFORM.md, "Durable
// Object lifecycle"), with every time multiplied by `timeScale`:
// - Each object worker runs the shard's class under a test-only wrapper (worker/lifecycle/
//   shard.mjs, with the build's index.js and wasm beside it) whose isolate counts what it really
//   has pending: its `setTimeout`/`setInterval` timers and `fetch()` subrequests, replaced before
//   the shard's bundle is evaluated (worker/lifecycle/pending.mjs), and each object's requests,
//   alarms and `waitUntil` promises in progress (worker/lifecycle/object.mjs). The shard reports
//   nothing about itself.
// - The harness in Node (worker/lifecycle/emulate.mjs) reads those counts through each object
//   worker's control socket: an object idle with nothing pending for 10 s is hibernated; one idle
//   with something pending is evicted after a random 70–140 s without a request or alarm;
//   `newVersion()` holds new requests, gives those in flight up to 30 s, cuts the rest and
//   restarts every object.
// - Hibernation, eviction and restart drop the object's instance (the next request or alarm
//   builds a new one: the constructor runs again) and, with the isolate's last live object, its
//   memory: the shard's own instance reset (worker/entry.mjs) replaces the wasm instance, a new
//   linear memory, at the next call, so the slice is gone and reloads (`X-Cache: miss`). Workerd
//   cannot drop one worker's isolate (`setOptions` restarts every worker), so the isolate itself,
//   the JavaScript heap of the bundle, and memory the old instance held until that next call,
//   stay. Timers are counted per isolate: colocated replicas (`replicaIsolates: "shared"`) keep
//   each other from hibernating while either has one pending. Not emulated: hibernation of the fronts' isolates (Workers), a restart's storage
//   cut-off (a request touching storage during its grace time is not stopped), version skew
//   between fronts and objects, deferred code updates, and placement moves.
import { Miniflare } from "miniflare";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync, readFileSync } from "node:fs";
import { emulateLifecycle } from "./lifecycle/emulate.mjs";

const here = dirname(fileURLToPath(import.meta.url));
export const SCRIPT = join(here, "build", "index.js");
/** The shard with plain simd128 kernels (`COBORDISM_WASM_SIMD=plain scripts/build-worker.sh --out
 * target/worker-plain/build`; SCRIPT's are relaxed SIMD's): tests and benchmarks run both. */
export const PLAIN_SCRIPT = join(here, "..", "target", "worker-plain", "build", "index.js");
/** The test shard (`scripts/build-worker.sh --test`): fault routes, wasm memory capped at 112 MiB. */
export const TEST_SCRIPT = join(here, "..", "target", "worker-test", "build", "index.js");
export const BUCKET = "cobordism-lm-head";
export const BINDING = "LM_HEAD";
/** Object residency's Durable Object binding and class (worker/src/object.rs, worker/entry.mjs). */
export const OBJECT_BINDING = "SHARD_OBJECT";
export const OBJECT_CLASS = "ShardObject";
/** The compatibility date the shards run at: wrangler.toml's, as deployed. */
const COMPATIBILITY_DATE = /^compatibility_date = "(.+)"$/m.exec(readFileSync(join(here, "..", "wrangler.toml"), "utf8"))[1];
/** From this compatibility date an object's `ctx.waitUntil` keeps its pending I/O alive; before
 * it, the lifecycle emulation counts none of it (docs/PLATFORM.md). */
const WAIT_UNTIL_HOLDS_FROM = "2026-10-01";

/**
 * Starts `shards` local shard Workers. Like deployed ones they are closed by default: pass
 * `authToken` (the AUTH_TOKEN secret) or `anonymous: true` (ALLOW_ANONYMOUS = "1").
 * @param {object} o
 * @param {number} [o.shards=8] number of shards (SHARD_COUNT)
 * @param {string} [o.state] persistence root (as wrangler's --persist-to); in memory if absent
 * @param {string} [o.prefix="model"] MODEL_PREFIX
 * @param {Record<string,string>} [o.vars] extra variables for every shard (MEMORY_BUDGET_MIB, …)
 * @param {string} [o.authToken] sets the AUTH_TOKEN secret
 * @param {boolean} [o.anonymous] sets ALLOW_ANONYMOUS = "1"
 * @param {boolean} [o.testBuild] runs the test shard (TEST_SCRIPT) instead of the production one
 * @param {string} [o.script] runs this build of the shard instead (a benchmark's baseline)
 * @param {object} [o.r2Faults] wraps the shards' R2 binding (the local bucket behind it) so that
 *   it fails on demand: `head`/`get` throw while the flag of that name is true (the test flips
 *   them at will), and `onGet({key, offset, length, index})` (may be async) decides each `get`:
 *   `{fail: true}` throws, `{delayMs}` answers later, `{truncateAfter: n}` ends its body after
 *   n bytes (`offset`/`length` are the range asked, `index` counts the gets before it)
 * @param {{firstByteMs?: number, bytesPerSec?: number}} [o.r2Shape] wraps the R2 binding so that
 *   it behaves like production R2 rather than a local disk: every `get` answers after
 *   `firstByteMs`, and each body streams at most `bytesPerSec` (per stream)
 * @param {"isolate"|"object"} [o.residency="isolate"] RESIDENCY: with "object" each shard's
 *   slice lives in its Durable Object (the `SHARD_OBJECT` binding, SQLite-backed, as deployed)
 * @param {number} [o.replicas=1] REPLICAS: objects per shard, with object residency
 * @param {"own"|"shared"} [o.replicaIsolates="own"] where a shard's replicas run: "own", each in
 *   an isolate of its own (Cloudflare's case when it places them apart: each loads its slice);
 *   "shared", all in one isolate (its case when it places them together: one load, one copy)
 * @param {(line: {level: string, message: string}) => void} [o.onLog] receives every line the
 *   Workers log (console.log, console.error); by default they go to standard error
 * @param {boolean} [o.metrics] binds a stand-in Workers Analytics Engine dataset as METRICS:
 *   each data point is logged as one line `{"metric": point}` (see `onLog`)
 * @param {number} [o.fronts=1] isolates (workers) serving each shard's URL, each on its own
 *   port (`frontEndpoints[i]`; `endpoints[i]` is the first): a benchmark's balancer picks one
 * @param {Record<string,string>[]} [o.frontVars] extra variables of front `f` (`frontVars[f]`):
 *   fronts of different versions side by side over the same objects, as a rollout of the fronts
 *   alone has them (a token rotation's three versions)
 * @param {{script?: string, vars?: Record<string,string>}} [o.objects] with object residency, the
 *   objects' build and extra variables where they differ from the fronts': a rollout's two
 *   builds side by side (the test build plays another forward version with `TEST_FORWARD_VERSION`)
 * @param {"workerd"|"cloudflare"} [o.lifecycle="workerd"] the objects' lifecycle (object
 *   residency): "workerd", local workerd's (an object stays in memory until the shards stop);
 *   "cloudflare", Cloudflare's emulated (see the top): an object idle and hibernateable for 10 s
 *   is hibernated, one idle but not hibernateable is evicted after 70–140 s without a request or
 *   event, and `newVersion()` restarts every object, each time discarding the object's instance
 *   and its isolate's memory (the slice)
 * @param {number} [o.timeScale=1] with lifecycle "cloudflare", multiplies every time above
 *   (0.05: hibernation after 0.5 s)
 * @param {(event: import("./lifecycle/emulate.mjs").LifecycleEvent) => void} [o.onLifecycle] with
 *   lifecycle "cloudflare", told each hibernation, eviction and restart as it happens
 * @returns {Promise<{endpoints: string[], frontEndpoints: string[][], bucket: () => Promise<any>, dispose: () => Promise<void>, mf: Miniflare, newVersion: () => Promise<import("./lifecycle/emulate.mjs").LifecycleEvent[]>, lifecycleEvents: import("./lifecycle/emulate.mjs").LifecycleEvent[]}>}
 *   `newVersion()` (lifecycle "cloudflare"): rolls out a new version, resolving with a
 *   `restarted` event per object that was live; `lifecycleEvents`: every hibernation, eviction
 *   and restart so far (and `error` if the harness failed to read or act)
 */
export async function startShards({ shards = 8, state, prefix = "model", vars = {}, authToken, anonymous = false, testBuild = false, script = testBuild ? TEST_SCRIPT : SCRIPT, r2Faults, r2Shape, residency = "isolate", replicas = 1, replicaIsolates = "own", fronts = 1, frontVars = [], onLog, metrics = false, objects = {}, lifecycle = "workerd", timeScale = 1, onLifecycle } = {}) {
  if (!["isolate", "object"].includes(residency)) throw new Error(`residency ${residency}: expected isolate or object`);
  if (!["own", "shared"].includes(replicaIsolates)) throw new Error(`replicaIsolates ${replicaIsolates}: expected own or shared`);
  if (!["workerd", "cloudflare"].includes(lifecycle)) throw new Error(`lifecycle ${lifecycle}: expected workerd or cloudflare`);
  const object = residency === "object";
  const emulated = lifecycle === "cloudflare";
  if (emulated && !object) throw new Error(`lifecycle cloudflare emulates Durable Objects: it needs residency object`);
  if (!(timeScale > 0)) throw new Error(`timeScale ${timeScale}: expected a number > 0`);
  const wrapped = r2Faults || r2Shape;
  if (!existsSync(script)) {
    throw new Error(`${script} is missing: run scripts/build-worker.sh${testBuild ? " --test" : ""} first`);
  }
  // `extra` adds to the wrapped bindings (a front's replica router) rather than replacing them;
  // `code` replaces the build's entry (an object worker under the lifecycle emulation).
  const codeOf = (path) => ({ modules: true, scriptPath: path, modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }] });
  const objectScript = objects.script ?? script;
  const shard = (i, name, { wrappedBindings = {}, code = codeOf(script), ownVars = {}, ...extra } = {}) => ({
    name,
    ...code,
    compatibilityDate: COMPATIBILITY_DATE,
    bindings: {
      SHARD_INDEX: String(i),
      SHARD_COUNT: String(shards),
      MODEL_PREFIX: prefix,
      ...(object ? { RESIDENCY: "object", REPLICAS: String(replicas) } : {}),
      ...vars,
      ...(authToken ? { AUTH_TOKEN: authToken } : {}),
      ...(anonymous ? { ALLOW_ANONYMOUS: "1" } : {}),
      ...ownVars,
    },
    ...(wrapped ? { r2Buckets: {} } : { r2Buckets: { [BINDING]: BUCKET } }),
    wrappedBindings: { ...(wrapped ? { [BINDING]: WRAPPED_R2 } : {}), ...(metrics ? { METRICS: METRICS_STAND_IN } : {}), ...wrappedBindings },
    ...extra,
  });
  // With object residency each shard's object class runs in a worker of its own (`s<i>-object`,
  // the same script): its own isolate, as Cloudflare runs an object apart from the isolates that
  // forward to it, so that a front's reset never touches the slice. workerd runs every object of
  // a worker in that worker's one isolate, so replicas in isolates of their own are one worker
  // each (`s<i>-object-r<r>`), and the fronts' SHARD_OBJECT is a namespace that sends each
  // object name to its replica's worker (`replicaRouter`).
  const apart = object && replicas > 1 && replicaIsolates === "own";
  const objectWorker = (i, r) => (apart ? `s${i}-object-r${r}` : `s${i}-object`);
  const frontBindings = (i) => {
    if (!object) return {};
    if (!apart) return { durableObjects: objectBinding(OBJECT_BINDING, objectWorker(i, 0)) };
    return { wrappedBindings: { [OBJECT_BINDING]: { scriptName: routerName(i) } } };
  };
  // Under the lifecycle emulation each object worker runs the shard's class under its wrapper,
  // with a loopback socket for the harness's control (worker/lifecycle/).
  const objectWorkers = [];
  const objectLifeVars = emulated ? { WAIT_UNTIL_HOLDS: COMPATIBILITY_DATE >= WAIT_UNTIL_HOLDS_FROM ? "1" : "0" } : {};
  const lifecycleWorker = emulated ? { code: lifecycleCode(objectScript), unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] } : { code: codeOf(objectScript) };
  const workers = [];
  for (let i = 0; i < shards; i++) {
    for (let f = 0; f < fronts; f++) {
      workers.push(shard(i, frontName(i, f), { unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }], ownVars: frontVars[f], ...frontBindings(i) }));
    }
    if (!object) continue;
    for (let r = 0; r < (apart ? replicas : 1); r++) {
      objectWorkers.push(objectWorker(i, r));
      workers.push(shard(i, objectWorker(i, r), { durableObjects: objectBinding(OBJECT_BINDING, objectWorker(i, r)), ownVars: { ...objectLifeVars, ...objects.vars }, ...lifecycleWorker }));
    }
    if (apart) workers.push(replicaRouter(i, replicas, (r) => objectWorker(i, r)));
  }
  if (wrapped) workers.push(wrappedR2(r2Faults, r2Shape));
  if (metrics) workers.push(metricsStandIn());
  const mf = new Miniflare({
    workers,
    r2Persist: state ? join(state, "v3", "r2") : false,
    log: undefined,
    // The Workers' log lines go to standard error unless asked for: standard output is often a
    // report (benchmarks, scripts/bit-exact-http.mjs) or a protocol (local-shards.mjs).
    handleStructuredLogs: onLog ?? (({ message }) => void process.stderr.write(`${message}\n`)),
  });
  await mf.ready;
  const url = async (name) => (await mf.unsafeGetDirectURL(name)).toString().replace(/\/$/, "");
  const frontEndpoints = [];
  for (let i = 0; i < shards; i++) {
    frontEndpoints.push(await Promise.all(Array.from({ length: fronts }, (_, f) => url(frontName(i, f)))));
  }
  const endpoints = frontEndpoints.map((f) => f[0]);
  const life = emulated ? emulateLifecycle(Object.fromEntries(await Promise.all(objectWorkers.map(async (w) => [w, await url(w)]))), { timeScale, onEvent: onLifecycle }) : null;
  return {
    mf,
    endpoints,
    frontEndpoints,
    bucket: () => (wrapped ? mf.getR2Bucket("INNER", WRAPPED_R2) : mf.getR2Bucket(BINDING, "s0")),
    newVersion: async () => {
      if (!life) throw new Error(`newVersion() needs lifecycle "cloudflare"`);
      return life.newVersion();
    },
    lifecycleEvents: life?.events ?? [],
    dispose: async () => {
      await life?.stop();
      await mf.dispose();
    },
  };
}

/** The lifecycle emulation's modules (worker/lifecycle/): its entry for the shard, `shard.mjs`,
 * with the build `script` and its wasm given to workerd beside it as `index.js` and
 * `index_bg.wasm`, the names the entry and the bundle import. */
function lifecycleCode(script) {
  const at = (file) => join(LIFECYCLE, file);
  return {
    modulesRoot: LIFECYCLE,
    modules: [
      { type: "ESModule", path: at("shard.mjs") },
      { type: "ESModule", path: at("object.mjs") },
      { type: "ESModule", path: at("pending.mjs") },
      { type: "ESModule", path: at("index.js"), contents: readFileSync(script, "utf8") },
      { type: "CompiledWasm", path: at("index_bg.wasm"), contents: readFileSync(join(dirname(script), "index_bg.wasm")) },
    ],
  };
}

const LIFECYCLE = join(here, "lifecycle");

const WRAPPED_R2 = "wrapped-r2";
const METRICS_STAND_IN = "metrics-stand-in";

/** A stand-in worker: module `worker/stand-ins/<file>`, loaded by Miniflare as a module worker. */
const standIn = (name, file, options) => ({ name, modules: true, scriptPath: join(here, "stand-ins", file), ...options });

/** The worker behind the stand-in `METRICS` binding (worker/stand-ins/metrics.mjs). */
const metricsStandIn = () => standIn(METRICS_STAND_IN, "metrics.mjs");

/** The worker name of shard i's front f (`s<i>`, then `s<i>f<f>`). */
const frontName = (i, f) => (f === 0 ? `s${i}` : `s${i}f${f}`);

/** A binding `name` of the object class in worker `script` (SQLite-backed, as deployed). */
const objectBinding = (name, script) => ({ [name]: { className: OBJECT_CLASS, scriptName: script, useSQLite: true } });

/** The worker behind shard i's replica router (`replicaRouter`). */
const routerName = (i) => `s${i}-replicas`;

/**
 * The worker behind a front's `SHARD_OBJECT` when shard i's replicas run in isolates of their
 * own (worker/stand-ins/replica-router.mjs): it sends the object name `shard-<i>/<r>` to replica
 * r's worker, `workerOf(r)`.
 */
function replicaRouter(i, replicas, workerOf) {
  const namespaces = Array.from({ length: replicas }, (_, r) => objectBinding(`REPLICA_${r}`, workerOf(r)));
  return standIn(routerName(i), "replica-router.mjs", {
    bindings: { SHARD_INDEX: i },
    durableObjects: Object.assign({}, ...namespaces),
  });
}

/**
 * The worker behind a wrapped R2 binding (worker/stand-ins/r2.mjs): the real local bucket, which
 * fails on demand (asking Node, `faults`) and/or paces its answers like production R2 (`shape`).
 */
function wrappedR2(faults, shape = {}) {
  return standIn(WRAPPED_R2, "r2.mjs", {
    bindings: { SHAPE: shape, ASK_FAULTS: Boolean(faults) },
    r2Buckets: { INNER: BUCKET },
    serviceBindings: {
      FAULTS: async (request) => {
        const op = new URL(request.url).pathname.slice(1);
        const detail = await request.json();
        if (faults[op]) return Response.json({ fail: true });
        return Response.json(op === "get" ? ((await faults.onGet?.(detail)) ?? {}) : {});
      },
    },
  });
}

// Cloudflare's Durable Object lifecycle emulated locally (worker/local.mjs `lifecycle:
// "cloudflare"`, worker/lifecycle/; docs/PLATFORM.md, "Durable Object lifecycle"), time-scaled:
// an idle hibernateable object is hibernated after 10 s and its slice is really gone (a new
// linear memory, a reload), an object with a timer pending is not hibernated but is evicted
// after 70–140 s, an alarm starts a hibernated object like a request, and a new version lets
// requests in flight finish (or cuts them after 30 s), then each object reloads once and answers
// the same bits. The timer and the alarm are a stand-in class's
// (worker/stand-ins/lifecycle-object.mjs): the shard leaves no timer pending between requests.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { Miniflare } from "miniflare";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startShards } from "../../worker/local.mjs";
import { emulateLifecycle, EVICT_MS, GRACE_MS } from "../../worker/lifecycle/emulate.mjs";
import { makeModel, seed, hiddenBytes, localLogits, post, health, json, TOKEN } from "./helpers.mjs";

const VARS = { MANIFEST_TTL_MS: "0", LOAD_RETRY_MS: "0" };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let model;
before(() => {
  model = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 71 });
});

async function withShards(opts, fn) {
  const local = await startShards({ shards: 2, vars: VARS, authToken: TOKEN, residency: "object", ...opts });
  try {
    await seed(await local.bucket(), model);
    const result = await fn(local);
    assert.deepEqual(local.lifecycleEvents.filter((e) => e.what === "error"), [], "the harness read and acted without a failure");
    return result;
  } finally {
    await local.dispose();
  }
}

function part(full, i) {
  const s = model.manifest.shards[i];
  return full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count));
}

/** Posts `h` to `e`: the answer must be `want`; returns its X-Cache. */
async function served(e, h, want) {
  const r = await post(e, h);
  assert.equal(r.status, 200, new TextDecoder().decode(r.body));
  assert.deepEqual(r.body, want);
  return r.headers.get("x-cache");
}

test("idle 5 s the object stays warm; idle 15 s it was hibernated and its slice is gone", { timeout: 60_000 }, async () => {
  const scale = 0.1;
  const h = hiddenBytes(512, 3);
  const want = part(localLogits(model, h), 0);
  const lines = [];
  const onLog = ({ message }) => void lines.push(message);
  /** X-Cache after 5 s and after 15 s idle, /healthz before and after the second wait. */
  const run = (lifecycle) =>
    withShards({ lifecycle, timeScale: scale, ...(lifecycle === "cloudflare" ? { onLog } : {}) }, async (local) => {
      const e = local.endpoints[0];
      assert.equal(await served(e, h, want), "miss");
      await sleep(5_000 * scale);
      const after5 = await served(e, h, want);
      const warm = await health(e);
      await sleep(15_000 * scale);
      const cold = await health(e); // a request too: it starts the object again
      const after15 = await served(e, h, want);
      return { after5, after15, warm, cold, events: local.lifecycleEvents };
    });
  const [emulated, workerd] = await Promise.all([run("cloudflare"), run("workerd")]);
  assert.deepEqual([workerd.after5, workerd.after15], ["hit", "hit"], "local workerd keeps the object");
  assert.equal(emulated.after5, "hit", "5 s idle: not hibernated yet");
  assert.equal(emulated.after15, "miss", "15 s idle: hibernated, the slice reloads");
  assert.deepEqual(
    emulated.events.map((e) => [e.worker, e.object, e.what, e.memory]),
    [["s0-object", "shard-0/0", "hibernated", true]],
    "one hibernation, of shard 0's object (shard 1's never started)",
  );
  // The slice is really gone, not just marked: a new, smaller linear memory (wasm memory only
  // grows) in which the object has loaded nothing yet.
  assert.deepEqual([emulated.warm.state, emulated.warm.loads], ["ready", 1]);
  assert.deepEqual([emulated.cold.state, emulated.cold.resident, emulated.cold.loads], ["empty", false, 0]);
  assert.ok(emulated.cold.wasm_memory_bytes < emulated.warm.wasm_memory_bytes, `memory ${emulated.warm.wasm_memory_bytes} → ${emulated.cold.wasm_memory_bytes}`);
  assert.equal(lines.filter((l) => l.includes("slice_load")).length, 2, "two loads");
  assert.deepEqual(lines.filter((l) => l.includes("instance_reset")), [], "a hibernation is no panic: no instance_reset line");
});

const here = dirname(fileURLToPath(import.meta.url));
const WORKER_DIR = join(here, "..", "..", "worker");

/** Two isolates (workers `a` and `b`) each running the stand-in object class under the
 * emulation (worker/stand-ins/lifecycle-object.mjs), and the harness on them. */
async function withStandIns(timeScale, fn) {
  const worker = (name) => ({
    name,
    modules: true,
    scriptPath: join(WORKER_DIR, "stand-ins", "lifecycle-object.mjs"),
    modulesRoot: WORKER_DIR,
    compatibilityDate: "2026-04-01",
    durableObjects: { STAND_IN: { className: "StandIn", useSQLite: true } },
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  });
  const mf = new Miniflare({ workers: [worker("a"), worker("b")] });
  await mf.ready;
  const controls = {};
  const objects = {};
  for (const name of ["a", "b"]) {
    controls[name] = (await mf.unsafeGetDirectURL(name)).toString().replace(/\/$/, "");
    const ns = await mf.getDurableObjectNamespace("STAND_IN", name);
    const stub = ns.get(ns.idFromName(name));
    objects[name] = async (path = "/", method = "GET") => (await stub.fetch(`http://stand-in${path}`, { method })).json();
  }
  const life = emulateLifecycle(controls, { timeScale });
  try {
    await fn(objects, life.events);
    assert.deepEqual(life.events.filter((e) => e.what === "error"), []);
  } finally {
    await life.stop();
    await mf.dispose();
  }
}

test("a timer pending in the object's isolate: not hibernated at 15 s, evicted within 70–140 s", { timeout: 60_000 }, async () => {
  const scale = 0.05;
  await withStandIns(scale, async (objects, events) => {
    const seen = (what) => events.filter((e) => e.what === what).map((e) => e.worker);
    assert.deepEqual([(await objects.a()).hit, (await objects.b()).hit], [false, false]);
    await objects.a("/timer?ms=600000", "POST"); // pending far beyond the test
    const idleFrom = Date.now();
    await sleep(15_000 * scale);
    assert.deepEqual([seen("hibernated").includes("a"), seen("evicted")], [false, []], "a, with its timer, is still there");
    while (seen("evicted").length === 0 && Date.now() - idleFrom < (EVICT_MS[1] + 20_000) * scale) await sleep(20);
    assert.deepEqual(seen("hibernated"), ["b"], "b, with nothing pending, was hibernated meanwhile");
    const evicted = events.find((e) => e.what === "evicted");
    assert.ok(evicted, `a was evicted by ${EVICT_MS[1] / 1000} s (scaled): ${JSON.stringify(events)}`);
    const after = evicted.at - idleFrom;
    assert.ok(after >= EVICT_MS[0] * scale - 100 && after <= EVICT_MS[1] * scale + 500, `evicted ${after} ms after its last request`);
    assert.deepEqual(await objects.a(), { hit: false, constructed: 2, fired: 0, alarms: 0 }, "a new instance, its memory gone");
    // The evicted isolate's timer died with it: nothing pending now, so it hibernates.
    await sleep(15_000 * scale);
    assert.deepEqual(seen("hibernated"), ["b", "a"]);
  });
});

test("an alarm is an event: it starts a hibernated object, which hibernates again after it", { timeout: 60_000 }, async () => {
  const scale = 0.05;
  await withStandIns(scale, async (objects, events) => {
    const hibernations = () => events.filter((e) => e.worker === "a" && e.what === "hibernated").map((e) => e.at);
    await objects.a();
    const alarmAt = Date.now() + 1_500;
    await objects.a(`/alarm?ms=${alarmAt - Date.now()}`, "POST");
    await sleep(alarmAt - Date.now() - 200);
    assert.equal(hibernations().length, 1, "hibernated before its alarm");
    await sleep(alarmAt - Date.now() + 20_000 * scale);
    const [, again] = hibernations();
    assert.ok(again >= alarmAt + 10_000 * scale - 50, `hibernated again ${again - alarmAt} ms after the alarm`);
    assert.deepEqual(await objects.a(), { hit: false, constructed: 3, fired: 0, alarms: 1 }, "built for the alarm, then for this request");
  });
});

test("a new version under traffic: requests in flight finish, each object reloads once, same bits", { timeout: 60_000 }, async () => {
  const scale = 0.05;
  // Only shard 1's slice is read slowly: shard 0's manifest checks (MANIFEST_TTL_MS = 0) stay fast.
  let delayMs = 0;
  let asked = 0;
  const r2Faults = { onGet: ({ key }) => (key === `model/${model.manifest.shards[1].key}` ? (asked++, { delayMs }) : {}) };
  await withShards({ lifecycle: "cloudflare", timeScale: scale, r2Faults }, async (local) => {
    const [e0, e1] = local.endpoints;
    const h = hiddenBytes(512, 11);
    const full = localLogits(model, h);
    const want = [part(full, 0), part(full, 1)];
    const before = [await post(e0, h), await post(e1, h)];
    for (const [i, r] of before.entries()) assert.deepEqual([r.status, r.body], [200, want[i]], "the bits before");
    // Shard 1's object hibernates; its next request reloads slowly, and is in flight at the
    // new version. Shard 0 (warmed again if it hibernated too) serves traffic throughout.
    while (!local.lifecycleEvents.some((e) => e.object === "shard-1/0")) await sleep(20);
    await served(e0, h, before[0].body);
    /** Each request's start, end and X-Cache, by shard. */
    const caches = { 0: [], 1: [] };
    const timed = async (i, e) => {
      const start = Date.now();
      const cache = await served(e, h, before[i].body);
      caches[i].push({ start, end: Date.now(), cache });
    };
    let stop = false;
    const traffic = Array.from({ length: 3 }, async () => {
      while (!stop) await timed(0, e0);
    });
    let versionStart, versionAt;
    try {
      while (caches[0].length < 6) await sleep(5);
      delayMs = 800;
      asked = 0;
      const slow = post(e1, h).then((r) => ({ r, at: Date.now() }));
      while (asked === 0) await sleep(5);
      delayMs = 0;
      versionStart = Date.now();
      const restarted = await local.newVersion();
      versionAt = Date.now();
      const { r, at } = await slow;
      assert.deepEqual([r.status, r.headers.get("x-cache"), r.body], [200, "miss", before[1].body], "the request in flight finished");
      assert.ok(at <= versionAt, "the restart waited for it");
      assert.deepEqual(restarted.map((e) => [e.object, e.cut, e.memory]).sort(), [["shard-0/0", 0, true], ["shard-1/0", 0, true]]);
      for (let n = 0; n < 3; n++) await timed(1, e1);
      await sleep(200);
    } finally {
      stop = true;
      await Promise.all(traffic);
    }
    // A request sent just before the new version may reach the object after it: held, it is
    // served by the new instance. So: answered before it began, warm; ended after, one reload.
    const answered = (i, when) => caches[i].filter(when).map((r) => r.cache);
    const early = answered(0, (r) => r.end < versionStart);
    assert.ok(early.length > 0 && early.every((c) => c === "hit"), `shard 0 warm until then: ${early}`);
    assert.ok(answered(0, (r) => r.end >= versionStart).includes("miss"), "shard 0 reloaded after the new version");
    assert.deepEqual(answered(1, (r) => r.start >= versionAt), ["miss", "hit", "hit"], "shard 1 reloaded after the new version");
    for (const [i, e] of [e0, e1].entries()) {
      assert.equal((await health(e)).loads, 1, `shard ${i}: one load since the restart`);
    }
  });
});

test("a new version cuts a request still running after 30 s: it fails at once, the object comes back", { timeout: 60_000 }, async () => {
  const scale = 0.05;
  let release;
  const held = new Promise((resolve) => (release = resolve));
  let hold = false;
  let asked = 0;
  const r2Faults = { onGet: async () => (hold && (asked++, await held), {}) };
  await withShards({ lifecycle: "cloudflare", timeScale: scale, r2Faults }, async (local) => {
    const e = local.endpoints[0];
    const h = hiddenBytes(512, 12);
    const want = part(localLogits(model, h), 0);
    try {
      hold = true;
      const stuck = post(e, h);
      while (asked === 0) await sleep(5);
      const start = Date.now();
      const restarted = await local.newVersion();
      const took = Date.now() - start;
      assert.ok(took >= GRACE_MS * scale - 50, `the grace time was given: ${took} ms`);
      assert.deepEqual(restarted.map((e) => [e.object, e.cut]), [["shard-0/0", 1]]);
      const r = await stuck; // R2 never answered: only the cut can settle it
      assert.deepEqual([r.status, json(r).error], [503, "object_unavailable"]);
    } finally {
      hold = false;
      release();
    }
    assert.equal(await served(e, h, want), "miss", "the new instance loads and answers");
  });
});

test("KEEP_WARM_S holds the object: idle past the hibernation time and past 140 s it answers hit (its timer pending, its alarm the event)", { timeout: 150_000 }, async () => {
  // The keep-warm tick is the shard's own 30 s, not scaled: at half speed the eviction window
  // (35–70 s) still lies past it, as on Cloudflare (70–140 s past a 30 s alarm).
  const scale = 0.5;
  const h = hiddenBytes(512, 4);
  const want = part(localLogits(model, h), 0);
  await withShards({ lifecycle: "cloudflare", timeScale: scale, vars: { ...VARS, KEEP_WARM_S: "300" } }, async (local) => {
    const e = local.endpoints[0];
    assert.equal(await served(e, h, want), "miss");
    await sleep(150_000 * scale);
    assert.equal(await served(e, h, want), "hit", JSON.stringify(local.lifecycleEvents));
    assert.deepEqual(local.lifecycleEvents.filter((ev) => ev.object === "shard-0/0"), [], "neither hibernated nor evicted");
    assert.equal((await health(e)).loads, 1);
  });
});

test("a token rotation under traffic, new versions of the fronts alone, reloads no slice and fails no request", { timeout: 120_000 }, async () => {
  const [OLD, NEW] = ["old-token", "new-token"];
  // The three versions a rotation gives each front (`cobordism deploy --rotate-token`, then
  // `--finish-rotation`): the old token, both, the new one. The objects' Worker gets no version.
  const frontVars = [{ AUTH_TOKEN: OLD }, { AUTH_TOKEN: NEW, AUTH_TOKEN_PREVIOUS: OLD }, { AUTH_TOKEN: NEW }];
  await withShards({ lifecycle: "cloudflare", timeScale: 0.1, fronts: 3, frontVars }, async (local) => {
    const h = hiddenBytes(512, 4);
    const full = localLogits(model, h);
    // A rollout is eventually consistent: a caller meets either version while it lasts, so each
    // phase alternates between two of them (old token, then callers moving to the new one).
    const phases = [[[0, OLD], [1, OLD]], [[1, OLD], [1, NEW]], [[1, NEW], [2, NEW]]];
    for (const phase of phases) {
      for (let k = 0; k < 6; k++) {
        const [f, token] = phase[k % 2];
        for (let i = 0; i < 2; i++) {
          const r = await post(local.frontEndpoints[i][f], h, { token });
          assert.equal(r.status, 200, `front version ${f}, shard ${i}: ${new TextDecoder().decode(r.body)}`);
          assert.deepEqual(r.body, part(full, i));
        }
        await sleep(200); // gaps well inside the hibernation time (1 s at this scale)
      }
    }
    for (let i = 0; i < 2; i++) {
      const report = await health(local.frontEndpoints[i][2], { token: NEW });
      assert.equal(report.loads, 1, `shard ${i}'s object loaded its slice once`);
    }
    assert.deepEqual(local.lifecycleEvents.map((e) => e.what), [], "no object restarted, hibernated or was evicted");
    // The old token is refused by the last version.
    assert.equal((await post(local.frontEndpoints[0][2], h, { token: OLD })).status, 401);
  });
});

test("at our compatibility date a warm-up completes after its caller hangs up, then the idle object hibernates", { timeout: 120_000 }, async () => {
  // Hibernation after 0.5 s idle; R2 shaped slow so that the load takes over a second. The
  // emulation counts an object's `waitUntil` as pending only from compatibility date 2026-10-01
  // (ours is earlier). The shaped reads' timers hold the object too, so this does not tell what
  // holds the load (docs/PLATFORM.md, "`waitUntil` and pending I/O"): it checks the load ends
  // and the idle object then hibernates.
  const lines = [];
  const onLog = ({ message }) => void lines.push(message);
  await withShards({ lifecycle: "cloudflare", timeScale: 0.05, onLog, r2Shape: { firstByteMs: 300, bytesPerSec: 400_000 } }, async (local) => {
    const e = local.endpoints[0];
    const controller = new AbortController();
    const r = await fetch(`${e}/cobordism-lm-head/warm`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` }, signal: controller.signal });
    assert.equal(r.status, 202);
    controller.abort(); // the caller hangs up
    await sleep(8_000); // no request meanwhile: only the load's own holders keep the object
    const loads = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "slice_load" && l.shard === 0);
    assert.deepEqual(loads.map((l) => l.outcome), ["ok"], "the warm-up's load ran to its end");
    assert.ok(loads[0].ms > 500, `the load (${loads[0].ms} ms) outlasted the hibernation time`);
    // Then, idle and holding nothing, the object was hibernated (no keep-warm).
    assert.deepEqual(local.lifecycleEvents.map((ev) => ev.what), ["hibernated"]);
  });
});

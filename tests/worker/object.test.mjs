// Object residency (`RESIDENCY = "object"`): each shard's slice in its Durable Object, which the
// shard Worker forwards to once access is granted. The same bits as the plain Worker for every
// reply form and both precisions, one load for many concurrent callers whose vectors share
// passes, a clean reload after the object's isolate is reset mid-traffic, replicas chosen by the
// session key that load independently when they run apart and share one load when placed
// together, nothing reaching the object without access, and the keep-warm alarm as the object's
// storage holds it: set by the first request, set again when it fires while wanted, not after.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { startShards, SCRIPT, TEST_SCRIPT } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, localLogits, post, health, json, TOKEN } from "./helpers.mjs";

const VARS = { MANIFEST_TTL_MS: "0", LOAD_RETRY_MS: "0" };
let model;
before(() => {
  model = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 61 });
});

async function withShards(opts, fn) {
  const local = await startShards({ shards: 2, vars: VARS, authToken: TOKEN, ...opts });
  try {
    await seed(await local.bucket(), model);
    return await fn(local);
  } finally {
    await local.dispose();
  }
}

function part(full, i) {
  const s = model.manifest.shards[i];
  return full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count));
}

const QUERIES = ["", "?precision=int8", "?top_k=7", "?top_k=7&precision=int8", "?temperature=0.7&seed=3", "?temperature=0.7&seeds=11:0,12:1", "?tokens=1,2,4000,2047&temperature=2", "?tokens=5&precision=int8"];

test("the object answers the plain Worker's bits for every reply form and both precisions", async () => {
  const h = hiddenBytes(512, 5, 2);
  const exact = localLogits(model, h.subarray(0, 2048));
  const int8 = localLogits(model, h.subarray(0, 2048), { int8: true });
  const answers = {};
  for (const residency of ["isolate", "object"]) {
    await withShards({ residency }, async (local) => {
      for (const [i, e] of local.endpoints.entries()) {
        for (const q of QUERIES) {
          const r = await post(e, h, { query: q });
          assert.equal(r.status, 200, `${residency} ${q}: ${new TextDecoder().decode(r.body)}`);
          (answers[`${i}${q}`] ??= {})[residency] = r.body;
        }
        const one = h.subarray(0, 2048);
        assert.deepEqual((await post(e, one)).body, part(exact, i), `${residency}: native kquant's exact bits`);
        assert.deepEqual((await post(e, one, { query: "?precision=int8" })).body, part(int8, i), `${residency}: native int8 bits`);
      }
      const reported = await health(local.endpoints[0]);
      assert.equal(reported.residency, residency);
      assert.equal(reported.object, residency === "object" ? "shard-0/0" : null);
    });
  }
  for (const [key, { isolate, object }] of Object.entries(answers)) assert.deepEqual(object, isolate, key);
});

test("16 concurrent callers through the front: one load, passes of more than one vector", async () => {
  await withShards({ residency: "object" }, async (local) => {
    const e = local.endpoints[1];
    const callers = Array.from({ length: 16 }, (_, c) => hiddenBytes(512, 100 + c));
    const want = callers.map((h) => part(localLogits(model, h), 1));
    const rounds = await Promise.all(
      callers.map(async (h, c) => {
        for (let round = 0; round < 4; round++) {
          const r = await post(e, h);
          assert.equal(r.status, 200, new TextDecoder().decode(r.body));
          assert.deepEqual(r.body, want[c], `caller ${c}`);
        }
      }),
    );
    assert.equal(rounds.length, 16);
    const reported = await health(e);
    assert.equal(reported.loads, 1, "one load for every caller");
    assert.equal(reported.passes.requests, 64);
    assert.ok(reported.passes.count < 64, `passes shared: ${JSON.stringify(reported.passes)}`);
  });
});

test("the object's isolate reset mid-traffic: the next requests reload, nothing wrong is answered", async () => {
  await withShards({ residency: "object", testBuild: true }, async (local) => {
    const e = local.endpoints[0];
    const callers = Array.from({ length: 4 }, (_, c) => hiddenBytes(512, 200 + c));
    const want = callers.map((h) => part(localLogits(model, h), 0));
    const statuses = {};
    let stop = false;
    let reloaded = false;
    const traffic = callers.map(async (h, c) => {
      while (!stop) {
        const r = await post(e, h);
        const key = r.status === 200 ? 200 : `${r.status} ${json(r).error}`;
        statuses[key] = (statuses[key] ?? 0) + 1;
        if (r.status === 200) {
          assert.deepEqual(r.body, want[c], `caller ${c}`);
          if (injected && r.headers.get("x-cache") === "miss") reloaded = true;
        } else {
          assert.ok(["503 object_unavailable", "503 slice_loading"].includes(key), key);
          assert.ok(r.headers.get("retry-after"), "worth a retry");
        }
      }
    });
    let injected = false;
    await new Promise((r) => setTimeout(r, 500));
    injected = true;
    const fault = await fetch(`${e}/__fault/panic`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
    await fault.arrayBuffer();
    assert.equal(fault.status, 503, "the object failed that request: the front says so");
    const deadline = Date.now() + 10_000;
    while (!reloaded && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    stop = true;
    await Promise.all(traffic);
    assert.ok(reloaded, `a request after the reset loaded the slice again: ${JSON.stringify(statuses)}`);
    const reported = await health(e);
    assert.equal(reported.loads, 1, "the reset instance counts from its reload");
    assert.ok(reported.passes.requests < statuses[200], "a fresh instance served the last requests");
  });
});

test("a request in flight in the object when it breaks is answered at once, not after the forward's timeout", { timeout: 30_000 }, async () => {
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  let asked = 0;
  const r2Faults = { onGet: async () => (asked++, await gate, {}) };
  await withShards({ residency: "object", testBuild: true, r2Faults }, async (local) => {
    const e = local.endpoints[0];
    try {
      const pending = post(e, hiddenBytes(512, 9));
      while (asked === 0) await new Promise((r) => setTimeout(r, 20));
      const fault = await fetch(`${e}/__fault/panic`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
      await fault.arrayBuffer();
      assert.equal(fault.status, 503);
      const r = await pending; // R2 has not answered: only the broken instance's end can settle it
      assert.deepEqual([r.status, json(r).error], [503, "object_unavailable"]);
      assert.ok(r.headers.get("retry-after"), "worth a retry");
    } finally {
      release();
    }
    const h = hiddenBytes(512, 9);
    const again = await post(e, h);
    assert.equal(again.status, 200, "the reset object loads and answers");
    assert.deepEqual(again.body, part(localLogits(model, h), 0));
  });
});

test("replicas: a session stays on its replica, sessions spread over them", async () => {
  await withShards({ residency: "object", replicas: 3 }, async (local) => {
    const e = local.endpoints[0];
    const objects = new Set();
    for (let s = 0; s < 12; s++) {
      const headers = { "X-Cobordism-Session": `session-${s}` };
      const first = (await health(e, { headers })).object;
      assert.equal((await health(e, { headers })).object, first, "the same replica again");
      const r = await post(e, hiddenBytes(512, s), { headers });
      assert.equal(r.status, 200);
      objects.add(first);
    }
    assert.deepEqual([...objects].sort(), ["shard-0/0", "shard-0/1", "shard-0/2"]);
    assert.equal((await health(e)).object, "shard-0/0", "no session key: replica 0");
  });
});

/** A session key for each of shard 0's `replicas` replicas, found through `/healthz`. */
async function sessionPerReplica(e, replicas) {
  const keys = [];
  for (let s = 0; keys.filter(Boolean).length < replicas && s < 1000; s++) {
    const key = `session-${s}`;
    const r = Number((await health(e, { headers: { "X-Cobordism-Session": key } })).object.split("/")[1]);
    keys[r] ??= key;
  }
  assert.equal(keys.filter(Boolean).length, replicas, "a session key reaches every replica");
  return keys.map((key) => ({ "X-Cobordism-Session": key }));
}

test("replicas in isolates of their own load independently; a reset of one leaves the others warm", async () => {
  await withShards({ residency: "object", replicas: 3, testBuild: true }, async (local) => {
    const e = local.endpoints[0];
    const sessions = await sessionPerReplica(e, 3);
    const h = hiddenBytes(512, 7);
    const want = part(localLogits(model, h), 0);
    const served = async (headers) => {
      const r = await post(e, h, { headers });
      assert.equal(r.status, 200, new TextDecoder().decode(r.body));
      assert.deepEqual(r.body, want);
      return r.headers.get("x-cache");
    };
    const loads = async () => Promise.all(sessions.map(async (headers) => (await health(e, { headers })).loads));
    assert.equal(await served(sessions[0]), "miss");
    assert.deepEqual(await loads(), [1, 0, 0], "replica 0's load is its own");
    assert.equal((await health(e, { headers: sessions[1] })).state, "empty");
    assert.equal(await served(sessions[1]), "miss", "replica 1 loads its own slice");
    assert.equal(await served(sessions[1]), "hit");
    assert.deepEqual(await loads(), [1, 1, 0]);

    const fault = await fetch(`${e}/__fault/panic`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}`, ...sessions[1] } });
    await fault.arrayBuffer();
    assert.equal(fault.status, 503, "replica 1 failed that request");
    assert.equal(await served(sessions[0]), "hit", "replica 0 is still warm");
    assert.equal(await served(sessions[1]), "miss", "replica 1 reloads after its reset");
    assert.deepEqual(await loads(), [1, 1, 0]);
    assert.equal((await health(e, { headers: sessions[2] })).state, "empty", "replica 2 never loaded");
  });
});

test("replicas placed in one isolate share its slice: one load, a hit for the second replica", async () => {
  await withShards({ residency: "object", replicas: 2, replicaIsolates: "shared" }, async (local) => {
    const e = local.endpoints[0];
    const sessions = await sessionPerReplica(e, 2);
    const h = hiddenBytes(512, 8);
    const first = await post(e, h, { headers: sessions[0] });
    const second = await post(e, h, { headers: sessions[1] });
    assert.deepEqual([first.status, second.status], [200, 200]);
    assert.deepEqual(second.body, first.body);
    assert.deepEqual([first.headers.get("x-cache"), second.headers.get("x-cache")], ["miss", "hit"]);
    const reported = await Promise.all(sessions.map((headers) => health(e, { headers })));
    assert.deepEqual(reported.map((r) => [r.object, r.loads]), [["shard-0/0", 1], ["shard-0/1", 1]], "one load, seen from both");
  });
});

test("nothing reaches the object without access", async () => {
  await withShards({ residency: "object" }, async (local) => {
    const e = local.endpoints[0];
    const h = hiddenBytes(512, 1);
    for (const token of [null, "wrong"]) {
      const r = await post(e, h, { token });
      assert.deepEqual([r.status, json(r).error], [401, "unauthorized"]);
      const warmed = await fetch(`${e}/cobordism-lm-head/warm`, { method: "POST", ...(token ? { headers: { Authorization: `Bearer ${token}` } } : {}) });
      assert.equal(warmed.status, 401);
      await warmed.arrayBuffer();
      // The front answers a public probe itself: it wakes no object (whatever the session key).
      assert.deepEqual(await health(e, { token, headers: { "X-Cobordism-Session": "s" } }), { state: "unknown" });
    }
    const reported = await health(e);
    assert.deepEqual([reported.state, reported.loads, reported.passes.requests], ["empty", 0, 0], "the object saw no request");
  });
});

test("a warm-up with access warms the replica it names (an upgrade warms each), and that one alone", async () => {
  await withShards({ residency: "object", replicas: 2 }, async (local) => {
    const e = local.endpoints[0];
    const auth = { Authorization: `Bearer ${TOKEN}` };
    const replica = async (r) => (await fetch(`${e}/healthz?replica=${r}`, { headers: auth })).json();
    let answer;
    for (let tries = 0; tries < 200 && answer?.state !== "ready"; tries++) {
      const r = await fetch(`${e}/cobordism-lm-head/warm?replica=1`, { method: "POST", headers: auth });
      answer = await r.json();
      assert.ok([200, 202].includes(r.status), JSON.stringify(answer));
    }
    assert.equal(answer.state, "ready");
    const [zero, one] = [await replica(0), await replica(1)];
    assert.deepEqual([one.object, one.state, one.loads], ["shard-0/1", "ready", 1]);
    assert.deepEqual([zero.object, zero.state, zero.loads], ["shard-0/0", "empty", 0]);
    const beyond = await fetch(`${e}/cobordism-lm-head/warm?replica=2`, { method: "POST", headers: auth });
    assert.deepEqual([beyond.status, (await beyond.json()).error], [400, "bad_query"]);
  });
});

/** The keep-warm alarm's period (cobordism_shard::object::KEEP_WARM_TICK_MS). */
const TICK_MS = 30_000;

/** When the object of shard 0 has its alarm due (ms since the epoch, null for none), as its
 * storage holds it: the test build's `POST /__fault/alarm`, which the keep-warm does not count. */
async function alarmOf(e) {
  const r = await fetch(`${e}/__fault/alarm`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body.alarm_ms;
}

test("KEEP_WARM_S: the first request sets the alarm, which sets itself again while wanted", async () => {
  const lines = [];
  const onLog = ({ message }) => void lines.push(message);
  /** The alarm after 3 requests, and once it fired. */
  const alarms = (keepWarmS) =>
    withShards({ residency: "object", testBuild: true, vars: { ...VARS, KEEP_WARM_S: keepWarmS }, onLog }, async (local) => {
      const e = local.endpoints[0];
      assert.equal(await alarmOf(e), null, "none before a request");
      const start = Date.now();
      for (let i = 0; i < 3; i++) assert.equal((await post(e, hiddenBytes(512, i))).status, 200);
      const first = await alarmOf(e);
      assert.ok(first >= start + TICK_MS - 1000 && first <= Date.now() + TICK_MS, `a tick after the first request: ${first - start} ms`);
      await new Promise((r) => setTimeout(r, first - Date.now() + 2000));
      return [first, await alarmOf(e)];
    });
  const [[first, again], [, lapsed]] = await Promise.all([alarms("600"), alarms("1")]);
  assert.ok(again >= first + TICK_MS - 100, `set again a tick after it fired: ${again - first} ms later`);
  assert.equal(lapsed, null, "KEEP_WARM_S = 1: the last request is older when it fires, so it is not set again");
  assert.deepEqual(lines.filter((l) => /keep_warm_failed/.test(l)), [], "no alarm failure logged");
});

test("a warm-up answers 202 at once and completes after its caller has gone: the object's own request holds the load, the front's waitUntil the forward", async () => {
  // R2 shaped slow: a load takes seconds, far over the front's wait for its object's answer.
  await withShards({ residency: "object", r2Shape: { firstByteMs: 300, bytesPerSec: 100_000 } }, async (local) => {
    const e = local.endpoints[0];
    const controller = new AbortController();
    const started = Date.now();
    const r = await fetch(`${e}/cobordism-lm-head/warm`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` }, signal: controller.signal });
    assert.equal(r.status, 202);
    assert.deepEqual(await r.json(), { shard_index: 0, shard_count: 2, state: "loading", loading_next: false });
    assert.ok(Date.now() - started < 5_000, `answered in ${Date.now() - started} ms`);
    controller.abort(); // the caller hangs up
    let h;
    for (let i = 0; i < 300 && (h = await health(e)).state !== "ready"; i++) await new Promise((res) => setTimeout(res, 100));
    assert.equal(h.state, "ready", JSON.stringify(h));
    assert.equal(h.loads, 1, "one load, the warm-up's");
    // Resident now: the next warm-up is the object's own answer, 200.
    const again = await fetch(`${e}/cobordism-lm-head/warm`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
    assert.equal(again.status, 200);
  });
});

test("probes do not keep an object warm: /healthz sets no keep-warm alarm, work does", async () => {
  await withShards({ residency: "object", testBuild: true, vars: { ...VARS, KEEP_WARM_S: "600" } }, async (local) => {
    const e = local.endpoints[0];
    const alarm = async () => (await (await fetch(`${e}/__fault/alarm`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } })).json()).alarm_ms;
    await health(e);
    await health(e);
    assert.equal(await alarm(), null, "a probe sets no alarm");
    assert.equal((await post(e, hiddenBytes(512, 5, 1))).status, 200);
    assert.notEqual(await alarm(), null, "work does");
  });
});

test("a rollout's two builds side by side: one forward version interoperates, another is a retryable 503 build_mismatch, both ways", async () => {
  const h = hiddenBytes(512, 9);
  const want = part(localLogits(model, h), 0);
  // The production build's front and the test build's object (two builds, one forward version).
  await withShards({ residency: "object", objects: { script: TEST_SCRIPT } }, async (local) => {
    const r = await post(local.endpoints[0], h);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, want);
  });
  const played = { TEST_FORWARD_VERSION: "2" };
  for (const [who, opts] of [
    ["an object of the next forward version", { objects: { script: TEST_SCRIPT, vars: played } }],
    ["a front of the next forward version", { testBuild: true, vars: { ...VARS, ...played }, objects: { script: SCRIPT } }],
  ]) {
    await withShards({ residency: "object", ...opts }, async (local) => {
      const r = await post(local.endpoints[0], h);
      assert.equal(r.status, 503, `${who}: ${new TextDecoder().decode(r.body)}`);
      assert.equal(json(r).error, "build_mismatch", who);
      assert.equal(r.headers.get("retry-after"), "2", who);
    });
  }
});

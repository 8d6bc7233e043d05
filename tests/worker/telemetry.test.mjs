// What a shard tells its operator, in workerd: one JSON log line per slice load (with its
// outcome) and per error answer, a summary of the passes, and one data point per lm-head answer
// and per error answer in the METRICS dataset (a stand-in binding that logs what it receives);
// nothing at all for a request without access (401, 404, 405), and no point for the warm-up's
// answer or /healthz (cobordism_shard::events decides all of it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, post, warm, health, TOKEN } from "./helpers.mjs";

test("log lines for loads, errors and passes; METRICS data points; nothing without access", async () => {
  const model = makeModel({ type: "q6_k", hidden: 512, vocab: 4096, shards: 2, seed: 91 });
  const lines = [];
  const onLog = ({ message }) => {
    for (const line of message.split("\n")) {
      try {
        lines.push(JSON.parse(line));
      } catch {} // not one of the shard's JSON lines
    }
  };
  const local = await startShards({ shards: 2, authToken: TOKEN, vars: { LOAD_RETRY_MS: "0" }, onLog, metrics: true });
  try {
    const e = local.endpoints[1];
    const missing = await post(e, hiddenBytes(512, 1));
    assert.equal(missing.status, 503);
    await seed(await local.bucket(), model);
    assert.equal((await post(e, hiddenBytes(512, 1))).status, 200);
    assert.equal((await post(e, hiddenBytes(512, 2), { query: "?top_k=3&precision=int8" })).status, 200);
    assert.equal((await post(e, new Uint8Array(12))).status, 400);
    for (const token of [null, "wrong"]) assert.equal((await post(e, hiddenBytes(512, 1), { token })).status, 401);
    for (const [path, method, status] of [["/nope", "POST", 404], ["/cobordism-lm-head", "GET", 405]]) {
      const r = await fetch(`${e}${path}`, { method });
      await r.arrayBuffer();
      assert.equal(r.status, status);
    }
    assert.equal((await warm(e)).status, 200, "resident: the warm-up answers 200");
    assert.equal((await health(e)).state, "ready");
    await new Promise((r) => setTimeout(r, 200)); // the last lines reach the log
    const events = (name) => lines.filter((l) => l.event === name);
    assert.deepEqual(
      events("slice_load").map((l) => [l.shard, l.outcome, l.version, l.bytes, l.streams]),
      [
        [1, "manifest_missing", null, null, 4],
        [1, "ok", model.manifest.version, model.manifest.shards[1].bytes, 4],
      ],
    );
    assert.deepEqual(
      events("error").map((l) => [l.shard, l.code, l.status]),
      [
        [1, "manifest_missing", 503],
        [1, "bad_length", 400],
      ],
      "no line for 401, 404, 405",
    );
    const known = ["slice_load", "error", "passes"];
    assert.deepEqual(lines.filter((l) => !l.metric && !known.includes(l.event)), [], "no other line");
    const [passes] = events("passes");
    assert.deepEqual([passes.shard, passes.passes, passes.requests], [1, 1, 1], "the first pass's summary");
    const points = lines.filter((l) => l.metric).map((l) => l.metric);
    assert.deepEqual(
      points.map((p) => [p.indexes, p.blobs]),
      [
        [["shard-1"], ["503", "-", "-", "manifest_missing"]],
        [["shard-1"], ["200", "miss", "exact", "logits"]],
        [["shard-1"], ["200", "hit", "int8", "top_k"]],
        [["shard-1"], ["400", "-", "-", "bad_length"]],
      ],
      "none for 401, 404, 405, the warm-up or /healthz",
    );
    assert.deepEqual(points[2].doubles.slice(0, 2), [1, 1], "pass vectors, batch");
  } finally {
    await local.dispose();
  }
});

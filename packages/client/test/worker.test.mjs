// The example inference Worker (examples/inference-worker), bundled by wrangler as for a deploy
// and run in workerd (Miniflare), turns hidden vectors into sampled tokens by calling eight local
// shards through @cobordism/client over fetch: the tokens equal the CLI's local samples; it
// answers a caller's mistakes with its own 400 and refuses to sample from 7 of 8 shards.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { Miniflare } from "miniflare";
import { startShards } from "../../../worker/local.mjs";
import { bundleForDeploy, parseSample, runLocal, faultyProxy, makeModel, seed, hiddenBytes, tempDir, TOKEN } from "../../../tests/worker/helpers.mjs";

const ROOT = join(import.meta.dirname, "..", "..", "..");
const EXAMPLE = join(ROOT, "examples", "inference-worker");
let model, other, shards, others, proxies, mf, dir;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "inference-example-"));
  model = makeModel({ type: "q6_k", hidden: 256, vocab: 6000, shards: 8, seed: 90 });
  shards = await startShards({ shards: 8, authToken: TOKEN });
  await seed(await shards.bucket(), model);
  other = makeModel({ type: "q6_k", hidden: 256, vocab: 6000, shards: 8, seed: 91 });
  others = await startShards({ shards: 8, authToken: TOKEN });
  await seed(await others.bucket(), other);
  // Shard 2 slow, shard 5 answering 503 twice before it recovers: real HTTP in front of real shards.
  proxies = [await faultyProxy(shards.endpoints[2], { delayMs: 300 }), await faultyProxy(shards.endpoints[5], { refuse: 2 })];
  const urls = shards.endpoints.map((e, i) => (i === 2 ? proxies[0].url : i === 5 ? proxies[1].url : e));
  const mixed = shards.endpoints.map((e, i) => (i === 3 ? others.endpoints[3] : e));
  const script = bundleForDeploy(EXAMPLE, dir);
  const worker = (name, urls) => ({
    name,
    modules: true,
    scriptPath: script,
    modulesRoot: dirname(script),
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: "2026-04-01",
    bindings: { SHARD_URLS: urls.join(","), SHARD_TOKEN: TOKEN },
  });
  const partial = shards.endpoints.slice(0, 7);
  mf = new Miniflare({ workers: [worker("inference", urls), worker("mixed", mixed), worker("partial", partial)] });
  await mf.ready;
});

after(async () => {
  await mf?.dispose();
  await shards?.dispose();
  await others?.dispose();
  await Promise.all((proxies ?? []).map((p) => p.close()));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the example inference Worker samples the CLI's tokens through eight shards, one slow, one 503 then back", async () => {
  // A session starts by warming the (cold) shards: each answers at once, loading or ready.
  const session = await (await mf.getWorker("inference")).fetch("http://localhost/session", { method: "POST" });
  const warmed = await session.json();
  assert.equal(session.status, 200, JSON.stringify(warmed));
  assert.equal(warmed.shards.length, 8);
  assert.ok(warmed.shards.every((s) => s === "loading" || s === "ready"), JSON.stringify(warmed));
  for (const [i, query] of ["temperature=0.8&seed=1", "temperature=1&top_p=0.9&seed=2&session=conversation-7", "temperature=0"].entries()) {
    const bytes = hiddenBytes(256, 30 + i);
    const inference = await mf.getWorker("inference");
    const r = await inference.fetch(`http://localhost/next-token?${query}`, { method: "POST", body: bytes });
    const got = await r.json();
    assert.equal(r.status, 200, JSON.stringify(got));
    const file = join(tempDir("hidden"), "h.f32");
    writeFileSync(file, bytes);
    const q = new URLSearchParams(query);
    const args = ["sample", "--temperature", q.get("temperature"), "--seed", q.get("seed") ?? "0"];
    if (q.has("top_p")) args.push("--top-p", q.get("top_p"));
    const { token, logprob } = parseSample(await runLocal(model, file, ...args));
    assert.deepEqual([got.token, got.logprob.toFixed(6)], [token, logprob], query);
  }
  assert.equal(proxies[1].refused(), 2, "shard 5's 503s were retried");
  // The adjustments, as the CLI's flags of the same names.
  const bytes = hiddenBytes(256, 35);
  const file = join(tempDir("hidden"), "adjusted.f32");
  writeFileSync(file, bytes);
  for (const [query, flags] of [
    ["logit_bias=4321:100", ["--logit-bias", "4321:100"]],
    ["logit_bias=17:2.5,40:-inf&history=5,5,17&presence_penalty=0.5&frequency_penalty=0.25&repetition_penalty=1.3", ["--logit-bias", "17:2.5,40:-inf", "--history", "5,5,17", "--presence-penalty", "0.5", "--frequency-penalty", "0.25", "--repetition-penalty", "1.3"]],
    ["allowed_tokens=7,42,5000", ["--allow", "7,42,5000"]],
  ]) {
    const r = await (await mf.getWorker("inference")).fetch(`http://localhost/next-token?temperature=1.2&seed=4&${query}`, { method: "POST", body: bytes });
    const got = await r.json();
    assert.equal(r.status, 200, JSON.stringify(got));
    const { token, logprob } = parseSample(await runLocal(model, file, "sample", "--temperature", "1.2", "--seed", "4", ...flags));
    assert.deepEqual([got.token, got.logprob.toFixed(6)], [token, logprob], query);
    if (query.startsWith("logit_bias=4321")) assert.equal(got.token, 4321);
  }
  // The same as JSON (the hidden vector and the parameters in the body), with a range.
  const json = {
    hidden: Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, 256)),
    temperature: 1.2,
    seed: 4,
    logit_bias: { 17: 2.5, 40: "-inf" },
    history: [5, 5, 17],
    presence_penalty: 0.5,
    allowed_tokens: "0..100,5000",
  };
  // A 4,096-token history as JSON: as a query it would pass Cloudflare's 16 KB URLs.
  const long = { ...json, history: Array.from({ length: 4096 }, (_, i) => (i * 7919) % 6000), allowed_tokens: undefined };
  assert.ok(new URLSearchParams({ history: long.history.join(",") }).toString().length > 16 * 1024);
  const longAnswer = await (await mf.getWorker("inference")).fetch("http://localhost/next-token", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(long) });
  assert.equal(longAnswer.status, 200, JSON.stringify(await longAnswer.clone().json()));
  const r = await (await mf.getWorker("inference")).fetch("http://localhost/next-token", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(json) });
  const got = await r.json();
  assert.equal(r.status, 200, JSON.stringify(got));
  const flags = ["--logit-bias", "17:2.5,40:-inf", "--history", "5,5,17", "--presence-penalty", "0.5", "--allow", "0..100,5000"];
  const { token, logprob } = parseSample(await runLocal(model, file, "sample", "--temperature", "1.2", "--seed", "4", ...flags));
  assert.deepEqual([got.token, got.logprob.toFixed(6)], [token, logprob], "JSON");
  const inference = await mf.getWorker("inference");
  const bad = await inference.fetch("http://localhost/next-token", { method: "POST", body: new Uint8Array(3) });
  assert.equal(bad.status, 400);
});

test("in workerd, a shard serving another manifest version is refused, naming the shard", async () => {
  const mixed = await mf.getWorker("mixed");
  const r = await mixed.fetch("http://localhost/next-token?temperature=1&seed=1", { method: "POST", body: hiddenBytes(256, 40) });
  const got = await r.json();
  assert.equal(r.status, 502);
  assert.match(got.detail, /shard 3 .* manifest version/);
});

test("in workerd, the example answers a caller's mistakes with its own 400, before or from the shards", async () => {
  const inference = await mf.getWorker("inference");
  for (const [query, body, why] of [
    ["temperature=abc&seed=1", hiddenBytes(256, 41), /temperature must be a number/],
    ["temperature=1&seed=1.5", hiddenBytes(256, 41), /seed must be an integer/],
    ["temperature=0.001&seed=1", hiddenBytes(256, 41), /temperature must be a number from 0.01/],
    ["temperature=1&top_k=2.5&seed=1", hiddenBytes(256, 41), /topK must be a non-negative integer/],
    ["temperature=1&seed=1", hiddenBytes(255, 41), /bad_length/], // refused by the shards: 400, not 502
    ["temperature=1&seed=1&session=a%20b", hiddenBytes(256, 41), /session must be 1 to 128 letters/],
    ["temperature=1&logit_bias=5", hiddenBytes(256, 41), /logit_bias must be ID:BIAS pairs/],
    ["temperature=1&history=1,x&presence_penalty=1", hiddenBytes(256, 41), /history must list token ids/],
    ["temperature=1&allowed_tokens=6000", hiddenBytes(256, 41), /bad_adjust.*vocabulary/], // refused by the shards
    ["temperature=1&repetition_penalty=0&history=1", hiddenBytes(256, 41), /repetition penalty/],
    ["temperature=1&allowed_tokens=0..4294967295", hiddenBytes(256, 41), /more than 2\^24 tokens/],
  ]) {
    const r = await inference.fetch(`http://localhost/next-token?${query}`, { method: "POST", body });
    const got = await r.json();
    assert.equal(r.status, 400, `${query}: ${JSON.stringify(got)}`);
    assert.match(got.detail, why, query);
  }
  for (const [body, why] of [
    ["{", /not JSON/],
    [JSON.stringify({ temperature: 1 }), /hidden: an array of numbers/],
    [JSON.stringify({ hidden: [1, "x"] }), /hidden: an array of numbers/],
    [JSON.stringify({ hidden: Array(256).fill(0.5), logit_bias: { 3: null } }), /logit_bias must be ID:BIAS pairs/],
  ]) {
    const r = await inference.fetch("http://localhost/next-token", { method: "POST", headers: { "Content-Type": "application/json" }, body });
    const got = await r.json();
    assert.equal(r.status, 400, `${body}: ${JSON.stringify(got)}`);
    assert.match(got.detail, why, body);
  }
});

test("in workerd, seven of eight shards give no token: the example fails naming the missing rows", async () => {
  const partial = await mf.getWorker("partial");
  const r = await partial.fetch("http://localhost/next-token?temperature=1&seed=1", { method: "POST", body: hiddenBytes(256, 42) });
  const got = await r.json();
  assert.equal(r.status, 502, JSON.stringify(got));
  assert.equal(got.retryable, false);
  const last = model.manifest.shards[7];
  assert.match(got.detail, new RegExp(`rows ${last.row_start}\\.\\.${model.manifest.vocab} of ${model.manifest.vocab} are missing`));
});

// @cobordism/client as a Worker author installs it: its `npm pack` tarball installed into a new
// Worker project outside the repository, bundled by wrangler (tests/packed/project.mjs) and run
// in workerd (Miniflare) against local shards (worker/local.mjs). Its samples and top-k equal the
// same package's under Node, calling the same shards, and the sampled tokens the CLI's `--local`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Miniflare } from "miniflare";
import { startShards } from "../../../worker/local.mjs";
import { CLI, makeModel, seed, hiddenBytes, tempDir, TOKEN } from "../../../tests/worker/helpers.mjs";
import { packedWorkerProject, workerOptions } from "../../../tests/packed/project.mjs";

/** The Worker: POST /sample?temperature=…&seed=… with a hidden vector (f32) → {sampled, top}. */
const WORKER = `import { LmHeadClient } from "@cobordism/client";
export default {
  async fetch(request, env) {
    const q = new URL(request.url).searchParams;
    const client = new LmHeadClient({ endpoints: env.SHARD_URLS.split(","), token: env.SHARD_TOKEN });
    const hidden = new Float32Array(await request.arrayBuffer());
    const options = { temperature: Number(q.get("temperature")), seed: BigInt(q.get("seed")) };
    const [sampled, top] = await Promise.all([client.sample(hidden, options), client.topK(hidden, 5)]);
    return Response.json({ sampled, top });
  },
};
`;
const HIDDEN = 256;
let project, model, shards, mf, client;

before(async () => {
  project = packedWorkerProject("client", WORKER);
  model = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 3000, shards: 2, seed: 77 });
  shards = await startShards({ shards: 2, authToken: TOKEN });
  await seed(await shards.bucket(), model);
  const entry = createRequire(join(project.dir, "package.json")).resolve("@cobordism/client");
  const { LmHeadClient } = await import(pathToFileURL(entry).href);
  client = new LmHeadClient({ endpoints: shards.endpoints, token: TOKEN });
  mf = new Miniflare(workerOptions(project.script, { SHARD_URLS: shards.endpoints.join(","), SHARD_TOKEN: TOKEN }));
  await mf.ready;
});

after(async () => {
  await mf?.dispose();
  await shards?.dispose();
  project?.dispose();
});

/**
 * The CLI's `sample --local` token for `bytes` (the model's manifest and slices, no shards).
 * @param {Uint8Array} bytes
 * @param {number} temperature
 * @param {number} seedValue
 */
function localToken(bytes, temperature, seedValue) {
  const file = join(tempDir("hidden"), "h.f32");
  writeFileSync(file, bytes);
  const args = ["sample", "--manifest", join(model.slices, "manifest.json"), "--hidden", file, "--local", "--temperature", `${temperature}`, "--seed", `${seedValue}`];
  return Number(/token (\d+)/.exec(execFileSync(CLI, args, { encoding: "utf8" }))[1]);
}

test("the packed client's Worker samples and ranks as the package does under Node and as the CLI's --local", async () => {
  for (const [i, temperature] of [0.8, 0].entries()) {
    const bytes = hiddenBytes(HIDDEN, 50 + i);
    const r = await mf.dispatchFetch(`http://localhost/sample?temperature=${temperature}&seed=${i + 1}`, { method: "POST", body: bytes });
    const got = await r.json();
    assert.equal(r.status, 200, JSON.stringify(got));
    const hidden = new Float32Array(bytes.buffer, bytes.byteOffset, HIDDEN);
    const sampled = await client.sample(hidden, { temperature, seed: BigInt(i + 1) });
    const top = await client.topK(hidden, 5);
    assert.deepEqual(got, JSON.parse(JSON.stringify({ sampled, top })));
    assert.equal(got.sampled.token, localToken(bytes, temperature, i + 1), `temperature ${temperature}`);
    assert.equal(got.top.entries.length, 5);
  }
});

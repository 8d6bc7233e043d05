// R2 failing under a resident shard, in workerd against the real local bucket wrapped by a
// binding that throws on demand: warm requests keep being answered from the resident,
// checksummed slice (stale-while-revalidate), /healthz says the checks fail, and the shard
// picks up a new version once R2 is back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, localLogits, post, health, TOKEN } from "./helpers.mjs";

function part(full, manifest, i) {
  const s = manifest.shards[i];
  return full.subarray(4 * s.row_start, 4 * (s.row_start + s.row_count));
}

test("R2 errors during warm traffic fail no request; a new version waits for R2 to be back", async (t) => {
  const a = makeModel({ type: "q4_k", hidden: 512, vocab: 4096, shards: 2, seed: 41 });
  const b = makeModel({ type: "q4_k", hidden: 512, vocab: 4096, shards: 2, seed: 42 });
  const faults = { head: false, get: false };
  const local = await startShards({ shards: 2, vars: { MANIFEST_TTL_MS: "0", LOAD_RETRY_MS: "0" }, authToken: TOKEN, r2Faults: faults });
  try {
    const bucket = await local.bucket();
    await seed(bucket, a);
    const h = hiddenBytes(512, 3);
    const want = { [a.manifest.version]: part(localLogits(a, h), a.manifest, 0), [b.manifest.version]: part(localLogits(b, h), b.manifest, 0) };
    const first = await post(local.endpoints[0], h);
    assert.equal(first.status, 200);
    assert.deepEqual(first.body, want[a.manifest.version]);

    faults.head = faults.get = true;
    await seed(bucket, b); // a new version arrives while R2 fails for the shard
    const statuses = {};
    const started = Date.now();
    let warm = 0;
    while (Date.now() - started < 3000) {
      const r = await post(local.endpoints[0], h);
      statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      assert.equal(r.status, 200, `warm request ${warm} during the R2 outage`);
      assert.equal(r.headers.get("x-manifest-version"), a.manifest.version);
      assert.deepEqual(r.body, want[a.manifest.version]);
      warm++;
    }
    const during = await health(local.endpoints[0]);
    assert.match(during.last_check_error, /injected R2 failure/);
    assert.ok(during.checked_ms_ago >= 2000, JSON.stringify(during));

    faults.head = faults.get = false;
    // The next check is at most the 60 s backoff cap away; with 3 s of failures it is ≤ 4 s.
    let switched;
    const waitStart = Date.now();
    while (!switched && Date.now() - waitStart < 10_000) {
      const r = await post(local.endpoints[0], h);
      assert.equal(r.status, 200);
      const v = r.headers.get("x-manifest-version");
      assert.deepEqual(r.body, want[v], `bits of version ${v}`);
      if (v === b.manifest.version) switched = Date.now() - waitStart;
      else await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(switched !== undefined, "the shard never moved to the new version");
    const after = await health(local.endpoints[0]);
    assert.equal(after.last_check_error, null);
    t.diagnostic(`figures: ${JSON.stringify({ warm_requests_during_outage: warm, statuses, switched_after_recovery_ms: switched })}`);
  } finally {
    await local.dispose();
  }
});

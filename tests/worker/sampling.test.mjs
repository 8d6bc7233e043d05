// The reply forms over HTTP: eight and twelve shards in workerd answer `cobordism sample`,
// `logprobs` and the default top-K `logits` with exactly what the CLI computes locally from the
// same slices (the merge and sampling math is `cobordism_protocol::sampling`, checked against
// one machine natively in crates/protocol/tests/sampling.rs), and bad queries get a named error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startShards } from "../../worker/local.mjs";
import { againstLocal, makeModel, seed, hiddenBytes, post, json, resultOf as result, runLocal, TOKEN } from "./helpers.mjs";

for (const shards of [8, 12]) {
  test(`${shards} shards: sample, logprobs and top-K logits equal the local computation`, async (t) => {
    await againstLocal({ shards, vocab: 6000, modelSeed: 60 + shards, hiddenSeed: 3 }, async (both, _local, { model, hiddenFile }) => {
      let draws = 0;
      for (const temperature of ["0.3", "1", "2"]) {
        for (const s of ["1", "2", "3"]) {
          const [a, b] = await both("sample", "--temperature", temperature, "--seed", s);
          assert.equal(result(a, "token "), result(b, "token "), `T ${temperature}, seed ${s}`);
          assert.match(a, /Gumbel-max/);
          draws++;
        }
      }
      for (const filter of [["--top-k", "5"], ["--top-p", "0.9"], ["--min-p", "0.1"], ["--temperature", "0"]]) {
        const [a, b] = await both("sample", "--seed", "9", ...filter);
        assert.equal(result(a, "token "), result(b, "token "), filter.join(" "));
      }
      const [la, lb] = await both("logprobs", "--tokens", "0,17,5999,3000");
      assert.equal(result(la, "     token"), result(lb, "     token"));
      const [ka, kb] = await both("logits", "--top-k", "20");
      assert.equal(result(ka, " rank"), result(kb, " rank"), "merged top-K = local top-K");
      const full = await runLocal(model, hiddenFile, "logits", "--full", "--top-k", "20");
      // Tokens and logits equal; the probabilities' normaliser is merged from the shards'
      // log-sum-exps on one side and summed over all logits on the other (last digits may move).
      const columns = (out) => result(out, " rank").split("\n").map((l) => l.trim().split(/\s+/).slice(0, 3).join(" "));
      assert.deepEqual(columns(ka), columns(full), "merged top-K = top-K of all logits");
      t.diagnostic(`${shards} shards: ${draws} plain draws, 4 filtered draws, logprobs and top-20 equal locally and remotely`);
    });
  });
}

test("reply forms: sizes per vector, and bad queries are named", async () => {
  const m = makeModel({ type: "q6_k", hidden: 256, vocab: 4096, shards: 2, seed: 70 });
  const local = await startShards({ shards: 2, authToken: TOKEN });
  try {
    await seed(await local.bucket(), m);
    const [e] = local.endpoints;
    const h = hiddenBytes(256, 4, 3); // three vectors
    const sizes = {};
    for (const [query, reply] of [["", "logits"], ["?top_k=8&temperature=0.7", "top_k"], ["?temperature=1&seed=5", "sample"], ["?tokens=1,2,4000", "tokens"]]) {
      const r = await post(e, h, { query });
      assert.equal(r.status, 200, query);
      assert.equal(r.headers.get("x-reply"), reply);
      sizes[reply] = r.body.length / 3;
    }
    assert.deepEqual(sizes, { logits: 4 * 2048, top_k: 12 + 8 * 8, sample: 12 + 8, tokens: 12 + 8 * 2 });
    for (const [query, code] of [
      ["?temperature=1", "bad_query"],
      ["?temperature=0&seed=1", "bad_temperature"],
      ["?temperature=1&seed=x", "bad_seed"],
      ["?tokens=a", "bad_tokens"],
      ["?top_k=2&tokens=1", "bad_query"],
      ["?top_k=0", "bad_top_k"],
    ]) {
      const r = await post(e, h, { query });
      assert.deepEqual([r.status, json(r).error], [400, code], query);
    }
  } finally {
    await local.dispose();
  }
});

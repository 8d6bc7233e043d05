// Logit bias, penalties and allowed sets over HTTP: `cobordism sample` and `logprobs` against
// local shards in workerd equal the same commands with --local (the slices computed natively,
// adjusted by cobordism_protocol's code) on every seed, for 1, 2, 8 and 12 shards; a +100 bias
// wins every draw; a bad section is refused by name. The distribution itself (χ² over 10,000
// draws against one machine, must-fail lines for the order and the mask) is checked natively in
// crates/protocol/tests/adjusted.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { againstLocal, hiddenBytes, post, json, resultOf as result, tempDir } from "./helpers.mjs";

const VOCAB = 6000;

/** The drawn token of a `sample` output. */
const token = (out) => Number(/^token (\d+)/m.exec(result(out, "token "))[1]);

/** A file of token ids, one per line. */
function idsFile(name, ids) {
  const path = join(tempDir("ids"), name);
  writeFileSync(path, ids.join("\n") + "\n");
  return path;
}

const history = idsFile("history", [5, 5, 5, 17, 749, 750, 750, 3001, 5999, 17, 4242]);
/** Each flag alone, aimed at fixed ids spread over every cut below. */
const EACH = [
  ["--logit-bias", "17:3.5,750:-2,4242:-inf,5999:1.25"],
  ["--presence-penalty", "0.8", "--history", history],
  ["--frequency-penalty", "0.6", "--history", "5,5,5,17,750,3001"],
  ["--repetition-penalty", "1.7", "--history", history],
  ["--allow", "3..9,740..760,5990..6000"],
];
const ALL = ["--logit-bias", "17:3.5,750:-2,4242:-inf,5999:1.25", "--history", history, "--repetition-penalty", "1.7", "--presence-penalty", "0.3", "--frequency-penalty", "0.2", "--allow", "0..800,3000..3100"];

/**
 * Each flag aimed at the tokens `plain` drew (seed s drew plain[s - 1]), so that each changes
 * some draws: a history of them, a bias against the first ones, an allowed set without them.
 */
function flagsAgainst(plain) {
  const drawn = idsFile("drawn", plain);
  const distinct = [...new Set(plain)];
  const others = (lo, hi) => Array.from({ length: hi - lo }, (_, i) => lo + i).filter((t) => !distinct.includes(t));
  const allowed = [...others(0, 1500), ...distinct.slice(0, 2)];
  const flags = {
    "--logit-bias": ["--logit-bias", distinct.slice(0, 4).map((t, i) => `${t}:${i === 0 ? "-inf" : -2 * i}`).join(",")],
    "--presence-penalty": ["--presence-penalty", "2.5", "--history", drawn],
    "--frequency-penalty": ["--frequency-penalty", "1.5", "--history", distinct.join(",")],
    "--repetition-penalty": ["--repetition-penalty", "3", "--history", drawn],
    "--history": ["--history", drawn, "--presence-penalty", "-0.5", "--frequency-penalty", "0.75"],
    "--allow": ["--allow", idsFile("allowed", allowed)],
  };
  return { flags, allowed: new Set(allowed) };
}

/** `check(both, local)` against `shards` local shards of a fresh model (helpers' againstLocal). */
const withShards = (shards, check, residency = "isolate") => againstLocal({ shards, vocab: VOCAB, modelSeed: 80 + shards, hiddenSeed: 5, residency }, check);

test("8 shards: each flag gives the --local token on 20 seeds, and a +100 bias wins every draw", async (t) => {
  await withShards(8, async (both) => {
    const seeds = Array.from({ length: 20 }, (_, i) => String(i + 1));
    const plain = [];
    for (const s of seeds) plain.push(token((await both("sample", "--temperature", "1.5", "--seed", s))[0]));
    const { flags, allowed } = flagsAgainst(plain);
    for (const [flag, args] of Object.entries(flags)) {
      let changed = 0;
      for (const [i, s] of seeds.entries()) {
        const [a, b] = await both("sample", "--temperature", "1.5", "--seed", s, ...args);
        assert.equal(result(a, "token "), result(b, "token "), `${flag}, seed ${s}`);
        if (token(a) !== plain[i]) changed++;
        if (flag === "--allow") assert.ok(allowed.has(token(a)), `seed ${s}: ${token(a)} is not allowed`);
      }
      assert.ok(changed > 0, `${flag} changed no draw: the test cannot tell it is applied`);
      t.diagnostic(`${flag}: 20 seeds equal --local, ${changed} of them changed by the flag`);
    }
    for (const s of seeds) {
      const [a] = await both("sample", "--temperature", "1", "--seed", s, "--logit-bias", "4321:100");
      assert.equal(token(a), 4321, `seed ${s}`);
    }
    assert.ok(!plain.includes(4321), "without the bias other tokens");
  });
});

for (const [shards, residency] of [[1, "isolate"], [2, "isolate"], [8, "isolate"], [12, "isolate"], [2, "object"]]) {
  test(`${shards} shards (${residency} residency): each flag and every flag together, filtered, greedy and logprobs equal --local`, async () => {
    await withShards(shards, async (both) => {
      for (const extra of [[], ["--top-k", "7"], ["--top-p", "0.8"], ["--min-p", "0.2"], ["--temperature", "0"]]) {
        for (const s of ["1", "2", "3"]) {
          const [a, b] = await both("sample", "--seed", s, ...ALL, ...extra);
          assert.equal(result(a, "token "), result(b, "token "), `${extra.join(" ")} seed ${s}`);
        }
      }
      for (const flag of EACH) {
        for (const s of ["4", "5"]) {
          const [a, b] = await both("sample", "--seed", s, "--temperature", "1.3", ...flag);
          assert.equal(result(a, "token "), result(b, "token "), `${flag.join(" ")} seed ${s}`);
        }
      }
      const tokens = ["--tokens", "5,17,750,4242,3050,5999"];
      const [la, lb] = await both("logprobs", ...tokens, "--temperature", "0.7", ...ALL);
      assert.equal(result(la, "     token"), result(lb, "     token"));
      assert.match(result(la, "     token"), /4242\s+-inf/, "a banned token's logprob is -inf");
      assert.match(result(la, "     token"), /5999\s+-inf/, "a token outside the allowed set: -inf");
    }, residency);
  });
}

test("a bad adjustments section is refused by name", async () => {
  await withShards(2, async (_both, local) => {
    const [e] = local.endpoints;
    const vector = hiddenBytes(256, 4);
    // The layout written out here by hand (docs/API.md, "Adjustments"), not by the protocol crate.
    const v = (x) => (x < 0x80 ? [x] : [(x & 0x7f) | 0x80, ...v(x >>> 7)]);
    const bytesOf = (array) => [...new Uint8Array(array.buffer)];
    const u32 = (x) => bytesOf(new Uint32Array([x]));
    const penalties = bytesOf(new Float32Array([0, 0, 1]));
    const withSection = (bytes) => {
      const body = new Uint8Array(vector.length + bytes.length);
      body.set(vector);
      body.set(bytes, vector.length);
      return [body, bytes.length];
    };
    for (const [bytes, why] of [
      [[...u32(1), ...u32(1), 0, ...penalties, 0, 1, ...v(VOCAB), 1], "vocabulary"],
      [[...u32(2), ...u32(1), 0, ...penalties, 0, 0], "version 2"],
      [[...u32(1), ...u32(2), 0, ...penalties, 0, 0], "2 vectors"],
      [[...u32(1), ...u32(1), 1, ...penalties, 0, 0, 0], "allowed set is empty"],
      [[...u32(1), ...u32(1), 0, ...penalties, 0x80, 0x00, 0], "shortest"],
    ]) {
      const [body, len] = withSection(new Uint8Array(bytes));
      const r = await post(e, body, { query: `?top_k=3&adjust=${len}` });
      assert.deepEqual([r.status, json(r).error], [400, "bad_adjust"], why);
      assert.match(json(r).detail, new RegExp(why));
    }
    // And a well-formed one, by hand: only token 7 allowed, so the top-3 holds token 7 alone
    // with a finite logit (the others of the slice are -inf).
    const [body, len] = withSection(new Uint8Array([...u32(1), ...u32(1), 1, ...penalties, 0, 0, 1, 7, 0]));
    const ok = await post(e, body, { query: `?top_k=3&adjust=${len}` });
    assert.equal(ok.status, 200);
    const entries = new DataView(ok.body.buffer, ok.body.byteOffset);
    assert.equal(entries.getUint32(12, true), 7, "the first entry is token 7");
    assert.ok(Number.isFinite(entries.getFloat32(16, true)));
    assert.equal(entries.getFloat32(20 + 4, true), -Infinity, "the second entry is masked");
    const r = await post(e, vector, { query: "?adjust=0" });
    assert.deepEqual([r.status, json(r).error], [400, "bad_adjust"]);
    const tooLong = await post(e, vector, { query: `?adjust=${vector.length + 4}` });
    assert.deepEqual([tooLong.status, json(tooLong).error], [400, "bad_adjust"]);
  });
});

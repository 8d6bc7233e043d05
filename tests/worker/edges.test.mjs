// The shard's contract at its edges, probed as an attacker or a careless client would, over raw
// sockets where fetch cannot send the request: every answer is the one docs/API.md gives (a 4xx
// with a JSON code and no Retry-After for whatever the client sent wrong, never a 5xx of the
// shard's), and after every probe the shard still answers the same bytes.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { startShards } from "../../worker/local.mjs";
import { makeModel, seed, hiddenBytes, localLogits, post, TOKEN } from "./helpers.mjs";

const HIDDEN = 256;
let model, shards, endpoint, baseline;

before(async () => {
  model = makeModel({ type: "q6_k", hidden: HIDDEN, vocab: 1000, shards: 2, seed: 27 });
  shards = await startShards({ shards: 2, authToken: TOKEN });
  await seed(await shards.bucket(), model);
  endpoint = shards.endpoints[0];
  baseline = await post(endpoint, hiddenBytes(HIDDEN, 1));
  assert.equal(baseline.status, 200);
  const s = model.manifest.shards[0];
  assert.deepEqual(baseline.body, localLogits(model, hiddenBytes(HIDDEN, 1)).subarray(4 * s.row_start, 4 * (s.row_start + s.row_count)));
});

after(() => shards?.dispose());

/** The shard still answers the baseline's bytes. */
async function stillRight(after) {
  const r = await post(endpoint, hiddenBytes(HIDDEN, 1));
  assert.equal(r.status, 200, `after ${after}`);
  assert.deepEqual(r.body, baseline.body, `after ${after}`);
}

/**
 * Sends `head` (the request line and headers, CRLF-separated, without the blank line) and then
 * `body` over a fresh connection, half-closing it unless `keepOpen`; resolves with the status,
 * the headers, the body text and how many body bytes the socket took before the answer came.
 */
function raw(head, body = new Uint8Array(0), { keepOpen = false } = {}) {
  const { hostname, port } = new URL(endpoint);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    let text = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer in 10 s to ${head.split("\r\n")[0]}`));
    }, 10_000);
    socket.on("connect", () => {
      socket.write(`${head}\r\nHost: shard\r\nConnection: close\r\n\r\n`);
      if (body.length) socket.write(body);
      if (!keepOpen) socket.end();
    });
    socket.on("data", (d) => {
      text = Buffer.concat([text, d]);
      // The answer is complete once its declared body is in.
      const split = text.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: *(\d+)/i.exec(text.subarray(0, split).toString("latin1"));
      if (split >= 0 && length && text.length >= split + 4 + Number(length[1])) socket.destroy();
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      const [headText, ...rest] = text.toString("latin1").split("\r\n\r\n");
      const [statusLine, ...lines] = headText.split("\r\n");
      const headers = Object.fromEntries(lines.map((l) => l.split(/: ?(.*)/s).slice(0, 2)).map(([k, v]) => [k.toLowerCase(), v]));
      resolve({ status: Number(statusLine.split(" ")[1]), headers, text: rest.join("\r\n\r\n") });
    });
  });
}

const AUTH = `Authorization: Bearer ${TOKEN}`;
const h = Buffer.from(hiddenBytes(HIDDEN, 1));
const post1 = (query = "") => `POST /cobordism-lm-head${query} HTTP/1.1`;
const chunked = (sizeLine, bytes) => Buffer.concat([Buffer.from(`${sizeLine}\r\n`), bytes, Buffer.from("\r\n0\r\n\r\n")]);

/** A shard's JSON error: status, code, and no Retry-After (nothing a client sent wrong is worth resending). */
function refused(r, status, code) {
  assert.equal(r.status, status, r.text);
  assert.equal(JSON.parse(r.text).error, code, r.text);
  assert.equal(r.headers["retry-after"], undefined, `${code}: no Retry-After`);
}

test("bodies the shard cannot read are 400 bad_framing, not a 503 to retry", async () => {
  const probes = {
    "a malformed chunk size": [`${post1()}\r\n${AUTH}\r\nTransfer-Encoding: chunked`, chunked("zz", h)],
    // Legal HTTP/1.1, but workerd's parser refuses chunk extensions (docs/API.md says so).
    "a chunk extension": [`${post1()}\r\n${AUTH}\r\nTransfer-Encoding: chunked`, chunked(`${h.length.toString(16)};ext=1`, h)],
    "a body cut short by FIN": [`${post1()}\r\n${AUTH}\r\nContent-Length: ${h.length}`, h.subarray(0, 100)],
    "Content-Length with Transfer-Encoding": [`${post1()}\r\n${AUTH}\r\nTransfer-Encoding: chunked\r\nContent-Length: ${h.length}`, chunked(h.length.toString(16), h)],
  };
  for (const [name, [head, body]] of Object.entries(probes)) {
    refused(await raw(head, body), 400, "bad_framing");
    await stillRight(name);
  }
  // The same body well chunked is served.
  const ok = await raw(`${post1()}\r\n${AUTH}\r\nTransfer-Encoding: chunked`, chunked(h.length.toString(16), h));
  assert.equal(ok.status, 200);
});

test("an absurd Content-Length is 413 before a byte of the body is sent", async () => {
  for (const length of ["18446744073709551616", "99999999999999999999999999", `${(2 << 20) + 1}`]) {
    // Headers only, the connection left open: the answer must not wait for the body.
    const r = await raw(`${post1()}\r\n${AUTH}\r\nContent-Length: ${length}`, undefined, { keepOpen: true });
    refused(r, 413, "payload_too_large");
    await stillRight(`Content-Length: ${length}`);
  }
});

test("a query parameter given twice is 400 bad_query, whatever its name", async () => {
  for (const query of ["?precision=int8&precision=bogus", "?precision=int8&precision=int8", "?top_k=3&top_k=3", "?x=1&x=2"]) {
    const r = await post(endpoint, h, { query });
    assert.deepEqual([r.status, r.headers.get("retry-after")], [400, null], query);
    assert.equal(JSON.parse(new TextDecoder().decode(r.body)).error, "bad_query", query);
    await stillRight(query);
  }
});

test("repeated Authorization headers: one credential passes in any order, two are refused", async () => {
  const auth = (...values) => values.map((v) => `Authorization: ${v}`).join("\r\n");
  const ask = (headers) => raw(`${post1()}\r\n${headers}\r\nContent-Length: ${h.length}`, h);
  for (const headers of [auth("", `Bearer ${TOKEN}`), auth(`Bearer ${TOKEN}`, "")]) {
    assert.equal((await ask(headers)).status, 200, JSON.stringify(headers));
  }
  for (const headers of [auth(`Bearer ${TOKEN}`, `Bearer ${TOKEN}`), auth(`Bearer ${TOKEN}`, "Bearer wrong"), auth("Bearer wrong", `Bearer ${TOKEN}`)]) {
    refused(await ask(headers), 401, "unauthorized");
    await stillRight(JSON.stringify(headers));
  }
});

test("numeric edges: temperatures below 0.01 are refused, overflowing products are 400 non_finite", async () => {
  for (const t of ["1e-38", "0.0099", "1.2e-38"]) {
    const r = await post(endpoint, h, { query: `?temperature=${t}&seed=1` });
    assert.deepEqual([r.status, JSON.parse(new TextDecoder().decode(r.body)).error], [400, "bad_temperature"], t);
  }
  // The smallest accepted temperature gives finite log-sum-exps.
  const low = await post(endpoint, h, { query: "?temperature=0.01&top_k=2" });
  assert.equal(low.status, 200);
  const lse = new DataView(low.body.buffer, low.body.byteOffset).getFloat32(8, true);
  assert.ok(Number.isFinite(lse), `${lse}`);
  // Every value f32::MAX: finite input, products past f32.
  const huge = new Float32Array(HIDDEN).fill(3.4028234663852886e38);
  for (const query of ["", "?top_k=3", "?precision=int8"]) {
    const r = await post(endpoint, new Uint8Array(huge.buffer), { query });
    const e = JSON.parse(new TextDecoder().decode(r.body));
    assert.deepEqual([r.status, e.error], [400, "non_finite"], query);
    assert.match(e.detail, /logit of token \d+ \(vector 0\)/, query);
  }
  await stillRight("the numeric edges");
});

test("malformed HTTP that the runtime rejects gets the runtime's answer before the shard runs", async () => {
  // Not the shard's JSON errors (docs/API.md): workerd answers these itself.
  for (const head of [`${post1()}\r\n${AUTH}\r\nContent-Length: abc`, `${post1()}\r\n${AUTH}\r\nContent-Length: 3\r\nContent-Length: 4`]) {
    const r = await raw(head, Buffer.alloc(4));
    assert.ok(r.status >= 400, `${r.status}`);
    assert.throws(() => JSON.parse(r.text), undefined, "not a shard error");
    await stillRight(head);
  }
});

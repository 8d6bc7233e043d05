// Shared by the worker tests: build models with the `cobordism` CLI, seed a local R2 bucket,
// call shards.
import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, readFileSync, writeFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startShards } from "../../worker/local.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const CLI = process.env.COBORDISM_BIN ?? join(root, "target", "release", "cobordism");

export function cli(...args) {
  return execFileSync(CLI, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** Runs the CLI with the test token without blocking the event loop (Miniflare's proxy lives in
 * it): its output. */
export async function runCli(...args) {
  const { stdout } = await promisify(execFile)(CLI, args, { env: { ...process.env, COBORDISM_TOKEN: TOKEN } });
  return stdout;
}

/** A command's result: from the last `from` to the next blank line or the end. */
export const resultOf = (out, from) => out.slice(out.lastIndexOf(from)).split("\n\n")[0].trimEnd();

/** `token T  logit Z  logprob L` of `cobordism sample`: the token, the logit as an f32, and the
 * logprob as printed. */
export function parseSample(out) {
  const [, token, logit, logprob] = /token (\d+) {2}logit (\S+) {2}logprob (\S+)/.exec(out);
  return { token: Number(token), logit: Math.fround(Number(logit)), logprob };
}

/** The CLI's output for `args` computed locally (`--local`) from `model`'s slices and the hidden
 * vector in `hiddenFile`. */
export async function runLocal(model, hiddenFile, ...args) {
  return runCli(...args, "--manifest", join(model.slices, "manifest.json"), "--hidden", hiddenFile, "--local");
}

const tempDirs = [];
// Each test file runs in its own process: its temporary directories (models of up to 380 MiB)
// go when it exits, passed or failed.
process.on("exit", () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

export function tempDir(name) {
  const dir = mkdtempSync(join(tmpdir(), `cobordism-${name}-`));
  tempDirs.push(dir);
  return dir;
}

/** Synthesizes a model and slices it (`extreme`: weights at the extremes, `synth --extreme`):
 * returns { dir, manifest }. */
export function makeModel({ type = "q6_k", hidden = 512, vocab = 4096, shards = 2, seed = 1, softcap, budgetMib, layout, extreme = false } = {}) {
  const dir = tempDir("model");
  const gguf = join(dir, "model.gguf");
  const args = ["synth", "--out", gguf, "--type", type, "--hidden", `${hidden}`, "--vocab", `${vocab}`, "--seed", `${seed}`];
  if (softcap) args.push("--softcap", `${softcap}`);
  if (extreme) args.push("--extreme");
  cli(...args);
  const budget = budgetMib ? ["--budget-mib", `${budgetMib}`] : [];
  const layoutArgs = layout ? ["--layout", layout] : [];
  cli("slice", "--gguf", gguf, "--shards", `${shards}`, "--out", join(dir, "slices"), ...budget, ...layoutArgs);
  const manifest = JSON.parse(readFileSync(join(dir, "slices", "manifest.json"), "utf8"));
  return { dir, slices: join(dir, "slices"), manifest };
}

/** Puts a model's slices, then its manifest, under `prefix` in a Miniflare R2 bucket. */
export async function seed(bucket, model, prefix = "model", { manifest = model.manifest } = {}) {
  for (const s of model.manifest.shards) {
    await put(bucket, `${prefix}/${s.key}`, new Uint8Array(readFileSync(join(model.slices, s.key))));
  }
  await put(bucket, `${prefix}/manifest.json`, JSON.stringify(manifest));
}

/** `bucket.put`, once more if Miniflare's proxy loses the upload ("fetch failed" inside its
 * worker thread: seen ~1 run in 3 for a 190 MiB object right after a shard's failed reservation). */
async function put(bucket, key, value) {
  try {
    await bucket.put(key, value);
  } catch (e) {
    if (!(e instanceof TypeError && e.message === "fetch failed")) throw e;
    await bucket.put(key, value);
  }
}

/** A seeded xorshift32 stream of numbers in [0, 1). */
function uniform(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
}

/** A seeded hidden state as little-endian f32 bytes (values in [-2, 2)). */
export function hiddenBytes(hidden, seed = 1, n = 1) {
  const next = uniform(seed);
  const x = Float32Array.from({ length: hidden * n }, () => next() * 4 - 2);
  return new Uint8Array(x.buffer);
}

/**
 * Seeded hidden vectors on the int8 mode's edges, as little-endian f32 bytes: in each block of
 * 256 values, ±amax (amax drawn in [0.25, 8.25)) and the rest at `(k + ½)·amax/127`, the rounding
 * edges of the 8-bit quantization (k in 0…126, sign drawn).
 */
export function edgeHiddenBytes(hidden, seed = 1, n = 1) {
  const x = new Float32Array(hidden * n);
  const next = uniform(seed);
  for (let b = 0; b < x.length; b += 256) {
    const amax = Math.fround(0.25 + next() * 8);
    for (let i = b; i < b + 256; i++) {
      const k = Math.floor(next() * 127) + 0.5;
      x[i] = (next() < 0.5 ? -1 : 1) * Math.fround((k * amax) / 127);
    }
    x[b + Math.floor(next() * 256)] = amax;
    x[b + Math.floor(next() * 256)] = -amax;
  }
  return new Uint8Array(x.buffer);
}

/** Full-vocabulary logits computed natively by kquant through `cobordism logits --local`. */
export function localLogits(model, hidden, { int8 = false } = {}) {
  const dir = tempDir("logits");
  writeFileSync(join(dir, "h.f32"), hidden);
  const mode = int8 ? ["--int8"] : [];
  cli("logits", "--manifest", join(model.slices, "manifest.json"), "--local", "--hidden", join(dir, "h.f32"), "--out", join(dir, "out.f32"), ...mode);
  return new Uint8Array(readFileSync(join(dir, "out.f32")));
}

/** The AUTH_TOKEN of the test shards (shards serve nobody without one). */
export const TOKEN = "test-token-0f9d2c";

/** `Authorization` for `token`, none for `null`. */
export function bearer(token = TOKEN) {
  return token === null ? {} : { Authorization: `Bearer ${token}` };
}

/** Whether `e` is a keep-alive connection the server closed before answering. Local workerd
 * closes idle keep-alive connections when its event loop was busy past kj's 5 s pipeline timeout
 * (docs/RELIABILITY.md, "the wrk read errors"); such a request never reached the Worker. */
function closedBeforeAnswer(e) {
  const code = e?.cause?.code;
  return code === "UND_ERR_SOCKET" || code === "ECONNRESET" || code === "EPIPE";
}

/** POSTs to a shard, with the test token unless `token` says otherwise (`null`: none). A request
 * whose kept-alive connection the server closed before any answer is sent once more. */
export async function post(endpoint, body, { query = "", headers = {}, token = TOKEN } = {}) {
  const send = () =>
    fetch(`${endpoint}/cobordism-lm-head${query}`, {
      method: "POST",
      body,
      headers: { "Content-Type": "application/octet-stream", ...bearer(token), ...headers },
    });
  const r = await send().catch((e) => (closedBeforeAnswer(e) ? send() : Promise.reject(e)));
  return { status: r.status, headers: r.headers, body: new Uint8Array(await r.arrayBuffer()) };
}

/** `POST /cobordism-lm-head/warm`: { status, body (JSON) }. */
export async function warm(endpoint, { token = TOKEN } = {}) {
  const r = await fetch(`${endpoint}/cobordism-lm-head/warm`, { method: "POST", headers: bearer(token) });
  return { status: r.status, headers: r.headers, body: await r.json() };
}

export async function health(endpoint, { token = TOKEN, headers = {} } = {}) {
  const get = () => fetch(`${endpoint}/healthz`, { headers: { ...bearer(token), ...headers } });
  const r = await get().catch((e) => (closedBeforeAnswer(e) ? get() : Promise.reject(e)));
  return r.json();
}

export function json(res) {
  return JSON.parse(new TextDecoder().decode(res.body));
}

export function listSlices(model) {
  return readdirSync(model.slices).filter((f) => f.endsWith(".bin"));
}

/**
 * An HTTP proxy on 127.0.0.1 in front of a shard that misbehaves on purpose: each request waits
 * `delayMs` first, and the first `refuse` requests get `503 slice_loading` with `Retry-After: 0`.
 * Returns { url, refused(), close() }.
 */
export async function faultyProxy(target, { delayMs = 0, refuse = 0 } = {}) {
  const { createServer } = await import("node:http");
  let refused = 0;
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    await new Promise((r) => setTimeout(r, delayMs));
    if (refused < refuse) {
      refused++;
      res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "0" });
      res.end(JSON.stringify({ error: "slice_loading", detail: "the slice is loading" }));
      return;
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers["content-length"];
    try {
      const r = await fetch(`${target}${req.url}`, { method: req.method, headers, body: req.method === "POST" ? Buffer.concat(chunks) : undefined });
      const body = Buffer.from(await r.arrayBuffer());
      res.writeHead(r.status, Object.fromEntries([...r.headers].filter(([k]) => !["content-length", "transfer-encoding", "connection", "keep-alive"].includes(k))));
      res.end(body);
    } catch {
      res.destroy(); // the shard went away (a test ended while a caller that gave up was still proxied)
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    refused: () => refused,
    close: () => new Promise((r) => server.close(r)),
  };
}

/**
 * Bundles the Worker whose wrangler config is `exampleDir/wrangler.toml` as `wrangler deploy
 * --dry-run` would for a deploy, from a copy of the config in `workDir` (wrangler's scratch files
 * land there): returns the bundled entry, for Miniflare.
 */
export function bundleForDeploy(exampleDir, workDir) {
  const config = readFileSync(join(exampleDir, "wrangler.toml"), "utf8").replace(/^main = "(.*)"$/m, (_, main) => `main = ${JSON.stringify(join(exampleDir, main))}`);
  writeFileSync(join(workDir, "wrangler.toml"), config);
  execFileSync("npx", ["wrangler", "deploy", "--dry-run", "-c", join(workDir, "wrangler.toml"), "--outdir", join(workDir, "out")], {
    cwd: root,
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return join(workDir, "out", "worker.js");
}

/**
 * `shards` local shards (the test token; `residency` "isolate" or "object") serving a fresh
 * 256-wide Q6_K model of `vocab` tokens and a hidden vector file: `check(both, local)`, where
 * `both(...args)` runs a CLI command against the shards and with `--local`, resolving to the two
 * outputs.
 */
export async function againstLocal({ shards, vocab, modelSeed, hiddenSeed, residency = "isolate" }, check) {
  const m = makeModel({ type: "q6_k", hidden: 256, vocab, shards, seed: modelSeed });
  const local = await startShards({ shards, authToken: TOKEN, residency });
  try {
    await seed(await local.bucket(), m);
    const h = join(tempDir("hidden"), "h.f32");
    writeFileSync(h, hiddenBytes(256, hiddenSeed));
    const remote = local.endpoints.flatMap((e) => ["--endpoint", e]);
    const manifest = join(m.slices, "manifest.json");
    const both = async (...args) => [await runCli(...args, "--manifest", manifest, "--hidden", h, ...remote), await runLocal(m, h, ...args)];
    await check(both, local, { model: m, hiddenFile: h });
  } finally {
    await local.dispose();
  }
}

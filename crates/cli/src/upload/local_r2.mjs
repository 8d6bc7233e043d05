// `cobordism upload --local`'s store: one Miniflare instance holding the R2 bucket argv[1] in
// the local state argv[2] (a directory as wrangler's --persist-to: the objects go under v3/r2,
// where `wrangler dev` and worker/local.mjs read them). The CLI embeds this file, runs it with
// `node --input-type=module --eval` from the directory it was started in (so that `miniflare`
// resolves from its node_modules, installed with wrangler), and sends one JSON request per line
// on stdin; each gets one JSON line on stdout, in order:
//   {"op":"get","key":K,"to":FILE}          -> {"found":true|false}  (the bytes go to FILE)
//   {"op":"put","key":K,"file":F,"type":T}  -> {}                     (streamed from F)
//   {"op":"delete","key":K}                 -> {}
// or {"error":MESSAGE}. {"ready":true} comes first, once the bucket can be used. The instance
// is disposed of when stdin closes. One process for every object of an upload: wrangler's own
// `r2 object put --local` starts a Miniflare like this one for each object (~2 s apiece), and
// several wrangler processes writing one state at once fail (its SQLite database is busy).
import { createReadStream, createWriteStream, statSync } from "node:fs";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { join } from "node:path";

/** Ends the process with one line on stderr (the CLI shows it). */
function die(message) {
  process.stderr.write(`${message}\n`);
  process.exit(1);
}
const { Miniflare } = await import("miniflare").catch((e) =>
  die(e?.code === "ERR_MODULE_NOT_FOUND" ? `miniflare is not installed in ${process.cwd()}/node_modules` : `miniflare: ${e?.message ?? e}`),
);

const [bucket, state] = process.argv.slice(1);
// The Worker inside does the R2 calls; the body of a put streams through it, never whole in
// memory on this side.
const script = `export default {
  async fetch(request, env) {
    const key = decodeURIComponent(new URL(request.url).pathname.slice(1));
    if (request.method === "GET") {
      const object = await env.BUCKET.get(key);
      return object ? new Response(object.body) : new Response(null, { status: 404 });
    }
    if (request.method === "PUT") {
      const type = request.headers.get("x-content-type") ?? undefined;
      await env.BUCKET.put(key, request.body, { httpMetadata: { contentType: type } });
      return new Response(null, { status: 204 });
    }
    if (request.method === "DELETE") {
      await env.BUCKET.delete(key);
      return new Response(null, { status: 204 });
    }
    return new Response(null, { status: 405 });
  },
};`;
const mf = new Miniflare({
  modules: true,
  script,
  r2Buckets: { BUCKET: bucket },
  r2Persist: join(state, "v3", "r2"),
});
await mf.ready.catch((e) => die(`Miniflare did not start: ${e?.message ?? e}`));

const url = (key) => `http://localhost/${encodeURIComponent(key)}`;
async function expectOk(response, what) {
  if (!response.ok) throw new Error(`${what}: ${response.status} ${await response.text()}`);
}

async function handle(request) {
  const { op, key } = request;
  if (op === "get") {
    const response = await mf.dispatchFetch(url(key));
    if (response.status === 404) return { found: false };
    await expectOk(response, `get ${key}`);
    await pipeline(Readable.fromWeb(response.body), createWriteStream(request.to));
    return { found: true };
  }
  if (op === "put") {
    const response = await mf.dispatchFetch(url(key), {
      method: "PUT",
      body: Readable.toWeb(createReadStream(request.file)),
      duplex: "half",
      headers: { "content-length": String(statSync(request.file).size), "x-content-type": request.type },
    });
    await expectOk(response, `put ${key}`);
    return {};
  }
  if (op === "delete") {
    await expectOk(await mf.dispatchFetch(url(key), { method: "DELETE" }), `delete ${key}`);
    return {};
  }
  throw new Error(`unknown request ${JSON.stringify(op)}`);
}

process.stdout.write(JSON.stringify({ ready: true }) + "\n");
for await (const line of createInterface({ input: process.stdin })) {
  let answer;
  try {
    answer = await handle(JSON.parse(line));
  } catch (e) {
    answer = { error: String(e?.message ?? e) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await mf.dispose();

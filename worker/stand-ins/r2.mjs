// The stand-in R2 bucket behind a local shard's wrapped R2 binding (worker/local.mjs `r2Faults`,
// `r2Shape`): the real local bucket (`env.INNER`) that fails on demand and/or paces its answers
// like production R2. Miniflare loads it as a wrapped binding: the default export builds it.
//   env.ASK_FAULTS  true: before each `head`/`get` it asks Node (`env.FAULTS`, POST
//                   `http://faults/<op>` with the details) what to do: `{fail: true}` throws,
//                   `{delayMs}` answers later, `{truncateAfter: n}` ends the body after n bytes
//   env.SHAPE       `{firstByteMs?, bytesPerSec?}`: every `get` answers after `firstByteMs`, and
//                   each body streams at most `bytesPerSec`
// A shaped or truncated body comes in pieces of 64 KiB (local R2 hands out 4 KiB chunks, ~14 µs
// of JavaScript each: a cost of the emulation, not of R2), each released when the stream's byte
// count allows it.

const PIECE = 65536;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** The gets so far (a get's `index`). */
let gets = 0;

/** `body` in pieces of PIECE bytes, ended after `truncateAfter` bytes, at most `bytesPerSec`. */
function paced(body, { truncateAfter }, bytesPerSec) {
  const reader = body.getReader();
  const start = Date.now();
  let sent = 0;
  let rest = new Uint8Array(0);
  let ended = false;
  const limit = truncateAfter ?? Infinity;
  return new ReadableStream({
    async pull(controller) {
      // Local R2 hands out 4 KiB chunks: gather them into pieces of 64 KiB.
      const parts = [rest];
      let have = rest.length;
      while (have < PIECE && !ended) {
        const { value, done } = await reader.read();
        if (done) ended = true;
        else (parts.push(value), (have += value.length));
      }
      if (have === 0) return controller.close();
      rest = new Uint8Array(have);
      parts.reduce((at, p) => (rest.set(p, at), at + p.length), 0);
      const piece = rest.subarray(0, Math.min(PIECE, limit - sent));
      rest = rest.subarray(piece.length);
      sent += piece.length;
      if (bytesPerSec) {
        const due = start + (1000 * sent) / bytesPerSec;
        if (due > Date.now()) await sleep(due - Date.now());
      }
      if (piece.length > 0) controller.enqueue(piece);
      if (sent >= limit) {
        await reader.cancel();
        controller.close();
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

/** workers-rs checks the class name of the binding. */
class R2Bucket {
  constructor(env) {
    this.env = env;
    this.shape = env.SHAPE;
  }

  /** What Node says to do with this `op` (`{}` when it is not asked). */
  async ask(op, detail) {
    if (!this.env.ASK_FAULTS) return {};
    const r = await this.env.FAULTS.fetch(`http://faults/${op}`, { method: "POST", body: JSON.stringify(detail) });
    const said = await r.json();
    if (said.fail) throw new Error(`injected R2 failure: ${op}`);
    return said;
  }

  async head(key, ...rest) {
    await this.ask("head", { key });
    return this.env.INNER.head(key, ...rest);
  }

  async get(key, options) {
    const range = options?.range ?? {};
    const detail = { key, offset: range.offset ?? 0, length: range.length ?? null, index: gets++ };
    const said = await this.ask("get", detail);
    const delay = (said.delayMs ?? 0) + (this.shape.firstByteMs ?? 0);
    if (delay > 0) await sleep(delay);
    const object = await this.env.INNER.get(key, options);
    if (!object?.body || (!this.shape.bytesPerSec && said.truncateAfter === undefined)) return object;
    return {
      key: object.key,
      version: object.version,
      size: object.size,
      etag: object.etag,
      httpEtag: object.httpEtag,
      uploaded: object.uploaded,
      range: object.range,
      httpMetadata: object.httpMetadata,
      customMetadata: object.customMetadata,
      checksums: object.checksums,
      bodyUsed: false,
      body: paced(object.body, said, this.shape.bytesPerSec),
    };
  }

  put(...args) {
    return this.env.INNER.put(...args);
  }

  delete(...args) {
    return this.env.INNER.delete(...args);
  }

  list(...args) {
    return this.env.INNER.list(...args);
  }
}

export default function (env) {
  return new R2Bucket(env);
}

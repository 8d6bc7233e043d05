// Coalescing: the calls of one kind (same reply form, same vector length) made in one turn of
// the event loop share requests of up to MAX_BATCH vectors; each call gets its own part of every
// answer, sampled vectors keep their own noise (`seeds=SEED:VECTOR,…`) and each call's vectors
// their own adjustments (its record, in the section after the vectors), so the results are
// those of the calls alone. Every call settles: whatever fails after its calls are taken — the
// request, an answer that does not split, a throw while sending — rejects each of them.
import { concat, split } from "./answers.mjs";
import { protocol } from "./protocol.mjs";
import { ShardError } from "./transport.mjs";

/** Waiting calls packed in order into batches of at most MAX_BATCH vectors: `{ calls, n }`. */
function batches(calls) {
  const out = [];
  for (const call of calls) {
    const last = out.at(-1);
    if (last && last.n + call.b.n <= protocol().maxBatch) {
      last.calls.push(call);
      last.n += call.b.n;
    } else out.push({ calls: [call], n: call.b.n });
  }
  return out;
}

export class Batcher {
  /** Calls waiting for the next turn of the event loop, by kind. */
  #waiting = new Map();

  /**
   * @param {(form: object, b: {bytes: Uint8Array, n: number}, seeds: bigint[], vectors: number[]) => Promise<object[]>} send
   *   one request to every shard: the answers (`seeds`, `vectors`: the noise, see queryOf)
   * @param {boolean} coalesce merge the calls of one turn, else send each at once
   */
  constructor(send, coalesce) {
    this.send = send;
    this.coalesce = coalesce;
  }

  /** Every shard's answer for the vectors of `b` in reply form `form` (`seed`: plain sampling's). */
  ask(form, b, seed) {
    const sampling = seed !== undefined;
    if (!this.coalesce) return this.send(form, b, sampling ? [seed] : []);
    const key = `${sampling ? "seed" : ""}|${b.bytes.length / b.n}|${JSON.stringify(form)}`;
    return new Promise((resolve, reject) => {
      let calls = this.#waiting.get(key);
      if (!calls) {
        calls = [];
        this.#waiting.set(key, calls);
        setTimeout(() => {
          this.#waiting.delete(key);
          for (const batch of batches(calls)) this.#dispatch(form, sampling, batch);
        }, 0);
      }
      calls.push({ b, seed, resolve, reject });
    });
  }

  /** Sends one batch and settles each of its calls with its answers or the failure. */
  #dispatch(form, sampling, { calls, n }) {
    this.#answers(form, sampling, calls, n).then(
      (each) => calls.forEach((c, j) => c.resolve(each[j])),
      (e) => {
        // A shard refused the merged request (e.g. one caller's products overflow): each
        // call alone, so that it gets exactly its own answer or error.
        if (calls.length > 1 && e instanceof ShardError && e.status >= 400 && e.status < 500) {
          for (const c of calls) this.#dispatch(form, sampling, { calls: [c], n: c.b.n });
        } else for (const c of calls) c.reject(e);
      },
    );
  }

  /**
   * Each call's answers: one call alone, several as one request cut into theirs. Async, so that
   * anything that throws, while sending or cutting, rejects the promise the calls wait on.
   */
  async #answers(form, sampling, calls, n) {
    if (calls.length === 1) {
      const [c] = calls;
      return [await this.send(form, c.b, sampling ? [c.seed] : [])];
    }
    const seeds = sampling ? calls.flatMap((c) => Array(c.b.n).fill(c.seed)) : [];
    const vectors = sampling ? calls.flatMap((c) => [...Array(c.b.n).keys()]) : [];
    const merged = { bytes: concat(calls.map((c) => c.b.bytes)), n, parts: calls.map((c) => c.b) };
    const answers = await this.send(form, merged, seeds, vectors);
    const logits = !sampling && !form.topK && !form.tokens;
    return split(answers, calls.map((c) => c.b.n), logits);
  }
}

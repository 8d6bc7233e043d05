// Local shards: N copies of the shard Worker in workerd (through Miniflare's Node API), each on
// its own loopback port, sharing one local R2 bucket (the state `wrangler r2 object put --local
// --persist-to DIR` writes). Used by the demo, the CLI's tests and the worker tests.
import { Miniflare } from "miniflare";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync } from "node:fs";

const here = dirname(fileURLToPath(import.meta.url));
export const SCRIPT = join(here, "build", "index.js");
/** The test shard (`scripts/build-worker.sh --test`): fault routes, wasm memory capped at 112 MiB. */
export const TEST_SCRIPT = join(here, "..", "target", "worker-test", "build", "index.js");
export const BUCKET = "cobordism-lm-head";
export const BINDING = "LM_HEAD";

/**
 * Starts `shards` local shard Workers. Like deployed ones they are closed by default: pass
 * `authToken` (the AUTH_TOKEN secret) or `anonymous: true` (ALLOW_ANONYMOUS = "1").
 * @param {object} o
 * @param {number} [o.shards=8] number of shards (SHARD_COUNT)
 * @param {string} [o.state] persistence root (as wrangler's --persist-to); in memory if absent
 * @param {string} [o.prefix="model"] MODEL_PREFIX
 * @param {Record<string,string>} [o.vars] extra variables for every shard (MEMORY_BUDGET_MIB, …)
 * @param {string} [o.authToken] sets the AUTH_TOKEN secret
 * @param {boolean} [o.anonymous] sets ALLOW_ANONYMOUS = "1"
 * @param {boolean} [o.testBuild] runs the test shard (TEST_SCRIPT) instead of the production one
 * @param {{head?: boolean, get?: boolean}} [o.r2Faults] wraps the shards' R2 binding so that its
 *   `head`/`get` throw while the flag of that name is true (the test flips them at will)
 * @returns {Promise<{endpoints: string[], bucket: () => Promise<any>, dispose: () => Promise<void>, mf: Miniflare}>}
 */
export async function startShards({ shards = 8, state, prefix = "model", vars = {}, authToken, anonymous = false, testBuild = false, r2Faults } = {}) {
  const script = testBuild ? TEST_SCRIPT : SCRIPT;
  if (!existsSync(script)) {
    throw new Error(`${script} is missing: run scripts/build-worker.sh${testBuild ? " --test" : ""} first`);
  }
  const workers = Array.from({ length: shards }, (_, i) => ({
    name: `s${i}`,
    modules: true,
    scriptPath: script,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: "2026-04-01",
    bindings: {
      SHARD_INDEX: String(i),
      SHARD_COUNT: String(shards),
      MODEL_PREFIX: prefix,
      ...vars,
      ...(authToken ? { AUTH_TOKEN: authToken } : {}),
      ...(anonymous ? { ALLOW_ANONYMOUS: "1" } : {}),
    },
    ...(r2Faults ? { wrappedBindings: { [BINDING]: FAULTY_R2 } } : { r2Buckets: { [BINDING]: BUCKET } }),
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  }));
  if (r2Faults) workers.push(faultyR2(r2Faults));
  const mf = new Miniflare({
    workers,
    r2Persist: state ? join(state, "v3", "r2") : false,
    log: undefined,
  });
  await mf.ready;
  const endpoints = [];
  for (let i = 0; i < shards; i++) {
    endpoints.push((await mf.unsafeGetDirectURL(`s${i}`)).toString().replace(/\/$/, ""));
  }
  return {
    mf,
    endpoints,
    bucket: () => (r2Faults ? mf.getR2Bucket("INNER", FAULTY_R2) : mf.getR2Bucket(BINDING, "s0")),
    dispose: () => mf.dispose(),
  };
}

const FAULTY_R2 = "faulty-r2";

/**
 * The worker behind a wrapped R2 binding that fails on demand: an `R2Bucket` (workers-rs checks
 * the class name) whose `head`/`get` ask Node whether to throw, then use the real bucket.
 */
function faultyR2(faults) {
  return {
    name: FAULTY_R2,
    modules: true,
    script: `
      class R2Bucket {
        constructor(env) { this.env = env; }
        async fail(op) {
          const r = await this.env.FAULTS.fetch("http://faults/" + op);
          if (r.status === 503) throw new Error("injected R2 failure: " + op);
        }
        async head(...args) { await this.fail("head"); return this.env.INNER.head(...args); }
        async get(...args) { await this.fail("get"); return this.env.INNER.get(...args); }
        put(...args) { return this.env.INNER.put(...args); }
        delete(...args) { return this.env.INNER.delete(...args); }
        list(...args) { return this.env.INNER.list(...args); }
      }
      export default function (env) { return new R2Bucket(env); }`,
    r2Buckets: { INNER: BUCKET },
    serviceBindings: {
      FAULTS: async (request) => {
        const op = new URL(request.url).pathname.slice(1);
        return new Response(null, { status: faults[op] ? 503 : 204 });
      },
    },
  };
}

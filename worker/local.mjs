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
 * @returns {Promise<{endpoints: string[], bucket: () => Promise<any>, dispose: () => Promise<void>, mf: Miniflare}>}
 */
export async function startShards({ shards = 8, state, prefix = "model", vars = {}, authToken, anonymous = false, testBuild = false } = {}) {
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
    r2Buckets: { [BINDING]: BUCKET },
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  }));
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
    bucket: () => mf.getR2Bucket(BINDING, "s0"),
    dispose: () => mf.dispose(),
  };
}

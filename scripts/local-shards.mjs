#!/usr/bin/env node
// Runs N local shard Workers until interrupted; prints {"endpoints": [...]} on one line when ready.
// `scripts/local-shards.mjs --help` says how. Like deployed shards they serve nobody without
// --token (or COBORDISM_TOKEN) or --allow-anonymous.
import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startShards } from "../worker/local.mjs";

const CLI = process.env.COBORDISM_BIN ?? join(dirname(fileURLToPath(import.meta.url)), "..", "target", "release", "cobordism");

/** Exits 2 naming the variable when the shards would refuse `vars`: the shard's own rule, read
 * through `cobordism settings` (cobordism_shard::Settings::from_vars), not written again here. */
function checkSettings(vars) {
  if (!existsSync(CLI)) {
    console.error(`${CLI} is missing: cargo build --release -p cobordism (or set COBORDISM_BIN)`);
    process.exit(2);
  }
  const args = Object.entries(vars).flatMap(([k, v]) => ["--var", `${k}=${v}`]);
  const checked = spawnSync(CLI, ["settings", ...args], { encoding: "utf8" });
  if (checked.status !== 0) {
    console.error(`${checked.stderr.trim().replace(/^error: /, "")}\n\n${USAGE}`);
    process.exit(2);
  }
}

const USAGE = `usage: scripts/local-shards.mjs [--shards 8] [--state DIR] [--prefix P] [--var K=V]…
                               [--residency isolate|object] [--replicas R] [--colocate-replicas]
                               [--lifecycle workerd|cloudflare] [--time-scale F]
                               [--endpoints-file F]
                               (--token T | --allow-anonymous)

Runs N local shard Workers (workerd through Miniflare, after scripts/build-worker.sh) on loopback
ports until interrupted, and prints {"endpoints": [...]} on one line when they are ready.
  --shards N          how many (SHARD_COUNT), 1 to 64; default 8
  --state DIR         the local R2 state (as \`cobordism upload --local --persist-to DIR\`)
  --prefix P          MODEL_PREFIX; default model
  --var K=V           another variable for every shard (repeatable), e.g. MEMORY_BUDGET_MIB=100
  --residency MODE    isolate (default): the slice in whichever isolate serves the request;
                      object: in the shard's Durable Object (RESIDENCY)
  --replicas R        Durable Objects per shard with --residency object (REPLICAS); default 1;
                      each in an isolate of its own (each loads its slice)
  --colocate-replicas a shard's replicas in one isolate instead (they share one slice), the
                      other way Cloudflare may place them
  --lifecycle L       the Durable Objects' lifecycle, with --residency object: workerd (default),
                      local workerd's: an object stays in memory until the shards stop;
                      cloudflare, Cloudflare's emulated (worker/lifecycle/): an object idle for
                      10 s with nothing pending (timer, fetch, request, waitUntil) is hibernated,
                      one idle with something pending is evicted after 70–140 s without a request
                      or alarm; either way its slice is discarded and its next request reloads.
                      SIGUSR2 rolls out a new version: requests in flight get 30 s, then every
                      object restarts. What happens is printed to standard error, one JSON line
                      each ({"lifecycle": event})
  --time-scale F      with --lifecycle cloudflare, multiplies those times (0.05: hibernation
                      after 0.5 s); default 1
  --endpoints-file F  also write the endpoints to F, one a line in shard order (for
                      cobordism … --endpoints-from F)
  --token T           the AUTH_TOKEN secret (default: $COBORDISM_TOKEN)
  --allow-anonymous   serve callers without a token (ALLOW_ANONYMOUS = "1")
It stops on Ctrl-C, SIGTERM, or when its standard input closes (its parent went away): started
in the background from a script, keep its standard input open — \`coproc\`, or
\`sleep infinity | scripts/local-shards.mjs … &\` — or it exits right after printing.`;

let values;
try {
  ({ values } = parseArgs({
    options: {
      shards: { type: "string", default: "8" },
      state: { type: "string" },
      prefix: { type: "string", default: "model" },
      var: { type: "string", multiple: true, default: [] },
      token: { type: "string", default: process.env.COBORDISM_TOKEN },
      "allow-anonymous": { type: "boolean", default: false },
      residency: { type: "string", default: "isolate" },
      replicas: { type: "string", default: "1" },
      "colocate-replicas": { type: "boolean", default: false },
      lifecycle: { type: "string", default: "workerd" },
      "time-scale": { type: "string", default: "1" },
      "endpoints-file": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  }));
} catch (e) {
  console.error(`${e.message}\n\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const vars = Object.fromEntries(
  values.var.map((kv) => {
    const i = kv.indexOf("=");
    if (i < 1) {
      console.error(`--var ${kv}: expected KEY=VALUE\n\n${USAGE}`);
      process.exit(2);
    }
    return [kv.slice(0, i), kv.slice(i + 1)];
  }),
);
const shards = Number(values.shards);
if (!Number.isInteger(shards) || shards < 1 || shards > 64) {
  console.error("--shards must be an integer from 1 to 64");
  process.exit(2);
}
if (!["isolate", "object"].includes(values.residency)) {
  console.error(`--residency ${values.residency}: expected isolate or object\n\n${USAGE}`);
  process.exit(2);
}
if (!["workerd", "cloudflare"].includes(values.lifecycle) || (values.lifecycle === "cloudflare" && values.residency !== "object")) {
  console.error(`--lifecycle ${values.lifecycle}: expected workerd, or cloudflare with --residency object\n\n${USAGE}`);
  process.exit(2);
}
const timeScale = Number(values["time-scale"]);
if (!(timeScale > 0)) {
  console.error("--time-scale must be a number > 0");
  process.exit(2);
}
const replicas = Number(values.replicas);
checkSettings({
  SHARD_INDEX: `${shards - 1}`,
  SHARD_COUNT: `${shards}`,
  MODEL_PREFIX: values.prefix,
  RESIDENCY: values.residency,
  REPLICAS: values.replicas,
  ...vars,
});
const local = await startShards({
  residency: values.residency,
  replicas,
  replicaIsolates: values["colocate-replicas"] ? "shared" : "own",
  lifecycle: values.lifecycle,
  timeScale,
  onLifecycle: (event) => void process.stderr.write(`${JSON.stringify({ lifecycle: event })}\n`),
  shards,
  state: values.state,
  prefix: values.prefix,
  vars,
  authToken: values.token,
  anonymous: values["allow-anonymous"],
});
if (values["endpoints-file"]) writeFileSync(values["endpoints-file"], local.endpoints.join("\n") + "\n");
console.log(JSON.stringify({ endpoints: local.endpoints }));
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await local.dispose();
  process.exit(0);
};
if (values.lifecycle === "cloudflare") newVersionOnSignal(local);
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
process.stdin.on("end", stop); // the parent went away
process.stdin.resume();

/** Rolls out a new version on SIGUSR2. */
function newVersionOnSignal(local) {
  process.on("SIGUSR2", () => {
    local.newVersion().catch((e) => process.stderr.write(`new version: ${e.message}\n`));
  });
}

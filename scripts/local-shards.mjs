#!/usr/bin/env node
// Runs N local shard Workers until interrupted; prints {"endpoints": [...]} on one line when ready.
// usage: scripts/local-shards.mjs [--shards 8] [--state DIR] [--prefix P] [--var K=V]…
//        (--token T | --allow-anonymous)
// Like deployed shards they serve nobody without one of the last two (or COBORDISM_TOKEN).
import { parseArgs } from "node:util";
import { startShards } from "../worker/local.mjs";

const { values } = parseArgs({
  options: {
    shards: { type: "string", default: "8" },
    state: { type: "string" },
    prefix: { type: "string", default: "model" },
    var: { type: "string", multiple: true, default: [] },
    token: { type: "string", default: process.env.COBORDISM_TOKEN },
    "allow-anonymous": { type: "boolean", default: false },
  },
});
const vars = Object.fromEntries(
  values.var.map((kv) => {
    const i = kv.indexOf("=");
    if (i < 1) throw new Error(`--var ${kv}: expected KEY=VALUE`);
    return [kv.slice(0, i), kv.slice(i + 1)];
  }),
);
const shards = Number(values.shards);
if (!Number.isInteger(shards) || shards < 1 || shards > 64) {
  console.error("--shards must be an integer from 1 to 64");
  process.exit(2);
}
const local = await startShards({
  shards,
  state: values.state,
  prefix: values.prefix,
  vars,
  authToken: values.token,
  anonymous: values["allow-anonymous"],
});
console.log(JSON.stringify({ endpoints: local.endpoints }));
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await local.dispose();
  process.exit(0);
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
process.stdin.on("end", stop); // the parent went away
process.stdin.resume();

#!/usr/bin/env node
// A stand-in for wrangler and the Cloudflare account behind it, for `cobordism deploy`'s tests:
// it keeps the account (Workers with their configs' variables, bindings and secrets, the
// versions each got, the R2 buckets) in a JSON file, and writes wrangler's machine-readable report
// (WRANGLER_OUTPUT_FILE_PATH) as the real wrangler does. It reads the generated configs with its
// own small TOML reader (the CLI's TOML library is not used to check the CLI).
//
// Environment:
//   STAND_IN_ACCOUNT  the account's JSON file (made on first use)
//   STAND_IN_URLS     optional JSON array: the URL shard i's front reports (else workers.dev)
//   STAND_IN_FAIL     optional "verb:worker": that call fails as an expired login does
//   STAND_IN_R2       optional JSON {wrangler, state, lock, bucket, as}: `r2 object` commands run
//                     on the real wrangler against a local state, bucket `bucket` read as `as`
import { readFileSync, writeFileSync, appendFileSync, existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { readToml } from "./toml-subset.mjs";

const argv = process.argv.slice(2);
const accountFile = process.env.STAND_IN_ACCOUNT;
const account = existsSync(accountFile)
  ? JSON.parse(readFileSync(accountFile, "utf8"))
  : { workers: {}, buckets: [], calls: [], deleted: [] };
const flag = (name) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : undefined);
const stdin = argv[0] === "secret" && argv[1] === "bulk" ? readFileSync(0, "utf8") : null;
account.calls.push({ argv, stdin: stdin !== null });

/** Appends a line to wrangler's report. */
function report(entry) {
  const out = process.env.WRANGLER_OUTPUT_FILE_PATH;
  if (out) appendFileSync(out, JSON.stringify({ version: 1, ...entry }) + "\n");
}

function save() {
  writeFileSync(accountFile, JSON.stringify(account, null, 1));
}

/** Fails as the Cloudflare API does: `code` 10007 for a Worker that does not exist. */
function fail(code, message) {
  report({ type: "command-failed", code, message });
  save();
  console.error(`✘ [ERROR] A request to the Cloudflare API failed. ${message} [code: ${code}]`);
  process.exit(1);
}

const [verb, sub] = argv;
const worker = verb === "delete" ? argv[1] : flag("--name");
if (process.env.STAND_IN_FAIL === `${verb}:${worker}`) fail(10000, "Authentication error");

if (verb === "--version") {
  console.log("4.86.0 (stand-in)");
} else if (verb === "r2" && sub === "bucket") {
  const bucket = argv[3];
  if (argv[2] === "info" && !account.buckets.includes(bucket)) fail(10006, "The specified bucket does not exist.");
  if (argv[2] === "create") account.buckets.push(bucket);
} else if (verb === "r2" && sub === "object") {
  const r2 = JSON.parse(process.env.STAND_IN_R2);
  const args = argv
    .flatMap((a) => (a === "--remote" ? ["--local", "--persist-to", r2.state] : [a]))
    .map((a) => (a.startsWith(`${r2.bucket}/`) ? `${r2.as}/${a.slice(r2.bucket.length + 1)}` : a));
  // One local write at a time (the state is one SQLite file the running shards also hold), and
  // again when the file was busy.
  let status = 1;
  for (let attempt = 0; attempt < 4 && status !== 0; attempt++) {
    status = spawnSync("flock", [r2.lock, r2.wrangler, ...args], { stdio: "inherit" }).status;
  }
  save();
  process.exit(status);
} else if (verb === "deploy") {
  const config = readToml(readFileSync(flag("-c"), "utf8"));
  const secrets = flag("--secrets-file") ? JSON.parse(readFileSync(flag("--secrets-file"), "utf8")) : {};
  const old = account.workers[worker];
  account.workers[worker] = {
    vars: config.vars,
    bucket: config.r2_buckets?.[0]?.bucket_name,
    objects: config.durable_objects?.bindings ?? [],
    migrations: config.migrations ?? [],
    metrics: config.analytics_engine_datasets?.[0]?.dataset ?? null,
    workersDev: config.workers_dev !== false,
    main: config.main,
    secrets: { ...old?.secrets, ...secrets },
    versions: (old?.versions ?? 0) + 1,
  };
  const urls = process.env.STAND_IN_URLS ? JSON.parse(process.env.STAND_IN_URLS) : null;
  const shard = Number(/-s(\d+)$/.exec(worker)?.[1]);
  const url = urls ? urls[shard] : `https://${worker}.stand-in.workers.dev`;
  report({ type: "deploy", worker_name: worker, targets: config.workers_dev === false ? [] : [url] });
} else if (verb === "secret") {
  const w = account.workers[worker] ?? fail(10007, "This Worker does not exist on your account.");
  if (sub === "bulk") Object.assign(w.secrets, JSON.parse(stdin));
  else if (sub === "delete") delete w.secrets[argv[2]];
  else throw new Error(`stand-in: secret ${sub}`);
  w.versions += 1;
} else if (verb === "delete") {
  if (!account.workers[worker]) fail(10007, "This Worker does not exist on your account.");
  delete account.workers[worker];
  account.deleted.push(worker);
} else {
  throw new Error(`stand-in: no ${argv.join(" ")}`);
}
save();

// The benchmarks' model: an lm-head of a real model's shape, synthesized once by the `cobordism`
// CLI, sliced for eight shards and kept under target/serving/ (shared by benches/serving and
// benches/cold), with a local R2 state to seed it into.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startShards } from "../worker/local.mjs";
import { cli, TOKEN } from "../tests/worker/helpers.mjs";

export const WORK = join(import.meta.dirname, "..", "target", "serving");

/** `{ slices, manifest }` of the `shape` lm-head (`type`, `layout`), made on first use. */
export function benchModel({ shape = "qwen2.5-7b", type = "q6_k", layout = "packed6", log = () => {} } = {}) {
  const dir = join(WORK, `${shape}-${type}-${layout}`);
  const slices = join(dir, "slices");
  if (!existsSync(join(slices, "manifest.json"))) {
    log(`synthesizing a ${shape} ${type} lm-head…`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    cli("synth", "--out", join(dir, "m.gguf"), "--shape", shape, "--type", type, "--seed", "1");
    cli("slice", "--gguf", join(dir, "m.gguf"), "--shards", "8", "--out", slices, "--layout", layout);
    rmSync(join(dir, "m.gguf"));
  }
  return { slices, manifest: JSON.parse(readFileSync(join(slices, "manifest.json"), "utf8")) };
}

/** Shard i's own local R2 state (its slice and the manifest of `model`), made on first use:
 * workerd processes cannot share one. */
export async function shardState(model, i) {
  const { manifest } = model;
  const dir = join(WORK, "cold-state", `s${i}`);
  const marker = join(dir, `seeded-${manifest.version}`);
  if (existsSync(marker)) return dir;
  rmSync(dir, { recursive: true, force: true });
  const s = await startShards({ shards: 1, state: dir, authToken: TOKEN, vars: { SHARD_INDEX: String(i), SHARD_COUNT: "8" } });
  try {
    const bucket = await s.bucket();
    const key = manifest.shards[i].key;
    await bucket.put(`model/${key}`, new Uint8Array(readFileSync(join(model.slices, key))));
    await bucket.put("model/manifest.json", JSON.stringify(manifest));
  } finally {
    await s.dispose();
  }
  writeFileSync(marker, "");
  return dir;
}

/** The front at `url` drops its slice, as a new isolate has none (the test shard's
 * `POST /__fault/forget`). */
export async function forget(url) {
  const r = await fetch(`${url}/__fault/forget`, { method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
  await r.arrayBuffer();
}

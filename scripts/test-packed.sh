#!/usr/bin/env bash
# A package as a user installs it: `npm pack` (its prepack refuses an unbuilt package), `npm
# install` of the tarball in a new project outside the repository, then an import by name in
# Node that uses it. Run after the package's build (scripts/build-client-js.sh or
# scripts/build-kquant-js.sh).
# Usage: scripts/test-packed.sh client|kquant
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
client)
  check='import { LmHeadClient, ShardError } from "@cobordism/client";
const c = new LmHeadClient({ endpoints: ["https://shard-0.example"], token: "t" });
if (typeof c.warm !== "function" || !(new ShardError("x") instanceof Error)) throw new Error("exports");
await c.sample(new Float32Array(4), { temperature: -1 }).then(() => { throw new Error("accepted"); }, (e) => { if (!(e instanceof RangeError)) throw e; });' ;;
kquant)
  check='import { ResidentSlice } from "@cobordism/kquant";
const s = new ResidentSlice("q6_k", 1, 256);
s.fill(new Uint8Array(210));
const y = s.matVec(new Float32Array(256).fill(1));
if (y.length !== 1 || y[0] !== 0) throw new Error(`matVec of zero blocks: ${y}`);' ;;
*) echo "usage: scripts/test-packed.sh client|kquant" >&2; exit 2 ;;
esac
project=$(mktemp -d)
trap 'rm -rf "$project"' EXIT
(cd "packages/$1" && npm pack --silent --pack-destination "$project" >/dev/null)
cd "$project"
npm init -y >/dev/null
npm install --silent --no-audit --no-fund ./cobordism-"$1"-*.tgz
node --input-type=module -e "$check"
echo "@cobordism/$1: installed from its packed tarball outside the repository and imported"

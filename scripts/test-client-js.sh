#!/usr/bin/env bash
# Builds @cobordism/client (packages/client) and runs its tests with Node's test runner: against
# eight local shards in workerd (same results as the Rust CLI, slow and failing shards, version
# checks) and the example inference Worker (examples/inference-worker) in workerd.
# Needs the shard worker (scripts/build-worker.sh) and the release CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
scripts/build-client-js.sh
node --test packages/client/test/
scripts/test-packed.sh client # installed from its tarball outside the repository

#!/usr/bin/env bash
# The decode-loop benchmark (benches/serving/run.mjs): C = 1, 4, 16, 32 concurrent streams through
# the example inference Worker and eight qwen2.5-7b-shaped Q6_K shards in workerd, the shards'
# coalescing off and on in the same run, exact and int8. Writes
# target/serving/serving.md, serving.json and docs/serving.svg; about 15 minutes here (run it on
# an idle machine). Usage: scripts/serving-bench.sh [ARGS…]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh demo >/dev/null
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS
cargo build -q --release -p cobordism
scripts/build-worker.sh >/dev/null
scripts/build-client-js.sh >/dev/null
mkdir -p target/serving
node benches/serving/run.mjs --json target/serving/serving.json --svg docs/serving.svg "$@" \
  | tee target/serving/serving.md

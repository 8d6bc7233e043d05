#!/usr/bin/env bash
# What the serving and cold-start benchmarks run (scripts/serving-bench.sh, scripts/cold-bench.sh):
# the demo's setup, the CLI (it synthesizes and slices the model), the shard Worker and
# @cobordism/client.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh demo >/dev/null
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS
cargo build -q --release -p cobordism
scripts/build-worker.sh >/dev/null
scripts/build-client-js.sh >/dev/null

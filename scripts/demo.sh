#!/usr/bin/env bash
# The main job: a local end-to-end run. Until the shard worker and the CLI land, it quantizes a
# real lm-head shape with kquant and runs it on every backend (see the issues for the plan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
unset RUSTFLAGS
cargo run -q --release -p kquant --example lm_head_demo

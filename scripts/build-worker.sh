#!/usr/bin/env bash
# Builds the shard Worker (worker/build/worker/shim.mjs + wasm) with worker-build, using the
# pinned wasm-bindgen CLI: nothing is downloaded from GitHub. wasm-opt is off (worker/Cargo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS # keeps .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen)}"
(cd worker && worker-build --release)
scripts/check-wasm.sh worker/build/worker/*.wasm

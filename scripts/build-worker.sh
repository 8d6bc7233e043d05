#!/usr/bin/env bash
# Builds the shard Worker (worker/build/worker/shim.mjs + wasm) with worker-build, using the
# pinned wasm-bindgen CLI and npm's binaryen wasm-opt: nothing is downloaded from GitHub.
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS # keeps .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen)}"
export WASM_OPT_BIN="${WASM_OPT_BIN:-$PWD/node_modules/.bin/wasm-opt}"
(cd worker && worker-build --release)
scripts/check-wasm.sh worker/build/worker/*.wasm

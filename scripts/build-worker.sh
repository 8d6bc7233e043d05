#!/usr/bin/env bash
# Builds the shard Worker (worker/build/worker/shim.mjs + wasm) with worker-build, using the
# pinned wasm-bindgen CLI: nothing is downloaded from GitHub. wasm-opt is off (worker/Cargo.toml).
#
# `--test` builds the test shard instead, into target/worker-test/build (its own target
# directory, so the two builds never invalidate each other): the `fault-injection` routes, and
# wasm memory capped at 112 MiB, what an isolate's 128 MB leaves after ~16 MiB of JavaScript heap
# and runtime. Local workerd enforces no memory limit; this build makes a failed `memory.grow`
# happen where production would.
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS # keeps .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen)}"
if [ "${1:-}" = --test ]; then
  max_memory=$((112 << 20))
  # Replaces the per-target rustflags of .cargo/config.toml: simd128 is repeated here.
  export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128 -C link-arg=--max-memory=$max_memory"
  (cd worker && worker-build --release --out-dir ../target/worker-test/build -- \
    --features fault-injection --target-dir ../target/worker-test/cargo)
  scripts/check-wasm.sh target/worker-test/build/*.wasm
  memory=$(wasm-tools print target/worker-test/build/index_bg.wasm | grep '(memory (;0;)')
  [[ $memory == *" $((max_memory >> 16)))" ]] ||
    { echo "build-worker: the test shard's memory is $memory, not capped at $max_memory bytes" >&2; exit 1; }
else
  (cd worker && worker-build --release)
  scripts/check-wasm.sh worker/build/*.wasm
fi

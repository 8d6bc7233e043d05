#!/usr/bin/env bash
# Validates .wasm files with relaxed SIMD disabled (crates/wasm-check: wasmparser with every
# other proposal the runtimes ship). rustc 1.95 has been seen to emit
# i16x8.relaxed_dot_i8x16_i7x16_s with only +simd128: Node 20 refuses it and Workers' V8 computes
# wrong sums with it. `--max-memory BYTES` also requires that memory maximum (the test shard).
# `--relaxed FILE…` checks relaxed builds instead (with or without `--max-memory`): relaxed SIMD's
# two i8×i7 dot products, and only inside kquant's relaxed int8 passes (crates/wasm-check's docs; its unit tests prove each refusal).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: check-wasm.sh [--relaxed] [--max-memory BYTES] FILE.wasm…" >&2; exit 2; }
unset RUSTFLAGS
scripts/host-tools.sh
# The check must be able to fail: a module with one relaxed dot product is refused.
if target/release/check-wasm scripts/fixtures/relaxed-dot.wasm 2>/dev/null; then
  echo "check-wasm: the validator accepted a relaxed-SIMD module" >&2
  exit 1
fi
# …and so is its dot product in a function that is not one of kquant's relaxed int8 passes.
if target/release/check-wasm --relaxed scripts/fixtures/relaxed-dot.wasm 2>/dev/null; then
  echo "check-wasm --relaxed: accepted a relaxed dot product outside the int8 passes" >&2
  exit 1
fi
exec target/release/check-wasm "$@"

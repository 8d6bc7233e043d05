#!/usr/bin/env bash
# Validates .wasm files with relaxed SIMD disabled (every other proposal the runtimes ship stays
# on). rustc 1.95 has been seen to emit i16x8.relaxed_dot_i8x16_i7x16_s with only +simd128:
# Node 20 refuses it and Workers' V8 computes wrong sums with it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: check-wasm.sh FILE.wasm…" >&2; exit 2; }
validate() { wasm-tools validate --features=-relaxed-simd "$1"; }
# The check must be able to fail: a module with one relaxed dot product is refused.
if validate scripts/fixtures/relaxed-dot.wasm 2>/dev/null; then
  echo "check-wasm: the validator accepted a relaxed-SIMD module" >&2
  exit 1
fi
for f in "$@"; do
  [ -f "$f" ] || { echo "check-wasm: no such file: $f" >&2; exit 1; }
  validate "$f"
  echo "ok (valid, no relaxed SIMD): $f"
done

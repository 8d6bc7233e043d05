#!/usr/bin/env bash
# Validates .wasm files with relaxed SIMD disabled and checks that no relaxed opcode is present.
# rustc 1.95 has been seen to emit i16x8.relaxed_dot_i8x16_i7x16_s with only +simd128.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: check-wasm.sh FILE.wasm…" >&2; exit 2; }
for f in "$@"; do
  [ -f "$f" ] || continue
  wasm-validate --enable-exceptions "$f" # every proposal the runtimes ship except relaxed SIMD
  relaxed=$(wasm2wat --enable-all "$f" | grep -c relaxed || true)
  if [ "$relaxed" != 0 ]; then
    echo "$f: $relaxed relaxed-SIMD instructions" >&2
    exit 1
  fi
  echo "ok (no relaxed SIMD): $f"
done

#!/usr/bin/env bash
# Builds packages/kquant (@cobordism/kquant) from the kquant-js crate: the plain simd128 module
# and the relaxed-SIMD one (see scripts/build-wasm-package.sh).
set -euo pipefail
exec "$(dirname "$0")/build-wasm-package.sh" --relaxed kquant-js packages/kquant

#!/usr/bin/env bash
# Builds packages/kquant (@cobordism/kquant): the kquant-js crate for wasm32-unknown-unknown
# (simd128, from .cargo/config.toml), its JS glue and TypeScript types with the pinned
# wasm-bindgen CLI (--target web: Node and Workers both instantiate it with initSync), then
# validates the .wasm (no relaxed SIMD).
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS # it would replace .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export PATH="$HOME/.cargo/bin:$PATH"
want=0.2.130
have=$(wasm-bindgen --version | awk '{print $2}')
[ "$have" = "$want" ] || { echo "build-kquant-js: wasm-bindgen CLI $have, the crate pins $want" >&2; exit 1; }
cargo build -p kquant-js --target wasm32-unknown-unknown --release
rm -rf packages/kquant/dist
wasm-bindgen --target web --out-dir packages/kquant/dist \
  target/wasm32-unknown-unknown/release/kquant_js.wasm
scripts/check-wasm.sh packages/kquant/dist/kquant_js_bg.wasm

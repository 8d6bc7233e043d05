#!/usr/bin/env bash
# Builds a JS package's wasm: the crate CRATE for wasm32-unknown-unknown (simd128, from
# .cargo/config.toml), its JS glue and TypeScript types into PACKAGE/dist with crates/bindgen
# (wasm-bindgen's library at the pinned version; --target web: Node and Workers both instantiate it with initSync), then
# validates the .wasm (no relaxed SIMD). Usage: scripts/build-wasm-package.sh CRATE PACKAGE
set -euo pipefail
cd "$(dirname "$0")/.."
crate=$1 package=$2
unset RUSTFLAGS # it would replace .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo build -p "$crate" --target wasm32-unknown-unknown --release
scripts/host-tools.sh
rm -rf "$package/dist"
target/release/cobordism-bindgen --target web --out-dir "$package/dist" \
  "target/wasm32-unknown-unknown/release/${crate//-/_}.wasm"
scripts/check-wasm.sh "$package/dist/${crate//-/_}_bg.wasm"

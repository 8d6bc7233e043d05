#!/usr/bin/env bash
# Builds a JS package's wasm: the crate CRATE for wasm32-unknown-unknown (simd128, from
# .cargo/config.toml), its JS glue and TypeScript types into PACKAGE/dist with crates/bindgen
# (wasm-bindgen's library at the pinned version; --target web: Node and Workers both instantiate
# it with initSync), then validates the .wasm (no relaxed SIMD).
# With `--relaxed`, also the crate built with kquant's `relaxed-simd`, as
# PACKAGE/dist/<crate>_relaxed_bg.wasm: wasm-bindgen writes the very same glue for it (checked
# here), so one glue serves both and the package's entry picks the module
# (`check-wasm --relaxed` validates it). Usage: scripts/build-wasm-package.sh [--relaxed] CRATE PACKAGE
set -euo pipefail
cd "$(dirname "$0")/.."
relaxed=false
if [ "${1:-}" = --relaxed ]; then relaxed=true; shift; fi
crate=$1 package=$2 name=${1//-/_}
unset RUSTFLAGS # it would replace .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo build -p "$crate" --target wasm32-unknown-unknown --release
scripts/host-tools.sh
rm -rf "$package/dist"
target/release/cobordism-bindgen --target web --out-dir "$package/dist" \
  "target/wasm32-unknown-unknown/release/$name.wasm"
scripts/check-wasm.sh "$package/dist/${name}_bg.wasm"
if $relaxed; then
  # The same target directory: the relaxed kquant is a variant of its own there (features are in
  # its hash), and the crate's .wasm, overwritten, was read above.
  cargo build -p "$crate" --target wasm32-unknown-unknown --release --features kquant/relaxed-simd
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  target/release/cobordism-bindgen --target web --out-dir "$stage" \
    "target/wasm32-unknown-unknown/release/$name.wasm"
  cmp -s "$stage/$name.js" "$package/dist/$name.js" ||
    { echo "build-wasm-package: the relaxed build's glue differs from the plain one's" >&2; exit 1; }
  cp "$stage/${name}_bg.wasm" "$package/dist/${name}_relaxed_bg.wasm"
  scripts/check-wasm.sh --relaxed "$package/dist/${name}_relaxed_bg.wasm"
fi

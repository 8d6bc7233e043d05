#!/usr/bin/env bash
# Builds a JS package's wasm: the crate CRATE for wasm32-unknown-unknown (simd128, from
# .cargo/config.toml), its JS glue and TypeScript types into PACKAGE/dist with crates/bindgen
# (wasm-bindgen's library at the pinned version; --target web: Node and Workers both instantiate
# it with initSync), then validates the .wasm (no relaxed SIMD).
# With `--relaxed`, also the crate built with kquant's `relaxed-simd`, as
# PACKAGE/dist/<crate>_relaxed_bg.wasm: wasm-bindgen writes the very same glue for it (checked
# here), so one glue serves both and the package's entry picks the module
# (`check-wasm --relaxed` validates it). `--out DIR` writes the files to DIR instead of
# PACKAGE/dist (the reproducible stage of scripts/test.sh builds a second copy in a clean
# CARGO_TARGET_DIR and compares).
# Usage: scripts/build-wasm-package.sh [--relaxed] [--out DIR] CRATE PACKAGE
set -euo pipefail
cd "$(dirname "$0")/.."
relaxed=false out=
while [ $# -gt 2 ]; do
  case $1 in
    --relaxed) relaxed=true; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: scripts/build-wasm-package.sh [--relaxed] [--out DIR] CRATE PACKAGE" >&2; exit 2 ;;
  esac
done
crate=$1 package=$2 name=${1//-/_}
out=${out:-$package/dist}
wasm=${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/release/$name.wasm
unset RUSTFLAGS # it would replace .cargo/config.toml's +simd128 for wasm32-unknown-unknown
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo build -p "$crate" --target wasm32-unknown-unknown --release
scripts/host-tools.sh
rm -rf "$out"
target/release/cobordism-bindgen --target web --out-dir "$out" "$wasm"
scripts/check-wasm.sh "$out/${name}_bg.wasm"
if $relaxed; then
  # The same target directory: the relaxed kquant is a variant of its own there (features are in
  # its hash), and the crate's .wasm, overwritten, was read above.
  cargo build -p "$crate" --target wasm32-unknown-unknown --release --features kquant/relaxed-simd
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  target/release/cobordism-bindgen --target web --out-dir "$stage" "$wasm"
  cmp -s "$stage/$name.js" "$out/$name.js" ||
    { echo "build-wasm-package: the relaxed build's glue differs from the plain one's" >&2; exit 1; }
  cp "$stage/${name}_bg.wasm" "$out/${name}_relaxed_bg.wasm"
  scripts/check-wasm.sh --relaxed "$out/${name}_relaxed_bg.wasm"
fi

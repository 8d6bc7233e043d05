#!/usr/bin/env bash
# Builds the host binaries the wasm builds use — crates/bindgen (wasm-bindgen's glue) and
# crates/wasm-check — always together, in one cargo invocation: cargo unifies the features of
# shared dependencies per invocation, so building one of them alone would compile some of those
# dependencies again, with other features.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS
# target/release, where the callers run them, whatever CARGO_TARGET_DIR the caller builds in.
cargo build --release -q -p cobordism-bindgen -p cobordism-wasm-check --target-dir target

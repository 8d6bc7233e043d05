#!/usr/bin/env bash
# Builds the host binaries the wasm builds use — crates/bindgen (wasm-bindgen's glue) and
# crates/wasm-check — always together and with the CLI, in one cargo invocation: cargo unifies
# the features of shared dependencies per invocation, so building any of them on its own would
# compile those dependencies (and the CLI after them) a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS
cargo build --release -q -p cobordism -p cobordism-bindgen -p cobordism-wasm-check

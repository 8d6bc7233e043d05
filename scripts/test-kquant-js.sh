#!/usr/bin/env bash
# Builds @cobordism/kquant (packages/kquant) and runs its tests with Node's test runner:
# bit-identical to native kquant (fixtures from the kquant-js `fixtures` example, built here
# natively), error messages, wasm memory, and the example Worker in workerd (Miniflare).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS # it would replace .cargo/config.toml's +simd128 for wasm32-unknown-unknown
scripts/build-kquant-js.sh
cargo build --release -p kquant-js --example fixtures
node --test packages/kquant/test/
scripts/test-packed.sh kquant # installed from its tarball outside the repository

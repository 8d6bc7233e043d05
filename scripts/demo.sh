#!/usr/bin/env bash
# The main job: the whole system on this machine. Installs what is missing, builds the shard
# Worker and the CLI, then `cobordism demo`: synthesizes a qwen2.5-7b-shaped Q6_K lm-head,
# slices it for eight shards, uploads the slices into a local R2 bucket, starts eight shards in
# workerd and checks that their logits equal kquant's native result bit for bit.
# Arguments go to `cobordism demo` (e.g. --shape gemma3-27b --type q4_k --shards 16).
set -euo pipefail
cd "$(dirname "$0")/.."
took() { printf '\033[1;34m[demo]\033[0m %s: %d s\n' "$1" $((SECONDS - start)); start=$SECONDS; }
start=$SECONDS
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS
scripts/setup.sh toolchain
# The npm packages install while cargo compiles the CLI, the wasm tools and the shard's wasm.
mkdir -p target
scripts/setup.sh demo >target/setup.log 2>&1 &
setup=$!
# The CLI without TLS (its `https` feature): the demo's shards are local, and rustls with ring
# is a third of the CLI's compile time. `cargo build --release -p cobordism` adds it.
cargo build --release -q -p cobordism --no-default-features
scripts/host-tools.sh
scripts/build-worker.sh --compile-only
took "the CLI and the shard's wasm compiled (npm ci meanwhile)"
wait "$setup" || { cat target/setup.log >&2; exit 1; }
took "the rest of the setup (npm packages)"
scripts/build-worker.sh >/dev/null
took "the shard Worker's bundle"
target/release/cobordism demo "$@"
took "the demo"

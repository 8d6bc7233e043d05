#!/usr/bin/env bash
# Builds the shard Worker into worker/build (index.js + index_bg.wasm): the crate for wasm32,
# wasm-bindgen's glue with crates/bindgen (module target, with the instance reset workers-rs relies on after a
# panic), then esbuild bundles worker/entry.mjs with wasm-bindgen's glue. This is what
# worker-build does for a plain fetch Worker, done here so that a fresh machine need not compile
# worker-build (2½ minutes of the demo's first run). No wasm-opt: binaryen's `-O` made the Q4_K
# kernels ~20 % slower in workerd (docs/BENCHMARKS.md).
#
# `--test` builds the test shard instead, into target/worker-test/build (its own target
# directory, so the two builds never invalidate each other): the `fault-injection` routes, and
# wasm memory capped at 112 MiB, what an isolate's 128 MB leaves after ~16 MiB of JavaScript heap
# and runtime. Local workerd enforces no memory limit; this build makes a failed `memory.grow`
# happen where production would.
#
# `--compile-only` stops after compiling the crate (scripts/demo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS # keeps .cargo/config.toml's +simd128 for wasm32-unknown-unknown
cargo_args=(--lib --release --target wasm32-unknown-unknown -p cobordism-worker)
if [ "${1:-}" = --test ]; then
  max_memory=$((112 << 20))
  # Replaces the per-target rustflags of .cargo/config.toml: simd128 is repeated here.
  export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128 -C link-arg=--max-memory=$max_memory"
  target_dir=target/worker-test/cargo out=target/worker-test/build
  cargo_args+=(--features fault-injection --target-dir "$target_dir")
else
  target_dir=target out=worker/build
fi
cargo build "${cargo_args[@]}"
[ "${1:-}" != --compile-only ] || exit 0
scripts/host-tools.sh
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
target/release/cobordism-bindgen "$target_dir/wasm32-unknown-unknown/release/cobordism_worker.wasm" --out-dir "$stage" \
  --out-name index --target module --no-typescript \
  --experimental-reset-state-function --force-enable-abort-handler
cp worker/entry.mjs "$stage/"
rm -rf "$out" && mkdir -p "$out"
node_modules/.bin/esbuild "$stage/entry.mjs" --bundle --format=esm --minify --log-level=warning \
  --external:./index_bg.wasm '--external:cloudflare:*' --outfile="$out/index.js" --allow-overwrite
# wasm-bindgen imports the module as a source phase import; the Workers runtime takes the plain one.
sed -i 's/import source /import /' "$out/index.js"
cp "$stage/index_bg.wasm" "$out/index_bg.wasm"
printf '*\n' >"$out/.gitignore"
scripts/check-wasm.sh ${max_memory:+--max-memory "$max_memory"} "$out/index_bg.wasm"

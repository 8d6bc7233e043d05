#!/usr/bin/env bash
# Builds the shard Worker into worker/build (index.js + index_bg.wasm): the crate for wasm32,
# wasm-bindgen's glue with crates/bindgen (module target, with the instance reset workers-rs relies on after a
# panic), then esbuild bundles worker/entry.mjs with wasm-bindgen's glue. This is what
# worker-build does for a plain fetch Worker, done here so that a fresh machine need not compile
# worker-build (2½ minutes of the demo's first run). No wasm-opt: binaryen's `-O` made the Q4_K
# kernels ~20 % slower in workerd (docs/BENCHMARKS.md).
#
# `--test` builds the test shard instead, into target/worker-test/build: the `fault-injection`
# routes, and wasm memory capped at 112 MiB, what an isolate's 128 MB leaves after ~16 MiB of JavaScript heap
# and runtime. Local workerd enforces no memory limit; this build makes a failed `memory.grow`
# happen where production would.
#
# Kernels: kquant's relaxed-SIMD build (its feature `relaxed-simd`: the int8 mode's products on
# relaxed SIMD's i8×i7 dot product) unless COBORDISM_WASM_SIMD=plain, which builds the plain
# simd128 kernels for a runtime without relaxed SIMD (Workers' V8 and workerd have it). The
# choice is made here because a Worker cannot make it at start-up: workerd compiles every wasm
# module of the bundle when the Worker loads, imported or not (a never-imported module that does
# not compile fails the whole service: verified), and refuses to compile one from bytes. `/healthz`
# names the kernels a shard runs (`backend`). The same variable passes through `wrangler deploy`
# and `cobordism deploy` to this script. All builds share the target directory: cargo keeps
# each variant of a library (its features are in its hash): a switch recompiles the Worker's own
# crate alone (~3 s).
#
# `--out DIR` writes the Worker to DIR instead of worker/build (scripts/test.sh keeps the plain
# build next to the relaxed one; scripts/must-fail.sh builds a perturbed one beside them).
#
# `--compile-only` stops after compiling the crate (scripts/demo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS # keeps .cargo/config.toml's +simd128 for wasm32-unknown-unknown
cargo_args=(--lib --release --target wasm32-unknown-unknown -p cobordism-worker)
mode=build out=
while [ $# -gt 0 ]; do
  case $1 in
    --test | --compile-only) mode=${1#--}; shift ;;
    --out) [ $# -ge 2 ] || { echo "build-worker.sh: --out needs a directory" >&2; exit 2; }; out=$2; shift 2 ;;
    *) echo "usage: scripts/build-worker.sh [--test | --compile-only] [--out DIR]" >&2; exit 2 ;;
  esac
done
case ${COBORDISM_WASM_SIMD:-relaxed} in
  relaxed) cargo_args+=(--features kquant/relaxed-simd) check=(--relaxed) ;;
  plain) check=() ;;
  *) echo "build-worker.sh: COBORDISM_WASM_SIMD=$COBORDISM_WASM_SIMD: expected relaxed (the default) or plain" >&2; exit 2 ;;
esac
target_dir=${CARGO_TARGET_DIR:-target}
if [ $mode = test ]; then
  max_memory=$((112 << 20)) out=${out:-target/worker-test/build}
  # The memory cap is a link argument of the Worker's crate alone (`cargo rustc … -- FLAGS`), so
  # its dependencies are the ones the other builds made; the fault routes are a feature of that
  # crate only.
  cargo rustc "${cargo_args[@]}" --features fault-injection -- -C link-arg=--max-memory=$max_memory
else
  out=${out:-worker/build}
  cargo build "${cargo_args[@]}"
fi
[ $mode != compile-only ] || exit 0
scripts/host-tools.sh
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
target/release/cobordism-bindgen "$target_dir/wasm32-unknown-unknown/release/cobordism_worker.wasm" --out-dir "$stage" \
  --out-name index --target module --no-typescript \
  --experimental-reset-state-function --force-enable-abort-handler
cp worker/entry.mjs "$stage/"
rm -rf "$out" && mkdir -p "$out"
# The module's hash goes into the bundle, for /healthz (a module cannot hold its own).
sha256=$(node -e 'const c = require("node:crypto"), fs = require("node:fs");
process.stdout.write(c.createHash("sha256").update(fs.readFileSync(process.argv[1])).digest("hex"))' \
  "$stage/index_bg.wasm")
node_modules/.bin/esbuild "$stage/entry.mjs" --bundle --format=esm --minify --log-level=warning \
  --external:./index_bg.wasm '--external:cloudflare:*' --outfile="$out/index.js" --allow-overwrite \
  "--define:COBORDISM_MODULE_SHA256=\"$sha256\""
# wasm-bindgen imports the module as a source phase import; the Workers runtime takes the plain one.
sed -i 's/import source /import /' "$out/index.js"
cp "$stage/index_bg.wasm" "$out/index_bg.wasm"
printf '*\n' >"$out/.gitignore"
scripts/check-wasm.sh ${check[@]+"${check[@]}"} ${max_memory:+--max-memory "$max_memory"} "$out/index_bg.wasm"

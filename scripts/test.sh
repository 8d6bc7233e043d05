#!/usr/bin/env bash
# All tests: native x86_64, aarch64 under qemu, wasm32 under Node, no_std, wasm validation,
# the must-fail check, lints. This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS # it would silently replace the per-target rustflags (simd128) of .cargo/config.toml

passed=0
step() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }
ok() { passed=$((passed + 1)); }

step "format and lints; every relative link and path in the docs resolves"
cargo fmt --all -- --check
node scripts/check-links.mjs # refuses scripts/fixtures/broken-links.md first
cargo clippy --workspace --exclude cobordism-worker --all-targets -- -D warnings
cargo clippy -p kquant --target aarch64-unknown-linux-gnu --all-targets -- -D warnings
cargo clippy -p kquant --target wasm32-wasip1 --all-targets -- -D warnings
cargo clippy -p cobordism-worker --target wasm32-unknown-unknown -- -D warnings
cargo clippy -p cobordism-worker --target wasm32-unknown-unknown --features fault-injection -- -D warnings
cargo clippy -p kquant -p cobordism-engine-bench --target wasm32-unknown-unknown --features relaxed-simd \
  --target-dir target/engine-relaxed -- -D warnings
ok

step "fixtures are what the gguf oracle makes"
scripts/check-fixtures.sh
ok

step "x86_64 (native): all tests"
cargo test --workspace --exclude cobordism-worker
ok

step "aarch64 (qemu-aarch64): kquant tests on NEON, with and without the dot-product extension"
# qemu's default CPU (max) has FEAT_DotProd: both NEON backends run every test. A Cortex-A72
# has no dot product: NEON alone must be chosen there.
cargo test -p kquant --target aarch64-unknown-linux-gnu
QEMU_CPU=cortex-a72 cargo test -p kquant --target aarch64-unknown-linux-gnu --test bit_exact -- the_simd_backend_is_selected
ok

step "no fused multiply-add in kquant's x86_64 and aarch64 code (the test binaries just built)"
scripts/check-no-fma.sh
ok

step "wasm32-wasip1 (Node, simd128): kquant tests"
cargo test -p kquant --target wasm32-wasip1
ok

step "no_std: bare-metal build, and the wasm32-unknown-unknown build"
cargo build -p kquant --no-default-features --target thumbv7em-none-eabihf
cargo build -p kquant -p cobordism-engine-bench --release --target wasm32-unknown-unknown
# The relaxed-SIMD build of the engine module (kquant's feature relaxed-simd), in its own target
# directory: the same output name as the plain one.
cargo build -p cobordism-engine-bench --release --target wasm32-unknown-unknown --features relaxed-simd \
  --target-dir target/engine-relaxed
ok

step "shard worker: build (wasm-bindgen + esbuild) and the test build, wrangler dry-run deploy of s0…s7"
scripts/build-worker.sh # relaxed-SIMD kernels: what deploys
# The plain simd128 build, for runtimes without relaxed SIMD (tests/worker/kernels.test.mjs runs
# both). Built second: target/wasm32-unknown-unknown/release/cobordism_worker.wasm is then the
# plain one, which the validation step below checks as such.
COBORDISM_WASM_SIMD=plain scripts/build-worker.sh --out target/worker-plain/build
scripts/build-worker.sh --test # fault routes, wasm memory capped at 112 MiB (own target dir)
cargo build --release -p cobordism
# wrangler reruns [build] on every call: dry-run a copy of the config without it.
sed '/^\[build\]/,/^$/d; s|^main = "|main = "../|' wrangler.toml >target/wrangler.nobuild.toml
for i in 0 1 2 3 4 5 6 7; do
  npx wrangler deploy --dry-run -c target/wrangler.nobuild.toml --env "s$i" \
    --outdir "target/wrangler-dry-run/s$i" >"target/wrangler-dry-run-s$i.log" 2>&1 ||
    { cat "target/wrangler-dry-run-s$i.log"; exit 1; }
done
echo "wrangler deploy --dry-run: s0…s7 ok"
ok

step "every plain .wasm validates with relaxed SIMD disabled; the relaxed ones hold only the int8 kernels' dot products"
scripts/check-wasm.sh target/wasm32-wasip1/debug/deps/*.wasm target/wasm32-unknown-unknown/release/*.wasm \
  target/worker-plain/build/*.wasm
scripts/check-wasm.sh --relaxed target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm \
  worker/build/*.wasm target/worker-test/build/*.wasm
ok

step "engine benchmark harness (one run, not a measurement): kernels, idioms and both Q6_K layouts (their bits compared on every row) in workerd and Node"
node benches/engine/run.mjs --runs 1 --jobs idioms,kernels,layout >/dev/null
ok

step "int8 kernels, plain and relaxed SIMD, against the scalar backend in workerd (300 random and adversarial cases each)"
node benches/engine/run.mjs --jobs check
node benches/engine/run.mjs --jobs check --wasm target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm
node benches/engine/run.mjs --runs 1 --jobs relaxed >/dev/null # both builds side by side: the harness runs
ok

step "shard worker in workerd (Miniflare) against a local R2 bucket; deploy-all with a stand-in wrangler"
node --test tests/worker/
ok

step "kquant for JavaScript: @cobordism/kquant in Node and in workerd"
scripts/test-kquant-js.sh
ok

step "@cobordism/client in Node against eight local shards; the example inference Worker in workerd"
scripts/test-client-js.sh
ok

step "short fuzz run: GGUF reader, kernels, manifest, request decoding (30 s each)"
scripts/fuzz.sh 30
ok

step "the demo, quick form: synth → plan → slice → upload --local → 8 shards → logits --verify"
target/release/cobordism demo --shape tiny --workdir target/demo-ci
ok

step "must-fail matrix: each perturbation builds and makes its named bit-exact tests fail"
scripts/must-fail.sh
ok

step "bit-exact table: every backend, aarch64 (qemu), wasm32 (Node), the shard over HTTP; the oracle on each"
scripts/bit-exact.sh
ok

echo
echo "scripts/test.sh: $passed passed, 0 failed"

# The artifacts the tests use, one function each (build_NAME), and `need NAME…`, which runs each
# build at most once per shell. Sourced by scripts/test.sh (its build stage runs them all, each
# later stage names what it uses, so `--only STAGE` builds just that) and scripts/bit-exact.sh.
# Expects the repository root as the working directory and RUSTFLAGS unset.
declare -A builds_done=()
need() {
  local b
  for b; do
    [ -n "${builds_done[$b]:-}" ] && continue
    printf '\033[1;34m[build]\033[0m %s\n' "$b"
    "build_$b"
    builds_done[$b]=1
  done
}
build_host_tools() { scripts/host-tools.sh; } # wasm-bindgen's glue (crates/bindgen), check-wasm
build_cli() { cargo build --release -p cobordism; }
# Not the peer kernels (benches/peers: no tests, and candle-core would compile again in the test
# profile; clippy checks them and scripts/bench.sh builds them).
native_tests=(--workspace --exclude cobordism-worker --exclude cobordism-peers)
build_native_tests() { cargo test "${native_tests[@]}" --no-run; }
# One invocation for both targets: kquant's tests under qemu-aarch64 and under Node (wasm32-wasip1).
build_cross_tests() { cargo test -p kquant --target aarch64-unknown-linux-gnu --target wasm32-wasip1 --no-run; }
build_no_std() { cargo build -p kquant --no-default-features --target thumbv7em-none-eabihf; }
# The engine module (benches/engine), plain and with kquant's relaxed-simd (own target directory:
# the same output name).
build_engine() {
  cargo build -p kquant -p cobordism-engine-bench --release --target wasm32-unknown-unknown
  cargo build -p cobordism-engine-bench --release --target wasm32-unknown-unknown --features relaxed-simd \
    --target-dir target/engine-relaxed
}
build_worker() { scripts/build-worker.sh; } # relaxed-SIMD kernels: what deploys
# The plain simd128 build (tests/worker/kernels.test.mjs runs both), in its own target directory.
build_worker_plain() { COBORDISM_WASM_SIMD=plain scripts/build-worker.sh --out target/worker-plain/build; }
build_worker_test() { scripts/build-worker.sh --test; } # fault routes, memory capped at 112 MiB
build_kquant_js() {
  scripts/build-kquant-js.sh
  cargo build --release -p kquant-js --example fixtures # the native bits its tests compare with
}
build_client_js() { scripts/build-client-js.sh; }
build_fuzz() { scripts/fuzz.sh --build; }
all_builds=(host_tools cli native_tests cross_tests no_std engine worker worker_plain worker_test kquant_js client_js fuzz)

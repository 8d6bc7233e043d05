#!/usr/bin/env bash
# The README's test command; .ci/run calls it. Every check in stages: the build stage makes every
# artifact the later stages use, each once; the other stages only run. docs/TESTING.md says what
# each stage proves, what it costs, and how a must-fail perturbation works.
#
#   scripts/test.sh             every stage: what CI runs
#   scripts/test.sh --quick     the inner loop: format, native clippy, native tests, the shard in workerd
#   scripts/test.sh --only S    stage S alone (repeat for more), after setup and the builds it needs
#   scripts/test.sh --list      the stages
#
# Prints each stage's time and test count as it ends, and a table of them at the end (also written
# to target/test-times.md). Exits non-zero at the first stage that fails.
set -euo pipefail
cd "$(dirname "$0")/.."

stages=(setup lint build fixtures native aarch64 no-fma wasm32 wasm-valid reproducible engine workerd kquant-js client-js fuzz demo bit-exact must-fail)
quick=(setup lint-native build-quick native workerd)
usage() { echo "usage: scripts/test.sh [--quick | --only STAGE… | --list]" >&2; exit 2; }
selected=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) selected+=("${quick[@]}"); shift ;;
    --only)
      [ $# -ge 2 ] || usage
      [[ " ${stages[*]} lint-native " == *" $2 "* ]] || { echo "test.sh: no stage '$2' (stages: ${stages[*]})" >&2; exit 2; }
      selected+=("$2"); shift 2 ;;
    --list) printf '%s\n' "${stages[@]}"; exit 0 ;;
    *) usage ;;
  esac
done
[ ${#selected[@]} -gt 0 ] || selected=("${stages[@]}")
# Every run installs what is missing first (a second or so when nothing is).
[ "${selected[0]}" = setup ] || selected=(setup "${selected[@]}")

export PATH="$PWD/target/oracle-venv/bin:${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
export CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS # it would silently replace the per-target rustflags (simd128) of .cargo/config.toml

source scripts/lib/builds.sh

# ---- stages ----------------------------------------------------------------------------------------
stage_setup() { scripts/setup.sh; }
stage_lint-native() {
  cargo fmt --all -- --check
  node scripts/check-links.mjs # refuses scripts/fixtures/broken-links.md first
  node scripts/check-line-length.mjs # refuses scripts/fixtures/long-lines.rs first
  cargo clippy --workspace --exclude cobordism-worker --all-targets -- -D warnings
  # kquant is publishable alone: packaged with its build helper and built from the package.
  cargo package -q -p cobordism-perturb -p kquant --allow-dirty
}
stage_lint() {
  stage_lint-native
  cargo clippy -p kquant --target aarch64-unknown-linux-gnu --target wasm32-wasip1 --all-targets -- -D warnings
  # The shard with its fault routes (they only add code) and the engine module with relaxed SIMD.
  cargo clippy -p cobordism-worker -p cobordism-engine-bench --target wasm32-unknown-unknown \
    --features cobordism-worker/fault-injection,cobordism-engine-bench/relaxed-simd -- -D warnings
}
stage_build() { need "${all_builds[@]}"; }
stage_build-quick() { need host_tools cli native_tests worker worker_plain worker_test; }
stage_fixtures() { scripts/check-fixtures.sh; }
stage_native() {
  need native_tests
  cargo test "${native_tests[@]}"
}
stage_aarch64() {
  need cross_tests
  # qemu's default CPU (max) has FEAT_DotProd: both NEON backends run every test. A Cortex-A72
  # has no dot product: NEON alone must be chosen there.
  cargo test -p kquant --target aarch64-unknown-linux-gnu
  QEMU_CPU=cortex-a72 cargo test -p kquant --target aarch64-unknown-linux-gnu --test bit_exact -- the_simd_backend_is_selected
}
stage_no-fma() {
  need native_tests cross_tests
  scripts/check-no-fma.sh
}
stage_wasm32() {
  need cross_tests
  cargo test -p kquant --target wasm32-wasip1
}
stage_wasm-valid() {
  need no_std cross_tests engine worker worker_plain worker_test
  scripts/check-wasm.sh target/wasm32-wasip1/debug/deps/*.wasm \
    target/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm target/worker-plain/build/*.wasm
  scripts/check-wasm.sh --relaxed target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm \
    worker/build/*.wasm target/worker-test/build/*.wasm
}
# The shard Worker and both packages' wasm built again from one commit in a clean target
# directory: byte for byte what the build stage made (a user checks a deployed shard's module
# against /healthz's module_sha256 so).
stage_reproducible() {
  need worker client_js kquant_js
  local dir=target/reproducible files=0
  rm -rf "$dir"
  CARGO_TARGET_DIR=$dir/target scripts/build-worker.sh --out "$dir/worker"
  CARGO_TARGET_DIR=$dir/target scripts/build-wasm-package.sh --out "$dir/client" client-js packages/client
  CARGO_TARGET_DIR=$dir/target scripts/build-wasm-package.sh --relaxed --out "$dir/kquant" kquant-js packages/kquant
  for pair in "worker/build $dir/worker" "packages/client/dist $dir/client" "packages/kquant/dist $dir/kquant"; do
    read -r shipped again <<<"$pair"
    for file in "$again"/*; do
      cmp "$shipped/$(basename "$file")" "$file" || { echo "reproducible: $file differs" >&2; return 1; }
      files=$((files + 1))
    done
  done
  echo "equal: $files files of two builds"
  rm -rf "$dir"
}
stage_engine() {
  need engine
  # The harness once (its figures are not a measurement): kernels, idioms, both Q6_K layouts (their
  # bits compared on every row), the two builds side by side.
  node benches/engine/run.mjs --runs 1 --jobs idioms,kernels,layout,relaxed
  # The int8 kernels, plain and relaxed SIMD, against the scalar backend (300 cases each).
  node benches/engine/run.mjs --jobs check
  node benches/engine/run.mjs --jobs check --wasm target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm
}
stage_workerd() {
  need cli worker worker_plain worker_test
  # (tests/worker/deploy.test.mjs has wrangler read the configs `cobordism deploy` makes.)
  node --test tests/worker/
}
stage_kquant-js() {
  need kquant_js
  node --test packages/kquant/test/
  scripts/test-packed.sh kquant # installed from its tarball outside the repository
}
stage_client-js() {
  need cli worker client_js
  node --test packages/client/test/
  scripts/test-packed.sh client
}
stage_fuzz() {
  need fuzz
  scripts/fuzz.sh 30
}
stage_demo() {
  need cli worker
  target/release/cobordism demo --shape tiny --workdir target/demo-ci
  # The README's other demo forms: object residency, and a GGUF of one's own (~10 s both).
  target/release/cobordism demo --shape tiny --residency object --workdir target/demo-ci
  target/release/cobordism demo --gguf target/demo-ci/tiny-q6_k-seed1.gguf --shards 4 --workdir target/demo-ci
}
stage_must-fail() { scripts/must-fail.sh; }
stage_bit-exact() {
  need native_tests cross_tests engine worker worker_plain cli
  scripts/bit-exact.sh --built
}

# ---- running, timing, counting -----------------------------------------------------------------------
mkdir -p target/test-logs
rows=() passed=0 total_tests=0
# Tests a stage's log reports: cargo's "test result: ok. N passed", node's "# pass N" (TAP) or
# "ℹ pass N" (spec reporter), and the scripts' own checks (must-fail lines, bit-exact columns, fuzz targets).
count_tests() {
  awk '
    /test result: ok\. [0-9]+ passed/ { for (i = 1; i <= NF; i++) if ($i == "passed;") n += $(i - 1) }
    /^(# |ℹ )pass [0-9]+$/ { n += $NF }
    /^must-fail .*: built, / { n++ }
    /^equal: / { n++ }
    /^int8 check in workerd: [0-9]+ cases, 0 results differ/ { n++ }
    /^\| [a-z_]+ \| [0-9]+ \| .* \| ok \|$/ { n++ }
    END { print n + 0 }' "$1"
}
summary() {
  local status=$? table
  table=$(printf '| stage | seconds | tests |\n|---|---:|---:|\n'; printf '%s\n' "${rows[@]}")
  printf '\n%s\n' "$table"
  printf '%s\n' "$table" >target/test-times.md
  if [ "$status" -eq 0 ]; then
    echo "tests reported by the runners: $total_tests"
    echo "scripts/test.sh: $passed passed, 0 failed"
  else
    echo "scripts/test.sh: $passed passed, 1 failed ($current)"
  fi
}
trap summary EXIT
for current in "${selected[@]}"; do
  printf '\n\033[1;32m==> %s\033[0m\n' "$current"
  log=target/test-logs/$current.log
  start=$(date +%s.%N)
  "stage_$current" > >(tee "$log") 2>&1
  wait $! 2>/dev/null || true # tee has written the whole log
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  tests=$(count_tests "$log")
  rows+=("| $current | $seconds | $tests |") passed=$((passed + 1)) total_tests=$((total_tests + tests))
  printf '\033[1;32m<== %s: %s s, %s tests\033[0m\n' "$current" "$seconds" "$tests"
done

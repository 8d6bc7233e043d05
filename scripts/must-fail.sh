#!/usr/bin/env bash
# The must-fail matrix: each perturbation puts in one plausible bug (KQUANT_PERTURB=… for kquant,
# SHARD_PERTURB=… for crates/shard, PROTOCOL_PERTURB=… for crates/protocol; their build scripts
# turn it into `--cfg kquant_perturb="…"` for that crate alone, see crates/perturb), and the named
# tests must (1) build and (2) fail, in their own assertions — a build error or some other failure
# is a failed check. Each crate's must-fail.txt lists its perturbations, their targets and tests
# (kquant: the bit-exact suite and the independent oracle on x86_64 and wasm32 under Node, the
# reduction order also on aarch64 under qemu). Then the relaxed int8 kernels' operand order in
# workerd: the engine module's int8 check and the shard over HTTP.
#
# Only the perturbed crate and what depends on it recompile: the builds share the tests' target
# directory, whose dependencies are built already. The next ordinary build recompiles those
# crates once more without the bug (their build scripts see the variable unset), which is why
# scripts/test.sh runs this last. Logs and the summary: target/must-fail. How to add a
# perturbation: docs/TESTING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS
out=target/must-fail
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary.new"
# must_fail CRATE PERTURBATION "TARGET …" "BINARY:TEST …": the crate's named test binaries build
# with the perturbation (its variable set by the caller) for every target at once (one cargo
# invocation: the targets compile in parallel), then each named test fails in its assertions on
# each target.
must_fail() {
  local crate=$1 perturbation=$2 targets=$3 entries=$4 log="$out/build.log" entry binary t target
  local binaries target_flags
  binaries=$(for entry in $entries; do echo "--test ${entry%%:*}"; done | sort -u)
  target_flags=$(for target in $targets; do echo "--target $target"; done)
  # shellcheck disable=SC2086 # one word per flag
  cargo test -q -p "$crate" $target_flags $binaries --no-run >"$log" 2>&1 ||
    { cat "$log"; echo "must-fail $perturbation on $targets: the suite did not build" >&2; exit 1; }
  for target in $targets; do
    log="$out/$target.log"
    # One test per run: on wasm32 a panic aborts the whole test binary.
    for entry in $entries; do
      binary=${entry%%:*} t=${entry#*:}
      if cargo test -p "$crate" --target "$target" --test "$binary" -- --exact "$t" --nocapture \
        >"$log" 2>&1; then
        cat "$log"; echo "must-fail $perturbation on $target: $t PASSED" >&2; exit 1
      fi
      grep -q "panicked at crates/${crate#cobordism-}/tests/" "$log" ||
        { cat "$log"; echo "must-fail $perturbation on $target: $t failed, not in its assertion" >&2; exit 1; }
    done
    echo "must-fail $perturbation on $target: built, failed as expected: $entries" | tee -a "$summary.new"
  done
}
# every_line CRATE VARIABLE: each perturbation of the crate's must-fail.txt (NAME TARGETS TEST…;
# the one list, which its build script reads too) through must_fail, with VARIABLE=NAME. A name
# with no tests is checked by a step of its own below.
every_line() {
  local crate=$1 variable=$2 name targets tests
  while read -r name targets tests; do
    [ -n "$tests" ] || continue
    export "$variable=$name"
    must_fail "$crate" "$name" "${targets//,/ }" "$tests" </dev/null
    unset "$variable"
  done < <(grep -Ev '^[[:space:]]*(#|$)' "crates/${crate#cobordism-}/must-fail.txt")
}
# The shard: the coalescer's, the ranged load's, the waiting's, the settings', the request
# pipeline's and object residency's native tests. The protocol: access during a rotation.
every_line cobordism-shard SHARD_PERTURB
every_line cobordism-protocol PROTOCOL_PERTURB
# kquant after them: until now kquant is the tests' own build, so the perturbations above
# recompile the shard or the protocol alone.
every_line kquant KQUANT_PERTURB
# In workerd, the relaxed build's int8 kernels (which Node 20 cannot run right): with the signed
# activations in the 7-bit operand (what LLVM once chose on its own), the interleaved layout's
# kernel with its half blocks' activations swapped, and its four-row passes with two rows'
# sums swapped, the engine module's int8 check must find other bits. Built in a target directory
# of its own, so that target/engine-relaxed keeps the correct module.
log=$out/relaxed.log
module=target/must-fail-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm
for perturbation in interleaved four_rows signed_i7; do
  export KQUANT_PERTURB=$perturbation
  cargo build -q -p cobordism-engine-bench --release --target wasm32-unknown-unknown \
    --features relaxed-simd --target-dir target/must-fail-relaxed >"$log" 2>&1 ||
    { cat "$log"; echo "must-fail $perturbation: the relaxed engine module did not build" >&2; exit 1; }
  if node benches/engine/run.mjs --jobs check --wasm "$module" >"$log" 2>&1; then
    cat "$log"; echo "must-fail $perturbation in workerd: the int8 check PASSED" >&2; exit 1
  fi
  grep -q "results differ from the scalar backend's" "$log" ||
    { cat "$log"; echo "must-fail $perturbation in workerd: failed, not in the int8 check" >&2; exit 1; }
  echo "must-fail $perturbation in workerd (relaxed build): built, the int8 check found other bits" |
    tee -a "$summary.new"
done
# …and the shard built with signed_i7 (still set) must give other bits over HTTP than native kquant.
scripts/build-worker.sh --out "$out/worker/build" >"$log" 2>&1 ||
  { cat "$log"; echo "must-fail signed_i7: the relaxed shard did not build" >&2; exit 1; }
if COBORDISM_RELAXED_SHARD="$out/worker/build/index.js" \
  node --test --test-name-pattern="relaxed shard build" tests/worker/kernels.test.mjs >"$log" 2>&1; then
  cat "$log"; echo "must-fail signed_i7 over HTTP: the shard's kernel test PASSED" >&2; exit 1
fi
grep -q "differs from native" "$log" ||
  { cat "$log"; echo "must-fail signed_i7 over HTTP: failed, not in the bits' comparison" >&2; exit 1; }
echo "must-fail signed_i7 over HTTP (relaxed shard in workerd): built, its int8 bits differ from native" | tee -a "$summary.new"
mv "$summary.new" "$summary"

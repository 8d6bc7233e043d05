#!/usr/bin/env bash
# The must-fail matrix: each perturbation puts in one plausible bug (KQUANT_PERTURB=… for kquant,
# SHARD_PERTURB=… for crates/shard; their build scripts turn it into `--cfg kquant_perturb="…"`
# for that crate alone, see crates/perturb), and the named tests must (1) build and (2) fail, in
# their own assertions — a build error or some other failure is a failed check. kquant: the
# bit-exact suite (tests/bit_exact.rs) and the independent oracle (tests/oracle.rs) on x86_64 and
# wasm32 (Node), the reduction order also on aarch64 under qemu. The shard: the coalescer's and the
# ranged load's native tests. Then the relaxed int8 kernels' operand order in workerd: the engine
# module's int8 check and the shard over HTTP.
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
# perturbation → the tests (test-binary:test) that must catch it
declare -A expected=(
  [order]="bit_exact:random_shapes_agree_on_every_backend bit_exact:batches_equal_single_vectors oracle:exact_mode_every_backend_equals_the_oracle_on_random_shapes"
  [lane]="bit_exact:random_shapes_agree_on_every_backend bit_exact:edge_cases_agree_on_every_backend oracle:exact_mode_every_backend_equals_the_oracle_on_random_shapes"
  [f16]="bit_exact:golden_hashes_are_the_same_on_every_architecture oracle:exact_mode_every_backend_equals_the_oracle_on_random_shapes"
  [q4k_min]="bit_exact:golden_hashes_are_the_same_on_every_architecture oracle:exact_mode_every_backend_equals_the_oracle_on_random_shapes"
  [ties]="oracle:int8_mode_every_backend_equals_the_oracle_on_random_shapes"
)
targets() {
  case $1 in
    order) echo x86_64-unknown-linux-gnu wasm32-wasip1 aarch64-unknown-linux-gnu ;;
    *) echo x86_64-unknown-linux-gnu wasm32-wasip1 ;;
  esac
}
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
# The shard (crates/shard): its native tests must catch a pass that mixes up its requests, ranged
# loads that keep two versions' bytes or checksum bytes not yet in, a request that does not wait
# for another's load, settings that let an out-of-range LOAD_STREAMS through, and a request
# pipeline that reads the body before checking its declared length.
declare -A shard_expected=(
  [pass_slices]="coalesce:ready_requests_join_one_pass_and_get_the_bits_they_get_alone coalesce:a_pass_holds_at_most_eight_vectors"
  [mixed_precision]="coalesce:precisions_and_forms_never_mix_in_a_way_that_changes_an_answer"
  [any_etag]="ranged_load:an_object_written_between_two_reads_is_never_kept"
  [unordered_hash]="ranged_load:ranges_arriving_out_of_order_give_the_models_bits"
  [wait_gives_up]="waiting:a_request_that_finds_the_slice_loading_waits_for_that_load"
  [any_streams]="settings:values_out_of_range_or_not_numbers_are_refused"
  [body_first]="pipeline:a_length_over_the_slices_cap_is_413_before_a_byte_of_the_body_is_read"
)
for perturbation in pass_slices mixed_precision any_etag unordered_hash wait_gives_up any_streams body_first; do
  SHARD_PERTURB=$perturbation must_fail cobordism-shard "$perturbation" x86_64-unknown-linux-gnu "${shard_expected[$perturbation]}"
done
# kquant after the shard: until now kquant is the tests' own build, so the shard's perturbations
# recompile the shard alone.
for perturbation in order lane f16 q4k_min ties; do
  KQUANT_PERTURB=$perturbation must_fail kquant "$perturbation" "$(targets "$perturbation")" "${expected[$perturbation]}"
done
# The relaxed int8 kernels with the signed activations in the 7-bit operand (what LLVM once
# chose on its own): the engine module's int8 check must find other bits in workerd.
log=$out/relaxed.log
export KQUANT_PERTURB=signed_i7
cargo build -q -p cobordism-engine-bench --release --target wasm32-unknown-unknown --features relaxed-simd \
  --target-dir target/engine-relaxed >"$log" 2>&1 ||
  { cat "$log"; echo "must-fail signed_i7: the relaxed engine module did not build" >&2; exit 1; }
if node benches/engine/run.mjs --jobs check \
  --wasm target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm >"$log" 2>&1; then
  cat "$log"; echo "must-fail signed_i7 in workerd: the int8 check PASSED" >&2; exit 1
fi
grep -q "results differ from the scalar backend's" "$log" ||
  { cat "$log"; echo "must-fail signed_i7 in workerd: failed, not in the int8 check" >&2; exit 1; }
echo "must-fail signed_i7 in workerd (relaxed build): built, the int8 check found other bits" | tee -a "$summary.new"
# …and the shard built with it must give other bits over HTTP than native kquant.
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

#!/usr/bin/env bash
# The must-fail check: with `--cfg kquant_perturb_order` every backend but scalar breaks the
# canonical order, and the bit-exact suite must (1) build and (2) fail in the tests that compare
# backends — a build error or some other failure is a failed check, not the expected failure.
# Built in its own target directory (target/must-fail), once per target.
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS
export CARGO_TARGET_DIR=target/must-fail
# These replace .cargo/config.toml's per-target rustflags, so simd128 is repeated for wasm.
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="--cfg kquant_perturb_order"
export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C target-feature=+simd128 --cfg kquant_perturb_order"
expected=(random_shapes_agree_on_every_backend batches_equal_single_vectors edge_cases_agree_on_every_backend)
for target in x86_64-unknown-linux-gnu wasm32-wasip1; do
  log="$CARGO_TARGET_DIR/$target.log"
  mkdir -p "$CARGO_TARGET_DIR"
  cargo test -q -p kquant --target "$target" --test bit_exact --no-run >"$log" 2>&1 ||
    { cat "$log"; echo "must-fail on $target: the perturbed suite did not build" >&2; exit 1; }
  # One test per run: on wasm32 a panic aborts the whole test binary.
  for t in "${expected[@]}"; do
    if cargo test -p kquant --target "$target" --test bit_exact -- --exact "$t" --nocapture \
      >"$log" 2>&1; then
      cat "$log"; echo "must-fail on $target: $t PASSED with a perturbed order" >&2; exit 1
    fi
    # The expected failure is the suite's own assertion, not a crash elsewhere.
    grep -q "panicked at crates/kquant/tests/" "$log" ||
      { cat "$log"; echo "must-fail on $target: $t failed, but not in its assertion" >&2; exit 1; }
  done
  echo "must-fail on $target: built, failed as expected: ${expected[*]}"
done

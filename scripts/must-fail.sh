#!/usr/bin/env bash
# The must-fail matrix: each `--cfg kquant_perturb="…"` puts in one plausible bug (see
# crates/kquant/Cargo.toml), and the bit-exact suite must (1) build and (2) fail in the named
# tests, in their own assertions — a build error or some other failure is a failed check.
# Built in its own target directory (target/must-fail).
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTFLAGS
export CARGO_TARGET_DIR=target/must-fail
# perturbation → the tests that must catch it
declare -A expected=(
  [order]="random_shapes_agree_on_every_backend batches_equal_single_vectors edge_cases_agree_on_every_backend"
  [lane]="random_shapes_agree_on_every_backend edge_cases_agree_on_every_backend"
  [f16]="golden_hashes_are_the_same_on_every_architecture"
)
for perturbation in order lane f16; do
  cfg="--cfg kquant_perturb=\"$perturbation\""
  # These replace .cargo/config.toml's per-target rustflags, so simd128 is repeated for wasm.
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="$cfg"
  export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C target-feature=+simd128 $cfg"
  for target in x86_64-unknown-linux-gnu wasm32-wasip1; do
    log="$CARGO_TARGET_DIR/$target.log"
    mkdir -p "$CARGO_TARGET_DIR"
    cargo test -q -p kquant --target "$target" --test bit_exact --no-run >"$log" 2>&1 ||
      { cat "$log"; echo "must-fail $perturbation on $target: the suite did not build" >&2; exit 1; }
    # One test per run: on wasm32 a panic aborts the whole test binary.
    for t in ${expected[$perturbation]}; do
      if cargo test -p kquant --target "$target" --test bit_exact -- --exact "$t" --nocapture \
        >"$log" 2>&1; then
        cat "$log"; echo "must-fail $perturbation on $target: $t PASSED" >&2; exit 1
      fi
      grep -q "panicked at crates/kquant/tests/" "$log" ||
        { cat "$log"; echo "must-fail $perturbation on $target: $t failed, not in its assertion" >&2; exit 1; }
    done
    echo "must-fail $perturbation on $target: built, failed as expected: ${expected[$perturbation]}"
  done
done

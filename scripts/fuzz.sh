#!/usr/bin/env bash
# Short fuzz runs (cargo fuzz, nightly) of every target from the committed seed corpora; prints
# executions and coverage per target. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET…];
# `scripts/fuzz.sh --build` only builds them (scripts/test.sh's build stage).
# New corpus entries go to target/fuzz-corpus, crashes to fuzz/artifacts (both uncommitted);
# a crash fails the run — fix it and add a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS
cd fuzz
# Every target in one build (a failed build prints its errors).
mkdir -p ../target
build() { cargo +nightly fuzz build -O >../target/fuzz-build.log 2>&1 || { cat ../target/fuzz-build.log; exit 1; }; }
if [ "${1:-}" = --build ]; then build; exit 0; fi
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_reader kernels manifest request adjust)
build
# libFuzzer runs one process per target: as many targets at once as there are cores
# (FUZZ_JOBS), each for the full SECONDS_PER_TARGET; the table follows in target order.
jobs=${FUZZ_JOBS:-$(nproc)}
run() { # target → its log; the exit status of the run
  mkdir -p "../target/fuzz-corpus/$1"
  cargo +nightly fuzz run -O "$1" "../target/fuzz-corpus/$1" "corpus/$1" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    >"../target/fuzz-$1.log" 2>&1
}
declare -A pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run "$t" &
  pids[$t]=$!
done
printf '| target | seconds | executions | coverage (edges) | features | result |\n|---|---:|---:|---:|---:|---|\n' >../target/fuzz-summary.md
failed=()
for t in "${targets[@]}"; do
  log=../target/fuzz-$t.log
  if wait "${pids[$t]}"; then result=ok; else result=CRASH failed+=("$t"); fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || echo '?')
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || echo '?')
  printf '| %s | %s | %s | %s | %s | %s |\n' "$t" "$seconds" "$execs" "$cov" "$ft" "$result" | tee -a ../target/fuzz-summary.md
done
for t in ${failed[@]+"${failed[@]}"}; do
  echo "--- fuzz target $t (target/fuzz-$t.log):"
  tail -n 40 "../target/fuzz-$t.log"
done
[ ${#failed[@]} -eq 0 ]

#!/usr/bin/env bash
# Short fuzz runs (cargo fuzz, nightly) of every target from the committed seed corpora; prints
# executions and coverage per target. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET…]
# New corpus entries go to target/fuzz-corpus, crashes to fuzz/artifacts (both uncommitted);
# a crash fails the run — fix it and add a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
unset RUSTFLAGS
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_reader kernels manifest request)
cd fuzz
cargo +nightly fuzz build -O "${targets[@]/#/}" >/dev/null 2>&1 || cargo +nightly fuzz build -O
printf '| target | seconds | executions | coverage (edges) | features | result |\n|---|---:|---:|---:|---:|---|\n' >../target/fuzz-summary.md
for t in "${targets[@]}"; do
  work=../target/fuzz-corpus/$t
  mkdir -p "$work"
  log=../target/fuzz-$t.log
  if cargo +nightly fuzz run -O "$t" "$work" "corpus/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
      >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || echo '?')
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || echo '?')
  printf '| %s | %s | %s | %s | %s | %s |\n' "$t" "$seconds" "$execs" "$cov" "$ft" "$result" | tee -a ../target/fuzz-summary.md
  if [ "$result" != ok ]; then
    tail -n 40 "$log"
    exit 1
  fi
done

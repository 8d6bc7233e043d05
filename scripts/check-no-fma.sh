#!/usr/bin/env bash
# No fused multiply-add in kquant's kernels: the canonical order is separate multiplies and
# adds, and an FMA (AVX-512 and NEON both have them) would round once where the contract rounds
# twice. Disassembles the x86_64 and aarch64 bit-exact test binaries that scripts/test.sh built
# (every backend, runtime-selected ones included) and fails on any FMA instruction inside a
# function whose name contains `kquant`. It first proves it can fail: a fixture with one FMA per
# architecture must be caught. (wasm has no FMA without relaxed SIMD, which check-wasm.sh refuses.)
set -euo pipefail
cd "$(dirname "$0")/.."

# FMA mnemonics: x86 vfmadd/vfmsub/vfnmadd/vfnmsub…, aarch64 fmla/fmls and fmadd/fmsub/fnmadd/fnmsub.
fma_in_kquant() { # objdump file → prints offending lines; exits 0 if there are any
  "$1" -d -C --no-show-raw-insn "$2" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $0; keep = (fn ~ /kquant/) }
    keep && $0 ~ /[ \t](vfn?m(add|sub)[0-9a-z]*|fml[as]|fn?m(add|sub))[ \t]/ { print fn; print; n++ }
    END { exit n > 0 ? 0 : 1 }'
}

newest() { ls -t $1 2>/dev/null | grep -v '\.d$' | head -n 1; }

work=target/check-no-fma
mkdir -p "$work"
printf 'kquant_fixture:\n vfmadd231ps %%ymm0, %%ymm1, %%ymm2\n ret\n' | as -o "$work/x86.o"
printf 'kquant_fixture:\n fmla v0.4s, v1.4s, v2.4s\n ret\n' | aarch64-linux-gnu-as -o "$work/arm.o"
for pair in "objdump $work/x86.o" "aarch64-linux-gnu-objdump $work/arm.o"; do
  read -r dump file <<<"$pair"
  fma_in_kquant "$dump" "$file" >/dev/null ||
    { echo "check-no-fma: the check missed the FMA in $file" >&2; exit 1; }
done

status=0
for pair in "objdump target/debug/deps/bit_exact-*" \
  "aarch64-linux-gnu-objdump target/aarch64-unknown-linux-gnu/debug/deps/bit_exact-*"; do
  read -r dump pattern <<<"$pair"
  file=$(newest "$pattern")
  [ -n "$file" ] || { echo "check-no-fma: no binary matches $pattern (run the tests first)" >&2; exit 1; }
  functions=$("$dump" -d -C "$file" | grep -c '^[0-9a-f]* <.*kquant.*>:$' || true)
  [ "$functions" -gt 0 ] || { echo "check-no-fma: no kquant function in $file" >&2; exit 1; }
  if fma_in_kquant "$dump" "$file" | head -n 20; then
    echo "check-no-fma: FMA instructions in kquant's code in $file" >&2
    status=1
  else
    echo "ok (no FMA in $functions kquant functions): $file"
  fi
done
exit $status

#!/usr/bin/env bash
# Builds llama.cpp's ggml wasm simd128 kernels (quantize_row_q8_K, ggml_vec_dot_q6_K_q8_K,
# ggml_vec_dot_q4_K_q8_K from src/ggml-cpu/arch/wasm/quants.c) into a standalone wasm module
# for the engine benchmark, target/ggml-wasm/ggml.wasm, with benches/engine/ggml/harness.c.
# The flags are those of ggml's own wasm build: CMake's Release (-O3 -DNDEBUG), C11, and the
# -msimd128 that ggml-cpu's CMakeLists.txt adds under Emscripten (no relaxed SIMD, no fast math).
# Installs nothing: without clang, wasm-ld, the WASI libc or clang's wasm32 builtins (Debian:
# apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32; scripts/setup.sh bench does it)
# it says which is missing in one line on stderr and exits 0 without a module.
# Prints the module's path when it built one.
# Usage: GGML_SRC=$(scripts/fetch-ggml.sh) scripts/build-ggml-wasm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/target/ggml-wasm
rm -f "$out/ggml.wasm"
skip() {
  echo "ggml wasm not built ($1): the engine benchmark leaves ggml out" >&2
  exit 0
}
src=${GGML_SRC:-}
[ -n "$src" ] && [ -f "$src/src/ggml-cpu/arch/wasm/quants.c" ] ||
  skip "no ggml source: GGML_SRC=\$(scripts/fetch-ggml.sh)"
cc=${WASM_CC:-clang}
command -v "$cc" >/dev/null || skip "no $cc"
target=(--target=wasm32-wasi)
# wasm-ld as clang runs it (Debian's clang finds lld's wasm-ld-14 under its own name).
ld=$("$cc" "${target[@]}" -print-prog-name=wasm-ld)
command -v "$ld" >/dev/null || skip "no wasm-ld (lld)"
# The WASI libc: a sysroot of its own (wasi-sdk's layout), or Debian's multiarch directories,
# which clang searches for this target by itself.
sysroot=${WASI_SYSROOT:-/usr/share/wasi-sysroot}
if [ -f "$sysroot/lib/wasm32-wasi/libc.a" ]; then
  target+=(--sysroot="$sysroot")
elif [ ! -f /usr/lib/wasm32-wasi/libc.a ] || [ ! -f /usr/include/wasm32-wasi/stdlib.h ]; then
  skip "no WASI libc (wasi-libc)"
fi
builtins=$("$cc" "${target[@]}" -print-libgcc-file-name)
[ -f "$builtins" ] || skip "no clang builtins for wasm32 ($builtins)"

mkdir -p "$out"
flags=(-O3 -DNDEBUG -std=c11 -msimd128 -I"$src/include" -I"$src/src" -I"$src/src/ggml-cpu")
# ggml's file as it is; the harness with warnings on (ggml's headers' unused statics aside).
"$cc" "${target[@]}" "${flags[@]}" -c "$src/src/ggml-cpu/arch/wasm/quants.c" -o "$out/quants.o"
"$cc" "${target[@]}" "${flags[@]}" -Wall -Wextra -Werror -Wno-unused-function \
  -c benches/engine/ggml/harness.c -o "$out/harness.o"
# A reactor without a start function: the harness's exports and the memory, nothing imported.
"$cc" "${target[@]}" -nostartfiles -Wl,--no-entry \
  "$out/harness.o" "$out/quants.o" -o "$out/ggml.wasm.tmp"
mv "$out/ggml.wasm.tmp" "$out/ggml.wasm"
echo "$out/ggml.wasm"

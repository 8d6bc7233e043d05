#!/usr/bin/env bash
# Regenerates docs/BENCHMARKS.md and docs/benchmarks.svg in one run: first the wasm kernels where
# users run them, in workerd beside Node (benches/engine: the same module and harness in both,
# with the memory floor, llama.cpp's ggml and candle's simd128 kernels, batches, kquant's layouts
# and the simd128 idioms), then kquant per backend and mode next to
# the memory floor (native and wasm32 under Node), the candle-core peer (native and wasm), the
# JavaScript package against plain JS, the shard end to end in workerd (with its per-request
# overhead), and callgrind instruction counts. Takes about 12 minutes. Usage: scripts/bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-9}
scripts/setup.sh bench >/dev/null
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS
out=$PWD/target/bench && mkdir -p "$out" # absolute: the wasm runs (WASI) have no working directory
wasi() { node --no-warnings=ExperimentalWarning scripts/wasi-run.mjs "$@"; }

echo "building…" >&2
# llama.cpp's ggml, pinned, for the peer table (left out, with a line saying so, without PyPI).
GGML_SRC=$(scripts/fetch-ggml.sh) || { echo "ggml not fetched: the peer table leaves it out" >&2; GGML_SRC=; }
export GGML_SRC
# …and its wasm simd128 kernels for the engine benchmark (left out, with a line saying so,
# without clang, lld and the WASI libc).
GGML_WASM=$(scripts/build-ggml-wasm.sh)
cargo build -q --release -p cobordism-benches -p cobordism-peers -p cobordism
cargo build -q --release -p cobordism-benches -p cobordism-peers --target wasm32-wasip1
cargo build -q --release -p cobordism-engine-bench --target wasm32-unknown-unknown
# The engine module with candle's kernel, in its own target dir (its getrandom backend is a cfg,
# which would otherwise rebuild the shared wasm32 artifacts): see benches/engine/Cargo.toml.
cargo build -q --release -p cobordism-engine-bench --features candle --target wasm32-unknown-unknown \
  --target-dir target/engine-candle \
  --config 'target.wasm32-unknown-unknown.rustflags=["--cfg","getrandom_backend=\"wasm_js\""]'
# …and with kquant's relaxed-SIMD backend (the int8 dot products), in its own target dir.
cargo build -q --release -p cobordism-engine-bench --features relaxed-simd --target wasm32-unknown-unknown \
  --target-dir target/engine-relaxed
scripts/check-wasm.sh --relaxed target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm >&2
scripts/check-wasm.sh target/wasm32-wasip1/release/kernel-timing.wasm \
  target/wasm32-wasip1/release/peer-timing.wasm \
  target/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm \
  target/engine-candle/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm \
  ${GGML_WASM:+"$GGML_WASM"} >&2
scripts/build-worker.sh >/dev/null
COBORDISM_WASM_SIMD=plain scripts/build-worker.sh --out target/worker-plain/build >/dev/null
scripts/build-kquant-js.sh >/dev/null

echo "wasm kernels in workerd and Node…" >&2
node benches/engine/run.mjs --runs "$runs" --procs 3 --jobs kernels,candle,batches,layout,relaxed,idioms \
  --ggml-wasm="$GGML_WASM" >"$out/engine.md"
echo "kquant native / wasm…" >&2
target/release/kernel-timing "$runs" --json "$out/native.jsonl" >"$out/native.md"
wasi target/wasm32-wasip1/release/kernel-timing.wasm "$runs" --json "$out/wasm.jsonl" >"$out/wasm.md"
echo "kquant aarch64 under qemu (emulated)…" >&2
cargo build -q --release -p cobordism-benches --bin kernel-timing --target aarch64-unknown-linux-gnu
qemu-aarch64 -L /usr/aarch64-linux-gnu target/aarch64-unknown-linux-gnu/release/kernel-timing 3 \
  >"$out/aarch64.md"
echo "candle native / wasm…" >&2
target/release/peer-timing "$runs" --json "$out/peer-native.jsonl" >"$out/peer-native.md"
wasi target/wasm32-wasip1/release/peer-timing.wasm "$runs" --json "$out/peer-wasm.jsonl" >"$out/peer-wasm.md"
echo "JavaScript…" >&2
node packages/kquant/bench/matvec.mjs --runs "$runs" >"$out/js.md" 2>/dev/null
echo "shard in workerd…" >&2
node benches/http/shard-bench.mjs --runs "$runs" 2>/dev/null | grep '^|' >"$out/http.md"
echo "callgrind…" >&2
{
  echo "| format | backend | mode | instructions (1024 × 5376) | per 256-weight block |"
  echo "|---|---|---|---:|---:|"
  for ty in q6_k q4_k; do
    for b in scalar sse2 avx2; do
      for mode in exact int8; do
        n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
          --toggle-collect='*mat_vec_with*' --toggle-collect='*mat_mat_int8_with*' \
          target/release/kernel-once "$ty" "$b" 1024 5376 "$mode" 2>&1 |
          grep -oE 'Collected : [0-9]+' | grep -oE '[0-9]+')
        echo "| $ty | $b | $mode | $n | $((n / (1024 * 21))) |"
      done
    done
  done
} >"$out/callgrind.md"
node benches/chart.mjs docs/benchmarks.svg "$out/native.jsonl" "$out/peer-native.jsonl" \
  "$out/wasm.jsonl" "$out/peer-wasm.jsonl" >&2

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
{
  cat <<HEAD
# Benchmarks

Generated by \`scripts/bench.sh $runs\` on $(date -u +%Y-%m-%d) — $cpu, $(nproc) cores (shared
virtual machine), $(rustc --version | cut -d' ' -f1-2), Node $(node --version). Single thread
everywhere. Medians of $runs runs after a warm-up; every ratio compares numbers of the same run.
GB/s counts the quantized weights streamed. The memory floor is a sequential read of the same
bytes. ![GB/s per kernel](benchmarks.svg)

Modes: **exact** is the canonical f32 order (bit-identical on every backend, ~1e-7 relative
error); **int8** is the opt-in fast mode (x quantized to 8 bits per 256 columns, exact integer
sums, still bit-identical on every backend, ~7e-3 of max |y| like candle and ggml, which
always quantize x).

## Where users run it: the wasm kernels in workerd (V8 14.7) beside Node 20 (V8 11.3)

\`node benches/engine/run.mjs\`: one wasm module (\`benches/engine\`, plain exports) and one
harness in both runtimes, each job in a fresh process; workerd $(node -p 'require("workerd/package.json").version'),
medians of $runs. "First call" is the first mat-vec after the module loaded (what a cold
request's compute pays); the memory floor is a sequential read of the same bytes in the same
engine. The idioms (first table) are the simd128 operations the kernels are built from, each
alone on 16 KiB in L1. Batches are the int8 mode over 1–8 vectors (speculative decoding). The
layout table runs the Q6_K kernels with the blocks in ggml's layout and in kquant's packed6
layout (\`cobordism slice --layout packed6\`; same bytes per block), after checking that both
give the same bits on every row. Then llama.cpp's ggml wasm simd128 kernels — the reference —
and candle-core's (both quantize x to 8 bits, like the int8 mode) beside kquant's in the same
runtimes, alternated call by call on the same bytes (each round starting one kernel later), each
cell workerd / Node: ggml from its own module (\`scripts/build-ggml-wasm.sh\`: the pinned
source's \`arch/wasm/quants.c\` with clang at ggml's own wasm flags, \`-O3 -msimd128\`), x
quantized to Q8_K once per mat-vec and one \`ggml_vec_dot_q{6,4}_K_q8_K\` per row, its results
first checked against kquant int8's (the same Q8_K blocks: they differ only by float rounding,
the column says how much); candle from the engine module built with candle. "kquant int8 / ggml
speed" is ggml's time over kquant int8's (above 1: kquant faster). The last table runs the int8
kernels of the module built plain and with kquant's \`relaxed-simd\` feature (relaxed SIMD's 8-bit
dot product, whose results are exact for the operands it gets:
\`crates/kquant/src/arch/wasm32/simd128.rs\`; the build the shard ships), both in one workerd
process, alternated call by call with two read-only passes over the same bytes (each 64-byte line
touched once; every byte loaded into a \`v128\`): "/ floor" is a kernel's time per vector over the
faster of the two (workerd only: Node 20's relaxed SIMD is not the final instruction). Each of its
rows is three such workerd processes, every figure and ratio the median of the three processes' own
(one kernel's time moved up to 1.5× between processes). Its ", interleaved" rows run the same case
with the blocks in kquant's interleaved layout (\`cobordism slice --layout interleaved\`, same bytes
per block, same bits, checked on every row first), whose int8 kernel multiplies a register of
products by one of scales instead of a splat per scale group (on the plain build that kernel is
slower than its ggml one); the exact mode on that layout converts each row back to ggml's first (not
timed here: ~3.8× ggml's time in V8, docs/BENCHMARKS-notes.md).

$(cat "$out/engine.md")

## kquant, native x86_64

$(cat "$out/native.md")

## kquant, wasm32 simd128 (Node 20, \`wasm32-wasip1\`)

$(cat "$out/wasm.md")

## kquant, aarch64 NEON under qemu-aarch64 (emulated: not a speed measurement)

No aarch64 hardware is available here. Under qemu's emulation floating-point SIMD is computed
in software, so these ratios say little about a real NEON core (integer-heavy int8 gains more
than float-heavy exact); they are kept to show that the NEON backend runs the full shapes.

$(cat "$out/aarch64.md")

## Peers: llama.cpp's ggml and candle-core 0.11.1 (both quantize x to 8 bits, like kquant's int8 mode)

ggml is llama.cpp's CPU backend from the llama-cpp-python 0.3.36 source distribution
(\`scripts/fetch-ggml.sh\`: pinned by version and SHA-256), its quantization kernels compiled
with the host's C compiler at \`-O3 -march=native\` and run as its matmul runs one vector on
one thread: x quantized to Q8_K once, then one \`vec_dot\` per weight row. Native here; its wasm
simd128 kernels are in the first section's table (in workerd and Node), not in the WASI run.
Every kernel of a case, and a sequential read of its bytes (the memory floor), runs alternated
call by call on the same bytes (each round starting one kernel later); kquant's int8 mode on
each of its vector backends (a one-vector pass takes the backend's own integer sums of up to four
blocks at a time, on x86 asking for the next run's bytes to be prefetched, then the canonical
float epilogue block by block), its exact mode on the fastest. "Speed vs ggml" is ggml's time over
the row's (above 1: faster than ggml).

Native:

$(cat "$out/peer-native.md")

wasm32 simd128:

$(cat "$out/peer-wasm.md")

## JavaScript Workers: \`@cobordism/kquant\` against plain JavaScript (Node 20)

$(cat "$out/js.md")

## One shard end to end in workerd (HTTP on loopback, Miniflare)

A cold request streams the slice from the local R2 bucket, checksums it and computes; warm
requests only compute. "wasm memory" is the shard's whole linear memory after loading (one copy
of the slice plus buffers); workerd's RSS also holds the simulated R2 store. The Q6_K slice of
this shape is over the default 100 MiB budget: the benchmark raises it (\`MEMORY_BUDGET_MIB\`);
a deployment cuts such a model into more shards (\`cobordism plan\`). Each slice is served by the
shard's two builds in turn: relaxed SIMD's 8-bit dot product in the int8 kernels
(\`simd128-relaxed\`, what \`scripts/build-worker.sh\` builds and deploys) and plain simd128
(\`COBORDISM_WASM_SIMD=plain\`); "int8 / exact compute" compares the two modes' medians in the
same shard. The compute time is the one the shard measures (whole milliseconds).

$(cat "$out/http.md")

## Instruction counts (callgrind, exact and repeatable)

One mat-vec of 1024 rows × 5376 columns (21,504 blocks), counted with
\`valgrind --tool=callgrind --toggle-collect='*mat_vec_with*' target/release/kernel-once TYPE BACKEND 1024 5376 [int8]\`.

$(cat "$out/callgrind.md")
HEAD
  # The other benchmarks' files, each written by its own script; linked, not copied.
  cat <<'LINKS'
## Serving, cold starts, residency, and what the numbers say

Each in a file of its own, written by its script:

- [BENCHMARKS-serving.md](BENCHMARKS-serving.md): a decoding loop through the inference Worker
  and eight shards, 1 and 16 streams, coalescing off and on (`scripts/serving-bench.sh`);
- [BENCHMARKS-cold.md](BENCHMARKS-cold.md): a shard's slice from R2 paced like production, and
  the first token of eight cold shards with and without a warm-up (`scripts/cold-bench.sh`);
- [BENCHMARKS-residency.md](BENCHMARKS-residency.md): the plain Worker against object residency
  while isolates are replaced as in production (`scripts/residency-bench.sh`);
- [BENCHMARKS-forms.md](BENCHMARKS-forms.md): bytes and time per token of each reply form, and
  what logit bias, penalties and allowed sets add (`scripts/forms-bench.sh`);
- [BENCHMARKS-notes.md](BENCHMARKS-notes.md): what the numbers say, what was tried, and what
  bounds the kernels.
LINKS
} >docs/BENCHMARKS.md
echo "wrote docs/BENCHMARKS.md and docs/benchmarks.svg" >&2

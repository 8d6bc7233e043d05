// The engine benchmark's measurements, shared by Node (node.mjs) and workerd (worker.mjs): the
// same calls on the same wasm module (src/lib.rs), timed with the clock each runtime offers.
// workerd's clock has millisecond steps, so every timed run lasts at least `minMs`.

/// Indices of kquant's own layouts in `Layout::ALL` (the engine module's `layout_setup`).
const [PACKED6, INTERLEAVED] = [1, 2];

/// Imports for the module: none for the kquant build; the build with candle (feature `candle`)
/// keeps a few of wasm-bindgen's, which nothing calls in a benchmark: each throws if it is.
export function imports(module) {
  const out = {};
  for (const { module: m, name, kind } of WebAssembly.Module.imports(module)) {
    if (kind !== "function") throw new Error(`unexpected ${kind} import ${m}.${name}`);
    (out[m] ??= {})[name] = () => {
      throw new Error(`${m}.${name} called: not available in the benchmark`);
    };
  }
  return out;
}

/// The middle value of `a` (the upper of the two middle ones for an even length).
export const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

function name(ex, i) {
  const bytes = new Uint8Array(ex.memory.buffer, ex.idiom_name(i), ex.name_len(i));
  return new TextDecoder().decode(bytes);
}

/// Nanoseconds per operation of each idiom: passes calibrated to last `minMs`, median of `runs`.
export function idioms(ex, now, { runs = 5, minMs = 40 } = {}) {
  const results = [];
  for (let i = 0; i < ex.idiom_count(); i++) {
    let passes = 16;
    for (;;) {
      const t = now();
      ex.idiom(i, passes);
      if (now() - t >= minMs) break;
      passes *= 2;
    }
    const times = [];
    for (let r = 0; r < runs; r++) {
      const t = now();
      ex.idiom(i, passes);
      times.push(now() - t);
    }
    const ns = (median(times) * 1e6) / (passes * ex.idiom_ops(i));
    results.push({ name: name(ex, i), nsPerOp: ns });
  }
  return results;
}

/// Milliseconds per call of `f`, called until `minMs` have passed (one call if it is longer).
function perCall(now, f, minMs) {
  const t = now();
  let calls = 0;
  do {
    f();
    calls++;
  } while (now() - t < minMs);
  return (now() - t) / calls;
}

/// One case's kernel: the first call after setup (what a cold request's compute pays while the
/// engine may still run baseline code), then the median of `runs` warm timings, and the memory
/// floor (a sequential read of the same bytes); ms per call.
export function kernel(ex, now, { kase, batch = 1, int8 = false, runs = 5, minMs = 40 }) {
  if (ex.kernel_setup(kase, batch) === 0) throw new Error(`no benchmark case ${kase}`);
  const run = () => {
    if (Number.isNaN(ex.kernel_run(int8 ? 1 : 0))) throw new Error("kernel_run failed");
  };
  const t = now();
  run();
  const first = now() - t;
  const warm = median(Array.from({ length: runs }, () => perCall(now, run, minMs)));
  const floor = median(Array.from({ length: runs }, () => perCall(now, () => ex.floor_run(), minMs)));
  return { first, warm, floor };
}

/// The Q6_K case's product with `batch` vectors (exact and int8) with the blocks in ggml's
/// layout and in kquant's packed6 layout, alternated (`alternated`); ms per call. Throws unless
/// both layouts give the same bits on every row.
export function layout(ex, now, { runs = 5, minMs = 40, batch = 1 }) {
  if (ex.kernel_setup(0, batch) === 0) throw new Error("no benchmark case 0");
  if (ex.layout_setup(PACKED6) !== 1) throw new Error("the packed6 layout gives other bits than ggml's");
  const kernels = {
    ggml: () => ex.kernel_run(0),
    packed: () => ex.layout_run(PACKED6, 0),
    ggmlInt8: () => ex.kernel_run(1),
    packedInt8: () => ex.layout_run(PACKED6, 1),
  };
  return alternated(now, kernels, runs, minMs);
}

/// The largest |ggml − kquant int8| over the rows, relative to kquant's largest |y|, that the
/// check accepts. Both quantize x to the same Q8_K blocks (ggml scales by −127 / m, m the block's
/// value of largest magnitude with its sign, kquant by 127 / |m|: the same quants up to their
/// sign, block scales at most an ulp apart) and sum the integer products exactly, so only the
/// float epilogues differ (measured: 2e-7 of max |y| for Q6_K, 4e-7 for Q4_K).
export const GGML_TOLERANCE = 2e-6;

/// Copies the case set up last on `ex` (its weight bytes and first vector) into the ggml module
/// `gx` (target/ggml-wasm/ggml.wasm, benches/engine/ggml/harness.c) and runs both once: ggml's
/// mat-vec and kquant's int8 one. Answers max |ggml − kquant| / max |kquant|; throws when it
/// exceeds GGML_TOLERANCE (or is NaN), naming the worst row.
function ggmlSetup(ex, gx, bytes) {
  const [rows, cols] = [ex.kernel_rows(), ex.kernel_cols()];
  if (gx.setup(rows, cols, bytes) !== 1) {
    throw new Error(`ggml: no Q6_K or Q4_K matrix of ${rows}×${cols} in ${bytes} bytes`);
  }
  // Views made after every call that may grow a memory (growing detaches the old buffer).
  const weights = new Uint8Array(ex.memory.buffer, ex.weights_ptr(), bytes);
  new Uint8Array(gx.memory.buffer, gx.weights_ptr(), bytes).set(weights);
  const x = new Float32Array(ex.memory.buffer, ex.xs_ptr(), cols);
  new Float32Array(gx.memory.buffer, gx.x_ptr(), cols).set(x);
  if (Number.isNaN(ex.kernel_run(1))) throw new Error("kernel_run failed");
  gx.run();
  const want = new Float32Array(ex.memory.buffer, ex.out_ptr(), rows);
  const got = new Float32Array(gx.memory.buffer, gx.out_ptr(), rows);
  let [diff, worst, top] = [0, 0, 0];
  for (let r = 0; r < rows; r++) {
    const d = Math.abs(got[r] - want[r]);
    if (!(d <= diff)) [diff, worst] = [d, r]; // a NaN becomes the worst row
    top = Math.max(top, Math.abs(want[r]));
  }
  const rel = diff / top;
  if (!(rel <= GGML_TOLERANCE)) {
    throw new Error(
      `ggml's results differ from kquant int8's: max |Δ| / max |y| = ${rel} > ${GGML_TOLERANCE} ` +
        `(row ${worst}: ggml ${got[worst]}, kquant int8 ${want[worst]})`,
    );
  }
  return rel;
}

/// candle-core's simd128 mat-vec (feature `candle`) on one case's weights and vector, beside
/// kquant's int8 and exact kernels in the same module, and with `gx` (the exports of the ggml
/// module) llama.cpp's ggml wasm kernels on a copy of the same bytes, after checking their
/// results against kquant int8's (`ggmlSetup`); alternated (`alternated`); ms per call,
/// medians, and with ggml `ggmlDiff`, the check's max |Δ| / max |y|.
export function candle(ex, now, { kase, runs = 5, minMs = 40 }, gx = null) {
  const bytes = ex.kernel_setup(kase, 1);
  if (bytes === 0) throw new Error(`no benchmark case ${kase}`);
  if (ex.candle_setup() !== 1) throw new Error("this module was built without candle");
  const ggmlDiff = gx ? ggmlSetup(ex, gx, bytes) : undefined;
  const kernels = {
    ...(gx ? { ggml: () => gx.run() } : {}),
    candle: () => ex.candle_run(),
    int8: () => ex.kernel_run(1),
    exact: () => ex.kernel_run(0),
  };
  return { ...alternated(now, kernels, runs, minMs), ggmlDiff };
}

/// ms per call of each of `kernels` ({ name: call }): one warm-up call each (past its first,
/// baseline-compiled call), then `runs` rounds of one timing each (`perCall`), alternated call
/// by call, each round starting one kernel later than the last (so that no kernel always runs
/// first, or after the same one); medians.
function alternated(now, kernels, runs, minMs) {
  const entries = Object.entries(kernels);
  const times = Object.fromEntries(entries.map(([k]) => [k, []]));
  for (const [, f] of entries) f();
  for (let r = 0; r < runs; r++) {
    for (let i = 0; i < entries.length; i++) {
      const [k, f] = entries[(r + i) % entries.length];
      times[k].push(perCall(now, f, minMs));
    }
  }
  return Object.fromEntries(Object.entries(times).map(([k, t]) => [k, median(t)]));
}

/// The best backend's int8 products against the scalar backend's on seeded cases
/// `first..first + count` (src/int8_check.rs); throws unless every result has the same bits.
export function int8Check(ex, _now, { first = 0, count = 300 }) {
  const differing = ex.int8_check(first, count);
  if (differing === 0xffffffff) throw new Error("int8_check: a kernel call failed");
  if (differing !== 0) throw new Error(`int8_check: ${differing} results differ from the scalar backend's`);
  return { cases: count, differing };
}

/// One case's int8 product on the plain module `ex` and on the relaxed build `rx` (and the
/// exact product on `ex`), alternated (`alternated`) in one process with the two read floors
/// (`floor`: each 64-byte line touched; `floorSimd`: every byte loaded into a v128); also with
/// the blocks in the interleaved layout and, for Q6_K (case 0), in the packed6 layout (after
/// each module checked every layout's bits against ggml's on every row). ms per call, medians.
export function relaxed(ex, rx, now, { kase, batch = 1, runs = 5, minMs = 40 }) {
  for (const m of [ex, rx]) if (m.kernel_setup(kase, batch) === 0) throw new Error(`no benchmark case ${kase}`);
  const kernels = {
    plain: () => ex.kernel_run(1),
    relaxed: () => rx.kernel_run(1),
    exact: () => ex.kernel_run(0),
    floor: () => ex.floor_run(),
    floorSimd: () => ex.floor_simd_run(),
  };
  if (kase === 0) {
    for (const m of [ex, rx]) if (m.layout_setup(PACKED6) !== 1) throw new Error("the packed6 layout gives other bits than ggml's");
    Object.assign(kernels, { plainPacked6: () => ex.layout_run(PACKED6, 1), relaxedPacked6: () => rx.layout_run(PACKED6, 1) });
  }
  for (const m of [ex, rx]) if (m.layout_setup(INTERLEAVED) !== 1) throw new Error("the interleaved layout gives other bits than ggml's");
  Object.assign(kernels, {
    plainInterleaved: () => ex.layout_run(INTERLEAVED, 1),
    relaxedInterleaved: () => rx.layout_run(INTERLEAVED, 1),
  });
  return alternated(now, kernels, runs, minMs);
}

/// The bit-exact table's lines for every backend of the module (src/lib.rs, `bit_exact_lines`).
export function bitExactLines(ex) {
  const len = ex.bit_exact_lines();
  return { lines: new TextDecoder().decode(new Uint8Array(ex.memory.buffer, ex.text_ptr(), len)).split("\n") };
}

// The plain-JavaScript baseline, the path JS Workers use without wasm: ggml's
// dequantize_row_q4_K / dequantize_row_q6_K written out in scalar JS into a Float32Array row,
// then a dot product with x, row after row. Math.fround and the Float32Array stores round every
// product to f32 as C does, so the dequantized floats are ggml's bit for bit (the tests check).

const { fround } = Math;

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 31) return mantissa ? NaN : sign * Infinity;
  return sign * (1024 + mantissa) * 2 ** (exponent - 25);
}

/** Every f16 bit pattern as a float. */
const F16 = Float32Array.from({ length: 65536 }, (_, h) => halfToFloat(h));

/** ggml's block sizes in bytes. */
export const BLOCK_BYTES = { q4_k: 144, q6_k: 210 };

/** ggml's dequantize_row_q6_K: `blocks` 210-byte blocks of `q` from byte `at` into `y`. */
export function dequantizeRowQ6K(q, at, blocks, y) {
  for (let b = 0; b < blocks; b++) {
    const base = at + 210 * b;
    const d = F16[q[base + 208] | (q[base + 209] << 8)];
    let ql = base;
    let qh = base + 128;
    let sc = base + 192;
    let o = 256 * b;
    for (let n = 0; n < 2; n++) {
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const h = q[qh + l];
        const a = q[ql + l];
        const c = q[ql + l + 32];
        y[o + l] = fround(d * ((q[sc + is] << 24) >> 24)) * (((a & 15) | ((h & 3) << 4)) - 32);
        y[o + l + 32] = fround(d * ((q[sc + is + 2] << 24) >> 24)) * (((c & 15) | (((h >> 2) & 3) << 4)) - 32);
        y[o + l + 64] = fround(d * ((q[sc + is + 4] << 24) >> 24)) * (((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
        y[o + l + 96] = fround(d * ((q[sc + is + 6] << 24) >> 24)) * (((c >> 4) | (((h >> 6) & 3) << 4)) - 32);
      }
      o += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

/** ggml's get_scale_min_k4, scale half: the 6-bit scale `j` of the 12 scale bytes at `s`. */
function scaleK4(q, s, j) {
  return j < 4 ? q[s + j] & 63 : (q[s + j + 4] & 15) | ((q[s + j - 4] >> 6) << 4);
}

/** ggml's get_scale_min_k4, min half: the 6-bit min `j` of the 12 scale bytes at `s`. */
function minK4(q, s, j) {
  return j < 4 ? q[s + j + 4] & 63 : (q[s + j + 4] >> 4) | ((q[s + j] >> 6) << 4);
}

/** ggml's dequantize_row_q4_K: `blocks` 144-byte blocks of `q` from byte `at` into `y`. */
export function dequantizeRowQ4K(q, at, blocks, y) {
  for (let b = 0; b < blocks; b++) {
    const base = at + 144 * b;
    const d = F16[q[base] | (q[base + 1] << 8)];
    const min = F16[q[base + 2] | (q[base + 3] << 8)];
    let qs = base + 16;
    let o = 256 * b;
    for (let is = 0; is < 8; is += 2) {
      const d1 = fround(d * scaleK4(q, base + 4, is));
      const dm1 = fround(min * minK4(q, base + 4, is));
      const d2 = fround(d * scaleK4(q, base + 4, is + 1));
      const dm2 = fround(min * minK4(q, base + 4, is + 1));
      for (let l = 0; l < 32; l++) y[o + l] = fround(d1 * (q[qs + l] & 15)) - dm1;
      for (let l = 0; l < 32; l++) y[o + 32 + l] = fround(d2 * (q[qs + l] >> 4)) - dm2;
      qs += 32;
      o += 64;
    }
  }
}

const DEQUANTIZE_ROW = { q4_k: dequantizeRowQ4K, q6_k: dequantizeRowQ6K };

/** Dequantizes whole blocks of `dtype` (a Uint8Array) into `out` (256 floats per block). */
export function dequantize(dtype, blocks, out) {
  DEQUANTIZE_ROW[dtype](blocks, 0, blocks.length / BLOCK_BYTES[dtype], out);
}

/** `out = W·x` the plain-JS way: each row dequantized into a Float32Array, then dotted with x. */
export function matVec(dtype, weights, rows, cols, x, out) {
  const blocks = cols / 256;
  const rowBytes = blocks * BLOCK_BYTES[dtype];
  const dequantizeRow = DEQUANTIZE_ROW[dtype];
  const y = new Float32Array(cols);
  for (let r = 0; r < rows; r++) {
    dequantizeRow(weights, r * rowBytes, blocks, y);
    let sum = 0;
    for (let c = 0; c < cols; c++) sum += y[c] * x[c];
    out[r] = sum;
  }
}

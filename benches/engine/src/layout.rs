//! Issue 15's item 3 measured before it is built: would a kquant-defined Q6_K layout make the
//! simd128 kernels faster, with the same bits? (Yes: `node benches/engine/run.mjs --jobs layout`,
//! findings in docs/BENCHMARKS-notes.md.)
//!
//! # The layout ("packed6")
//!
//! Same 210 bytes per block, reordered: the 256 quants first, as 16 groups of 16 weights, each
//! group 12 bytes holding its 16 six-bit fields `(q − 32) mod 64` (the quant already in 6-bit
//! two's complement) as one little-endian bit stream (weight `i` of the group at bits
//! `6i..6i + 6`); then ggml's 16 scales and `d`. It is a bijection of ggml's block.
//!
//! # Why it is faster
//!
//! Exact: in the canonical order, lane `l` of a group's chunk owns weights `4l..4l + 4`, which
//! here are bits `24l..24l + 24` of the group: one byte swizzle moves them into u32 lane `l`, and
//! weight `k` of the lane is `(lane << (26 − 6k)) >>ₛ 26`, then a conversion. Per 16 weights that
//! is a load, a swizzle and 12 shift/convert operations, against ggml's layout's ~7.5 operations
//! to rebuild the quants from `ql`/`qh` (with shift counts that depend on the step) and 13 to
//! make them floats: 14 against ~20.5 of the ~33 operations the kernel spends per 16 weights.
//!
//! int8: two swizzles put the two bytes holding each field in an i16 lane, a multiply by a power
//! of two moves the field to the top and `>>ₛ 10` sign-extends it: `q − 32` in 8 i16 lanes, ready
//! for `i32x4.dot_i16x8_s` (7 operations per 16 weights against ~9.5).
//!
//! The kernels keep their canonical orders operation for operation (exact: the x products, their
//! sum, the scale, the accumulation and the final reduction; int8: exact integer sums and the
//! same float epilogue), so their results must equal the production kernels' bit for bit:
//! [`check`] compares every row.

use core::arch::wasm32::*;

use kquant::{BlockQ6K, QK_K};

/// Bytes of one block in the layout (the same as ggml's).
pub const BLOCK_BYTES: usize = 210;

/// ggml's quant `q` (0..64) of weight `w` of a block (the table in kquant's `block` docs).
fn ggml_quant(b: &BlockQ6K, w: usize) -> u8 {
    let (h, r) = (w / 128, w % 128);
    let (quarter, l) = (r / 32, r % 32);
    let low = b.ql[64 * h + l + 32 * (quarter % 2)];
    let nibble = if quarter < 2 { low & 15 } else { low >> 4 };
    nibble | ((b.qh[32 * h + l] >> (2 * quarter)) & 3) << 4
}

/// One ggml block in the packed6 layout.
pub fn pack(b: &BlockQ6K) -> [u8; BLOCK_BYTES] {
    let mut out = [0u8; BLOCK_BYTES];
    for (g, group) in out[..192].chunks_exact_mut(12).enumerate() {
        let mut bits = 0u128;
        for i in 0..16 {
            let field = u128::from(ggml_quant(b, 16 * g + i).wrapping_sub(32) & 63);
            bits |= field << (6 * i);
        }
        group.copy_from_slice(&bits.to_le_bytes()[..12]);
    }
    out[192..208].copy_from_slice(&b.scales);
    out[208..].copy_from_slice(&b.d);
    out
}

/// `x` transposed per 64 columns as the kernels want it: `xt[64s + 16k + L] = x[64s + 4L + k]`.
pub fn transpose(x: &[f32], xt: &mut [f32]) {
    for (src, dst) in x.chunks_exact(64).zip(xt.chunks_exact_mut(64)) {
        for (lane, w) in src.chunks_exact(4).enumerate() {
            for (k, &v) in w.iter().enumerate() {
                dst[16 * k + lane] = v;
            }
        }
    }
}

#[inline(always)]
fn load(bytes: &[u8]) -> v128 {
    bytemuck::pod_read_unaligned(&bytes[..16])
}

#[inline(always)]
fn load_f(x: &[f32]) -> v128 {
    bytemuck::pod_read_unaligned(bytemuck::cast_slice(&x[..4]))
}

/// One row (whole packed6 blocks) against the transposed `xt`, in the canonical order.
#[inline(always)]
fn row_dot(row: &[u8], xt: &[f32]) -> f32 {
    // Lane l gets the group's bytes 3l..3l + 3 (its top byte is shifted out below); a swizzle
    // operand held in a register, see `row_dot_int8`.
    let pick = core::hint::black_box(u8x16(0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11));
    let mut acc = [f32x4_splat(0.0); 4];
    for (b, x) in row.chunks_exact(BLOCK_BYTES).zip(xt.as_chunks::<QK_K>().0) {
        let d = half::f16::from_le_bytes([b[208], b[209]]).to_f32();
        let ds: [f32; 16] = core::array::from_fn(|j| d * f32::from(b[192 + j] as i8));
        for s in 0..4 {
            for (c, a) in acc.iter_mut().enumerate() {
                let g = 4 * s + c;
                let raw = load(&b[12 * g..]);
                let lanes = i8x16_swizzle(raw, pick);
                let w0 = f32x4_convert_i32x4(i32x4_shr(i32x4_shl(lanes, 26), 26));
                let w1 = f32x4_convert_i32x4(i32x4_shr(i32x4_shl(lanes, 20), 26));
                let w2 = f32x4_convert_i32x4(i32x4_shr(i32x4_shl(lanes, 14), 26));
                let w3 = f32x4_convert_i32x4(i32x4_shr(i32x4_shl(lanes, 8), 26));
                let at = 64 * s + 4 * c;
                let p = f32x4_add(
                    f32x4_mul(w0, load_f(&x[at..])),
                    f32x4_mul(w1, load_f(&x[at + 16..])),
                );
                let p = f32x4_add(p, f32x4_mul(w2, load_f(&x[at + 32..])));
                let p = f32x4_add(p, f32x4_mul(w3, load_f(&x[at + 48..])));
                *a = f32x4_add(*a, f32x4_mul(f32x4_splat(ds[g]), p));
            }
        }
    }
    let mut lanes = [[0.0f32; 4]; 4];
    for (l, a) in lanes.iter_mut().zip(acc) {
        *l = bytemuck::cast(a);
    }
    let t: [f32; 4] =
        core::array::from_fn(|l| (lanes[0][l] + lanes[1][l]) + (lanes[2][l] + lanes[3][l]));
    (t[0] + t[1]) + (t[2] + t[3])
}

/// The mat-vec on packed6 weights (`cols` per row): `x` is transposed into `xt` first, as the
/// production kernel prepares it per call.
#[inline(never)]
pub fn mat_vec(weights: &[u8], cols: usize, x: &[f32], xt: &mut [f32], out: &mut [f32]) {
    transpose(x, xt);
    let row_bytes = cols / QK_K * BLOCK_BYTES;
    for (row, y) in weights.chunks_exact(row_bytes).zip(out.iter_mut()) {
        *y = row_dot(row, xt);
    }
}

/// `x` quantized per 256 columns as kquant's int8 mode does (ggml's `Q8_K`: `xq = round(x ·
/// 127 / amax)`, ties to even, `dx = amax / 127`), for finite `x`: the i16 quants and the scales.
pub fn quantize_x(x: &[f32], xq: &mut [i16], dx: &mut [f32]) {
    for ((block, q), d) in x.chunks_exact(QK_K).zip(xq.chunks_exact_mut(QK_K)).zip(dx) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            q.fill(0);
            *d = 0.0;
            continue;
        }
        let iscale = 127.0 / amax;
        for (qi, &v) in q.iter_mut().zip(block) {
            *qi = ((v * iscale).round_ties_even() as i32).clamp(-127, 127) as i16;
        }
        *d = amax / 127.0;
    }
}

/// Multipliers that shift i16 lane `i` left by `10 − (6i mod 8)`: the field of weight `i` (at
/// bit `6i mod 8` of the two bytes the shuffle put there) to the lane's top six bits.
const TO_TOP: [i16; 8] = [1024, 16, 64, 256, 1024, 16, 64, 256];

/// One row against the quantized x, in the int8 mode's order: exact i32 sums per block (here of
/// `sc · (q − 32) · xq`, the same integer as `sc · (q · xq) − 32 · sc · bsum`), then
/// `acc + (d · dx) · f32(S)`.
#[inline(always)]
fn row_dot_int8(row: &[u8], xq: &[i16], dx: &[f32]) -> f32 {
    // Opaque to LLVM: seeing the powers of two, it turns the multiply into per-lane shifts,
    // which simd128 does not have, and then takes the lanes apart one by one.
    let to_top = core::hint::black_box(bytemuck::cast::<[i16; 8], v128>(TO_TOP));
    // Byte indices as swizzle operands held in registers: as constant shuffles, V8 rebuilds
    // each mask from immediates at every use, and LLVM narrows the 16-byte load to the 13
    // bytes used (three partial loads).
    let pick_lo = core::hint::black_box(u8x16(0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6));
    let pick_hi =
        core::hint::black_box(u8x16(6, 7, 6, 7, 7, 8, 8, 9, 9, 10, 9, 10, 10, 11, 11, 12));
    let mut acc = 0.0f32;
    for ((b, x), &dx) in row
        .chunks_exact(BLOCK_BYTES)
        .zip(xq.as_chunks::<QK_K>().0)
        .zip(dx)
    {
        let d = half::f16::from_le_bytes([b[208], b[209]]).to_f32();
        let mut sum = i32x4_splat(0);
        for g in 0..16 {
            let raw = load(&b[12 * g..]);
            let (lo, hi) = (i8x16_swizzle(raw, pick_lo), i8x16_swizzle(raw, pick_hi));
            let q_lo = i16x8_shr(i16x8_mul(lo, to_top), 10);
            let q_hi = i16x8_shr(i16x8_mul(hi, to_top), 10);
            let x16: &[i16; 16] = x[16 * g..16 * g + 16].try_into().expect("16 columns");
            let [x_lo, x_hi] = bytemuck::cast::<[i16; 16], [v128; 2]>(*x16);
            let dot = i32x4_add(i32x4_dot_i16x8(q_lo, x_lo), i32x4_dot_i16x8(q_hi, x_hi));
            sum = i32x4_add(
                sum,
                i32x4_mul(dot, i32x4_splat(i32::from(b[192 + g] as i8))),
            );
        }
        let s: [i32; 4] = bytemuck::cast(sum);
        let total = s[0]
            .wrapping_add(s[1])
            .wrapping_add(s[2])
            .wrapping_add(s[3]);
        acc += (d * dx) * total as f32;
    }
    acc
}

/// The int8 mat-vec on packed6 weights: `x` quantized into `xq`/`dx` first, as the production
/// kernel prepares it per call.
#[inline(never)]
pub fn mat_vec_int8(
    weights: &[u8],
    cols: usize,
    x: &[f32],
    (xq, dx): (&mut [i16], &mut [f32]),
    out: &mut [f32],
) {
    quantize_x(x, xq, dx);
    let row_bytes = cols / QK_K * BLOCK_BYTES;
    for (row, y) in weights.chunks_exact(row_bytes).zip(out.iter_mut()) {
        *y = row_dot_int8(row, xq, dx);
    }
}

/// Whether `ours` equals `theirs` bit for bit, any NaN equal to any NaN.
pub fn check(ours: &[f32], theirs: &[f32]) -> bool {
    ours.len() == theirs.len()
        && ours
            .iter()
            .zip(theirs)
            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
}

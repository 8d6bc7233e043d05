//! The int8 mode's integer sums of one block against one vector in simd128 (and the float
//! terms of four blocks): what a one-vector pass (the decode case) runs in place of the generic
//! chunk loop, in the plain and the relaxed backend alike.
//!
//! The integer sums of int8's canonical order (`generic::int8`) are exact, so their order is
//! free. The generic loop unpacks a 16-weight chunk for every four lanes and reads its scale
//! from a decoded array; here a block is unpacked the way its bytes lie (Q6_K: 128 weights from
//! four `ql` and two `qh` registers; Q4_K: 64 weights from two registers, low nibbles then
//! high), and each 16-weight group costs:
//!
//! * one load of the activation quants and [`Simd128::pair_products`] (relaxed SIMD's 8-bit dot
//!   product, or two extending multiplies added), giving the group's 16 products in eight i16
//!   lanes;
//! * one `i32x4.dot_i16x8_s` against the group's scale splat, one add into the i32 sum. Q4_K
//!   adds the i16 products of a sub-block's two groups first (one scale per 32 weights; at most
//!   4·15·127 in a lane).
//!
//! Q6_K's `−32` and Q4_K's mins come from the group sums of the activations, as on x86
//! (`x86_64::int8_block`), and each block ends in one reduction of its i32 lanes.
//!
//! Q4_K blocks also come four in a row, one after the other, so that their float terms
//! (`generic::int8`'s epilogue, `(d·dx)·f32(S) − (dmin·dx)·f32(M)`) are computed side by side in
//! `f32x4` lanes ([`q4k_terms`]), with `d` and `dmin` converted from f16 four at a time by the
//! generic conversion's own steps ([`f16x4_to_f32`]): the same operations on each lane, so the
//! same bits.
//!
//! Blocks in kquant's interleaved layout (`crate::interleaved`) need no splats: lane `k` of
//! each of their registers belongs to one scale group, so the products of several registers add
//! up in i16 lanes and one `i32x4.dot_i16x8` against the eight groups' scales takes them all
//! ([`LaneSums`]; [`q6k_interleaved_sum`], [`q4k_interleaved_sums`]).
//!
//! A one-vector pass over blocks in the interleaved layout reads four rows at once, a block of
//! each ([`q4k_interleaved_four_row_sums`], [`q6k_interleaved_four_row_sums`]): each activation
//! register, loaded once, meets the four blocks' quants (in workerd every load is
//! bounds-checked: 16 of a lone block's 28 or 31 loads are activations), the four blocks'
//! lanes are reduced together ([`row_totals`]) and their float terms come side by side in one
//! `f32x4` ([`q4k_terms`], [`q6k_terms`]). The rows are a quarter of the matrix apart
//! (`generic::pass_rows`): neighbouring rows, read a block of each in turn, took twice the
//! time, natively too (the hardware prefetcher follows streams a few KiB apart badly). Q4_K
//! runs both half blocks in one loop over quarters; Q6_K goes by `qh` register, each `ql`
//! register giving two groups, so that a block holds two quant registers at a time (V8 has 16
//! on x64). Relaxed build in workerd against one row after the other: Q4_K 0.78 of the time,
//! Q6_K 0.91 (BENCHMARKS-notes).
//!
//! The f16 conversion's constants come from [`F16Lanes`], made once per pass: V8 builds a
//! `v128` constant from immediates at each use, in the loop.

use core::arch::wasm32::*;

use super::simd128::Simd128;
use crate::{BlockQ4K, BlockQ4KInterleaved, BlockQ6K, BlockQ6KInterleaved, QK_K};

/// 16 bytes as a `v128`.
#[inline(always)]
fn load16<T: bytemuck::Pod>(items: &[T]) -> v128 {
    let bytes: &[u8] = bytemuck::cast_slice(items);
    let b = &bytes[..16];
    // SAFETY: `b` is 16 readable bytes; `v128_load` has no alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

/// Two i16x8 as 16 i16 in memory, for [`splat`].
#[inline(always)]
fn widen(low: v128, high: v128) -> [i16; 16] {
    let mut wide = [0i16; 16];
    // SAFETY: `wide` is 32 writable bytes; `v128_store` has no alignment requirement.
    unsafe {
        v128_store(wide.as_mut_ptr().cast(), low);
        v128_store(wide[8..].as_mut_ptr().cast(), high);
    }
    wide
}

/// An i16 of [`widen`]'s array in all eight lanes. Written as `v128.load16_splat`; unless the
/// array is hidden from it (`q6k_sum`), LLVM sees through the store and emits an `i8x16.shuffle`
/// of the widened vector, which V8 lowers to two shuffles. Either beats a splat of the scale
/// from a scalar (byte load, move, shuffles): Q6_K 17.3 against 14.3 ms in workerd.
#[inline(always)]
fn splat(value: &i16) -> v128 {
    // SAFETY: `value` is 2 readable bytes.
    unsafe { v128_load16_splat(value as *const i16 as *const u16) }
}

/// `i`, or in the must-fail build `KQUANT_PERTURB=int8_block` its neighbour (mod `n`): each
/// group then takes the next one's scale.
#[inline(always)]
fn neighbour(i: usize, n: usize) -> usize {
    if cfg!(kquant_perturb = "int8_block") {
        (i + 1) % n
    } else {
        i
    }
}

/// The 16 quants that half a block's `ql` and `qh` registers hold at `(t, u)` (t in 0..4, u in
/// 0..2): in ggml's layout weights `32t + 16u..` of the half. A low (`t < 2`) or high nibble of
/// `ql[2·(t mod 2) + u]`, and bits `2t..2t + 2` of `qh[u]` moved to bits 4..6 by a 16-bit shift
/// and one mask (the bits a shift carries across a byte boundary land outside it), as on x86.
#[inline(always)]
fn q6k_quants<const R: bool>(
    v: Simd128<R>,
    ql: &[v128; 4],
    qh: &[v128; 2],
    t: usize,
    u: usize,
) -> v128 {
    q6k_quants_of(v, ql[2 * (t % 2) + u], qh[u], t)
}

/// The 16 quants at `t` of one `ql` register `l` and one `qh` register `h` ([`q6k_quants`]).
#[inline(always)]
fn q6k_quants_of<const R: bool>(v: Simd128<R>, l: v128, h: v128, t: usize) -> v128 {
    let low = if t < 2 {
        v128_and(l, v.nibbles)
    } else {
        v128_and(u16x8_shr(l, 4), v.nibbles)
    };
    let shifted = match t {
        0 => i16x8_shl(h, 4),
        1 => i16x8_shl(h, 2),
        2 => h,
        _ => u16x8_shr(h, 2),
    };
    v128_or(low, v128_and(shifted, v.top_pair))
}

/// Eight bytes as i8 widened to i16 lanes.
#[inline(always)]
fn load8_widened(items: &[u8]) -> v128 {
    let b = &items[..8];
    // SAFETY: `b` is 8 readable bytes; `i16x8_load_extend_i8x8` has no alignment requirement.
    unsafe { i16x8_load_extend_i8x8(b.as_ptr().cast()) }
}

/// `S` of a Q6_K block (ggml's layout): `Σ_j sc_j · Σ_{i in j} (q_i − 32) · xq_i`.
#[inline(always)]
pub(super) fn q6k_sum<const R: bool>(
    v: Simd128<R>,
    b: &BlockQ6K,
    xq8: &[i8; QK_K],
    bsums: &[i16; 16],
) -> i32 {
    let scales = load16(&b.scales);
    let wide = widen(
        i16x8_extend_low_i8x16(scales),
        i16x8_extend_high_i8x16(scales),
    );
    // Hidden from LLVM, the widened scales stay in memory and each group's `splat` is a
    // `v128.load16_splat` of them, which V8 lowers to one `vpbroadcastw` (a load and a
    // shuffle); seen through, it is a shuffle of the widened registers, two shuffles in V8.
    // Q6_K 0.92 of the time (V8 14.6). Q4_K, with half as many splats, is level either way.
    let wide = core::hint::black_box(&wide);
    let mut sum = i32x4_splat(0);
    for h in 0..2 {
        let ql: [v128; 4] = core::array::from_fn(|i| load16(&b.ql[64 * h + 16 * i..]));
        let qh: [v128; 2] = core::array::from_fn(|i| load16(&b.qh[32 * h + 16 * i..]));
        for t in 0..4 {
            for u in 0..2 {
                let j = 8 * h + 2 * t + u;
                let quants = q6k_quants(v, &ql, &qh, t, u);
                let products = v.pair_products(quants, load16(&xq8[16 * j..]));
                let scale = splat(&wide[neighbour(j, 16)]);
                sum = i32x4_add(sum, i32x4_dot_i16x8(products, scale));
            }
        }
    }
    let correction = i32x4_add(
        i32x4_dot_i16x8(load16(&wide[..8]), load16(&bsums[..8])),
        i32x4_dot_i16x8(load16(&wide[8..]), load16(&bsums[8..])),
    );
    reduce(i32x4_sub(sum, i32x4_shl(correction, 5)))
}

/// `(S, M)` of a Q4_K block: `S = Σ_j sc_{j/2} · Σ_{i in j} q_i · xq_i` and
/// `M = Σ_s m_s · (bsum_2s + bsum_2s+1)`.
#[inline(always)]
pub(super) fn q4k_sums<const R: bool>(
    v: Simd128<R>,
    b: &BlockQ4K,
    xq8: &[i8; QK_K],
    bsums: &[i16; 16],
) -> (i32, i32) {
    let (sc, m) = b.scales_mins();
    let sc = u16x8_extend_low_u8x16(u64x2(u64::from_le_bytes(sc), 0));
    let wide = widen(sc, sc);
    // Each min twice, against the two group sums of its sub-block.
    let m = u16x8_extend_low_u8x16(u64x2(u64::from_le_bytes(m), 0));
    let mins = i32x4_add(
        i32x4_dot_i16x8(
            i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(m, m),
            load16(&bsums[..8]),
        ),
        i32x4_dot_i16x8(
            i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(m, m),
            load16(&bsums[8..]),
        ),
    );
    let nibble = v.nibbles;
    let mut sum = i32x4_splat(0);
    for s in 0..4 {
        // Sub-block 2s in the low nibbles of `qs[32s..]`, sub-block 2s + 1 in the high ones.
        let q = [load16(&b.qs[32 * s..]), load16(&b.qs[32 * s + 16..])];
        for t in 0..2 {
            let r = 2 * s + t;
            let quants = if t == 0 {
                [v128_and(q[0], nibble), v128_and(q[1], nibble)]
            } else {
                [
                    v128_and(u16x8_shr(q[0], 4), nibble),
                    v128_and(u16x8_shr(q[1], 4), nibble),
                ]
            };
            let products = i16x8_add(
                v.pair_products(quants[0], load16(&xq8[32 * r..])),
                v.pair_products(quants[1], load16(&xq8[32 * r + 16..])),
            );
            let scale = splat(&wide[neighbour(r, 8)]);
            sum = i32x4_add(sum, i32x4_dot_i16x8(products, scale));
        }
    }
    reduce_pair(sum, mins)
}

/// The sum of a block's i32 lanes.
#[inline(always)]
fn reduce(sum: v128) -> i32 {
    let pairs = i32x4_add(sum, i32x4_shuffle::<2, 3, 0, 1>(sum, sum));
    i32x4_extract_lane::<0>(i32x4_add(pairs, i32x4_shuffle::<1, 0, 3, 2>(pairs, pairs)))
}

/// A block's i32 lanes and (Q4_K) its mins' lanes, each reduced: `(Σ sum, Σ mins)`.
#[inline(always)]
fn reduce_pair(sum: v128, mins: v128) -> (i32, i32) {
    let pairs = i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(sum, mins),
        i32x4_shuffle::<2, 3, 6, 7>(sum, mins),
    );
    let both = i32x4_add(pairs, i32x4_shuffle::<1, 0, 3, 2>(pairs, pairs));
    (i32x4_extract_lane::<0>(both), i32x4_extract_lane::<2>(both))
}

/// The products of interleaved vectors that share their lanes' scales (`crate::interleaved`),
/// summed in i16 lanes until [`LaneSums::scaled`] multiplies them by the eight lanes' scales
/// (one per pair of bytes).
///
/// Relaxed SIMD's dot product pairs adjacent bytes, so a vector's eight i16 lanes are its eight
/// scale groups: the products add up in `low`, and one `i32x4.dot_i16x8` scales them. Plain
/// simd128's extending multiplies give the low and the high eight bytes apart, each byte in an
/// i16 lane of its own: they add up in `low` and `high`, which take the scales two by two.
/// The callers keep the i16 sums in range.
#[derive(Clone, Copy)]
struct LaneSums {
    low: v128,
    high: v128,
}

impl LaneSums {
    #[inline(always)]
    fn new() -> LaneSums {
        LaneSums {
            low: i16x8_splat(0),
            high: i16x8_splat(0),
        }
    }

    /// The sums with the products of quants `q` and activation quants `x` added.
    #[inline(always)]
    fn add<const R: bool>(self, v: Simd128<R>, q: v128, x: v128) -> LaneSums {
        if R {
            LaneSums {
                low: i16x8_add(self.low, v.pair_products(q, x)),
                high: self.high,
            }
        } else {
            LaneSums {
                low: i16x8_add(self.low, i16x8_extmul_low_i8x16(q, x)),
                high: i16x8_add(self.high, i16x8_extmul_high_i8x16(q, x)),
            }
        }
    }

    /// `sum` plus the sums times their lanes' scales ([`LaneScales`]), in i32 lanes.
    #[inline(always)]
    fn scaled<const R: bool>(self, sum: v128, scales: LaneScales) -> v128 {
        if R {
            return i32x4_add(sum, i32x4_dot_i16x8(self.low, scales.low));
        }
        let scaled = i32x4_add(
            i32x4_dot_i16x8(self.low, scales.low),
            i32x4_dot_i16x8(self.high, scales.high),
        );
        i32x4_add(sum, scaled)
    }
}

/// The eight lanes' scales (i16, one per pair of bytes) as [`LaneSums::scaled`] takes them:
/// as they are for relaxed SIMD (`low`), each twice for plain simd128's low and high bytes.
#[derive(Clone, Copy)]
struct LaneScales {
    low: v128,
    high: v128,
}

impl LaneScales {
    #[inline(always)]
    fn new<const R: bool>(scales: v128) -> LaneScales {
        if R {
            LaneScales {
                low: scales,
                high: scales,
            }
        } else {
            LaneScales {
                low: i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(scales, scales),
                high: i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(scales, scales),
            }
        }
    }
}

/// The half of the activations that half block `h` multiplies: its own, or in the must-fail
/// build `KQUANT_PERTURB=interleaved` the other one.
#[inline(always)]
fn activation_half(h: usize) -> usize {
    if cfg!(kquant_perturb = "interleaved") {
        1 - h
    } else {
        h
    }
}

/// `S` of a Q6_K block in the interleaved layout (`crate::interleaved`), against the vector's
/// permuted quants and group sums (even groups, then odd ones). Vectors `8h..8h + 8` hold the
/// groups of parity `h`; each is unpacked as in ggml's layout ([`q6k_sum`]).
#[inline(always)]
pub(super) fn q6k_interleaved_sum<const R: bool>(
    v: Simd128<R>,
    b: &BlockQ6KInterleaved,
    xq8: &[i8; QK_K],
    bsums: &[i16; 16],
) -> i32 {
    let scales = load16(&b.scales);
    let sc = [
        i16x8_extend_low_i8x16(scales),
        i16x8_extend_high_i8x16(scales),
    ];
    let mut sum = i32x4_splat(0);
    for (h, scales) in sc.into_iter().enumerate() {
        let ql: [v128; 4] = core::array::from_fn(|i| load16(&b.ql[64 * h + 16 * i..]));
        let qh: [v128; 2] = core::array::from_fn(|i| load16(&b.qh[32 * h + 16 * i..]));
        // Relaxed SIMD adds two vectors' products in i16 (at most 2·2·63·127), plain simd128
        // four (4·63·127).
        let per_scaling = if R { 2 } else { 4 };
        let scales = LaneScales::new::<R>(scales);
        let mut sums = LaneSums::new();
        for tu in 0..8 {
            let quants = q6k_quants(v, &ql, &qh, tu / 2, tu % 2);
            let x = load16(&xq8[16 * (8 * activation_half(h) + tu)..]);
            sums = sums.add(v, quants, x);
            if (tu + 1) % per_scaling == 0 {
                sum = sums.scaled::<R>(sum, scales);
                sums = LaneSums::new();
            }
        }
    }
    let correction = i32x4_add(
        i32x4_dot_i16x8(sc[0], load16(&bsums[..8])),
        i32x4_dot_i16x8(sc[1], load16(&bsums[8..])),
    );
    reduce(i32x4_sub(sum, i32x4_shl(correction, 5)))
}

/// The scales and the mins of a Q4_K block in the interleaved layout as i16 lanes, unpacked
/// as `BlockQ4KInterleaved::scales_mins` says: bytes 0..8 widened give `sc` in their low six
/// bits and `m`'s low two bits above; the nibbles of bytes 8..12, widened, masked and shifted
/// apart, and their two halves joined, give `m`'s high four bits.
#[inline(always)]
fn q4k_interleaved_scales_mins(b: &BlockQ4KInterleaved) -> (v128, v128) {
    let (low, high) = b.scales.split_at(8);
    // SAFETY: `low` is 8 readable bytes, `high` 4.
    let (low, high) = unsafe {
        (
            u16x8_load_extend_u8x8(low.as_ptr()),
            u16x8_extend_low_u8x16(v128_load32_zero(high.as_ptr().cast())),
        )
    };
    let sc = v128_and(low, i16x8_splat(63));
    let nibbles = i16x8_shuffle::<0, 1, 2, 3, 8, 9, 10, 11>(
        v128_and(high, i16x8_splat(15)),
        u16x8_shr(high, 4),
    );
    (sc, v128_or(u16x8_shr(low, 6), i16x8_shl(nibbles, 2)))
}

/// `(S, M)` of a Q4_K block in the interleaved layout (`crate::interleaved`), against the
/// vector's permuted quants and group sums: lane `k` of every vector is sub-block `k`, so the
/// products of a half block's eight vectors add up in i16 (at most 8·2·15·127) and take the
/// eight scales at once; the mins take the sums of each sub-block's two groups.
#[inline(always)]
pub(super) fn q4k_interleaved_sums<const R: bool>(
    v: Simd128<R>,
    b: &BlockQ4KInterleaved,
    xq8: &[i8; QK_K],
    bsums: &[i16; 16],
) -> (i32, i32) {
    let (sc, m) = q4k_interleaved_scales_mins(b);
    let group_pairs = i16x8_add(load16(&bsums[..8]), load16(&bsums[8..]));
    let mins = i32x4_dot_i16x8(m, group_pairs);
    let nibble = v.nibbles;
    let mut sum = i32x4_splat(0);
    let scales = LaneScales::new::<R>(sc);
    for h in 0..2 {
        let q: [v128; 4] = core::array::from_fn(|i| load16(&b.qs[64 * h + 16 * i..]));
        let mut sums = LaneSums::new();
        for t in 0..8 {
            let quants = if t < 4 {
                v128_and(q[t], nibble)
            } else {
                v128_and(u16x8_shr(q[t - 4], 4), nibble)
            };
            let x = load16(&xq8[16 * (8 * activation_half(h) + t)..]);
            sums = sums.add(v, quants, x);
        }
        sum = sums.scaled::<R>(sum, scales);
    }
    reduce_pair(sum, mins)
}

/// [`q4k_interleaved_sums`] of four rows' blocks against the same part of the vector, each
/// activation register loaded once for all four: per quarter `t` of both half blocks, the
/// register of each block's quants gives its low nibbles against activations `t` and its high
/// nibbles against `t + 4`. Each half's products add up in lane sums of their own (a whole
/// block's would pass the i16 bound), scaled once after the loop; the four blocks' lanes are
/// reduced together ([`row_totals`]).
#[inline(always)]
pub(super) fn q4k_interleaved_four_row_sums<const R: bool>(
    v: Simd128<R>,
    blocks: [&BlockQ4KInterleaved; 4],
    xq8: &[i8; QK_K],
    bsums: &[i16; 16],
) -> [(i32, i32); 4] {
    let nibble = v.nibbles;
    let scales_mins = blocks.map(q4k_interleaved_scales_mins);
    let mut sums = [[LaneSums::new(); 4]; 2];
    // A loop LLVM cannot unroll (its bound hidden), so that each activation register is used by
    // the four blocks right after its load. Unrolled, LLVM computed one block after the other
    // and kept a half's eight activation registers live across all four, more than V8 holds in
    // registers; a loop per half cost V8 spills around each (both halves in one loop: 0.90 of
    // the time in workerd, relaxed build).
    for t in 0..core::hint::black_box(4usize) {
        let t = t % 4; // in bounds for the compiler too
        for (h, sums) in sums.iter_mut().enumerate() {
            let half = 8 * activation_half(h);
            let x = [
                load16(&xq8[16 * (half + t)..]),
                load16(&xq8[16 * (half + t + 4)..]),
            ];
            for (sums, b) in sums.iter_mut().zip(blocks) {
                let q = load16(&b.qs[64 * h + 16 * t..]);
                *sums = sums.add(v, v128_and(q, nibble), x[0]).add(
                    v,
                    v128_and(u16x8_shr(q, 4), nibble),
                    x[1],
                );
            }
        }
    }
    let mut sum = [i32x4_splat(0); 4];
    for (k, (sum, (sc, _))) in sum.iter_mut().zip(scales_mins).enumerate() {
        let scales = LaneScales::new::<R>(sc);
        *sum = sums[1][k].scaled::<R>(sums[0][k].scaled::<R>(*sum, scales), scales);
    }
    let group_pairs = i16x8_add(load16(&bsums[..8]), load16(&bsums[8..]));
    let mut mins = [i32x4_splat(0); 4];
    for (mins, (_, m)) in mins.iter_mut().zip(scales_mins) {
        *mins = i32x4_dot_i16x8(m, group_pairs);
    }
    let (s, m) = (row_totals(sum), row_totals(mins));
    // A must-fail build's bug (`KQUANT_PERTURB=four_rows`): the first two rows' `S` swapped.
    let s = if cfg!(kquant_perturb = "four_rows") {
        i32x4_shuffle::<1, 0, 2, 3>(s, s)
    } else {
        s
    };
    [
        (i32x4_extract_lane::<0>(s), i32x4_extract_lane::<0>(m)),
        (i32x4_extract_lane::<1>(s), i32x4_extract_lane::<1>(m)),
        (i32x4_extract_lane::<2>(s), i32x4_extract_lane::<2>(m)),
        (i32x4_extract_lane::<3>(s), i32x4_extract_lane::<3>(m)),
    ]
}

/// [`q6k_interleaved_sum`] of four rows' blocks against the same part of the vector, each
/// activation register loaded once for the four blocks. Per half block and `qh` register `u`,
/// each `ql` register `2p + u` gives its low nibbles (`t = p`) and its high ones (`t = p + 2`):
/// a block has its `qh[u]` and one `ql` register live while its pairs of products are scaled.
/// The four blocks' lanes are reduced together ([`row_totals`]). Unlike Q4_K's, these loops are
/// all unrolled: a loop over `u` or over `p` took 1.04–1.43 times as long (BENCHMARKS-notes).
#[inline(always)]
pub(super) fn q6k_interleaved_four_row_sums<const R: bool>(
    v: Simd128<R>,
    blocks: [&BlockQ6KInterleaved; 4],
    xq8: &[i8; QK_K],
    bsums: &[i16; 16],
) -> [i32; 4] {
    let mut sum = [i32x4_splat(0); 4];
    for h in 0..2 {
        let half = 8 * activation_half(h);
        let scales = blocks.map(|b| LaneScales::new::<R>(load8_widened(&b.scales[8 * h..])));
        for u in 0..2 {
            let qh = blocks.map(|b| load16(&b.qh[32 * h + 16 * u..]));
            for p in 0..2 {
                let x = [
                    load16(&xq8[16 * (half + 2 * p + u)..]),
                    load16(&xq8[16 * (half + 2 * p + 4 + u)..]),
                ];
                for k in 0..4 {
                    let l = load16(&blocks[k].ql[64 * h + 16 * (2 * p + u)..]);
                    let sums = LaneSums::new()
                        .add(v, q6k_quants_of(v, l, qh[k], p), x[0])
                        .add(v, q6k_quants_of(v, l, qh[k], p + 2), x[1]);
                    sum[k] = sums.scaled::<R>(sum[k], scales[k]);
                }
            }
        }
    }
    let x_sums = [load16(&bsums[..8]), load16(&bsums[8..])];
    for (sum, b) in sum.iter_mut().zip(blocks) {
        let sc = load16(&b.scales);
        let correction = i32x4_add(
            i32x4_dot_i16x8(i16x8_extend_low_i8x16(sc), x_sums[0]),
            i32x4_dot_i16x8(i16x8_extend_high_i8x16(sc), x_sums[1]),
        );
        *sum = i32x4_sub(*sum, i32x4_shl(correction, 5));
    }
    let s = row_totals(sum);
    // A must-fail build's bug (`KQUANT_PERTURB=four_rows`): the first two rows' `S` swapped.
    let s = if cfg!(kquant_perturb = "four_rows") {
        i32x4_shuffle::<1, 0, 2, 3>(s, s)
    } else {
        s
    };
    [
        i32x4_extract_lane::<0>(s),
        i32x4_extract_lane::<1>(s),
        i32x4_extract_lane::<2>(s),
        i32x4_extract_lane::<3>(s),
    ]
}

/// The sums of the i32 lanes of each of four registers (wrapping), in the lanes of one: the
/// registers transposed by two rounds of interleaving shuffles, added as they go.
#[inline(always)]
fn row_totals([a, b, c, d]: [v128; 4]) -> v128 {
    let ab = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(a, b),
        i32x4_shuffle::<2, 6, 3, 7>(a, b),
    );
    let cd = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(c, d),
        i32x4_shuffle::<2, 6, 3, 7>(c, d),
    );
    i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(ab, cd),
        i32x4_shuffle::<2, 3, 6, 7>(ab, cd),
    )
}

/// The constants of [`f16x4_to_f32`], made once per pass and hidden from LLVM (as
/// `Simd128`'s masks are): V8 builds a `v128` constant from immediates at each use (a 64-bit
/// move, a move to the register and a shuffle), inside the loop.
#[derive(Clone, Copy)]
pub(super) struct F16Lanes {
    magnitude: v128,
    exponent: v128,
    mantissa: v128,
    exponent_at_f32: v128,
    subnormal_scale: v128,
    rebias: v128,
    infinity: v128,
    quiet_nan: v128,
    sign: v128,
}

impl F16Lanes {
    /// The constants, each through `black_box` (so LLVM cannot fold them back into uses).
    pub(super) fn new() -> F16Lanes {
        use core::hint::black_box;
        F16Lanes {
            magnitude: black_box(i32x4_splat(0x7FFF)),
            exponent: black_box(i32x4_splat(0x7C00)),
            mantissa: black_box(i32x4_splat(0x3FF)),
            exponent_at_f32: black_box(i32x4_splat(0x7C00 << 13)),
            subnormal_scale: black_box(f32x4_splat(f32::from_bits(0x3380_0000))), // 2⁻²⁴
            rebias: black_box(i32x4_splat(112 << 23)),
            infinity: black_box(i32x4_splat(0x7F80_0000)),
            quiet_nan: black_box(i32x4_splat(0x7FC0_0000)),
            sign: black_box(i32x4_splat(0x8000)),
        }
    }
}

/// Four f16 values (the low 16 bits of each i32 lane of `h`, the rest zero) as f32 lanes:
/// `generic::f16_to_f32` lane by lane (the same operations, so the same bits: normal values
/// rebiased by integer operations, subnormal ones converted from their mantissa and scaled by
/// 2⁻²⁴, infinities and NaNs rebuilt, the sign put back), branch-free.
#[inline(always)]
fn f16x4_to_f32(h: v128, c: F16Lanes) -> v128 {
    let magnitude = i32x4_shl(v128_and(h, c.magnitude), 13);
    let nan = i32x4_gt(magnitude, c.exponent_at_f32);
    let infinite = i32x4_eq(magnitude, c.exponent_at_f32);
    let mantissa = f32x4_convert_i32x4(v128_and(h, c.mantissa));
    let subnormal = f32x4_mul(mantissa, c.subnormal_scale);
    let is_subnormal = i32x4_eq(v128_and(h, c.exponent), i32x4_splat(0));
    let normal = i32x4_add(magnitude, c.rebias);
    let mut finite = v128_bitselect(subnormal, normal, is_subnormal);
    if cfg!(kquant_perturb = "f16") {
        // The generic conversion's must-fail bug: nonzero finite values one ulp off.
        finite = i32x4_sub(finite, v128_not(i32x4_eq(magnitude, i32x4_splat(0))));
    }
    let special = v128_bitselect(c.infinity, finite, infinite);
    let value = v128_bitselect(v128_or(magnitude, c.quiet_nan), special, nan);
    v128_or(value, i32x4_shl(v128_and(h, c.sign), 16))
}

/// The lanes of an f32x4.
#[inline(always)]
fn lanes(v: v128) -> [f32; 4] {
    [
        f32x4_extract_lane::<0>(v),
        f32x4_extract_lane::<1>(v),
        f32x4_extract_lane::<2>(v),
        f32x4_extract_lane::<3>(v),
    ]
}

/// The float terms of four Q6_K blocks, `(d·dx)·f32(S)`, one block per lane, from their `d`.
#[inline(always)]
pub(super) fn q6k_terms(c: F16Lanes, d: &[[u8; 2]; 4], dx: &[f32; 4], s: &[i32; 4]) -> [f32; 4] {
    let lane = |[low, high]: [u8; 2]| i32::from(u16::from_le_bytes([low, high]));
    let d = i32x4(lane(d[0]), lane(d[1]), lane(d[2]), lane(d[3]));
    let s = i32x4(s[0], s[1], s[2], s[3]);
    let scaled = f32x4_mul(
        f32x4_mul(f16x4_to_f32(d, c), load16(dx)),
        f32x4_convert_i32x4(s),
    );
    let [t0, t1, t2, t3] = lanes(scaled);
    if cfg!(kquant_perturb = "int8_terms") {
        [t1, t0, t2, t3] // A must-fail build's bug: the first two blocks' terms swapped.
    } else {
        [t0, t1, t2, t3]
    }
}

/// The float terms of four Q4_K blocks, `(d·dx)·f32(S) − (dmin·dx)·f32(M)`, one block per lane.
#[inline(always)]
pub(super) fn q4k_terms(
    c: F16Lanes,
    [b0, b1, b2, b3]: [&BlockQ4K; 4],
    dx: &[f32; 4],
    sums: &[(i32, i32); 4],
) -> [f32; 4] {
    // Each block's `d` and `dmin` (its first four bytes) in one i32 lane: `d` in the low half,
    // `dmin` in the high one.
    let lane = |b: &BlockQ4K| {
        let ([d0, d1], [m0, m1]) = (b.d, b.dmin);
        i32::from_le_bytes([d0, d1, m0, m1])
    };
    let both = i32x4(lane(b0), lane(b1), lane(b2), lane(b3));
    let (d, dmin) = (v128_and(both, i32x4_splat(0xFFFF)), u32x4_shr(both, 16));
    let dx = load16(dx);
    let [(s0, m0), (s1, m1), (s2, m2), (s3, m3)] = *sums;
    let (s, m) = (i32x4(s0, s1, s2, s3), i32x4(m0, m1, m2, m3));
    let scaled = f32x4_mul(f32x4_mul(f16x4_to_f32(d, c), dx), f32x4_convert_i32x4(s));
    let mins = f32x4_mul(f32x4_mul(f16x4_to_f32(dmin, c), dx), f32x4_convert_i32x4(m));
    let [t0, t1, t2, t3] = lanes(f32x4_sub(scaled, mins));
    if cfg!(kquant_perturb = "int8_terms") {
        [t1, t0, t2, t3] // A must-fail build's bug: the first two blocks' terms swapped.
    } else {
        [t0, t1, t2, t3]
    }
}

#[cfg(test)]
mod tests {
    use core::arch::wasm32::*;

    #[test]
    fn f16x4_conversion_matches_the_generic_one_for_every_value() {
        for first in (0..=u16::MAX).step_by(4) {
            let h: [u16; 4] = core::array::from_fn(|k| first + k as u16);
            let v = i32x4(h[0].into(), h[1].into(), h[2].into(), h[3].into());
            let got = super::lanes(super::f16x4_to_f32(v, super::F16Lanes::new()));
            for (&h, got) in h.iter().zip(got) {
                let want = crate::arch::generic::f16_to_f32(h.to_le_bytes());
                assert_eq!(got.to_bits(), want.to_bits(), "f16 bits {h:#06x}");
            }
        }
    }
}

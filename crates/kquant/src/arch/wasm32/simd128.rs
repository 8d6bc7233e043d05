//! The generic kernels over wasm `v128`: [`Simd128`] with simd128 alone, and its relaxed form
//! (`Simd128<true>`, with the crate feature `relaxed-simd`), whose int8 kernels take their
//! integer dot products from relaxed SIMD, in passes of their own ([`relaxed_int8_pass`], the
//! function that enables the `relaxed-simd` target feature). LLVM applies a wasm module's
//! features to all of its functions, and may choose relaxed instructions from plain code by
//! itself (it turned the int8 quantizer's `f32::max` fold into `f32x4.relaxed_max`), so
//! `crates/wasm-check --relaxed` refuses a module with any relaxed instruction but the two dot
//! products, or with one outside those passes.
//!
//! # Why the relaxed dot product gives the canonical bits
//!
//! `i16x8.relaxed_dot_i8x16_i7x16_s(a, b)` multiplies the 16 bytes of `a` and `b` as integers
//! and adds adjacent pairs of products into i16 lanes (`i32x4.relaxed_dot_i8x16_i7x16_add_s`
//! goes on to add pairs of those into i32 lanes). The specification leaves two things to the
//! implementation: whether `b`'s bytes are read as signed or unsigned, and whether the i16 pair
//! sums saturate. Both are moot when every byte of `b` is in 0..=127: signed and unsigned read
//! the same value, and a pair sum is at most 2·128·127 = 32512 in magnitude, inside i16, so
//! nothing saturates. Every conforming engine then computes the exact integers. (The
//! specification's tests, `relaxed_dot_product.wast`, allow several results only for `b` bytes
//! with the top bit set.) The kernels use the i16 form and multiply its pairs by the group's
//! scale with `i32x4.dot_i16x8_s`, which is exact.
//!
//! So `a` takes the activation quants (−127..=127, any sign) and `b` the weight quants as
//! *unsigned* values: Q6_K's `q` (0..=63, the −32 moved into the bsum term as for the other
//! backends) and Q4_K's nibbles (0..=15); Q6_K blocks in the packed6 layout keep the plain path
//! (`dot_scaled_packed6` below). The sums are the same integers the canonical order defines
//! (`generic::int8`), so the bits are too. Never the other way round: with `q − 32` in
//! `b`, or the activations there, the results differ between engines (measured in workerd:
//! 95 % of lanes with signed `b`).

use core::arch::wasm32::*;

use crate::arch::generic::{self, Job, RowKernel, Vector};
use crate::{BlockQ4K, BlockQ4KInterleaved, BlockQ6K, BlockQ6KInterleaved, QK_K};

/// Token for simd128, enabled at compile time for this build, with the constant vectors of the
/// packed6 kernels.
///
/// They are values made once per call and hidden from LLVM (`black_box`), not constants, for
/// two reasons measured in workerd (`benches/engine`): LLVM turns a swizzle by a constant into
/// an `i8x16.shuffle`, whose mask V8 rebuilds from immediates at every use, and narrows the
/// 16-byte load before it to the bytes the shuffle reads (three partial loads: the int8 kernel
/// took 23 instead of 14 ms); and LLVM turns a multiply by constant powers of two into per-lane
/// shifts, which simd128 lacks, so it takes the lanes apart one by one (65 ms).
/// `RELAXED`: the int8 dot products use relaxed SIMD (only with the crate feature
/// `relaxed-simd`).
#[derive(Clone, Copy)]
pub(crate) struct Simd128<const RELAXED: bool = false> {
    /// `load_u24`: lane `i` gets bytes `3i..3i + 3` (and byte `3i + 2` again on top).
    lanes24: v128,
    /// `dot_scaled_packed6`: i16 lane `i` gets the two bytes of the chunk that hold the field
    /// of weight `i` (weights 0..8), and of weight `8 + i`.
    fields_low: v128,
    fields_high: v128,
    /// i16 lane `i` times `2^(10 − 6i mod 8)`: the field to the lane's top six bits.
    to_top: v128,
    /// The int8 block sums (`int8_block`): `0x0F` in every byte, and `0x30` (where Q6_K's `qh`
    /// bit pair goes) in every byte.
    pub(super) nibbles: v128,
    pub(super) top_pair: v128,
    /// The int8 terms' f16 conversion (`int8_block::F16Lanes`).
    pub(super) f16: super::int8_block::F16Lanes,
}

impl<const RELAXED: bool> Simd128<RELAXED> {
    fn new() -> Self {
        use core::hint::black_box;
        Simd128 {
            lanes24: black_box(u8x16(0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11)),
            fields_low: black_box(u8x16(0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6)),
            fields_high: black_box(u8x16(6, 7, 6, 7, 7, 8, 8, 9, 9, 10, 9, 10, 10, 11, 11, 12)),
            to_top: black_box(i16x8(1024, 16, 64, 256, 1024, 16, 64, 256)),
            nibbles: black_box(u8x16_splat(0x0F)),
            top_pair: black_box(u8x16_splat(0x30)),
            f16: super::int8_block::F16Lanes::new(),
        }
    }

    /// `Σ q·x` over 16 weights given as two i16x8 halves, in i32 lanes, times the group's
    /// scale.
    #[inline(always)]
    fn dot16(self, q_low: v128, q_high: v128, xq: &[i16], scale: i16) -> v128 {
        let x = &xq[..16];
        // SAFETY: `x` is 16 readable i16.
        let (x_low, x_high) = unsafe {
            (
                v128_load(x.as_ptr().cast()),
                v128_load(x[8..].as_ptr().cast()),
            )
        };
        let low = i32x4_dot_i16x8(q_low, x_low);
        let high = i32x4_dot_i16x8(q_high, x_high);
        i32x4_mul(i32x4_add(low, high), i32x4_splat(i32::from(scale)))
    }

    /// `Σ q·x` over 16 weights whose unsigned quants (0..=127) are the bytes of `q`, in i32
    /// lanes, times the group's scale: one relaxed dot product (see the module docs).
    #[cfg(feature = "relaxed-simd")]
    #[inline(always)]
    fn relaxed_dot16(self, q: v128, xq8: &[i8], scale: i16) -> v128 {
        let x = &xq8[..16];
        // SAFETY: `x` is 16 readable bytes.
        let x = unsafe { v128_load(x.as_ptr().cast()) };
        // Pairs of products in i16 lanes, then pairs of those times the scale into i32 lanes:
        // two instructions where V8 lowers each to one on x64.
        i32x4_dot_i16x8(self.pair_products(q, x), i16x8_splat(scale))
    }

    /// The 16 products `q_i · x_i` of unsigned quants `q` (0..=127) and activation quants `x`
    /// (−127..=127), added two by two into eight i16 lanes (at most 2·127·127 in magnitude;
    /// which two is free, the callers only sum the lanes): relaxed SIMD's 8-bit dot product
    /// (see the module docs), or in the plain backend two extending multiplies added.
    #[inline(always)]
    pub(super) fn pair_products(self, q: v128, x: v128) -> v128 {
        #[cfg(feature = "relaxed-simd")]
        if RELAXED {
            let (a, b) = if cfg!(kquant_perturb = "signed_i7") {
                // A must-fail build's bug: the signed activations in the 7-bit operand, as
                // LLVM once chose on its own (implementation-defined results).
                (q, x)
            } else {
                (x, q)
            };
            return i16x8_relaxed_dot_i8x16_i7x16(a, b);
        }
        i16x8_add(i16x8_extmul_low_i8x16(q, x), i16x8_extmul_high_i8x16(q, x))
    }
}

impl<const RELAXED: bool> Vector for Simd128<RELAXED> {
    const LANES: usize = 4;
    #[inline(always)]
    fn pass<K: RowKernel, const N: usize>(
        self,
        kernel: K,
        blocks: &[K::Block],
        x: &[f32],
        y: &mut [f32],
    ) {
        #[cfg(feature = "relaxed-simd")]
        if RELAXED {
            return relaxed_int8_pass::<K, N>(Simd128::new(), kernel, blocks, x, y);
        }
        generic::mat_mul_pass::<Self, K, N>(self, kernel, blocks, x, y);
    }
    type U = v128;
    type F = v128;

    /// Unrolled, the steps' shift counts and offsets are constants; as a loop, V8 shifts by a
    /// count in a register (a mask and a move each time). Measured in workerd
    /// (`benches/engine`): one vector Q6_K 21 → 17 ms, Q4_K 16.7 → 14 ms; eight vectors 10.3 →
    /// 8.5 and 8.9 → 8.0 ms per vector. Passes of two gain nothing and Q4_K's pass of four
    /// runs 36 → 48 ms unrolled, so those keep the loop. The relaxed backend keeps it for eight
    /// vectors too (Q4_K ×8: 0.82–0.90 of the plain kernel unrolled, 0.55–0.65 rolled).
    #[inline(always)]
    fn unroll_int8_steps(vectors: usize) -> bool {
        vectors == 1 || (vectors == 8 && !RELAXED)
    }
    #[inline(always)]
    fn load_u(self, bytes: &[u8]) -> v128 {
        let b = &bytes[..16];
        // SAFETY: `b` is 16 readable bytes; `v128_load` has no alignment requirement.
        let v = unsafe { v128_load(b.as_ptr().cast()) };
        if cfg!(kquant_perturb = "lane") {
            // A must-fail build's bug: lanes 0 and 1 swapped.
            return i32x4_shuffle::<1, 0, 2, 3>(v, v);
        }
        v
    }
    #[inline(always)]
    fn splat_u(self, v: u32) -> v128 {
        u32x4_splat(v)
    }
    #[inline(always)]
    fn shr(self, a: v128, n: u32) -> v128 {
        u32x4_shr(a, n)
    }
    #[inline(always)]
    fn shl(self, a: v128, n: u32) -> v128 {
        i32x4_shl(a, n)
    }
    #[inline(always)]
    fn sar(self, a: v128, n: u32) -> v128 {
        i32x4_shr(a, n)
    }
    #[inline(always)]
    fn and(self, a: v128, b: v128) -> v128 {
        v128_and(a, b)
    }
    #[inline(always)]
    fn or(self, a: v128, b: v128) -> v128 {
        v128_or(a, b)
    }
    #[inline(always)]
    fn xor(self, a: v128, b: v128) -> v128 {
        v128_xor(a, b)
    }
    #[inline(always)]
    fn to_f32(self, a: v128) -> v128 {
        f32x4_convert_i32x4(a)
    }
    #[inline(always)]
    fn load_f(self, xs: &[f32]) -> v128 {
        let x = &xs[..4];
        // SAFETY: `x` is 4 readable floats.
        unsafe { v128_load(x.as_ptr().cast()) }
    }
    #[inline(always)]
    fn splat_f(self, v: f32) -> v128 {
        f32x4_splat(v)
    }
    #[inline(always)]
    fn splat_groups(self, s: &[f32]) -> v128 {
        f32x4_splat(s[0])
    }
    #[inline(always)]
    fn add(self, a: v128, b: v128) -> v128 {
        f32x4_add(a, b)
    }
    #[inline(always)]
    fn sub(self, a: v128, b: v128) -> v128 {
        f32x4_sub(a, b)
    }
    #[inline(always)]
    fn mul(self, a: v128, b: v128) -> v128 {
        f32x4_mul(a, b)
    }
    #[inline(always)]
    fn store(self, a: v128, out: &mut [f32]) {
        let o = &mut out[..4];
        // SAFETY: `o` is 4 writable floats.
        unsafe { v128_store(o.as_mut_ptr().cast(), a) }
    }
    #[inline(always)]
    fn store_interleaved(self, v: [v128; 4], out: &mut [f32]) {
        let rows = {
            let t0 = i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]);
            let t1 = i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]);
            let t2 = i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]);
            let t3 = i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]);
            [
                i32x4_shuffle::<0, 1, 4, 5>(t0, t2),
                i32x4_shuffle::<2, 3, 6, 7>(t0, t2),
                i32x4_shuffle::<0, 1, 4, 5>(t1, t3),
                i32x4_shuffle::<2, 3, 6, 7>(t1, t3),
            ]
        };
        for (r, o) in rows.into_iter().zip(out[..16].chunks_exact_mut(4)) {
            self.store(r, o);
        }
    }
    #[inline(always)]
    fn dot_scaled(self, q: v128, xq8: &[i8], xq: &[i16], scales: &[i16]) -> v128 {
        #[cfg(feature = "relaxed-simd")]
        if RELAXED {
            return self.relaxed_dot16(q, xq8, scales[0]);
        }
        let _ = xq8;
        // The quants (≤ 63) widened to i16, pairs of products with x summed into i32 lanes by
        // `i32x4.dot_i16x8_s` (|lane| ≤ 4·63·127), then times the group's scale (exact in i32).
        // Cheaper in V8 than multiplying i8 by i8 (`extmul`): 22.4 → 19.8 ms for Q6_K. No
        // relaxed instruction (checked on every build).
        let (low, high) = (u16x8_extend_low_u8x16(q), u16x8_extend_high_u8x16(q));
        self.dot16(low, high, xq, scales[0])
    }
    /// One byte swizzle (a register operand: see [`Simd128`]).
    #[inline(always)]
    fn load_u24(self, bytes: &[u8]) -> v128 {
        i8x16_swizzle(self.load_u(bytes), self.lanes24)
    }
    /// The chunk's 16 bytes as they are: [`Vector::dot_scaled_packed6`] picks its fields from
    /// them directly, centered (`q − 32`).
    const PACKED6_CENTERED: bool = true;
    #[inline(always)]
    fn sum_i32(self, sum: v128) -> i32 {
        let pairs = i32x4_add(sum, i32x4_shuffle::<2, 3, 0, 1>(sum, sum));
        i32x4_extract_lane::<0>(i32x4_add(pairs, i32x4_shuffle::<1, 0, 3, 2>(pairs, pairs)))
    }
    #[inline(always)]
    fn load_packed6(self, bytes: &[u8]) -> v128 {
        self.load_u(bytes)
    }
    /// The fields go straight to i16 lanes: a swizzle puts the two bytes holding each in its
    /// lane, a multiply by a power of two moves it to the top and an arithmetic shift by 10
    /// brings it down as `q − 32` (7 operations per 16 weights, against ~9.5 to rebuild ggml's
    /// quants), so the block needs no `32·Σ scale·bsum` (in workerd ~0.15 of the kernel's time
    /// for its reductions alone).
    ///
    /// The relaxed backend uses this too: re-extracting the fields as unsigned quants for the
    /// relaxed dot product (a logical shift, a narrowing, an xor) cost what the dot saved, and
    /// more with one vector (workerd: 0.97–1.21 of this at one vector, 0.84–0.90 at eight).
    #[inline(always)]
    fn dot_scaled_packed6(self, bytes: v128, _: &[i8], xq: &[i16], scales: &[i16]) -> v128 {
        let quants = |pick: v128| i16x8_shr(i16x8_mul(i8x16_swizzle(bytes, pick), self.to_top), 10);
        self.dot16(
            quants(self.fields_low),
            quants(self.fields_high),
            xq,
            scales[0],
        )
    }
    #[inline(always)]
    fn q6k_int8_sums<const K: usize>(
        self,
        b: &[BlockQ6K; K],
        xq8: &[[i8; QK_K]; K],
        bsums: &[[i16; 16]; K],
    ) -> Option<[i32; K]> {
        // One block at a time: V8 spilled the registers of four interleaved blocks (Q6_K
        // 1.32× slower in workerd).
        match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b], [xq8], [bsums]) => {
                let sum = super::int8_block::q6k_sum(self, b, xq8, bsums);
                [sum; 1].first_chunk().copied()
            }
            _ => None,
        }
    }
    #[inline(always)]
    fn q4k_int8_sums<const K: usize>(
        self,
        b: &[BlockQ4K; K],
        xq8: &[[i8; QK_K]; K],
        bsums: &[[i16; 16]; K],
    ) -> Option<[(i32, i32); K]> {
        // One block at a time, as `q6k_int8_sums`, alone or four in a row: a run of four
        // gets its float terms side by side (`q4k_int8_terms`), which a lone block cannot.
        match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b], [xq8], [bsums]) => {
                let sums = super::int8_block::q4k_sums(self, b, xq8, bsums);
                [sums; 1].first_chunk().copied()
            }
            ([b0, b1, b2, b3], [x0, x1, x2, x3], [s0, s1, s2, s3]) => {
                let sums = [
                    super::int8_block::q4k_sums(self, b0, x0, s0),
                    super::int8_block::q4k_sums(self, b1, x1, s1),
                    super::int8_block::q4k_sums(self, b2, x2, s2),
                    super::int8_block::q4k_sums(self, b3, x3, s3),
                ];
                sums.first_chunk().copied()
            }
            _ => None,
        }
    }
    #[inline(always)]
    fn q6k_interleaved_int8_sums<const K: usize>(
        self,
        b: &[BlockQ6KInterleaved; K],
        xq8: &[[i8; QK_K]; K],
        bsums: &[[i16; 16]; K],
    ) -> Option<[i32; K]> {
        match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b], [xq8], [bsums]) => {
                let sum = super::int8_block::q6k_interleaved_sum(self, b, xq8, bsums);
                [sum; 1].first_chunk().copied()
            }
            _ => None,
        }
    }
    /// Alone or four in a row, as `q4k_int8_sums`.
    #[inline(always)]
    fn q4k_interleaved_int8_sums<const K: usize>(
        self,
        b: &[BlockQ4KInterleaved; K],
        xq8: &[[i8; QK_K]; K],
        bsums: &[[i16; 16]; K],
    ) -> Option<[(i32, i32); K]> {
        match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b], [xq8], [bsums]) => {
                let sums = super::int8_block::q4k_interleaved_sums(self, b, xq8, bsums);
                [sums; 1].first_chunk().copied()
            }
            ([b0, b1, b2, b3], [x0, x1, x2, x3], [s0, s1, s2, s3]) => {
                let sums = [
                    super::int8_block::q4k_interleaved_sums(self, b0, x0, s0),
                    super::int8_block::q4k_interleaved_sums(self, b1, x1, s1),
                    super::int8_block::q4k_interleaved_sums(self, b2, x2, s2),
                    super::int8_block::q4k_interleaved_sums(self, b3, x3, s3),
                ];
                sums.first_chunk().copied()
            }
            _ => None,
        }
    }
    #[inline(always)]
    fn q6k_interleaved_int8_four_row_sums(
        self,
        b: [&BlockQ6KInterleaved; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[i32; 4]> {
        Some(super::int8_block::q6k_interleaved_four_row_sums(
            self, b, xq8, bsums,
        ))
    }
    #[inline(always)]
    fn q4k_interleaved_int8_four_row_sums(
        self,
        b: [&BlockQ4KInterleaved; 4],
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[(i32, i32); 4]> {
        Some(super::int8_block::q4k_interleaved_four_row_sums(
            self, b, xq8, bsums,
        ))
    }
    /// Four at a time: the four terms in one `f32x4` (`int8_block::q6k_terms`). Only the blocks
    /// of four rows come four at a time (`q6k_interleaved_int8_four_row_sums`): a row's Q6_K
    /// blocks stay lone (`q6k_int8_sums`).
    #[inline(always)]
    fn q6k_int8_terms<const K: usize>(
        self,
        d: &[[u8; 2]; K],
        dx: &[f32; K],
        sums: &[i32; K],
    ) -> Option<[f32; K]> {
        let terms = super::int8_block::q6k_terms(
            self.f16,
            d.as_slice().try_into().ok()?,
            dx.as_slice().try_into().ok()?,
            sums.as_slice().try_into().ok()?,
        );
        terms.first_chunk().copied()
    }
    /// Runs of four (`q4k_int8_sums`): the four terms in one `f32x4` (`int8_block::q4k_terms`),
    /// 0.83–0.92 of the one-vector Q4_K time in V8 14.6 (the conversions of `d` and `dmin` and
    /// the products were a fifth of it, block by block).
    #[inline(always)]
    fn q4k_int8_terms<const K: usize>(
        self,
        b: [&BlockQ4K; K],
        dx: &[f32; K],
        sums: &[(i32, i32); K],
    ) -> Option<[f32; K]> {
        let terms = super::int8_block::q4k_terms(
            self.f16,
            b.as_slice().try_into().ok()?,
            dx.as_slice().try_into().ok()?,
            sums.as_slice().try_into().ok()?,
        );
        terms.first_chunk().copied()
    }
    #[inline(always)]
    fn add_i32(self, a: v128, b: v128) -> v128 {
        i32x4_add(a, b)
    }
    #[inline(always)]
    fn sum_and_dot16(self, sum: v128, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
        // SAFETY: both arrays are 32 readable bytes.
        let (a0, a1, b0, b1) = unsafe {
            (
                v128_load(a.as_ptr().cast()),
                v128_load(a[8..].as_ptr().cast()),
                v128_load(b.as_ptr().cast()),
                v128_load(b[8..].as_ptr().cast()),
            )
        };
        let dot = i32x4_add(i32x4_dot_i16x8(a0, b0), i32x4_dot_i16x8(a1, b1));
        // Both reduced side by side: lanes 0..2 hold `sum`'s halves, 2..4 `dot`'s.
        let pairs = i32x4_add(
            i32x4_shuffle::<0, 1, 4, 5>(sum, dot),
            i32x4_shuffle::<2, 3, 6, 7>(sum, dot),
        );
        let both = i32x4_add(pairs, i32x4_shuffle::<1, 0, 3, 2>(pairs, pairs));
        (i32x4_extract_lane::<0>(both), i32x4_extract_lane::<2>(both))
    }
}

/// Runs a job on simd128.
pub(crate) fn run(job: Job<'_>) {
    generic::run(Simd128::<false>::new(), job);
}

/// One int8 pass on relaxed SIMD, under the name `wasm-check --relaxed` allows the dot
/// products in (see the module docs).
#[cfg(feature = "relaxed-simd")]
#[target_feature(enable = "relaxed-simd")]
#[inline(never)]
fn relaxed_int8_pass<K: RowKernel, const N: usize>(
    v: Simd128<true>,
    kernel: K,
    blocks: &[K::Block],
    x: &[f32],
    y: &mut [f32],
) {
    generic::pass_rows::<Simd128<true>, K, N>(v, kernel, blocks, x, y);
}

/// Runs a job on simd128 with relaxed SIMD's dot product in the int8 kernels; exact jobs run
/// [`run`]'s code.
#[cfg(feature = "relaxed-simd")]
pub(crate) fn run_relaxed(job: Job<'_>) {
    match job {
        Job::MatMul { int8: true, .. } => generic::run(Simd128::<true>::new(), job),
        _ => run(job),
    }
}

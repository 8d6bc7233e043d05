//! The kernels, written once over a small vector trait; every backend runs this code.
//!
//! # The canonical evaluation order
//!
//! This order *is* the contract: every backend (scalar, SSE2, AVX2, AVX-512, NEON, simd128)
//! produces the same f32 bits because it performs exactly these IEEE-754 single-precision
//! operations, each rounded on its own (multiply, then add: never a fused multiply-add, never a
//! re-association).
//!
//! Per row of `nb = cols / 256` super-blocks, with `x` the activations:
//!
//! ```text
//! acc[0..16] = +0.0                         // 16 lanes; lane L = 4·g + l (g, l in 0..4)
//! for b in 0..nb:                           // super-blocks, in order
//!     for j in 0..16:                       // 16-weight sub-blocks, in order
//!         ds = f32(d_b) · f32(scale_j)      // Q6_K: i8 scale; Q4_K: 6-bit sc of sub-block j/2
//!         for l in 0..4:                    // lane l owns the 4 consecutive weights 16j+4l+k
//!             v_k = q(16j+4l+k) · x[256b + 16j+4l+k]     for k in 0..4
//!             p   = ((v0 + v1) + v2) + v3
//!             acc[4·(j mod 4) + l] = acc[4·(j mod 4) + l] + ds · p
//! t_l = (acc[l] + acc[4+l]) + (acc[8+l] + acc[12+l])      for l in 0..4
//! S   = (t0 + t1) + (t2 + t3)
//! ```
//!
//! `q(w)` is the quant as an exact f32: `q − 32` (in −32..31) for Q6_K, `q` (in 0..15) for Q4_K.
//! Q6_K's row result is `S`. Q4_K also subtracts its mins, accumulated per row in 4 lanes:
//!
//! ```text
//! X_b,s = (((x[256b+32s] + x[256b+32s+1]) + …) + x[256b+32s+31])   // once per call, in order
//! mins[0..4] = +0.0
//! for b in 0..nb:
//!     for s in 0..8:  mins[s mod 4] = mins[s mod 4] + (f32(dmin_b) · f32(m_s)) · X_b,s
//! result = S − ((mins[0] + mins[1]) + (mins[2] + mins[3]))
//! ```
//!
//! Every intermediate is an f32 rounded to nearest even; subnormals are kept (no flush to zero);
//! NaN and infinities propagate as IEEE-754 says (so an infinite `x` meeting a zero weight gives
//! NaN). NaN payloads are not part of the contract. Multiplies and adds are separate operations:
//! no fused multiply-add (`scripts/check-no-fma.sh` checks the built code).
//!
//! The float environment this assumes is the default one: round to nearest even, subnormals
//! neither flushed nor treated as zero. A thread that set x86's MXCSR FTZ/DAZ or aarch64's
//! FPCR.FZ (some audio and game code does) would get other bits natively than wasm gives, so the
//! entry points check it and answer `Error::SubnormalsFlushed` instead.
//!
//! # How vectors reproduce it
//!
//! A step handles 64 weights (sub-blocks 4s..4s+4 of a super-block): all 16 lanes at once. A
//! backend with `LANES` f32 lanes runs it as `16 / LANES` chunks; lane `L` of the step is lane
//! `L mod LANES` of chunk `L / LANES`, and the accumulator of chunk `c` is `acc[c·LANES..]`. Since
//! each lane of each operation is an independent IEEE operation, the width does not change a bit.
//!
//! * The quants of a step, viewed as 16 little-endian u32 lanes, put the 4 weights of lane `L`
//!   in the 4 bytes of that lane, so they are unpacked lane-wise, with no cross-lane moves.
//! * `x` is transposed once per call (`prepare`) so that `x` for byte `k` of every lane is one
//!   contiguous load: `xt[256b + 64s + 16k + L] = x[256b + 64s + 4L + k]`.
//! * Q6_K: bytes are rebuilt as `ql-nibble | qh-pair << 4` (`qh` holds the pairs of 64 weights
//!   in 32 bytes: a 64-byte stream of its two halves, `Vector::load_twice`). Byte `k` becomes
//!   the f32 `q − 32` either by shifts (`^ 0x20` makes it 6-bit two's complement, sign-extended
//!   by `(u << (26 − 8k)) >> 26`) and a conversion, or — on x86, where it is faster — by a byte
//!   shuffle to the low byte, `| 0x4B00_0000` (the f32 2²³ + q) and one exact addition of
//!   −(2²³ + 32). Both are exact, so the choice cannot change a bit.
//! * Q4_K: the 32 bytes `qs[32s..]` give the low nibbles of weights 0..32 of step `s` and the
//!   high nibbles of weights 32..64 (again `load_twice`); byte `k` becomes an f32 by a shift,
//!   a mask and a conversion, or on AVX-512 by a permute of the table 0.0..=15.0.
//!
//! * Q6_K in kquant's packed6 layout (`crate::BlockQ6KPacked`): lane `L` of a step's 16 owns the
//!   24 bits at `3L` bytes into the step's 48 (`Vector::load_u24` puts them in the lane), and
//!   weight `k` is the field at bit `6k`, `q − 32` in six-bit two's complement, sign-extended by
//!   `(u << (26 − 6k)) >> 26`; a conversion makes it an exact f32. The int8 mode reads the same
//!   fields (`Vector::dot_scaled_packed6`).
//! * Q4_K and Q6_K in kquant's interleaved layout (`crate::interleaved`): the exact mode, and
//!   the int8 mode on backends without interleaved block sums, read each row converted back to
//!   ggml's layout ([`Converted`], [`ggml_row`]); simd128's int8 mode takes the blocks' sums
//!   from `Vector::q6k_interleaved_int8_sums` / `q4k_interleaved_int8_sums`.
//!
//! Dequantization uses the same unpacking and ggml's own arithmetic: `(d·scale)·(q − 32)` for
//! Q6_K and `(d·sc)·q − dmin·m` for Q4_K, so it is bit-identical to ggml's
//! `dequantize_row_q6_K` / `dequantize_row_q4_K`.

/// Runs `$body` for `$s` in 0..4 (the four steps of a super-block): unrolled by construction
/// when `V::UNROLL_STEPS`, else as a loop whose unrolling the compiler decides. A macro, not a
/// closure: a closure is a separate function that does not reliably inline into a
/// `#[target_feature]` caller.
macro_rules! each_step {
    ($unroll:expr, $s:ident => $body:block) => {
        if $unroll {
            {
                let $s: usize = 0;
                $body
            }
            {
                let $s: usize = 1;
                $body
            }
            {
                let $s: usize = 2;
                $body
            }
            {
                let $s: usize = 3;
                $body
            }
        } else {
            for $s in 0..4 $body
        }
    };
}

/// `[e(0), e(1), e(2), e(3)]` for an expression `e` of `$k`, written out. `[0, 1, 2, 3].map(|k|
/// e)` makes `e` a closure: a function of its own, compiled without the caller's target features,
/// which LLVM may leave out of line with its intrinsics (with Cargo's default 16 codegen units it
/// did, and the exact kernels ran ~20× slower on AVX-512).
macro_rules! four {
    ($k:ident => $e:expr) => {
        [
            {
                let $k = 0;
                $e
            },
            {
                let $k = 1;
                $e
            },
            {
                let $k = 2;
                $e
            },
            {
                let $k = 3;
                $e
            },
        ]
    };
}

mod exact;
pub(crate) mod int8;

use core::marker::PhantomData;

use crate::{BlockQ4K, BlockQ4KInterleaved, BlockQ6K, BlockQ6KInterleaved, BlockQ6KPacked, QK_K};
use exact::{dequant_q4k, dequant_q6k, Q4K, Q6K};
use int8::{Q4KQ8Interleaved, Q6KQ8Interleaved, Q4KQ8, Q6KQ8};

/// A vector of `LANES` 32-bit lanes, as integer (`U`) or float (`F`).
///
/// Every operation is lane-wise, so any width computes the same bits. The value of `Self` is a
/// token proving that the backend's CPU features are present.
pub(crate) trait Vector: Copy {
    /// 4, 8 or 16 (one step of 16 lanes is `16 / LANES` chunks).
    const LANES: usize;
    /// Whether the exact Q6_K kernel unrolls its four steps (see `each_step!`): worth it with
    /// AVX-512's 32 registers (8 ms against 11 ms when LLVM kept the loop); with 16 registers
    /// the unrolled code spills (AVX2: 7 % slower although callgrind counts 10 % fewer
    /// instructions; wasm in V8: 64 against 38 ms), so the others leave it to the compiler.
    const UNROLL_STEPS: bool = false;
    /// Whether the int8 kernels unroll their four steps in a pass of `vectors` vectors.
    #[inline(always)]
    fn unroll_int8_steps(_vectors: usize) -> bool {
        false
    }
    /// Runs one pass of `N` vectors ([`mat_mul_pass`]). A backend overrides it to run its passes
    /// in a function with more target features than the rest of the build
    /// (`wasm32::simd128`'s relaxed int8 passes).
    #[inline(always)]
    fn pass<K: RowKernel, const N: usize>(
        self,
        kernel: K,
        blocks: &[K::Block],
        x: &[f32],
        y: &mut [f32],
    ) {
        mat_mul_pass::<Self, K, N>(self, kernel, blocks, x, y);
    }
    /// Test-only switch that makes this backend break the canonical order: set by
    /// `KQUANT_PERTURB=order` (`cfg(kquant_perturb = "order")`) in a must-fail build only.
    const PERTURBED: bool = cfg!(kquant_perturb = "order");
    /// `LANES` u32 lanes.
    type U: Copy;
    /// `LANES` f32 lanes.
    type F: Copy;

    /// Loads `4·LANES` bytes as little-endian u32 lanes (`bytes` may be longer).
    fn load_u(self, bytes: &[u8]) -> Self::U;
    /// Bytes `o..o + 4·LANES` of a 64-byte stream made of the 32 `bytes` twice, the second
    /// copy shifted right by `shift` bits, as u32 lanes: `load_u(&bytes[o..])` for `o < 32`,
    /// `shr(load_u(&bytes[o − 32..]), shift)` otherwise. Bits that a shift moves into the top of
    /// a byte come from the byte above; callers mask them off. A 16-lane backend spans both
    /// copies with one load.
    #[inline(always)]
    fn load_twice(self, bytes: &[u8], o: usize, shift: u32) -> Self::U {
        let lanes = self.load_u(&bytes[o % 32..]);
        if o < 32 {
            lanes
        } else {
            self.shr(lanes, shift)
        }
    }
    fn splat_u(self, v: u32) -> Self::U;
    fn shr(self, a: Self::U, n: u32) -> Self::U;
    fn shl(self, a: Self::U, n: u32) -> Self::U;
    /// Arithmetic (sign-filling) right shift.
    fn sar(self, a: Self::U, n: u32) -> Self::U;
    fn and(self, a: Self::U, b: Self::U) -> Self::U;
    fn or(self, a: Self::U, b: Self::U) -> Self::U;
    fn xor(self, a: Self::U, b: Self::U) -> Self::U;
    /// Lanes as i32, converted to f32 (exact for the small integers used here).
    fn to_f32(self, a: Self::U) -> Self::F;
    /// The low `bits` bits of byte `k` of each lane, `u`, as the exact f32 `u − bias`, where
    /// `bias` is 0 or `2^(bits − 1)`. Backends override it where a faster exact way exists.
    #[inline(always)]
    fn unpack_byte(self, q: Self::U, k: u32, bits: u32, bias: u32) -> Self::F {
        unpack_byte_by_shifts(self, q, k, bits, bias)
    }

    /// An f16 (little-endian bytes) as f32; exact, as [`f16_to_f32`]. Backends with a hardware
    /// conversion use it.
    #[inline(always)]
    fn f16_to_f32(self, h: [u8; 2]) -> f32 {
        f16_to_f32(h)
    }

    /// Loads `LANES` floats (`xs` may be longer).
    fn load_f(self, xs: &[f32]) -> Self::F;
    fn splat_f(self, v: f32) -> Self::F;
    /// Lane `i` gets `s[i / 4]`.
    fn splat_groups(self, s: &[f32]) -> Self::F;
    fn add(self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(self, a: Self::F, b: Self::F) -> Self::F;
    /// Stores the `LANES` lanes to `out[..LANES]`.
    fn store(self, a: Self::F, out: &mut [f32]);
    /// `out[4·i + k] = v[k][i]` for each lane `i`: puts 4 vectors back in weight order.
    fn store_interleaved(self, v: [Self::F; 4], out: &mut [f32]);

    /// For the 8-bit mode: `4·LANES` unsigned quant bytes `q` (at most 63) times the activation
    /// quants (given as i8 in `xq8` and, the same values, as i16 in `xq16`; −127..127) times the
    /// scale of their 16-byte group (`scales[t / 16]`, |scale| ≤ 128), summed into `LANES` i32
    /// partial sums in any grouping (the sums are exact, so the grouping is free).
    fn dot_scaled(self, q: Self::U, xq8: &[i8], xq16: &[i16], scales: &[i16]) -> Self::U;
    /// `acc + dot_scaled(q, …)` (lane-wise, wrapping): backends with an accumulating dot
    /// instruction fuse the addition (AVX-512 VNNI).
    #[inline(always)]
    fn dot_scaled_add(
        self,
        acc: Self::U,
        q: Self::U,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> Self::U {
        self.add_i32(acc, self.dot_scaled(q, xq8, xq16, scales))
    }
    /// Lane `i` gets bytes `3i..3i + 3` of `bytes` in its low three bytes (its top byte is
    /// unspecified): a packed6 chunk's lanes. `bytes` must hold `3·LANES` bytes and may need up
    /// to `4·LANES` readable (the block's scales follow its quants, so a chunk always has them).
    #[inline(always)]
    fn load_u24(self, bytes: &[u8]) -> Self::U {
        let mut lanes = [0u8; 64];
        for (lane, field) in lanes
            .chunks_exact_mut(4)
            .zip(bytes.chunks_exact(3))
            .take(Self::LANES)
        {
            lane[..3].copy_from_slice(field);
        }
        self.load_u(&lanes)
    }
    /// A packed6 chunk's `3·LANES` bytes (with up to `4·LANES` readable) in the form
    /// [`Vector::dot_scaled_packed6`] takes: its [`Vector::load_u24`] lanes unless a backend
    /// reads the bytes another way.
    #[inline(always)]
    fn load_packed6(self, bytes: &[u8]) -> Self::U {
        self.load_u24(bytes)
    }
    /// Whether [`Vector::dot_scaled_packed6`] multiplies the centered quants `q − 32` (which
    /// the fields hold) rather than `q`: then the kernel has no `32·Σ scale·bsum` to subtract.
    const PACKED6_CENTERED: bool = false;
    /// [`Vector::dot_scaled`] for a packed6 chunk as [`Vector::load_packed6`] gave it (by
    /// default its [`Vector::load_u24`] lanes, where bits `6k..6k + 6` of lane `i` hold weight
    /// `4i + k`), of `q − 32` if [`Vector::PACKED6_CENTERED`], else of `q`.
    #[inline(always)]
    fn dot_scaled_packed6(
        self,
        lanes: Self::U,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> Self::U {
        // Field k (bits 6k..6k + 6) to byte k: shifted left by 2k and masked. No closure here: a
        // closure is a function of its own, compiled without the caller's target features.
        let f0 = self.and(lanes, self.splat_u(0x3F));
        let f1 = self.and(self.shl(lanes, 2), self.splat_u(0x3F00));
        let f2 = self.and(self.shl(lanes, 4), self.splat_u(0x3F_0000));
        let f3 = self.and(self.shl(lanes, 6), self.splat_u(0x3F00_0000));
        let centered = self.or(self.or(f0, f1), self.or(f2, f3));
        let q = self.xor(centered, self.splat_u(0x2020_2020));
        self.dot_scaled(q, xq8, xq16, scales)
    }
    /// The int8 mode's `S` of each of `K` consecutive Q6_K blocks of a row against its part of
    /// one prepared vector (256 quants and 16 group sums per block), computed the backend's own
    /// way (`generic::int8`'s docs: the integer sums are exact, so their order is free) and
    /// reduced together; `None` for a `K` the backend does not take (the one-vector pass then
    /// tries a shorter run, and a backend without any runs the generic chunk loop). The pass
    /// asks for runs of 1 to 4.
    #[inline(always)]
    fn q6k_int8_sums<const K: usize>(
        self,
        _b: &[BlockQ6K; K],
        _xq8: &[[i8; QK_K]; K],
        _bsums: &[[i16; 16]; K],
    ) -> Option<[i32; K]> {
        None
    }
    /// The int8 mode's `(S, M)` of each of `K` consecutive Q4_K blocks, as
    /// [`Vector::q6k_int8_sums`].
    #[inline(always)]
    fn q4k_int8_sums<const K: usize>(
        self,
        _b: &[BlockQ4K; K],
        _xq8: &[[i8; QK_K]; K],
        _bsums: &[[i16; 16]; K],
    ) -> Option<[(i32, i32); K]> {
        None
    }
    /// The int8 mode's float terms of a run of `K` Q6_K blocks against one vector,
    /// `(d·dx)·f32(S)` block by block (`generic::int8`'s epilogue: the same operations, so the
    /// same bits), from the blocks' `d` (f16), the vector's block scales `dx` and the blocks'
    /// `S`; `None` where the backend leaves them to the generic code, one block at a time.
    #[inline(always)]
    fn q6k_int8_terms<const K: usize>(
        self,
        _d: &[[u8; 2]; K],
        _dx: &[f32; K],
        _sums: &[i32; K],
    ) -> Option<[f32; K]> {
        None
    }
    /// The int8 mode's float terms of `K` Q4_K blocks against one vector (of one row or of
    /// several), `(d·dx)·f32(S) − (dmin·dx)·f32(M)` block by block (`generic::int8`'s epilogue:
    /// the same operations, so the same bits), from the vector's block scales `dx` and the
    /// blocks' `(S, M)`; `None` where the backend leaves them to the generic code, one block at a
    /// time.
    #[inline(always)]
    fn q4k_int8_terms<const K: usize>(
        self,
        _b: [&BlockQ4K; K],
        _dx: &[f32; K],
        _sums: &[(i32, i32); K],
    ) -> Option<[f32; K]> {
        None
    }
    /// [`Vector::q6k_int8_sums`] for blocks in the interleaved layout, against a vector's
    /// quants and group sums permuted as those blocks (`int8::PreparedInterleaved`). A backend
    /// that has them takes runs of one block at least; `None` converts the rows to ggml's layout.
    #[inline(always)]
    fn q6k_interleaved_int8_sums<const K: usize>(
        self,
        _b: &[BlockQ6KInterleaved; K],
        _xq8: &[[i8; QK_K]; K],
        _bsums: &[[i16; 16]; K],
    ) -> Option<[i32; K]> {
        None
    }
    /// [`Vector::q4k_int8_sums`] for blocks in the interleaved layout, as
    /// [`Vector::q6k_interleaved_int8_sums`].
    #[inline(always)]
    fn q4k_interleaved_int8_sums<const K: usize>(
        self,
        _b: &[BlockQ4KInterleaved; K],
        _xq8: &[[i8; QK_K]; K],
        _bsums: &[[i16; 16]; K],
    ) -> Option<[(i32, i32); K]> {
        None
    }
    /// [`Vector::q6k_int8_sums`] of one block of each of four rows, against the same block of
    /// the vector; `None` where the backend has no such sums.
    #[inline(always)]
    fn q6k_int8_four_row_sums(
        self,
        _b: [&BlockQ6K; 4],
        _xq8: &[i8; QK_K],
        _bsums: &[i16; 16],
    ) -> Option<[i32; 4]> {
        None
    }
    /// [`Vector::q4k_int8_sums`] of one block of each of four rows, against the same block of
    /// the vector; `None` where the backend has no such sums.
    #[inline(always)]
    fn q4k_int8_four_row_sums(
        self,
        _b: [&BlockQ4K; 4],
        _xq8: &[i8; QK_K],
        _bsums: &[i16; 16],
    ) -> Option<[(i32, i32); 4]> {
        None
    }
    /// [`Vector::q6k_interleaved_int8_sums`] of one block of each of four rows, against the
    /// same block of the vector; `None` where the backend has no such sums.
    #[inline(always)]
    fn q6k_interleaved_int8_four_row_sums(
        self,
        _b: [&BlockQ6KInterleaved; 4],
        _xq8: &[i8; QK_K],
        _bsums: &[i16; 16],
    ) -> Option<[i32; 4]> {
        None
    }
    /// [`Vector::q4k_interleaved_int8_sums`] of one block of each of four rows, against the
    /// same block of the vector; `None` where the backend has no such sums.
    #[inline(always)]
    fn q4k_interleaved_int8_four_row_sums(
        self,
        _b: [&BlockQ4KInterleaved; 4],
        _xq8: &[i8; QK_K],
        _bsums: &[i16; 16],
    ) -> Option<[(i32, i32); 4]> {
        None
    }
    /// Lane-wise i32 addition.
    fn add_i32(self, a: Self::U, b: Self::U) -> Self::U;
    /// The sum of the i32 lanes of `sum` (wrapping), and `Σ a_i·b_i` over 16 i16 pairs whose
    /// products and sum fit i32: a block's integer sum and its correction, reduced together.
    fn sum_and_dot16(self, sum: Self::U, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32);
    /// The sum of the i32 lanes of `sum` (wrapping).
    #[inline(always)]
    fn sum_i32(self, sum: Self::U) -> i32 {
        self.sum_and_dot16(sum, &[0; 16], &[0; 16]).0
    }
}

/// [`Vector::unpack_byte`] with shifts and an int→float conversion: a shift and a mask for
/// `bias = 0`; else `u ^ bias`, which is `u − bias` in `bits`-bit two's complement,
/// sign-extended by a shift pair.
#[inline(always)]
pub(crate) fn unpack_byte_by_shifts<V: Vector>(
    v: V,
    q: V::U,
    k: u32,
    bits: u32,
    bias: u32,
) -> V::F {
    if bias == 0 {
        v.to_f32(v.and(v.shr(q, 8 * k), v.splat_u((1 << bits) - 1)))
    } else {
        let signed = v.xor(q, v.splat_u(bias * 0x0101_0101));
        v.to_f32(v.sar(v.shl(signed, 32 - bits - 8 * k), 32 - bits))
    }
}

/// The weights of a job, in their block format.
#[derive(Clone, Copy)]
pub(crate) enum Weights<'a> {
    Q4K(&'a [BlockQ4K]),
    Q6K(&'a [BlockQ6K]),
    Q6KPacked(&'a [BlockQ6KPacked]),
    Q4KInterleaved(&'a [BlockQ4KInterleaved]),
    Q6KInterleaved(&'a [BlockQ6KInterleaved]),
}

/// One call's work, handed from the dispatcher to a backend.
///
/// A mat-mul job holds `n` prepared vectors back to back in `prepared` (exact or int8, as
/// `int8` says) and writes `n` results of `rows` floats back to back in `out`.
pub(crate) enum Job<'a> {
    MatMul {
        weights: Weights<'a>,
        int8: bool,
        prepared: &'a [f32],
        out: &'a mut [f32],
        rows: usize,
    },
    Dequantize {
        weights: Weights<'a>,
        out: &'a mut [f32],
    },
}

/// Runs `job` on backend `v`. Inlined into each backend's entry point so that the whole loop
/// nest is compiled with that backend's target features.
#[inline(always)]
pub(crate) fn run<V: Vector>(v: V, job: Job<'_>) {
    match job {
        Job::MatMul {
            weights,
            int8,
            prepared,
            out,
            rows,
        } => match (weights, int8) {
            (Weights::Q4K(b), false) => mat_mul(v, Q4K, b, prepared, out, rows),
            (Weights::Q6K(b), false) => mat_mul(v, Q6K(PhantomData), b, prepared, out, rows),
            (Weights::Q6KPacked(b), false) => mat_mul(v, Q6K(PhantomData), b, prepared, out, rows),
            (Weights::Q4K(b), true) => mat_mul(v, Q4KQ8, b, prepared, out, rows),
            (Weights::Q6K(b), true) => mat_mul(v, Q6KQ8(PhantomData), b, prepared, out, rows),
            (Weights::Q6KPacked(b), true) => mat_mul(v, Q6KQ8(PhantomData), b, prepared, out, rows),
            (Weights::Q4KInterleaved(b), false) => {
                mat_mul(v, Converted(Q4K, PhantomData), b, prepared, out, rows)
            }
            (Weights::Q6KInterleaved(b), false) => {
                let kernel = Converted(Q6K::<BlockQ6K>(PhantomData), PhantomData);
                mat_mul(v, kernel, b, prepared, out, rows)
            }
            (Weights::Q4KInterleaved(b), true) => {
                mat_mul(v, Q4KQ8Interleaved, b, prepared, out, rows)
            }
            (Weights::Q6KInterleaved(b), true) => {
                mat_mul(v, Q6KQ8Interleaved, b, prepared, out, rows)
            }
        },
        Job::Dequantize {
            weights: Weights::Q4K(blocks),
            out,
        } => {
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                dequant_q4k(v, b, y);
            }
        }
        Job::Dequantize {
            weights: Weights::Q6K(blocks),
            out,
        } => {
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                dequant_q6k(v, b, y);
            }
        }
        Job::Dequantize {
            weights: Weights::Q6KPacked(blocks),
            out,
        } => {
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                dequant_q6k(v, b, y);
            }
        }
        Job::Dequantize {
            weights: Weights::Q4KInterleaved(blocks),
            out,
        } => {
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                dequant_q4k(v, &BlockQ4K::from(b), y);
            }
        }
        Job::Dequantize {
            weights: Weights::Q6KInterleaved(blocks),
            out,
        } => {
            for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
                dequant_q6k(v, &BlockQ6K::from(b), y);
            }
        }
    }
}

/// The most blocks a row converted to ggml's layout has (`crate::Layout::INTERLEAVED_MAX_COLS`).
pub(super) const CONVERTED_ROW_BLOCKS: usize = crate::Layout::INTERLEAVED_MAX_COLS / QK_K;

/// `row` converted block by block to `G` (ggml's blocks), in a buffer on the stack, and how
/// many blocks it holds (`QMatrix` keeps rows of converted layouts within the buffer).
#[inline(always)]
pub(super) fn ggml_row<B, G>(row: &[B]) -> ([G; CONVERTED_ROW_BLOCKS], usize)
where
    G: for<'b> From<&'b B> + bytemuck::Zeroable,
{
    let ggml = core::array::from_fn(|i| row.get(i).map_or_else(G::zeroed, G::from));
    (ggml, row.len().min(CONVERTED_ROW_BLOCKS))
}

/// A row kernel `K` of ggml's blocks run on blocks `B` of another layout, each row converted
/// first ([`ggml_row`]): the same bits as `K` on the converted matrix, at the cost of the
/// conversion.
#[derive(Clone, Copy)]
struct Converted<K, B>(K, PhantomData<B>);

impl<K, B> RowKernel for Converted<K, B>
where
    K: RowKernel,
    K::Block: for<'a> From<&'a B> + bytemuck::Zeroable,
    B: Copy,
{
    const WIDEST_PASS: usize = K::WIDEST_PASS;
    type Block = B;
    type View<'a> = K::View<'a>;
    #[inline(always)]
    fn view(prepared: &[f32]) -> K::View<'_> {
        K::view(prepared)
    }
    #[inline(always)]
    fn dot<V: Vector, const N: usize>(self, v: V, row: &[B], xs: [K::View<'_>; N]) -> [f32; N] {
        let (ggml, n) = ggml_row::<B, K::Block>(row);
        self.0.dot(v, &ggml[..n], xs)
    }
}

/// A row kernel of one format: a row's blocks and `N` prepared vectors in, `N` results out.
pub(crate) trait RowKernel: Copy {
    /// The most vectors one pass takes (each pass reads the weights once).
    const WIDEST_PASS: usize = 4;
    type Block;
    /// A prepared vector as the kernel reads it: split into its parts once per pass
    /// ([`RowKernel::view`]), not once per row.
    type View<'a>: Copy;
    fn view(prepared: &[f32]) -> Self::View<'_>;
    fn dot<V: Vector, const N: usize>(
        self,
        v: V,
        row: &[Self::Block],
        xs: [Self::View<'_>; N],
    ) -> [f32; N];
    /// Four rows against one vector at once, each value the same bits as [`RowKernel::dot`]'s;
    /// `None` where the kernel and the backend have no such pass.
    #[inline(always)]
    fn dot_four_rows<V: Vector>(
        self,
        _v: V,
        _rows: [&[Self::Block]; 4],
        _x: Self::View<'_>,
    ) -> Option<[f32; 4]> {
        None
    }
}

/// `n = out.len() / rows` vectors against every row, in passes of 4, 2 and 1 vectors
/// (`n = 7` is 4 + 2 + 1): each pass reads the weights once.
#[inline(always)]
fn mat_mul<V: Vector, K: RowKernel>(
    v: V,
    kernel: K,
    blocks: &[K::Block],
    prepared: &[f32],
    out: &mut [f32],
    rows: usize,
) {
    let p = prepared.len() / (out.len() / rows);
    let (mut xs, mut ys) = (prepared, out);
    while !ys.is_empty() {
        let take = [8, 4, 2, 1]
            .into_iter()
            .find(|&t| t <= K::WIDEST_PASS && t * rows <= ys.len())
            .unwrap_or(1);
        let (x, rest_x) = xs.split_at(take * p);
        let (y, rest_y) = core::mem::take(&mut ys).split_at_mut(take * rows);
        match take {
            8 => v.pass::<K, 8>(kernel, blocks, x, y),
            4 => v.pass::<K, 4>(kernel, blocks, x, y),
            2 => v.pass::<K, 2>(kernel, blocks, x, y),
            _ => v.pass::<K, 1>(kernel, blocks, x, y),
        }
        (xs, ys) = (rest_x, rest_y);
    }
}

/// One pass: `N` prepared vectors (back to back in `x`) against every row; results back to
/// back in `y`. In wasm each pass is a function of its own: inlined, all passes of all kernels
/// make one huge function, whose code V8 optimizes worse (Q4_K int8 in passes of four: 54
/// against 36 ms per call in workerd). simd128 is enabled for the whole wasm build, so the
/// separate function keeps its SIMD; native passes stay inlined into their backend's
/// `#[target_feature]` entry point, without which their intrinsics would not inline.
#[cfg_attr(not(target_arch = "wasm32"), inline(always))]
#[cfg_attr(target_arch = "wasm32", inline(never))]
pub(crate) fn mat_mul_pass<V: Vector, K: RowKernel, const N: usize>(
    v: V,
    kernel: K,
    blocks: &[K::Block],
    x: &[f32],
    y: &mut [f32],
) {
    pass_rows::<V, K, N>(v, kernel, blocks, x, y);
}

/// The body of a pass ([`mat_mul_pass`]), for a backend that wraps it in a function of its own
/// ([`Vector::pass`]): row by row, but for a one-vector pass whose kernel and backend take four
/// rows at once ([`RowKernel::dot_four_rows`]): rows `r`, `r + q`, `r + 2q`, `r + 3q` for `q` a
/// quarter of the rows, then the rows left one at a time.
#[inline(always)]
pub(crate) fn pass_rows<V: Vector, K: RowKernel, const N: usize>(
    v: V,
    kernel: K,
    blocks: &[K::Block],
    x: &[f32],
    y: &mut [f32],
) {
    let (p, rows) = (x.len() / N, y.len() / N);
    let xs: [K::View<'_>; N] = core::array::from_fn(|i| K::view(&x[i * p..(i + 1) * p]));
    let (len, quarter) = (blocks.len() / rows, rows / 4);
    let mut grouped = 0;
    if N == 1 {
        // Rows r, r + rows/4, r + rows/2 and r + 3·rows/4: four streams far apart in memory.
        // Neighbouring rows, read a block of each in turn, were half as fast: the hardware
        // prefetcher follows streams a few KiB apart badly (BENCHMARKS-notes).
        while grouped < quarter {
            let row = |k: usize| {
                let r = k * quarter + grouped;
                &blocks[r * len..(r + 1) * len]
            };
            let Some(values) = kernel.dot_four_rows(v, [row(0), row(1), row(2), row(3)], xs[0])
            else {
                break;
            };
            for (k, value) in values.into_iter().enumerate() {
                y[k * quarter + grouped] = value;
            }
            grouped += 1;
        }
    }
    // The rows left, one at a time: the rest of each quarter, then the last `rows mod 4`.
    let quarters = (0..4).map(|k| (k * quarter + grouped, (k + 1) * quarter));
    for (first, end) in quarters.chain([(4 * quarter, rows)]) {
        for (r, row) in (first..end).zip(blocks[first * len..end * len].chunks_exact(len)) {
            for (i, value) in kernel.dot(v, row, xs).into_iter().enumerate() {
                y[i * rows + r] = value;
            }
        }
    }
}

/// Floats of prepared activations for `cols` columns: the transposed `x`, then for Q4_K one sum
/// per 32 columns.
pub(crate) const fn prepared_len(q4k: bool, cols: usize) -> usize {
    if q4k {
        cols + cols / 32
    } else {
        cols
    }
}

/// Writes the per-call activation data (see the module docs) into `prepared`.
pub(crate) fn prepare(x: &[f32], q4k: bool, prepared: &mut [f32]) {
    let (xt, sums) = prepared.split_at_mut(x.len());
    for (src, dst) in x.chunks_exact(64).zip(xt.chunks_exact_mut(64)) {
        for (lane, w) in src.chunks_exact(4).enumerate() {
            for (k, &xv) in w.iter().enumerate() {
                dst[16 * k + lane] = xv;
            }
        }
    }
    if q4k {
        for (src, sum) in x.chunks_exact(32).zip(sums.iter_mut()) {
            *sum = src.iter().fold(0.0, |a, &b| a + b);
        }
    }
}

/// Exact f16 → f32 for the hot loops, without a floating-point operation on a subnormal
/// operand: a normal f16 is moved into the f32 format by integer operations alone (its exponent
/// rebiased by 127 − 15 = 112), a subnormal one is its 10-bit integer mantissa converted (exact)
/// and scaled by 2⁻²⁴ (a normal product), infinities and NaNs are rebuilt, and the sign is put
/// back. Bit-identical to `half::f16::to_f32` for all 65536 inputs (see the tests) but
/// branch-light, which matters on wasm where `half` has no hardware conversion.
///
/// Real Q6_K lm-heads have many f16-subnormal block scales `d` (below 6.1e-5: weights of
/// magnitude ~0.1 give `d` ≈ 0.1/(32·127)). The former form, `f32::from_bits(m << 13) · 2¹¹²`,
/// fed those as subnormal f32 to a multiply, which x86 executes in a microcode assist of ~100
/// cycles; wasm forbids flushing subnormals, so V8 cannot avoid it. On a slice made by the ggml
/// quantizer that doubled the Q6_K kernels' time in wasm (exact 82 against 39 ms, int8 36
/// against 19 ms; docs/BENCHMARKS.md).
#[inline(always)]
pub(crate) fn f16_to_f32(h: [u8; 2]) -> f32 {
    let h = u32::from(u16::from_le_bytes(h));
    let magnitude = (h & 0x7FFF) << 13;
    let value = if magnitude > 0x7C00 << 13 {
        magnitude | 0x7FC0_0000 // NaN: payload kept, made quiet
    } else if magnitude == 0x7C00 << 13 {
        0x7F80_0000 // infinity
    } else {
        let subnormal = ((h & 0x3FF) as f32 * f32::from_bits(0x3380_0000)).to_bits(); // · 2⁻²⁴
        let finite = if h & 0x7C00 == 0 {
            subnormal
        } else {
            magnitude + (112 << 23)
        };
        // A must-fail build's bug: nonzero finite values one ulp off.
        finite + u32::from(cfg!(kquant_perturb = "f16") && magnitude != 0)
    };
    f32::from_bits(value | (h & 0x8000) << 16)
}

/// `d · f32(scale_j)` for the 16 sub-blocks of a Q6_K block.
///
/// It converts `d` with the generic [`f16_to_f32`], not the backend's: with F16C the AVX-512
/// exact Q6_K kernel took 10.0 instead of 8.1 ms although its loop differs by three
/// instructions (cause not found; AVX2 is level either way).
#[inline(always)]
fn q6k_scales<B: Q6Block>(b: &B) -> [f32; 16] {
    let d = f16_to_f32(b.d());
    core::array::from_fn(|j| d * f32::from(b.scale(j)))
}

/// A Q6_K block in one of its layouts, as the kernels read it: a chunk's quants come out as a
/// vector (`chunk`), from which the exact kernel takes its weights and the int8 kernel its dot
/// products. The kernels (`exact::Q6K`, `int8::Q6KQ8`) are written once over this trait.
pub(crate) trait Q6Block: bytemuck::Pod {
    /// Whether a chunk's unpacking shifts by amounts that depend on its step (ggml's layout):
    /// such kernels unroll the steps where constant shift counts pay (`Vector::unroll_int8_steps`).
    const SHIFTS_BY_STEP: bool;
    /// Whether [`Q6Block::dot_scaled_add`] on `V` multiplies `q − 32` rather than `q`.
    fn centered<V: Vector>() -> bool;
    /// `d`, f16 little-endian. Both layouts keep ggml's 16 scales at bytes 192..208 of a block
    /// and `d` at 208..210.
    #[inline(always)]
    fn d(&self) -> [u8; 2] {
        // One two-byte read (byte by byte, LLVM kept two loads in wasm).
        bytemuck::pod_read_unaligned(&bytemuck::bytes_of(self)[208..210])
    }
    /// The signed scale of 16-weight sub-block `j`.
    #[inline(always)]
    fn scale(&self, j: usize) -> i8 {
        bytemuck::bytes_of(self)[192 + j] as i8
    }
    /// Chunk `c` of step `s`, in the layout's own form, for [`Q6Block::weight`].
    fn chunk<V: Vector>(&self, v: V, s: usize, c: usize) -> V::U;
    /// Chunk `c` of step `s` for [`Q6Block::dot_scaled_add`].
    fn int8_chunk<V: Vector>(&self, v: V, s: usize, c: usize) -> V::U;
    /// Weight `k` of each lane of a chunk (weight `4L + k` for lane `L`): the exact f32 `q − 32`.
    fn weight<V: Vector>(v: V, chunk: V::U, k: u32) -> V::F;
    /// [`Vector::q6k_int8_sums`] for blocks of this layout (`None`: the chunk loop).
    fn int8_sums<V: Vector, const K: usize>(
        blocks: &[Self; K],
        v: V,
        xq8: &[[i8; QK_K]; K],
        bsums: &[[i16; 16]; K],
    ) -> Option<[i32; K]>;
    /// [`Vector::q6k_int8_four_row_sums`] for blocks of this layout.
    fn int8_four_row_sums<V: Vector>(
        blocks: [&Self; 4],
        v: V,
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[i32; 4]>;
    /// `acc +` [`Vector::dot_scaled`] of a chunk.
    fn dot_scaled_add<V: Vector>(
        v: V,
        acc: V::U,
        chunk: V::U,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> V::U;
}

impl Q6Block for BlockQ6K {
    const SHIFTS_BY_STEP: bool = true;
    #[inline(always)]
    fn centered<V: Vector>() -> bool {
        false
    }
    /// The quants as bytes (0..63) in weight order ([`q6k_chunk`]).
    #[inline(always)]
    fn chunk<V: Vector>(&self, v: V, s: usize, c: usize) -> V::U {
        q6k_chunk(v, self, s, c)
    }
    #[inline(always)]
    fn int8_chunk<V: Vector>(&self, v: V, s: usize, c: usize) -> V::U {
        q6k_chunk(v, self, s, c)
    }
    #[inline(always)]
    fn int8_sums<V: Vector, const K: usize>(
        blocks: &[Self; K],
        v: V,
        xq8: &[[i8; QK_K]; K],
        bsums: &[[i16; 16]; K],
    ) -> Option<[i32; K]> {
        v.q6k_int8_sums(blocks, xq8, bsums)
    }
    #[inline(always)]
    fn int8_four_row_sums<V: Vector>(
        blocks: [&Self; 4],
        v: V,
        xq8: &[i8; QK_K],
        bsums: &[i16; 16],
    ) -> Option<[i32; 4]> {
        v.q6k_int8_four_row_sums(blocks, xq8, bsums)
    }
    #[inline(always)]
    fn weight<V: Vector>(v: V, chunk: V::U, k: u32) -> V::F {
        v.unpack_byte(chunk, k, 6, 32)
    }
    #[inline(always)]
    fn dot_scaled_add<V: Vector>(
        v: V,
        acc: V::U,
        chunk: V::U,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> V::U {
        v.dot_scaled_add(acc, chunk, xq8, xq16, scales)
    }
}

impl Q6Block for BlockQ6KPacked {
    const SHIFTS_BY_STEP: bool = false;
    #[inline(always)]
    fn centered<V: Vector>() -> bool {
        V::PACKED6_CENTERED
    }
    /// The lanes' 24 bits ([`Vector::load_u24`]); a chunk is `3·LANES` bytes, 48 per step. The
    /// scales and `d` follow the quants, so the loads of the last chunk stay inside the block.
    #[inline(always)]
    fn chunk<V: Vector>(&self, v: V, s: usize, c: usize) -> V::U {
        v.load_u24(&bytemuck::bytes_of(self)[48 * s + 3 * V::LANES * c..])
    }
    #[inline(always)]
    fn int8_chunk<V: Vector>(&self, v: V, s: usize, c: usize) -> V::U {
        // Chunk j = s·(16 / LANES) + c starts at 3·LANES·j; written so, the flat int8 loop's
        // (j / k, j mod k) folds back to j.
        let j = s * (16 / V::LANES) + c;
        v.load_packed6(&bytemuck::bytes_of(self)[3 * V::LANES * j..])
    }
    #[inline(always)]
    fn int8_sums<V: Vector, const K: usize>(
        _: &[Self; K],
        _: V,
        _: &[[i8; QK_K]; K],
        _: &[[i16; 16]; K],
    ) -> Option<[i32; K]> {
        None
    }
    #[inline(always)]
    fn int8_four_row_sums<V: Vector>(
        _: [&Self; 4],
        _: V,
        _: &[i8; QK_K],
        _: &[i16; 16],
    ) -> Option<[i32; 4]> {
        None
    }
    #[inline(always)]
    fn weight<V: Vector>(v: V, chunk: V::U, k: u32) -> V::F {
        v.to_f32(v.sar(v.shl(chunk, 26 - 6 * k), 26))
    }
    #[inline(always)]
    fn dot_scaled_add<V: Vector>(
        v: V,
        acc: V::U,
        chunk: V::U,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> V::U {
        v.add_i32(acc, v.dot_scaled_packed6(chunk, xq8, xq16, scales))
    }
}

/// For a Q4_K block: `d · f32(sc)` per 16-weight group (two per sub-block), and `dmin · f32(m)`
/// per 32-weight sub-block.
#[inline(always)]
fn q4k_scales<V: Vector>(v: V, b: &BlockQ4K) -> ([f32; 16], [f32; 8]) {
    let (d, dmin) = (v.f16_to_f32(b.d), v.f16_to_f32(b.dmin));
    let (sc, m) = b.scales_mins();
    let ds = core::array::from_fn(|j| d * f32::from(sc[j / 2]));
    // The must-fail build `KQUANT_PERTURB=q4k_min` pairs each scale with its
    // neighbour's min.
    let pair = |s: usize| {
        if cfg!(kquant_perturb = "q4k_min") {
            s ^ 1
        } else {
            s
        }
    };
    let dm = core::array::from_fn(|s| dmin * f32::from(m[pair(s)]));
    (ds, dm)
}

/// The Q6_K quants (0..63, one per byte, in weight order) of chunk `c` of step `s`.
#[inline(always)]
fn q6k_chunk<V: Vector>(v: V, b: &BlockQ6K, s: usize, c: usize) -> V::U {
    let o = c * 4 * V::LANES;
    let (h, nib) = (s / 2, 4 * (s % 2) as u32);
    let ql = v.load_u(&b.ql[64 * h + o..]);
    let qh = v.load_twice(&b.qh[32 * h..32 * h + 32], o, 2);
    let lo = v.and(v.shr(ql, nib), v.splat_u(0x0F0F_0F0F));
    let hi = v.and(v.shr(qh, nib), v.splat_u(0x0303_0303));
    v.or(lo, v.shl(hi, 4))
}

/// The Q4_K quants of chunk `c` of step `s`, their nibble in the low half of each byte (the
/// high half still holds other bits: callers mask).
#[inline(always)]
fn q4k_chunk<V: Vector>(v: V, b: &BlockQ4K, s: usize, c: usize) -> V::U {
    v.load_twice(&b.qs[32 * s..32 * s + 32], c * 4 * V::LANES, 4)
}

#[cfg(test)]
mod tests {
    #[test]
    fn f16_conversion_matches_half_for_every_value() {
        for bits in 0..=u16::MAX {
            let ours = super::f16_to_f32(bits.to_le_bytes());
            let theirs = half::f16::from_bits(bits).to_f32();
            assert_eq!(ours.to_bits(), theirs.to_bits(), "f16 bits {bits:#06x}");
        }
    }
}

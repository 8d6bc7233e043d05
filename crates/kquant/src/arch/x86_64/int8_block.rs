//! The int8 mode's integer sums of one block against one vector, in AVX2 registers: what the
//! AVX2 and AVX-512 backends run for a one-vector pass (the decode case) in place of the
//! generic chunk loop.
//!
//! The integer sums of int8's canonical order (`generic::int8`) are exact, so any order of the
//! integer operations gives the same `S` and `M`; only the float epilogue is fixed. This shape
//! starts from ggml's AVX2 loops, which keep every step in the vector unit, and avoids their
//! costliest step on Zen 4, the horizontal add: each `vphaddw`/`vphaddd` takes two cycles of
//! throughput there, where an unpack, a `madd` or a `vpshufb` takes half of one (measured on
//! independent chains).
//!
//! * 32 weights at a time: `maddubs` multiplies the unsigned quants by the signed activation
//!   quants and adds pairs into i16 (at most 2·63·127: no saturation).
//! * Q4_K: one `madd` multiplies each register's pairs by its sub-block's scale and adds pairs
//!   into i32, one `add` accumulates. The 12 bytes of 6-bit scales and mins are unpacked in
//!   vector registers ([`q4k_scales_mins`]) and each sub-block's scale widened to i16 straight
//!   from its byte by one in-lane byte shuffle (`vpshufb`, whose zeroing selector widens).
//! * Q6_K: two registers at a time, one `hadd` adds their i16 pairs again (at most 4·63·127),
//!   giving in each 128-bit half four sums of one register's scale group and four of the
//!   other's; one `madd` against their scales (widened to i16 once per block, put in place by
//!   one `vpshufb`), one `add`. Without the `hadd` (a `madd` per register, as for Q4_K) LLVM
//!   hoisted the sixteen scale registers of a run of four blocks and spilled them: no faster.
//! * Q6_K's `−32` is not subtracted per weight: `32 · Σ_j sc_j · bsum_j` (one `madd` of the
//!   scales against the vector's group sums) comes off the lanes before the one reduction.
//! * Q4_K's mins: `M = Σ_j m_{j/2} · bsum_j`, each min shuffled into its sub-block's two group
//!   lanes and one `madd` against the vector's sixteen group sums, reduced together with `S`.
//!
//! Blocks go four at a time (independent work for the out-of-order core, which a lone block's
//! chain of `madd`s and its reduction do not give), reduced together by a transpose of in-lane
//! unpacks and adds ([`four_lane_sums`], [`four_sums_and_mins`]) to one i32 per block (Q4_K:
//! `S` and `M` in the two halves of one register). The one-vector pass takes a block of each
//! of four rows a quarter of the matrix apart ([`q6k_four_row_sums`], [`q4k_four_row_sums`]),
//! their float terms side by side ([`q6k_terms`], [`q4k_terms`]: the generic epilogue's
//! operations lane by lane, F16C converting the four `d`, or `d` and `dmin`, at once), each
//! added to its row's sum in block order; rows left over go in runs of one to four consecutive
//! blocks ([`q6k_sums`], [`q4k_sums`]; shorter runs repeat their last block).
//!
//! Measured against the earlier shape (`hadd` pairs for both types, runs of consecutive blocks
//! only), one vector against 2048 × 3584 Q4_K (in L3, `peer-timing` on a Zen 4 VM): 0.86–0.89
//! of ggml's speed (AVX2) → 0.95–0.98; 1024 × 5376 Q6_K: 0.84–0.91 → 0.91–0.94. It takes more
//! instructions than the earlier shape but less time (callgrind, AVX2 build, rows of 14 blocks:
//! Q4_K 82 → 90 per block, Q6_K 89 → 93).
//!
//! Each run first asks for the bytes of the next run to be brought into L1 (`prefetch_after`:
//! one `prefetcht0` per 64 bytes). The hardware prefetcher follows the stream, but not closely
//! enough: one vector against 32768 × 5376 Q6_K went from 0.83–0.98 of ggml's speed to
//! 0.95–1.07 (`peer-timing`, Zen 4); hints two runs, 2 KiB or 4 KiB ahead gained less or
//! nothing.

use core::arch::x86_64::*;
use core::hint::black_box;

use crate::{BlockQ4K, BlockQ6K};

/// `S` of each of `K` consecutive Q6_K blocks (ggml's layout), each against its own part of
/// the vector: `Σ_j sc_j · Σ_{i in j} (q_i − 32) · xq_i`, reduced together; `None` unless `K`
/// is 1 to 4.
///
/// # Safety
///
/// AVX2 must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
pub(super) unsafe fn q6k_sums<const K: usize>(
    b: &[BlockQ6K; K],
    xq8: &[[i8; 256]; K],
    bsums: &[[i16; 16]; K],
) -> Option<[i32; K]> {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        prefetch_after(b);
        // The blocks' calls written out by run length, not a loop over an array of registers
        // (which LLVM kept in memory) nor `array::from_fn` (a closure is a function of its own,
        // compiled without the caller's target features).
        // Shorter runs repeat their last block.
        let sums = match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b0], [x0], [s0]) => {
                let l0 = q6k_lanes(b0, x0, s0);
                four_lane_sums([l0, l0, l0, l0])
            }
            ([b0, b1], [x0, x1], [s0, s1]) => {
                let l1 = q6k_lanes(b1, x1, s1);
                four_lane_sums([q6k_lanes(b0, x0, s0), l1, l1, l1])
            }
            ([b0, b1, b2], [x0, x1, x2], [s0, s1, s2]) => {
                let l2 = q6k_lanes(b2, x2, s2);
                four_lane_sums([q6k_lanes(b0, x0, s0), q6k_lanes(b1, x1, s1), l2, l2])
            }
            ([b0, b1, b2, b3], [x0, x1, x2, x3], [s0, s1, s2, s3]) => four_lane_sums([
                q6k_lanes(b0, x0, s0),
                q6k_lanes(b1, x1, s1),
                q6k_lanes(b2, x2, s2),
                q6k_lanes(b3, x3, s3),
            ]),
            _ => return None,
        };
        let sums: [i32; 4] = bytemuck::cast(sums);
        sums.first_chunk().copied()
    }
}

/// `S` of one Q6_K block of each of four rows (ggml's layout) against the same block of the
/// vector, as [`q6k_sums`] computes it for a run of four.
///
/// # Safety
///
/// AVX2 must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
pub(super) unsafe fn q6k_four_row_sums(
    b: [&BlockQ6K; 4],
    xq8: &[i8; 256],
    bsums: &[i16; 16],
) -> [i32; 4] {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        prefetch_after_each(b);
        let [b0, b1, b2, b3] = b;
        // The same activation block for all four: without the opaque references LLVM loads each
        // of its eight registers once and keeps them live across the four blocks, which spills
        // (one vector against Q6_K 1.6–2 times as slow, Q4_K on AVX-512 1.1–1.6 times).
        let [s0, s1, s2, s3]: [i32; 4] = bytemuck::cast(four_lane_sums([
            q6k_lanes(b0, black_box(xq8), bsums),
            q6k_lanes(b1, black_box(xq8), bsums),
            q6k_lanes(b2, black_box(xq8), bsums),
            q6k_lanes(b3, black_box(xq8), bsums),
        ]));
        if cfg!(kquant_perturb = "four_rows") {
            [s1, s0, s2, s3] // A must-fail build's bug: the first two rows' `S` swapped.
        } else {
            [s0, s1, s2, s3]
        }
    }
}

/// [`prefetch_after`] each of four rows' blocks: the next block of each row.
#[inline(always)]
fn prefetch_after_each<T>(blocks: [&T; 4]) {
    for block in blocks {
        prefetch_after(core::array::from_ref(block));
    }
}

/// Asks for the bytes of the `K` blocks after `run` to be brought into the L1 cache.
#[inline(always)]
fn prefetch_after<T, const K: usize>(run: &[T; K]) {
    let next = run.as_ptr_range().end.cast::<i8>();
    for line in (0..core::mem::size_of_val(run)).step_by(64) {
        // SAFETY: a prefetch only hints; it reads nothing and never faults, whatever the
        // address (here past the end of `run`, maybe past the end of the matrix).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line)) };
    }
}

/// `S` of a Q6_K block, spread over eight i32 lanes.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn q6k_lanes(b: &BlockQ6K, xq8: &[i8; 256], bsums: &[i16; 16]) -> __m256i {
    // SAFETY: AVX2 is available (the caller's contract). Every load reads 16 or 32 bytes at an
    // offset that the fixed-size arrays hold: `ql` 128 bytes (two halves of 64), `qh` 64 (two of
    // 32), `scales` 16, `xq8` 256 (eight runs of 32), `bsums` 32.
    unsafe {
        let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.scales.as_ptr().cast()));
        // Lanes of `sc` by group pair: groups 0..8 in both halves, then groups 8..16.
        let pairs = [
            _mm256_permute4x64_epi64::<0x44>(sc),
            _mm256_permute4x64_epi64::<0xEE>(sc),
        ];
        let correction = _mm256_madd_epi16(sc, _mm256_loadu_si256(bsums.as_ptr().cast()));
        let (nibble, top) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let mut sum = _mm256_setzero_si256();
        for (h, &half) in pairs.iter().enumerate() {
            let ql0 = _mm256_loadu_si256(b.ql[64 * h..].as_ptr().cast());
            let ql1 = _mm256_loadu_si256(b.ql[64 * h + 32..].as_ptr().cast());
            let qh = _mm256_loadu_si256(b.qh[32 * h..].as_ptr().cast());
            // Weights 128h + 32t..: the low nibbles of ql0, ql1, then their high nibbles; qh's
            // bit pairs 2t..2t + 2 moved to bits 4..6 of each byte by a 16-bit shift and one
            // mask (the bits a shift carries across a byte boundary land outside the mask).
            let quants = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, nibble),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(qh), top),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, nibble),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(qh), top),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), nibble),
                    _mm256_and_si256(qh, top),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), nibble),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), top),
                ),
            ];
            for u in 0..2 {
                // 32-weight runs k and k + 1: groups 2k..2k + 4 (2k and 2k + 2 in the low
                // 128-bit halves, 2k + 1 and 2k + 3 in the high ones).
                let k = 4 * h + 2 * u;
                let x = [
                    _mm256_loadu_si256(xq8[32 * k..].as_ptr().cast()),
                    _mm256_loadu_si256(xq8[32 * (k + 1)..].as_ptr().cast()),
                ];
                let products = [
                    _mm256_maddubs_epi16(quants[2 * u], x[0]),
                    _mm256_maddubs_epi16(quants[2 * u + 1], x[1]),
                ];
                // Per half: four pair sums of run k's group, then four of run k + 1's (each at
                // most 4·63·127), against their scales.
                let pairs = _mm256_hadd_epi16(products[0], products[1]);
                let scale = _mm256_shuffle_epi8(half, group_quad(u));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, scale));
            }
        }
        _mm256_sub_epi32(sum, _mm256_slli_epi32::<5>(correction))
    }
}

/// `(S, M)` of each of `K` consecutive Q4_K blocks, each against its own part of the vector:
/// `S = Σ_j sc_{j/2} · Σ_{i in j} q_i · xq_i` and `M = Σ_s m_s · (bsum_2s + bsum_2s+1)`,
/// reduced together; `None` unless `K` is 1 to 4.
///
/// # Safety
///
/// AVX2 must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
pub(super) unsafe fn q4k_sums<const K: usize>(
    b: &[BlockQ4K; K],
    xq8: &[[i8; 256]; K],
    bsums: &[[i16; 16]; K],
) -> Option<[(i32, i32); K]> {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        prefetch_after(b);
        // Written out by run length, as in `q6k_sums`; shorter runs repeat their last block.
        let both = match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b0], [x0], [s0]) => {
                let l0 = q4k_lanes(b0, x0, s0);
                four_sums_and_mins([l0, l0, l0, l0])
            }
            ([b0, b1], [x0, x1], [s0, s1]) => {
                let l1 = q4k_lanes(b1, x1, s1);
                four_sums_and_mins([q4k_lanes(b0, x0, s0), l1, l1, l1])
            }
            ([b0, b1, b2], [x0, x1, x2], [s0, s1, s2]) => {
                let l2 = q4k_lanes(b2, x2, s2);
                four_sums_and_mins([q4k_lanes(b0, x0, s0), q4k_lanes(b1, x1, s1), l2, l2])
            }
            ([b0, b1, b2, b3], [x0, x1, x2, x3], [s0, s1, s2, s3]) => four_sums_and_mins([
                q4k_lanes(b0, x0, s0),
                q4k_lanes(b1, x1, s1),
                q4k_lanes(b2, x2, s2),
                q4k_lanes(b3, x3, s3),
            ]),
            _ => return None,
        };
        let [s0, s1, s2, s3, m0, m1, m2, m3]: [i32; 8] = bytemuck::cast(both);
        [(s0, m0), (s1, m1), (s2, m2), (s3, m3)]
            .first_chunk()
            .copied()
    }
}

/// `(S, M)` of one Q4_K block of each of four rows against the same block of the vector, as
/// [`q4k_sums`] computes them for a run of four.
///
/// # Safety
///
/// AVX2 must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
pub(super) unsafe fn q4k_four_row_sums(
    b: [&BlockQ4K; 4],
    xq8: &[i8; 256],
    bsums: &[i16; 16],
) -> [(i32, i32); 4] {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        prefetch_after_each(b);
        let [b0, b1, b2, b3] = b;
        // Opaque references to the activation block, as in `q6k_four_row_sums`.
        let both = four_sums_and_mins([
            q4k_lanes(b0, black_box(xq8), bsums),
            q4k_lanes(b1, black_box(xq8), bsums),
            q4k_lanes(b2, black_box(xq8), bsums),
            q4k_lanes(b3, black_box(xq8), bsums),
        ]);
        let [s0, s1, s2, s3, m0, m1, m2, m3]: [i32; 8] = bytemuck::cast(both);
        if cfg!(kquant_perturb = "four_rows") {
            [(s1, m0), (s0, m1), (s2, m2), (s3, m3)] // As in `q6k_four_row_sums`.
        } else {
            [(s0, m0), (s1, m1), (s2, m2), (s3, m3)]
        }
    }
}

/// A Q4_K block's eight 6-bit scales (bytes 0..8) and eight mins (bytes 8..16), unpacked
/// from its 12 bytes in vector registers by `BlockQ4K::scales_mins`'s word operations: with the
/// bytes as words `w0 w1 w2`, the scales are `w0 & 0x3F…` and `(w2 & 0x0F…) | ((w0 >> 2) &
/// 0x30…)`, the mins `w1 & 0x3F…` and `((w2 >> 4) & 0x0F…) | ((w1 >> 2) & 0x30…)`; the four words
/// are computed side by side (two shuffles put `w0 w2 w1 w2` and `w0 w0 w0 w1` in the lanes).
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
pub(super) unsafe fn q4k_scales_mins(b: &BlockQ4K) -> __m128i {
    // SAFETY: AVX2 is available (the caller's contract). The load reads bytes 4..20 of the
    // block (the 12 scale bytes and the first four of `qs`, unused), through a pointer to the
    // whole block.
    unsafe {
        let words = _mm_loadu_si128(core::ptr::from_ref(b).cast::<u8>().add(4).cast());
        let low_sources = _mm_shuffle_epi32::<0b10_01_10_00>(words); // w0 w2 w1 w2
        let high_sources = _mm_shuffle_epi32::<0b01_00_00_00>(words); // w0 w0 w0 w1
        let low_bits = _mm_and_si128(low_sources, _mm_set1_epi8(0x3F));
        let nibbles = _mm_and_si128(
            _mm_srlv_epi32(low_sources, _mm_set_epi32(4, 0, 0, 0)),
            _mm_set1_epi8(0x0F),
        );
        let top_bits = _mm_and_si128(_mm_srli_epi32::<2>(high_sources), _mm_set1_epi8(0x30));
        let high_bits = _mm_or_si128(nibbles, top_bits);
        _mm_blend_epi32::<0b1010>(low_bits, high_bits)
    }
}

/// `S` and `M` of a Q4_K block, each spread over eight i32 lanes.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn q4k_lanes(b: &BlockQ4K, xq8: &[i8; 256], bsums: &[i16; 16]) -> (__m256i, __m256i) {
    // SAFETY: AVX2 is available (the caller's contract). Every load reads 32 bytes at an offset
    // that the fixed-size arrays hold: `qs` 128 bytes (four runs of 32), `xq8` 256 (eight),
    // `bsums` 32.
    unsafe {
        // The scale and min bytes in both 128-bit halves, for in-lane byte shuffles to widen.
        let bytes = q4k_scales_mins(b);
        let bytes = _mm256_set_m128i(bytes, bytes);
        // Each min against its sub-block's two 16-weight group sums.
        let mins = _mm256_shuffle_epi8(bytes, min_pairs());
        let mins = _mm256_madd_epi16(mins, _mm256_loadu_si256(bsums.as_ptr().cast()));
        let nibble = _mm256_set1_epi8(0x0F);
        let mut sum = _mm256_setzero_si256();
        for s in 0..4 {
            // Sub-block 2s in the low nibbles of `qs[32s..]`, sub-block 2s + 1 in the high ones.
            let q = _mm256_loadu_si256(b.qs[32 * s..].as_ptr().cast());
            let x = [
                _mm256_loadu_si256(xq8[64 * s..].as_ptr().cast()),
                _mm256_loadu_si256(xq8[64 * s + 32..].as_ptr().cast()),
            ];
            let products = [
                _mm256_maddubs_epi16(_mm256_and_si256(q, nibble), x[0]),
                _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(q), nibble), x[1]),
            ];
            // Each sub-block's pair sums (each at most 2·15·127) against its scale.
            let scaled = [
                _mm256_madd_epi16(products[0], _mm256_shuffle_epi8(bytes, widened(2 * s))),
                _mm256_madd_epi16(products[1], _mm256_shuffle_epi8(bytes, widened(2 * s + 1))),
            ];
            sum = _mm256_add_epi32(sum, _mm256_add_epi32(scaled[0], scaled[1]));
        }
        (sum, mins)
    }
}

/// The float terms of four Q6_K blocks, `(d·dx)·f32(S)`, one block per lane: the same operations
/// as `generic::int8`'s epilogue, lane by lane (F16C's conversion is exact; no fused operation).
///
/// # Safety
///
/// AVX2 and F16C must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
pub(super) unsafe fn q6k_terms(d: &[[u8; 2]; 4], dx: &[f32; 4], sums: &[i32; 4]) -> [f32; 4] {
    // SAFETY: AVX2 and F16C are available (the caller's contract); `dx` and `sums` are 16
    // readable bytes each.
    unsafe {
        let d = _mm_cvtph_ps(_mm_cvtsi64_si128(i64::from_le_bytes(bytemuck::cast(*d))));
        let scaled = _mm_mul_ps(d, _mm_loadu_ps(dx.as_ptr()));
        let sums = _mm_cvtepi32_ps(_mm_loadu_si128(sums.as_ptr().cast()));
        let [t0, t1, t2, t3]: [f32; 4] = bytemuck::cast(_mm_mul_ps(scaled, sums));
        if cfg!(kquant_perturb = "int8_terms") {
            [t1, t0, t2, t3] // A must-fail build's bug: the first two blocks' terms swapped.
        } else {
            [t0, t1, t2, t3]
        }
    }
}

/// The float terms of four Q4_K blocks, `(d·dx)·f32(S) − (dmin·dx)·f32(M)`, one block per lane:
/// the same operations as `generic::int8`'s epilogue, each lane rounded as the scalar code rounds
/// (F16C's conversion is exact; no fused operation). Each block's `d` and `dmin` (its first four
/// bytes) go into one 32-bit lane, so one conversion of eight halves gives both scales of all
/// four blocks; `d` to the low half of the register and `dmin` to the high one, against `S` and
/// `M` in the same places, so one product of eight lanes and one subtraction of the halves.
///
/// # Safety
///
/// AVX2 and F16C must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
pub(super) unsafe fn q4k_terms(
    b: [&BlockQ4K; 4],
    dx: &[f32; 4],
    sums: &[(i32, i32); 4],
) -> [f32; 4] {
    let d_and_dmin = |k: usize| {
        let [d0, d1] = b[k].d;
        let [m0, m1] = b[k].dmin;
        i32::from_le_bytes([d0, d1, m0, m1])
    };
    let [(s0, m0), (s1, m1), (s2, m2), (s3, m3)] = *sums;
    // SAFETY: AVX2 and F16C are available (the caller's contract); `dx` is 16 readable bytes.
    unsafe {
        let halves = _mm_set_epi32(d_and_dmin(3), d_and_dmin(2), d_and_dmin(1), d_and_dmin(0));
        // [d0 dmin0 d1 dmin1 …] → [d0 d1 d2 d3 | dmin0 dmin1 dmin2 dmin3]
        let both = _mm256_permutevar8x32_ps(
            _mm256_cvtph_ps(halves),
            _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0),
        );
        let dx = _mm_loadu_ps(dx.as_ptr());
        let dx = _mm256_set_m128(dx, dx);
        let integers = _mm256_set_epi32(m3, m2, m1, m0, s3, s2, s1, s0);
        let products = _mm256_mul_ps(_mm256_mul_ps(both, dx), _mm256_cvtepi32_ps(integers));
        let terms = _mm_sub_ps(
            _mm256_castps256_ps128(products),
            _mm256_extractf128_ps::<1>(products),
        );
        let [t0, t1, t2, t3]: [f32; 4] = bytemuck::cast(terms);
        if cfg!(kquant_perturb = "int8_terms") {
            [t1, t0, t2, t3] // A must-fail build's bug: the first two blocks' terms swapped.
        } else {
            [t0, t1, t2, t3]
        }
    }
}

/// The shuffle that fills each half of a register with four copies of one i16 lane, then four
/// of another, both from the same half: lanes `4u`, `4u + 2` in the low half and `4u + 1`,
/// `4u + 3` in the high one (`u` in 0..2).
#[inline(always)]
fn group_quad(u: usize) -> __m256i {
    let [a, b, c, d] = [4 * u, 4 * u + 2, 4 * u + 1, 4 * u + 3].map(scale_selector);
    // SAFETY: `_mm256_set_epi16` only builds a register (AVX, implied by the callers' AVX2).
    unsafe { _mm256_set_epi16(d, d, d, d, c, c, c, c, b, b, b, b, a, a, a, a) }
}

/// The shuffle that fills each half of a register with sixteen i16 copies of the scale in
/// byte `scale_lane(k)` of that half (`k` in 0..8), zero-extended.
#[inline(always)]
fn widened(k: usize) -> __m256i {
    let byte = scale_lane(k) as i16;
    // SAFETY: `_mm256_set1_epi16` only builds a register (AVX, implied by the callers' AVX2).
    unsafe { _mm256_set1_epi16(byte | -0x8000) }
}

/// The shuffle that widens the eight min bytes (8..16 of each half) to i16 lanes, each min
/// twice: lanes `2s`, `2s + 1` of the register (sub-block `s`'s two groups) get min `s`.
#[inline(always)]
fn min_pairs() -> __m256i {
    let lane = |j: i16| (8 + j / 2) | -0x8000;
    // SAFETY: `_mm256_set_epi16` only builds a register (AVX, implied by the callers' AVX2).
    unsafe {
        _mm256_set_epi16(
            lane(15),
            lane(14),
            lane(13),
            lane(12),
            lane(11),
            lane(10),
            lane(9),
            lane(8),
            lane(7),
            lane(6),
            lane(5),
            lane(4),
            lane(3),
            lane(2),
            lane(1),
            lane(0),
        )
    }
}

/// The two `vpshufb` selector bytes that pick i16 lane `scale_lane(lane)` (0..8) of a 128-bit
/// half.
#[inline(always)]
fn scale_selector(lane: usize) -> i16 {
    let lane = scale_lane(lane) as u8;
    i16::from_le_bytes([2 * lane, 2 * lane + 1])
}

/// The lane a scale group (Q6_K) or sub-block (Q4_K) takes its scale from: its own, or in the
/// must-fail build `KQUANT_PERTURB=int8_block` the next one's.
#[inline(always)]
fn scale_lane(lane: usize) -> usize {
    if cfg!(kquant_perturb = "int8_block") {
        (lane + 1) % 8
    } else {
        lane
    }
}

/// The sums of the eight i32 lanes of each of four registers (wrapping), by the transpose of
/// [`four_sums_and_mins`], then the halves added.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn four_lane_sums(v: [__m256i; 4]) -> __m128i {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        halves_added(interleaved_sums::<2>(
            interleaved_sums::<1>(v[0], v[1]),
            interleaved_sums::<1>(v[2], v[3]),
        ))
    }
}

/// The sums of the eight i32 lanes of each of four blocks' `S` and `M` registers (wrapping):
/// `[S0 S1 S2 S3 | M0 M1 M2 M3]`. A transpose by in-lane unpacks, no horizontal adds (each
/// `vphaddd` takes two cycles of throughput on Zen 4, an unpack half of one): pairs of
/// registers interleaved and added (two lanes of each left per half), the pairs' results
/// interleaved and added (one per half), then the halves of the `S` and `M` results added.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn four_sums_and_mins(v: [(__m256i, __m256i); 4]) -> __m256i {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        let sums = interleaved_sums::<2>(
            interleaved_sums::<1>(v[0].0, v[1].0),
            interleaved_sums::<1>(v[2].0, v[3].0),
        );
        let mins = interleaved_sums::<2>(
            interleaved_sums::<1>(v[0].1, v[1].1),
            interleaved_sums::<1>(v[2].1, v[3].1),
        );
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(sums, mins),
            _mm256_permute2x128_si256::<0x31>(sums, mins),
        )
    }
}

/// `a` and `b` interleaved by `W` i32 lanes at a time (1 or 2), low and high parts of each
/// 128-bit half added: per half, `[a0+a2, b0+b2, a1+a3, b1+b3]` (`W` = 1) or `[a0+a2, a1+a3,
/// b0+b2, b1+b3]` (`W` = 2).
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn interleaved_sums<const W: usize>(a: __m256i, b: __m256i) -> __m256i {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        if W == 1 {
            _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b))
        } else {
            _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b))
        }
    }
}

/// The two 128-bit halves of a register added lane by lane.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn halves_added(v: __m256i) -> __m128i {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe { _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)) }
}

//! The int8 mode's integer sums of one block against one vector, in AVX2 registers: what the
//! AVX2 and AVX-512 backends run for a one-vector pass (the decode case) in place of the
//! generic chunk loop.
//!
//! The integer sums of int8's canonical order (`generic::int8`) are exact, so any order of the
//! integer operations gives the same `S` and `M`; only the float epilogue is fixed, and it stays
//! in the generic kernel. This shape follows ggml's AVX2 loops, which keep every step in the
//! vector unit:
//!
//! * 32 weights at a time: `maddubs` multiplies the unsigned quants by the signed activation
//!   quants and adds pairs into i16 (at most 2·63·127: no saturation), `madd` multiplies those
//!   by their 16-weight group's scale and adds pairs into i32, one `add` accumulates. The 16
//!   weights of the register's low 128-bit half are one group, those of the high half the next.
//! * The scales are widened to i16 once per block; a group pair's scales are put in the two
//!   halves of a register by one in-lane byte shuffle (`vpshufb`) per 32 weights.
//! * Q6_K's `−32` is not subtracted per weight: `32 · Σ_j sc_j · bsum_j` (one `madd` of the
//!   scales against the vector's group sums) comes off the lanes before the one reduction.
//! * Q4_K's mins: `M = Σ_s m_s · (bsum_2s + bsum_2s+1)`, one `hadd` of the group sums into
//!   sub-block sums and one `madd`, reduced together with `S`.
//!
//! The one-vector pass asks for runs of one to four consecutive blocks: a run's blocks are
//! interleaved (independent work for the out-of-order core, which a lone block's chain of
//! `madd`s and its reduction do not give: in rows of 14 blocks, each of the two left after
//! three runs of four took about 1.6 times as long as a block of a run) and reduced together by
//! horizontal adds to one i32 per block (two for Q4_K, side by side). The conversion to f32 and
//! the scaling are the generic kernel's.
//!
//! Each run first asks for the bytes of the next run to be brought into L1 (`prefetch_after`:
//! one `prefetcht0` per 64 bytes). The hardware prefetcher follows the stream, but not closely
//! enough: one vector against 32768 × 5376 Q6_K went from 0.83–0.98 of ggml's speed to
//! 0.95–1.07 (`peer-timing`, Zen 4); hints two runs, 2 KiB or 4 KiB ahead gained less or
//! nothing.

use core::arch::x86_64::*;

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
        let sums = match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b0], [x0], [s0]) => {
                let quad = halves_added(q6k_lanes(b0, x0, s0));
                let pair = _mm_add_epi32(quad, _mm_shuffle_epi32::<0b01_00_11_10>(quad));
                _mm_add_epi32(pair, _mm_shuffle_epi32::<0b10_11_00_01>(pair))
            }
            ([b0, b1], [x0, x1], [s0, s1]) => {
                let (l0, l1) = (q6k_lanes(b0, x0, s0), q6k_lanes(b1, x1, s1));
                let quad = halves_added(_mm256_hadd_epi32(l0, l1)); // [l0 l0 l1 l1] in parts
                _mm_hadd_epi32(quad, quad)
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
            for (t, q) in quants.into_iter().enumerate() {
                let k = 4 * h + t; // 32-weight run: groups 2k and 2k + 1
                let x = _mm256_loadu_si256(xq8[32 * k..].as_ptr().cast());
                let scale = _mm256_shuffle_epi8(half, group_pair(t));
                let products = _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scale);
                sum = _mm256_add_epi32(sum, products);
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
        // Written out by run length, as in `q6k_sums`: the blocks' `S` in the lanes of `sums`,
        // their `M` in those of `mins`.
        let (sums, mins) = match (b.as_slice(), xq8.as_slice(), bsums.as_slice()) {
            ([b0], [x0], [s0]) => {
                let (s, m) = q4k_lanes(b0, x0, s0);
                let pairs = _mm_hadd_epi32(halves_added(s), m); // [s01 s23 m01 m23]
                let both = _mm_hadd_epi32(pairs, pairs); // [S M S M]
                (both, _mm_shuffle_epi32::<0b01_01_01_01>(both))
            }
            ([b0, b1], [x0, x1], [s0, s1]) => {
                let ((l0, m0), (l1, m1)) = (q4k_lanes(b0, x0, s0), q4k_lanes(b1, x1, s1));
                let sums = halves_added(_mm256_hadd_epi32(l0, l1)); // [l0 l0 l1 l1] in parts
                let all = _mm_hadd_epi32(sums, _mm_hadd_epi32(m0, m1)); // [S0 S1 M0 M1]
                (all, _mm_shuffle_epi32::<0b11_10_11_10>(all))
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
        let (sums, mins): ([i32; 4], [i32; 4]) = (bytemuck::cast(sums), bytemuck::cast(mins));
        let pairs = [
            (sums[0], mins[0]),
            (sums[1], mins[1]),
            (sums[2], mins[2]),
            (sums[3], mins[3]),
        ];
        pairs.first_chunk().copied()
    }
}

/// `S` of a Q4_K block in eight i32 lanes and `M` in four.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn q4k_lanes(b: &BlockQ4K, xq8: &[i8; 256], bsums: &[i16; 16]) -> (__m256i, __m128i) {
    let (sc, m) = b.scales_mins();
    let (sc, m) = (u64::from_le_bytes(sc), u64::from_le_bytes(m));
    // SAFETY: AVX2 is available (the caller's contract). Every load reads 32 bytes at an offset
    // that the fixed-size arrays hold: `qs` 128 bytes (four runs of 32), `xq8` 256 (eight),
    // `bsums` 32.
    unsafe {
        // Scales in lanes 0..8 of the low half, mins in the high half, as i16.
        let scales_mins = _mm256_cvtepu8_epi16(_mm_set_epi64x(m as i64, sc as i64));
        let scales = _mm256_permute4x64_epi64::<0x44>(scales_mins);
        let groups = _mm256_loadu_si256(bsums.as_ptr().cast());
        let sub_blocks = _mm_hadd_epi16(
            _mm256_castsi256_si128(groups),
            _mm256_extracti128_si256::<1>(groups),
        );
        let mins = _mm_madd_epi16(_mm256_extracti128_si256::<1>(scales_mins), sub_blocks);
        let nibble = _mm256_set1_epi8(0x0F);
        let mut sum = _mm256_setzero_si256();
        for s in 0..4 {
            // Sub-block 2s in the low nibbles of `qs[32s..]`, sub-block 2s + 1 in the high ones.
            let q = _mm256_loadu_si256(b.qs[32 * s..].as_ptr().cast());
            let halves = [
                _mm256_and_si256(q, nibble),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q), nibble),
            ];
            for (t, q) in halves.into_iter().enumerate() {
                let x = _mm256_loadu_si256(xq8[32 * (2 * s + t)..].as_ptr().cast());
                let scale = _mm256_shuffle_epi8(scales, sub_block(2 * s + t));
                let products = _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scale);
                sum = _mm256_add_epi32(sum, products);
            }
        }
        (sum, mins)
    }
}

/// The shuffle that fills the low half of a register with the i16 in lane `2t` and the high
/// half with lane `2t + 1`, both taken from the same half (`t` in 0..4).
#[inline(always)]
fn group_pair(t: usize) -> __m256i {
    let lane = |g: usize| {
        let g = if cfg!(kquant_perturb = "int8_block") {
            (g + 1) % 8 // A must-fail build's bug: each group takes its neighbour's scale.
        } else {
            g
        };
        i16::from_le_bytes([2 * g as u8, 2 * g as u8 + 1])
    };
    let (low, high) = (lane(2 * t), lane(2 * t + 1));
    // SAFETY: `_mm256_set_epi16` only builds a register (AVX, implied by the callers' AVX2).
    unsafe {
        _mm256_set_epi16(
            high, high, high, high, high, high, high, high, low, low, low, low, low, low, low, low,
        )
    }
}

/// The shuffle that fills both halves of a register with the i16 in lane `s` (0..8).
#[inline(always)]
fn sub_block(s: usize) -> __m256i {
    let s = if cfg!(kquant_perturb = "int8_block") {
        (s + 1) % 8 // A must-fail build's bug: each sub-block takes its neighbour's scale.
    } else {
        s
    };
    // SAFETY: `_mm256_set1_epi16` only builds a register (AVX, implied by the callers' AVX2).
    unsafe { _mm256_set1_epi16(i16::from_le_bytes([2 * s as u8, 2 * s as u8 + 1])) }
}

/// The sums of the eight i32 lanes of each of four registers (wrapping): two rounds of
/// horizontal adds within the 128-bit halves, then the halves added.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn four_lane_sums(v: [__m256i; 4]) -> __m128i {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        let pairs = [_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3])];
        halves_added(_mm256_hadd_epi32(pairs[0], pairs[1]))
    }
}

/// [`four_lane_sums`] of the four blocks' `S` lanes, and their `M` (four lanes each) reduced
/// the same way: the four blocks' `S` and `M` in lane order.
///
/// # Safety
///
/// AVX2 must be available.
#[inline(always)]
unsafe fn four_sums_and_mins(v: [(__m256i, __m128i); 4]) -> (__m128i, __m128i) {
    // SAFETY: AVX2 is available (the caller's contract).
    unsafe {
        let sums = four_lane_sums([v[0].0, v[1].0, v[2].0, v[3].0]);
        let pairs = [
            _mm_hadd_epi32(v[0].1, v[1].1),
            _mm_hadd_epi32(v[2].1, v[3].1),
        ];
        (sums, _mm_hadd_epi32(pairs[0], pairs[1]))
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

//! x86_64 backends: SSE2 (baseline, 4 lanes), AVX2 (8 lanes) and AVX-512 (16 lanes), the last
//! two detected at run time.

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod sse2;

use core::arch::x86_64::*;

/// `Vector::sum_and_dot16` for a 256-bit `sum`, shared by the AVX2 and AVX-512 backends: the
/// two reductions run side by side through two horizontal adds.
///
/// # Safety
///
/// AVX2 must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
unsafe fn sum_and_dot16_256(sum: __m256i, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
    // SAFETY: AVX2 is available (the caller's contract); both arrays are 32 readable bytes.
    unsafe {
        let dot = _mm256_madd_epi16(
            _mm256_loadu_si256(a.as_ptr().cast()),
            _mm256_loadu_si256(b.as_ptr().cast()),
        );
        // Per 128-bit half: [s0+s1, s2+s3, t0+t1, t2+t3], then the halves added.
        let pairs = _mm256_hadd_epi32(sum, dot);
        let quads = _mm_add_epi32(
            _mm256_castsi256_si128(pairs),
            _mm256_extracti128_si256::<1>(pairs),
        );
        let both = _mm_hadd_epi32(quads, quads); // [Σ sum, Σ dot, Σ sum, Σ dot]
        (_mm_cvtsi128_si32(both), _mm_extract_epi32::<1>(both))
    }
}

//! The generic kernels over SSE2 `__m128` / `__m128i`.

use core::arch::x86_64::*;

use crate::arch::generic::{self, Job, Vector};

/// Token for SSE2, which every x86_64 CPU has.
#[derive(Clone, Copy)]
pub(crate) struct Sse2;

// SAFETY (for each `unsafe` block in this impl): SSE2 is part of the x86_64 baseline, so
// these intrinsics always run; loads and stores go through slices of exactly the length they
// touch.
impl Vector for Sse2 {
    const LANES: usize = 4;
    type U = __m128i;
    type F = __m128;

    #[inline(always)]
    fn load_u(self, bytes: &[u8]) -> __m128i {
        let b = &bytes[..16];
        // SAFETY: `b` is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }
    /// Without a byte shuffle: the 16 bytes shifted up by `i` bytes hold lane `i`'s three bytes
    /// in lane `i`, so each lane is masked out of its own shift.
    #[inline(always)]
    fn load_u24(self, bytes: &[u8]) -> __m128i {
        let v = self.load_u(bytes);
        // SAFETY: see the impl.
        unsafe {
            let l0 = _mm_and_si128(v, _mm_setr_epi32(-1, 0, 0, 0));
            let l1 = _mm_and_si128(_mm_slli_si128::<1>(v), _mm_setr_epi32(0, -1, 0, 0));
            let l2 = _mm_and_si128(_mm_slli_si128::<2>(v), _mm_setr_epi32(0, 0, -1, 0));
            let l3 = _mm_and_si128(_mm_slli_si128::<3>(v), _mm_setr_epi32(0, 0, 0, -1));
            _mm_or_si128(_mm_or_si128(l0, l1), _mm_or_si128(l2, l3))
        }
    }
    #[inline(always)]
    fn splat_u(self, v: u32) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_set1_epi32(v as i32) }
    }
    #[inline(always)]
    fn shr(self, a: __m128i, n: u32) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_srl_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn shl(self, a: __m128i, n: u32) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_sll_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn sar(self, a: __m128i, n: u32) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_sra_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn and(self, a: __m128i, b: __m128i) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_and_si128(a, b) }
    }
    #[inline(always)]
    fn or(self, a: __m128i, b: __m128i) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_or_si128(a, b) }
    }
    #[inline(always)]
    fn xor(self, a: __m128i, b: __m128i) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_xor_si128(a, b) }
    }
    #[inline(always)]
    fn to_f32(self, a: __m128i) -> __m128 {
        // SAFETY: see the impl.
        unsafe { _mm_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn load_f(self, xs: &[f32]) -> __m128 {
        let x = &xs[..4];
        // SAFETY: `x` is 4 readable floats; the load is unaligned.
        unsafe { _mm_loadu_ps(x.as_ptr()) }
    }
    #[inline(always)]
    fn splat_f(self, v: f32) -> __m128 {
        // SAFETY: see the impl.
        unsafe { _mm_set1_ps(v) }
    }
    #[inline(always)]
    fn splat_groups(self, s: &[f32]) -> __m128 {
        // SAFETY: see the impl.
        unsafe { _mm_set1_ps(s[0]) }
    }
    #[inline(always)]
    fn add(self, a: __m128, b: __m128) -> __m128 {
        // SAFETY: see the impl.
        unsafe { _mm_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m128, b: __m128) -> __m128 {
        // SAFETY: see the impl.
        unsafe { _mm_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m128, b: __m128) -> __m128 {
        // SAFETY: see the impl.
        unsafe { _mm_mul_ps(a, b) }
    }
    #[inline(always)]
    fn store(self, a: __m128, out: &mut [f32]) {
        let o = &mut out[..4];
        // SAFETY: `o` is 4 writable floats; the store is unaligned.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), a) }
    }
    #[inline(always)]
    fn store_interleaved(self, v: [__m128; 4], out: &mut [f32]) {
        // SAFETY: see the impl. A 4×4 transpose.
        let rows = unsafe {
            let t0 = _mm_unpacklo_ps(v[0], v[1]);
            let t1 = _mm_unpackhi_ps(v[0], v[1]);
            let t2 = _mm_unpacklo_ps(v[2], v[3]);
            let t3 = _mm_unpackhi_ps(v[2], v[3]);
            [
                _mm_movelh_ps(t0, t2),
                _mm_movehl_ps(t2, t0),
                _mm_movelh_ps(t1, t3),
                _mm_movehl_ps(t3, t1),
            ]
        };
        for (r, o) in rows.into_iter().zip(out[..16].chunks_exact_mut(4)) {
            self.store(r, o);
        }
    }
    #[inline(always)]
    fn dot_scaled(self, q: __m128i, _: &[i8], xq: &[i16], scales: &[i16]) -> __m128i {
        let x = &xq[..16];
        // SAFETY: see the impl; `x` is 16 readable i16. Bytes widen to i16 (zero-extended),
        // times the scale (fits i16: 63·128), then pairs of products summed into i32 lanes.
        unsafe {
            let zero = _mm_setzero_si128();
            let scale = _mm_set1_epi16(scales[0]);
            let lo = _mm_mullo_epi16(_mm_unpacklo_epi8(q, zero), scale);
            let hi = _mm_mullo_epi16(_mm_unpackhi_epi8(q, zero), scale);
            let x_lo = _mm_loadu_si128(x.as_ptr().cast());
            let x_hi = _mm_loadu_si128(x[8..].as_ptr().cast());
            _mm_add_epi32(_mm_madd_epi16(lo, x_lo), _mm_madd_epi16(hi, x_hi))
        }
    }
    #[inline(always)]
    fn add_i32(self, a: __m128i, b: __m128i) -> __m128i {
        // SAFETY: see the impl.
        unsafe { _mm_add_epi32(a, b) }
    }
    #[inline(always)]
    fn sum_and_dot16(self, sum: __m128i, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
        // SAFETY: see the impl; both arrays are 32 readable bytes. The two vectors are reduced
        // side by side: after the first step, lanes 0..2 hold `sum`'s halves and 2..4 `dot`'s.
        unsafe {
            let lo = _mm_madd_epi16(
                _mm_loadu_si128(a.as_ptr().cast()),
                _mm_loadu_si128(b.as_ptr().cast()),
            );
            let hi = _mm_madd_epi16(
                _mm_loadu_si128(a[8..].as_ptr().cast()),
                _mm_loadu_si128(b[8..].as_ptr().cast()),
            );
            let dot = _mm_add_epi32(lo, hi);
            let pairs = _mm_add_epi32(_mm_unpacklo_epi64(sum, dot), _mm_unpackhi_epi64(sum, dot));
            let both = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
            (
                _mm_cvtsi128_si32(both),
                _mm_cvtsi128_si32(_mm_shuffle_epi32::<0b00_00_00_10>(both)),
            )
        }
    }
}

/// Runs a job on SSE2.
pub(crate) fn run(job: Job<'_>) {
    generic::run(Sse2, job);
}

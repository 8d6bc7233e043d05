//! The generic kernels over AVX2 `__m256` / `__m256i`: 8 lanes, two sub-blocks per register.

use core::arch::x86_64::*;

use crate::arch::generic::{self, Job, Vector};

/// Token for AVX2; only [`run`] makes one, after the backend was found available.
#[derive(Clone, Copy)]
pub(crate) struct Avx2(());

// Every method below calls AVX2 or F16C intrinsics. SAFETY (for each `unsafe` block in this
// impl): an `Avx2` token exists only inside `run_avx2`, which runs only when AVX2 and F16C were
// detected; the methods are `inline(always)` into that `#[target_feature(enable =
// "avx2,f16c")]` function. Loads and stores go through slices of the exact length they touch.
impl Vector for Avx2 {
    const LANES: usize = 8;
    type U = __m256i;
    type F = __m256;

    #[inline(always)]
    fn load_u(self, bytes: &[u8]) -> __m256i {
        let b = &bytes[..32];
        // SAFETY: see the impl; `b` is 32 readable bytes.
        let v = unsafe { _mm256_loadu_si256(b.as_ptr().cast()) };
        if cfg!(kquant_perturb = "lane") {
            // A must-fail build's bug: lanes 0 and 1 (and 4 and 5) swapped.
            // SAFETY: see the impl.
            return unsafe { _mm256_shuffle_epi32::<0b11_10_00_01>(v) };
        }
        v
    }
    /// Lanes 0..4 from bytes 0..12, lanes 4..8 from bytes 12..24: two 16-byte loads side by
    /// side, then one in-lane byte shuffle (the top byte of each lane zeroed).
    #[inline(always)]
    fn load_u24(self, bytes: &[u8]) -> __m256i {
        let b = &bytes[..28];
        // SAFETY: see the impl; `b` is 28 readable bytes and the loads read `b[..16]` and
        // `b[12..28]`.
        unsafe {
            let halves = _mm256_loadu2_m128i(b[12..].as_ptr().cast(), b.as_ptr().cast());
            let pick = _mm256_broadcastsi128_si256(_mm_setr_epi8(
                0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
            ));
            _mm256_shuffle_epi8(halves, pick)
        }
    }
    #[inline(always)]
    fn splat_u(self, v: u32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_epi32(v as i32) }
    }
    #[inline(always)]
    fn shr(self, a: __m256i, n: u32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_srl_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn shl(self, a: __m256i, n: u32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_sll_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn sar(self, a: __m256i, n: u32) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_sra_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn and(self, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    fn or(self, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    fn xor(self, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_xor_si256(a, b) }
    }
    #[inline(always)]
    fn to_f32(self, a: __m256i) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn unpack_byte(self, q: __m256i, k: u32, bits: u32, bias: u32) -> __m256 {
        if bias == 0 {
            return generic::unpack_byte_by_shifts(self, q, k, bits, bias);
        }
        // As in the AVX-512 backend: byte `k` of each lane moved to byte 0 by a shuffle (lane l
        // of each 128-bit half takes byte 4·l + k; index bytes 0x80 give zeros), or-ed into
        // the f32 2²³ + u (exact), then one exact addition of −(2²³ + bias). Faster for the
        // signed Q6_K quants (17.8 against 19.8 ms); for Q4_K's nibbles the shifts are (the
        // shuffle version took 17 against 12.8 ms).
        let index: [u32; 8] = core::array::from_fn(|l| 0x8080_8000 | (4 * (l as u32 % 4) + k));
        let u = self.and(q, self.splat_u(((1 << bits) - 1) * 0x0101_0101));
        // SAFETY: see the impl; `index` is 32 bytes.
        unsafe {
            let index = _mm256_loadu_si256(index.as_ptr().cast());
            let magic = self.or(_mm256_shuffle_epi8(u, index), self.splat_u(0x4B00_0000));
            _mm256_add_ps(
                _mm256_castsi256_ps(magic),
                _mm256_set1_ps(-(8_388_608.0 + bias as f32)),
            )
        }
    }
    #[inline(always)]
    fn f16_to_f32(self, h: [u8; 2]) -> f32 {
        // SAFETY: see the impl (F16C is among the backend's features).
        unsafe { super::f16_to_f32_f16c(h) }
    }
    #[inline(always)]
    fn load_f(self, xs: &[f32]) -> __m256 {
        let x = &xs[..8];
        // SAFETY: see the impl; `x` is 8 readable floats.
        unsafe { _mm256_loadu_ps(x.as_ptr()) }
    }
    #[inline(always)]
    fn splat_f(self, v: f32) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    fn splat_groups(self, s: &[f32]) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_set_m128(_mm_set1_ps(s[1]), _mm_set1_ps(s[0])) }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn store(self, a: __m256, out: &mut [f32]) {
        let o = &mut out[..8];
        // SAFETY: see the impl; `o` is 8 writable floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) }
    }
    #[inline(always)]
    fn store_interleaved(self, v: [__m256; 4], out: &mut [f32]) {
        // SAFETY: see the impl. A 4×4 transpose inside each 128-bit half, then the halves are
        // regrouped so that lanes 0..4 come before lanes 4..8.
        let halves = unsafe {
            let t0 = _mm256_unpacklo_ps(v[0], v[1]);
            let t1 = _mm256_unpackhi_ps(v[0], v[1]);
            let t2 = _mm256_unpacklo_ps(v[2], v[3]);
            let t3 = _mm256_unpackhi_ps(v[2], v[3]);
            let r0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let r1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let r2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let r3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            [
                _mm256_permute2f128_ps::<0x20>(r0, r1),
                _mm256_permute2f128_ps::<0x20>(r2, r3),
                _mm256_permute2f128_ps::<0x31>(r0, r1),
                _mm256_permute2f128_ps::<0x31>(r2, r3),
            ]
        };
        for (r, o) in halves.into_iter().zip(out[..32].chunks_exact_mut(8)) {
            self.store(r, o);
        }
    }
    #[inline(always)]
    fn dot_scaled(self, q: __m256i, xq8: &[i8], _: &[i16], scales: &[i16]) -> __m256i {
        let x = &xq8[..32];
        // SAFETY: see the impl; `x` is 32 readable bytes. `maddubs` multiplies the unsigned
        // quants (≤ 63) by the signed x and adds pairs into i16 (≤ 2·63·127, no saturation);
        // `madd` multiplies those by the group's scale and adds pairs into i32.
        unsafe {
            let pairs = _mm256_maddubs_epi16(q, _mm256_loadu_si256(x.as_ptr().cast()));
            let scale = _mm256_set_m128i(_mm_set1_epi16(scales[1]), _mm_set1_epi16(scales[0]));
            _mm256_madd_epi16(pairs, scale)
        }
    }
    // The int8 block sums: the AVX2 code both x86 backends share.
    super::int8_block_sums!();
    #[inline(always)]
    fn add_i32(self, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: see the impl.
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    fn sum_and_dot16(self, sum: __m256i, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
        // SAFETY: see the impl.
        unsafe { super::sum_and_dot16_256(sum, a, b) }
    }
}

#[target_feature(enable = "avx2,f16c")]
fn run_avx2(job: Job<'_>) {
    generic::run(Avx2(()), job);
}

/// Runs a job on AVX2; the caller has checked that AVX2 and F16C are available.
pub(crate) fn run(job: Job<'_>) {
    debug_assert!(crate::Backend::Avx2.is_available());
    // SAFETY: the dispatcher only picks AVX2 after `Backend::Avx2.is_available()`.
    unsafe { run_avx2(job) }
}

//! The generic kernels over AVX-512 `__m512` / `__m512i`: 16 lanes, a whole step (four
//! sub-blocks) per register. With VNNI (`Avx512<true>`, [`crate::Backend::Avx512Vnni`]), the int8
//! kernels accumulate each group's scaled products with `vpdpwssd`, which multiplies the i16
//! pair sums by the scale and adds them to the accumulator in one instruction (exactly: the
//! products and sums fit i32), instead of `vpmaddwd` and `vpaddd`.
//!
//! With 16 lanes a Q6_K `qh` chunk or a Q4_K `qs` chunk covers both 32-byte copies of
//! [`Vector::load_twice`]: the 32 bytes are loaded once and the upper half shifted, so a step is
//! one load of each source.

use core::arch::x86_64::*;

use crate::arch::generic::{self, Job, Vector};

/// Token for AVX-512 F + BW + VL (+ F16C), and VNNI when `VNNI`; only [`run`] and [`run_vnni`]
/// make one, after the backend was found available. VL lets the 256-bit code these backends
/// share with AVX2 (`int8_block`) use all 32 vector registers. One vector, kquant's time over
/// ggml's (`peer-timing`, Zen 4): 2048 × 3584 Q4_K in L3 1.03–1.05 → 0.97, 1024 × 5376 Q6_K
/// 1.06 → 0.91–0.97.
#[derive(Clone, Copy)]
pub(crate) struct Avx512<const VNNI: bool = false>(());

// Every method below calls AVX-512 (F, BW, VL), AVX2 or F16C intrinsics (AVX-512 F implies AVX2).
// SAFETY (for each `unsafe` block in this impl): an `Avx512` token exists only inside
// `run_avx512` and `run_avx512_vnni`, which run only when AVX-512 F, BW, VL and F16C (and, for the
// second, VNNI: the only user of `Avx512<true>`'s VNNI instruction) were detected; the methods
// are `inline(always)` into those `#[target_feature]` functions. Loads and stores go through
// slices of the exact length they touch.
impl<const VNNI: bool> Vector for Avx512<VNNI> {
    const LANES: usize = 16;
    const UNROLL_STEPS: bool = true;
    type U = __m512i;
    type F = __m512;

    #[inline(always)]
    fn load_u(self, bytes: &[u8]) -> __m512i {
        let b = &bytes[..64];
        // SAFETY: see the impl; `b` is 64 readable bytes.
        unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
    }
    /// The 48 bytes as four 12-byte groups, one per 128-bit lane (a dword permute: 12 bytes
    /// are 3 dwords), then one in-lane byte shuffle (the top byte of each lane zeroed).
    #[inline(always)]
    fn load_u24(self, bytes: &[u8]) -> __m512i {
        let b = &bytes[..64];
        // SAFETY: see the impl; `b` is 64 readable bytes.
        unsafe {
            let all = _mm512_loadu_si512(b.as_ptr().cast());
            let groups = _mm512_setr_epi32(0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11);
            let pick = _mm512_broadcast_i32x4(_mm_setr_epi8(
                0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
            ));
            _mm512_shuffle_epi8(_mm512_permutexvar_epi32(groups, all), pick)
        }
    }
    #[inline(always)]
    fn load_twice(self, bytes: &[u8], o: usize, shift: u32) -> __m512i {
        debug_assert_eq!(o, 0, "16 lanes cover the whole 64-byte stream");
        let b = &bytes[..32];
        // SAFETY: see the impl; `b` is 32 readable bytes.
        unsafe {
            let low = _mm256_loadu_si256(b.as_ptr().cast());
            let high = _mm256_srl_epi32(low, _mm_cvtsi32_si128(shift as i32));
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high)
        }
    }
    #[inline(always)]
    fn splat_u(self, v: u32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_epi32(v as i32) }
    }
    #[inline(always)]
    fn shr(self, a: __m512i, n: u32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_srl_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn shl(self, a: __m512i, n: u32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sll_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn sar(self, a: __m512i, n: u32) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_sra_epi32(a, _mm_cvtsi32_si128(n as i32)) }
    }
    #[inline(always)]
    fn and(self, a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_and_si512(a, b) }
    }
    #[inline(always)]
    fn or(self, a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    fn xor(self, a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_xor_si512(a, b) }
    }
    #[inline(always)]
    fn to_f32(self, a: __m512i) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn unpack_byte(self, q: __m512i, k: u32, bits: u32, bias: u32) -> __m512 {
        if bias == 0 && bits == 4 {
            // A nibble indexes a 16-float table of 0.0..=15.0: one permute (it reads only the
            // low 4 bits of each lane, so no mask) instead of mask + conversion (Q4_K 8.6 →
            // 7.7 ms). 16 lanes hold the whole table; AVX2's 8-lane permute cannot.
            // SAFETY: see the impl.
            unsafe {
                let table = _mm512_setr_ps(
                    0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0,
                    15.0,
                );
                return _mm512_permutexvar_ps(self.shr(q, 8 * k), table);
            }
        }
        if bias == 0 {
            return generic::unpack_byte_by_shifts(self, q, k, bits, bias);
        }
        // A byte shuffle moves byte `k` of each lane to byte 0 and zeroes the rest (lane l of
        // each 128-bit block takes byte 4·l + k; index bytes 0x80 give zeros); its low `bits`
        // bits or-ed with 0x4B00_0000 are the f32 2²³ + u (exact), and one addition of
        // −(2²³ + bias) leaves u − bias (exact): no int→float conversion, which is slow on
        // 512-bit registers (Q6_K 8.1 against 9.8 ms).
        let index: [u32; 16] = core::array::from_fn(|l| 0x8080_8000 | (4 * (l as u32 % 4) + k));
        let mask = self.splat_u((1 << bits) - 1);
        // SAFETY: see the impl; `index` is 64 bytes.
        unsafe {
            let index = _mm512_loadu_si512(index.as_ptr().cast());
            let u = self.and(_mm512_shuffle_epi8(q, index), mask);
            let magic = self.or(u, self.splat_u(0x4B00_0000));
            _mm512_add_ps(
                _mm512_castsi512_ps(magic),
                _mm512_set1_ps(-(8_388_608.0 + bias as f32)),
            )
        }
    }
    #[inline(always)]
    fn f16_to_f32(self, h: [u8; 2]) -> f32 {
        // SAFETY: see the impl (F16C is among the backend's features).
        unsafe { super::f16_to_f32_f16c(h) }
    }
    #[inline(always)]
    fn load_f(self, xs: &[f32]) -> __m512 {
        let x = &xs[..16];
        // SAFETY: see the impl; `x` is 16 readable floats.
        unsafe { _mm512_loadu_ps(x.as_ptr()) }
    }
    #[inline(always)]
    fn splat_f(self, v: f32) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    fn splat_groups(self, s: &[f32]) -> __m512 {
        let s = &s[..4];
        // SAFETY: see the impl; `s` is 4 readable floats, spread to 4 lanes each.
        unsafe {
            let groups = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
            _mm512_permutexvar_ps(groups, _mm512_castps128_ps512(_mm_loadu_ps(s.as_ptr())))
        }
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: see the impl.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn store(self, a: __m512, out: &mut [f32]) {
        let o = &mut out[..16];
        // SAFETY: see the impl; `o` is 16 writable floats.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) }
    }
    #[inline(always)]
    fn store_interleaved(self, v: [__m512; 4], out: &mut [f32]) {
        // SAFETY: see the impl. A 4×4 transpose inside each 128-bit block (block `m` then holds
        // lane `4m + i` of the four vectors in row `r_i`), then a 4×4 transpose of the blocks.
        let rows = unsafe {
            let t0 = _mm512_unpacklo_ps(v[0], v[1]);
            let t1 = _mm512_unpackhi_ps(v[0], v[1]);
            let t2 = _mm512_unpacklo_ps(v[2], v[3]);
            let t3 = _mm512_unpackhi_ps(v[2], v[3]);
            let r0 = _mm512_shuffle_ps::<0x44>(t0, t2);
            let r1 = _mm512_shuffle_ps::<0xEE>(t0, t2);
            let r2 = _mm512_shuffle_ps::<0x44>(t1, t3);
            let r3 = _mm512_shuffle_ps::<0xEE>(t1, t3);
            let s0 = _mm512_shuffle_f32x4::<0x44>(r0, r1);
            let s1 = _mm512_shuffle_f32x4::<0x44>(r2, r3);
            let s2 = _mm512_shuffle_f32x4::<0xEE>(r0, r1);
            let s3 = _mm512_shuffle_f32x4::<0xEE>(r2, r3);
            [
                _mm512_shuffle_f32x4::<0x88>(s0, s1),
                _mm512_shuffle_f32x4::<0xDD>(s0, s1),
                _mm512_shuffle_f32x4::<0x88>(s2, s3),
                _mm512_shuffle_f32x4::<0xDD>(s2, s3),
            ]
        };
        for (r, o) in rows.into_iter().zip(out[..64].chunks_exact_mut(16)) {
            self.store(r, o);
        }
    }
    #[inline(always)]
    fn dot_scaled(self, q: __m512i, xq8: &[i8], _: &[i16], scales: &[i16]) -> __m512i {
        let (pairs, scale) = self.pairs_and_scales(q, xq8, scales);
        // SAFETY: see the impl. `madd` multiplies the pairs by the group's scale and adds
        // pairs of those into i32.
        unsafe { _mm512_madd_epi16(pairs, scale) }
    }
    #[inline(always)]
    fn dot_scaled_add(
        self,
        acc: __m512i,
        q: __m512i,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> __m512i {
        if !VNNI {
            return self.add_i32(acc, self.dot_scaled(q, xq8, xq16, scales));
        }
        let (pairs, scale) = self.pairs_and_scales(q, xq8, scales);
        // SAFETY: see the impl (VNNI is present: `VNNI` is true only in `run_avx512_vnni`).
        // `dpwssd` adds `pair_lo·scale + pair_hi·scale` to each i32 lane of `acc`, exactly
        // (|each| ≤ 2·16002·128).
        unsafe { _mm512_dpwssd_epi32(acc, pairs, scale) }
    }
    // The int8 block sums: the AVX2 code both x86 backends share.
    super::int8_block_sums!();
    #[inline(always)]
    fn add_i32(self, a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: see the impl.
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    fn sum_and_dot16(self, sum: __m512i, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
        // SAFETY: see the impl (AVX-512 F implies AVX2).
        unsafe {
            let halves = _mm256_add_epi32(
                _mm512_castsi512_si256(sum),
                _mm512_extracti64x4_epi64::<1>(sum),
            );
            super::sum_and_dot16_256(halves, a, b)
        }
    }
}

impl<const VNNI: bool> Avx512<VNNI> {
    /// For the int8 mode: the unsigned quants `q` (≤ 63) times the 64 activation quants, pairs
    /// added into i16 by `maddubs` (≤ 2·63·127, no saturation), and each 16-byte group's i16
    /// scale in both halves of its lanes.
    #[inline(always)]
    fn pairs_and_scales(self, q: __m512i, xq8: &[i8], scales: &[i16]) -> (__m512i, __m512i) {
        let x = &xq8[..64];
        let s: [i32; 4] = core::array::from_fn(|g| i32::from(scales[g]) & 0xFFFF);
        let s = s.map(|g| g | g << 16);
        // SAFETY: as in the `Vector` impl above; `x` is 64 readable bytes.
        unsafe {
            let pairs = _mm512_maddubs_epi16(q, _mm512_loadu_si512(x.as_ptr().cast()));
            let scale = _mm512_set_epi32(
                s[3], s[3], s[3], s[3], s[2], s[2], s[2], s[2], s[1], s[1], s[1], s[1], s[0], s[0],
                s[0], s[0],
            );
            (pairs, scale)
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
fn run_avx512(job: Job<'_>) {
    generic::run(Avx512::<false>(()), job);
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,avx512vnni")]
fn run_avx512_vnni(job: Job<'_>) {
    generic::run(Avx512::<true>(()), job);
}

/// Runs a job on AVX-512; the caller has checked that AVX-512 F, BW, VL and F16C are available.
pub(crate) fn run(job: Job<'_>) {
    debug_assert!(crate::Backend::Avx512.is_available());
    // SAFETY: the dispatcher only picks AVX-512 after `Backend::Avx512.is_available()`.
    unsafe { run_avx512(job) }
}

/// Runs a job on AVX-512 with VNNI's accumulating dot product in the int8 kernels (exact jobs
/// run [`run`]'s code); the caller has checked that AVX-512 F, BW, VL, F16C and VNNI are
/// available.
pub(crate) fn run_vnni(job: Job<'_>) {
    debug_assert!(crate::Backend::Avx512Vnni.is_available());
    match job {
        // SAFETY: the dispatcher only picks this backend after
        // `Backend::Avx512Vnni.is_available()`.
        Job::MatMul { int8: true, .. } => unsafe { run_avx512_vnni(job) },
        _ => run(job),
    }
}

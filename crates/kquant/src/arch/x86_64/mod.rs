//! x86_64 backends: SSE2 (baseline, 4 lanes), AVX2 (8 lanes) and AVX-512 (16 lanes), the last
//! two detected at run time.

/// The int8 block-sum methods of `generic::Vector` for a backend with AVX2 among its features
/// (AVX2 and both AVX-512 backends): [`int8_block`]'s code, the same in each impl.
macro_rules! int8_block_sums {
    () => {
        #[inline(always)]
        fn q6k_int8_sums<const K: usize>(
            self,
            b: &[crate::BlockQ6K; K],
            xq8: &[[i8; crate::QK_K]; K],
            bsums: &[[i16; 16]; K],
        ) -> Option<[i32; K]> {
            // SAFETY: the impl's backend runs only where AVX2 is available (its token exists
            // only inside its `#[target_feature]` entry point, AVX2 among the features).
            unsafe { super::int8_block::q6k_sums(b, xq8, bsums) }
        }
        #[inline(always)]
        fn q4k_int8_sums<const K: usize>(
            self,
            b: &[crate::BlockQ4K; K],
            xq8: &[[i8; crate::QK_K]; K],
            bsums: &[[i16; 16]; K],
        ) -> Option<[(i32, i32); K]> {
            // SAFETY: as in `q6k_int8_sums`.
            unsafe { super::int8_block::q4k_sums(b, xq8, bsums) }
        }
        #[inline(always)]
        fn q6k_int8_four_row_sums(
            self,
            b: [&crate::BlockQ6K; 4],
            xq8: &[i8; crate::QK_K],
            bsums: &[i16; 16],
        ) -> Option<[i32; 4]> {
            // SAFETY: as in `q6k_int8_sums`.
            Some(unsafe { super::int8_block::q6k_four_row_sums(b, xq8, bsums) })
        }
        #[inline(always)]
        fn q4k_int8_four_row_sums(
            self,
            b: [&crate::BlockQ4K; 4],
            xq8: &[i8; crate::QK_K],
            bsums: &[i16; 16],
        ) -> Option<[(i32, i32); 4]> {
            // SAFETY: as in `q6k_int8_sums`.
            Some(unsafe { super::int8_block::q4k_four_row_sums(b, xq8, bsums) })
        }
        #[inline(always)]
        fn q6k_int8_terms<const K: usize>(
            self,
            d: &[[u8; 2]; K],
            dx: &[f32; K],
            sums: &[i32; K],
        ) -> Option<[f32; K]> {
            // SAFETY: as in `q6k_int8_sums` (F16C is among every such backend's features).
            let terms = unsafe {
                super::int8_block::q6k_terms(
                    d.as_slice().try_into().ok()?,
                    dx.as_slice().try_into().ok()?,
                    sums.as_slice().try_into().ok()?,
                )
            };
            terms.first_chunk().copied()
        }
        #[inline(always)]
        fn q4k_int8_terms<const K: usize>(
            self,
            b: [&crate::BlockQ4K; K],
            dx: &[f32; K],
            sums: &[(i32, i32); K],
        ) -> Option<[f32; K]> {
            // SAFETY: as in `q6k_int8_sums` (F16C is among every such backend's features).
            let terms = unsafe {
                super::int8_block::q4k_terms(
                    b.as_slice().try_into().ok()?,
                    dx.as_slice().try_into().ok()?,
                    sums.as_slice().try_into().ok()?,
                )
            };
            terms.first_chunk().copied()
        }
    };
}
use int8_block_sums;

pub(crate) mod avx2;
pub(crate) mod avx512;
mod int8_block;
pub(crate) mod sse2;

use core::arch::x86_64::*;

/// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) flags.
const MXCSR_FTZ_DAZ: u32 = 1 << 15 | 1 << 6;

/// Whether this thread's SSE unit flushes subnormals (MXCSR FTZ or DAZ set).
pub(crate) fn flushes_subnormals() -> bool {
    let mut csr = 0u32;
    // SAFETY: `stmxcsr` stores the 32-bit MXCSR (SSE, part of x86_64) to the address given, a
    // live local `u32`; it touches no other memory, stack or flags.
    unsafe {
        core::arch::asm!(
            "stmxcsr [{p}]",
            p = in(reg) &mut csr as *mut u32,
            options(nostack, preserves_flags)
        );
    }
    csr & MXCSR_FTZ_DAZ != 0
}

/// `Vector::f16_to_f32` with F16C's conversion, shared by the AVX2 and AVX-512 backends. The
/// hardware conversion is exact and keeps NaN payloads, quieted: the same bits as the generic
/// conversion (checked for all 65536 values in the tests).
///
/// Written in `asm!` for its first instruction: the half goes in by `vmovd`, which writes the
/// whole register. From intrinsics, LLVM sees that only lane 0 of the conversion is used and
/// inserts the half into lane 0 of whatever register is free (`vpinsrw`), which keeps that
/// register's other lanes and so waits for its last writer: in the int8 kernels that was the
/// row's float accumulator, which chained each block's conversion to the previous block's
/// whole epilogue.
///
/// # Safety
///
/// F16C must be available (the callers are inlined into AVX2 or AVX-512 code).
#[inline(always)]
unsafe fn f16_to_f32_f16c(h: [u8; 2]) -> f32 {
    let half = u32::from(u16::from_le_bytes(h));
    let value: __m128;
    // SAFETY: F16C (and AVX, which it implies) are available: the caller's contract. The two
    // instructions read `half` and write only `value`'s register; no memory, no stack, no
    // flags.
    unsafe {
        core::arch::asm!(
            "vmovd {v}, {h:e}",
            "vcvtph2ps {v}, {v}",
            h = in(reg) half,
            v = out(xmm_reg) value,
            options(pure, nomem, nostack, preserves_flags)
        );
        _mm_cvtss_f32(value)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, QMatrix, QuantType};

    #[test]
    fn the_q4k_scales_and_mins_unpacked_in_registers_are_the_scalar_ones() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let (mut bytes, mut rng) = ([0u8; 144], crate::synth::SplitMix64::new(45));
        for _ in 0..10_000 {
            rng.fill_bytes(&mut bytes);
            let b: &crate::BlockQ4K = bytemuck::from_bytes(&bytes);
            // SAFETY: AVX2 is available (checked above).
            let unpacked = unsafe { int8_block::q4k_scales_mins(b) };
            let got: [u8; 16] = bytemuck::cast(unpacked);
            let (sc, m) = b.scales_mins();
            let want: [u8; 16] = core::array::from_fn(|k| if k < 8 { sc[k] } else { m[k - 8] });
            assert_eq!(got, want, "scales {:?}", b.scales);
        }
    }

    /// Runs `f` with MXCSR's FTZ and DAZ flags set, then restores the register.
    fn with_flush_to_zero<T>(f: impl FnOnce() -> T) -> T {
        let mut saved = 0u32;
        // SAFETY: `stmxcsr`/`ldmxcsr` read and write MXCSR through a live local `u32`; the value
        // loaded is the current one with only FTZ and DAZ added, and the original is restored.
        unsafe {
            core::arch::asm!(
                "stmxcsr [{p}]",
                p = in(reg) &mut saved as *mut u32,
                options(nostack, preserves_flags)
            );
            let flushed = saved | MXCSR_FTZ_DAZ;
            core::arch::asm!(
                "ldmxcsr [{p}]",
                p = in(reg) &flushed as *const u32,
                options(nostack, preserves_flags)
            );
        }
        let result = f();
        // SAFETY: as above, restoring the value read first.
        unsafe {
            core::arch::asm!(
                "ldmxcsr [{p}]",
                p = in(reg) &saved as *const u32,
                options(nostack, preserves_flags)
            );
        }
        result
    }

    #[test]
    fn a_flushing_float_environment_is_refused() {
        let bytes = [0u8; 210];
        let m = QMatrix::new(QuantType::Q6K, &bytes, 1, 256).unwrap();
        let (x, mut out, mut scratch) = ([1.0f32; 256], [0.0f32; 1], [0.0f32; 512]);
        assert!(!flushes_subnormals());
        let refused = with_flush_to_zero(|| {
            assert!(flushes_subnormals());
            m.mat_vec_with(
                crate::Backend::Scalar,
                &x,
                &mut out,
                &mut scratch[..m.scratch_len()],
            )
        });
        assert_eq!(refused, Err(Error::SubnormalsFlushed));
        assert!(!flushes_subnormals(), "MXCSR restored");
        assert_eq!(
            m.mat_vec_with(
                crate::Backend::Scalar,
                &x,
                &mut out,
                &mut scratch[..m.scratch_len()]
            ),
            Ok(())
        );
    }
}

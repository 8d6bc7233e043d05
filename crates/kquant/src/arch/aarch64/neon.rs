//! The generic kernels over NEON `uint32x4_t` / `float32x4_t` (`vmulq` then `vaddq`, never
//! `vfmaq`). With the dot-product extension (`Neon<true>`, [`crate::Backend::NeonDot`]), an
//! int8 group's 16 products are summed four to a lane by one `sdot` and scaled into the
//! accumulator by one integer `mla`, instead of two widening multiplies and four
//! multiply-accumulates. `sdot` multiplies signed bytes: the quants (≤ 63) and the activations
//! (−127..=127) both are, and each lane's sum of four (≤ 4·63·127) is exact in i32. Rust 1.95
//! has no stable intrinsic for it (`vdotq_s32` is unstable), hence one instruction of inline
//! assembly.

use core::arch::aarch64::*;

use crate::arch::generic::{self, Job, Vector};

/// Token for NEON, which every aarch64 CPU has; with `DOT`, also the dot-product extension
/// (only [`run_dot`] makes that one, after detecting it).
#[derive(Clone, Copy)]
pub(crate) struct Neon<const DOT: bool = false>(());

// SAFETY (for each `unsafe` block in this impl): NEON is part of the aarch64 baseline, so
// these intrinsics always run (and `sdot` runs only in `Neon<true>`, made only in
// `run_neon_dot` after the extension was detected); loads and stores go through slices of
// exactly the length they touch.
impl<const DOT: bool> Vector for Neon<DOT> {
    const LANES: usize = 4;
    type U = uint32x4_t;
    type F = float32x4_t;

    #[inline(always)]
    fn load_u(self, bytes: &[u8]) -> uint32x4_t {
        let b = &bytes[..16];
        // SAFETY: `b` is 16 readable bytes; `vld1q_u8` has no alignment requirement.
        unsafe { vreinterpretq_u32_u8(vld1q_u8(b.as_ptr())) }
    }
    /// One table lookup (`tbl`; index 255 gives a zero top byte).
    #[inline(always)]
    fn load_u24(self, bytes: &[u8]) -> uint32x4_t {
        const PICK: [u8; 16] = [0, 1, 2, 255, 3, 4, 5, 255, 6, 7, 8, 255, 9, 10, 11, 255];
        let b = &bytes[..16];
        // SAFETY: see the impl; `b` and `PICK` are 16 readable bytes.
        unsafe {
            let table = vld1q_u8(b.as_ptr());
            vreinterpretq_u32_u8(vqtbl1q_u8(table, vld1q_u8(PICK.as_ptr())))
        }
    }
    #[inline(always)]
    fn splat_u(self, v: u32) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vdupq_n_u32(v) }
    }
    #[inline(always)]
    fn shr(self, a: uint32x4_t, n: u32) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vshlq_u32(a, vdupq_n_s32(-(n as i32))) }
    }
    #[inline(always)]
    fn shl(self, a: uint32x4_t, n: u32) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vshlq_u32(a, vdupq_n_s32(n as i32)) }
    }
    #[inline(always)]
    fn sar(self, a: uint32x4_t, n: u32) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe {
            vreinterpretq_u32_s32(vshlq_s32(
                vreinterpretq_s32_u32(a),
                vdupq_n_s32(-(n as i32)),
            ))
        }
    }
    #[inline(always)]
    fn and(self, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vandq_u32(a, b) }
    }
    #[inline(always)]
    fn or(self, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vorrq_u32(a, b) }
    }
    #[inline(always)]
    fn xor(self, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { veorq_u32(a, b) }
    }
    #[inline(always)]
    fn to_f32(self, a: uint32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vcvtq_f32_s32(vreinterpretq_s32_u32(a)) }
    }
    #[inline(always)]
    fn load_f(self, xs: &[f32]) -> float32x4_t {
        let x = &xs[..4];
        // SAFETY: `x` is 4 readable floats.
        unsafe { vld1q_f32(x.as_ptr()) }
    }
    #[inline(always)]
    fn splat_f(self, v: f32) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vdupq_n_f32(v) }
    }
    #[inline(always)]
    fn splat_groups(self, s: &[f32]) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vdupq_n_f32(s[0]) }
    }
    #[inline(always)]
    fn add(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vaddq_f32(a, b) }
    }
    #[inline(always)]
    fn sub(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vsubq_f32(a, b) }
    }
    #[inline(always)]
    fn mul(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: see the impl.
        unsafe { vmulq_f32(a, b) }
    }
    #[inline(always)]
    fn store(self, a: float32x4_t, out: &mut [f32]) {
        let o = &mut out[..4];
        // SAFETY: `o` is 4 writable floats.
        unsafe { vst1q_f32(o.as_mut_ptr(), a) }
    }
    #[inline(always)]
    fn store_interleaved(self, v: [float32x4_t; 4], out: &mut [f32]) {
        let o = &mut out[..16];
        // SAFETY: `o` is 16 writable floats; `vst4q_f32` writes o[4i + k] = v[k][i].
        unsafe { vst4q_f32(o.as_mut_ptr(), float32x4x4_t(v[0], v[1], v[2], v[3])) }
    }
    #[inline(always)]
    fn dot_scaled(self, q: uint32x4_t, xq8: &[i8], _: &[i16], scales: &[i16]) -> uint32x4_t {
        let x = &xq8[..16];
        // SAFETY: see the impl; `x` is 16 readable bytes. The quants (≤ 63) are valid i8;
        // `vmull_s8` gives exact i16 products, `vmlal_n_s16` scales and sums them into i32.
        unsafe {
            let bytes = vreinterpretq_s8_u32(q);
            let x = vld1q_s8(x.as_ptr());
            let lo = vmull_s8(vget_low_s8(bytes), vget_low_s8(x));
            let hi = vmull_high_s8(bytes, x);
            let acc = vmull_n_s16(vget_low_s16(lo), scales[0]);
            let acc = vmlal_high_n_s16(acc, lo, scales[0]);
            let acc = vmlal_n_s16(acc, vget_low_s16(hi), scales[0]);
            vreinterpretq_u32_s32(vmlal_high_n_s16(acc, hi, scales[0]))
        }
    }
    #[inline(always)]
    fn dot_scaled_add(
        self,
        acc: uint32x4_t,
        q: uint32x4_t,
        xq8: &[i8],
        xq16: &[i16],
        scales: &[i16],
    ) -> uint32x4_t {
        if !DOT {
            return self.add_i32(acc, self.dot_scaled(q, xq8, xq16, scales));
        }
        let x = &xq8[..16];
        // SAFETY: see the impl; `x` is 16 readable bytes. `sdot` adds to each i32 lane of `d`
        // the products of its four signed bytes of `q` and of `x` (module docs); it reads and
        // writes only those registers.
        unsafe {
            let x = vld1q_s8(x.as_ptr());
            let mut d = vdupq_n_s32(0);
            core::arch::asm!(
                "sdot {d:v}.4s, {q:v}.16b, {x:v}.16b",
                d = inout(vreg) d,
                q = in(vreg) vreinterpretq_s8_u32(q),
                x = in(vreg) x,
                options(pure, nomem, nostack, preserves_flags)
            );
            let acc = vmlaq_n_s32(vreinterpretq_s32_u32(acc), d, i32::from(scales[0]));
            vreinterpretq_u32_s32(acc)
        }
    }
    #[inline(always)]
    fn add_i32(self, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl.
        unsafe { vaddq_u32(a, b) }
    }
    #[inline(always)]
    fn sum_and_dot16(self, sum: uint32x4_t, a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
        // SAFETY: see the impl; both arrays are 32 readable bytes.
        unsafe {
            let (a0, a1) = (vld1q_s16(a.as_ptr()), vld1q_s16(a[8..].as_ptr()));
            let (b0, b1) = (vld1q_s16(b.as_ptr()), vld1q_s16(b[8..].as_ptr()));
            let acc = vmull_s16(vget_low_s16(a0), vget_low_s16(b0));
            let acc = vmlal_high_s16(acc, a0, b0);
            let acc = vmlal_s16(acc, vget_low_s16(a1), vget_low_s16(b1));
            let dot = vaddvq_s32(vmlal_high_s16(acc, a1, b1));
            (vaddvq_u32(sum) as i32, dot)
        }
    }
}

/// Runs a job on NEON.
pub(crate) fn run(job: Job<'_>) {
    generic::run(Neon::<false>(()), job);
}

#[target_feature(enable = "dotprod")]
fn run_neon_dot(job: Job<'_>) {
    generic::run(Neon::<true>(()), job);
}

/// Runs a job on NEON with the dot-product extension in the int8 kernels (exact jobs run
/// [`run`]'s code); the caller has checked that the extension is available.
pub(crate) fn run_dot(job: Job<'_>) {
    debug_assert!(crate::Backend::NeonDot.is_available());
    match job {
        // SAFETY: the dispatcher only picks this backend after `Backend::NeonDot.is_available()`.
        Job::MatMul { int8: true, .. } => unsafe { run_neon_dot(job) },
        _ => run(job),
    }
}

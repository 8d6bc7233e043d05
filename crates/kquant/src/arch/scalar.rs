//! The portable backend: the generic kernels over plain 4-lane arrays.
//!
//! Being the same code as every SIMD backend, it is the executable form of the canonical order.

use super::generic::Vector;

/// Token for the scalar backend (always available).
#[derive(Clone, Copy)]
pub(crate) struct Scalar;

#[inline(always)]
fn map_u(a: [u32; 4], f: impl Fn(u32) -> u32) -> [u32; 4] {
    a.map(f)
}

#[inline(always)]
fn zip_u(a: [u32; 4], b: [u32; 4], f: impl Fn(u32, u32) -> u32) -> [u32; 4] {
    core::array::from_fn(|i| f(a[i], b[i]))
}

#[inline(always)]
fn zip_f(a: [f32; 4], b: [f32; 4], f: impl Fn(f32, f32) -> f32) -> [f32; 4] {
    core::array::from_fn(|i| f(a[i], b[i]))
}

impl Vector for Scalar {
    const LANES: usize = 4;
    const PERTURBED: bool = false;
    type U = [u32; 4];
    type F = [f32; 4];

    #[inline(always)]
    fn load_u(self, bytes: &[u8]) -> [u32; 4] {
        core::array::from_fn(|i| {
            u32::from_le_bytes([
                bytes[4 * i],
                bytes[4 * i + 1],
                bytes[4 * i + 2],
                bytes[4 * i + 3],
            ])
        })
    }
    #[inline(always)]
    fn splat_u(self, v: u32) -> [u32; 4] {
        [v; 4]
    }
    #[inline(always)]
    fn shr(self, a: [u32; 4], n: u32) -> [u32; 4] {
        map_u(a, |x| x >> n)
    }
    #[inline(always)]
    fn shl(self, a: [u32; 4], n: u32) -> [u32; 4] {
        map_u(a, |x| x << n)
    }
    #[inline(always)]
    fn sar(self, a: [u32; 4], n: u32) -> [u32; 4] {
        map_u(a, |x| ((x as i32) >> n) as u32)
    }
    #[inline(always)]
    fn and(self, a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
        zip_u(a, b, |x, y| x & y)
    }
    #[inline(always)]
    fn or(self, a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
        zip_u(a, b, |x, y| x | y)
    }
    #[inline(always)]
    fn xor(self, a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
        zip_u(a, b, |x, y| x ^ y)
    }
    #[inline(always)]
    fn to_f32(self, a: [u32; 4]) -> [f32; 4] {
        a.map(|x| x as i32 as f32)
    }
    #[inline(always)]
    fn load_f(self, xs: &[f32]) -> [f32; 4] {
        [xs[0], xs[1], xs[2], xs[3]]
    }
    #[inline(always)]
    fn splat_f(self, v: f32) -> [f32; 4] {
        [v; 4]
    }
    #[inline(always)]
    fn splat_groups(self, s: &[f32]) -> [f32; 4] {
        [s[0]; 4]
    }
    #[inline(always)]
    fn add(self, a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        zip_f(a, b, |x, y| x + y)
    }
    #[inline(always)]
    fn sub(self, a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        zip_f(a, b, |x, y| x - y)
    }
    #[inline(always)]
    fn mul(self, a: [f32; 4], b: [f32; 4]) -> [f32; 4] {
        zip_f(a, b, |x, y| x * y)
    }
    #[inline(always)]
    fn store(self, a: [f32; 4], out: &mut [f32]) {
        out[..4].copy_from_slice(&a);
    }
    #[inline(always)]
    fn store_interleaved(self, v: [[f32; 4]; 4], out: &mut [f32]) {
        for (i, w) in out[..16].chunks_exact_mut(4).enumerate() {
            for (k, o) in w.iter_mut().enumerate() {
                *o = v[k][i];
            }
        }
    }
    #[inline(always)]
    fn dot_scaled(self, q: [u32; 4], _: &[i8], xq: &[i16], scales: &[i16]) -> [u32; 4] {
        let scale = i32::from(scales[0]);
        core::array::from_fn(|lane| {
            let bytes = q[lane].to_le_bytes();
            (0..4)
                .map(|k| i32::from(bytes[k]) * scale * i32::from(xq[4 * lane + k]))
                .sum::<i32>() as u32
        })
    }
    #[inline(always)]
    fn add_i32(self, a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
        zip_u(a, b, u32::wrapping_add)
    }
    #[inline(always)]
    fn sum_and_dot16(self, sum: [u32; 4], a: &[i16; 16], b: &[i16; 16]) -> (i32, i32) {
        let total = sum.iter().fold(0u32, |s, &v| s.wrapping_add(v)) as i32;
        let dot = a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y));
        (total, dot.sum())
    }
}

/// Runs a job on the scalar backend.
pub(crate) fn run(job: super::generic::Job<'_>) {
    super::generic::run(Scalar, job);
}

//! The exact kernels (f32 activations) in the canonical order of the [module docs](super), and
//! dequantization.

use core::marker::PhantomData;

use super::{q4k_chunk, q4k_scales, q6k_scales, Q6Block, RowKernel, Vector};
use crate::{BlockQ4K, QK_K};

/// Low nibble of byte `k` of each lane of a [`q4k_chunk`], as f32.
#[inline(always)]
fn q4k_weight<V: Vector>(v: V, q: V::U, k: u32) -> V::F {
    v.unpack_byte(q, k, 4, 0)
}

/// `((v0 + v1) + v2) + v3` with `v_k = w[k] · xt[16k..]`.
#[inline(always)]
fn lane_dot<V: Vector>(v: V, xt: &[f32], w: &[V::F; 4]) -> V::F {
    // Written out, not a closure (see `four!`).
    let p = v.add(v.mul(w[0], v.load_f(xt)), v.mul(w[1], v.load_f(&xt[16..])));
    let p = v.add(p, v.mul(w[2], v.load_f(&xt[32..])));
    v.add(p, v.mul(w[3], v.load_f(&xt[48..])))
}

/// The fixed reduction of the 16 accumulator lanes.
#[inline(always)]
fn reduce<V: Vector>(v: V, acc: [V::F; 4]) -> f32 {
    let mut a = [0.0f32; 16];
    for (c, lanes) in a.chunks_exact_mut(V::LANES).enumerate() {
        v.store(acc[c], lanes);
    }
    let t: [f32; 4] = if V::PERTURBED {
        core::array::from_fn(|l| (a[l] + a[8 + l]) + (a[4 + l] + a[12 + l]))
    } else {
        core::array::from_fn(|l| (a[l] + a[4 + l]) + (a[8 + l] + a[12 + l]))
    };
    (t[0] + t[1]) + (t[2] + t[3])
}

/// The Q6_K row kernel, for blocks in either layout.
#[derive(Clone, Copy)]
pub(super) struct Q6K<B>(pub(super) PhantomData<B>);

impl<B: Q6Block + Copy> RowKernel for Q6K<B> {
    type Block = B;
    /// The transposed x, block by block.
    type View<'a> = &'a [[f32; QK_K]];

    #[inline(always)]
    fn view(prepared: &[f32]) -> &[[f32; QK_K]] {
        prepared.as_chunks::<QK_K>().0
    }

    #[inline(always)]
    fn dot<V: Vector, const N: usize>(
        self,
        v: V,
        row: &[B],
        blocks_of_x: [&[[f32; QK_K]]; N],
    ) -> [f32; N] {
        let mut acc = [[v.splat_f(0.0); 4]; N];
        for (i, b) in row.iter().enumerate() {
            let xb = blocks_of_x.map(|x| &x[i]);
            let ds = q6k_scales(b);
            each_step!(V::UNROLL_STEPS, s => {
                for c in 0..16 / V::LANES {
                    let q = b.chunk(v, s, c);
                    let w = four!(k => B::weight(v, q, k));
                    let scale = v.splat_groups(&ds[4 * s + c * V::LANES / 4..]);
                    let at = 64 * s + c * V::LANES;
                    for (a, x) in acc.iter_mut().zip(xb) {
                        let p = lane_dot(v, &x[at..], &w);
                        a[c] = v.add(a[c], v.mul(scale, p));
                    }
                }
            });
        }
        // A loop, not `acc.map`: see `four!`.
        let mut out = [0.0; N];
        for (o, a) in out.iter_mut().zip(acc) {
            *o = reduce(v, a);
        }
        out
    }
}

/// The Q4_K row kernel; each prepared vector is the transposed x, then its 32-column sums.
#[derive(Clone, Copy)]
pub(super) struct Q4K;

impl RowKernel for Q4K {
    type Block = BlockQ4K;
    /// The transposed x block by block, and its 32-column sums.
    type View<'a> = (&'a [[f32; QK_K]], &'a [f32]);

    #[inline(always)]
    fn view(prepared: &[f32]) -> Self::View<'_> {
        let cols = prepared.len() / 33 * 32; // prepared_len(true, cols) = cols · 33/32
        let (x, sums) = prepared.split_at(cols);
        (x.as_chunks::<QK_K>().0, sums)
    }

    #[inline(always)]
    fn dot<V: Vector, const N: usize>(
        self,
        v: V,
        row: &[BlockQ4K],
        xs: [Self::View<'_>; N],
    ) -> [f32; N] {
        let mut acc = [[v.splat_f(0.0); 4]; N];
        let mut mins = [[0.0f32; 4]; N];
        let blocks_of_x = xs.map(|(x, _)| x);
        for (i, b) in row.iter().enumerate() {
            let xb = blocks_of_x.map(|x| &x[i]);
            let (ds, dm) = q4k_scales(v, b);
            for s in 0..4 {
                for c in 0..16 / V::LANES {
                    let q = q4k_chunk(v, b, s, c);
                    let w = four!(k => q4k_weight(v, q, k));
                    let scale = v.splat_groups(&ds[4 * s + c * V::LANES / 4..]);
                    let at = 64 * s + c * V::LANES;
                    for (a, x) in acc.iter_mut().zip(xb) {
                        let p = lane_dot(v, &x[at..], &w);
                        a[c] = v.add(a[c], v.mul(scale, p));
                    }
                }
            }
            for (m, (_, x_sums)) in mins.iter_mut().zip(xs) {
                let sums = &x_sums[8 * i..8 * i + 8];
                for (s, &x_sum) in sums.iter().enumerate() {
                    m[s % 4] += dm[s] * x_sum;
                }
            }
        }
        // A loop, not `array::from_fn`: see `four!`.
        let mut out = [0.0; N];
        for ((o, a), m) in out.iter_mut().zip(acc).zip(mins) {
            *o = reduce(v, a) - ((m[0] + m[1]) + (m[2] + m[3]));
        }
        out
    }
}

#[inline(always)]
pub(super) fn dequant_q6k<V: Vector, B: Q6Block>(v: V, b: &B, y: &mut [f32]) {
    let ds = q6k_scales(b);
    for s in 0..4 {
        for c in 0..16 / V::LANES {
            let q = b.chunk(v, s, c);
            let scale = v.splat_groups(&ds[4 * s + c * V::LANES / 4..]);
            let w = four!(k => v.mul(scale, B::weight(v, q, k)));
            v.store_interleaved(w, &mut y[64 * s + 4 * c * V::LANES..]);
        }
    }
}

#[inline(always)]
pub(super) fn dequant_q4k<V: Vector>(v: V, b: &BlockQ4K, y: &mut [f32]) {
    let (ds, dm) = q4k_scales(v, b);
    let dm: [f32; 16] = core::array::from_fn(|j| dm[j / 2]);
    for s in 0..4 {
        for c in 0..16 / V::LANES {
            let q = q4k_chunk(v, b, s, c);
            let scale = v.splat_groups(&ds[4 * s + c * V::LANES / 4..]);
            let min = v.splat_groups(&dm[4 * s + c * V::LANES / 4..]);
            let w = four!(k => v.sub(v.mul(scale, q4k_weight(v, q, k)), min));
            v.store_interleaved(w, &mut y[64 * s + 4 * c * V::LANES..]);
        }
    }
}

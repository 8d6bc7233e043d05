//! The int8 kernels of the build's best backend against the scalar backend (the canonical order,
//! itself checked against the independent oracle of `crates/kquant/tests/oracle.rs`), inside the
//! runtime the module runs in: for a relaxed-SIMD build, that is where the relaxed dot product's
//! implementation-defined cases would show (workerd's V8; never Node 20, whose experimental
//! relaxed SIMD is not the final instruction).
//!
//! Each case draws a shape (1…40 rows, 256…2048 columns, 1…8 vectors), weights and vectors from
//! a seed, every third case adversarial: quants all at their maximum or all zero, scales at
//! their extremes, and vectors at ±max and on the rounding edges of the 8-bit quantization
//! (`k + ½` steps of `amax/127`). Each case runs in every layout of its type.

use crate::kquant_cases::same_bits;
use kquant::synth::{extreme_blocks, random_blocks, SplitMix64};
use kquant::{repack, Backend, Layout, QMatrix, QuantType, QK_K};

/// A vector whose blocks each hold ±`amax` and values on the 8-bit quantization's rounding
/// edges (`(k + ½)·amax/127`, the largest at ±126.5).
fn edge_vector(rng: &mut SplitMix64, cols: usize) -> Vec<f32> {
    let mut x = vec![0.0f32; cols];
    for block in x.chunks_exact_mut(QK_K) {
        let amax = 0.25 + rng.unit().abs() * 8.0;
        for v in block.iter_mut() {
            let k = rng.below(127) as f32 + 0.5;
            let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
            *v = sign * k * amax / 127.0;
        }
        block[rng.below(QK_K)] = amax;
        block[rng.below(QK_K)] = -amax;
    }
    x
}

/// One case; the number of results whose bits differ from the scalar backend's (NaN equals
/// NaN), or `None` when a call failed.
fn case(seed: u64) -> Option<u32> {
    let mut rng = SplitMix64::new(seed);
    let ty = if rng.below(2) == 0 {
        QuantType::Q6K
    } else {
        QuantType::Q4K
    };
    let (rows, cols, n) = (
        1 + rng.below(40),
        QK_K * (1 + rng.below(8)),
        1 + rng.below(8),
    );
    let mut weights = vec![0u8; rows * ty.row_bytes(cols).ok()?];
    let adversarial = seed.is_multiple_of(3);
    if adversarial {
        extreme_blocks(&mut rng, ty, seed.is_multiple_of(2), &mut weights).ok()?;
    } else {
        random_blocks(&mut rng, ty, &mut weights).ok()?;
    }
    let xs: Vec<f32> = (0..n)
        .flat_map(|_| {
            if adversarial {
                edge_vector(&mut rng, cols)
            } else {
                (0..cols).map(|_| rng.normal() * 2.0).collect()
            }
        })
        .collect();

    let mut differing = 0;
    for layout in Layout::ALL.into_iter().filter(|l| l.supports(ty)) {
        let mut bytes = weights.clone();
        repack(ty, Layout::Ggml, layout, &mut bytes).ok()?;
        let m = QMatrix::with_layout(ty, layout, &bytes, rows, cols).ok()?;
        let mut scratch = vec![0.0; n * m.int8_scratch_len()];
        let run = |backend: Backend, scratch: &mut [f32]| {
            let mut out = vec![0.0f32; n * rows];
            m.mat_mat_int8_with(backend, &xs, &mut out, scratch)
                .map(|()| out)
        };
        let expected = run(Backend::Scalar, &mut scratch).ok()?;
        let got = run(Backend::best(), &mut scratch).ok()?;
        differing += expected
            .iter()
            .zip(&got)
            .filter(|(&a, &b)| !same_bits(a, b))
            .count() as u32;
    }
    Some(differing)
}

/// Cases `first..first + count`: the results that differ in total, or `u32::MAX` when a call
/// failed.
pub fn run(first: u64, count: u64) -> u32 {
    (first..first + count)
        .map(case)
        .try_fold(0u32, |total, d| d.map(|d| total.saturating_add(d)))
        .unwrap_or(u32::MAX)
}

//! Helpers shared by the integration tests: a seeded generator of blocks and activations, and
//! bit comparison where any NaN equals any NaN.
#![allow(dead_code)] // each test binary uses its own subset

use kquant::{quantize, Backend, Block, BlockQ4K, BlockQ6K, QMatrix, QuantType};

pub use kquant::synth::SplitMix64 as Rng;

/// `n` random blocks of `ty` with realistic f16 scales.
pub fn random_blocks(rng: &mut Rng, ty: QuantType, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n * ty.block_bytes()];
    kquant::synth::random_blocks(rng, ty, &mut bytes).unwrap();
    bytes
}

/// A `rows × cols` matrix of realistic weights, quantized with kquant's quantizer.
pub fn quantized_matrix(rng: &mut Rng, ty: QuantType, rows: usize, cols: usize) -> Vec<u8> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    let mut bytes = vec![0u8; rows * ty.row_bytes(cols).unwrap()];
    match ty {
        QuantType::Q4K => {
            quantize::quantize_row_q4k(&w, BlockQ4K::slice_from_bytes_mut(&mut bytes).unwrap())
        }
        QuantType::Q6K => {
            quantize::quantize_row_q6k(&w, BlockQ6K::slice_from_bytes_mut(&mut bytes).unwrap())
        }
    }
    .unwrap();
    bytes
}

pub fn random_x(rng: &mut Rng, cols: usize) -> Vec<f32> {
    (0..cols).map(|_| rng.normal()).collect()
}

/// Equal bits, or both NaN.
pub fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Index of the first element that differs (see [`same_bits`]).
pub fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).position(|(x, y)| !same_bits(*x, *y))
}

/// FNV-1a over the bits of `v`, every NaN hashed as the canonical quiet NaN.
pub fn hash_bits(v: &[f32]) -> u64 {
    v.iter().fold(0xCBF2_9CE4_8422_2325, |h, x| {
        let bits = if x.is_nan() { 0x7FC0_0000 } else { x.to_bits() };
        bits.to_le_bytes().iter().fold(h, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    })
}

/// `m·x` on `backend` (exact mode), scratch allocated here.
pub fn mat_vec(backend: Backend, m: &QMatrix, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; m.rows()];
    let mut scratch = vec![0.0; m.scratch_len()];
    m.mat_vec_with(backend, x, &mut out, &mut scratch).unwrap();
    out
}

/// `n` products at once (exact mode); `xs` holds the `n` vectors back to back.
pub fn mat_mat(backend: Backend, m: &QMatrix, xs: &[f32]) -> Vec<f32> {
    let n = xs.len() / m.cols();
    let mut out = vec![0.0; n * m.rows()];
    let mut scratch = vec![0.0; n * m.scratch_len()];
    m.mat_mat_with(backend, xs, &mut out, &mut scratch).unwrap();
    out
}

/// `n` products at once in the int8 fast mode.
pub fn mat_mat_int8(backend: Backend, m: &QMatrix, xs: &[f32]) -> Vec<f32> {
    let n = xs.len() / m.cols();
    let mut out = vec![0.0; n * m.rows()];
    let mut scratch = vec![0.0; n * m.int8_scratch_len()];
    m.mat_mat_int8_with(backend, xs, &mut out, &mut scratch)
        .unwrap();
    out
}

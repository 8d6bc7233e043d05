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

/// The bit-exact table's lines for this build (`examples/bit_exact_hashes.rs`, and the engine
/// module in workerd): `arch backend format mode hash` for every available backend, the hash
/// (FNV-1a over the result bits, any NaN as one NaN) of the same seeded cases — random blocks,
/// eight random vectors and four edge vectors (zeros, huge, subnormal, an infinity) in one
/// batch.
pub fn bit_exact_lines(arch: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0xB17E + ty.ggml_type() as u64);
        let (rows, cols) = (96, 2048);
        let w = random_blocks(&mut rng, ty, rows * cols / 256);
        let m = QMatrix::new(ty, &w, rows, cols).expect("a valid shape");
        let mut xs = random_x(&mut rng, 8 * cols);
        let edge: Vec<f32> = (0..4 * cols)
            .map(|i| match i / cols {
                0 => 0.0,
                1 => 3.0e37 * if i % 2 == 0 { 1.0 } else { -1.0 },
                2 => 1.0e-42,
                _ if i % cols == 77 => f32::INFINITY,
                _ => 0.25,
            })
            .collect();
        xs.extend(edge);
        for backend in Backend::available() {
            for (mode, out) in [
                ("exact", mat_mat(backend, &m, &xs)),
                ("int8", mat_mat_int8(backend, &m, &xs)),
            ] {
                lines.push(format!(
                    "{arch} {backend} {ty:?} {mode} {:016x}",
                    hash_bits(&out)
                ));
            }
        }
    }
    lines
}

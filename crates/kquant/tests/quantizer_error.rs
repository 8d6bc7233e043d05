//! The quantizers measured the way ggml's `tests/test-quantize-fns.cpp` measures its own:
//! data `0.1 + 2·cos(i + offset)` over n = 4096 values, the "total quantization error"
//! `sqrt(Σ(x − dequant(q(x)))²) / n` of a round trip, and the dot-product error
//! `|q(x)·y − x·y| / n`. ggml's test fails a 4- or 6-bit type above 0.002 (total error) or 0.02
//! (dot product); we assert the same limits and print the figures (quoted in the crate docs).

mod common;

use common::quantized_matrix;
use kquant::{dequantize, quantize, Block, BlockQ4K, BlockQ6K, QMatrix, QuantType};

const N: usize = 32 * 128;

fn data(offset: f32) -> Vec<f32> {
    (0..N)
        .map(|i| 0.1 + 2.0 * (i as f32 + offset).cos())
        .collect()
}

fn quantize(ty: QuantType, x: &[f32]) -> Vec<u8> {
    let mut bytes = vec![0u8; x.len() / 256 * ty.block_bytes()];
    match ty {
        QuantType::Q4K => {
            quantize::quantize_row_q4k(x, BlockQ4K::slice_from_bytes_mut(&mut bytes).unwrap())
        }
        QuantType::Q6K => {
            quantize::quantize_row_q6k(x, BlockQ6K::slice_from_bytes_mut(&mut bytes).unwrap())
        }
    }
    .unwrap();
    bytes
}

#[test]
fn errors_are_within_ggml_limits() {
    let (x, y) = (data(0.0), data(1.0));
    for ty in QuantType::ALL {
        let q = quantize(ty, &x);
        let mut back = vec![0.0; N];
        dequantize(ty, &q, &mut back).unwrap();
        let sq: f64 = x
            .iter()
            .zip(&back)
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum();
        let total = sq.sqrt() / N as f64;
        let mut dot = [0.0f32];
        QMatrix::new(ty, &q, 1, N)
            .unwrap()
            .mat_vec(&y, &mut dot)
            .unwrap();
        let exact: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        let dot_err = (f64::from(dot[0]) - exact).abs() / N as f64;
        eprintln!("{ty:?}: total quantization error {total:.2e}, dot-product error {dot_err:.2e}");
        assert!(total < 0.002, "{ty:?} total error {total}");
        assert!(dot_err < 0.02, "{ty:?} dot-product error {dot_err}");
    }
}

/// Relative RMSE on lm-head-like Gaussian weights (what the demo and benchmarks quantize).
#[test]
fn gaussian_weights_round_trip() {
    let mut rng = common::Rng::new(5);
    for (ty, limit) in [(QuantType::Q4K, 0.075), (QuantType::Q6K, 0.02)] {
        let (rows, cols) = (64, 4096);
        let mut w = vec![0.0; rows * cols];
        let bytes = {
            let mut r2 = rng.clone();
            w.iter_mut().for_each(|v| *v = r2.normal() * 0.05);
            quantized_matrix(&mut rng, ty, rows, cols)
        };
        let mut back = vec![0.0; rows * cols];
        dequantize(ty, &bytes, &mut back).unwrap();
        let err: f64 = w
            .iter()
            .zip(&back)
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum();
        let norm: f64 = w.iter().map(|a| f64::from(*a).powi(2)).sum();
        let rel = (err / norm).sqrt();
        eprintln!("{ty:?}: relative RMSE on Gaussian weights {rel:.4}");
        assert!(rel < limit, "{ty:?}: {rel}");
    }
}

//! `mat_vec` against an f64 reference over the dequantized weights.
//!
//! The documented bound, per row, with `u = 2⁻²⁴` and `nb = cols / 256`:
//!
//! ```text
//! |y − y_ref| ≤ (4·nb + 40) · u · Σ_c (|w_c| + 2·|m_c|) · |x_c|
//! ```
//!
//! where `w` are the dequantized weights and `m_c = dmin·m` the Q4_K min of column c's sub-block
//! (0 for Q6_K). `4·nb` covers the sequential accumulation per lane, the constant the 4-term
//! lane sums, the scale products, the reduction tree and Q4_K's 32-term sums of x; the `2·|m|`
//! covers Q4_K computing `d·sc·Σq·x` and `dmin·m·Σx` separately.

mod common;

use common::{quantized_matrix, random_blocks, random_x, Rng};
use kquant::{dequantize, Block, BlockQ4K, QMatrix, QuantType};

fn min_per_column(ty: QuantType, bytes: &[u8]) -> Vec<f32> {
    match ty {
        QuantType::Q6K => vec![0.0; bytes.len() / ty.block_bytes() * 256],
        QuantType::Q4K => BlockQ4K::slice_from_bytes(bytes)
            .unwrap()
            .iter()
            .flat_map(|b| {
                (0..256).map(move |i| b.dmin().to_f32() * f32::from(b.scale_min(i / 32).1))
            })
            .collect(),
    }
}

/// Returns the largest observed `|y − y_ref| / Σ|w·x|` over the rows.
fn check(ty: QuantType, w: &[u8], rows: usize, cols: usize, x: &[f32]) -> f64 {
    let mut y = vec![0.0; rows];
    QMatrix::new(ty, w, rows, cols)
        .unwrap()
        .mat_vec(x, &mut y)
        .unwrap();
    let mut dq = vec![0.0; rows * cols];
    dequantize(ty, w, &mut dq).unwrap();
    let mins = min_per_column(ty, w);
    let u = f64::from(f32::EPSILON) / 2.0;
    let nb = (cols / 256) as f64;
    let mut worst = 0.0f64;
    for r in 0..rows {
        let row = &dq[r * cols..][..cols];
        let m = &mins[r * cols..][..cols];
        let exact: f64 = row
            .iter()
            .zip(x)
            .map(|(&w, &x)| f64::from(w) * f64::from(x))
            .sum();
        let mag: f64 = row
            .iter()
            .zip(m)
            .zip(x)
            .map(|((&w, &m), &x)| {
                (f64::from(w).abs() + 2.0 * f64::from(m).abs()) * f64::from(x).abs()
            })
            .sum();
        let err = (f64::from(y[r]) - exact).abs();
        let bound = (4.0 * nb + 40.0) * u * mag;
        assert!(
            err <= bound,
            "{ty:?} row {r}: |{} − {exact}| = {err:e} > {bound:e}",
            y[r]
        );
        let abs_wx: f64 = row
            .iter()
            .zip(x)
            .map(|(&w, &x)| f64::from(w * x).abs())
            .sum();
        if abs_wx > 0.0 {
            worst = worst.max(err / abs_wx);
        }
    }
    worst
}

#[test]
fn quantized_lm_head_rows_are_within_the_bound() {
    let mut rng = Rng::new(11);
    for ty in QuantType::ALL {
        for (rows, cols) in [(64, 5376), (48, 3584), (200, 256)] {
            let w = quantized_matrix(&mut rng, ty, rows, cols);
            let x = random_x(&mut rng, cols);
            let worst = check(ty, &w, rows, cols, &x);
            eprintln!("{ty:?} {rows}×{cols}: worst |err|/Σ|w·x| = {worst:.2e}");
        }
    }
}

#[test]
fn random_blocks_are_within_the_bound() {
    let mut rng = Rng::new(12);
    for ty in QuantType::ALL {
        let (rows, cols) = (32, 8192);
        let w = random_blocks(&mut rng, ty, rows * cols / 256);
        let x = random_x(&mut rng, cols);
        check(ty, &w, rows, cols, &x);
    }
}

//! The fast mode (8-bit activations): the same bits on every backend, golden hashes, NaN
//! propagation, and its accuracy measured. Its documented order is checked against the
//! independent oracle in `tests/oracle.rs`.

mod common;

use common::mat_mat_int8 as int8;
use common::{first_difference, hash_bits, quantized_matrix, random_blocks, random_x, Rng};
use kquant::{dequantize, Backend, QMatrix, QuantType};

#[test]
fn non_finite_x_gives_nan() {
    let mut rng = Rng::new(9);
    for ty in QuantType::ALL {
        let w = random_blocks(&mut rng, ty, 2 * 2);
        let m = QMatrix::new(ty, &w, 2, 512).unwrap();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN] {
            let mut x = random_x(&mut rng, 512);
            x[400] = bad;
            let mut out = [0.0; 2];
            m.mat_vec_int8(&x, &mut out).unwrap();
            assert!(out.iter().all(|y| y.is_nan()), "{ty:?} {bad}: {out:?}");
        }
    }
}

#[test]
fn golden_hashes_match_on_every_architecture() {
    let mut got = Vec::new();
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0x8B17 + ty.ggml_type() as u64);
        let w = random_blocks(&mut rng, ty, 64 * 16);
        let m = QMatrix::new(ty, &w, 64, 4096).unwrap();
        let x = random_x(&mut rng, 4096);
        let reference = int8(Backend::Scalar, &m, &x);
        for backend in Backend::available() {
            assert_eq!(
                first_difference(&int8(backend, &m, &x), &reference),
                None,
                "{backend}"
            );
        }
        got.push(hash_bits(&reference));
    }
    assert_eq!(got, [GOLDEN_Q4K, GOLDEN_Q6K]);
}

const GOLDEN_Q4K: u64 = 9274158153457431935;
const GOLDEN_Q6K: u64 = 5290951861540803776;

/// Error against an f64 reference over the dequantized weights, relative to max |y|.
#[test]
fn accuracy_against_f64() {
    let mut rng = Rng::new(17);
    for ty in QuantType::ALL {
        let (rows, cols) = (256, 4096);
        let w = quantized_matrix(&mut rng, ty, rows, cols);
        let x = random_x(&mut rng, cols);
        let m = QMatrix::new(ty, &w, rows, cols).unwrap();
        let mut dq = vec![0.0; rows * cols];
        dequantize(ty, &w, &mut dq).unwrap();
        let exact: Vec<f64> = dq
            .chunks(cols)
            .map(|r| {
                r.iter()
                    .zip(&x)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum()
            })
            .collect();
        let ymax = exact.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let mut fast = vec![0.0; rows];
        m.mat_vec_int8(&x, &mut fast).unwrap();
        let mut precise = vec![0.0; rows];
        m.mat_vec(&x, &mut precise).unwrap();
        let err = |y: &[f32]| {
            y.iter()
                .zip(&exact)
                .map(|(&a, &b)| (f64::from(a) - b).abs())
                .fold(0.0, f64::max)
                / ymax
        };
        let (e8, e32) = (err(&fast), err(&precise));
        eprintln!("{ty:?}: max error / max|y|: int8 {e8:.2e}, exact {e32:.2e}");
        assert!(e8 < 1e-2, "{ty:?} int8 error {e8}");
        assert!(e32 < 1e-5, "{ty:?} exact error {e32}");
    }
}

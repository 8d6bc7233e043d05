//! The fast mode (8-bit activations): the same bits on every backend and batch size, the same
//! bits as a direct transcription of its documented order, and its accuracy measured.

mod common;

use common::mat_mat_int8 as int8;
use common::{first_difference, hash_bits, quantized_matrix, random_blocks, random_x, Rng};
use kquant::{dequantize, Backend, Block, BlockQ4K, BlockQ6K, QMatrix, QuantType};

/// ggml's `nearest_int` written independently: round half to even.
fn round_even(v: f32) -> i32 {
    let r = v.round();
    let r = if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - v.signum()
    } else {
        r
    };
    r as i32
}

/// The documented order, written out plainly (one row, one vector).
fn reference_row(ty: QuantType, row: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (b, xb) in x.chunks_exact(256).enumerate() {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (xq, dx): (Vec<i32>, f32) = if amax == 0.0 {
            (vec![0; 256], 0.0)
        } else {
            let iscale = 127.0 / amax;
            (
                xb.iter()
                    .map(|&v| round_even(v * iscale).clamp(-127, 127))
                    .collect(),
                amax / 127.0,
            )
        };
        let bsum = |g: usize| xq[16 * g..16 * g + 16].iter().sum::<i32>();
        match ty {
            QuantType::Q6K => {
                let blk = &BlockQ6K::slice_from_bytes(row).unwrap()[b];
                let mut s = 0i64;
                for j in 0..16 {
                    let part: i64 = (16 * j..16 * j + 16)
                        .map(|i| quant6(blk, i) * i64::from(xq[i]))
                        .sum();
                    s += i64::from(blk.scale(j)) * (part - 32 * i64::from(bsum(j)));
                }
                acc += (blk.d().to_f32() * dx) * s as f32;
            }
            QuantType::Q4K => {
                let blk = &BlockQ4K::slice_from_bytes(row).unwrap()[b];
                let (mut s, mut m) = (0i64, 0i64);
                for sub in 0..8 {
                    let (sc, mn) = blk.scale_min(sub);
                    let part: i64 = (32 * sub..32 * sub + 32)
                        .map(|i| {
                            let (g, l) = (i / 64, i % 64);
                            let byte = blk.qs[32 * g + l % 32];
                            let q = if l < 32 { byte & 15 } else { byte >> 4 };
                            i64::from(q) * i64::from(xq[i])
                        })
                        .sum();
                    s += i64::from(sc) * part;
                    m += i64::from(mn) * i64::from(bsum(2 * sub) + bsum(2 * sub + 1));
                }
                acc += (blk.d().to_f32() * dx) * s as f32 - (blk.dmin().to_f32() * dx) * m as f32;
            }
        }
    }
    acc
}

/// The 6-bit quant of weight `i`, read from the layout directly.
fn quant6(b: &BlockQ6K, i: usize) -> i64 {
    let (h, r) = (i / 128, i % 128);
    let (part, l) = (r / 32, r % 32);
    let ql = b.ql[64 * h + l + 32 * (part % 2)];
    let low = if part < 2 { ql & 15 } else { ql >> 4 };
    let high = (b.qh[32 * h + l] >> (2 * part)) & 3;
    i64::from(low | high << 4)
}

#[test]
fn every_backend_and_batch_matches_the_documented_order() {
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0x1E8 + ty.ggml_type() as u64);
        for case in 0..6 {
            let rows = 1 + rng.below(40);
            let cols = 256 * (1 + rng.below(12));
            let w = random_blocks(&mut rng, ty, rows * cols / 256);
            let m = QMatrix::new(ty, &w, rows, cols).unwrap();
            let n = 1 + rng.below(8);
            let mut xs = random_x(&mut rng, n * cols);
            if case == 0 {
                xs[..256].fill(0.0); // an all-zero block
                xs[300] = 1e30;
                xs[301] = -1e-40;
            }
            let expected: Vec<f32> = xs
                .chunks(cols)
                .flat_map(|x| {
                    (0..rows)
                        .map(|r| {
                            reference_row(
                                ty,
                                &w[r * (w.len() / rows)..(r + 1) * (w.len() / rows)],
                                x,
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            for backend in Backend::available() {
                let got = int8(backend, &m, &xs);
                assert_eq!(
                    first_difference(&got, &expected),
                    None,
                    "{ty:?} case {case} ({rows}×{cols}, n = {n}) on {backend}"
                );
            }
        }
    }
}

#[test]
fn non_finite_x_gives_nan() {
    let mut rng = Rng::new(9);
    for ty in QuantType::ALL {
        let w = random_blocks(&mut rng, ty, 2 * 2);
        let m = QMatrix::new(ty, &w, 2, 512).unwrap();
        for bad in [f32::NAN, f32::INFINITY] {
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

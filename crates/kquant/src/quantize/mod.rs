//! ggml's reference quantizers for Q4_K and Q6_K, reproduced bit for bit.
//!
//! Both functions follow `quantize_row_q4_K_ref` / `quantize_row_q6_K_ref` of ggml's
//! `ggml-quants.c` operation by operation, in f32 and in the same order (Rust never fuses a
//! multiply and an add), so that the blocks they write are byte-identical to ggml's; a
//! known-answer test pins digests of ggml's own output. They take no importance matrix.
//!
//! # Q4_K
//!
//! Each 256-value super-block is cut into eight sub-blocks of 32 values. For every sub-block an
//! affine fit `x ≈ scale·q − min` with `q ∈ 0..=15` and `min ≥ 0` is searched: the values are
//! weighted by `rms(sub-block) + |x|`, and 21 candidate inverse scales `(14 + 0.1·k)/(max − min)`
//! (`k = 0..=20`) are each followed by a weighted least-squares solve for `scale` and `min`; the
//! candidate with the smallest weighted squared error wins over the plain `15/(max − min)` start.
//! The eight scales are then expressed as 6-bit multiples of `d = max_scale/63` and the eight
//! mins as 6-bit multiples of `dmin = max_min/63` (both stored as f16), packed into the 12-byte
//! `scales` field, and every value is re-quantized against the scale and min it will actually
//! be decoded with.
//!
//! # Q6_K
//!
//! Each super-block is cut into sixteen sub-blocks of 16 values, fitted symmetrically as
//! `x ≈ scale·q` with `q ∈ −32..=31`. The search starts from `−32/max` (`max` the value of
//! largest magnitude, so that it lands on `−32`) and tries the 18 nearby inverse scales
//! `−(32 + 0.1·k)/max` (`k = ±1..=±9`), keeping the one that maximizes the `x²`-weighted fit
//! `(Σ w·x·q)² / Σ w·q²`. The sixteen scales become signed 8-bit multiples of
//! `d = −max_scale/128` (f16), where `max_scale` is the sub-block scale of largest magnitude, and
//! the values are re-quantized against the decoded scales. A super-block whose scales are all
//! below `1e-15` in magnitude is written as all zeros.
//!
//! # Measured error
//!
//! Byte identity: 32,000 super-blocks per type from 19 families of rows (Gaussian at many
//! scales, uniform, heavy-tailed, sparse, constant, rounding ties, subnormal, huge, inf/NaN)
//! came out byte-identical to ggml's own C `quantize_row_q4_K_ref` / `quantize_row_q6_K_ref`
//! (compiled from the `llama-cpp-python` 0.3.36 sources at -O2, -O3 and -march=native); the
//! unit tests pin digests of ggml's output for 64 seeded rows.
//!
//! On ggml's own test data (`tests/quantizer_error.rs`, the statistics of ggml's
//! `test-quantize-fns`, whose limits are 0.002 and 0.02), with the total error `sqrt(Σ(x−y)²)/n`
//! and the dot-product error `|q(x)·y − x·y|/n`:
//!
//! | type | total error | dot-product error | ggml's published dot-product error |
//! |---|---|---|---|
//! | Q4_K | 9.8e-4 | 2.1e-3 | ≈ 2.4e-3 |
//! | Q6_K | 2.6e-4 | 4.4e-4 | ≈ 9.5e-4 |
//!
//! Our dot products keep `y` in f32 where ggml quantizes it to 8 bits, hence the lower figures.
//! On lm-head-like Gaussian weights the relative RMSE `sqrt(Σ(x−y)²/Σx²)` is 0.069 (Q4_K) and
//! 0.017 (Q6_K); when a super-block's f16 scale is subnormal (values around 1e-3 and below)
//! Q6_K's rises to about 0.02–0.03, as in ggml.

mod q4k;
mod q6k;

pub use q4k::quantize_row_q4k;
pub use q6k::quantize_row_q6k;

use crate::{Error, QK_K};

/// Scales whose magnitude stays below this are treated as zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Checks that `x` holds exactly `blocks` super-blocks of values.
fn check_values(x: &[f32], blocks: usize) -> Result<(), Error> {
    let expected = blocks.saturating_mul(QK_K);
    if x.len() == expected {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what: "values",
            expected,
            actual: x.len(),
        })
    }
}

/// ggml's `nearest_int`: adding 1.5·2²³ leaves `round_half_even(v)` in the low mantissa bits.
///
/// Exact for `|v| ≤ 2²² − 1`; outside that range it returns the same (meaningless) value as ggml.
pub(crate) fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits() & 0x007f_ffff;
    bits as i32 - 0x0040_0000
}

/// Correctly rounded `sqrt` for f32 (what C's `sqrtf` computes), without `std` or `libm`.
fn sqrt(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 || x == f32::INFINITY {
        return x;
    }
    let (mantissa, exp) = unpack_positive(x);
    // Widen the 24-bit mantissa to 47 or 48 bits so that the exponent left over is even and the
    // integer root has exactly 24 bits.
    let shift = if (exp - 23) & 1 == 0 { 23 } else { 24 };
    let wide = u64::from(mantissa) << shift;
    let mut root = wide.isqrt();
    // The exact root is never halfway between two integers, so this rounds to nearest.
    if wide - root * root > root {
        root += 1;
    }
    let mut half_exp = (exp - shift) / 2;
    if root == 1 << 24 {
        root >>= 1;
        half_exp += 1;
    }
    let biased = (half_exp + 150) as u32;
    f32::from_bits((biased << 23) | (root as u32 & 0x007f_ffff))
}

/// Writes a positive finite `x` as `mantissa · 2^exp` with `mantissa` in `[2²³, 2²⁴)`.
fn unpack_positive(x: f32) -> (u32, i32) {
    let bits = x.to_bits();
    let exp_field = (bits >> 23) as i32;
    let fraction = bits & 0x007f_ffff;
    if exp_field == 0 {
        let norm = fraction.leading_zeros() - 8;
        (fraction << norm, -149 - norm as i32)
    } else {
        (fraction | 0x0080_0000, exp_field - 150)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use bytemuck::Zeroable;
    use std::{println, vec, vec::Vec};

    use super::*;
    use crate::{dequantize, BlockQ4K, BlockQ6K, QuantType};

    /// xorshift64* with a Gaussian-ish sampler (sum of four uniforms, unit variance).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in [-1, 1).
        fn uniform(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }

        fn gaussish(&mut self) -> f32 {
            let s: f32 = (0..4).map(|_| self.uniform()).sum();
            s * 0.866_025_4
        }
    }

    /// `blocks` super-blocks of Gaussian-ish values of standard deviation `sigma`.
    fn sample_rows(seed: u64, blocks: usize, sigma: f32) -> Vec<f32> {
        let mut rng = Rng(seed);
        (0..blocks * QK_K).map(|_| sigma * rng.gaussish()).collect()
    }

    fn round_trip(ty: QuantType, x: &[f32]) -> Vec<f32> {
        let blocks = x.len() / QK_K;
        let bytes = match ty {
            QuantType::Q4K => {
                let mut out = vec![BlockQ4K::zeroed(); blocks];
                quantize_row_q4k(x, &mut out).unwrap();
                bytemuck::cast_slice(&out).to_vec()
            }
            QuantType::Q6K => {
                let mut out = vec![BlockQ6K::zeroed(); blocks];
                quantize_row_q6k(x, &mut out).unwrap();
                bytemuck::cast_slice(&out).to_vec()
            }
        };
        let mut y = vec![0.0; x.len()];
        dequantize(ty, &bytes, &mut y).unwrap();
        y
    }

    /// `sqrt(Σ(x − y)² / Σx²)`, accumulated in f64.
    fn normalized_error(x: &[f32], y: &[f32]) -> f64 {
        let (mut err, mut norm) = (0.0f64, 0.0f64);
        for (&a, &b) in x.iter().zip(y) {
            err += f64::from(a - b) * f64::from(a - b);
            norm += f64::from(a) * f64::from(a);
        }
        (err / norm).sqrt()
    }

    /// The worst normalized error of any one super-block.
    fn worst_block_error(x: &[f32], y: &[f32]) -> f64 {
        x.chunks(QK_K)
            .zip(y.chunks(QK_K))
            .map(|(a, b)| normalized_error(a, b))
            .fold(0.0, f64::max)
    }

    #[test]
    fn round_trip_error_is_small() {
        // At σ = 1e-3 the f16 super-block scales are subnormal, which costs Q6_K some accuracy.
        let cases = [
            (QuantType::Q4K, 1.0, 0.075),
            (QuantType::Q4K, 37.0, 0.075),
            (QuantType::Q4K, 1e-3, 0.075),
            (QuantType::Q6K, 1.0, 0.02),
            (QuantType::Q6K, 37.0, 0.02),
            (QuantType::Q6K, 1e-3, 0.03),
        ];
        for (ty, sigma, bound) in cases {
            let x = sample_rows(0x5eed, 2048, sigma);
            let y = round_trip(ty, &x);
            let total = normalized_error(&x, &y);
            let worst = worst_block_error(&x, &y);
            println!(
                "{} σ={sigma}: normalized error {total:.5}, worst super-block {worst:.5}",
                ty.name()
            );
            assert!(total < bound, "{} σ={sigma}: {total} ≥ {bound}", ty.name());
            assert!(
                worst < 1.5 * bound,
                "{} σ={sigma}: worst {worst}",
                ty.name()
            );
        }
    }

    /// Quantizes and dequantizes one super-block with both formats.
    fn both_round_trips(x: &[f32; QK_K]) -> [Vec<f32>; 2] {
        [round_trip(QuantType::Q4K, x), round_trip(QuantType::Q6K, x)]
    }

    #[test]
    fn zero_rows_give_zero_blocks() {
        for zero in [0.0f32, -0.0] {
            let x = [zero; QK_K];
            let mut q4 = [BlockQ4K::zeroed(); 1];
            let mut q6 = [BlockQ6K::zeroed(); 1];
            quantize_row_q4k(&x, &mut q4).unwrap();
            quantize_row_q6k(&x, &mut q6).unwrap();
            assert!(bytemuck::bytes_of(&q4[0]).iter().all(|&b| b == 0));
            assert!(bytemuck::bytes_of(&q6[0]).iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn constant_rows_are_reproduced() {
        // At 3e-3 the super-block scales fall among f16's subnormals and lose precision.
        let cases = [
            (1.0f32, 0.01),
            (-1.0, 0.01),
            (0.37, 0.01),
            (-1234.5, 0.01),
            (3e-3, 0.05),
        ];
        for (c, bound) in cases {
            let x = [c; QK_K];
            for y in both_round_trips(&x) {
                let err = normalized_error(&x, &y);
                assert!(err < bound, "constant {c}: error {err}");
            }
        }
    }

    #[test]
    fn one_huge_outlier_stays_finite_and_is_kept() {
        let mut rng = Rng(7);
        let mut x = [0.0f32; QK_K];
        x.iter_mut().for_each(|v| *v = rng.gaussish());
        for (pos, big) in [(0, 1e4f32), (77, -3e5), (255, 6e4)] {
            let mut row = x;
            row[pos] = big;
            for y in both_round_trips(&row) {
                assert!(y.iter().all(|v| v.is_finite()));
                let rel = ((y[pos] - big) / big).abs();
                assert!(rel < 0.1, "outlier {big} came back as {}", y[pos]);
            }
        }
    }

    #[test]
    fn tiny_values_do_not_panic() {
        let mut rng = Rng(11);
        for magnitude in [1e-39f32, 1e-30, 1e-12, 1e-7, 1e-5] {
            let x: [f32; QK_K] = core::array::from_fn(|_| magnitude * rng.gaussish());
            for y in both_round_trips(&x) {
                assert!(y.iter().all(|v| v.is_finite()));
                let worst = x
                    .iter()
                    .zip(&y)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                // Below f16's range the scales flush to zero; the error is then the value itself.
                assert!(worst <= 8.0 * magnitude, "{magnitude}: error {worst}");
            }
        }
        // A single subnormal in an otherwise zero row.
        let mut x = [0.0f32; QK_K];
        x[3] = f32::from_bits(1);
        for y in both_round_trips(&x) {
            assert!(y.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn extreme_and_non_finite_values_do_not_panic() {
        let mut rng = Rng(13);
        let specials = [
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e30,
        ];
        for special in specials {
            let mut x: [f32; QK_K] = core::array::from_fn(|_| rng.gaussish());
            x[100] = special;
            let _ = both_round_trips(&x);
        }
    }

    /// Inputs of the known-answer test: Gaussian-ish super-blocks at four magnitudes, some with
    /// an outlier, a zeroed sub-block, or values on a grid of eighths (exact rounding ties).
    fn known_answer_rows() -> Vec<f32> {
        let mut rng = Rng(0xdead_beef);
        let mut x = Vec::with_capacity(64 * QK_K);
        for b in 0..64 {
            let sigma = [1.0f32, 37.0, 1e-3, 0.02][b % 4];
            let mut row: Vec<f32> = (0..QK_K).map(|_| sigma * rng.gaussish()).collect();
            if b % 5 == 0 {
                row[(b * 37) % QK_K] = 50.0 * sigma;
            }
            if b % 7 == 0 {
                row[32..64].fill(0.0);
            }
            if b % 11 == 0 {
                row.iter_mut()
                    .for_each(|v| *v = (*v * 8.0 / sigma) as i32 as f32 / 8.0);
            }
            x.extend(row);
        }
        x
    }

    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// Digests of the blocks that ggml's own `quantize_row_q4_K_ref` / `quantize_row_q6_K_ref`
    /// (C, gcc -O2 -DNDEBUG, x86_64) write for [`known_answer_rows`].
    #[test]
    fn matches_ggml_reference_bytes() {
        let x = known_answer_rows();
        let mut q4 = vec![BlockQ4K::zeroed(); x.len() / QK_K];
        let mut q6 = vec![BlockQ6K::zeroed(); x.len() / QK_K];
        quantize_row_q4k(&x, &mut q4).unwrap();
        quantize_row_q6k(&x, &mut q6).unwrap();
        let digests = (
            fnv1a(bytemuck::cast_slice(&q4)),
            fnv1a(bytemuck::cast_slice(&q6)),
        );
        assert_eq!(digests, (Q4K_DIGEST, Q6K_DIGEST), "{digests:#x?}");
    }

    const Q4K_DIGEST: u64 = 0xdd56_cea3_7091_ab9e;
    const Q6K_DIGEST: u64 = 0xd5c2_21a0_706a_a119;

    #[test]
    fn lengths_must_match_whole_blocks() {
        let x = vec![0.5f32; 2 * QK_K + 1];
        let mut q4 = [BlockQ4K::zeroed(); 2];
        let mut q6 = [BlockQ6K::zeroed(); 2];
        let want = |actual| Error::LengthMismatch {
            what: "values",
            expected: 2 * QK_K,
            actual,
        };
        assert_eq!(quantize_row_q4k(&x, &mut q4), Err(want(2 * QK_K + 1)));
        assert_eq!(quantize_row_q6k(&x[..QK_K], &mut q6), Err(want(QK_K)));
        assert_eq!(quantize_row_q4k(&[], &mut q4), Err(want(0)));
        assert_eq!(quantize_row_q4k(&[], &mut []), Ok(()));
        assert_eq!(quantize_row_q6k(&[], &mut []), Ok(()));
        assert_eq!(
            quantize_row_q6k(&x[..QK_K], &mut []),
            Err(Error::LengthMismatch {
                what: "values",
                expected: 0,
                actual: QK_K
            })
        );
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [
            (0.0, 0),
            (-0.0, 0),
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-2.5, -2),
            (-2.6, -3),
            (7.49, 7),
            (4_194_303.0, 4_194_303),
            (-4_194_303.0, -4_194_303),
        ];
        for (v, want) in cases {
            assert_eq!(nearest_int(v), want, "nearest_int({v})");
        }
    }

    #[test]
    fn sqrt_is_correctly_rounded() {
        let mut state = 0x1234_5678_9abc_def0_u64;
        let check = |x: f32| {
            let want = std::primitive::f32::sqrt(x);
            assert_eq!(sqrt(x).to_bits(), want.to_bits(), "sqrt({x:e})");
        };
        for x in [
            0.0,
            -0.0,
            1.0,
            2.0,
            4.0,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::INFINITY,
        ] {
            check(x);
        }
        check(f32::from_bits(1));
        check(f32::from_bits(0x007f_ffff));
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Every positive finite bit pattern, subnormals included.
            check(f32::from_bits((state as u32) % 0x7f80_0000));
        }
        assert!(sqrt(-1.0).is_nan() && sqrt(f32::NAN).is_nan());
    }
}

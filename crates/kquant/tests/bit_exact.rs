//! The bit-exact suite: every backend available on this target must give the scalar backend's
//! bits, for random shapes and for edge cases, and fixed seeds must hash to the same golden
//! values on x86_64, aarch64 and wasm32. Built with `KQUANT_PERTURB=…` (a bug put in on
//! purpose: the reduction order, a lane swap, the f16 conversion) this suite must fail;
//! `scripts/must-fail.sh` checks that it builds and that the named tests fail.

mod common;

use common::{first_difference, hash_bits, mat_vec, random_blocks, random_x, Rng};
use kquant::{dequantize_with, Backend, Block, BlockQ4K, BlockQ6K, QMatrix, QuantType};

/// Runs `m·x` on every available backend and asserts all agree with scalar; returns the result.
fn assert_backends_agree(m: &QMatrix, x: &[f32], case: &str) -> Vec<f32> {
    let reference = mat_vec(Backend::Scalar, m, x);
    for backend in Backend::available() {
        let got = mat_vec(backend, m, x);
        if let Some(r) = first_difference(&got, &reference) {
            panic!(
                "{case}: {backend} differs from scalar at row {r}: {:e} ({:#010x}) vs {:e} \
                 ({:#010x})",
                got[r],
                got[r].to_bits(),
                reference[r],
                reference[r].to_bits()
            );
        }
    }
    let mut dq_ref = vec![0.0; m.rows() * m.cols()];
    dequantize_with(Backend::Scalar, m.ty(), m.bytes(), &mut dq_ref).unwrap();
    for backend in Backend::available() {
        let mut dq = vec![0.0; dq_ref.len()];
        dequantize_with(backend, m.ty(), m.bytes(), &mut dq).unwrap();
        assert_eq!(
            first_difference(&dq, &dq_ref),
            None,
            "{case}: dequantize on {backend}"
        );
    }
    reference
}

#[test]
fn random_shapes_agree_on_every_backend() {
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0xC0B0 + ty.ggml_type() as u64);
        for case in 0..10 {
            let rows = 1 + rng.below(300);
            let cols = 256 * (1 + rng.below(32));
            let w = random_blocks(&mut rng, ty, rows * cols / 256);
            let x = random_x(&mut rng, cols);
            let m = QMatrix::new(ty, &w, rows, cols).unwrap();
            assert_backends_agree(&m, &x, &format!("{ty:?} case {case} ({rows}×{cols})"));
        }
    }
}

/// A batch gives each vector exactly the bits of its own mat-vec, for every batch size (passes
/// of 4, 2 and 1) and backend.
#[test]
fn batches_equal_single_vectors() {
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0xBA7C + ty.ggml_type() as u64);
        let (rows, cols) = (37, 1280);
        let w = random_blocks(&mut rng, ty, rows * cols / 256);
        let m = QMatrix::new(ty, &w, rows, cols).unwrap();
        let xs = random_x(&mut rng, 8 * cols);
        let singles: Vec<f32> = xs
            .chunks(cols)
            .flat_map(|x| mat_vec(Backend::Scalar, &m, x))
            .collect();
        for backend in Backend::available() {
            for n in 1..=8 {
                let mut out = vec![0.0; n * rows];
                let mut scratch = vec![0.0; n * m.scratch_len()];
                m.mat_mat_with(backend, &xs[..n * cols], &mut out, &mut scratch)
                    .unwrap();
                assert_eq!(
                    first_difference(&out, &singles[..n * rows]),
                    None,
                    "{ty:?} batch of {n} on {backend}"
                );
            }
        }
    }
}

const SCALES: [f32; 9] = [
    1.0,
    -0.75,
    0.0,
    -0.0,
    5.960_464_5e-8, // smallest f16 subnormal
    6.097_555e-5,   // largest f16 subnormal
    65504.0,        // largest f16
    f32::INFINITY,
    f32::NAN,
];

/// Blocks whose quants are all `fill` and whose f16 scales take every value of [`SCALES`].
fn edge_blocks(ty: QuantType, fill: u8) -> Vec<u8> {
    let mut bytes = vec![fill; SCALES.len() * SCALES.len() * ty.block_bytes()];
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    match ty {
        QuantType::Q4K => {
            let blocks = BlockQ4K::slice_from_bytes_mut(&mut bytes).unwrap();
            for (i, b) in blocks.iter_mut().enumerate() {
                b.d = f16(SCALES[i % SCALES.len()]);
                b.dmin = f16(SCALES[i / SCALES.len()]);
            }
        }
        QuantType::Q6K => {
            let blocks = BlockQ6K::slice_from_bytes_mut(&mut bytes).unwrap();
            for (i, b) in blocks.iter_mut().enumerate() {
                b.d = f16(SCALES[i % SCALES.len()]);
                b.scales[i % 16] = (i * 37) as u8; // some negative sub-block scales
            }
        }
    }
    bytes
}

/// Activations with signed zeros, infinities, NaN, subnormals and huge magnitudes.
fn edge_x(rng: &mut Rng, cols: usize, specials: &[f32]) -> Vec<f32> {
    let mut x = random_x(rng, cols);
    for (i, v) in x.iter_mut().enumerate() {
        if i % 7 == 3 {
            *v = specials[(i / 7) % specials.len()];
        }
    }
    x
}

#[test]
fn edge_cases_agree_on_every_backend() {
    let finite = [0.0, -0.0, 1e-40, -1e-45, 3e38, -3e38, 1e-30, 1e30];
    let non_finite = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    let mut rng = Rng::new(7);
    for ty in QuantType::ALL {
        for fill in [0x00, 0xFF, 0x80, 0x7F] {
            let w = edge_blocks(ty, fill);
            let cols = 256 * SCALES.len();
            let m = QMatrix::new(ty, &w, SCALES.len(), cols).unwrap();
            for (name, specials) in [("finite", &finite[..]), ("non-finite", &non_finite[..])] {
                let x = edge_x(&mut rng, cols, specials);
                assert_backends_agree(&m, &x, &format!("{ty:?} fill {fill:#04x}, {name} x"));
            }
        }
        // Random quants, each x a single special value everywhere.
        let w = random_blocks(&mut rng, ty, 4 * 3);
        let m = QMatrix::new(ty, &w, 4, 768).unwrap();
        for v in finite.iter().chain(&non_finite) {
            assert_backends_agree(&m, &[*v; 768], &format!("{ty:?} x = {v:e}"));
        }
    }
}

/// Every f16 bit pattern as a block's `d` (and, for Q4_K, as `dmin`): backends that convert f16
/// in hardware (F16C) must give the generic conversion's bits, NaNs and subnormals included.
#[test]
fn every_f16_scale_agrees_on_every_backend() {
    let mut rng = Rng::new(0xF16);
    for ty in QuantType::ALL {
        let (rows, per_row) = (256, 256); // 65536 blocks: one per f16 value
        let mut w = random_blocks(&mut rng, ty, rows * per_row);
        match ty {
            QuantType::Q4K => {
                let blocks = BlockQ4K::slice_from_bytes_mut(&mut w).unwrap();
                for (i, b) in blocks.iter_mut().enumerate() {
                    b.d = (i as u16).to_le_bytes();
                    b.dmin = (i as u16).reverse_bits().to_le_bytes();
                }
            }
            QuantType::Q6K => {
                let blocks = BlockQ6K::slice_from_bytes_mut(&mut w).unwrap();
                for (i, b) in blocks.iter_mut().enumerate() {
                    b.d = (i as u16).to_le_bytes();
                }
            }
        }
        let m = QMatrix::new(ty, &w, rows, 256 * per_row).unwrap();
        let x = random_x(&mut rng, m.cols());
        assert_backends_agree(&m, &x, &format!("{ty:?} with every f16 scale"));
    }
}

/// Hashes of fixed-seed results: identical on every architecture and backend.
#[test]
fn golden_hashes_are_the_same_on_every_architecture() {
    let mut got = Vec::new();
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0x601D + ty.ggml_type() as u64);
        let (rows, cols) = (64, 4096);
        let w = random_blocks(&mut rng, ty, rows * cols / 256);
        let x = random_x(&mut rng, cols);
        let m = QMatrix::new(ty, &w, rows, cols).unwrap();
        let logits = assert_backends_agree(&m, &x, &format!("golden {ty:?}"));
        got.push((ty, hash_bits(&logits)));
    }
    let expected = [(QuantType::Q4K, GOLDEN_Q4K), (QuantType::Q6K, GOLDEN_Q6K)];
    assert_eq!(
        got, expected,
        "golden hashes (update only with a deliberate change of order)"
    );
}

const GOLDEN_Q4K: u64 = 4609397648762134467;
const GOLDEN_Q6K: u64 = 18371960678483141802;

/// The build must really run its SIMD backend: a wasm build without simd128, or an aarch64
/// build falling back to scalar, fails here instead of passing slowly.
#[test]
fn the_simd_backend_is_selected() {
    let best = Backend::best();
    #[cfg(target_arch = "x86_64")]
    {
        assert!(Backend::Sse2.is_available());
        let expected = if std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
        {
            Backend::Avx512Vnni
        } else if std::is_x86_feature_detected!("avx512bw") {
            Backend::Avx512
        } else if std::is_x86_feature_detected!("avx2") {
            Backend::Avx2
        } else {
            Backend::Sse2
        };
        assert_eq!(best, expected);
    }
    #[cfg(target_arch = "aarch64")]
    assert_eq!(
        best,
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            Backend::NeonDot
        } else {
            Backend::Neon
        }
    );
    #[cfg(target_arch = "wasm32")]
    assert_eq!(
        best,
        Backend::Simd128,
        "built without -C target-feature=+simd128?"
    );
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "wasm32"
    )))]
    assert_eq!(best, Backend::Scalar);
    eprintln!("best backend here: {best}");
}

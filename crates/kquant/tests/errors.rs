//! Every malformed call is a typed error, never a panic; non-finite inputs follow IEEE-754.

mod common;

use common::{random_blocks, Rng};
use kquant::{dequantize, mat_vec_q4k, mat_vec_q6k, Backend, Layout, QMatrix, QuantType};
use kquant::{Block, BlockQ6K, Error};

#[test]
fn shapes_are_checked() {
    let w = vec![0u8; 2 * 210];
    assert_eq!(
        QMatrix::new(QuantType::Q6K, &w, 2, 255).unwrap_err(),
        Error::ColsNotMultipleOf256 { cols: 255 }
    );
    assert_eq!(
        QMatrix::new(QuantType::Q6K, &w, 0, 256).unwrap_err(),
        Error::EmptyShape
    );
    assert_eq!(
        QMatrix::new(QuantType::Q6K, &w, 2, 0).unwrap_err(),
        Error::EmptyShape
    );
    assert_eq!(
        QMatrix::new(QuantType::Q6K, &w, 3, 256).unwrap_err(),
        Error::LengthMismatch {
            what: "weights",
            expected: 630,
            actual: 420
        }
    );
    assert_eq!(
        QMatrix::new(QuantType::Q4K, &w, usize::MAX, 256).unwrap_err(),
        Error::ShapeOverflow
    );
    assert!(QMatrix::new(QuantType::Q6K, &w, 2, 256).is_ok());
    // The interleaved layout's rows are converted on the stack by the kernels that read
    // ggml's layout, so their length is bounded.
    let long = Layout::INTERLEAVED_MAX_COLS + 256;
    let w = vec![0u8; QuantType::Q4K.row_bytes(long).unwrap()];
    let err = QMatrix::with_layout(QuantType::Q4K, Layout::Interleaved, &w, 1, long).unwrap_err();
    assert_eq!(
        err,
        Error::RowTooLong {
            layout: "interleaved",
            cols: long,
            max: 16384
        }
    );
    assert_eq!(
        err.to_string(),
        "rows of 16640 columns are too long for the interleaved layout (at most 16384)"
    );
    assert!(QMatrix::with_layout(QuantType::Q4K, Layout::Ggml, &w, 1, long).is_ok());
}

#[test]
fn buffer_lengths_are_checked() {
    let w = vec![0u8; 2 * 144];
    let mut out = [0.0; 2];
    assert_eq!(
        mat_vec_q4k(&w, 2, 256, &[0.0; 255], &mut out).unwrap_err(),
        Error::LengthMismatch {
            what: "x",
            expected: 256,
            actual: 255
        }
    );
    assert_eq!(
        mat_vec_q4k(&w, 2, 256, &[0.0; 256], &mut [0.0; 3]).unwrap_err(),
        Error::LengthMismatch {
            what: "out",
            expected: 2,
            actual: 3
        }
    );
    assert_eq!(
        mat_vec_q6k(&w, 2, 256, &[0.0; 256], &mut out).unwrap_err(),
        Error::LengthMismatch {
            what: "weights",
            expected: 420,
            actual: 288
        }
    );
    let m = QMatrix::new(QuantType::Q4K, &w, 2, 256).unwrap();
    assert_eq!(
        m.mat_vec_with(Backend::Scalar, &[0.0; 256], &mut out, &mut [0.0; 3])
            .unwrap_err(),
        Error::LengthMismatch {
            what: "scratch",
            expected: 264,
            actual: 3
        }
    );
    assert_eq!(
        dequantize(QuantType::Q6K, &[0u8; 211], &mut [0.0; 256]).unwrap_err(),
        Error::NotWholeBlocks {
            len: 211,
            block_bytes: 210
        }
    );
    assert_eq!(
        dequantize(QuantType::Q6K, &[0u8; 210], &mut [0.0; 255]).unwrap_err(),
        Error::LengthMismatch {
            what: "out",
            expected: 256,
            actual: 255
        }
    );
    assert!(BlockQ6K::slice_from_bytes(&[0u8; 209]).is_err());
    let m = QMatrix::new(QuantType::Q6K, &[0u8; 420], 2, 256).unwrap();
    for (xs, out) in [(0, 0), (257, 2), (512, 2), (512, 5)] {
        let err = m.mat_mat_with(
            Backend::Scalar,
            &vec![0.0; xs],
            &mut vec![0.0; out],
            &mut [0.0; 512],
        );
        assert!(
            matches!(err, Err(Error::LengthMismatch { .. })),
            "{xs} {out}: {err:?}"
        );
    }
}

#[test]
fn unavailable_backend_is_an_error() {
    let unavailable = Backend::ALL.into_iter().find(|b| !b.is_available());
    let Some(backend) = unavailable else { return };
    let w = vec![0u8; 144];
    let m = QMatrix::new(QuantType::Q4K, &w, 1, 256).unwrap();
    let err = m.mat_vec_with(backend, &[0.0; 256], &mut [0.0], &mut [0.0; 264]);
    assert_eq!(err.unwrap_err(), Error::BackendUnavailable);
    assert!(Error::BackendUnavailable
        .to_string()
        .contains("not available"));
}

#[test]
fn errors_read_well() {
    let e = Error::LengthMismatch {
        what: "x",
        expected: 5376,
        actual: 5375,
    };
    assert_eq!(e.to_string(), "x has length 5375, expected 5376");
}

/// IEEE-754 propagation: NaN in x makes its rows NaN; an infinite x gives ±inf or NaN (inf·0);
/// a NaN f16 scale makes its row NaN. Nothing panics.
#[test]
fn non_finite_values_propagate() {
    let mut rng = Rng::new(3);
    for ty in QuantType::ALL {
        let w = random_blocks(&mut rng, ty, 4);
        let m = QMatrix::new(ty, &w, 4, 256).unwrap();
        let mut out = [0.0; 4];
        let mut x = [0.25f32; 256];
        x[17] = f32::NAN;
        m.mat_vec(&x, &mut out).unwrap();
        assert!(out.iter().all(|y| y.is_nan()), "{ty:?}: {out:?}");
        x[17] = f32::INFINITY;
        m.mat_vec(&x, &mut out).unwrap();
        assert!(
            out.iter().all(|y| y.is_infinite() || y.is_nan()),
            "{ty:?}: {out:?}"
        );
    }
    let mut w = random_blocks(&mut rng, QuantType::Q6K, 2);
    BlockQ6K::slice_from_bytes_mut(&mut w).unwrap()[1].d = half::f16::NAN.to_le_bytes();
    let mut out = [0.0; 2];
    mat_vec_q6k(&w, 2, 256, &[1.0; 256], &mut out).unwrap();
    assert!(out[0].is_finite() && out[1].is_nan(), "{out:?}");
}

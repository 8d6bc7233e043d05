//! Arbitrary bytes as Q4_K/Q6_K matrices of any shape: every call either fails with a typed
//! error or succeeds, and every backend gives the same bits (any NaN equals any NaN); the bytes
//! read as blocks of kquant's own layouts give the bits of their ggml form.
#![no_main]

use kquant::{dequantize_layout_with, dequantize_with, repack, Backend, Layout, QMatrix, QuantType};
use libfuzzer_sys::fuzz_target;

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fuzz_target!(|data: &[u8]| {
    let [kind, rows, cols, ref rest @ ..] = *data else {
        return;
    };
    let ty = QuantType::ALL[usize::from(kind & 1)];
    let (rows, cols) = (
        usize::from(rows % 8),
        256 * usize::from(cols % 4) + usize::from(kind >> 7),
    );
    // x comes from the front of the data, the weights from the rest.
    let x: Vec<f32> = rest
        .chunks_exact(4)
        .take(cols)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let weights = &rest[(4 * x.len()).min(rest.len())..];
    let Ok(m) = QMatrix::new(ty, weights, rows, cols) else {
        return;
    };
    let mut reference = vec![0.0; rows];
    let mut scratch = vec![0.0; m.scratch_len()];
    if m.mat_vec_with(Backend::Scalar, &x, &mut reference, &mut scratch).is_err() {
        return;
    }
    let mut dq_ref = vec![0.0; rows * cols];
    dequantize_with(Backend::Scalar, ty, weights, &mut dq_ref).unwrap();
    for backend in Backend::available() {
        let mut out = vec![0.0; rows];
        m.mat_vec_with(backend, &x, &mut out, &mut scratch).unwrap();
        assert!(same(&out, &reference), "{backend} differs from scalar");
        let mut dq = vec![0.0; rows * cols];
        dequantize_with(backend, ty, weights, &mut dq).unwrap();
        assert!(same(&dq, &dq_ref), "{backend} dequantize differs");
    }
    // The same bytes read as blocks of each of kquant's layouts equal their ggml form, on every
    // backend, and repacking is a bijection.
    for layout in Layout::ALL {
        if layout == Layout::Ggml || !layout.supports(ty) || layout.check_cols(cols).is_err() {
            continue;
        }
        let name = layout.name();
        let repacked = QMatrix::with_layout(ty, layout, weights, rows, cols).unwrap();
        let mut ggml = weights.to_vec();
        repack(ty, layout, Layout::Ggml, &mut ggml).unwrap();
        let mut back = ggml.clone();
        repack(ty, Layout::Ggml, layout, &mut back).unwrap();
        assert!(back == weights, "repacking {name} is not a bijection");
        let mut want = vec![0.0; rows];
        let g = QMatrix::new(ty, &ggml, rows, cols).unwrap();
        g.mat_vec_with(Backend::Scalar, &x, &mut want, &mut scratch).unwrap();
        let mut dq_want = vec![0.0; rows * cols];
        dequantize_with(Backend::Scalar, ty, &ggml, &mut dq_want).unwrap();
        for backend in Backend::available() {
            let mut out = vec![0.0; rows];
            repacked.mat_vec_with(backend, &x, &mut out, &mut scratch).unwrap();
            assert!(same(&out, &want), "{backend} on {name} differs from ggml's layout");
            let mut dq = vec![0.0; rows * cols];
            dequantize_layout_with(backend, ty, layout, weights, &mut dq).unwrap();
            assert!(same(&dq, &dq_want), "{backend} dequantize of {name} differs");
        }
    }
});

//! Dequantization against an independent oracle: the PyPI `gguf` package's numpy dequantizer.
//! Fixtures come from `fixtures/make_fixtures.py`; every available backend must match them
//! bit for bit (any NaN equals any NaN).

mod common;

use common::first_difference;
use kquant::{dequantize_with, Backend, QuantType};

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn check(ty: QuantType, blocks: &[u8], expected: &[u8]) {
    let expected = floats(expected);
    assert_eq!(expected.len(), blocks.len() / ty.block_bytes() * 256);
    for backend in Backend::available() {
        let mut out = vec![0.0; expected.len()];
        dequantize_with(backend, ty, blocks, &mut out).unwrap();
        if let Some(i) = first_difference(&out, &expected) {
            panic!(
                "{ty:?} on {backend}: weight {i} (block {}) is {:e}, gguf says {:e}",
                i / 256,
                out[i],
                expected[i]
            );
        }
    }
}

#[test]
fn q4_k_matches_gguf_numpy() {
    check(
        QuantType::Q4K,
        include_bytes!("fixtures/q4_k.blocks"),
        include_bytes!("fixtures/q4_k.f32"),
    );
}

#[test]
fn q6_k_matches_gguf_numpy() {
    check(
        QuantType::Q6K,
        include_bytes!("fixtures/q6_k.blocks"),
        include_bytes!("fixtures/q6_k.f32"),
    );
}

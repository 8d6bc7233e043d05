//! wasm32 backend: simd128, compiled in (wasm has no run-time feature detection).

mod int8_block;
pub(crate) mod simd128;

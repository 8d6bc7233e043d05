//! wasm32 backend: simd128, compiled in (wasm has no run-time feature detection).

pub(crate) mod simd128;

//! aarch64 backend: Advanced SIMD (NEON), part of every aarch64 CPU.

pub(crate) mod neon;

//! x86_64 backends: SSE2 (baseline, 4 lanes) and AVX2 (8 lanes, detected at run time).

pub(crate) mod avx2;
pub(crate) mod sse2;

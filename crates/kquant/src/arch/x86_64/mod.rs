//! x86_64 backends: SSE2 (baseline, 4 lanes), AVX2 (8 lanes) and AVX-512 (16 lanes), the last
//! two detected at run time.

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod sse2;

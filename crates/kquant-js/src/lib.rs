//! kquant for JavaScript: ggml Q4_K / Q6_K mat-vec and dequantization in WebAssembly (simd128),
//! bit-identical to native kquant, for Node and Cloudflare Workers (`packages/kquant`).
//!
//! * `matVecQ4K` / `matVecQ6K(out, x, weights, rows, cols)` and `dequantizeQ4K` /
//!   `dequantizeQ6K(blocks, out)` ([`oneshot`]): one call, one result; the weights are copied
//!   into wasm memory on every call.
//! * [`ResidentSlice`] ([`resident`]): the no-copy path. The matrix is copied into wasm memory
//!   once — streamed in with `append` or given whole to `fill` — and every `matVec` reads it in
//!   place.
//! * `wasmMemoryBytes()` (wasm only): the size of the wasm linear memory.
//! * `kernelBackend()`: the kquant backend the kernels run on: `simd128`, or `simd128-relaxed` in
//!   the package's relaxed build (the crate built with `kquant/relaxed-simd`), which the entry
//!   modules pick where the engine has relaxed SIMD.
//!
//! Every argument's type and length is checked before anything is copied, and every allocation
//! is fallible: a bad argument, or a matrix too large for wasm memory, throws a JS `Error` whose
//! message says what was expected; nothing panics or traps.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod buffer;
pub mod error;
pub mod oneshot;
pub mod resident;
mod shape;

pub use error::{Error, Problem};
pub use resident::ResidentSlice;

/// The kquant backend the kernels run on (`Backend::best`'s name): `simd128` or
/// `simd128-relaxed` in wasm.
#[wasm_bindgen::prelude::wasm_bindgen(js_name = kernelBackend)]
pub fn kernel_backend() -> String {
    kquant::Backend::best().name().into()
}

/// Bytes of wasm linear memory the module has (it grows, never shrinks; freed memory is reused).
#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen(js_name = wasmMemoryBytes)]
pub fn wasm_memory_bytes() -> f64 {
    core::arch::wasm32::memory_size(0) as f64 * 65536.0
}

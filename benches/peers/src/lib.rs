//! Peer implementations of the k-quant mat-vec, run on the same shapes and bytes as kquant's
//! benchmarks (`cobordism_benches::CASES`), so that both can be timed side by side.
//!
//! * [`candle`]: candle-core's k-quant kernels, driven through candle's own CPU matmul.
//! * `ggml` (with `cfg(ggml)`: `GGML_SRC` set at build time, see `build.rs`): llama.cpp's ggml
//!   CPU kernels, as its matmul runs them for one vector.
//! * [`timing`]: the median timer and the Markdown / JSON-lines output shared with
//!   `kernel-timing`'s format.

pub mod candle;
#[cfg(ggml)]
pub mod ggml;
pub mod timing;

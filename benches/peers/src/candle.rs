//! candle-core's k-quant mat-vec on kquant's benchmark bytes.
//!
//! The weights are handed to candle as raw ggml blocks through its public
//! [`GgmlDType::from_data`], which copies them into a `Vec<BlockQ6K>` / `Vec<BlockQ4K>` (the
//! same `repr(C)` ggml layout kquant reads; candle's block fields are crate-private, so this is
//! the safe way in). A mat-vec is candle's own CPU matmul ([`QuantizedType::matmul_t`] with
//! `m = 1`, what `QMatMul::forward` runs on CPU): it quantizes `x` to `BlockQ8K` once per call,
//! then takes one `vec_dot` per weight row (in groups of four rows via `vec_dot_4`).
//!
//! Which `vec_dot` runs is candle's choice, not ours: on x86_64 candle 0.11 detects AVX2+FMA
//! at run time (its `avx` module is compiled with `#[target_feature(enable = "avx2,fma")]`), so
//! the default build already gets the AVX2 kernels and no RUSTFLAGS are needed; on wasm32 its
//! `simd128` module is compiled in when the target has `+simd128`, which the workspace's
//! `.cargo/config.toml` sets for wasm targets. [`candle_path`] names the path taken.

use std::borrow::Cow;

use candle_core::quantized::{GgmlDType, QuantizedType};
use kquant::QuantType;

/// The worker threads candle's matmul uses unless `CANDLE_NUM_THREADS` says otherwise: one,
/// the calling thread, like kquant's mat-vec.
pub const DEFAULT_THREADS: &str = "1";

/// A `rows × cols` k-quant matrix held by candle.
pub struct CandleMatrix {
    blocks: Box<dyn QuantizedType>,
    rows: usize,
    cols: usize,
}

impl CandleMatrix {
    /// Copies ggml blocks of format `ty` (rows of `cols` values, row-major) into candle.
    ///
    /// Panics if the bytes are not whole blocks or not 2-byte aligned (candle's check).
    pub fn new(ty: QuantType, bytes: &[u8], rows: usize, cols: usize) -> Self {
        let dtype = match ty {
            QuantType::Q4K => GgmlDType::Q4K,
            QuantType::Q6K => GgmlDType::Q6K,
        };
        assert_eq!(
            bytes.len(),
            rows * cols / dtype.block_size() * dtype.type_size(),
            "candle's block size differs from kquant's"
        );
        CandleMatrix {
            blocks: dtype.from_data(Cow::Borrowed(bytes)),
            rows,
            cols,
        }
    }

    /// `out = W·x` through candle's CPU matmul (x quantized to Q8_K inside the call).
    pub fn mat_vec(&self, x: &[f32], out: &mut [f32]) {
        self.blocks
            .matmul_t((1, self.cols, self.rows), x, out)
            .expect("candle matmul");
    }
}

/// Sets `CANDLE_NUM_THREADS` to [`DEFAULT_THREADS`] unless the caller set it, and returns the
/// value in force. Call before the first matmul (candle reads it once) and before spawning
/// threads.
pub fn pin_threads() -> String {
    const VAR: &str = "CANDLE_NUM_THREADS";
    match std::env::var(VAR) {
        Ok(v) => v,
        Err(_) => {
            std::env::set_var(VAR, DEFAULT_THREADS);
            DEFAULT_THREADS.to_owned()
        }
    }
}

/// The `vec_dot` family candle 0.11 dispatches to on this build and CPU, mirroring its own
/// checks: `avx2` (run-time AVX2+FMA), `neon`, `simd128`, or `generic`.
pub fn candle_path() -> &'static str {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        return "avx2";
    }
    if cfg!(target_feature = "neon") {
        "neon"
    } else if cfg!(target_feature = "simd128") {
        "simd128"
    } else {
        "generic"
    }
}

//! llama.cpp's ggml CPU kernels as a peer, compiled by `build.rs` from a pinned llama.cpp source
//! (`scripts/fetch-ggml.sh`; only with `cfg(ggml)`). A mat-vec runs as
//! `ggml_compute_forward_mul_mat` runs one vector on one thread: `x` quantized to Q8_K once
//! (`quantize_row_q8_K`), then one `ggml_vec_dot_q6_K_q8_K` / `ggml_vec_dot_q4_K_q8_K` per weight
//! row. The weights are kquant's benchmark bytes as they are: ggml's block layout is kquant's.
//! Which x86 path runs is ggml's compile-time choice (`-march=native`: its AVX2 loops where the
//! CPU has AVX2; ggml has no AVX-512 `vec_dot` for these types).

use core::ffi::{c_int, c_void};
use std::sync::Once;

use kquant::QuantType;

/// `u32`s of one `block_q8_K`: an f32 scale, 256 i8 values, 16 i16 sums (292 bytes).
const Q8K_WORDS: usize = (4 + 256 + 32) / 4;

extern "C" {
    fn cobordism_ggml_init();
    fn quantize_row_q8_K(x: *const f32, y: *mut c_void, k: i64);
    fn ggml_vec_dot_q6_K_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        vx: *const c_void,
        bx: usize,
        vy: *const c_void,
        by: usize,
        nrc: c_int,
    );
    fn ggml_vec_dot_q4_K_q8_K(
        n: c_int,
        s: *mut f32,
        bs: usize,
        vx: *const c_void,
        bx: usize,
        vy: *const c_void,
        by: usize,
        nrc: c_int,
    );
}

static INIT: Once = Once::new();

/// A `rows × cols` k-quant matrix read by ggml's kernels.
pub struct GgmlMatrix<'a> {
    ty: QuantType,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
    /// `x` as Q8_K blocks (u32 words: the blocks' f32 scale is read aligned).
    q8: Vec<u32>,
}

impl<'a> GgmlMatrix<'a> {
    /// The matrix of `rows` rows of `cols` values of type `ty` in `bytes`, row-major.
    ///
    /// Panics unless `cols` is a multiple of 256 and the bytes are exactly the blocks.
    pub fn new(ty: QuantType, bytes: &'a [u8], rows: usize, cols: usize) -> Self {
        assert_eq!(cols % 256, 0, "whole blocks per row");
        assert_eq!(bytes.len(), rows * cols / 256 * ty.block_bytes());
        // SAFETY: fills the harness's own tables; `Once` runs it before any kernel.
        INIT.call_once(|| unsafe { cobordism_ggml_init() });
        GgmlMatrix {
            ty,
            bytes,
            rows,
            cols,
            q8: vec![0; cols / 256 * Q8K_WORDS],
        }
    }

    /// `out = W·x`, ggml's way (see the module's docs).
    pub fn mat_vec(&mut self, x: &[f32], out: &mut [f32]) {
        assert_eq!((x.len(), out.len()), (self.cols, self.rows));
        let row_bytes = self.cols / 256 * self.ty.block_bytes();
        let dot = match self.ty {
            QuantType::Q6K => ggml_vec_dot_q6_K_q8_K,
            QuantType::Q4K => ggml_vec_dot_q4_K_q8_K,
        };
        // SAFETY: `x` holds `cols` floats and `q8` room for `cols / 256` Q8_K blocks, which is
        // what quantize_row_q8_K writes for `k = cols` (a multiple of 256).
        unsafe { quantize_row_q8_K(x.as_ptr(), self.q8.as_mut_ptr().cast(), self.cols as i64) };
        for (row, y) in self.bytes.chunks_exact(row_bytes).zip(out) {
            // SAFETY: `row` is one row's `cols / 256` blocks of `ty` and `q8` the matching Q8_K
            // blocks; with `nrc = 1` the kernel reads those and writes the one float `y`.
            unsafe {
                dot(
                    self.cols as c_int,
                    y,
                    0,
                    row.as_ptr().cast(),
                    0,
                    self.q8.as_ptr().cast(),
                    0,
                    1,
                )
            };
        }
    }
}

//! One-shot functions: `matVecQ4K` / `matVecQ6K` and `dequantizeQ4K` / `dequantizeQ6K`.
//!
//! Each call checks every length first, then streams its input into wasm memory window by window
//! (256 KiB of blocks at a time) and writes the result into the caller's array. So the
//! weights are copied into wasm memory on every call — keep them in a
//! [`ResidentSlice`](crate::ResidentSlice) to copy them once — but a call never needs more than
//! a few windows of wasm memory, however large the matrix (wasm memory never shrinks).

use js_sys::{Float32Array, Uint8Array};
use kquant::{QuantType, QK_K};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;

use crate::buffer::{copy_in, typed, zeroed, TypedArray};
use crate::error::{Error, Problem};
use crate::shape::{check_dequantize, Shape};

/// Bytes of blocks moved into wasm memory at a time.
const WINDOW_BYTES: usize = 256 * 1024;

/// `out = W·x` for a row-major `rows × cols` Q6_K matrix `weights` (ggml's blocks, 210 bytes per
/// 256 weights), bit-identical to native kquant. `x` has `cols` floats, `out` `rows`; `cols` is a
/// multiple of 256. Copies the weights into wasm memory on every call: use `ResidentSlice` to
/// keep them there.
#[wasm_bindgen(js_name = matVecQ6K)]
pub fn mat_vec_q6k(
    #[wasm_bindgen(unchecked_param_type = "Float32Array")] out: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "Float32Array")] x: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "Uint8Array")] weights: &JsValue,
    rows: f64,
    cols: f64,
) -> Result<(), Error> {
    mat_vec("matVecQ6K", QuantType::Q6K, out, x, weights, rows, cols)
}

/// `out = W·x` for a row-major `rows × cols` Q4_K matrix `weights` (ggml's blocks, 144 bytes per
/// 256 weights), bit-identical to native kquant. `x` has `cols` floats, `out` `rows`; `cols` is a
/// multiple of 256. Copies the weights into wasm memory on every call: use `ResidentSlice` to
/// keep them there.
#[wasm_bindgen(js_name = matVecQ4K)]
pub fn mat_vec_q4k(
    #[wasm_bindgen(unchecked_param_type = "Float32Array")] out: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "Float32Array")] x: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "Uint8Array")] weights: &JsValue,
    rows: f64,
    cols: f64,
) -> Result<(), Error> {
    mat_vec("matVecQ4K", QuantType::Q4K, out, x, weights, rows, cols)
}

/// Dequantizes whole Q6_K blocks (210 bytes each) into `out` (256 floats per block),
/// bit-identical to ggml's `dequantize_row_q6_K`.
#[wasm_bindgen(js_name = dequantizeQ6K)]
pub fn dequantize_q6k(
    #[wasm_bindgen(unchecked_param_type = "Uint8Array")] blocks: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "Float32Array")] out: &JsValue,
) -> Result<(), Error> {
    dequantize("dequantizeQ6K", QuantType::Q6K, blocks, out)
}

/// Dequantizes whole Q4_K blocks (144 bytes each) into `out` (256 floats per block),
/// bit-identical to ggml's `dequantize_row_q4_K`.
#[wasm_bindgen(js_name = dequantizeQ4K)]
pub fn dequantize_q4k(
    #[wasm_bindgen(unchecked_param_type = "Uint8Array")] blocks: &JsValue,
    #[wasm_bindgen(unchecked_param_type = "Float32Array")] out: &JsValue,
) -> Result<(), Error> {
    dequantize("dequantizeQ4K", QuantType::Q4K, blocks, out)
}

fn mat_vec(
    call: &'static str,
    ty: QuantType,
    out: &JsValue,
    x: &JsValue,
    weights: &JsValue,
    rows: f64,
    cols: f64,
) -> Result<(), Error> {
    let out: &Float32Array = typed(call, "out", out)?;
    let x: &Float32Array = typed(call, "x", x)?;
    let weights: &Uint8Array = typed(call, "weights", weights)?;
    let shape = Shape::new(call, ty, rows, cols)?;
    shape.check_mat_vec(call, weights.elements(), x.elements(), out.elements())?;
    let x = copy_in(call, "x", x)?;
    let mut y = zeroed(call, "out", shape.rows)?;
    let mut scratch = zeroed(call, "scratch", ty.largest_scratch_len(shape.cols))?;
    let window_rows = (WINDOW_BYTES / shape.row_bytes).clamp(1, shape.rows);
    let mut window = zeroed(call, "weights", window_rows * shape.row_bytes)?;
    for (i, y) in y.chunks_mut(window_rows).enumerate() {
        let w = &mut window[..y.len() * shape.row_bytes];
        weights.read(i * window_rows * shape.row_bytes, w);
        shape.mat_vec(call, w, &x, y, &mut scratch, false)?;
    }
    out.copy_from(&y);
    Ok(())
}

fn dequantize(
    call: &'static str,
    ty: QuantType,
    blocks: &JsValue,
    out: &JsValue,
) -> Result<(), Error> {
    let blocks: &Uint8Array = typed(call, "blocks", blocks)?;
    let out: &Float32Array = typed(call, "out", out)?;
    check_dequantize(call, ty, blocks.elements(), out.elements())?;
    let block_bytes = ty.block_bytes();
    let count = blocks.elements() / block_bytes;
    let window_blocks = (WINDOW_BYTES / block_bytes).min(count);
    let mut window = zeroed(call, "blocks", window_blocks * block_bytes)?;
    let mut y = zeroed(call, "out", window_blocks * QK_K)?;
    for start in (0..count).step_by(window_blocks.max(1)) {
        let n = window_blocks.min(count - start);
        let (w, y) = (&mut window[..n * block_bytes], &mut y[..n * QK_K]);
        blocks.read(start * block_bytes, w);
        kquant::dequantize(ty, w, y).map_err(|e| Error::new(call, Problem::Kernel(e)))?;
        // JS lengths are below 2³², so the casts are exact.
        out.subarray((start * QK_K) as u32, ((start + n) * QK_K) as u32)
            .copy_from(y);
    }
    Ok(())
}

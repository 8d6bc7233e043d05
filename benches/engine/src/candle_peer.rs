//! candle-core's simd128 k-quant mat-vec in the engine benchmark's module (feature `candle`),
//! on the weights and activations of the case set up last, so that workerd times it too.
//!
//! candle's dependencies pull in getrandom 0.3 and 0.4; the build gives both the `wasm_js`
//! backend (see `benches/engine/Cargo.toml`), which the mat-vec never calls; the few
//! wasm-bindgen imports left in the module get functions that throw (`harness.mjs`).

use std::cell::RefCell;

use cobordism_peers::candle::CandleMatrix;

/// candle's copy of the weights, the vector and the output.
struct Candle {
    matrix: CandleMatrix,
    x: Vec<f32>,
    out: Vec<f32>,
}

thread_local! {
    static CANDLE: RefCell<Option<Candle>> = const { RefCell::new(None) };
}

/// Hands the case's weights (ggml blocks) and first vector to candle: 1, or 0 when nothing was
/// set up.
pub fn setup(ty: kquant::QuantType, weights: &[u8], rows: usize, cols: usize, x: &[f32]) -> u32 {
    let candle = Candle {
        matrix: CandleMatrix::new(ty, weights, rows, cols),
        x: x[..cols].to_vec(),
        out: vec![0.0; rows],
    };
    CANDLE.with(|c| *c.borrow_mut() = Some(candle));
    1
}

/// One candle mat-vec; its first result (NaN before [`setup`]).
pub fn run() -> f32 {
    CANDLE.with(|c| {
        let mut c = c.borrow_mut();
        let Some(c) = c.as_mut() else {
            return f32::NAN;
        };
        c.matrix.mat_vec(&c.x, &mut c.out);
        c.out[0]
    })
}

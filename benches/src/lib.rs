//! Shapes and data shared by the benchmarks: real lm-head slice shapes filled with seeded,
//! valid blocks.

use kquant::{synth, QuantType};

/// One benchmark case: a format and a `rows × cols` slice.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The format.
    pub ty: QuantType,
    /// Rows of the slice (vocabulary entries).
    pub rows: usize,
    /// Columns (hidden size).
    pub cols: usize,
}

/// The shapes the issues name: one eighth of gemma-3-27b's vocabulary (5376 hidden), and of
/// qwen2.5-7b's (3584 hidden).
pub const CASES: [Case; 3] = [
    Case {
        ty: QuantType::Q6K,
        rows: 32768,
        cols: 5376,
    },
    Case {
        ty: QuantType::Q4K,
        rows: 32768,
        cols: 5376,
    },
    Case {
        ty: QuantType::Q4K,
        rows: 19008,
        cols: 3584,
    },
];

impl Case {
    /// `q6_k 32768×5376`.
    pub fn label(&self) -> String {
        format!("{} {}×{}", self.ty.name(), self.rows, self.cols)
    }

    /// Bytes of weights streamed by one mat-vec.
    pub fn weight_bytes(&self) -> usize {
        self.rows * self.ty.row_bytes(self.cols).expect("valid shape")
    }

    /// Seeded weights and activations for this case.
    pub fn data(&self, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let mut rng = synth::SplitMix64::new(seed);
        let mut w = vec![0u8; self.weight_bytes()];
        synth::random_blocks(&mut rng, self.ty, &mut w).expect("whole blocks");
        let x = (0..self.cols).map(|_| rng.normal()).collect();
        (w, x)
    }
}

//! The resident slice's computation: the logits of a pass, and the warm-up's priming run.

use cobordism_protocol::{answer, Precision};
use kquant::QMatrix;

use super::Resident;
use crate::error::{zeroed, ShardError};

impl Resident {
    /// Runs the kernels of `precision` once on a zero vector, the answer dropped: a fresh
    /// engine compiles the wasm kernels' optimized code while they run, so that a warm-up that
    /// ends with this makes the first real request as fast as the ones after it.
    pub fn prime(&mut self, precision: Precision) -> Result<(), ShardError> {
        let zero = zeroed(self.manifest.hidden, "a zero vector")?;
        self.logits(&zero, 1, precision).map(drop)
    }

    /// `n` hidden vectors (concatenated) → `n · row_count` logits, soft-capped as the manifest
    /// says.
    pub fn logits(
        &mut self,
        hidden: &[f32],
        n: usize,
        precision: Precision,
    ) -> Result<Vec<f32>, ShardError> {
        let rows = self.entry.row_count;
        let m = QMatrix::with_layout(
            self.manifest.dtype,
            self.manifest.layout,
            &self.slice,
            rows,
            self.manifest.hidden,
        )
        .map_err(|e| ShardError::internal(format_args!("slice does not match its shape: {e}")))?;
        let len = n
            .checked_mul(rows)
            .ok_or_else(|| ShardError::internal("n · rows overflows"))?;
        let mut out = zeroed(len, "the logits")?;
        let cap = self.manifest.softcap;
        answer::logits_into(&m, hidden, precision, cap, &mut out, &mut self.scratch)
            .map_err(ShardError::internal)?;
        Ok(out)
    }
}

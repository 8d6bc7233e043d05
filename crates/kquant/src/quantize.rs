//! Quantizers (being written: see the helper's task).

use crate::{BlockQ4K, BlockQ6K, Error};

/// Quantizes `x` (a whole number of 256-value super-blocks) into Q4_K blocks.
pub fn quantize_row_q4k(x: &[f32], out: &mut [BlockQ4K]) -> Result<(), Error> {
    let _ = (x, out);
    unimplemented!()
}

/// Quantizes `x` (a whole number of 256-value super-blocks) into Q6_K blocks.
pub fn quantize_row_q6k(x: &[f32], out: &mut [BlockQ6K]) -> Result<(), Error> {
    let _ = (x, out);
    unimplemented!()
}

//! The lm-head's answer, computed in one place for the shard and for `cobordism logits --local`,
//! so that both give the same bits by construction: kquant's kernel in the requested precision
//! (the best backend here; every backend gives the same bits), then the manifest's soft cap.

use kquant::{Backend, QMatrix};

use crate::{softcap, Precision};

/// Floats of scratch [`logits_into`] needs for `n` vectors over `m` (the exact mode's, the larger).
pub fn scratch_len(m: &QMatrix, n: usize) -> usize {
    n.saturating_mul(m.scratch_len().max(m.int8_scratch_len()))
}

/// The logits of the `n = xs.len() / cols` hidden vectors `xs` over the rows of `m`, into `out`
/// (`n · rows`, vector by vector), soft-capped by `cap`.
pub fn logits_into(
    m: &QMatrix,
    xs: &[f32],
    precision: Precision,
    cap: Option<f32>,
    out: &mut [f32],
    scratch: &mut [f32],
) -> Result<(), kquant::Error> {
    let n = xs.len() / m.cols().max(1);
    match precision {
        Precision::Exact => {
            let len = (n * m.scratch_len()).min(scratch.len());
            m.mat_mat_with(Backend::best(), xs, out, &mut scratch[..len])
        }
        Precision::Int8 => {
            let len = (n * m.int8_scratch_len()).min(scratch.len());
            m.mat_mat_int8_with(Backend::best(), xs, out, &mut scratch[..len])
        }
    }?;
    softcap(out, cap);
    Ok(())
}

//! Logits computed natively from the slice files next to the manifest, over each slice in
//! bounded row chunks (each checksummed), by `cobordism_protocol::answer`: the same kernel and
//! soft cap the shard Worker runs.

use std::path::Path;

use anyhow::{Context, Result};
use cobordism_protocol::{answer, Manifest, Precision};
use kquant::QMatrix;

use crate::progress;
use crate::slices;

/// Bytes of weights read per step (rounded down to whole rows, at least one row).
const CHUNK_BYTES: usize = 8 << 20;

/// All `vocab` logits for `hidden`, from the slices in `dir`.
pub fn compute(
    manifest: &Manifest,
    dir: &Path,
    hidden: &[f32],
    precision: Precision,
) -> Result<Vec<f32>> {
    let (ty, row_bytes) = (manifest.dtype, manifest.row_bytes()?);
    let chunk_rows = (CHUNK_BYTES / row_bytes).max(1);
    let mut logits = vec![0.0f32; manifest.vocab];
    let total = manifest.shards.iter().map(|s| s.bytes).sum();
    let bar = progress::bytes(total, "computing");
    for s in &manifest.shards {
        let mut out = &mut logits[s.row_start..s.row_start + s.row_count];
        slices::stream(dir, s, chunk_rows * row_bytes, |chunk| {
            let rows = chunk.len() / row_bytes;
            let (head, rest) = std::mem::take(&mut out)
                .split_at_mut_checked(rows)
                .context("a slice holds more rows than the manifest says")?;
            let m = QMatrix::with_layout(ty, manifest.layout, chunk, rows, manifest.hidden)?;
            let mut scratch = vec![0.0; answer::scratch_len(&m, 1)];
            answer::logits_into(&m, hidden, precision, manifest.softcap, head, &mut scratch)?;
            out = rest;
            bar.inc(chunk.len() as u64);
            Ok(())
        })?;
    }
    bar.finish_and_clear();
    Ok(logits)
}

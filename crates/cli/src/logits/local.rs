//! Logits computed natively from the slice files next to the manifest: kquant's `mat_vec` (or
//! its int8 fast mode) over
//! each slice in bounded row chunks (each checksummed), then the manifest's soft cap, which is
//! the same f32 code the shard Worker runs.

use std::path::Path;

use anyhow::{Context, Result};
use cobordism_protocol::{softcap, Manifest, Precision};
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
    let (ty, row_bytes) = (manifest.quant_type(), manifest.row_bytes());
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
            let m = QMatrix::new(ty, chunk, rows, manifest.hidden)?;
            match precision {
                Precision::Exact => m.mat_vec(hidden, head)?,
                Precision::Int8 => m.mat_vec_int8(hidden, head)?,
            }
            out = rest;
            bar.inc(chunk.len() as u64);
            Ok(())
        })?;
    }
    bar.finish_and_clear();
    softcap(&mut logits, manifest.softcap);
    Ok(logits)
}

//! Finding the lm-head in a GGUF file and checking that it can be sliced: the tensor
//! `output.weight` (or `token_embd.weight` for tied embeddings), 2-D, Q4_K or Q6_K, whole blocks
//! per row, its data inside the file.

use anyhow::{bail, ensure, Context, Result};
use kquant::{QuantType, QK_K};

use crate::gguf::{ggml_type_name, Gguf};
use crate::source::SourceType;

/// The lm-head tensor's name.
pub const OUTPUT: &str = "output.weight";
/// The token embedding, which is the lm-head when the embeddings are tied.
pub const TOKEN_EMBD: &str = "token_embd.weight";

/// Largest hidden size this tool handles (a 256-row chunk of Q6_K rows is then 210 MiB).
pub const MAX_HIDDEN: usize = 1 << 20;
/// Largest vocabulary this tool handles (1 GiB of f32 logits).
pub const MAX_VOCAB: usize = 1 << 28;

/// A validated lm-head: `vocab` rows of `hidden` weights.
#[derive(Clone, Debug, PartialEq)]
pub struct LmHead {
    /// Model name: `general.name`, or the file stem.
    pub model: String,
    /// Tensor name.
    pub tensor: String,
    /// The format of the slices (what the shards run).
    pub ty: QuantType,
    /// The format the GGUF stores (`Native(ty)` unless requantized).
    pub source: SourceType,
    /// Bytes of one stored row.
    pub source_row_bytes: usize,
    /// Columns.
    pub hidden: usize,
    /// Rows.
    pub vocab: usize,
    /// Bytes of one slice row (in `ty`).
    pub row_bytes: usize,
    /// Absolute offset of row 0 in the file.
    pub data_offset: u64,
    /// `<arch>.final_logit_softcapping`, if present and not 0.
    pub softcap: Option<f32>,
}

impl LmHead {
    /// Finds and checks the lm-head of `gguf`, to be sliced as stored or, with `requantize`,
    /// converted to that type.
    pub fn find(gguf: &Gguf, requantize: Option<QuantType>) -> Result<LmHead> {
        locate(gguf, requantize).with_context(|| gguf.path.display().to_string())
    }

    /// Bytes of all the slices.
    pub fn total_bytes(&self) -> u64 {
        self.vocab as u64 * self.row_bytes as u64
    }

    /// Whether slicing converts the rows (rather than copying the stored bytes).
    pub fn requantized(&self) -> bool {
        self.source != SourceType::Native(self.ty)
    }
}

fn locate(gguf: &Gguf, requantize: Option<QuantType>) -> Result<LmHead> {
    let Some(t) = gguf.tensor(OUTPUT).or_else(|| gguf.tensor(TOKEN_EMBD)) else {
        let names: Vec<&str> = gguf
            .tensors
            .iter()
            .take(8)
            .map(|t| t.name.as_str())
            .collect();
        bail!(
            "no lm-head tensor: neither {OUTPUT} nor {TOKEN_EMBD} is in the file ({} tensors{}{})",
            gguf.tensors.len(),
            if names.is_empty() { "" } else { ": " },
            names.join(", ")
        );
    };
    let name = &t.name;
    let stored = ggml_type_name(t.ggml_type).unwrap_or("unknown");
    let Some(source) = SourceType::from_ggml_type(t.ggml_type) else {
        bail!(
            "tensor {name} has type {stored} (ggml type {}); supported: q4_k and q6_k as they \
             are, and {} with --requantize q6_k|q4_k",
            t.ggml_type,
            SourceType::ALL
                .iter()
                .filter(|s| !matches!(s, SourceType::Native(_)))
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let ty = match (source, requantize) {
        (_, Some(target)) => target,
        (SourceType::Native(q), None) => q,
        (_, None) => bail!(
            "tensor {name} is stored as {}, which the shards do not run: pass --requantize q6_k \
             ({} bytes per 256 weights) or --requantize q4_k ({}, smaller, less accurate); \
             `plan --requantize …` shows the shards each needs",
            source.name(),
            QuantType::Q6K.block_bytes(),
            QuantType::Q4K.block_bytes()
        ),
    };
    let &[hidden, vocab] = t.dims.as_slice() else {
        bail!(
            "tensor {name} has {} dimensions {:?}, expected 2 [hidden, vocab]",
            t.dims.len(),
            t.dims
        );
    };
    ensure!(
        hidden > 0 && hidden % QK_K as u64 == 0,
        "tensor {name} has {hidden} columns, which is not a positive multiple of {QK_K} \
         (whole {} blocks per row)",
        ty.name()
    );
    ensure!(vocab > 0, "tensor {name} has no rows");
    let hidden = usize::try_from(hidden).context("hidden size too large")?;
    let vocab = usize::try_from(vocab).context("vocabulary too large")?;
    let row_bytes = ty.row_bytes(hidden)?;
    let source_row_bytes = source.row_bytes(hidden)?;
    let start = gguf.data_start.checked_add(t.offset);
    let end =
        start.and_then(|s| s.checked_add((source_row_bytes as u64).checked_mul(vocab as u64)?));
    match (start, end) {
        (Some(start), Some(end)) if end <= gguf.file_len => Ok(LmHead {
            model: model_name(gguf),
            tensor: name.clone(),
            ty,
            source,
            source_row_bytes,
            hidden,
            vocab,
            row_bytes,
            data_offset: start,
            softcap: softcap(gguf)?,
        }),
        _ => bail!(
            "tensor {name}: its data ({vocab} rows × {source_row_bytes} bytes at data offset {}) \
             extends past the end of the file ({} bytes): truncated or corrupt",
            t.offset,
            gguf.file_len
        ),
    }
}

fn model_name(gguf: &Gguf) -> String {
    match gguf.get("general.name").and_then(|v| v.as_str()) {
        Some(name) if !name.trim().is_empty() => name.trim().to_string(),
        _ => gguf
            .path
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned()),
    }
}

fn softcap(gguf: &Gguf) -> Result<Option<f32>> {
    let Some(arch) = gguf.get("general.architecture").and_then(|v| v.as_str()) else {
        return Ok(None);
    };
    let key = format!("{arch}.final_logit_softcapping");
    let Some(value) = gguf.get(&key) else {
        return Ok(None);
    };
    // llama.cpp reads 0 as "no soft cap".
    match value.as_f64().map(|c| c as f32) {
        Some(0.0) => Ok(None),
        Some(c) if c.is_finite() && c > 0.0 => Ok(Some(c)),
        _ => bail!("{key} is {value:?}; expected a positive number (or 0 for none)"),
    }
}

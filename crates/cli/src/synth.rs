//! `cobordism synth`: writes a GGUF v3 file whose lm-head is a seeded random matrix, quantized
//! with kquant's (ggml's reference) quantizers.
//!
//! Row `r`'s weights are `normal() · 8/√hidden` from a SplitMix64 stream of its own (derived from
//! the seed and `r`), so the file is the same whatever the number of threads, and a hidden vector
//! of `normal()` values gives logits with a standard deviation of about 2.7. Rows are generated,
//! quantized and written in chunks: the f32 matrix is never held whole.
//!
//! `--extreme` writes blocks at the quants' and scales' extremes instead
//! ([`kquant::synth::extreme_blocks`], from the same per-row streams): the int8 mode's edge
//! cases, for checking a build or a deployment against native bits.

use std::io::Write;
use std::path::PathBuf;
use std::thread;

use anyhow::{anyhow, ensure, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use kquant::quantize::{quantize_row_q4k, quantize_row_q6k};
use kquant::synth::{extreme_blocks, SplitMix64};
use kquant::{Block, BlockQ4K, BlockQ6K, QuantType, QK_K};

use crate::gguf::{GgufWriter, MetaValue, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, TOKENS_KEY};
use crate::lm_head::{MAX_HIDDEN, MAX_VOCAB, OUTPUT, TOKEN_EMBD};
use crate::{atomic, progress};

/// Rows generated and written per step.
const CHUNK_ROWS: usize = 256;

/// Arguments of `cobordism synth`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Examples:
  cobordism synth --out tiny.gguf --shape tiny --type q6_k
  cobordism synth --out gemma.gguf --shape gemma3-27b --type q6_k --seed 7
  cobordism synth --out custom.gguf --hidden 1024 --vocab 32000 --type q4_k --softcap 30 --tied
  cobordism synth --out edges.gguf --hidden 1280 --vocab 1001 --type q6_k --extreme")]
pub struct Args {
    /// Output GGUF file (overwritten).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// A model's lm-head shape.
    #[arg(long, conflicts_with_all = ["hidden", "vocab"], required_unless_present = "hidden")]
    pub shape: Option<Shape>,
    /// Hidden size (columns), a multiple of 256.
    #[arg(long, value_name = "N", requires = "vocab", value_parser = hidden_arg)]
    pub hidden: Option<usize>,
    /// Vocabulary size (rows).
    #[arg(long, value_name = "N", requires = "hidden", value_parser = vocab_arg)]
    pub vocab: Option<usize>,
    /// Weight format.
    #[arg(long = "type", value_name = "TYPE")]
    pub ty: QuantArg,
    /// PRNG seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Final-logit soft cap to record (`<arch>.final_logit_softcapping`).
    #[arg(long, value_name = "C", allow_negative_numbers = true)]
    pub softcap: Option<f32>,
    /// Tied embeddings: store the matrix as token_embd.weight instead of output.weight.
    #[arg(long)]
    pub tied: bool,
    /// Weights at the extremes instead of quantized random ones: every quant at its maximum
    /// (odd rows: at 0), the sub-block scales at their extremes. Edge cases for checking the
    /// int8 mode's bits, not a model's logits.
    #[arg(long)]
    pub extreme: bool,
}

/// Known lm-head shapes.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Shape {
    /// Gemma 3 27B: hidden 5376, vocab 262144.
    #[value(name = "gemma3-27b")]
    Gemma3_27b,
    /// Qwen2.5 7B: hidden 3584, vocab 152064.
    #[value(name = "qwen2.5-7b")]
    Qwen25_7b,
    /// A small test shape: hidden 512, vocab 4096.
    Tiny,
}

impl Shape {
    /// `(architecture, hidden, vocab)`.
    fn dims(self) -> (&'static str, usize, usize) {
        match self {
            Shape::Gemma3_27b => ("gemma3", 5376, 262_144),
            Shape::Qwen25_7b => ("qwen2", 3584, 152_064),
            Shape::Tiny => ("llama", 512, 4096),
        }
    }
}

/// `--type` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum QuantArg {
    /// ggml Q4_K (4.5 bits per weight).
    #[value(name = "q4_k")]
    Q4K,
    /// ggml Q6_K (6.5625 bits per weight).
    #[value(name = "q6_k")]
    Q6K,
}

impl From<QuantArg> for QuantType {
    fn from(q: QuantArg) -> QuantType {
        match q {
            QuantArg::Q4K => QuantType::Q4K,
            QuantArg::Q6K => QuantType::Q6K,
        }
    }
}

/// Made-up text of token `i` (three special tokens, then syllable words, every other one with a
/// leading space as BPE vocabularies have), so that synthetic models print readable tokens.
pub fn synthetic_token(i: usize) -> String {
    const SPECIAL: [&str; 3] = ["<unk>", "<s>", "</s>"];
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "he", "ji", "ko",
        "la",
    ];
    if let Some(s) = SPECIAL.get(i) {
        return (*s).into();
    }
    let mut word = String::from(if i.is_multiple_of(2) { " " } else { "" });
    let mut n = i;
    loop {
        word.push_str(SYLLABLES[n % 16]);
        n /= 16;
        if n == 0 {
            return word;
        }
    }
}

/// `--hidden`: a positive multiple of 256 up to the manifest's limit; else a usage error.
fn hidden_arg(s: &str) -> Result<usize, String> {
    let h: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("not a whole number: {s:?}"))?;
    if (1..=MAX_HIDDEN).contains(&h) && h.is_multiple_of(QK_K) {
        Ok(h)
    } else {
        Err(format!(
            "must be a positive multiple of {QK_K}, at most {MAX_HIDDEN}, not {h}"
        ))
    }
}

/// `--vocab`: 1 up to the manifest's limit; else a usage error.
fn vocab_arg(s: &str) -> Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("not a whole number: {s:?}"))?;
    if (1..=MAX_VOCAB).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be from 1 to {MAX_VOCAB}, not {v}"))
    }
}

/// Runs `cobordism synth`.
pub fn run(args: &Args) -> Result<()> {
    let (arch, hidden, vocab, label) = match (args.shape, args.hidden, args.vocab) {
        (Some(shape), _, _) => {
            let (arch, h, v) = shape.dims();
            let label = shape.to_possible_value().map(|p| p.get_name().to_string());
            (arch, h, v, label.unwrap_or_default())
        }
        (None, Some(h), Some(v)) => ("llama", h, v, format!("{h}x{v}")),
        _ => return Err(anyhow!("give --shape, or both --hidden and --vocab")),
    };
    if let Some(c) = args.softcap {
        ensure!(c.is_finite() && c > 0.0, "--softcap {c}: must be positive");
    }
    let ty = QuantType::from(args.ty);
    let row_bytes = ty.row_bytes(hidden)?;
    let total = (vocab as u64)
        .checked_mul(row_bytes as u64)
        .context("the tensor is too large")?;

    let mut gguf = GgufWriter::new();
    gguf.kv("general.architecture", MetaValue::Str(arch.into()))
        .kv(
            "general.name",
            MetaValue::Str(format!("synth-{label}-{}", ty.name())),
        )
        .kv(ALIGNMENT_KEY, MetaValue::U32(DEFAULT_ALIGNMENT as u32))
        .kv(
            &format!("{arch}.embedding_length"),
            MetaValue::U32(hidden as u32),
        )
        .kv(&format!("{arch}.vocab_size"), MetaValue::U32(vocab as u32))
        .kv(
            TOKENS_KEY,
            MetaValue::Array(
                (0..vocab)
                    .map(|i| MetaValue::Str(synthetic_token(i)))
                    .collect(),
            ),
        );
    if let Some(c) = args.softcap {
        gguf.kv(
            &format!("{arch}.final_logit_softcapping"),
            MetaValue::F32(c),
        );
    }
    let name = if args.tied { TOKEN_EMBD } else { OUTPUT };
    gguf.tensor(name, &[hidden as u64, vocab as u64], ty.ggml_type(), total);

    let bar = progress::bytes(total, "synth");
    atomic::write_file(&args.out, |w| {
        gguf.write_header(w)?;
        let threads = thread::available_parallelism().map_or(1, |n| n.get());
        let mut chunk = vec![0u8; CHUNK_ROWS * row_bytes];
        for first in (0..vocab).step_by(CHUNK_ROWS) {
            let rows = CHUNK_ROWS.min(vocab - first);
            let buf = &mut chunk[..rows * row_bytes];
            fill_rows(buf, first, ty, hidden, args.seed, args.extreme, threads)?;
            w.write_all(buf)
                .with_context(|| format!("cannot write {}", args.out.display()))?;
            bar.inc(buf.len() as u64);
        }
        let padding = gguf.padding_after(0) as usize;
        w.write_all(&vec![0; padding])
            .with_context(|| format!("cannot write {}", args.out.display()))?;
        Ok(())
    })?;
    bar.finish_and_clear();
    println!(
        "wrote {}: {name} {} [{hidden} hidden × {vocab} vocab], {total} bytes of weights",
        args.out.display(),
        ty.name()
    );
    Ok(())
}

/// Quantizes rows `first..` into `buf` (whole rows), splitting them over `threads` threads; with
/// `extreme`, writes extreme blocks instead.
fn fill_rows(
    buf: &mut [u8],
    first: usize,
    ty: QuantType,
    hidden: usize,
    seed: u64,
    extreme: bool,
    threads: usize,
) -> Result<()> {
    let row_bytes = ty.row_bytes(hidden)?;
    let rows = buf.len() / row_bytes;
    let per_thread = rows.div_ceil(threads.max(1));
    thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks_mut(per_thread * row_bytes)
            .enumerate()
            .map(|(t, part)| {
                s.spawn(move || {
                    let mut weights = vec![0.0f32; hidden];
                    let scale = 8.0 / (hidden as f32).sqrt();
                    for (i, row) in part.chunks_exact_mut(row_bytes).enumerate() {
                        let r = first + t * per_thread + i;
                        let mut rng = row_rng(seed, r);
                        if extreme {
                            extreme_blocks(&mut rng, ty, r % 2 == 1, row)?;
                            continue;
                        }
                        weights.iter_mut().for_each(|w| *w = rng.normal() * scale);
                        quantize_row(ty, &weights, row)?;
                    }
                    Ok::<(), kquant::Error>(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| anyhow!("a quantizer thread panicked"))?
                .map_err(anyhow::Error::from)
        })
    })
}

/// Row `row`'s own stream: a state hashed from the seed and the row.
fn row_rng(seed: u64, row: usize) -> SplitMix64 {
    let seed_hash = SplitMix64::new(seed).next_u64();
    SplitMix64::new(SplitMix64::new(seed_hash ^ row as u64).next_u64())
}

fn quantize_row(ty: QuantType, weights: &[f32], out: &mut [u8]) -> Result<(), kquant::Error> {
    match ty {
        QuantType::Q4K => quantize_row_q4k(weights, BlockQ4K::slice_from_bytes_mut(out)?),
        QuantType::Q6K => quantize_row_q6k(weights, BlockQ6K::slice_from_bytes_mut(out)?),
    }
}

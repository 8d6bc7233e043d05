//! `cobordism slice`: copies each shard's rows of the lm-head out of the GGUF file,
//! checksumming while copying through a bounded buffer, into `shard-NN.<xxh3>.bin`, then writes
//! `manifest.json` last, so a directory with a manifest always has all its slices.
//!
//! Slice keys carry their checksum ([`slice_key`]): a new model version never overwrites an
//! object that a shard may be loading for the old one, so an upload can go on under traffic.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use clap::Args as ClapArgs;
use cobordism_protocol::{slice_key, Checksum, Manifest, ShardEntry, FORMAT, FORMAT_VERSION};
use indicatif::ProgressBar;
use kquant::Layout;

use crate::gguf::{Value, TOKENS_KEY};
use crate::plan::{self, Budget, Plan, ShardRows};
use crate::progress;
use crate::source::{ErrorStats, Requantizer};
use crate::synth::QuantArg;
use crate::tokens::{Vocabulary, TOKENS_FILE};

/// Copy buffer size.
const BUF_BYTES: usize = 8 << 20;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";

/// Arguments of `cobordism slice`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Examples:
  cobordism slice --gguf gemma-3-27b-it-Q6_K.gguf --shards 12 --out slices/gemma3
  cobordism slice --gguf model.gguf --shards 4 --out out --force
  cobordism slice --gguf model-Q6_K.gguf --shards 8 --out out --layout packed6

Writes DIR/shard-00.<checksum>.bin … and DIR/manifest.json (last). Exits with 3, writing nothing, when a
slice does not fit the budget.")]
pub struct Args {
    /// The GGUF model file.
    #[arg(long, value_name = "FILE")]
    pub gguf: PathBuf,
    /// Number of shards (one Worker each).
    #[arg(long, value_name = "N", value_parser = crate::plan::shard_count)]
    pub shards: usize,
    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[command(flatten)]
    pub budget: Budget,
    /// Overwrite a manifest and slices already in DIR.
    #[arg(long)]
    pub force: bool,
    /// Convert an lm-head stored as F32, F16, BF16, Q8_0 or Q5_K (or the other K type) to this
    /// type, and report the error it adds.
    #[arg(long, value_name = "TYPE")]
    pub requantize: Option<QuantArg>,
    /// How to store the blocks: `ggml` (the GGUF's own bytes) or `packed6` (Q6_K only: the same
    /// bytes per block, rearranged for the kernels — in workerd the exact mode takes ~0.75 of
    /// the time and int8 ~0.9; the logits are the same bits). The manifest records it; shards
    /// and `logits --local` read either.
    #[arg(long, value_name = "LAYOUT", default_value = "ggml", value_parser = parse_layout)]
    pub layout: Layout,
}

fn parse_layout(name: &str) -> Result<Layout, String> {
    Layout::from_name(name).ok_or_else(|| format!("{name:?} is not a layout (ggml, packed6)"))
}

/// Runs `cobordism slice`.
pub fn run(args: &Args) -> Result<()> {
    let (plan, gguf) = plan::load(&args.gguf, args.shards, args.budget, args.requantize)?;
    args.layout.check(plan.head.ty)?;
    plan.check_fits()?;
    prepare_dir(&args.out, args.force)?;

    let bar = progress::bytes(plan.head.total_bytes(), "slicing");
    let mut src =
        File::open(&args.gguf).with_context(|| format!("cannot open {}", args.gguf.display()))?;
    let mut buf = vec![0u8; BUF_BYTES.max(plan.head.source_row_bytes)];
    let (shards, errors): (Vec<ShardEntry>, Vec<Option<ErrorStats>>) = plan
        .shards
        .iter()
        .map(|s| {
            let to = (args.out.as_path(), args.layout);
            copy_shard(&mut src, &args.gguf, &plan, s, to, &mut buf, &bar)
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    bar.finish_and_clear();

    let vocabulary = match gguf.get(TOKENS_KEY) {
        Some(Value::Strings(tokens)) => Some(Vocabulary::new(tokens)?),
        _ => None,
    };
    if let Some(v) = &vocabulary {
        v.write(&args.out)?;
    }
    let manifest = manifest(&plan, args.layout, shards);
    manifest.validate()?;
    let path = args.out.join(MANIFEST);
    fs::write(&path, manifest.to_json() + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("shard        rows           count   bytes        checksum");
    for s in &manifest.shards {
        println!(
            "{:>5}  {:>18}  {:>10}  {:>11}  {}",
            s.index,
            format!("{}..{}", s.row_start, s.row_start + s.row_count),
            s.row_count,
            s.bytes,
            s.checksum
        );
    }
    if plan.head.requantized() {
        println!(
            "\nrequantized from {} to {}: the error it added",
            plan.head.source.name(),
            plan.head.ty.name()
        );
        let errors: Vec<ErrorStats> = errors.into_iter().flatten().collect();
        for (i, e) in errors.iter().enumerate() {
            println!("  shard {i:>3}: {e}");
        }
        let total = errors
            .iter()
            .fold(ErrorStats::default(), |a, e| a.merge(*e));
        println!("  overall:   {total}\n");
    }
    if let Some(v) = &vocabulary {
        println!("wrote the text of {} tokens to {TOKENS_FILE}", v.len());
    }
    println!(
        "wrote {} slices and {} (version {})",
        manifest.shard_count,
        path.display(),
        manifest.version
    );
    Ok(())
}

/// Whether `name` is a file `slice` writes (a slice, finished or not, or the tokens' text).
fn is_slice_file(name: &str) -> bool {
    name == TOKENS_FILE
        || name.starts_with("shard-") && (name.ends_with(".bin") || name.ends_with(".partial"))
}

/// Creates `dir`; refuses to overwrite an earlier run's files unless `force`. With `force` the old
/// manifest is removed first, so no manifest ever describes half-rewritten slices, then the old
/// slices.
fn prepare_dir(dir: &Path, force: bool) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let manifest = dir.join(MANIFEST);
    let mut existing: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(is_slice_file))
        .map(|e| e.path())
        .collect();
    existing.sort();
    if manifest.exists() {
        existing.insert(0, manifest.clone());
    }
    if let Some(p) = existing.first() {
        ensure!(
            force,
            "{} already exists; pass --force to overwrite the slices in {}",
            p.display(),
            dir.display()
        );
        for p in &existing {
            fs::remove_file(p).with_context(|| format!("cannot remove {}", p.display()))?;
        }
    }
    Ok(())
}

fn copy_shard(
    src: &mut File,
    src_path: &Path,
    plan: &Plan,
    s: &ShardRows,
    (dir, layout): (&Path, Layout),
    buf: &mut [u8],
    bar: &ProgressBar,
) -> Result<(ShardEntry, Option<ErrorStats>)> {
    let head = &plan.head;
    let start = head.data_offset + s.row_start as u64 * head.source_row_bytes as u64;
    src.seek(SeekFrom::Start(start))?;
    let path = dir.join(format!("shard-{:02}.partial", s.index));
    let mut out = BufWriter::new(
        File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    let mut sum = Checksum::new();
    let mut requantizer = head
        .requantized()
        .then(|| Requantizer::new(head.source, head.ty, head.hidden));
    let (mut converted, mut repacked) = (Vec::new(), Vec::new());
    // Whole stored rows per read.
    let step = (buf.len() / head.source_row_bytes).max(1) * head.source_row_bytes;
    let mut left = s.row_count as u64 * head.source_row_bytes as u64;
    while left > 0 {
        let n = step.min(usize::try_from(left).unwrap_or(usize::MAX));
        let at = start + (s.row_count as u64 * head.source_row_bytes as u64 - left);
        let chunk = &mut buf[..n];
        src.read_exact(chunk).with_context(|| {
            format!(
                "{}: reading shard {} at byte {at}: the file ended early",
                src_path.display(),
                s.index
            )
        })?;
        let bytes: &[u8] = match &mut requantizer {
            None => chunk,
            Some(r) => {
                converted.clear();
                for (i, row) in chunk.chunks_exact(head.source_row_bytes).enumerate() {
                    r.row(row, &mut converted).with_context(|| {
                        let first = (at - head.data_offset) / head.source_row_bytes as u64;
                        format!("requantizing row {}", first + i as u64)
                    })?;
                }
                &converted
            }
        };
        let bytes: &[u8] = if layout == Layout::Ggml {
            bytes
        } else {
            repacked.clear();
            repacked.extend_from_slice(bytes);
            kquant::repack(head.ty, Layout::Ggml, layout, &mut repacked)?;
            &repacked
        };
        sum.update(bytes);
        out.write_all(bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        left -= n as u64;
        bar.inc(bytes.len() as u64);
    }
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let checksum = sum.finish();
    let key = slice_key(s.index, &checksum);
    let done = dir.join(&key);
    fs::rename(&path, &done).with_context(|| format!("cannot rename to {}", done.display()))?;
    let entry = ShardEntry {
        index: s.index,
        row_start: s.row_start,
        row_count: s.row_count,
        key,
        bytes: s.bytes,
        checksum,
    };
    Ok((entry, requantizer.map(|r| r.error)))
}

fn manifest(plan: &Plan, layout: Layout, shards: Vec<ShardEntry>) -> Manifest {
    let h = &plan.head;
    Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        version: String::new(),
        model: h.model.clone(),
        tensor: h.tensor.clone(),
        dtype: h.ty.name().into(),
        hidden: h.hidden,
        vocab: h.vocab,
        shard_count: shards.len(),
        softcap: h.softcap,
        source_dtype: h.requantized().then(|| h.source.name().into()),
        layout: (layout != Layout::Ggml).then(|| layout.name().into()),
        shards,
    }
    .with_content_version()
}

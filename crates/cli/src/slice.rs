//! `cobordism slice`: copies each shard's rows of the lm-head out of the GGUF file,
//! checksumming while copying through a bounded buffer, into `shard-NN.<xxh3>.bin`, then writes
//! `manifest.json` last, so a directory with a manifest always has all its slices.
//!
//! Everything is first written under a temporary name (`shard-NN.partial`, `*.partial`); only
//! when every slice is complete are an earlier run's files removed (with `--force`) and the new
//! ones renamed into place, the manifest last. A command that fails — a NaN weight, a GGUF that
//! ends early, a full disk — removes what it wrote and leaves the folder as it was (a folder it
//! created is removed again), so running it again is never blocked by its leftovers.
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

Writes DIR/shard-00.<checksum>.bin … and DIR/manifest.json (last). Exits with 3, writing
nothing, when a slice does not fit the budget; a failure leaves DIR as it was.")]
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
    Layout::from_name(name).ok_or_else(|| format!("{name:?} is not a layout ({})", Layout::NAMES))
}

/// Runs `cobordism slice`.
pub fn run(args: &Args) -> Result<()> {
    let (plan, gguf) = plan::load(&args.gguf, args.shards, args.budget, args.requantize)?;
    args.layout.check(plan.head.ty)?;
    args.layout.check_cols(plan.head.hidden)?;
    plan.check_fits()?;
    let out = Output::prepare(&args.out, args.force)?;
    let result = write_slices(args, &plan, &gguf, &out);
    if result.is_err() {
        out.discard();
    }
    let (manifest, path, errors, vocabulary) = result?;
    report(&plan, &manifest, &path, errors, vocabulary.as_ref());
    Ok(())
}

/// The slices, the tokens' text and the manifest of one run, or nothing if any part fails.
type Written = (
    Manifest,
    PathBuf,
    Vec<Option<ErrorStats>>,
    Option<Vocabulary>,
);

/// Writes every slice under a temporary name, then commits them all with the manifest.
fn write_slices(
    args: &Args,
    plan: &Plan,
    gguf: &crate::gguf::Gguf,
    out: &Output,
) -> Result<Written> {
    let bar = progress::bytes(plan.head.total_bytes(), "slicing");
    let mut src =
        File::open(&args.gguf).with_context(|| format!("cannot open {}", args.gguf.display()))?;
    let mut buf = vec![0u8; BUF_BYTES.max(plan.head.source_row_bytes)];
    let (shards, errors): (Vec<ShardEntry>, Vec<Option<ErrorStats>>) = plan
        .shards
        .iter()
        .map(|s| {
            let to = (out, args.layout);
            copy_shard(&mut src, &args.gguf, plan, s, to, &mut buf, &bar)
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    bar.finish_and_clear();

    let vocabulary = match gguf.get(TOKENS_KEY) {
        Some(Value::Strings(tokens)) => Some(Vocabulary::new(tokens)?),
        _ => None,
    };
    let manifest = manifest(plan, args.layout, shards);
    manifest.validate()?;
    let path = out.commit(&manifest, vocabulary.as_ref())?;
    Ok((manifest, path, errors, vocabulary))
}

/// Prints what was written.
fn report(
    plan: &Plan,
    manifest: &Manifest,
    path: &Path,
    errors: Vec<Option<ErrorStats>>,
    vocabulary: Option<&Vocabulary>,
) {
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
    if let Some(v) = vocabulary {
        println!("wrote the text of {} tokens to {TOKENS_FILE}", v.len());
    }
    println!(
        "wrote {} slices and {} (version {})",
        manifest.shard_count,
        path.display(),
        manifest.version
    );
}

/// Whether `name` is a file `slice` writes (a slice, finished or not, the tokens' text, or a
/// temporary manifest or text that a killed run left).
fn is_slice_file(name: &str) -> bool {
    let base = name.strip_suffix(".partial").unwrap_or(name);
    base == TOKENS_FILE
        || base == MANIFEST && base != name
        || name.starts_with("shard-") && (name.ends_with(".bin") || name.ends_with(".partial"))
}

/// `x.partial` → `x`.
fn done_name(partial: &Path) -> PathBuf {
    let name = partial
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    partial.with_file_name(name.strip_suffix(".partial").unwrap_or(name))
}

/// The output folder of one run: what was there before, and what this run has written.
struct Output {
    dir: PathBuf,
    /// Whether this run created the folder (removed again if the run fails).
    created: bool,
    /// An earlier run's files, removed only when this run commits (`--force`).
    earlier: Vec<PathBuf>,
    /// Files written under a temporary name so far.
    partial: std::cell::RefCell<Vec<PathBuf>>,
}

impl Output {
    /// Creates `dir` if needed; refuses an earlier run's files unless `force` (they stay until
    /// the new slices are complete).
    fn prepare(dir: &Path, force: bool) -> Result<Output> {
        let created = !dir.exists();
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut earlier: Vec<PathBuf> = fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(is_slice_file))
            .map(|e| e.path())
            .collect();
        earlier.sort();
        let manifest = dir.join(MANIFEST);
        if manifest.exists() {
            earlier.insert(0, manifest);
        }
        if let Some(p) = earlier.first() {
            ensure!(
                force,
                "{} already exists; pass --force to overwrite the slices in {}",
                p.display(),
                dir.display()
            );
        }
        Ok(Output {
            dir: dir.to_path_buf(),
            created,
            earlier,
            partial: Default::default(),
        })
    }

    /// A new file `name.partial`, to be renamed to `name` at the commit.
    fn create(&self, name: &str) -> Result<(File, PathBuf)> {
        let path = self.dir.join(format!("{name}.partial"));
        let file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        self.partial.borrow_mut().push(path.clone());
        Ok((file, path))
    }

    /// Removes the earlier run's files (the manifest first, so no manifest ever describes
    /// half-replaced slices), renames the new ones into place and writes the manifest last;
    /// returns its path.
    fn commit(&self, manifest: &Manifest, vocabulary: Option<&Vocabulary>) -> Result<PathBuf> {
        if let Some(v) = vocabulary {
            let (mut file, path) = self.create(TOKENS_FILE)?;
            file.write_all(&v.encode())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let (mut file, path) = self.create(MANIFEST)?;
        file.write_all((manifest.to_json() + "\n").as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write {}", path.display()))?;
        for p in &self.earlier {
            fs::remove_file(p).with_context(|| format!("cannot remove {}", p.display()))?;
        }
        let mut partial = self.partial.borrow_mut();
        // The manifest was created last: renamed last.
        for p in partial.iter() {
            let done = done_name(p);
            fs::rename(p, &done).with_context(|| format!("cannot rename to {}", done.display()))?;
        }
        partial.clear();
        Ok(self.dir.join(MANIFEST))
    }

    /// Renames the temporary file `path` to `name.partial` (a slice, once its checksum, and so
    /// its key, is known).
    fn rename(&self, path: &Path, name: &str) -> Result<()> {
        let to = self.dir.join(format!("{name}.partial"));
        fs::rename(path, &to).with_context(|| format!("cannot rename to {}", to.display()))?;
        for p in self.partial.borrow_mut().iter_mut().filter(|p| *p == path) {
            p.clone_from(&to);
        }
        Ok(())
    }

    /// Removes what this run wrote (and the folder, if this run created it and it is empty).
    fn discard(&self) {
        for p in self.partial.borrow().iter() {
            let _ = fs::remove_file(p);
        }
        if self.created {
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

fn copy_shard(
    src: &mut File,
    src_path: &Path,
    plan: &Plan,
    s: &ShardRows,
    (out, layout): (&Output, Layout),
    buf: &mut [u8],
    bar: &ProgressBar,
) -> Result<(ShardEntry, Option<ErrorStats>)> {
    let head = &plan.head;
    let start = head.data_offset + s.row_start as u64 * head.source_row_bytes as u64;
    src.seek(SeekFrom::Start(start))?;
    let (file, path) = out.create(&format!("shard-{:02}", s.index))?;
    let mut writer = BufWriter::new(file);
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
        writer
            .write_all(bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        left -= n as u64;
        bar.inc(bytes.len() as u64);
    }
    writer
        .into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let checksum = sum.finish();
    let key = slice_key(s.index, &checksum);
    out.rename(&path, &key)?;
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
        dtype: h.ty,
        hidden: h.hidden,
        vocab: h.vocab,
        shard_count: shards.len(),
        softcap: h.softcap,
        source_dtype: h.requantized().then(|| h.source.name().into()),
        layout,
        shards,
    }
    .with_content_version()
}

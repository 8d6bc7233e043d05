//! `cobordism plan`: how the lm-head splits into per-shard slices, and whether each slice fits
//! the per-Worker memory budget.
//!
//! Rows are split as evenly as possible: the first `vocab % shards` shards get one extra row.
//!
//! "Fits" means what the shard itself checks before it loads a slice
//! ([`cobordism_protocol::MemoryNeed`]): the slice, the kernels' scratch, one request computing and
//! at least [`MIN_BODIES_IN_FLIGHT`] request bodies in flight within the budget (default 100 MiB,
//! leaving ~28 MB of a Worker's 128 MB for the runtime and the JavaScript heap).

use std::path::PathBuf;

use anyhow::{ensure, Result};
use clap::Args as ClapArgs;
use cobordism_protocol::{
    max_rows, mib_to_bytes, MemoryNeed, DEFAULT_BUDGET_MIB, MAX_SHARDS, MIN_BODIES_IN_FLIGHT,
};
use kquant::QuantType;

use crate::gguf::Gguf;
use crate::lm_head::LmHead;
use crate::synth::QuantArg;
use crate::{ExitError, EXIT_DOES_NOT_FIT};

const MIB: f64 = (1u64 << 20) as f64;

/// Arguments of `cobordism plan`.
#[derive(ClapArgs, Debug)]
#[command(after_long_help = "\
Examples:
  cobordism plan --gguf gemma-3-27b-it-Q6_K.gguf --shards 12
  cobordism plan --gguf model.gguf --shards 8 --budget-mib 64

Exits with 3 when a slice does not fit, naming the smallest shard count that does.")]
pub struct Args {
    /// The GGUF model file.
    #[arg(long, value_name = "FILE")]
    pub gguf: PathBuf,
    /// Number of shards (one Worker each).
    #[arg(long, value_name = "N", value_parser = shard_count)]
    pub shards: usize,
    #[command(flatten)]
    pub budget: Budget,
    /// Convert an lm-head stored as F32, F16, BF16, Q8_0 or Q5_K (or the other K type) to this
    /// type: dequantized as ggml does, quantized with ggml's reference quantizer.
    #[arg(long, value_name = "TYPE")]
    pub requantize: Option<QuantArg>,
}

/// The per-slice memory budget option, shared with `slice`.
#[derive(ClapArgs, Debug, Clone, Copy)]
pub struct Budget {
    /// Most MiB of wasm memory one shard may use for its slice, scratch, the request computing
    /// and the bodies in flight (the shard's MEMORY_BUDGET_MIB). The default, 100, leaves ~28 MB
    /// of a Worker's 128 MB for the runtime and the JS heap.
    #[arg(long = "budget-mib", value_name = "MIB", default_value_t = DEFAULT_BUDGET_MIB,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub mib: u64,
}

impl Budget {
    fn bytes(self) -> u64 {
        mib_to_bytes(self.mib).unwrap_or(u64::MAX)
    }

    /// What is wrong with a budget no Worker has: 128 MB hold the JavaScript heap and the wasm
    /// memory together.
    pub fn beyond_a_worker(self) -> Option<String> {
        (self.bytes() > WORKER_MEMORY_BYTES).then(|| {
            format!(
                "warning: --budget-mib {} is more than a Worker's 128 MB of memory (JavaScript \
                 heap and wasm together): slices that need it do not load on Cloudflare; keep it \
                 at about {DEFAULT_BUDGET_MIB}",
                self.mib
            )
        })
    }
}

/// A Worker isolate's memory, JavaScript heap and wasm memory together.
const WORKER_MEMORY_BYTES: u64 = 128_000_000;

/// One shard's row range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardRows {
    /// Shard index.
    pub index: usize,
    /// First row.
    pub row_start: usize,
    /// Number of rows.
    pub row_count: usize,
    /// Bytes of the slice.
    pub bytes: u64,
}

/// The lm-head and its split.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The tensor being split.
    pub head: LmHead,
    /// One entry per shard, in order.
    pub shards: Vec<ShardRows>,
    /// Budget in MiB.
    pub budget: Budget,
}

impl Plan {
    /// Splits `head` into `shards` slices.
    pub fn new(head: LmHead, shards: usize, budget: Budget) -> Result<Plan> {
        let most = head.vocab.min(MAX_SHARDS);
        ensure!(
            (1..=most).contains(&shards),
            "--shards {shards}: expected 1 to {most} (at most one shard per row and {MAX_SHARDS} \
             shards in a manifest)"
        );
        let (base, extra) = (head.vocab / shards, head.vocab % shards);
        let mut row_start = 0;
        let shards = (0..shards)
            .map(|index| {
                let row_count = base + usize::from(index < extra);
                let s = ShardRows {
                    index,
                    row_start,
                    row_count,
                    bytes: row_count as u64 * head.row_bytes as u64,
                };
                row_start += row_count;
                s
            })
            .collect();
        Ok(Plan {
            head,
            shards,
            budget,
        })
    }

    /// Prints the table of shards.
    pub fn print(&self) {
        let h = &self.head;
        println!("model   {}", h.model);
        println!(
            "tensor  {} {} [{} hidden × {} vocab], {} bytes per row, {:.1} MiB",
            h.tensor,
            h.ty.name(),
            h.hidden,
            h.vocab,
            h.row_bytes,
            h.total_bytes() as f64 / MIB
        );
        if h.requantized() {
            println!(
                "stored  {} ({} bytes per row), requantized to {} when sliced",
                h.source.name(),
                h.source_row_bytes,
                h.ty.name()
            );
        }
        if let Some(c) = h.softcap {
            println!("softcap {c}");
        }
        println!(
            "budget  {} MiB of wasm memory per shard (slice, scratch, one request computing, \
             at least {MIN_BODIES_IN_FLIGHT} request bodies)\n",
            self.budget.mib
        );
        if let Some(warning) = self.budget.beyond_a_worker() {
            println!("{warning}\n");
        }
        println!("shard        rows           count  slice MiB   need MiB  bodies  fits");
        for s in &self.shards {
            let need = self.need(s);
            println!(
                "{:>5}  {:>18}  {:>10}  {:>9.2}  {:>9.2}  {:>6}  {}",
                s.index,
                format!("{}..{}", s.row_start, s.row_start + s.row_count),
                s.row_count,
                s.bytes as f64 / MIB,
                need.least_budget() as f64 / MIB,
                need.bodies_in_flight(self.budget.bytes()),
                if self.fits(s) { "yes" } else { "NO" }
            );
        }
    }

    fn need(&self, s: &ShardRows) -> MemoryNeed {
        MemoryNeed::of(self.head.ty, self.head.hidden, s.row_count)
    }

    fn fits(&self, s: &ShardRows) -> bool {
        self.need(s).fits(self.budget.bytes())
    }

    /// Fails with exit code 3 if any slice is over budget, naming the smallest count that fits.
    pub fn check_fits(&self) -> Result<()> {
        let over = self.shards.iter().filter(|s| !self.fits(s)).count();
        if over == 0 {
            return Ok(());
        }
        let largest = self
            .shards
            .iter()
            .map(|s| self.need(s).least_budget())
            .max()
            .unwrap_or(0);
        let advice = match smallest_fitting(&self.head, self.budget) {
            Some(n) if n <= MAX_SHARDS.min(self.head.vocab) => {
                format!("the smallest shard count that fits is {n} (--shards {n})")
            }
            Some(n) => format!(
                "it would take {n} shards, more than the {MAX_SHARDS} a manifest allows; \
                 raise --budget-mib"
            ),
            None => format!(
                "a single row of {} bytes with its buffers needs more than the budget: no \
                 shard count fits",
                self.head.row_bytes
            ),
        };
        Err(ExitError {
            code: EXIT_DOES_NOT_FIT,
            message: format!(
                "{over} of {} shard slices do not fit in {} MiB (the largest needs {:.2} MiB); \
                 {advice}",
                self.shards.len(),
                self.budget.mib,
                largest as f64 / MIB
            ),
        }
        .into())
    }
}

/// `--shards`: 1 to `MAX_SHARDS` (anything else is a usage error, exit 2).
pub fn shard_count(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        _ => Err(format!("expected an integer from 1 to {MAX_SHARDS}")),
    }
}

/// The fewest shards whose largest slice fits `budget`, `None` if not even one row fits.
fn smallest_fitting(head: &LmHead, budget: Budget) -> Option<usize> {
    let rows_per_shard = max_rows(head.ty, head.hidden, budget.bytes());
    (rows_per_shard > 0).then(|| head.vocab.div_ceil(rows_per_shard))
}

/// Opens `gguf`, finds its lm-head and splits it.
pub fn load(
    gguf: &std::path::Path,
    shards: usize,
    budget: Budget,
    requantize: Option<QuantArg>,
) -> Result<(Plan, Gguf)> {
    let file = Gguf::open(gguf)?;
    let head = match LmHead::find(&file, requantize.map(QuantType::from)) {
        Err(e) if requantize.is_none() => return Err(with_choices(e, &file, budget)),
        head => head?,
    };
    Ok((Plan::new(head, shards, budget)?, file))
}

/// For an lm-head stored in a type that needs `--requantize`: what each target would take.
fn with_choices(e: anyhow::Error, file: &Gguf, budget: Budget) -> anyhow::Error {
    let choices: Vec<String> = [QuantType::Q6K, QuantType::Q4K]
        .into_iter()
        .filter_map(|ty| {
            let head = LmHead::find(file, Some(ty)).ok()?;
            let shards = smallest_fitting(&head, budget).map_or_else(
                || "no shard count".into(),
                |n| format!("at least {n} shards"),
            );
            Some(format!(
                "--requantize {}: {:.1} MiB of slices, {shards} at {} MiB",
                ty.name(),
                head.total_bytes() as f64 / MIB,
                budget.mib
            ))
        })
        .collect();
    if choices.is_empty() {
        e
    } else {
        anyhow::anyhow!("{e:#}\n  {}", choices.join("\n  "))
    }
}

/// Runs `cobordism plan`.
pub fn run(args: &Args) -> Result<()> {
    let (plan, _) = load(&args.gguf, args.shards, args.budget, args.requantize)?;
    plan.print();
    plan.check_fits()?;
    println!("\nall {} shard slices fit", plan.shards.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceType;

    fn head(vocab: usize) -> LmHead {
        LmHead {
            model: "m".into(),
            tensor: "output.weight".into(),
            ty: QuantType::Q6K,
            source: SourceType::Native(QuantType::Q6K),
            source_row_bytes: 210,
            hidden: 256,
            vocab,
            row_bytes: 210,
            data_offset: 0,
            softcap: None,
        }
    }

    #[test]
    fn splits_evenly_with_extra_rows_first() {
        let plan = Plan::new(head(10), 3, Budget { mib: 1 }).unwrap();
        let counts: Vec<_> = plan
            .shards
            .iter()
            .map(|s| (s.row_start, s.row_count))
            .collect();
        assert_eq!(counts, vec![(0, 4), (4, 3), (7, 3)]);
        assert!(Plan::new(head(10), 0, Budget { mib: 1 }).is_err());
        assert!(Plan::new(head(10), 11, Budget { mib: 1 }).is_err());
    }

    #[test]
    fn smallest_fitting_count_really_fits() {
        for vocab in [1, 7, 4993, 5000, 5001, 262_144] {
            let h = head(vocab);
            let n = smallest_fitting(&h, Budget { mib: 1 }).unwrap();
            let fits = |n| {
                Plan::new(h.clone(), n, Budget { mib: 1 })
                    .unwrap()
                    .check_fits()
                    .is_ok()
            };
            assert!(fits(n), "vocab {vocab}: {n} shards should fit");
            assert!(n == 1 || !fits(n - 1), "vocab {vocab}: {} would fit", n - 1);
        }
        let mut wide = head(4);
        wide.hidden = 65536;
        wide.row_bytes = 65536 / 256 * 210;
        assert_eq!(smallest_fitting(&wide, Budget { mib: 1 }), None);
    }
}

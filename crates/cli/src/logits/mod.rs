//! `cobordism logits`: the full-vocabulary logits of one hidden vector, from the shard Workers
//! (`--endpoint`, `--endpoints-from`) or computed locally from the slices (`--local`), with the
//! top-k table, per-shard timings, an optional bit-for-bit comparison of the two (`--verify`)
//! and an optional raw dump (`--out`).

mod local;
mod remote;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::{ArgGroup, Args as ClapArgs};
use cobordism_protocol::{decode_hidden, encode_f32, Manifest, Precision, TopK};
use kquant::synth::SplitMix64;

use remote::{Options, ShardTiming};

use crate::slices;
use crate::{ExitError, EXIT_VERIFY_FAILED};

/// Arguments of `cobordism logits`.
#[derive(ClapArgs, Debug)]
#[command(
    group(ArgGroup::new("source").required(true).args(["endpoint", "endpoints_from", "local"])),
    group(ArgGroup::new("input").required(true).args(["hidden", "seed"])),
    after_long_help = "\
Shard i is served by the i-th endpoint; the hidden vector is POSTed to
<endpoint>/cobordism-lm-head of all of them at once.

Examples:
  cobordism logits --manifest slices/tiny/manifest.json --local --seed 1
  cobordism logits --manifest slices/tiny/manifest.json --seed 1 --verify \\
      --endpoint http://127.0.0.1:8787 --endpoint http://127.0.0.1:8788
  cobordism logits --manifest m/manifest.json --endpoints-from endpoints.txt --hidden h.f32 \\
      --top-k 20 --out logits.f32   # with COBORDISM_TOKEN set

Exits with 4 when --verify finds a logit that differs.")]
pub struct Args {
    /// The manifest.json written by `slice` (the slices are read next to it with --local/--verify).
    #[arg(long, value_name = "FILE")]
    pub manifest: PathBuf,
    /// Base URL of a shard Worker; repeat once per shard, in shard order.
    #[arg(long, value_name = "URL")]
    pub endpoint: Vec<String>,
    /// File with one endpoint URL per line, in shard order (blank lines and # comments skipped).
    #[arg(long, value_name = "FILE")]
    pub endpoints_from: Option<PathBuf>,
    /// Compute locally from the slice files instead of asking the Workers.
    #[arg(long)]
    pub local: bool,
    /// The hidden vector: raw little-endian f32 × hidden.
    #[arg(long, value_name = "FILE")]
    pub hidden: Option<PathBuf>,
    /// Make the hidden vector from this seed (SplitMix64 normal()).
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Rows of the top-k table.
    #[arg(long, value_name = "K", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub top_k: u64,
    /// Write all logits to FILE as little-endian f32.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Bearer token for the Workers (or set COBORDISM_TOKEN, which keeps it out of `ps`).
    #[arg(
        long,
        value_name = "T",
        env = "COBORDISM_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Also compute locally and compare bit for bit (exit code 4 on a difference).
    #[arg(long, conflicts_with = "local")]
    pub verify: bool,
    /// Use kquant's int8 fast mode (8-bit activations, ~4e-3 of max |y| error; still the same
    /// bits locally and on the shards).
    #[arg(long)]
    pub int8: bool,
    /// Timeout of one request.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub timeout_secs: u64,
    /// Retries of a request that failed to connect, timed out or got a 429/5xx.
    #[arg(long, value_name = "R", default_value_t = 5)]
    pub retries: u32,
}

/// Runs `cobordism logits`.
pub fn run(args: &Args) -> Result<()> {
    let manifest = slices::read_manifest(&args.manifest)?;
    let dir = args.manifest.parent().unwrap_or(Path::new("."));
    let hidden = match (&args.hidden, args.seed) {
        (Some(path), _) => read_hidden(path, manifest.hidden)?,
        (None, Some(seed)) => seeded_hidden(seed, manifest.hidden),
        (None, None) => bail!("give --hidden FILE or --seed S"),
    };

    let precision = if args.int8 {
        Precision::Int8
    } else {
        Precision::Exact
    };
    let (logits, timings) = if args.local {
        (local::compute(&manifest, dir, &hidden, precision)?, None)
    } else {
        let endpoints = endpoints(args)?;
        let opts = Options {
            token: args.token.clone(),
            timeout: Duration::from_secs(args.timeout_secs.max(1)),
            retries: args.retries,
            precision,
        };
        let (logits, timings) = remote::fetch(&manifest, &endpoints, &hidden, &opts)?;
        (logits, Some(timings))
    };

    print_top_k(&manifest, &logits, args.top_k as usize, args.local);
    if let Some(t) = &timings {
        print_timings(t);
    }
    if let Some(path) = &args.out {
        fs::write(path, encode_f32(&logits))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("\nwrote {} logits to {}", logits.len(), path.display());
    }
    if args.verify {
        let local = local::compute(&manifest, dir, &hidden, precision)?;
        verify(&logits, &local)?;
        println!("\nverify: {} logits identical", logits.len());
    }
    Ok(())
}

fn endpoints(args: &Args) -> Result<Vec<String>> {
    let urls = match &args.endpoints_from {
        None => args.endpoint.clone(),
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read the endpoints file {}", path.display()))?;
            let urls: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from)
                .collect();
            ensure!(!urls.is_empty(), "{}: no endpoint URLs", path.display());
            urls
        }
    };
    for url in &urls {
        ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "endpoint {url:?}: expected an http:// or https:// URL"
        );
    }
    Ok(urls)
}

fn read_hidden(path: &Path, hidden: usize) -> Result<Vec<f32>> {
    let len = fs::metadata(path)
        .with_context(|| format!("cannot read the hidden vector {}", path.display()))?
        .len();
    ensure!(
        len == 4 * hidden as u64,
        "{}: {len} bytes; expected {} (hidden = {hidden} little-endian f32)",
        path.display(),
        4 * hidden
    );
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (values, _) = decode_hidden(&bytes, hidden).with_context(|| path.display().to_string())?;
    Ok(values)
}

/// `hidden` values of `normal()` from a SplitMix64 seeded with `seed`.
pub fn seeded_hidden(seed: u64, hidden: usize) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..hidden).map(|_| rng.normal()).collect()
}

/// `ln Σ exp(z)` over all logits, in f64 around the maximum.
fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&z| f64::from(z - max).exp()).sum();
    f64::from(max) + sum.ln()
}

fn print_top_k(manifest: &Manifest, logits: &[f32], k: usize, local: bool) {
    let top = TopK::compute(logits, 0, k);
    let lse = log_sum_exp(logits);
    println!(
        "{} {} [{} × {}], {} shards, {}{}",
        manifest.model,
        manifest.dtype,
        manifest.hidden,
        manifest.vocab,
        manifest.shard_count,
        if local {
            "computed locally"
        } else {
            "from the shards"
        },
        manifest
            .softcap
            .map_or(String::new(), |c| format!(", softcap {c}"))
    );
    println!("\n rank       token          logit   probability");
    for (rank, (token, z)) in top.entries.iter().enumerate() {
        println!(
            "{:>5}  {:>10}  {:>13.6}   {:>11.9}",
            rank + 1,
            token,
            z,
            (f64::from(*z) - lse).exp()
        );
    }
}

fn print_timings(timings: &[ShardTiming]) {
    println!("\nshard        rows    HTTP ms  compute ms  cache  attempts");
    for t in timings {
        println!(
            "{:>5}  {:>10}  {:>9.1}  {:>10}  {:>5}  {:>8}",
            t.index,
            t.rows,
            t.http.as_secs_f64() * 1e3,
            t.compute_ms.as_deref().unwrap_or("-"),
            t.cache.as_deref().unwrap_or("-"),
            t.attempts
        );
    }
}

/// Bit-for-bit equality, counting any NaN equal to any NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn verify(remote: &[f32], local: &[f32]) -> Result<()> {
    let differ = remote
        .iter()
        .zip(local)
        .filter(|(a, b)| !same(**a, **b))
        .count();
    let Some(first) = remote.iter().zip(local).position(|(a, b)| !same(*a, *b)) else {
        return Ok(());
    };
    let (r, l) = (remote[first], local[first]);
    Err(ExitError {
        code: EXIT_VERIFY_FAILED,
        message: format!(
            "verify: {differ} of {} logits differ; the first is token {first}: remote {r:e} \
             ({:#010x}), local {l:e} ({:#010x})",
            remote.len(),
            r.to_bits(),
            l.to_bits()
        ),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_counts_nans_equal_and_names_the_first_difference() {
        assert!(verify(&[1.0, f32::NAN], &[1.0, -f32::NAN]).is_ok());
        let err = verify(&[1.0, 2.0, 3.0], &[1.0, 2.5, 3.5]).unwrap_err();
        assert!(err.to_string().contains("2 of 3 logits differ"), "{err}");
        assert!(err.to_string().contains("token 1"), "{err}");
        assert!(verify(&[0.0], &[-0.0]).is_err());
    }

    #[test]
    fn probabilities_sum_to_one() {
        let logits = [1000.0f32, 999.0, -5.0];
        let lse = log_sum_exp(&logits);
        let sum: f64 = logits.iter().map(|&z| (f64::from(z) - lse).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }
}

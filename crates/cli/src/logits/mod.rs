//! `cobordism logits`: the logits of one hidden vector, from the shard Workers (`--endpoint`,
//! `--endpoints-from`) or computed locally from the slices (`--local`). By default the shards send
//! only their top-K (`12 + 8·K` bytes each instead of `4 · rows`), merged into the global top-K
//! table; `--full` (implied by `--verify` and `--out`) fetches every logit, for a bit-for-bit
//! comparison with the local computation and a raw dump.
//!
//! [`Source`] is what `logits`, `sample` and `logprobs` share: where the answers come from. The
//! local path computes every logit and then cuts each shard's answer with the same
//! `cobordism_protocol::Form::encode_adjusted` the shard runs (with the same adjustments), so
//! local and remote agree by construction.

mod local;
mod remote;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::{ArgGroup, Args as ClapArgs};
use cobordism_protocol::adjust::Adjust;
use cobordism_protocol::health::State;
use cobordism_protocol::sampling::{log_sum_exp, merge_log_sum_exp, merge_top_k};
use cobordism_protocol::{decode_hidden, encode_f32, Form, Manifest, Precision, TopK, MAX_TOP_K};
use kquant::synth::SplitMix64;

pub use remote::Options;
pub use remote::{assemble, sections, Reply};
pub use remote::{healthz, warm_shard, Probe, ShardTiming};

use crate::tokens::Vocabulary;
use crate::{atomic, slices};
use crate::{ExitError, EXIT_VERIFY_FAILED};

/// How to reach the shard Workers. Shared by `logits`, `sample`, `logprobs` and `warm`.
#[derive(ClapArgs, Debug)]
pub struct Shards {
    /// Base URL of a shard Worker; repeat once per shard, in shard order.
    #[arg(long, value_name = "URL")]
    pub endpoint: Vec<String>,
    /// File with one endpoint URL per line, in shard order (blank lines and # comments skipped).
    #[arg(long, value_name = "FILE")]
    pub endpoints_from: Option<PathBuf>,
    /// Bearer token for the Workers (or set COBORDISM_TOKEN, which keeps it out of `ps`).
    #[arg(
        long,
        value_name = "T",
        env = "COBORDISM_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Timeout of one request.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub timeout_secs: u64,
    /// Retries of a request that failed to connect, timed out or got a 429/5xx.
    #[arg(long, value_name = "R", default_value_t = cobordism_protocol::DEFAULT_RETRIES)]
    pub retries: u32,
    /// Session key sent to the shards (X-Cobordism-Session): with object residency and replicas,
    /// the same key reaches the same replica of each shard (warm with the key you then use).
    #[arg(long, value_name = "KEY", env = "COBORDISM_SESSION")]
    pub session: Option<String>,
}

impl Shards {
    /// How to talk to them.
    pub(crate) fn options(&self, precision: Precision) -> Options {
        Options {
            token: self.token.clone(),
            timeout: Duration::from_secs(self.timeout_secs.max(1)),
            retries: self.retries,
            precision,
            session: self.session.clone(),
        }
    }

    /// Whether endpoints were given (`--endpoint` or `--endpoints-from`).
    pub(crate) fn given(&self) -> bool {
        !self.endpoint.is_empty() || self.endpoints_from.is_some()
    }

    /// The endpoint URLs, shard i at position i.
    pub(crate) fn endpoints(&self) -> Result<Vec<String>> {
        let urls = match &self.endpoints_from {
            None => self.endpoint.clone(),
            Some(path) => {
                let text = fs::read_to_string(path).with_context(|| {
                    format!("cannot read the endpoints file {}", path.display())
                })?;
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
        checked(urls)
    }

    /// Asks every shard to load its slice; their states in shard order (`ready`, `loading`).
    pub fn warm(&self, manifest: &Manifest) -> Result<Vec<State>> {
        remote::warm(
            manifest,
            &self.endpoints()?,
            &self.options(Precision::Exact),
        )
    }
}

/// `urls`, each an http(s) URL this build can reach.
pub(crate) fn checked(urls: Vec<String>) -> Result<Vec<String>> {
    for url in &urls {
        ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "endpoint {url:?}: expected an http:// or https:// URL"
        );
        ensure!(
            cfg!(feature = "https") || !url.starts_with("https://"),
            "endpoint {url:?}: this cobordism was built without TLS (scripts/demo.sh builds \
             it so, for local shards); `cargo build --release -p cobordism` adds it"
        );
    }
    Ok(urls)
}

/// Where the answers come from: the shard Workers or the slice files. Shared by `logits`,
/// `sample` and `logprobs`.
#[derive(ClapArgs, Debug)]
pub struct Source {
    /// The manifest.json written by `slice` (with --local, and `logits --verify`, its slices are
    /// read from the same folder).
    #[arg(long, value_name = "FILE")]
    pub manifest: PathBuf,
    #[command(flatten)]
    pub shards: Shards,
    /// Compute locally from the slice files instead of asking the Workers.
    #[arg(long)]
    pub local: bool,
    /// Use kquant's int8 fast mode (8-bit activations, ~7e-3 of max |y| error; still the same
    /// bits locally and on the shards).
    #[arg(long)]
    pub int8: bool,
}

impl Source {
    /// The manifest and the directory of its slices.
    pub fn manifest(&self) -> Result<(Manifest, &Path)> {
        Ok((slices::read_manifest(&self.manifest)?, self.dir()))
    }

    /// The directory of the manifest and its slices.
    pub fn dir(&self) -> &Path {
        self.manifest.parent().unwrap_or(Path::new("."))
    }

    fn precision(&self) -> Precision {
        if self.int8 {
            Precision::Int8
        } else {
            Precision::Exact
        }
    }

    /// Every shard's answer to `form` for `hidden` with its logits adjusted by `adjust`, in
    /// shard order, and (from the Workers) how each request went.
    pub fn ask(
        &self,
        manifest: &Manifest,
        hidden: &[f32],
        (form, adjust): (&Form, &Adjust),
    ) -> Result<(Vec<Reply>, Option<Vec<ShardTiming>>)> {
        if self.local {
            let all = local::compute(manifest, self.dir(), hidden, self.precision())?;
            return Ok((local_replies(manifest, &all, form, adjust)?, None));
        }
        let opts = self.shards.options(self.precision());
        let endpoints = self.shards.endpoints()?;
        let asked = (form, adjust);
        let (replies, timings) = remote::fetch(manifest, &endpoints, hidden, &opts, asked)?;
        Ok((replies, Some(timings)))
    }
}

/// Each shard's answer cut from all the logits, adjusted and encoded by the shard's own code.
fn local_replies(
    manifest: &Manifest,
    all: &[f32],
    form: &Form,
    adjust: &Adjust,
) -> Result<Vec<Reply>> {
    manifest
        .shards
        .iter()
        .map(|s| {
            let mut rows = all[s.row_start..s.row_start + s.row_count].to_vec();
            // The shard's own encoding also refuses what the shard refuses (a logit or a
            // log-sum-exp that is not finite), with the same words.
            let adjusts = std::slice::from_ref(adjust);
            let bytes =
                form.encode_adjusted(&mut rows, s.row_count, s.row_start as u32, adjusts)?;
            if *form == Form::Logits {
                return Ok(Reply::Logits(rows));
            }
            let mut sections = TopK::decode_all(&bytes)?;
            Ok(Reply::Section(sections.remove(0)))
        })
        .collect()
}

/// The hidden vector of `logits`, `sample` and `logprobs`: a file, or made from a seed.
#[derive(ClapArgs, Debug)]
#[group(id = "input", required = true, multiple = false)]
pub struct Input {
    /// The hidden vector: raw little-endian f32 × hidden.
    #[arg(long, value_name = "FILE")]
    pub hidden: Option<PathBuf>,
    /// Make the hidden vector from this seed (SplitMix64 normal()).
    #[arg(long, value_name = "S")]
    pub hidden_seed: Option<u64>,
}

impl Input {
    /// The manifest of `source` and the hidden vector, checked against its hidden size.
    pub fn read(&self, source: &Source) -> Result<(Manifest, Vec<f32>)> {
        let (manifest, _) = source.manifest()?;
        let hidden = match (&self.hidden, self.hidden_seed) {
            (Some(path), _) => read_hidden(path, manifest.hidden)?,
            (None, Some(seed)) => seeded_hidden(seed, manifest.hidden),
            (None, None) => bail!("give a hidden vector file or a seed"),
        };
        Ok((manifest, hidden))
    }
}

/// Arguments of `cobordism logits`.
#[derive(ClapArgs, Debug)]
#[command(
    group(ArgGroup::new("source").required(true).args(["endpoint", "endpoints_from", "local"])),
    after_long_help = "\
Shard i is served by the i-th endpoint; the hidden vector is POSTed to
<endpoint>/cobordism-lm-head of all of them at once. Each shard sends its top-K (K = --top-k,
at most 1024), merged into the global top-K; --full fetches every logit.

Examples:
  cobordism logits --manifest slices/tiny/manifest.json --local --hidden-seed 1
  cobordism logits --manifest slices/tiny/manifest.json --hidden-seed 1 --verify \\
      --endpoint http://127.0.0.1:8787 --endpoint http://127.0.0.1:8788
  cobordism logits --manifest m/manifest.json --endpoints-from endpoints.txt --hidden h.f32 \\
      --top-k 20 --out logits.f32   # with COBORDISM_TOKEN set

Exits with 4 when --verify finds a logit that differs.")]
pub struct Args {
    #[command(flatten)]
    pub source: Source,
    #[command(flatten)]
    pub input: Input,
    /// Rows of the top-k table (more than 1024 fetches every logit).
    #[arg(long, value_name = "K", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub top_k: u64,
    /// Fetch every logit rather than each shard's top-K.
    #[arg(long)]
    pub full: bool,
    /// Write all logits to FILE as little-endian f32 (fetches every logit).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also compute locally and compare every logit bit for bit (exit code 4 on a difference).
    #[arg(long, conflicts_with = "local")]
    pub verify: bool,
}

/// Runs `cobordism logits`.
pub fn run(args: &Args) -> Result<()> {
    let (manifest, hidden) = args.input.read(&args.source)?;
    let dir = args.source.dir();
    let k = args.top_k as usize;
    let full = args.full || args.verify || args.out.is_some() || k > MAX_TOP_K;
    let form = if full {
        Form::Logits
    } else {
        Form::TopK {
            k,
            temperature: 1.0,
        }
    };
    let (replies, timings) = args
        .source
        .ask(&manifest, &hidden, (&form, &Adjust::none()))?;
    let logits = full.then(|| assemble(&manifest, replies.clone()));
    let (top, lse) = match &logits {
        Some(all) => (TopK::compute(all, 0, k).entries, log_sum_exp(all, 1.0)),
        None => {
            let sections = sections(replies);
            let refs: Vec<&TopK> = sections.iter().collect();
            let lse = merge_log_sum_exp(sections.iter().map(|t| f64::from(t.log_sum_exp)));
            (merge_top_k(&refs, k), lse)
        }
    };
    let vocabulary = Vocabulary::load(dir)?;
    print_top_k(&manifest, &top, lse, args.source.local, vocabulary.as_ref());
    if let Some(t) = &timings {
        print_timings(t);
    }
    if let (Some(path), Some(all)) = (&args.out, &logits) {
        atomic::write_file(path, |w| {
            w.write_all(&encode_f32(all))
                .with_context(|| format!("cannot write {}", path.display()))
        })?;
        println!("\nwrote {} logits to {}", all.len(), path.display());
    }
    if let (true, Some(all)) = (args.verify, &logits) {
        let local = local::compute(&manifest, dir, &hidden, args.source.precision())?;
        verify(all, &local)?;
        println!("\nverify: {} logits identical", all.len());
    }
    Ok(())
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

/// The top-k table (with each token's text when the slices have `tokens.bin`); `lse` is the
/// log-partition `ln Σ exp(z)` over the whole vocabulary.
fn print_top_k(
    manifest: &Manifest,
    top: &[(u32, f32)],
    lse: f64,
    local: bool,
    vocabulary: Option<&Vocabulary>,
) {
    println!(
        "{} {} [{} × {}], {} shards, {}{}",
        manifest.model,
        manifest.dtype.name(),
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
    let text = if vocabulary.is_some() { "   text" } else { "" };
    println!("\n rank       token          logit   probability{text}");
    for (rank, (token, z)) in top.iter().enumerate() {
        println!(
            "{:>5}  {:>10}  {:>13.6}   {:>11.9}{}",
            rank + 1,
            token,
            z,
            (f64::from(*z) - lse).exp(),
            vocabulary.map_or(String::new(), |v| format!("   {}", v.shown(*token)))
        );
    }
}

/// Per shard: rows, HTTP time, the server's compute time when it reports one, cache, attempts.
pub fn print_timings(timings: &[ShardTiming]) {
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
}

//! `cobordism sample` and `cobordism logprobs`: one token drawn exactly from the model's
//! distribution, and the log-probabilities of given tokens, asking each shard for a few bytes.
//!
//! Plain sampling asks every shard for its Gumbel-max winner (`?temperature=T&seed=S`) and keeps
//! the best: the token one machine would draw from all the logits, for any number of shards.
//! With top-k, top-p or min-p it asks for each shard's top-K at `T` for each K of the protocol's
//! ladder (`top_k_ladder`: 64 or top-k, then 1024) and samples from their union when that decides
//! the filters, else from all the logits.
//! Temperature 0 is greedy decoding (each shard's top-1). The math is
//! `cobordism_protocol::sampling`; `--local` runs the same on locally computed shard answers.
//!
//! Logit bias, the penalties and an allowed set ([`AdjustFlags`]) travel with every request:
//! each shard adjusts its own logits before it answers, so every form above — and the
//! log-probabilities printed — is of the adjusted logits.

use anyhow::{anyhow, ensure, Result};
use clap::{ArgGroup, Args as ClapArgs};
use cobordism_protocol::adjust::Adjust;
use cobordism_protocol::sampling::{
    check_probability, check_temperature, logprobs, merge_log_sum_exp, merge_top_k, merge_winners,
    sample, sample_all, Part, Sampled, Sampling, MAX_TEMPERATURE, MIN_TEMPERATURE,
};
use cobordism_protocol::{top_k_ladder, Form, Manifest, Noise, TopK, MAX_TOP_K};

use crate::adjust_flags::AdjustFlags;
use crate::logits::{assemble, print_timings, sections, Input, Source};
use crate::tokens::Vocabulary;

/// Arguments of `cobordism sample`.
#[derive(ClapArgs, Debug)]
#[command(
    group(ArgGroup::new("source").required(true).args(["endpoint", "endpoints_from", "local"])),
    after_long_help = "\
Examples:
  cobordism sample --manifest slices/tiny/manifest.json --local --hidden-seed 1 \\
      --temperature 0.8 --seed 42
  cobordism sample --manifest m/manifest.json --endpoints-from endpoints.txt --hidden h.f32 \\
      --temperature 1 --top-p 0.9 --seed 7
  cobordism sample --manifest slices/tiny/manifest.json --local --hidden-seed 1 --seed 3 \\
      --logit-bias 17:2.5,40:-inf --history 5,9,5 --presence-penalty 0.4 --allow 0..500

The same --seed gives the same token locally and from any number of shards. Use one seed per
decoding step. Bias, penalties and --allow change the logits before temperature and the
filters (llama.cpp's order: allowed set, bias, repetition penalty, frequency and presence
penalties); the printed logit and logprob are the adjusted ones.")]
pub struct SampleArgs {
    #[command(flatten)]
    pub source: Source,
    #[command(flatten)]
    pub input: Input,
    /// Temperature, from 0.01 to 1000; 0 is greedy decoding.
    #[arg(long, value_name = "T", default_value_t = 1.0, value_parser = temperature_arg)]
    pub temperature: f32,
    /// The sampling noise's seed (one per decoding step).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Keep only the K most likely tokens.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches P.
    #[arg(long, value_name = "P", value_parser = |s: &str| probability_arg("top-p", s))]
    pub top_p: Option<f64>,
    /// Keep tokens at least P times as likely as the most likely one.
    #[arg(long, value_name = "P", value_parser = |s: &str| probability_arg("min-p", s))]
    pub min_p: Option<f64>,
    #[command(flatten)]
    pub adjust: AdjustFlags,
}

/// `--temperature`: 0 (greedy) or a temperature the shards take; a bad one is a usage error.
fn temperature_arg(s: &str) -> Result<f32, String> {
    let t: f32 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a number: {s:?}"))?;
    if t == 0.0 {
        return Ok(0.0);
    }
    check_temperature(t).map_err(|_| {
        format!(
            "must be 0 (greedy) or a number from {MIN_TEMPERATURE} to {MAX_TEMPERATURE}, not {t}"
        )
    })
}

/// `--top-p`, `--min-p`: a probability threshold in (0, 1].
fn probability_arg(name: &str, s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a number: {s:?}"))?;
    check_probability(name, v)
}

/// Runs `cobordism sample`.
pub fn run_sample(args: &SampleArgs) -> Result<()> {
    let (manifest, hidden) = args.input.read(&args.source)?;
    let s = Sampling {
        temperature: args.temperature,
        seed: args.seed,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
    };
    let adjust = args.adjust.adjust(manifest.vocab)?;
    let (sampled, how) = if args.temperature == 0.0 {
        greedy(&args.source, &manifest, &hidden, &adjust)?
    } else {
        s.validate().map_err(anyhow::Error::msg)?;
        draw(&args.source, &manifest, (&hidden, &adjust), &s)?
    };
    let text = Vocabulary::load(args.source.dir())?.map_or(String::new(), |v| {
        format!("  text {}", v.shown(sampled.token))
    });
    println!(
        "token {}  logit {}  logprob {:.6}{text}  ({how})",
        sampled.token, sampled.logit, sampled.logprob
    );
    Ok(())
}

/// The most likely token (ties: the smaller id) and its log-probability at temperature 1.
fn greedy(
    source: &Source,
    manifest: &Manifest,
    hidden: &[f32],
    adjust: &Adjust,
) -> Result<(Sampled, String)> {
    let top_1 = Form::TopK {
        k: 1,
        temperature: 1.0,
    };
    let (replies, timings) = source.ask(manifest, hidden, (&top_1, adjust))?;
    let sections = sections(replies);
    show(timings.as_deref());
    let refs: Vec<&TopK> = sections.iter().collect();
    let (token, logit) = *merge_top_k(&refs, 1)
        .first()
        .ok_or_else(|| anyhow!("every shard's top-1 is empty: no token to choose"))?;
    let lse = merge_log_sum_exp(sections.iter().map(|t| f64::from(t.log_sum_exp)));
    let sampled = Sampled {
        token,
        logit,
        logprob: f64::from(logit) - lse,
    };
    Ok((sampled, "greedy: each shard's top-1".into()))
}

/// An exact draw: the shards' winners, or their top-K, or all logits when the top-K cannot
/// decide the filters.
fn draw(
    source: &Source,
    manifest: &Manifest,
    (hidden, adjust): (&[f32], &Adjust),
    s: &Sampling,
) -> Result<(Sampled, String)> {
    if !s.filtered() {
        let form = Form::Sample {
            temperature: s.temperature,
            noise: Noise::Seed(s.seed),
        };
        let (replies, timings) = source.ask(manifest, hidden, (&form, adjust))?;
        show(timings.as_deref());
        let winner = merge_winners(&sections(replies), s, 0)
            .ok_or_else(|| anyhow!("every shard's answer is empty: no winner to draw from"))?;
        return Ok((winner, "Gumbel-max: each shard's winner".into()));
    }
    let mut why = String::new();
    for k in top_k_ladder(s.top_k) {
        let form = Form::TopK {
            k,
            temperature: s.temperature,
        };
        let (replies, timings) = source.ask(manifest, hidden, (&form, adjust))?;
        show(timings.as_deref());
        let sections = sections(replies);
        let parts: Vec<Part> = sections
            .iter()
            .zip(&manifest.shards)
            .map(|(section, shard)| Part {
                section,
                rows: shard.row_count,
            })
            .collect();
        match sample(&parts, s, 0) {
            Ok(sampled) => return Ok((sampled, format!("from the shards' top-{k}"))),
            Err(e) => why = e.0,
        }
    }
    let (replies, timings) = source.ask(manifest, hidden, (&Form::Logits, adjust))?;
    show(timings.as_deref());
    let all = assemble(manifest, replies);
    let sampled = sample_all(&all, s, 0).map_err(anyhow::Error::msg)?;
    Ok((
        sampled,
        format!("from all logits: the top-{MAX_TOP_K} could not decide ({why})"),
    ))
}

fn show(timings: Option<&[crate::logits::ShardTiming]>) {
    if let Some(t) = timings {
        print_timings(t);
        println!();
    }
}

/// Arguments of `cobordism logprobs`.
#[derive(ClapArgs, Debug)]
#[command(
    group(ArgGroup::new("source").required(true).args(["endpoint", "endpoints_from", "local"])),
    after_long_help = "\
Each shard sends the logits of the asked tokens in its rows plus its log-sum-exp; the
log-probability is z/T − ln Σ exp(z/T) over the whole vocabulary. With bias, penalties or
--allow, of the adjusted logits (as OpenAI's logprobs with logit_bias): -inf for a token
outside the allowed set or banned.

Example:
  cobordism logprobs --manifest slices/tiny/manifest.json --local --hidden-seed 1 \
    --tokens 5,17,400")]
pub struct LogprobsArgs {
    #[command(flatten)]
    pub source: Source,
    #[command(flatten)]
    pub input: Input,
    /// Token ids, comma-separated (at most 1024).
    #[arg(long, value_name = "IDS", value_delimiter = ',', required = true)]
    pub tokens: Vec<u32>,
    /// Temperature of the distribution, from 0.01 to 1000.
    #[arg(long, value_name = "T", default_value_t = 1.0)]
    pub temperature: f32,
    #[command(flatten)]
    pub adjust: AdjustFlags,
}

/// Runs `cobordism logprobs`.
pub fn run_logprobs(args: &LogprobsArgs) -> Result<()> {
    let (manifest, hidden) = args.input.read(&args.source)?;
    ensure!(
        args.tokens.len() <= MAX_TOP_K,
        "at most {MAX_TOP_K} tokens at once, not {}",
        args.tokens.len()
    );
    if let Some(t) = args.tokens.iter().find(|&&t| t as usize >= manifest.vocab) {
        anyhow::bail!(
            "token {t} is outside the vocabulary (0 … {})",
            manifest.vocab - 1
        );
    }
    Sampling::plain(args.temperature, 0)
        .validate()
        .map_err(anyhow::Error::msg)?;
    let adjust = args.adjust.adjust(manifest.vocab)?;
    let form = Form::Tokens {
        tokens: args.tokens.clone(),
        temperature: args.temperature,
    };
    let (replies, timings) = args.source.ask(&manifest, &hidden, (&form, &adjust))?;
    show(timings.as_deref());
    let sections = sections(replies);
    let lps = logprobs(&sections, &args.tokens, args.temperature);
    let vocabulary = Vocabulary::load(args.source.dir())?;
    println!(
        "     token        logprob{}",
        if vocabulary.is_some() { "   text" } else { "" }
    );
    for (token, lp) in args.tokens.iter().zip(lps) {
        let lp = lp.ok_or_else(|| anyhow::anyhow!("no shard answered token {token}"))?;
        let text = vocabulary
            .as_ref()
            .map_or(String::new(), |v| format!("   {}", v.shown(*token)));
        println!("{token:>10}  {lp:>13.6}{text}");
    }
    Ok(())
}

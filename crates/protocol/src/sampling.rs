//! Exact sampling across shards: the noise, the filters, and the merges of shard answers.
//!
//! **Gumbel-max with counter-based noise.** Token `i` of hidden vector `v` gets the noise
//! `g = −ln(−ln u)`, `u` a uniform in (0, 1) made from XXH3-64 of `(v, i)` seeded with the
//! request's `seed`, and its score is `z_i / T + g` (in f64). The token with the highest score is
//! a sample from `softmax(z / T)`. Because the noise depends on the *global* token id and not on
//! where the vocabulary is cut, every shard can pick its slice's winner alone and the best of the
//! winners is the token one machine would pick from the full logits: the same token for any
//! number of shards. Equal scores go to the smaller token id, here and in every merge.
//!
//! **Filters** (top-k, top-p, min-p) keep a prefix of the tokens sorted by logit (largest first,
//! ties by id), in this order: top-k keeps `k`; top-p keeps the shortest prefix whose
//! probability reaches `p` (normalised over the whole vocabulary, or over the top-k when top-k
//! is set); min-p keeps tokens with `p_i ≥ min_p · p_max`. The sample is then Gumbel-max over the
//! kept tokens, with the same noise. A client has only the union of the shards' top-K: it is the
//! exact head of the sorted vocabulary down to the largest logit a truncated shard left out, and
//! when a filter's prefix does not end inside that certain head, [`sample`] says
//! [`Undecided`] (ask again with a larger K or all logits): never a silently truncated
//! distribution.
//!
//! `ln`/`exp` come from the `libm` crate and sums run in a fixed order in f64, so the shard
//! (wasm) and the client (native or wasm) compute the same bits.

use core::cmp::Ordering;
use core::fmt;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::TopK;

/// The Gumbel noise of token `token` of hidden vector `vector` under `seed`.
pub fn gumbel(seed: u64, vector: u32, token: u32) -> f64 {
    let mut key = [0u8; 8];
    key[..4].copy_from_slice(&vector.to_le_bytes());
    key[4..].copy_from_slice(&token.to_le_bytes());
    let bits = xxh3_64_with_seed(&key, seed) >> 11; // 53 random bits
    let u = (bits as f64 + 0.5) * (1.0 / (1u64 << 53) as f64); // in (0, 1), never 0 or 1
    -libm::log(-libm::log(u))
}

/// No Gumbel noise reaches this: `u ≤ 1 − 2⁻⁵⁴` makes `−ln(−ln u) ≤ 54·ln 2 ≈ 37.43`.
const GUMBEL_MAX: f64 = 37.5;

/// A logit over the temperature, in f64: the deterministic part of a token's score.
fn scaled(logit: f32, temperature: f32) -> f64 {
    f64::from(logit) / f64::from(temperature)
}

/// The Gumbel-max score of a token: `logit / T + gumbel`.
pub fn score(logit: f32, temperature: f32, seed: u64, vector: u32, token: u32) -> f64 {
    scaled(logit, temperature) + gumbel(seed, vector, token)
}

/// `(token, score)` pairs: higher score first, then smaller token (the total order of f64).
fn better(a: (u32, f64), b: (u32, f64)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// `(token, logit)` pairs: higher logit first, then smaller token.
pub(crate) fn by_logit(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// `ln Σ exp(z_i / T)` over `logits` in f64, in order: `max/T + ln Σ exp((z − max) / T)`.
/// Every logit `−∞` (none of the tokens allowed), it is `−∞`.
pub fn log_sum_exp(logits: &[f32], temperature: f32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    let t = f64::from(temperature);
    let sum: f64 = logits
        .iter()
        .map(|&z| libm::exp(f64::from(z - max) / t))
        .sum();
    f64::from(max) / t + libm::log(sum)
}

/// The global `ln Σ exp(z / T)` from the shards' (in shard order).
pub fn merge_log_sum_exp(parts: impl IntoIterator<Item = f64> + Clone) -> f64 {
    let max = parts.clone().into_iter().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY || max.is_nan() {
        return max;
    }
    let sum: f64 = parts.into_iter().map(|l| libm::exp(l - max)).sum();
    max + libm::log(sum)
}

/// The slice's Gumbel-max winner for the reply form `?temperature=T&seed=S`: a one-entry
/// section (the winner's global id and logit) with the slice's max and log-sum-exp at `T`. A
/// row whose logit is `−∞` (adjusted out: [`crate::adjust`]) never wins: a slice with no other
/// row answers no entry.
pub fn slice_winner(
    logits: &[f32],
    row_start: u32,
    temperature: f32,
    seed: u64,
    vector: u32,
) -> TopK {
    let mut winner: Option<((u32, f32), f64)> = None;
    for (i, &z) in logits.iter().enumerate() {
        if z == f32::NEG_INFINITY {
            continue;
        }
        let id = row_start + i as u32;
        let a = scaled(z, temperature);
        // Rounding is monotonic, so `a + g ≤ a + GUMBEL_MAX` for every noise `g`: a row below the
        // best score so far even with the largest noise cannot win (nor tie), and its noise is
        // never drawn. The same winner as scoring every row, for a fraction of the logarithms.
        if winner.is_some_and(|(_, best)| a + GUMBEL_MAX < best) {
            continue;
        }
        let candidate = ((id, z), a + gumbel(seed, vector, id));
        let wins =
            |(e, best): ((u32, f32), f64)| better((id, candidate.1), (e.0, best)) == Ordering::Less;
        if winner.is_none_or(wins) {
            winner = Some(candidate);
        }
    }
    TopK {
        max_logit: logits.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        log_sum_exp: log_sum_exp(logits, temperature) as f32,
        entries: winner.map(|(e, _)| e).into_iter().collect(),
    }
}

/// What to sample from: `softmax(z / temperature)`, narrowed by the filters that are set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// `T > 0`.
    pub temperature: f32,
    /// The noise seed: one per decoding step.
    pub seed: u64,
    /// Keep the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the smallest head whose probability reaches `p` (0 < p ≤ 1).
    pub top_p: Option<f64>,
    /// Keep tokens at least `min_p` times as likely as the most likely (0 < min_p ≤ 1).
    pub min_p: Option<f64>,
}

impl Sampling {
    /// Plain sampling at `temperature`.
    pub fn plain(temperature: f32, seed: u64) -> Sampling {
        Sampling {
            temperature,
            seed,
            top_k: None,
            top_p: None,
            min_p: None,
        }
    }

    /// Whether a filter is set (then the shards' top-K is needed, not their winners).
    pub fn filtered(&self) -> bool {
        self.top_k.is_some() || self.top_p.is_some() || self.min_p.is_some()
    }

    /// Checks the ranges; the message names the bad parameter.
    pub fn validate(&self) -> Result<(), String> {
        check_temperature(self.temperature)?;
        if self.top_k == Some(0) {
            return Err("top-k must be at least 1".into());
        }
        for (name, v) in [("top-p", self.top_p), ("min-p", self.min_p)] {
            v.map(|v| check_probability(name, v)).transpose()?;
        }
        Ok(())
    }
}

/// `v` if it is a probability threshold in (0, 1] (top-p, min-p), else why not.
pub fn check_probability(name: &str, v: f64) -> Result<f64, String> {
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{name} must be in (0, 1], not {v}"))
    }
}

/// Largest temperature accepted.
pub const MAX_TEMPERATURE: f32 = 1000.0;

/// The smallest temperature a shard or client accepts. A section carries `ln Σ exp(z/T)` as an
/// f32, whose rounding grows with `max z / T`: at `T = 0.01` and logits up to ~50 it is below
/// 10⁻³ nats; much smaller temperatures would make log-probabilities meaningless, and below
/// ~10⁻³⁶ `z/T` itself overflows (use greedy decoding instead: `top_k=1`).
pub const MIN_TEMPERATURE: f32 = 0.01;

/// `t` if it is a temperature in `[MIN_TEMPERATURE, MAX_TEMPERATURE]`, else why not.
pub fn check_temperature(t: f32) -> Result<f32, String> {
    if (MIN_TEMPERATURE..=MAX_TEMPERATURE).contains(&t) {
        Ok(t)
    } else {
        Err(temperature_error(t))
    }
}

/// Why `shown` is not a temperature.
pub(crate) fn temperature_error(shown: impl fmt::Display) -> String {
    format!(
        "temperature must be a number from {MIN_TEMPERATURE} to {MAX_TEMPERATURE}, not {shown} \
         (greedy decoding: temperature 0 with the client or the CLI, top_k=1 over HTTP)"
    )
}

/// A sampled token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampled {
    /// Global token id.
    pub token: u32,
    /// Its logit.
    pub logit: f32,
    /// Its log-probability under the distribution sampled from (temperature and filters).
    pub logprob: f64,
}

/// The union of the shards' top-K cannot decide a filter: ask for more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecided(pub String);

impl fmt::Display for Undecided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the shards' top-K cannot decide this sample: {}", self.0)
    }
}

impl std::error::Error for Undecided {}

/// One shard's answer to `?top_k=K&temperature=T` (or all its logits as a section with every
/// row) and the number of rows its slice has.
#[derive(Clone, Copy, Debug)]
pub struct Part<'a> {
    /// The section for the vector being sampled.
    pub section: &'a TopK,
    /// The slice's row count: the section is complete when it has them all.
    pub rows: usize,
}

/// Plain sampling from the shards' winners (`?temperature=T&seed=S` sections of one vector).
pub fn merge_winners(sections: &[TopK], s: &Sampling, vector: u32) -> Option<Sampled> {
    let (token, logit) = sections
        .iter()
        .filter_map(|t| t.entries.first().copied())
        .min_by(|a, b| {
            better(
                (a.0, score(a.1, s.temperature, s.seed, vector, a.0)),
                (b.0, score(b.1, s.temperature, s.seed, vector, b.0)),
            )
        })?;
    let lse = merge_log_sum_exp(sections.iter().map(|t| f64::from(t.log_sum_exp)));
    Some(Sampled {
        token,
        logit,
        logprob: f64::from(logit) / f64::from(s.temperature) - lse,
    })
}

/// Samples from the union of the shards' top-K sections of one vector (each with its
/// log-sum-exp at `s.temperature`), exactly as from the full logits, or says why it cannot.
pub fn sample(parts: &[Part<'_>], s: &Sampling, vector: u32) -> Result<Sampled, Undecided> {
    s.validate().map_err(Undecided)?;
    let t = f64::from(s.temperature);
    let mut union: Vec<(u32, f32)> = parts
        .iter()
        .flat_map(|p| p.section.entries.iter().copied())
        .collect();
    union.sort_by(by_logit);
    // Every left-out logit is ≤ the last entry of a truncated section: above the largest such
    // bound the union is the exact head of the sorted vocabulary.
    let bound = parts
        .iter()
        .filter(|p| p.section.entries.len() < p.rows)
        .map(|p| p.section.entries.last().map_or(f32::INFINITY, |e| e.1))
        .fold(None, |acc: Option<f32>, z| {
            Some(acc.map_or(z, |a| a.max(z)))
        });
    let certain = match bound {
        None => union.len(),
        // Every left-out logit is `−∞` (outside an allowed set, or banned: `crate::adjust`):
        // the union holds every token that can be drawn, and the others weigh nothing.
        Some(f32::NEG_INFINITY) => union.len(),
        Some(b) => union.iter().take_while(|e| e.1 > b).count(),
    };
    let head = &union[..certain];
    let Some(&(_, top)) = head.first() else {
        return Err(Undecided("no token is certainly in the head".into()));
    };

    let mut keep = union.len();
    let mut normaliser = merge_log_sum_exp(parts.iter().map(|p| f64::from(p.section.log_sum_exp)));
    if let Some(k) = s.top_k {
        if k > certain && certain < union.len() {
            return Err(Undecided(format!(
                "top-k {k} needs the first {k} tokens, {certain} are certain"
            )));
        }
        keep = keep.min(k);
        normaliser = log_sum_exp_of(&union[..keep], s.temperature);
    }
    if let Some(p) = s.top_p {
        let mut mass = 0.0;
        let end = head[..keep.min(certain)].iter().position(|e| {
            mass += libm::exp(f64::from(e.1) / t - normaliser);
            mass >= p
        });
        match end {
            Some(i) => keep = keep.min(i + 1),
            None if keep <= certain => {} // everything kept is certain: p ≈ 1 rounding
            None => {
                return Err(Undecided(format!(
                    "top-p {p} reaches past the {certain} certain tokens (mass {mass:.6})"
                )))
            }
        }
    }
    if let Some(m) = s.min_p {
        let floor = libm::log(m);
        let passes = |z: f32| (f64::from(z) - f64::from(top)) / t >= floor;
        let n = head[..keep.min(certain)]
            .iter()
            .take_while(|e| passes(e.1))
            .count();
        if n == keep.min(certain) && n < keep {
            return Err(Undecided(format!(
                "min-p {m} keeps all {certain} certain tokens and may keep more"
            )));
        }
        keep = keep.min(n.max(1));
    }
    if keep > certain {
        return Err(Undecided(format!(
            "the filters keep {keep} tokens, {certain} are certain"
        )));
    }
    let kept = &union[..keep];
    let (token, logit) = *kept
        .iter()
        .min_by(|a, b| {
            better(
                (a.0, score(a.1, s.temperature, s.seed, vector, a.0)),
                (b.0, score(b.1, s.temperature, s.seed, vector, b.0)),
            )
        })
        .expect("at least one token is kept");
    let normaliser = if s.filtered() {
        log_sum_exp_of(kept, s.temperature)
    } else {
        normaliser
    };
    Ok(Sampled {
        token,
        logit,
        logprob: f64::from(logit) / t - normaliser,
    })
}

/// Samples from all the logits of vector `vector` (`logits[i]` is token `i`): the fallback when
/// the shards' top-K cannot decide the filters.
pub fn sample_all(logits: &[f32], s: &Sampling, vector: u32) -> Result<Sampled, Undecided> {
    let whole = TopK::compute_at(logits, 0, logits.len(), s.temperature);
    let part = Part {
        section: &whole,
        rows: logits.len(),
    };
    sample(&[part], s, vector)
}

/// [`log_sum_exp`] of the logits of `entries`.
fn log_sum_exp_of(entries: &[(u32, f32)], temperature: f32) -> f64 {
    let logits: Vec<f32> = entries.iter().map(|e| e.1).collect();
    log_sum_exp(&logits, temperature)
}

/// The merged top-`k` of the shards' sections of one vector: the global top-`k` whenever every
/// section has at least `k` entries or all its rows.
pub fn merge_top_k(sections: &[&TopK], k: usize) -> Vec<(u32, f32)> {
    let mut union: Vec<(u32, f32)> = sections
        .iter()
        .flat_map(|t| t.entries.iter().copied())
        .collect();
    union.sort_by(by_logit);
    union.truncate(k);
    union
}

/// Log-probabilities of `tokens` from the shards' `?tokens=` sections of one vector (each with
/// its log-sum-exp at `temperature`): `z / T − LSE`, in the order asked; `None` for a token no
/// section has.
pub fn logprobs(sections: &[TopK], tokens: &[u32], temperature: f32) -> Vec<Option<f64>> {
    let lse = merge_log_sum_exp(sections.iter().map(|t| f64::from(t.log_sum_exp)));
    tokens
        .iter()
        .map(|id| {
            sections
                .iter()
                .flat_map(|t| t.entries.iter())
                .find(|e| e.0 == *id)
                .map(|e| f64::from(e.1) / f64::from(temperature) - lse)
        })
        .collect()
}

//! The reply forms of `POST /cobordism-lm-head`, chosen by the query and encoded here for the
//! shard, so that the CLI's local path and the shard give the same bytes. Per hidden vector:
//!
//! - no query: all the slice's logits, f32;
//! - `top_k=K[&temperature=T]`: a section, the K best `(id, logit)`, the max, `ln Σ exp(z/T)`;
//! - `temperature=T&seed=S`: a section with one entry, the slice's Gumbel-max winner
//!   ([`crate::sampling`]);
//! - `temperature=T&seeds=S:V,…`: the same, vector `j` with the noise of seed `S_j` and vector
//!   index `V_j`;
//! - `tokens=ID,ID,…[&temperature=T]`: a section with the asked tokens that fall in the slice, in
//!   the order asked.
//!
//! Sections share the wire format of [`TopK`]; `T` defaults to 1. [`Query`] reads a whole query:
//! the form and `precision`, every parameter at most once.
//!
//! An answer is only sent when it is finite: [`Form::encode`] refuses a NaN or infinite logit
//! (finite hidden values whose products overflow f32) and a section whose `ln Σ exp(z/T)`
//! overflows f32 (logits beyond ~10³⁶ at a small `T`), naming the token or vector, so that the
//! shard and the CLI's local path refuse the same inputs with the same words.

use std::collections::BTreeSet;

use crate::adjust::{Adjust, MAX_ADJUST_BYTES};
use crate::sampling::{check_temperature, log_sum_exp, slice_winner, temperature_error};
use crate::{encode_f32, parse_top_k, ErrorCode, Precision, TopK, MAX_BATCH, MAX_TOP_K};

/// What a shard answers for each hidden vector.
#[derive(Clone, Debug, PartialEq)]
pub enum Form {
    /// All logits.
    Logits,
    /// The top `k` and the log-sum-exp at `temperature`.
    TopK { k: usize, temperature: f32 },
    /// The Gumbel-max winner of each vector at `temperature`, vector `v` with the noise of
    /// `noise.of(v)`.
    Sample { temperature: f32, noise: Noise },
    /// The logits of `tokens` that fall in the slice, and the log-sum-exp at `temperature`.
    Tokens { tokens: Vec<u32>, temperature: f32 },
}

/// The Gumbel noise each hidden vector of a sample draws: a `(seed, vector index)` pair.
#[derive(Clone, Debug, PartialEq)]
pub enum Noise {
    /// `seed=S`: vector `v` draws `(S, v)`.
    Seed(u64),
    /// `seeds=S:V,…`: vector `j` draws the `j`-th pair, one per vector. Requests of several
    /// callers merged into one (`@cobordism/client`'s coalescing) each keep the noise, and so
    /// the token, they would get alone.
    Each(Vec<(u64, u32)>),
}

impl Noise {
    /// The `(seed, vector index)` vector `v` draws.
    pub fn of(&self, v: usize) -> (u64, u32) {
        match self {
            Noise::Seed(seed) => (*seed, v as u32),
            Noise::Each(pairs) => pairs[v],
        }
    }

    /// `bad_seed` unless there is noise for each of `n` vectors.
    fn check(&self, n: usize) -> Result<(), FormError> {
        match self {
            Noise::Each(pairs) if pairs.len() != n => Err(refuse(
                ErrorCode::BadSeed,
                format!("seeds gives {} seeds for {n} hidden vectors", pairs.len()),
            )),
            _ => Ok(()),
        }
    }

    /// The query's parameter: `seed=S` or `seeds=S:V,…`.
    fn query(&self) -> String {
        match self {
            Noise::Seed(seed) => format!("seed={seed}"),
            Noise::Each(pairs) => {
                let pairs: Vec<String> = pairs.iter().map(|(s, v)| format!("{s}:{v}")).collect();
                format!("seeds={}", pairs.join(","))
            }
        }
    }
}

/// A query the shard refuses, or logits it cannot answer with: the error code and a sentence
/// for the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormError {
    /// `bad_top_k`, `bad_temperature`, `bad_seed`, `bad_tokens`, `bad_query`, `bad_precision`
    /// or (from [`Form::encode`]) `non_finite`.
    pub code: ErrorCode,
    /// What was wrong.
    pub detail: String,
}

/// `400 non_finite` naming the first logit that is not finite (the kernels' products overflowed).
fn check_finite(logits: &[f32], rows: usize, row_start: u32) -> Result<(), FormError> {
    let rows = rows.max(1);
    match logits.iter().position(|z| !z.is_finite()) {
        None => Ok(()),
        Some(i) => Err(refuse(
            ErrorCode::NonFinite,
            format!(
                "the logit of token {} (vector {}) is {}: the hidden vector's products overflow \
                 f32; send smaller values",
                row_start as usize + i % rows,
                i / rows,
                logits[i]
            ),
        )),
    }
}

fn refuse(code: ErrorCode, detail: impl Into<String>) -> FormError {
    FormError {
        code,
        detail: detail.into(),
    }
}

impl core::fmt::Display for FormError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

impl std::error::Error for FormError {}

/// What a request's query asks for: the reply form, the precision, and whether the body ends
/// with adjustments.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The reply form.
    pub form: Form,
    /// `?precision=` (default exact).
    pub precision: Precision,
    /// `?adjust=LEN`: the body's last `LEN` bytes are the adjustments of its vectors
    /// ([`crate::adjust`]'s wire layout); `None`: the body is the vectors alone.
    pub adjust: Option<usize>,
}

impl Query {
    /// Reads a query's `(key, value)` pairs (already percent-decoded). Any parameter given twice
    /// is refused (`bad_query`), whatever its name: a repeated value is never silently dropped.
    /// Parameters other than `top_k`, `temperature`, `seed`, `seeds`, `tokens`, `precision` and
    /// `adjust` are ignored.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Query, FormError> {
        let mut seen = BTreeSet::new();
        let (mut top_k, mut temperature, mut seed, mut seeds, mut tokens, mut precision) =
            (None, None, None, None, None, None);
        let mut adjust = None;
        for (key, value) in pairs {
            if !seen.insert(key) {
                return Err(refuse(
                    ErrorCode::BadQuery,
                    format!("{key:?} is given twice: give each parameter once"),
                ));
            }
            match key {
                "top_k" => top_k = Some(value),
                "temperature" => temperature = Some(value),
                "seed" => seed = Some(value),
                "seeds" => seeds = Some(value),
                "tokens" => tokens = Some(value),
                "precision" => precision = Some(value),
                "adjust" => adjust = Some(value),
                _ => {}
            }
        }
        let precision = precision.map_or(Ok(Precision::Exact), |v| {
            Precision::parse(v).map_err(|d| refuse(ErrorCode::BadPrecision, d))
        })?;
        let noise = match (seed, seeds) {
            (Some(_), Some(_)) => {
                return Err(refuse(ErrorCode::BadQuery, "seed and seeds: give one"))
            }
            (Some(s), None) => Some(parse_seed(s).map(Noise::Seed)),
            (None, Some(list)) => Some(parse_noise(list).map(Noise::Each)),
            (None, None) => None,
        };
        let form = Form::from_values(top_k, temperature, noise, tokens)?;
        let adjust = adjust.map(parse_adjust_len).transpose()?;
        Ok(Query {
            form,
            precision,
            adjust,
        })
    }

    /// The query of plain vectors (no adjustments).
    pub fn plain(form: Form, precision: Precision) -> Query {
        Query {
            form,
            precision,
            adjust: None,
        }
    }

    /// The query string that asks for this (without `?`; empty for all logits, exactly):
    /// [`Query::parse`] reads it back. The precision is written only when it is not the default.
    pub fn to_query(&self) -> String {
        let mut parts = vec![self.form.query()];
        if self.precision == Precision::Int8 {
            parts.push("precision=int8".into());
        }
        if let Some(len) = self.adjust {
            parts.push(format!("adjust={len}"));
        }
        parts.retain(|p| !p.is_empty());
        parts.join("&")
    }
}

impl Form {
    /// The form a query asks for ([`Query::parse`] without the precision).
    pub fn parse<'a>(
        query: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Form, FormError> {
        Query::parse(query).map(|q| q.form)
    }

    /// The form from the values of `top_k`, `temperature`, `seed` (or `seeds`, read as far as
    /// the noise) and `tokens`.
    fn from_values(
        top_k: Option<&str>,
        temperature: Option<&str>,
        noise: Option<Result<Noise, FormError>>,
        tokens: Option<&str>,
    ) -> Result<Form, FormError> {
        let t = temperature.map(parse_temperature).transpose()?;
        match (top_k, noise, tokens) {
            (None, None, None) if t.is_none() => Ok(Form::Logits),
            (None, None, None) => Err(refuse(
                ErrorCode::BadQuery,
                "temperature alone: add seed to sample, or top_k or tokens",
            )),
            (Some(k), None, None) => Ok(Form::TopK {
                k: parse_top_k(k).map_err(|d| refuse(ErrorCode::BadTopK, d))?,
                temperature: t.unwrap_or(1.0),
            }),
            (None, Some(noise), None) => {
                let temperature =
                    t.ok_or_else(|| refuse(ErrorCode::BadQuery, "seed needs temperature"))?;
                Ok(Form::Sample {
                    temperature,
                    noise: noise?,
                })
            }
            (None, None, Some(ids)) => Ok(Form::Tokens {
                tokens: parse_tokens(ids)?,
                temperature: t.unwrap_or(1.0),
            }),
            _ => Err(refuse(
                ErrorCode::BadQuery,
                "top_k, seed and tokens choose different answers: give one of them",
            )),
        }
    }

    /// The answer for the logits of `n` vectors (`logits.len() = n · rows`) of a slice whose
    /// first row is token `row_start`; `non_finite` if a logit or a section's log-sum-exp is not
    /// finite (see the module's docs).
    pub fn encode(
        &self,
        logits: &[f32],
        rows: usize,
        row_start: u32,
    ) -> Result<Vec<u8>, FormError> {
        check_finite(logits, rows, row_start)?;
        self.encode_checked(logits, rows, row_start)
    }

    /// [`Form::encode`] of `logits` (vector `v`'s rows at `v · rows`) once `adjusts[v]` has
    /// adjusted them in place ([`crate::adjust`]: the allowed set, logit bias and penalties,
    /// before temperature and the draw). The kernels' logits must be finite; adjusted ones may
    /// be `−∞` (a token outside the allowed set, or banned).
    pub fn encode_adjusted(
        &self,
        logits: &mut [f32],
        rows: usize,
        row_start: u32,
        adjusts: &[Adjust],
    ) -> Result<Vec<u8>, FormError> {
        check_finite(logits, rows, row_start)?;
        let rows = rows.max(1);
        for (section, adjust) in logits.chunks_exact_mut(rows).zip(adjusts) {
            adjust.apply(section, row_start);
        }
        self.encode_checked(logits, rows, row_start)
    }

    /// The encoding of finite or `−∞` logits.
    fn encode_checked(
        &self,
        logits: &[f32],
        rows: usize,
        row_start: u32,
    ) -> Result<Vec<u8>, FormError> {
        let rows = rows.max(1);
        if *self == Form::Logits {
            return Ok(encode_f32(logits));
        }
        if let Form::Sample { noise, .. } = self {
            noise.check(logits.len() / rows)?;
        }
        let mut out = Vec::new();
        for (v, section) in logits.chunks_exact(rows).enumerate() {
            let answer = match self {
                Form::Logits => unreachable!("handled above"),
                Form::TopK { k, temperature } => {
                    TopK::compute_at(section, row_start, *k, *temperature)
                }
                Form::Sample { temperature, noise } => {
                    let (seed, index) = noise.of(v);
                    slice_winner(section, row_start, *temperature, seed, index)
                }
                Form::Tokens {
                    tokens,
                    temperature,
                } => TopK {
                    max_logit: section.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                    log_sum_exp: log_sum_exp(section, *temperature) as f32,
                    entries: tokens
                        .iter()
                        .filter_map(|&id| {
                            let row = id.checked_sub(row_start)? as usize;
                            section.get(row).map(|&z| (id, z))
                        })
                        .collect(),
                },
            };
            // A slice whose every row is `−∞` (outside the allowed set) has the log-sum-exp `−∞`.
            let masked = answer.max_logit == f32::NEG_INFINITY;
            if !answer.log_sum_exp.is_finite() && !masked {
                return Err(refuse(
                    ErrorCode::NonFinite,
                    format!(
                        "ln Σ exp(z/T) of vector {v} overflows f32 (largest logit {} at \
                         temperature {}): use a larger temperature or smaller hidden values",
                        answer.max_logit,
                        self.temperature().unwrap_or(1.0)
                    ),
                ));
            }
            answer.encode_into(&mut out);
        }
        Ok(out)
    }

    /// The temperature of a section form.
    fn temperature(&self) -> Option<f32> {
        match self {
            Form::Logits => None,
            Form::TopK { temperature, .. }
            | Form::Sample { temperature, .. }
            | Form::Tokens { temperature, .. } => Some(*temperature),
        }
    }

    /// The query that asks for this form (empty for all logits); [`Form::parse`] reads it back.
    pub fn query(&self) -> String {
        match self {
            Form::Logits => String::new(),
            Form::TopK { k, temperature } => format!("top_k={k}&temperature={temperature}"),
            Form::Sample { temperature, noise } => {
                format!("temperature={temperature}&{}", noise.query())
            }
            Form::Tokens {
                tokens,
                temperature,
            } => {
                let ids: Vec<String> = tokens.iter().map(u32::to_string).collect();
                format!("tokens={}&temperature={temperature}", ids.join(","))
            }
        }
    }

    /// The value of the `X-Reply` header naming the form.
    pub fn name(&self) -> &'static str {
        match self {
            Form::Logits => "logits",
            Form::TopK { .. } => "top_k",
            Form::Sample { .. } => "sample",
            Form::Tokens { .. } => "tokens",
        }
    }
}

fn parse_temperature(value: &str) -> Result<f32, FormError> {
    let t = value
        .parse::<f32>()
        .ok()
        .and_then(|t| check_temperature(t).ok());
    t.ok_or_else(|| {
        refuse(
            ErrorCode::BadTemperature,
            temperature_error(format_args!("{value:?}")),
        )
    })
}

fn parse_seed(s: &str) -> Result<u64, FormError> {
    s.parse().map_err(|_| {
        refuse(
            ErrorCode::BadSeed,
            format!("seed must be an integer from 0 to 2^64 − 1, not {s:?}"),
        )
    })
}

/// `S:V,S:V,…`: 1 to `MAX_BATCH` pairs of a seed (u64) and a vector index (u32).
fn parse_noise(list: &str) -> Result<Vec<(u64, u32)>, FormError> {
    let pairs: Option<Vec<(u64, u32)>> = list
        .split(',')
        .map(|p| {
            let (s, v) = p.split_once(':')?;
            Some((s.parse().ok()?, v.parse().ok()?))
        })
        .collect();
    match pairs {
        Some(p) if (1..=MAX_BATCH).contains(&p.len()) => Ok(p),
        _ => Err(refuse(
            ErrorCode::BadSeed,
            format!(
                "seeds must be 1 to {MAX_BATCH} comma-separated SEED:VECTOR pairs (a u64 and a \
                 u32), not {list:?}"
            ),
        )),
    }
}

/// `adjust=LEN`: the section's bytes, from 1 to [`MAX_ADJUST_BYTES`].
fn parse_adjust_len(value: &str) -> Result<usize, FormError> {
    match value.parse::<usize>() {
        Ok(len) if (1..=MAX_ADJUST_BYTES).contains(&len) => Ok(len),
        _ => Err(refuse(
            ErrorCode::BadAdjust,
            format!(
                "adjust must be the byte length of the adjustments at the end of the body, from \
                 1 to {MAX_ADJUST_BYTES}, not {value:?}"
            ),
        )),
    }
}

/// `ID,ID,…`: 1 to [`MAX_TOP_K`] token ids.
fn parse_tokens(value: &str) -> Result<Vec<u32>, FormError> {
    let ids: Result<Vec<u32>, _> = value.split(',').map(str::parse).collect();
    match ids {
        Ok(ids) if (1..=MAX_TOP_K).contains(&ids.len()) => Ok(ids),
        _ => Err(refuse(
            ErrorCode::BadTokens,
            format!("tokens must be 1 to {MAX_TOP_K} comma-separated token ids"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<Form, FormError> {
        parse_query(query).map(|q| q.form)
    }

    fn parse_query(query: &str) -> Result<Query, FormError> {
        Query::parse(
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap_or((p, ""))),
        )
    }

    #[test]
    fn queries_choose_one_form() {
        assert_eq!(parse(""), Ok(Form::Logits));
        assert_eq!(parse("precision=int8"), Ok(Form::Logits));
        assert_eq!(
            parse("top_k=5"),
            Ok(Form::TopK {
                k: 5,
                temperature: 1.0
            })
        );
        assert_eq!(
            parse("top_k=5&temperature=0.5"),
            Ok(Form::TopK {
                k: 5,
                temperature: 0.5
            })
        );
        assert_eq!(
            parse("temperature=2&seed=18446744073709551615"),
            Ok(Form::Sample {
                temperature: 2.0,
                noise: Noise::Seed(u64::MAX)
            })
        );
        assert_eq!(
            parse("tokens=3,1,4"),
            Ok(Form::Tokens {
                tokens: vec![3, 1, 4],
                temperature: 1.0
            })
        );
    }

    #[test]
    fn a_form_reads_back_from_its_query() {
        for form in [
            Form::Logits,
            Form::TopK {
                k: 7,
                temperature: 0.3,
            },
            Form::Sample {
                temperature: 0.01,
                noise: Noise::Seed(u64::MAX),
            },
            Form::Tokens {
                tokens: vec![0, 262_143],
                temperature: 2.5,
            },
            Form::Sample {
                temperature: 0.8,
                noise: Noise::Each(vec![(u64::MAX, 0), (7, 3)]),
            },
        ] {
            assert_eq!(parse(&form.query()), Ok(form.clone()));
            for precision in [Precision::Exact, Precision::Int8] {
                for adjust in [None, Some(1), Some(MAX_ADJUST_BYTES)] {
                    let query = Query {
                        form: form.clone(),
                        precision,
                        adjust,
                    };
                    assert_eq!(parse_query(&query.to_query()), Ok(query));
                }
            }
        }
        let int8 = Query::plain(Form::Logits, Precision::Int8);
        assert_eq!(int8.to_query(), "precision=int8");
        let adjusted = Query {
            adjust: Some(40),
            ..Query::plain(Form::Logits, Precision::Exact)
        };
        assert_eq!(adjusted.to_query(), "adjust=40");
    }

    #[test]
    fn bad_queries_name_their_parameter() {
        for (query, code) in [
            ("top_k=0", "bad_top_k"),
            ("top_k=5&top_k=6", "bad_query"),
            ("temperature=0&seed=1", "bad_temperature"),
            ("temperature=-1&seed=1", "bad_temperature"),
            ("temperature=NaN&seed=1", "bad_temperature"),
            ("temperature=inf&seed=1", "bad_temperature"),
            ("temperature=1001&seed=1", "bad_temperature"),
            ("temperature=0.0099&seed=1", "bad_temperature"),
            ("temperature=1e-39&seed=1", "bad_temperature"),
            ("temperature=abc&top_k=1", "bad_temperature"),
            ("precision=int8&precision=bogus", "bad_query"),
            ("precision=int8&precision=int8", "bad_query"),
            ("foo=1&foo=2", "bad_query"),
            ("temperature=1&seed=1&seed=2", "bad_query"),
            ("precision=fp16", "bad_precision"),
            ("temperature=1&seed=1&seeds=1:0", "bad_query"),
            ("seeds=1:0", "bad_query"),
            ("temperature=1&seeds=", "bad_seed"),
            ("temperature=1&seeds=1", "bad_seed"),
            ("temperature=1&seeds=1:0,2:x", "bad_seed"),
            (
                "temperature=1&seeds=1:0,1:1,1:2,1:3,1:4,1:5,1:6,1:7,1:8",
                "bad_seed",
            ),
            ("top_k=3&seeds=1:0&temperature=1", "bad_query"),
            ("temperature=1&seed=-1", "bad_seed"),
            ("temperature=1", "bad_query"),
            ("seed=1", "bad_query"),
            ("top_k=5&seed=1&temperature=1", "bad_query"),
            ("tokens=5&top_k=1", "bad_query"),
            ("tokens=", "bad_tokens"),
            ("tokens=1,,2", "bad_tokens"),
            ("tokens=4294967296", "bad_tokens"),
            ("adjust=0", "bad_adjust"),
            ("adjust=-1", "bad_adjust"),
            ("adjust=", "bad_adjust"),
            ("top_k=1&adjust=1048577", "bad_adjust"),
            ("adjust=4&adjust=4", "bad_query"),
        ] {
            assert_eq!(
                parse(query).map_err(|e| e.code.name()),
                Err(code),
                "{query}"
            );
        }
        let many = vec!["1"; MAX_TOP_K + 1].join(",");
        assert_eq!(
            parse(&format!("tokens={many}")).map_err(|e| e.code.name()),
            Err("bad_tokens")
        );
    }

    #[test]
    fn each_vector_keeps_the_noise_it_has_alone() {
        // Vector 1 of a batch asked with seed 9, and vector 0 asked alone with seed 4, merged.
        let rows = [[0.5f32, 1.0, 0.9], [2.0, 2.1, 1.9]];
        let each = Form::Sample {
            temperature: 1.0,
            noise: Noise::Each(vec![(9, 1), (4, 0)]),
        };
        let merged = each.encode(&rows.concat(), 3, 10).unwrap();
        let batch = Form::Sample {
            temperature: 1.0,
            noise: Noise::Seed(9),
        };
        let alone = Form::Sample {
            temperature: 1.0,
            noise: Noise::Seed(4),
        };
        let first = TopK::decode_all(&batch.encode(&[[0.0; 3], rows[0]].concat(), 3, 10).unwrap())
            .unwrap()
            .remove(1);
        let second = TopK::decode_all(&alone.encode(&rows[1], 3, 10).unwrap()).unwrap();
        assert_eq!(
            TopK::decode_all(&merged).unwrap(),
            vec![first, second[0].clone()]
        );
        assert_eq!(
            each.encode(&rows[0], 3, 10).unwrap_err().code,
            ErrorCode::BadSeed
        );
    }

    #[test]
    fn queries_carry_the_precision() {
        let q = |s: &str| Query::parse(s.split('&').filter_map(|p| p.split_once('=')));
        assert_eq!(q("top_k=2").unwrap().precision, Precision::Exact);
        assert_eq!(q("precision=int8").unwrap().precision, Precision::Int8);
        assert_eq!(
            q("precision=exact&top_k=3").unwrap().form,
            parse("top_k=3").unwrap()
        );
    }

    #[test]
    fn answers_that_are_not_finite_are_refused_naming_where() {
        // Finite hidden values can overflow f32 in the dot products: NaN or ±inf logits.
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let logits = [1.0f32, 2.0, 3.0, 4.0, bad, 6.0]; // two vectors of three rows
            for form in [Form::Logits, parse("top_k=1").unwrap()] {
                let e = form.encode(&logits, 3, 100).unwrap_err();
                assert_eq!(e.code, ErrorCode::NonFinite);
                assert!(e.detail.contains("token 101 (vector 1)"), "{}", e.detail);
            }
        }
        // Finite logits whose ln Σ exp(z/T) does not fit an f32 at the smallest temperature.
        let huge = [3.0e38f32, 1.0];
        let form = parse("temperature=0.01&seed=1").unwrap();
        let e = form.encode(&huge, 2, 0).unwrap_err();
        assert_eq!(e.code, ErrorCode::NonFinite);
        assert!(e.detail.contains("vector 0"), "{}", e.detail);
        // The largest ordinary logits at the smallest temperature are answered.
        let ok = parse("top_k=1&temperature=0.01").unwrap();
        let sections = TopK::decode_all(&ok.encode(&[1.0e3, -1.0e3], 2, 0).unwrap()).unwrap();
        assert!(sections[0].log_sum_exp.is_finite());
    }

    #[test]
    fn token_sections_hold_the_asked_tokens_of_the_slice_in_order() {
        let logits = [0.5f32, 1.0, 2.0, 8.0, 9.0, 7.0]; // two vectors of three rows
        let form = Form::Tokens {
            tokens: vec![12, 99, 10],
            temperature: 1.0,
        };
        let got = TopK::decode_all(&form.encode(&logits, 3, 10).unwrap()).unwrap();
        assert_eq!(got[0].entries, vec![(12, 2.0), (10, 0.5)]);
        assert_eq!(got[1].entries, vec![(12, 7.0), (10, 8.0)]);
        assert_eq!(got[1].max_logit, 9.0);
    }

    #[test]
    fn top_k_sections_hold_the_best_logits_and_the_log_sum_exp_at_t() {
        // Checked against a direct f64 computation, not against TopK's own code.
        let logits = [0.5f32, 3.0, -1.0, 3.0, 2.0];
        for temperature in [1.0f32, 2.0] {
            let form = Form::TopK { k: 2, temperature };
            let sections = TopK::decode_all(&form.encode(&logits, 5, 7).unwrap()).unwrap();
            let section = &sections[0];
            assert_eq!(section.max_logit, 3.0);
            assert_eq!(section.entries, [(8, 3.0), (10, 3.0)], "T = {temperature}");
            let want = logits
                .iter()
                .map(|&z| (f64::from(z) / f64::from(temperature)).exp())
                .sum::<f64>()
                .ln();
            assert!(
                (f64::from(section.log_sum_exp) - want).abs() < 1e-6,
                "T = {temperature}: {} against {want}",
                section.log_sum_exp
            );
        }
    }
}

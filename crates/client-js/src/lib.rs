//! The merge and sampling math of `cobordism_protocol::sampling` for JavaScript: the functions
//! `@cobordism/client` (packages/client) calls on the shards' answers, compiled to wasm so that
//! a JS caller gets the same bits as the Rust CLI by construction (one implementation).
//!
//! Every function takes the shards' sections *for one hidden vector*, concatenated in shard
//! order (each section is self-delimiting: `u32 k | f32 max | f32 lse | k × (u32 id, f32 z)`).
//! Bad input throws a JS `Error` that says what was wrong; nothing panics.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use cobordism_protocol::sampling::{self, Part, Sampling};
use cobordism_protocol::wire::header;
use cobordism_protocol::{Form, Noise, Precision, Query, Tile, TopK};
use wasm_bindgen::prelude::*;

fn sections(bytes: &[u8], shards: usize) -> Result<Vec<TopK>, JsError> {
    let sections = TopK::decode_all(bytes).map_err(|e| JsError::new(&e.to_string()))?;
    if sections.len() != shards {
        return Err(JsError::new(&format!(
            "{} sections for {shards} shards",
            sections.len()
        )));
    }
    Ok(sections)
}

/// The names of the answer headers a client checks (`cobordism_protocol::wire`), in this order:
/// shard index, shard count, vocabulary, first row, row count, batch, manifest version.
#[wasm_bindgen(js_name = answerHeaderNames)]
pub fn answer_header_names() -> Vec<String> {
    [
        header::SHARD_INDEX,
        header::SHARD_COUNT,
        header::VOCAB,
        header::ROW_START,
        header::ROW_COUNT,
        header::BATCH,
        header::MANIFEST_VERSION,
    ]
    .map(String::from)
    .to_vec()
}

/// The query string (without `?`) of a request for the reply form given by its values, written
/// by `cobordism_protocol::Query::to_query`: `tokens` (non-empty: their logits), else `topK`
/// (non-zero: the top K), else `seeds` (non-empty: a Gumbel-max sample; one seed without
/// `vectors` is `seed=S`, else vector `j` draws `(seeds[j], vectors[j])`), else all logits.
/// `temperature` is the form's (absent: 1); `int8` asks for the int8 kernels.
#[wasm_bindgen(js_name = queryString)]
pub fn query_string(
    tokens: Vec<u32>,
    top_k: u32,
    seeds: Vec<u64>,
    vectors: Vec<u32>,
    temperature: Option<f32>,
    int8: bool,
) -> Result<String, JsError> {
    let temperature = temperature.unwrap_or(1.0);
    let form = if !tokens.is_empty() {
        Form::Tokens {
            tokens,
            temperature,
        }
    } else if top_k > 0 {
        Form::TopK {
            k: top_k as usize,
            temperature,
        }
    } else if let ([seed], []) = (seeds.as_slice(), vectors.as_slice()) {
        Form::Sample {
            temperature,
            noise: Noise::Seed(*seed),
        }
    } else if !seeds.is_empty() {
        if seeds.len() != vectors.len() {
            let counts = (seeds.len(), vectors.len());
            return Err(JsError::new(&format!(
                "{} seeds for {} vectors",
                counts.0, counts.1
            )));
        }
        Form::Sample {
            temperature,
            noise: Noise::Each(seeds.into_iter().zip(vectors).collect()),
        }
    } else {
        Form::Logits
    };
    let precision = if int8 {
        Precision::Int8
    } else {
        Precision::Exact
    };
    Ok(Query { form, precision }.to_query())
}

/// The name of the header that carries a caller's session key (`cobordism_protocol::wire`): with
/// object residency, which replica of each shard serves it.
#[wasm_bindgen(js_name = sessionHeaderName)]
pub fn session_header_name() -> String {
    header::SESSION.into()
}

/// A sampled token: `[token, logit, logprob]`.
fn triple(s: sampling::Sampled) -> Vec<f64> {
    vec![f64::from(s.token), f64::from(s.logit), s.logprob]
}

/// Plain sampling from the shards' `?temperature=T&seed=S` winners of vector `vector`:
/// `[token, logit, logprob]`.
#[wasm_bindgen(js_name = mergeWinners)]
pub fn merge_winners(
    sections_bytes: &[u8],
    shards: usize,
    temperature: f32,
    seed: u64,
    vector: u32,
) -> Result<Vec<f64>, JsError> {
    let s = sampling_of(temperature, seed, 0, 0.0, 0.0)?;
    let all = sections(sections_bytes, shards)?;
    sampling::merge_winners(&all, &s, vector)
        .map(triple)
        .ok_or_else(|| JsError::new("no shard sent a winner"))
}

/// Top-k / top-p / min-p sampling from the shards' `?top_k=K&temperature=T` sections of vector
/// `vector` (`rows[i]`: shard i's row count; a filter is off when its value is 0):
/// `[token, logit, logprob]`. Throws an error starting with `undecided:` when the union of the
/// top-K cannot decide the filters (ask again with a larger K or all logits).
#[allow(clippy::too_many_arguments)]
#[wasm_bindgen]
pub fn sample(
    sections_bytes: &[u8],
    rows: &[u32],
    temperature: f32,
    seed: u64,
    top_k: u32,
    top_p: f64,
    min_p: f64,
    vector: u32,
) -> Result<Vec<f64>, JsError> {
    let all = sections(sections_bytes, rows.len())?;
    let parts: Vec<Part> = all
        .iter()
        .zip(rows)
        .map(|(section, &rows)| Part {
            section,
            rows: rows as usize,
        })
        .collect();
    let s = sampling_of(temperature, seed, top_k, top_p, min_p)?;
    sampling::sample(&parts, &s, vector)
        .map(triple)
        .map_err(|e| JsError::new(&format!("undecided: {}", e.0)))
}

/// Top-k / top-p / min-p sampling from all the logits of vector `vector` (the fallback when the
/// shards' top-K cannot decide): `[token, logit, logprob]`.
#[wasm_bindgen(js_name = sampleAll)]
pub fn sample_all(
    logits: &[f32],
    temperature: f32,
    seed: u64,
    top_k: u32,
    top_p: f64,
    min_p: f64,
    vector: u32,
) -> Result<Vec<f64>, JsError> {
    let s = sampling_of(temperature, seed, top_k, top_p, min_p)?;
    sampling::sample_all(logits, &s, vector)
        .map(triple)
        .map_err(|e| JsError::new(&e.to_string()))
}

/// Throws unless the answers' headers (`X-Shard-Index`, `X-Shard-Count`, `X-Row-Start`,
/// `X-Row-Count`, `X-Vocab`, answer `i` from the endpoint of shard `i`) tile the whole
/// vocabulary; the error names the rows no answer covers (`cobordism_protocol::check_tiling`).
#[wasm_bindgen(js_name = checkTiling)]
pub fn check_tiling(
    index: &[u32],
    shard_count: &[u32],
    row_start: &[u32],
    row_count: &[u32],
    vocab: &[u32],
) -> Result<(), JsError> {
    let n = index.len();
    if [
        shard_count.len(),
        row_start.len(),
        row_count.len(),
        vocab.len(),
    ] != [n; 4]
    {
        return Err(JsError::new(
            "checkTiling: the five arrays differ in length",
        ));
    }
    let tiles: Vec<Tile> = (0..n)
        .map(|i| Tile {
            index: index[i],
            shard_count: shard_count[i],
            row_start: row_start[i],
            row_count: row_count[i],
            vocab: vocab[i],
        })
        .collect();
    cobordism_protocol::check_tiling(&tiles).map_err(|e| JsError::new(&e.detail))
}

/// Whether a request that got `status` is worth sending again (`shardError`: the body was the
/// shard's JSON error; `retryAfter`: the answer had `Retry-After`).
#[wasm_bindgen(js_name = worthRetrying)]
pub fn worth_retrying(status: u16, shard_error: bool, retry_after: bool) -> bool {
    cobordism_protocol::worth_retrying(status, shard_error, retry_after)
}

/// Throws unless the sampling settings are valid (a filter off when its value is 0): the
/// client checks them before it sends anything.
#[wasm_bindgen(js_name = checkSampling)]
pub fn check_sampling(temperature: f32, top_k: u32, top_p: f64, min_p: f64) -> Result<(), JsError> {
    sampling_of(temperature, 0, top_k, top_p, min_p).map(drop)
}

/// The sampling settings, a filter off when its value is 0, validated.
fn sampling_of(
    temperature: f32,
    seed: u64,
    top_k: u32,
    top_p: f64,
    min_p: f64,
) -> Result<Sampling, JsError> {
    let s = Sampling {
        temperature,
        seed,
        top_k: (top_k > 0).then_some(top_k as usize),
        top_p: (top_p > 0.0).then_some(top_p),
        min_p: (min_p > 0.0).then_some(min_p),
    };
    s.validate().map_err(|e| JsError::new(&e))?;
    Ok(s)
}

/// The merged top-`k` of the shards' `?top_k` sections as one section (its `max` and
/// log-sum-exp over the whole vocabulary), in the same wire format.
#[wasm_bindgen(js_name = mergeTopK)]
pub fn merge_top_k(sections_bytes: &[u8], shards: usize, k: usize) -> Result<Vec<u8>, JsError> {
    let all = sections(sections_bytes, shards)?;
    let refs: Vec<&TopK> = all.iter().collect();
    let merged = TopK {
        max_logit: all
            .iter()
            .map(|t| t.max_logit)
            .fold(f32::NEG_INFINITY, f32::max),
        log_sum_exp: sampling::merge_log_sum_exp(all.iter().map(|t| f64::from(t.log_sum_exp)))
            as f32,
        entries: sampling::merge_top_k(&refs, k),
    };
    let mut out = Vec::new();
    merged.encode_into(&mut out);
    Ok(out)
}

/// The global `ln Σ exp(z / T)` from the shards' sections (any form).
#[wasm_bindgen(js_name = logSumExp)]
pub fn log_sum_exp(sections_bytes: &[u8], shards: usize) -> Result<f64, JsError> {
    let all = sections(sections_bytes, shards)?;
    Ok(sampling::merge_log_sum_exp(
        all.iter().map(|t| f64::from(t.log_sum_exp)),
    ))
}

/// Log-probabilities of `tokens` from the shards' `?tokens=…&temperature=T` sections, in the
/// order asked; NaN for a token no shard sent.
#[wasm_bindgen]
pub fn logprobs(
    sections_bytes: &[u8],
    shards: usize,
    tokens: &[u32],
    temperature: f32,
) -> Result<Vec<f64>, JsError> {
    let all = sections(sections_bytes, shards)?;
    Ok(sampling::logprobs(&all, tokens, temperature)
        .into_iter()
        .map(|l| l.unwrap_or(f64::NAN))
        .collect())
}

//! `cobordism_protocol` for JavaScript: the wire contract `@cobordism/client` (packages/client)
//! follows — the route, the limits, the query strings, the answer headers, the sections of an
//! answer, the top-K ladder and the retry rules — and the merge and sampling math it runs on the
//! shards' answers, compiled to wasm so that a JS caller asks what the Rust CLI asks and gets the
//! same bits by construction (one implementation).
//!
//! The merge functions take the shards' sections *for one hidden vector*, concatenated in shard
//! order ([`section_bounds`] finds them in an answer). Bad input throws a JS `Error` that says
//! what was wrong; nothing panics.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use cobordism_protocol::adjust::{self, Given};
use cobordism_protocol::sampling::{self, Part, Sampled, Sampling};
use cobordism_protocol::wire::header;
use cobordism_protocol::{Form, Noise, Precision, Query, Tile, TopK};
use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;

/// The shard Worker's lm-head path (`/cobordism-lm-head`).
#[wasm_bindgen]
pub fn route() -> String {
    cobordism_protocol::ROUTE.into()
}

/// The path that starts a shard loading its slice (`/cobordism-lm-head/warm`).
#[wasm_bindgen(js_name = warmRoute)]
pub fn warm_route() -> String {
    cobordism_protocol::WARM_ROUTE.into()
}

/// Most hidden vectors in one request.
#[wasm_bindgen(js_name = maxBatch)]
pub fn max_batch() -> usize {
    cobordism_protocol::MAX_BATCH
}

/// Largest K of a top-K request, and most tokens of a log-probability request.
#[wasm_bindgen(js_name = maxTopK)]
pub fn max_top_k() -> usize {
    cobordism_protocol::MAX_TOP_K
}

/// Retries after the first attempt unless the caller says otherwise.
#[wasm_bindgen(js_name = defaultRetries)]
pub fn default_retries() -> u32 {
    cobordism_protocol::DEFAULT_RETRIES
}

/// The milliseconds to wait before retry `retry` (1: the first retry): the answer's
/// `Retry-After` value when it is a number of seconds (at most 30), else a backoff of 200 ms
/// doubling per retry (`cobordism_protocol::retry_wait`).
#[wasm_bindgen(js_name = retryWaitMs)]
pub fn retry_wait_ms(retry: u32, retry_after: Option<String>) -> f64 {
    let after = retry_after
        .as_deref()
        .and_then(cobordism_protocol::retry_after);
    cobordism_protocol::retry_wait(retry, after).as_secs_f64() * 1000.0
}

/// The K values a draw with top-k, top-p or min-p asks the shards for, in order, until their
/// top-K decides the filters (`topK`: its top-k filter, 0 for none); then all the logits
/// (`cobordism_protocol::top_k_ladder`).
#[wasm_bindgen(js_name = topKLadder)]
pub fn top_k_ladder(top_k: u32) -> Vec<u32> {
    let filter = (top_k > 0).then_some(top_k as usize);
    cobordism_protocol::top_k_ladder(filter)
        .into_iter()
        .map(|k| k as u32)
        .collect()
}

/// Where the `n` sections of a section-form answer lie: `n + 1` byte offsets, section `v` from
/// `offsets[v]` to `offsets[v + 1]`. Throws unless `bytes` is exactly `n` well-formed sections.
#[wasm_bindgen(js_name = sectionBounds)]
pub fn section_bounds(bytes: &[u8], n: usize) -> Result<Vec<u32>, JsError> {
    let all = decoded(bytes)?;
    if all.len() != n {
        let msg = format!("{} sections for {n} hidden vectors", all.len());
        return Err(JsError::new(&msg));
    }
    // Each section's length is that of its encoding: the layout stays the protocol's.
    let mut encoded = Vec::with_capacity(bytes.len());
    let mut bounds = vec![0];
    for section in &all {
        section.encode_into(&mut encoded);
        bounds.push(encoded.len() as u32);
    }
    Ok(bounds)
}

/// Every section of `bytes`, or the decoder's error.
fn decoded(bytes: &[u8]) -> Result<Vec<TopK>, JsError> {
    TopK::decode_all(bytes).map_err(|e| JsError::new(&e.to_string()))
}

/// The sections of one vector, one per shard.
fn sections(bytes: &[u8], shards: usize) -> Result<Vec<TopK>, JsError> {
    let sections = decoded(bytes)?;
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
/// `temperature` is the form's (absent: 1); `int8` asks for the int8 kernels; `adjust` is the
/// byte length of the adjustments' section at the end of the body (absent: none).
#[allow(clippy::too_many_arguments)]
#[wasm_bindgen(js_name = queryString)]
pub fn query_string(
    tokens: Vec<u32>,
    top_k: u32,
    seeds: Vec<u64>,
    vectors: Vec<u32>,
    temperature: Option<f32>,
    int8: bool,
    adjust: Option<u32>,
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
    let query = Query {
        adjust: adjust.map(|len| len as usize),
        ..Query::plain(form, precision)
    };
    Ok(query.to_query())
}

/// The record of one hidden vector's adjustments (`cobordism_protocol::adjust`: logit bias as
/// `biasTokens[i]` → `biasValues[i]`, the presence, frequency and repetition penalties over the
/// `history` of tokens so far, repeats counted, and the `allowed` tokens, absent for all), or
/// an empty array when they adjust nothing. Throws what the shards would refuse, but for token
/// ids past their vocabulary (which they name).
#[allow(clippy::too_many_arguments)]
#[wasm_bindgen(js_name = adjustRecord)]
pub fn adjust_record(
    presence: f32,
    frequency: f32,
    repetition: f32,
    bias_tokens: Vec<u32>,
    bias_values: Vec<f32>,
    history: Vec<u32>,
    allowed: Option<Vec<u32>>,
) -> Result<Vec<u8>, JsError> {
    if bias_tokens.len() != bias_values.len() {
        return Err(JsError::new(
            "adjustRecord: bias tokens and values differ in length",
        ));
    }
    let given = Given {
        bias: bias_tokens.into_iter().zip(bias_values).collect(),
        presence,
        frequency,
        repetition,
        history,
        allowed,
    };
    let adjust = given
        .adjust(u32::MAX)
        .map_err(|e| JsError::new(&e.to_string()))?;
    let mut record = Vec::new();
    if !adjust.is_none() {
        adjust.encode_record(&mut record);
    }
    Ok(record)
}

/// The adjustments' section of a request of `n` vectors whose records, in vector order, are
/// `records` (each from `adjustRecord`; `noAdjustRecord` for a vector without); it goes after
/// the hidden vectors, its length in the query's `adjust`.
#[wasm_bindgen(js_name = adjustSection)]
pub fn adjust_section(records: &[u8], n: usize) -> Vec<u8> {
    adjust::section(records, n)
}

/// The record of a vector that adjusts nothing (in a request where others do).
#[wasm_bindgen(js_name = noAdjustRecord)]
pub fn no_adjust_record() -> Vec<u8> {
    let mut record = Vec::new();
    adjust::Adjust::none().encode_record(&mut record);
    record
}

/// The name of the header that carries a caller's session key (`cobordism_protocol::wire`): with
/// object residency, which replica of each shard serves it.
#[wasm_bindgen(js_name = sessionHeaderName)]
pub fn session_header_name() -> String {
    header::SESSION.into()
}

/// A plain JS object with `fields`.
fn object(fields: &[(&str, JsValue)]) -> Result<JsValue, JsError> {
    let o = Object::new();
    for (name, value) in fields {
        Reflect::set(&o, &JsValue::from_str(name), value)
            .map_err(|_| JsError::new("cannot set a property of a new object"))?;
    }
    Ok(o.into())
}

/// `{ token, logit, logprob }`.
fn token(token: u32, logit: f32, logprob: f64) -> Result<JsValue, JsError> {
    object(&[
        ("token", token.into()),
        ("logit", logit.into()),
        ("logprob", logprob.into()),
    ])
}

/// A sampled token as `{ token, logit, logprob }`.
fn sampled(s: Sampled) -> Result<JsValue, JsError> {
    token(s.token, s.logit, s.logprob)
}

/// Plain sampling from the shards' `?temperature=T&seed=S` winners of vector `vector`:
/// `{ token, logit, logprob }`.
#[wasm_bindgen(js_name = mergeWinners)]
pub fn merge_winners(
    sections_bytes: &[u8],
    shards: usize,
    temperature: f32,
    seed: u64,
    vector: u32,
) -> Result<JsValue, JsError> {
    let s = sampling_of(temperature, seed, 0, 0.0, 0.0)?;
    let all = sections(sections_bytes, shards)?;
    let winner = sampling::merge_winners(&all, &s, vector);
    sampled(winner.ok_or_else(|| JsError::new("no shard sent a winner"))?)
}

/// Top-k / top-p / min-p sampling from the shards' `?top_k=K&temperature=T` sections of vector
/// `vector` (`rows[i]`: shard i's row count; a filter is off when its value is 0):
/// `{ token, logit, logprob }`, or `{ undecided: reason }` when the union of the top-K cannot
/// decide the filters (ask for the next K of `topKLadder`, or all logits: `sampleAll`).
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
) -> Result<JsValue, JsError> {
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
    match sampling::sample(&parts, &s, vector) {
        Ok(drawn) => sampled(drawn),
        Err(undecided) => object(&[("undecided", JsValue::from_str(&undecided.0))]),
    }
}

/// Top-k / top-p / min-p sampling from all the logits of vector `vector` (the fallback when the
/// shards' top-K cannot decide): `{ token, logit, logprob }`.
#[wasm_bindgen(js_name = sampleAll)]
pub fn sample_all(
    logits: &[f32],
    temperature: f32,
    seed: u64,
    top_k: u32,
    top_p: f64,
    min_p: f64,
    vector: u32,
) -> Result<JsValue, JsError> {
    let s = sampling_of(temperature, seed, top_k, top_p, min_p)?;
    let drawn =
        sampling::sample_all(logits, &s, vector).map_err(|e| JsError::new(&e.to_string()))?;
    sampled(drawn)
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

/// The merged top-`k` of the shards' `?top_k` sections of one vector, best first (ties by
/// token id), over the whole vocabulary: `{ entries: [{ token, logit, logprob }], logSumExp }`.
#[wasm_bindgen(js_name = topK)]
pub fn top_k(sections_bytes: &[u8], shards: usize, k: usize) -> Result<JsValue, JsError> {
    let all = sections(sections_bytes, shards)?;
    let refs: Vec<&TopK> = all.iter().collect();
    let lse = sampling::merge_log_sum_exp(all.iter().map(|t| f64::from(t.log_sum_exp)));
    let entries = Array::new();
    for (id, logit) in sampling::merge_top_k(&refs, k) {
        entries.push(&token(id, logit, f64::from(logit) - lse)?);
    }
    object(&[("entries", entries.into()), ("logSumExp", lse.into())])
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

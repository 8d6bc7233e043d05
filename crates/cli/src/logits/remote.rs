//! Answers of the shard Workers: the hidden vector is POSTed to `<endpoint>/cobordism-lm-head`
//! of every shard at once, in one reply form (all logits, top-K, the sample winner, token
//! scores), and each answer is checked against the manifest before it is used. [`warm`] asks
//! every shard to load its slice (`…/warm`) the same way.
//!
//! Checked: one endpoint per shard of the manifest (else the rows that would be missing are
//! named before anything is sent), status 200, `X-Shard-Index`, `X-Shard-Count`, `X-Vocab`,
//! `X-Row-Start` and `X-Row-Count` against the manifest, `X-Manifest-Version` (when the server
//! sends it) against the manifest's version, and the body: exactly `4 · row_count` bytes of
//! logits, or one well-formed section whose token ids lie in the shard's rows.
//!
//! Only what can succeed on retry is retried (`cobordism_protocol::worth_retrying`): connection
//! failures, timeouts, the shard's errors that carry `Retry-After` (after it), and 429/5xx that
//! are not the shard's JSON errors (after a short backoff), up to `--retries` times. Everything
//! else fails at once with the shard's `detail`: every 4xx, the 503s its operator must fix
//! (`auth_not_configured`, `misconfigured`, `manifest_missing`, …), a wrong answer.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use cobordism_protocol::adjust::{append_section, Adjust};
use cobordism_protocol::health::{HealthReport, PublicHealthReport, State, WarmReport};
use cobordism_protocol::wire::header;
use cobordism_protocol::{
    encode_f32, retry_wait, worth_retrying, Form, Manifest, Precision, Query, ShardEntry, TopK,
    MAX_TOP_K, ROUTE, WARM_ROUTE,
};
use serde::Deserialize;
use ureq::http::Response;
use ureq::{Agent, Body};

/// Most shards queried at the same time.
const MAX_PARALLEL: usize = 32;

/// How to talk to the shards.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bearer token.
    pub token: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub retries: u32,
    /// Exact or int8 (`?precision=int8`).
    pub precision: Precision,
    /// Session key (which replica, with object residency).
    pub session: Option<String>,
}

/// How one shard's request went.
#[derive(Clone, Debug)]
pub struct ShardTiming {
    /// Shard index.
    pub index: usize,
    /// Rows of the shard.
    pub rows: usize,
    /// Wall time of the successful attempt.
    pub http: Duration,
    /// The `compute` entry of the server's `Server-Timing`: present only where the server's
    /// clock moves while it computes (local workerd), absent on Cloudflare.
    pub compute_ms: Option<String>,
    /// The server's `X-Cache`.
    pub cache: Option<String>,
    /// Attempts made.
    pub attempts: u32,
}

/// One shard's checked answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Its rows' logits (the form [`Form::Logits`]).
    Logits(Vec<f32>),
    /// Its section (every other form).
    Section(TopK),
}

/// Queries every shard (shard `i` at `endpoints[i]`) for `form` with the logits adjusted by
/// `adjust` (sent after the vector, when it adjusts anything) and returns the answers in shard
/// order.
pub fn fetch(
    manifest: &Manifest,
    endpoints: &[String],
    hidden: &[f32],
    opts: &Options,
    (form, adjust): (&Form, &Adjust),
) -> Result<(Vec<Reply>, Vec<ShardTiming>)> {
    check_endpoint_count(manifest, endpoints.len())?;
    let agent = agent(opts);
    let mut body = encode_f32(hidden);
    let section = append_section(&mut body, std::slice::from_ref(adjust));
    let jobs: Vec<(&ShardEntry, String)> = manifest
        .shards
        .iter()
        .zip(endpoints)
        .map(|(s, e)| {
            let query = Query {
                form: form.clone(),
                precision: opts.precision,
                adjust: section,
            }
            .to_query();
            let sep = if query.is_empty() { "" } else { "?" };
            (s, format!("{}{ROUTE}{sep}{query}", e.trim_end_matches('/')))
        })
        .collect();
    let results = in_parallel(&jobs, |(s, url)| {
        fetch_shard(&agent, url, s, &body, manifest, opts, form)
    })?;
    Ok(every_shard(results)?.into_iter().unzip())
}

/// Asks every shard (shard `i` at `endpoints[i]`) to load its slice (`POST …/warm`) and returns
/// their states in shard order: `ready` (resident) or `loading`.
pub fn warm(manifest: &Manifest, endpoints: &[String], opts: &Options) -> Result<Vec<State>> {
    check_endpoint_count(manifest, endpoints.len())?;
    let agent = agent(opts);
    let jobs: Vec<(usize, String)> = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| (i, format!("{}{WARM_ROUTE}", e.trim_end_matches('/'))))
        .collect();
    let results = in_parallel(&jobs, |(index, url)| warm_at(&agent, *index, url, opts))?;
    every_shard(results)
}

/// Asks shard `index` at `endpoint` alone to load its slice, in its object replica `replica`
/// when given (object residency: `?replica=R`): its state.
pub fn warm_shard(
    index: usize,
    endpoint: &str,
    replica: Option<u32>,
    opts: &Options,
) -> Result<State> {
    let mut url = format!("{}{WARM_ROUTE}", endpoint.trim_end_matches('/'));
    if let Some(r) = replica {
        url.push_str(&format!("?replica={r}"));
    }
    warm_at(&agent(opts), index, &url, opts).map_err(anyhow::Error::msg)
}

/// `POST` to shard `index`'s warm route `url`, retried.
fn warm_at(agent: &Agent, index: usize, url: &str, opts: &Options) -> Result<State, String> {
    let name = format!("shard {index} ({url})");
    retried(&name, opts, || warm_once(agent, url, index, opts)).map(|(state, _)| state)
}

/// What a shard's `GET /healthz` said.
#[derive(Debug)]
pub enum Probe {
    /// No answer: the connection failed or timed out.
    Unreachable(String),
    /// An answer that is not a report: its status and body.
    Refused(u16, String),
    /// The report for callers without access (the token is missing or wrong): the state.
    Public(State),
    /// The whole report.
    Report(Box<HealthReport>),
}

/// `GET /healthz` of each `(endpoint, replica)` (`?replica=R` past replica 0), once each, in
/// that order.
pub fn healthz(targets: &[(String, u32)], opts: &Options) -> Result<Vec<Probe>> {
    let agent = agent(opts);
    in_parallel(targets, |(e, replica)| {
        let query = match replica {
            0 => String::new(),
            r => format!("?replica={r}"),
        };
        let url = format!("{}/healthz{query}", e.trim_end_matches('/'));
        let mut resp = match identified(agent.get(&url), opts).call() {
            Err(e) => return Probe::Unreachable(e.to_string()),
            Ok(r) => r,
        };
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string();
        let text = match body {
            Err(e) => return Probe::Unreachable(e.to_string()),
            Ok(t) => t,
        };
        if status != 200 {
            return Probe::Refused(status, text);
        }
        if let Ok(report) = serde_json::from_str::<HealthReport>(&text) {
            return Probe::Report(Box::new(report));
        }
        match serde_json::from_str::<PublicHealthReport>(&text) {
            Ok(public) => Probe::Public(public.state),
            Err(e) => Probe::Refused(status, format!("not a /healthz answer ({e}): {text}")),
        }
    })
}

fn agent(opts: &Options) -> Agent {
    Agent::config_builder()
        .timeout_global(Some(opts.timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// `f` of every job, at most [`MAX_PARALLEL`] threads at once, in the jobs' order.
fn in_parallel<J: Sync, R: Send>(jobs: &[J], f: impl Fn(&J) -> R + Sync) -> Result<Vec<R>> {
    let per_thread = jobs.len().div_ceil(MAX_PARALLEL).max(1);
    thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = jobs
            .chunks(per_thread)
            .map(|group| scope.spawn(move || group.iter().map(f).collect::<Vec<_>>()))
            .collect();
        let mut all = Vec::with_capacity(jobs.len());
        for h in handles {
            all.extend(h.join().map_err(|_| anyhow!("a request thread panicked"))?);
        }
        Ok(all)
    })
}

/// Every shard's result, or one error listing every shard that failed.
fn every_shard<T>(results: Vec<Result<T, String>>) -> Result<Vec<T>> {
    let total = results.len();
    let (done, failures): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    if !failures.is_empty() {
        let failures: Vec<String> = failures.into_iter().filter_map(Result::err).collect();
        bail!(
            "{} of {total} shards failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(done.into_iter().filter_map(Result::ok).collect())
}

/// One endpoint per shard, else an error naming the rows that no endpoint would answer for.
fn check_endpoint_count(manifest: &Manifest, given: usize) -> Result<()> {
    let count = manifest.shard_count;
    if given == count {
        return Ok(());
    }
    let what = match manifest.shards.get(given..) {
        Some(unserved) if !unserved.is_empty() => {
            let start = unserved[0].row_start;
            let shards = match unserved.len() {
                1 => format!("shard {given}"),
                _ => format!("shards {given}…{}", count - 1),
            };
            format!(
                ": {shards} would have no endpoint, and rows {start}..{} of {} no answer",
                manifest.vocab, manifest.vocab
            )
        }
        _ => String::new(),
    };
    bail!(
        "{given} endpoints given for the manifest's {count} shards{what}; give one per shard, \
         shard i at position i"
    )
}

/// The full logits from [`Form::Logits`] replies in shard order.
pub fn assemble(manifest: &Manifest, replies: Vec<Reply>) -> Vec<f32> {
    let mut logits = vec![0.0f32; manifest.vocab];
    for (s, reply) in manifest.shards.iter().zip(replies) {
        if let Reply::Logits(values) = reply {
            logits[s.row_start..s.row_start + s.row_count].copy_from_slice(&values);
        }
    }
    logits
}

/// The sections of section-form replies in shard order.
pub fn sections(replies: Vec<Reply>) -> Vec<TopK> {
    replies
        .into_iter()
        .filter_map(|r| match r {
            Reply::Section(t) => Some(t),
            Reply::Logits(_) => None,
        })
        .collect()
}

/// The outcome of one attempt that did not succeed.
enum Failure {
    /// Worth trying again, after `wait` if the server said so.
    Retry(String, Option<Duration>),
    /// The shard answered wrongly: no retry.
    Fatal(String),
}

fn fetch_shard(
    agent: &Agent,
    url: &str,
    shard: &ShardEntry,
    body: &[u8],
    manifest: &Manifest,
    opts: &Options,
    form: &Form,
) -> Result<(Reply, ShardTiming), String> {
    let name = format!("shard {} ({url})", shard.index);
    let ((reply, compute_ms, cache, http), attempts) = retried(&name, opts, || {
        let start = Instant::now();
        let (reply, compute_ms, cache) =
            attempt_once(agent, url, shard, body, manifest, opts, form)?;
        Ok((reply, compute_ms, cache, start.elapsed()))
    })?;
    let timing = ShardTiming {
        index: shard.index,
        rows: shard.row_count,
        http,
        compute_ms,
        cache,
        attempts,
    };
    Ok((reply, timing))
}

/// `once` until it succeeds, retrying what is worth it up to `opts.retries` times (after the
/// shard's `Retry-After`, else the protocol's backoff: `retry_wait`); the value and the attempts
/// it took.
fn retried<T>(
    name: &str,
    opts: &Options,
    mut once: impl FnMut() -> Result<T, Failure>,
) -> Result<(T, u32), String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match once() {
            Ok(value) => return Ok((value, attempt)),
            Err(Failure::Retry(_, wait)) if attempt <= opts.retries => {
                thread::sleep(retry_wait(attempt, wait));
            }
            Err(Failure::Retry(msg, _)) => {
                let plural = if attempt == 1 { "" } else { "s" };
                return Err(format!("{name}: {msg} (after {attempt} attempt{plural})"));
            }
            Err(Failure::Fatal(msg)) => return Err(format!("{name}: {msg}")),
        }
    }
}

/// `req` with the caller's token and session key, if any.
fn identified<B>(mut req: ureq::RequestBuilder<B>, opts: &Options) -> ureq::RequestBuilder<B> {
    if let Some(t) = &opts.token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if let Some(s) = &opts.session {
        req = req.header(header::SESSION, s);
    }
    req
}

fn warm_once(agent: &Agent, url: &str, index: usize, opts: &Options) -> Result<State, Failure> {
    let mut resp = identified(agent.post(url), opts)
        .send_empty()
        .map_err(transport)?;
    let status = resp.status().as_u16();
    if status != 200 && status != 202 {
        return Err(refused(&mut resp, status));
    }
    let text = resp
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .map_err(transport)?;
    let warming: WarmReport = serde_json::from_str(&text).map_err(|e| {
        Failure::Fatal(format!(
            "its answer is not a warm-up's ({e}): a shard older than this CLI? deploy the shards \
             again"
        ))
    })?;
    if warming.shard_index != index {
        return Err(Failure::Fatal(format!(
            "it is shard {}; the endpoints must be in shard order",
            warming.shard_index
        )));
    }
    Ok(warming.state)
}

type Answer = (Reply, Option<String>, Option<String>);

fn attempt_once(
    agent: &Agent,
    url: &str,
    shard: &ShardEntry,
    body: &[u8],
    manifest: &Manifest,
    opts: &Options,
    form: &Form,
) -> Result<Answer, Failure> {
    let (shard_count, vocab, version) = (manifest.shard_count, manifest.vocab, &manifest.version);
    let req = agent
        .post(url)
        .header(header::CONTENT_TYPE, "application/octet-stream");
    let mut resp = identified(req, opts).send(body).map_err(transport)?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(refused(&mut resp, status));
    }
    for (name, expected) in [
        (header::SHARD_INDEX, shard.index),
        (header::SHARD_COUNT, shard_count),
        (header::VOCAB, vocab),
        (header::ROW_START, shard.row_start),
        (header::ROW_COUNT, shard.row_count),
    ] {
        let got = header_value(&resp, name);
        if got.as_deref().and_then(|v| v.parse::<usize>().ok()) != Some(expected) {
            return Err(Failure::Fatal(format!(
                "header {name} is {}, the manifest says {expected} (is the endpoint serving \
                 another shard or another version?)",
                got.map_or("missing".into(), |v| format!("{v:?}"))
            )));
        }
    }
    if let Some(served) = header_value(&resp, header::MANIFEST_VERSION).filter(|v| v != version) {
        return Err(Failure::Fatal(format!(
            "it serves manifest version {served:?}, this manifest is {version:?} (upload these \
             slices, or use the manifest the shard was loaded from)"
        )));
    }
    let limit = match form {
        Form::Logits => 4 * shard.row_count,
        _ => 12 + 8 * MAX_TOP_K.min(shard.row_count),
    };
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(limit as u64 + 1)
        .read_to_vec()
        .map_err(transport)?;
    let reply = decode(form, shard, &bytes).map_err(Failure::Fatal)?;
    Ok((
        reply,
        header_value(&resp, header::SERVER_TIMING).and_then(|t| timing_entry(&t, "compute")),
        header_value(&resp, header::CACHE),
    ))
}

/// Checks a body against the form and the shard's rows.
fn decode(form: &Form, shard: &ShardEntry, bytes: &[u8]) -> Result<Reply, String> {
    if *form == Form::Logits {
        let expected = 4 * shard.row_count;
        if bytes.len() != expected {
            return Err(format!(
                "the body has {} bytes, expected {expected} (4 × {} rows)",
                bytes.len(),
                shard.row_count
            ));
        }
        let values = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        return Ok(Reply::Logits(values));
    }
    let mut sections = TopK::decode_all(bytes).map_err(|e| e.to_string())?;
    if sections.len() != 1 {
        return Err(format!("{} sections for one hidden vector", sections.len()));
    }
    let section = sections.remove(0);
    let rows = shard.row_start..shard.row_start + shard.row_count;
    if let Some((id, _)) = section
        .entries
        .iter()
        .find(|(id, _)| !rows.contains(&(*id as usize)))
    {
        return Err(format!("token {id} is outside the shard's rows {rows:?}"));
    }
    let most = match form {
        Form::TopK { k, .. } => (*k).min(shard.row_count),
        Form::Sample { .. } => 1,
        Form::Tokens { tokens, .. } => tokens.len(),
        Form::Logits => unreachable!("decoded above"),
    };
    if section.entries.len() > most {
        return Err(format!(
            "{} entries, at most {most} expected",
            section.entries.len()
        ));
    }
    Ok(Reply::Section(section))
}

/// A shard's JSON error.
#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    detail: String,
}

/// The failure for a non-200 answer: the shard's code and detail when it sent them, retried
/// only when [`worth_retrying`] says so; a 401 says how to give the token.
fn refused(resp: &mut Response<Body>, status: u16) -> Failure {
    let text = resp
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    let shard_error = serde_json::from_str::<ErrorBody>(&text).ok();
    let wait = retry_after(resp);
    let mut msg = match &shard_error {
        Some(e) => format!("HTTP {status} {}: {}", e.error, e.detail),
        None => format!("HTTP {status}: {}", text.trim()),
    };
    if status == 401 {
        msg.push_str(" (pass the shards' token with --token or COBORDISM_TOKEN)");
    }
    if worth_retrying(status, shard_error.is_some(), wait.is_some()) {
        Failure::Retry(msg, wait)
    } else {
        Failure::Fatal(msg)
    }
}

fn transport(e: ureq::Error) -> Failure {
    match e {
        ureq::Error::BodyExceedsLimit(_) => {
            Failure::Fatal("the body is longer than this reply form allows".into())
        }
        e => Failure::Retry(e.to_string(), None),
    }
}

fn header_value(resp: &Response<Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
}

/// The duration of entry `name` in a `Server-Timing` value (`load;dur=3, compute;dur=21`).
fn timing_entry(value: &str, name: &str) -> Option<String> {
    value.split(',').find_map(|entry| {
        let mut parts = entry.split(';').map(str::trim);
        (parts.next() == Some(name))
            .then(|| {
                parts
                    .find_map(|p| p.strip_prefix("dur="))
                    .map(str::to_string)
            })
            .flatten()
    })
}

/// The wait the answer's `Retry-After` asks for (`cobordism_protocol::retry_after`).
fn retry_after(resp: &Response<Body>) -> Option<Duration> {
    header_value(resp, header::RETRY_AFTER).and_then(|v| cobordism_protocol::retry_after(&v))
}

#[cfg(test)]
mod tests {
    use super::timing_entry;

    #[test]
    fn server_timing_entries() {
        let t = "load;dur=312, compute;dur=21";
        assert_eq!(timing_entry(t, "compute").as_deref(), Some("21"));
        assert_eq!(timing_entry(t, "load").as_deref(), Some("312"));
        assert_eq!(timing_entry("load;dur=0", "compute"), None);
        assert_eq!(timing_entry("compute;desc=x", "compute"), None);
    }
}

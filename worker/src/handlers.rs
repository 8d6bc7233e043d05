//! The two routes' work once method, configuration and token are checked.

use cobordism_protocol::{
    decode_hidden, encode_f32, parse_top_k, HiddenError, Precision, TopK, MAX_BATCH, MAX_HIDDEN,
};
use futures_util::StreamExt;
use serde_json::json;
use worker::{Env, Headers, Request, Response};

use crate::bodies::{self, too_large, Body};
use crate::config::Config;
use crate::error::ApiError;
use crate::resident::{self, wasm_memory_bytes};

/// Largest body any manifest allows: refused from its `Content-Length` before anything else.
const MAX_BODY_BYTES: usize = MAX_BATCH * 4 * MAX_HIDDEN;

/// The value of query parameter `name`, if given.
fn query(req: &Request, name: &str) -> Result<Option<String>, ApiError> {
    let url = req.url()?;
    let value = url
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned());
    Ok(value)
}

/// `?top_k=K`, if given.
fn top_k(req: &Request) -> Result<Option<usize>, ApiError> {
    query(req, "top_k")?
        .map(|v| parse_top_k(&v).map_err(|detail| ApiError::new(400, "bad_top_k", detail)))
        .transpose()
}

/// `?precision=exact|int8` (default exact).
fn precision(req: &Request) -> Result<Precision, ApiError> {
    query(req, "precision")?.map_or(Ok(Precision::Exact), |v| {
        Precision::parse(&v).map_err(|detail| ApiError::new(400, "bad_precision", detail))
    })
}

/// The declared `Content-Length`, if any.
fn content_length(req: &Request) -> Option<u64> {
    let declared = req.headers().get("Content-Length").ok().flatten()?;
    declared.trim().parse().ok()
}

/// Receives the body into `body`, stopping past `cap` bytes (413) and refusing a missing or
/// empty one (411).
async fn read_body(req: &mut Request, body: &Body, cap: usize) -> Result<(), ApiError> {
    if req.inner().body().is_some() {
        let mut stream = req.stream()?;
        while let Some(chunk) = stream.next().await {
            body.push(&chunk?, cap, js_sys::Date::now())?;
        }
    }
    if body.with(|b| b.is_empty())? {
        return Err(ApiError::new(
            411,
            "length_required",
            "send the hidden state as the body (little-endian f32)",
        ));
    }
    Ok(())
}

/// `POST /cobordism-lm-head`: the body is read only once the slice is resident, within the
/// exact cap for its hidden size and in one of the body slots the memory budget allows.
pub async fn lm_head(cfg: &Config, env: &Env, req: &mut Request) -> Result<Response, ApiError> {
    let top_k = top_k(req)?;
    let precision = precision(req)?;
    let declared = content_length(req);
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large(MAX_BODY_BYTES));
    }
    let residency = resident::ensure(cfg, env).await?;
    let (hidden, slots) =
        resident::with_resident(|r| (r.manifest.hidden, r.need.bodies_in_flight(cfg.budget_bytes)))
            .ok_or_else(replaced)?;
    let cap = MAX_BATCH * 4 * hidden;
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap));
    }
    let body = Body::acquire(slots as usize, cap, js_sys::Date::now())?;
    read_body(req, &body, cap).await?;
    let started = js_sys::Date::now();
    let answer = resident::with_resident(|r| {
        let (x, n) = body
            .with(|bytes| decode_hidden(bytes, r.manifest.hidden))?
            .map_err(|e| {
                let code = match e {
                    HiddenError::NonFinite { .. } => "non_finite",
                    _ => "bad_length",
                };
                ApiError::new(400, code, e.to_string())
            })?;
        let logits = r.logits(&x, n, precision)?;
        let rows = r.entry.row_count;
        let payload = match top_k {
            None => encode_f32(&logits),
            Some(k) => {
                let mut out = Vec::new();
                for section in logits.chunks_exact(rows) {
                    TopK::compute(section, r.entry.row_start as u32, k).encode_into(&mut out);
                }
                out
            }
        };
        Ok::<_, ApiError>((
            payload,
            n,
            r.entry.row_start,
            rows,
            r.manifest.version.clone(),
        ))
    });
    let (payload, n, row_start, rows, version) = answer.ok_or_else(replaced)??;
    drop(body);
    let compute_ms = js_sys::Date::now() - started;
    let headers = Headers::new();
    let set = |k: &str, v: &str| headers.set(k, v);
    set("Content-Type", "application/octet-stream")?;
    set("Cache-Control", "no-store")?;
    set("X-Shard-Index", &cfg.shard_index.to_string())?;
    set("X-Row-Start", &row_start.to_string())?;
    set("X-Row-Count", &rows.to_string())?;
    set("X-Batch", &n.to_string())?;
    set("X-Precision", precision.name())?;
    set("X-Manifest-Version", &version)?;
    set("X-Compute-Time-Ms", &format!("{compute_ms:.0}"))?;
    set("X-Cache", if residency.hit { "hit" } else { "miss" })?;
    set(
        "Server-Timing",
        &format!(
            "load;dur={:.0}, compute;dur={compute_ms:.0}",
            residency.load_ms
        ),
    )?;
    if let Some(k) = top_k {
        set("X-Top-K", &k.to_string())?;
    }
    Ok(Response::builder().with_headers(headers).fixed(payload))
}

fn replaced() -> ApiError {
    ApiError::unavailable("slice_loading", "the slice was replaced; retry", 1)
}

/// `GET /healthz` for callers without access: the state and nothing else.
pub fn healthz_public() -> Result<Response, ApiError> {
    Ok(Response::from_json(
        &json!({ "state": resident::state_name() }),
    )?)
}

/// `GET /healthz`: the shard's state, without loading anything.
pub fn healthz(cfg: &Config) -> Result<Response, ApiError> {
    let slice = resident::with_resident(|r| {
        json!({
            "row_start": r.entry.row_start,
            "row_count": r.entry.row_count,
            "dtype": r.manifest.dtype,
            "hidden": r.manifest.hidden,
            "vocab": r.manifest.vocab,
            "softcap": r.manifest.softcap,
            "checksum": r.entry.checksum,
            "manifest_version": r.manifest.version,
            "bytes": r.entry.bytes,
            "budget_need_bytes": r.need.least_budget(),
            "bodies_in_flight_max": r.need.bodies_in_flight(cfg.budget_bytes),
            "load_ms": r.load_ms,
        })
    });
    let body = json!({
        "shard_index": cfg.shard_index,
        "shard_count": cfg.shard_count,
        "model_prefix": cfg.prefix,
        "state": resident::state_name(),
        "resident": slice.is_some(),
        "slice": slice,
        "wasm_memory_bytes": wasm_memory_bytes(),
        "bodies_in_flight": bodies::in_flight(),
        "budget_bytes": cfg.budget_bytes,
        "backend": kquant::Backend::best().name(),
        "build_version": env!("CARGO_PKG_VERSION"),
    });
    Ok(Response::from_json(&body)?)
}

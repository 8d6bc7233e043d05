//! The two routes' work once method, configuration and token are checked.

use cobordism_protocol::{
    bearer_matches, decode_hidden, encode_f32, parse_top_k, HiddenError, Precision, TopK, MAX_BATCH,
};
use futures_util::StreamExt;
use serde_json::json;
use worker::{Env, Headers, Request, Response};

use crate::config::Config;
use crate::error::ApiError;
use crate::resident::{self, budget_need, wasm_memory_bytes};

/// Largest body read before the slice (and so `hidden`) is known: 8 vectors of 65536 floats.
const MAX_BODY_BYTES: usize = MAX_BATCH * 4 * 65536;

/// With an `AUTH_TOKEN` secret set, requires `Authorization: Bearer <token>`, compared in
/// constant time.
pub fn authorize(cfg: &Config, req: &Request) -> Result<(), ApiError> {
    let Some(expected) = &cfg.auth_token else {
        return Ok(());
    };
    let given = req.headers().get("Authorization").ok().flatten();
    if bearer_matches(given.as_deref(), expected) {
        Ok(())
    } else {
        Err(ApiError::new(
            401,
            "unauthorized",
            "a valid Authorization: Bearer token is required",
        )
        .with_header("WWW-Authenticate", "Bearer"))
    }
}

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

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        413,
        "payload_too_large",
        format!("the body is larger than {limit} bytes"),
    )
}

/// Reads the body, refusing a missing or empty one (411) and stopping past `limit` bytes (413).
async fn read_body(req: &mut Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    let declared = req.headers().get("Content-Length").ok().flatten();
    if let Some(n) = declared
        .as_deref()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        if n > limit {
            return Err(too_large(limit));
        }
    }
    let mut body = Vec::new();
    if req.inner().body().is_some() {
        let mut stream = req.stream()?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if body.len() + chunk.len() > limit {
                return Err(too_large(limit));
            }
            body.extend_from_slice(&chunk);
        }
    }
    if body.is_empty() {
        return Err(ApiError::new(
            411,
            "length_required",
            "send the hidden state as the body (little-endian f32)",
        ));
    }
    Ok(body)
}

/// `POST /cobordism-lm-head`.
pub async fn lm_head(cfg: &Config, env: &Env, req: &mut Request) -> Result<Response, ApiError> {
    let top_k = top_k(req)?;
    let precision = precision(req)?;
    let body = read_body(req, MAX_BODY_BYTES).await?;
    let residency = resident::ensure(cfg, env).await?;
    let started = js_sys::Date::now();
    let answer = resident::with_resident(|r| {
        let hidden = r.manifest.hidden;
        if body.len() > MAX_BATCH * 4 * hidden {
            return Err(too_large(MAX_BATCH * 4 * hidden));
        }
        let (x, n) = decode_hidden(&body, hidden).map_err(|e| {
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
        Ok((
            payload,
            n,
            r.entry.row_start,
            rows,
            r.manifest.version.clone(),
        ))
    });
    let (payload, n, row_start, rows, version) = answer.ok_or_else(|| {
        ApiError::unavailable("slice_loading", "the slice was replaced; retry", 1)
    })??;
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
            "budget_need_bytes": budget_need(&r.manifest, &r.entry),
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
        "budget_bytes": cfg.budget_bytes,
        "backend": kquant::Backend::best().name(),
        "build_version": env!("CARGO_PKG_VERSION"),
    });
    Ok(Response::from_json(&body)?)
}

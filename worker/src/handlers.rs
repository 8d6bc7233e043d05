//! The two routes' work once method, access and settings are checked.

use std::rc::Rc;
use std::time::Duration;

use cobordism_protocol::{max_body_bytes, Form, Query, MAX_HIDDEN};
use cobordism_shard::{
    declared_length, replaced, too_large, unreadable, Body, BodyPool, Coalescer, Settings, Shard,
    ShardError,
};
use futures_util::StreamExt;
use serde_json::json;
use worker::{Delay, Env, Headers, Request, Response};

use crate::error::ApiError;
use crate::r2::R2;

/// Largest body any manifest allows: refused from its `Content-Length` before anything else.
const MAX_BODY_BYTES: usize = max_body_bytes(MAX_HIDDEN as u64) as usize;

thread_local! {
    /// This isolate's slice.
    static SHARD: Rc<Shard> = Rc::new(Shard::new());
    /// This isolate's requests waiting for a pass.
    static PASSES: Rc<Coalescer> = Rc::new(Coalescer::new());
    /// This isolate's request body buffers.
    static BODIES: BodyPool = BodyPool::default();
}

/// Bytes of wasm linear memory in use by the instance.
fn wasm_memory_bytes() -> u64 {
    core::arch::wasm32::memory_size(0) as u64 * 65536
}

/// The reply form and precision the query asks for (every parameter at most once).
fn query(req: &Request) -> Result<Query, ApiError> {
    let url = req.url()?;
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let query = Query::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Ok(query.map_err(ShardError::from)?)
}

/// The value of header `name`, if present.
fn header(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

/// Receives the body into `body`, stopping past `cap` bytes (413) and refusing a missing or
/// empty one (411).
async fn read_body(req: &mut Request, body: &Body, cap: usize) -> Result<(), ApiError> {
    if req.inner().body().is_some() {
        let mut stream = req.stream().map_err(unreadable)?;
        while let Some(chunk) = stream.next().await {
            body.push(&chunk.map_err(unreadable)?, cap, js_sys::Date::now())?;
        }
    }
    if body.with(<[u8]>::is_empty)? {
        return Err(ApiError::new(
            411,
            "length_required",
            "send the hidden state as the body (little-endian f32)",
        ));
    }
    Ok(())
}

/// `POST /cobordism-lm-head`: the body is read only once the slice is resident, within the
/// exact cap for its hidden size and in one of the body buffers the memory budget allows.
pub async fn lm_head(cfg: &Settings, env: &Env, req: &mut Request) -> Result<Response, ApiError> {
    let Query { form, precision } = query(req)?;
    let passes = PASSES.with(Rc::clone);
    let arrival = passes.arrive();
    let declared = declared_length(
        header(req, "Content-Length").as_deref(),
        header(req, "Transfer-Encoding").as_deref(),
        MAX_BODY_BYTES,
    )?;
    let shard = SHARD.with(Rc::clone);
    let residency = shard.ensure(cfg, &R2::from_env(env)?).await?;
    if let Some(why) = &residency.check_error {
        worker::console_error!("manifest check failed, serving the resident slice: {why}");
    }
    let (hidden, slots) = shard
        .with_resident(|r| (r.manifest.hidden, r.need.bodies_in_flight(cfg.budget_bytes)))
        .ok_or_else(replaced)?;
    let cap = max_body_bytes(hidden as u64) as usize;
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap).into());
    }
    let body = BODIES.with(|pool| pool.acquire(slots as usize, cap, js_sys::Date::now()))?;
    read_body(req, &body, cap).await?;
    let started = js_sys::Date::now();
    // Coalescing on: turns of the event loop (zero-delay timers) let the requests whose bodies
    // arrive meanwhile join this one's pass (cobordism_shard::Coalescer says how many turns).
    let next_turn = cfg.coalesce.then_some(|| Delay::from(Duration::ZERO));
    let answer = passes
        .answer(
            &shard,
            (arrival, body),
            (precision, form.clone()),
            next_turn,
            js_sys::Date::now,
        )
        .await?;
    // In production the clock stands still while the Worker computes: a compute time is
    // reported only when it moved (locally), never as a misleading 0.
    let compute_ms = js_sys::Date::now() - started;
    let mut timing = format!("load;dur={:.0}", residency.load_ms);
    if compute_ms > 0.0 {
        timing.push_str(&format!(", compute;dur={compute_ms:.0}"));
    }
    let headers = Headers::new();
    let set = |k: &str, v: &str| headers.set(k, v);
    set("Content-Type", "application/octet-stream")?;
    set("Cache-Control", "no-store")?;
    set("X-Shard-Index", &cfg.shard_index.to_string())?;
    set("X-Shard-Count", &cfg.shard_count.to_string())?;
    set("X-Vocab", &answer.vocab.to_string())?;
    set("X-Row-Start", &answer.row_start.to_string())?;
    set("X-Row-Count", &answer.row_count.to_string())?;
    set("X-Batch", &answer.n.to_string())?;
    set("X-Pass-Vectors", &answer.pass_vectors.to_string())?;
    set("X-Precision", precision.name())?;
    set("X-Manifest-Version", &answer.version)?;
    set("X-Cache", if residency.hit { "hit" } else { "miss" })?;
    set("Server-Timing", &timing)?;
    set("X-Reply", form.name())?;
    if let Form::TopK { k, .. } = form {
        set("X-Top-K", &k.to_string())?;
    }
    Ok(Response::builder()
        .with_headers(headers)
        .fixed(answer.payload))
}

/// Since the isolate started: passes run, vectors computed, passes by vector count, their
/// compute time where the clock moves (locally), and the requests waiting now.
fn passes() -> serde_json::Value {
    let passes = PASSES.with(Rc::clone);
    let stats = passes.stats();
    json!({
        "count": stats.passes(),
        "vectors": stats.vectors(),
        "requests": stats.requests,
        "by_vectors": stats.by_vectors,
        "compute_ms": stats.compute_ms,
        "waiting": passes.waiting(),
    })
}

/// `GET /healthz` for callers without access: the state and nothing else.
pub fn healthz_public() -> Result<Response, ApiError> {
    let state = SHARD.with(|s| s.health(js_sys::Date::now()).state);
    Ok(Response::from_json(&json!({ "state": state }))?)
}

/// `GET /healthz`: the shard's state, without loading anything.
pub fn healthz(cfg: &Settings) -> Result<Response, ApiError> {
    let shard = SHARD.with(Rc::clone);
    let health = shard.health(js_sys::Date::now());
    let slice = shard.with_resident(|r| {
        json!({
            "row_start": r.entry.row_start,
            "row_count": r.entry.row_count,
            "dtype": r.manifest.dtype,
            "layout": r.manifest.layout().name(),
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
        "state": health.state,
        "resident": slice.is_some(),
        "loading_next": health.loading_next,
        "checked_ms_ago": health.checked_ms_ago,
        "last_check_error": health.last_check_error,
        "slice": slice,
        "wasm_memory_bytes": wasm_memory_bytes(),
        "bodies_in_flight": BODIES.with(BodyPool::in_flight),
        "passes": passes(),
        "budget_bytes": cfg.budget_bytes,
        "backend": kquant::Backend::best().name(),
        "build_version": env!("CARGO_PKG_VERSION"),
    });
    Ok(Response::from_json(&body)?)
}

//! The routes' work once method, access and settings are checked.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use cobordism_protocol::health::{ManifestLook, PublicHealthReport, State};
use cobordism_protocol::wire::header;
use cobordism_protocol::Query;
use cobordism_shard::{
    ensure_kept_alive, unreadable, wait_resident, BodyPool, Coalescer, Ensure, Event, Framing,
    Isolate, PassSummary, Residency, Runtime, Served, Settings, Shard, ShardError,
};
use futures_util::future::{join_all, LocalBoxFuture};
use futures_util::{FutureExt, Stream, StreamExt};
use worker::{Delay, Env, Headers, Request, Response};

use crate::error::ApiError;
use crate::r2::R2;
use crate::telemetry;

thread_local! {
    /// This isolate's slice.
    static SHARD: Rc<Shard> = Rc::new(Shard::new());
    /// This isolate's requests waiting for a pass.
    static PASSES: Rc<Coalescer> = Rc::new(Coalescer::new());
    /// This isolate's request body buffers.
    static BODIES: BodyPool = BodyPool::default();
    /// When this isolate served its first request ([`note_start`]).
    static STARTED_MS: f64 = js_sys::Date::now();
    /// When the passes' summary is next logged.
    static PASS_SUMMARY: PassSummary = PassSummary::default();
}

/// This build of the shard Worker, as `/healthz` and the forward name it (the test build with its
/// fault routes says so).
pub const BUILD: &str = if cfg!(feature = "fault-injection") {
    concat!(env!("CARGO_PKG_VERSION"), "+test")
} else {
    env!("CARGO_PKG_VERSION")
};

/// The global property `worker/entry.mjs` sets to the wasm module's SHA-256, which
/// scripts/build-worker.sh writes into the bundle once the module is built (a module cannot hold
/// its own hash).
const MODULE_SHA256_GLOBAL: &str = "cobordismModuleSha256";

/// The wasm module's SHA-256 (hex), if the bundle names it.
fn module_sha256() -> Option<String> {
    let global = js_sys::global();
    let value = js_sys::Reflect::get(&global, &MODULE_SHA256_GLOBAL.into()).ok()?;
    value.as_string().filter(|s| !s.is_empty())
}

/// Drops this isolate's slice (the test shard's `/__fault/forget`).
#[cfg(feature = "fault-injection")]
pub fn forget() {
    SHARD.with(|s| s.forget());
}

/// Notes the isolate's first request, from which `/healthz` counts its age.
pub fn note_start() {
    STARTED_MS.with(|_| ());
}

/// Bytes of wasm linear memory in use by the instance.
fn wasm_memory_bytes() -> u64 {
    core::arch::wasm32::memory_size(0) as u64 * 65536
}

/// `Shard::ensure` over R2 as a future that owns what it uses, so that it may outlive the
/// request.
fn ensure_future(cfg: &Settings, env: &Env) -> Result<Ensure<'static>, ShardError> {
    let (shard, cfg, r2) = (SHARD.with(Rc::clone), cfg.clone(), R2::from_env(env)?);
    Ok(async move { shard.ensure(&cfg, &r2).await }.boxed_local())
}

/// What a request runs on: the Worker's bindings, and the runtime's `waitUntil` (the request's
/// `ctx.waitUntil` in a Worker, the object's `state.waitUntil` in a Durable Object).
pub struct Scope<'a> {
    /// The bindings and variables.
    pub env: &'a Env,
    /// Keeps work going after the answer.
    pub keep_alive: &'a dyn Fn(LocalBoxFuture<'static, ()>),
    /// The Durable Object serving, with object residency (for `/healthz`).
    pub object: Option<String>,
}

/// Makes sure the slice is resident, a load kept going by `waitUntil` and waited for on this
/// request's own timer (`cobordism_shard::wait_resident` says how long).
async fn resident(cfg: &Settings, scope: &Scope<'_>) -> Result<Residency, ShardError> {
    let sleep = |ms: f64| Delay::from(Duration::from_secs_f64(ms / 1000.0));
    let keep_alive = |work| (scope.keep_alive)(work);
    let attempt = || async { ensure_kept_alive(ensure_future(cfg, scope.env)?, keep_alive).await };
    wait_resident(attempt, sleep).await
}

/// `POST /cobordism-lm-head/warm`: `cobordism_shard::Shard::warm`, its load kept going by
/// `waitUntil`.
pub async fn warm(cfg: &Settings, scope: &Scope<'_>, req: &Request) -> Result<Response, ApiError> {
    let keep_alive = |work: LocalBoxFuture<'static, Result<(), ShardError>>| {
        let shard = cfg.shard_index;
        let logged = work.map(move |done| {
            if let Err(e) = done {
                telemetry::event(&Event::warm_up_failed(shard, &e));
            }
        });
        (scope.keep_alive)(logged.boxed_local())
    };
    let shard = SHARD.with(Rc::clone);
    let load = ensure_future(cfg, scope.env)?;
    let report = shard
        .warm(cfg, &query(req)?, load, keep_alive, js_sys::Date::now)
        .await?;
    Ok(Response::from_json(&report)?.with_status(report.status()))
}

/// `POST …/warm` inside a shard's object: the warm-up, then the load and priming it started,
/// awaited by this request (which holds them: see `cobordism_shard::object::WARM_ANSWER_WAIT_MS`),
/// then the warm-up's answer again: `200` once resident, or the load's error.
pub async fn warm_until_resident(
    cfg: &Settings,
    env: &Env,
    object: Option<String>,
    req: &Request,
) -> Result<Response, ApiError> {
    let pending = RefCell::new(Vec::new());
    let hold = |work| pending.borrow_mut().push(work);
    let scope = Scope {
        env,
        keep_alive: &hold,
        object,
    };
    warm(cfg, &scope, req).await?;
    join_all(pending.take()).await;
    warm(cfg, &scope, req).await
}

/// The reply form and precision the query asks for (every parameter at most once).
fn query(req: &Request) -> Result<Query, ApiError> {
    let url = req.url()?;
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let query = Query::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Ok(query.map_err(ShardError::from)?)
}

/// The value of header `name`, if present.
fn header_value(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

/// The request's body as chunks for the shard (`None`: it has none).
fn body_chunks(
    req: &mut Request,
) -> Result<Option<impl Stream<Item = Result<Vec<u8>, ShardError>>>, ShardError> {
    if req.inner().body().is_none() {
        return Ok(None);
    }
    let stream = req.stream().map_err(unreadable)?;
    Ok(Some(stream.map(|chunk| chunk.map_err(unreadable))))
}

/// The request's `Content-Length` and `Transfer-Encoding`, which frame its body.
fn framing_headers(req: &Request) -> [Option<String>; 2] {
    [header::CONTENT_LENGTH, header::TRANSFER_ENCODING].map(|name| header_value(req, name))
}

/// `POST /cobordism-lm-head`: `cobordism_shard::Isolate::lm_head` over this isolate's state, the
/// request's body and the wait for the slice; then its telemetry and the answer.
pub async fn lm_head(
    cfg: &Settings,
    scope: &Scope<'_>,
    req: &mut Request,
) -> Result<Response, ApiError> {
    let query = query(req)?;
    let [content_length, transfer_encoding] = framing_headers(req);
    let framing = Framing {
        content_length: content_length.as_deref(),
        transfer_encoding: transfer_encoding.as_deref(),
    };
    let (shard, passes, bodies) = (
        SHARD.with(Rc::clone),
        PASSES.with(Rc::clone),
        BODIES.with(BodyPool::clone),
    );
    let isolate = Isolate {
        shard: &shard,
        passes: &passes,
        bodies: &bodies,
    };
    // Coalescing on: turns of the event loop (zero-delay timers) let the requests whose bodies
    // arrive meanwhile join this one's pass (cobordism_shard::Coalescer says how many turns).
    let next_turn = cfg.coalesce.then_some(|| Delay::from(Duration::ZERO));
    let body = body_chunks(req)?;
    let resident = || resident(cfg, scope);
    let now = js_sys::Date::now;
    let served = isolate
        .lm_head(cfg, &query, framing, resident, body, next_turn, now)
        .await?;
    record_served(cfg, scope, &query, &served, &passes);
    answer(cfg, &query, served)
}

/// The data point of an answer, and the pass summary when one is due.
fn record_served(
    cfg: &Settings,
    scope: &Scope<'_>,
    query: &Query,
    served: &Served,
    passes: &Coalescer,
) {
    telemetry::record(scope.env, served.metric_point(cfg, query));
    let now = js_sys::Date::now();
    let summary = PASS_SUMMARY.with(|p| p.due(now, cfg.shard_index, &passes.stats()));
    if let Some(line) = summary {
        telemetry::log(&line);
    }
}

/// The binary answer with its headers.
fn answer(cfg: &Settings, query: &Query, served: Served) -> Result<Response, ApiError> {
    let headers = Headers::new();
    headers.set(header::CONTENT_TYPE, "application/octet-stream")?;
    headers.set(header::CACHE_CONTROL, "no-store")?;
    for (name, value) in served.headers(cfg, query).pairs() {
        headers.set(name, &value)?;
    }
    Ok(Response::builder()
        .with_headers(headers)
        .fixed(served.answer.payload))
}

/// `GET /healthz` for callers without access, with object residency: answered by the front,
/// which does not know its objects' state and wakes none for a caller without access (a probe
/// would cost a Durable Object request, and keep the object in memory): `{"state": "unknown"}`.
pub fn healthz_public_of_front() -> Result<Response, ApiError> {
    let report = PublicHealthReport {
        state: State::Unknown,
    };
    Ok(Response::from_json(&report)?)
}

/// `GET /healthz` for callers without access: the state and nothing else.
pub fn healthz_public() -> Result<Response, ApiError> {
    let report = SHARD
        .with(Rc::clone)
        .public_health_report(js_sys::Date::now());
    Ok(Response::from_json(&report)?)
}

/// `GET /healthz`: the shard's state, without loading anything (while nothing is resident, one
/// look at the manifest a `MANIFEST_TTL_MS`).
pub async fn healthz(cfg: &Settings, scope: &Scope<'_>) -> Result<Response, ApiError> {
    let (shard, passes) = (SHARD.with(Rc::clone), PASSES.with(Rc::clone));
    let manifest = match R2::from_env(scope.env) {
        Ok(r2) => shard.look_at_manifest(cfg, &r2).await,
        Err(e) => Some(ManifestLook {
            version: None,
            error: Some(e.to_string()),
            age_ms: 0.0,
        }),
    };
    let now = js_sys::Date::now();
    let report = BODIES.with(|bodies| {
        Isolate {
            shard: &shard,
            passes: &passes,
            bodies,
        }
        .health_report(
            cfg,
            now,
            Runtime {
                wasm_memory_bytes: wasm_memory_bytes(),
                backend: kquant::Backend::best().name(),
                build_version: BUILD,
                module_sha256: module_sha256(),
                object: scope.object.clone(),
                age_ms: now - STARTED_MS.with(|t| *t),
            },
            manifest,
        )
    });
    Ok(Response::from_json(&report)?)
}

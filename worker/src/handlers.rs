//! The routes' work once method, access and settings are checked.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use cobordism_protocol::wire::header;
use cobordism_protocol::{ErrorCode, Form, Query};
use cobordism_shard::{
    unreadable, wait_resident, BodyPool, Coalescer, Framing, Isolate, PublicHealthReport,
    Residency, Settings, Shard, ShardError, WarmReport,
};
use futures_util::future::LocalBoxFuture;
use futures_util::{FutureExt, Stream, StreamExt};
use worker::{Context, Delay, Env, Headers, Request, Response};

use crate::error::ApiError;
use crate::r2::R2;

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

/// `Shard::ensure` as a future that owns what it uses, so that it may outlive the request.
type Ensure = LocalBoxFuture<'static, Result<Residency, ShardError>>;

fn ensure(cfg: &Settings, env: &Env) -> Result<Ensure, ShardError> {
    let (shard, cfg, r2) = (SHARD.with(Rc::clone), cfg.clone(), R2::from_env(env)?);
    Ok(async move { shard.ensure(&cfg, &r2).await }.boxed_local())
}

/// Polls `ensure` once: its result if it needed no I/O (the slice is resident), else the
/// future, now waiting for storage.
async fn ensure_at_once(mut ensure: Ensure) -> Result<Result<Residency, ShardError>, Ensure> {
    match poll_fn(|cx| Poll::Ready(Pin::new(&mut ensure).poll(cx))).await {
        Poll::Ready(done) => Ok(done),
        Poll::Pending => Err(ensure),
    }
}

/// `Shard::ensure` under `ctx.waitUntil` when it must wait for storage (a load, a manifest
/// check): this request awaits it, but its caller going away does not cancel it (Workers cancel
/// a request's own work when its client disconnects).
async fn ensure_kept_alive(
    cfg: &Settings,
    env: &Env,
    ctx: &Context,
) -> Result<Residency, ShardError> {
    match ensure_at_once(ensure(cfg, env)?).await {
        Ok(done) => done,
        Err(waiting) => {
            let shared = waiting.shared();
            ctx.wait_until(shared.clone().map(drop));
            shared.await
        }
    }
}

/// Makes sure the slice is resident, waiting for another request's load on this request's own
/// timer (`cobordism_shard::wait_resident` says how long).
async fn resident(cfg: &Settings, env: &Env, ctx: &Context) -> Result<Residency, ShardError> {
    let sleep = |ms: f64| Delay::from(Duration::from_secs_f64(ms / 1000.0));
    wait_resident(|| ensure_kept_alive(cfg, env, ctx), sleep).await
}

/// `POST /cobordism-lm-head/warm`: starts loading the slice (or checking its manifest) and
/// answers at once, `200` with the state `ready` when it is resident, `202` while it loads,
/// which goes on after the answer (`ctx.waitUntil`) and ends by running the kernels of the
/// query's `precision` once (`Resident::prime`); a load that cannot succeed now answers the
/// error a request would get.
pub async fn warm(
    cfg: &Settings,
    env: &Env,
    ctx: &Context,
    req: &Request,
) -> Result<Response, ApiError> {
    let Query { form, precision } = query(req)?;
    if form != Form::Logits {
        let detail = "the warm-up takes only precision=exact|int8 (the kernels it primes)";
        return Err(ApiError::new(ErrorCode::BadQuery, detail));
    }
    match ensure_at_once(ensure(cfg, env)?).await {
        Ok(Err(e)) if e.code != ErrorCode::SliceLoading => return Err(e.into()),
        Ok(_) => {}
        Err(waiting) => ctx.wait_until(waiting.map(move |done| {
            let primed = done.and_then(|_| {
                let shard = SHARD.with(Rc::clone);
                shard
                    .with_resident(|r| r.prime(precision))
                    .unwrap_or(Ok(()))
            });
            if let Err(e) = primed {
                worker::console_error!("warm-up failed: {e}");
            }
        })),
    }
    let report = WarmReport::of(&SHARD.with(Rc::clone), cfg, js_sys::Date::now());
    Ok(Response::from_json(&report)?.with_status(report.status()))
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

/// `POST /cobordism-lm-head`: `cobordism_shard::Isolate::lm_head` over this isolate's state, the
/// request's body and the wait for the slice; the answer with its headers.
pub async fn lm_head(
    cfg: &Settings,
    env: &Env,
    ctx: &Context,
    req: &mut Request,
) -> Result<Response, ApiError> {
    let query = query(req)?;
    let (content_length, transfer_encoding) = (
        header_value(req, header::CONTENT_LENGTH),
        header_value(req, header::TRANSFER_ENCODING),
    );
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
    let resident = || async {
        let residency = resident(cfg, env, ctx).await?;
        if let Some(why) = &residency.check_error {
            worker::console_error!("manifest check failed, serving the resident slice: {why}");
        }
        Ok(residency)
    };
    let served = isolate
        .lm_head(
            cfg,
            &query,
            framing,
            resident,
            body,
            next_turn,
            js_sys::Date::now,
        )
        .await?;
    let headers = Headers::new();
    headers.set(header::CONTENT_TYPE, "application/octet-stream")?;
    headers.set(header::CACHE_CONTROL, "no-store")?;
    for (name, value) in served.headers(cfg, &query).pairs() {
        headers.set(name, &value)?;
    }
    Ok(Response::builder()
        .with_headers(headers)
        .fixed(served.answer.payload))
}

/// `GET /healthz` for callers without access: the state and nothing else.
pub fn healthz_public() -> Result<Response, ApiError> {
    let report = PublicHealthReport::of(&SHARD.with(Rc::clone), js_sys::Date::now());
    Ok(Response::from_json(&report)?)
}

/// `GET /healthz`: the shard's state, without loading anything.
pub fn healthz(cfg: &Settings) -> Result<Response, ApiError> {
    let (shard, passes) = (SHARD.with(Rc::clone), PASSES.with(Rc::clone));
    let report = BODIES.with(|bodies| {
        Isolate {
            shard: &shard,
            passes: &passes,
            bodies,
        }
        .health_report(
            cfg,
            js_sys::Date::now(),
            wasm_memory_bytes(),
            kquant::Backend::best().name(),
            env!("CARGO_PKG_VERSION"),
        )
    });
    Ok(Response::from_json(&report)?)
}

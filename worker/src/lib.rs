//! The lm-head shard Worker: a thin HTTP shell over `cobordism_shard`.
//!
//! * `POST /cobordism-lm-head`: `n` hidden vectors (little-endian f32) in, this shard's logits
//!   out (`n · row_count` little-endian f32), or with `?top_k=K` its top K per vector.
//! * `POST /cobordism-lm-head/warm`: starts loading the slice and answers at once (`202`), or
//!   `200` when it is resident: callers warm shards before their first token.
//! * `GET /healthz`: JSON state of the shard (`{"state": …}` only for callers without access).
//!
//! Each request is checked in this order: route and method, access ([`auth`]: closed by
//! default), settings ([`config`]), then the work ([`handlers`]). With object residency
//! (`RESIDENCY = "object"`) the work is done by the shard's Durable Object instead, which the
//! request is forwarded to once access is granted ([`object`]). The slice's life cycle is
//! `cobordism_shard::Shard` over R2 ([`r2`]), and concurrent requests share passes through
//! `cobordism_shard::Coalescer`; the contract is written out in `docs/API.md`.

mod auth;
mod config;
mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod handlers;
mod object;
mod r2;
mod telemetry;

use cobordism_protocol::wire::header;
use cobordism_protocol::ErrorCode;
use cobordism_shard::{ResidencyMode, Settings};
use worker::{event, Context, Env, Method, Request, Response};

use error::ApiError;
use handlers::Scope;

/// What a request asks for, once its path and method are known to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    LmHead,
    Warm,
    Health,
    /// `/healthz` for a caller without access (never forwarded to an object).
    PublicHealth,
    #[cfg(feature = "fault-injection")]
    Panic,
    /// A panic in the isolate the request reaches, never forwarded to an object.
    #[cfg(feature = "fault-injection")]
    PanicHere,
    /// The isolate the request reaches drops its slice (as a new isolate has none).
    #[cfg(feature = "fault-injection")]
    Forget,
    #[cfg(feature = "fault-injection")]
    Oom,
    /// The object's keep-warm alarm, as its storage holds it.
    #[cfg(feature = "fault-injection")]
    Alarm,
}

/// The route `req` asks for, or `404`/`405`.
fn route_of(req: &Request) -> Result<Route, ApiError> {
    let post = req.method() == Method::Post;
    let (route, allowed, allow) = match req.path().as_str() {
        cobordism_protocol::ROUTE => (Route::LmHead, post, "POST"),
        cobordism_protocol::WARM_ROUTE => (Route::Warm, post, "POST"),
        #[cfg(feature = "fault-injection")]
        "/__fault/panic" => (Route::Panic, post, "POST"),
        #[cfg(feature = "fault-injection")]
        "/__fault/panic-here" => (Route::PanicHere, post, "POST"),
        #[cfg(feature = "fault-injection")]
        "/__fault/forget" => (Route::Forget, post, "POST"),
        #[cfg(feature = "fault-injection")]
        "/__fault/oom" => (Route::Oom, post, "POST"),
        #[cfg(feature = "fault-injection")]
        "/__fault/alarm" => (Route::Alarm, post, "POST"),
        "/healthz" => (Route::Health, true, "GET, HEAD"),
        _ => return Err(ApiError::new(ErrorCode::NotFound, "no such route")),
    };
    let allowed = allowed && (post || matches!(req.method(), Method::Get | Method::Head));
    if !allowed {
        return Err(
            ApiError::new(ErrorCode::MethodNotAllowed, format!("use {allow}"))
                .with_header(header::ALLOW, allow),
        );
    }
    Ok(route)
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    Ok(front(req, &env, &ctx)
        .await
        .unwrap_or_else(|e| e.answer(&env)))
}

/// The shard Worker's own `fetch`: serves the request, or forwards it to the shard's object.
async fn front(req: Request, env: &Env, ctx: &Context) -> Result<Response, ApiError> {
    handlers::note_start();
    let route = match (route_of(&req)?, auth::authorize(env, &req)) {
        (route, Ok(())) => route,
        (Route::Health, Err(_)) => Route::PublicHealth,
        (_, Err(refused)) => return Err(refused),
    };
    #[cfg(feature = "fault-injection")]
    match route {
        Route::PanicHere => fault::panic(),
        Route::Forget => return fault::forget(),
        _ => {}
    }
    let cfg = match config::settings(env) {
        Err(_) if route == Route::PublicHealth => return handlers::healthz_public(),
        cfg => cfg?,
    };
    if cfg.residency == ResidencyMode::Object {
        if route == Route::PublicHealth {
            return handlers::healthz_public_of_front();
        }
        if route == Route::Warm {
            return object::forward_warm(req, env, ctx, &cfg).await;
        }
        return object::forward(req, env, &cfg, route).await;
    }
    let keep_alive = |work| ctx.wait_until(work);
    let scope = Scope {
        env,
        keep_alive: &keep_alive,
        object: None,
    };
    serve(route, req, &cfg, &scope).await
}

/// The route's work, in the Worker or in the shard's object.
async fn serve(
    route: Route,
    mut req: Request,
    cfg: &Settings,
    scope: &Scope<'_>,
) -> Result<Response, ApiError> {
    match route {
        Route::Health => handlers::healthz(cfg, scope).await,
        Route::PublicHealth => handlers::healthz_public(),
        #[cfg(feature = "fault-injection")]
        Route::Panic | Route::PanicHere => fault::panic(),
        #[cfg(feature = "fault-injection")]
        Route::Forget => fault::forget(),
        #[cfg(feature = "fault-injection")]
        Route::Oom => fault::exhaust_memory(),
        #[cfg(feature = "fault-injection")]
        Route::Alarm => fault::no_alarm(),
        Route::Warm => handlers::warm(cfg, scope, &req).await,
        Route::LmHead => handlers::lm_head(cfg, scope, &mut req).await,
    }
}

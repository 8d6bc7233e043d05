//! The lm-head shard Worker: a thin HTTP shell over `cobordism_shard`.
//!
//! * `POST /cobordism-lm-head`: `n` hidden vectors (little-endian f32) in, this shard's logits
//!   out (`n · row_count` little-endian f32), or with `?top_k=K` its top K per vector.
//! * `POST /cobordism-lm-head/warm`: starts loading the slice and answers at once (`202`), or
//!   `200` when it is resident: callers warm shards before their first token.
//! * `GET /healthz`: JSON state of the shard (`{"state": …}` only for callers without access).
//!
//! Each request is checked in this order: route and method, access ([`auth`]: closed by
//! default), settings ([`config`]), then the work ([`handlers`]). The slice's life cycle is
//! `cobordism_shard::Shard` over R2 ([`r2`]), and concurrent requests share passes through
//! `cobordism_shard::Coalescer`; the contract is written out in `docs/API.md`.

mod auth;
mod config;
mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod handlers;
mod r2;

use cobordism_protocol::wire::header;
use cobordism_protocol::ErrorCode;
use worker::{event, Context, Env, Method, Request, Response};

use error::ApiError;

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    Ok(route(req, &env, &ctx)
        .await
        .unwrap_or_else(ApiError::into_response))
}

async fn route(mut req: Request, env: &Env, ctx: &Context) -> Result<Response, ApiError> {
    let path = req.path();
    let (allowed, allow_header) = match path.as_str() {
        "/cobordism-lm-head" | "/cobordism-lm-head/warm" => (req.method() == Method::Post, "POST"),
        #[cfg(feature = "fault-injection")]
        "/__fault/panic" | "/__fault/oom" => (req.method() == Method::Post, "POST"),
        "/healthz" => (
            matches!(req.method(), Method::Get | Method::Head),
            "GET, HEAD",
        ),
        _ => return Err(ApiError::new(ErrorCode::NotFound, "no such route")),
    };
    if !allowed {
        return Err(
            ApiError::new(ErrorCode::MethodNotAllowed, format!("use {allow_header}"))
                .with_header(header::ALLOW, allow_header),
        );
    }
    if let Err(refused) = auth::authorize(env, &req) {
        return match path.as_str() {
            "/healthz" => handlers::healthz_public(),
            _ => Err(refused),
        };
    }
    let cfg = config::settings(env)?;
    match path.as_str() {
        "/healthz" => handlers::healthz(&cfg),
        #[cfg(feature = "fault-injection")]
        "/__fault/panic" => fault::panic(),
        #[cfg(feature = "fault-injection")]
        "/__fault/oom" => fault::exhaust_memory(),
        "/cobordism-lm-head/warm" => handlers::warm(&cfg, env, ctx, &req).await,
        _ => handlers::lm_head(&cfg, env, ctx, &mut req).await,
    }
}

//! The lm-head shard Worker.
//!
//! * `POST /cobordism-lm-head`: `n` hidden vectors (little-endian f32) in, this shard's logits
//!   out (`n · row_count` little-endian f32), or with `?top_k=K` its top K per vector.
//! * `GET /healthz`: JSON state of the shard.
//!
//! The contract is written out in `docs/API.md`; the slice's life cycle in [`resident`].

mod config;
mod error;
mod handlers;
mod resident;

use worker::{event, Context, Env, Method, Request, Response};

use config::Config;
use error::ApiError;

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    Ok(route(req, &env)
        .await
        .unwrap_or_else(ApiError::into_response))
}

async fn route(mut req: Request, env: &Env) -> Result<Response, ApiError> {
    let (allowed, allow_header) = match req.path().as_str() {
        "/cobordism-lm-head" => (req.method() == Method::Post, "POST"),
        "/__fault/panic" | "/__fault/oom" if fault_injection(env) => {
            (req.method() == Method::Post, "POST")
        }
        "/healthz" => (
            matches!(req.method(), Method::Get | Method::Head),
            "GET, HEAD",
        ),
        _ => return Err(ApiError::new(404, "not_found", "no such route")),
    };
    if !allowed {
        return Err(
            ApiError::new(405, "method_not_allowed", format!("use {allow_header}"))
                .with_header("Allow", allow_header),
        );
    }
    let cfg = Config::from_env(env)?;
    handlers::authorize(&cfg, &req)?;
    match req.path().as_str() {
        "/healthz" => handlers::healthz(&cfg),
        "/__fault/panic" => panic!("fault injection: panic"),
        "/__fault/oom" => {
            // Grows wasm memory until the allocator fails, which aborts the instance.
            let mut hog: Vec<Vec<u8>> = Vec::new();
            loop {
                hog.push(vec![1u8; 64 << 20]);
            }
        }
        _ => handlers::lm_head(&cfg, env, &mut req).await,
    }
}

/// Test-only routes that panic or exhaust memory, enabled by `FAULT_INJECTION = "1"` (never set
/// in wrangler.toml): they prove that an instance reset is followed by a clean reload.
fn fault_injection(env: &Env) -> bool {
    env.var("FAULT_INJECTION")
        .is_ok_and(|v| v.to_string() == "1")
}

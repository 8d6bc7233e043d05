//! Who may call: decided before the configuration is read or a byte of the body is taken, by
//! `cobordism_protocol::Access` (closed by default).
//!
//! * `AUTH_TOKEN` secret set: `Authorization: Bearer <token>` is required (the scheme in any
//!   case), else `401 unauthorized`. While a rotation is under way the `AUTH_TOKEN_PREVIOUS`
//!   secret is accepted too (`cobordism deploy --rotate-token`, SECURITY.md).
//! * No token and `ALLOW_ANONYMOUS = "1"`: anyone may call (the operator chose it visibly).
//! * No token and no `ALLOW_ANONYMOUS`: `503 auth_not_configured` for everyone (no
//!   `Retry-After`: only the operator can change it).
//!
//! Whoever is refused still gets `GET /healthz` with `{"state": …}` and nothing else.

use cobordism_protocol::wire::header;
use cobordism_protocol::{Access, ErrorCode, PREVIOUS_TOKEN_SECRET, TOKEN_SECRET};
use cobordism_shard::ShardError;
use worker::{Env, Request};

use crate::config::var;
use crate::error::ApiError;

/// Applies the shard's policy to `req`.
pub fn authorize(env: &Env, req: &Request) -> Result<(), ApiError> {
    let secret = |name| {
        env.secret(name)
            .ok()
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    let tokens = [secret(TOKEN_SECRET), secret(PREVIOUS_TOKEN_SECRET)];
    let allow_anonymous = var(env, "ALLOW_ANONYMOUS").is_some_and(|v| v.trim() == "1");
    let credential = req.headers().get(header::AUTHORIZATION).ok().flatten();
    let tokens = tokens.each_ref().map(String::as_str);
    match Access::decide(&tokens, allow_anonymous, credential.as_deref()) {
        Access::Granted => Ok(()),
        Access::Unauthorized => Err(ApiError::new(
            ErrorCode::Unauthorized,
            "a valid Authorization: Bearer token is required",
        )
        .with_header(header::WWW_AUTHENTICATE, "Bearer")),
        Access::NotConfigured => Err(ShardError::new(
            ErrorCode::AuthNotConfigured,
            "this shard has no AUTH_TOKEN secret and serves nobody until its operator sets one \
             (or sets ALLOW_ANONYMOUS = \"1\")",
        )
        .into()),
    }
}

//! Error answers: JSON `{ "error": code, "detail": text }` with the right status, from a
//! [`ShardError`]. What is only for the operator (`ShardError::internal`: R2 keys, parser
//! messages, variable values) goes to the Worker's log in the error's line (`crate::telemetry`),
//! where `wrangler tail` shows it.

use cobordism_protocol::wire::header;
use cobordism_protocol::ErrorCode;
use cobordism_shard::ShardError;
use serde::Serialize;
use worker::{Env, Headers, Response};

/// An error to answer with: a shard error and, for 401/405, one header.
#[derive(Debug, Clone)]
pub struct ApiError {
    error: ShardError,
    header: Option<(&'static str, &'static str)>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    detail: &'a str,
}

impl ApiError {
    /// A plain error.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        ShardError::new(code, detail).into()
    }

    /// Adds a header to the answer (`Allow` for 405, `WWW-Authenticate` for 401).
    pub fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.header = Some((name, value));
        self
    }

    /// The HTTP answer; the error's log line (with what is for the operator only) and data
    /// point are `crate::telemetry`'s.
    pub fn answer(self, env: &Env) -> Response {
        crate::telemetry::error(env, &self.error);
        let e = self.error;
        let body = serde_json::to_vec(&Body {
            error: e.code.name(),
            detail: &e.detail,
        })
        .unwrap_or_default();
        let headers = Headers::new();
        let _ = headers.set(header::CONTENT_TYPE, "application/json");
        let _ = headers.set(header::CACHE_CONTROL, "no-store");
        if let Some(s) = e.retry_after() {
            let _ = headers.set(header::RETRY_AFTER, &s.to_string());
        }
        if let Some((name, value)) = self.header {
            let _ = headers.set(name, value);
        }
        Response::builder()
            .with_status(e.status())
            .with_headers(headers)
            .fixed(body)
    }
}

impl From<ShardError> for ApiError {
    fn from(error: ShardError) -> Self {
        ApiError {
            error,
            header: None,
        }
    }
}

/// A runtime call that should not fail did (reading the URL, setting a header): a bug, not
/// the caller's doing, and not worth a retry. Reading the body has its own error
/// (`cobordism_shard::unreadable`).
impl From<worker::Error> for ApiError {
    fn from(e: worker::Error) -> Self {
        ShardError::internal(format_args!("runtime error: {e}")).into()
    }
}

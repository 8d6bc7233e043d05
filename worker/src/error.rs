//! Error answers: JSON `{ "error": code, "detail": text }` with the right status. Details are
//! a sentence for the caller: what happened and what to do. What only the operator should see
//! (R2 keys, parser messages, variable values) goes to the Worker's log with
//! [`ApiError::logging`], where `wrangler tail` shows it.

use serde::Serialize;
use worker::{Headers, Response};

/// An error to answer with.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable explanation.
    pub detail: String,
    /// Seconds for `Retry-After` (503s).
    pub retry_after: Option<u32>,
    /// Extra header (`Allow` for 405, `WWW-Authenticate` for 401).
    pub header: Option<(&'static str, &'static str)>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    detail: &'a str,
}

impl ApiError {
    /// A plain error.
    pub fn new(status: u16, code: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            detail: detail.into(),
            retry_after: None,
            header: None,
        }
    }

    /// 503 with `Retry-After`.
    pub fn unavailable(code: &'static str, detail: impl Into<String>, retry_after: u32) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(503, code, detail)
        }
    }

    /// A deployment mistake (variables, manifest and configuration disagree): 503, with what is
    /// wrong in the log only.
    pub fn config(internal: impl core::fmt::Display) -> Self {
        ApiError::unavailable(
            "misconfigured",
            "the shard's configuration is inconsistent; its operator finds why in the Worker's log",
            30,
        )
        .logging(internal)
    }

    /// Writes what the operator needs to know about this error to the Worker's log.
    pub fn logging(self, internal: impl core::fmt::Display) -> Self {
        worker::console_error!("{} ({}): {internal}", self.code, self.status);
        self
    }

    /// Adds a header to the answer.
    pub fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.header = Some((name, value));
        self
    }

    /// The HTTP answer.
    pub fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Body {
            error: self.code,
            detail: &self.detail,
        })
        .unwrap_or_default();
        let headers = Headers::new();
        let _ = headers.set("Content-Type", "application/json");
        let _ = headers.set("Cache-Control", "no-store");
        if let Some(s) = self.retry_after {
            let _ = headers.set("Retry-After", &s.to_string());
        }
        if let Some((name, value)) = self.header {
            let _ = headers.set(name, value);
        }
        Response::builder()
            .with_status(self.status)
            .with_headers(headers)
            .fixed(body)
    }
}

impl From<worker::Error> for ApiError {
    fn from(e: worker::Error) -> Self {
        worker::console_error!("runtime error: {e}");
        ApiError::unavailable("runtime_error", "the runtime failed this request; retry", 1)
    }
}

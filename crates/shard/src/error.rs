//! Error answers: a status, a stable code and a sentence for the caller (what happened and what
//! to do), plus what only the operator should read (R2 keys, parser messages, variable values),
//! which the Worker writes to its log and never into a response.

use core::fmt;

use cobordism_protocol::FormError;

/// An error to answer with.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardError {
    /// HTTP status.
    pub status: u16,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable explanation for the caller.
    pub detail: String,
    /// Seconds for `Retry-After` (503s).
    pub retry_after: Option<u32>,
    /// For the operator's log only.
    pub internal: Option<String>,
}

impl ShardError {
    /// A plain error.
    pub fn new(status: u16, code: &'static str, detail: impl Into<String>) -> Self {
        ShardError {
            status,
            code,
            detail: detail.into(),
            retry_after: None,
            internal: None,
        }
    }

    /// 503 with `Retry-After`.
    pub fn unavailable(code: &'static str, detail: impl Into<String>, retry_after: u32) -> Self {
        ShardError {
            retry_after: Some(retry_after),
            ..ShardError::new(503, code, detail)
        }
    }

    /// 503 *without* `Retry-After`: the deployment is wrong (its configuration, or the model in
    /// the bucket), so the same request fails the same way until the operator fixes it; clients
    /// do not retry it (`cobordism_protocol::worth_retrying`).
    pub fn deployment(code: &'static str, detail: impl Into<String>) -> Self {
        ShardError::new(503, code, detail)
    }

    /// A deployment mistake (variables, manifest and configuration disagree): 503 without
    /// `Retry-After`, with what is wrong for the log only.
    pub fn config(internal: impl fmt::Display) -> Self {
        ShardError::deployment(
            "misconfigured",
            "the shard's configuration is inconsistent; its operator finds why in the Worker's log",
        )
        .with_internal(internal)
    }

    /// `503 out_of_memory`: wasm memory could not grow for `what`.
    pub fn out_of_memory(what: impl fmt::Display) -> Self {
        ShardError::unavailable(
            "out_of_memory",
            "the shard could not reserve the memory it needs; retry shortly",
            5,
        )
        .with_internal(format!("could not reserve {what}"))
    }

    /// `500 internal`: a bug, described for the log.
    pub fn internal(what: impl fmt::Display) -> Self {
        ShardError::new(
            500,
            "internal",
            "the shard failed; this is a bug worth reporting",
        )
        .with_internal(what)
    }

    /// Adds what the operator needs to know.
    pub fn with_internal(mut self, internal: impl fmt::Display) -> Self {
        self.internal = Some(internal.to_string());
        self
    }
}

/// `400` for a query the shard refuses or logits it cannot answer with.
impl From<FormError> for ShardError {
    fn from(e: FormError) -> Self {
        ShardError::new(400, e.code, e.detail)
    }
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.detail)?;
        if let Some(internal) = &self.internal {
            write!(f, " ({internal})")?;
        }
        Ok(())
    }
}

/// `len` zeros, or `503 out_of_memory` if memory cannot grow that far (an infallible allocation
/// would abort a wasm instance instead).
pub(crate) fn zeroed<T: Clone + Default>(len: usize, what: &str) -> Result<Vec<T>, ShardError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| ShardError::out_of_memory(format_args!("{len} elements for {what}")))?;
    v.resize(len, T::default());
    Ok(v)
}

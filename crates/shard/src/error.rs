//! Error answers: a status, a stable code and a sentence for the caller (what happened and what
//! to do), plus what only the operator should read (R2 keys, parser messages, variable values),
//! which the Worker writes to its log and never into a response.

use core::fmt;

use cobordism_protocol::{ErrorCode, FormError};

/// An error to answer with.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardError {
    /// What went wrong: the wire name, the status and `Retry-After` come with it.
    pub code: ErrorCode,
    /// Human-readable explanation for the caller.
    pub detail: String,
    /// For the operator's log only.
    pub internal: Option<String>,
}

impl ShardError {
    /// An error with its code's status and `Retry-After`.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        ShardError {
            code,
            detail: detail.into(),
            internal: None,
        }
    }

    /// HTTP status.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// Seconds for `Retry-After`: only the 503s waiting can mend carry it; the others (the
    /// deployment is wrong: its configuration, or the model in the bucket) fail the same way
    /// until the operator fixes it, and clients do not retry them
    /// (`cobordism_protocol::worth_retrying`).
    pub fn retry_after(&self) -> Option<u32> {
        self.code.retry_after()
    }

    /// A deployment mistake (variables, manifest and configuration disagree): 503 without
    /// `Retry-After`, with what is wrong for the log only.
    pub fn config(internal: impl fmt::Display) -> Self {
        ShardError::new(
            ErrorCode::Misconfigured,
            "the shard's configuration is inconsistent; its operator finds why in the Worker's log",
        )
        .with_internal(internal)
    }

    /// `503 out_of_memory`: wasm memory could not grow for `what`.
    pub fn out_of_memory(what: impl fmt::Display) -> Self {
        ShardError::new(
            ErrorCode::OutOfMemory,
            "the shard could not reserve the memory it needs; retry shortly",
        )
        .with_internal(format!("could not reserve {what}"))
    }

    /// `500 internal`: a bug, described for the log.
    pub fn internal(what: impl fmt::Display) -> Self {
        ShardError::new(
            ErrorCode::Internal,
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
        ShardError::new(e.code, e.detail)
    }
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status(), self.code, self.detail)?;
        if let Some(internal) = &self.internal {
            write!(f, " ({internal})")?;
        }
        Ok(())
    }
}

/// Room for exactly `additional` more elements in `v`, or `503 out_of_memory` naming `what` if
/// memory cannot grow that far: every allocation a request's size or the slice's decides goes
/// through here, since an infallible one would abort a wasm instance instead.
pub(crate) fn reserve<T>(
    v: &mut Vec<T>,
    additional: usize,
    what: impl fmt::Display,
) -> Result<(), ShardError> {
    v.try_reserve_exact(additional)
        .map_err(|_| ShardError::out_of_memory(what))
}

/// `len` zeros, or `503 out_of_memory` ([`reserve`]).
pub(crate) fn zeroed<T: Clone + Default>(len: usize, what: &str) -> Result<Vec<T>, ShardError> {
    let mut v = Vec::new();
    reserve(&mut v, len, format_args!("{len} elements for {what}"))?;
    v.resize(len, T::default());
    Ok(v)
}

/// `503 slice_loading`, with why (the slice loading, replaced under a request, a load taken
/// over): worth a retry shortly.
pub(crate) fn slice_loading(why: impl fmt::Display) -> ShardError {
    ShardError::new(ErrorCode::SliceLoading, format!("{why}; retry shortly"))
}

/// Why: the slice a request was checked against was replaced (or dropped) before its answer.
pub(crate) const REPLACED: &str = "the slice was replaced";
/// Why: the load a request ran was taken over by another (it had stalled).
pub(crate) const SUPERSEDED: &str = "another request took over loading the slice";

/// `503 slice_corrupt`: the object does not match the manifest in `aspect` (no retry: the
/// same bytes give the same mismatch until the model is uploaded again).
pub(crate) fn corrupt(key: &str, aspect: &str, what: impl fmt::Display) -> ShardError {
    ShardError::new(
        ErrorCode::SliceCorrupt,
        format!(
            "this shard's slice does not match its manifest ({aspect}); upload the model again \
             (cobordism upload)"
        ),
    )
    .with_internal(format_args!("{key}: {what}"))
}

/// `503 storage_unavailable`: the object store failed; `what` for the log.
pub(crate) fn store_failed(what: impl fmt::Display) -> ShardError {
    ShardError::new(
        ErrorCode::StorageUnavailable,
        "the shard could not read its model from storage; retry shortly",
    )
    .with_internal(what)
}

//! What `/healthz` says of the life cycle: the state the diagram is in, read from the shard's
//! state without changing it.

use super::{Phase, Shard};

/// What `/healthz` reports about the life cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// `empty`, `loading`, `ready` or `failed`.
    pub state: &'static str,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
    /// Since the last successful manifest check (resident only).
    pub checked_ms_ago: Option<f64>,
    /// Why the last manifest check failed, while checks fail; with no slice resident, why the
    /// last load failed (state `failed`).
    pub last_check_error: Option<String>,
    /// Slices loaded completely since the isolate started.
    pub loads: u64,
}

impl Shard {
    /// The life cycle's state at `now_ms`, for `/healthz`.
    pub fn health(&self, now_ms: f64) -> Health {
        let s = self.state.borrow();
        let quiet = |state| Health {
            state,
            loading_next: false,
            checked_ms_ago: None,
            last_check_error: None,
            loads: s.loads,
        };
        match &s.phase {
            Phase::Empty => quiet("empty"),
            Phase::Loading(_) => quiet("loading"),
            Phase::Failed { error, .. } => Health {
                last_check_error: Some(error.to_string()),
                ..quiet("failed")
            },
            Phase::Ready { check, next, .. } => Health {
                state: "ready",
                loading_next: next.is_some(),
                checked_ms_ago: Some(now_ms - check.ok_ms),
                last_check_error: check.last_error.clone(),
                loads: s.loads,
            },
        }
    }
}

//! What `/healthz` says of the life cycle: the state the diagram is in, read from the shard's
//! state without changing it.

use cobordism_protocol::health::State;

use super::{Phase, Shard};

/// What `/healthz` reports about the life cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// Where the life cycle is.
    pub state: State,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
    /// Since the last successful manifest check (resident only).
    pub checked_ms_ago: Option<f64>,
    /// Why the last manifest check failed, while checks fail; with no slice resident, why the
    /// last load failed (state `failed`).
    pub last_error: Option<String>,
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
            last_error: None,
            loads: s.loads,
        };
        match &s.phase {
            Phase::Empty => quiet(State::Empty),
            Phase::Loading(_) => quiet(State::Loading),
            Phase::Failed { error, .. } => Health {
                last_error: Some(error.to_string()),
                ..quiet(State::Failed)
            },
            Phase::Ready { check, next, .. } => Health {
                state: State::Ready,
                loading_next: next.is_some(),
                checked_ms_ago: Some(now_ms - check.ok_ms),
                last_error: check.last_error.clone(),
                loads: s.loads,
            },
        }
    }
}

//! What `/healthz` says of the life cycle: the state the diagram is in, read from the shard's
//! state without changing it.

use super::Shard;

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
}

impl Shard {
    /// The life cycle's state at `now_ms`, for `/healthz`.
    pub fn health(&self, now_ms: f64) -> Health {
        let s = self.state.borrow();
        let state = match (&s.ready, &s.loading, &s.failed) {
            (Some(_), _, _) => "ready",
            (None, Some(_), _) => "loading",
            (None, None, Some(_)) => "failed",
            (None, None, None) => "empty",
        };
        Health {
            state,
            loading_next: s.ready.is_some() && s.loading.is_some(),
            checked_ms_ago: s.ready.as_ref().map(|_| now_ms - s.check.ok_ms),
            last_check_error: match (&s.ready, &s.failed) {
                (None, Some((e, _))) => Some(e.to_string()),
                _ => s.check.last_error.clone(),
            },
        }
    }
}

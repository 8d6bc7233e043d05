//! A request that finds another request (or a warm-up) loading the slice waits for that load on
//! its own timer, rather than being sent away with `503 slice_loading` and coming back a whole
//! `Retry-After` later. It cannot await the loader's future itself: Workers cancel a request
//! that awaits another request's promise. So it asks again every [`LOAD_POLL_MS`]; each ask is a
//! full [`crate::Shard::ensure`], which also takes over a loader that stalled. After
//! [`LOAD_POLLS`] asks (10 s) it gives up and answers the `503 slice_loading` it got.
//!
//! Every other outcome — the slice resident, or an error that is not `slice_loading` — is the
//! answer at once. A request that waited says so (`Residency::waited_ms`, `X-Cache: wait`).

use core::future::Future;

use cobordism_protocol::ErrorCode;

use crate::{Residency, ShardError};

/// How often a request that found the slice loading asks again, in milliseconds.
pub const LOAD_POLL_MS: f64 = 20.0;
/// How many times it asks again before it answers `503 slice_loading`.
pub const LOAD_POLLS: u32 = if cfg!(shard_perturb = "wait_gives_up") {
    0
} else {
    500
};

/// `ensure()` until it is not `slice_loading`, sleeping `sleep(LOAD_POLL_MS)` between asks, at
/// most [`LOAD_POLLS`] times.
pub async fn wait_resident<E, EF, S, SF>(
    mut ensure: E,
    mut sleep: S,
) -> Result<Residency, ShardError>
where
    E: FnMut() -> EF,
    EF: Future<Output = Result<Residency, ShardError>>,
    S: FnMut(f64) -> SF,
    SF: Future<Output = ()>,
{
    let mut polls = 0;
    loop {
        match ensure().await {
            Err(e) if e.code == ErrorCode::SliceLoading && polls < LOAD_POLLS => {
                polls += 1;
                sleep(LOAD_POLL_MS).await;
            }
            done => {
                return done.map(|r| Residency {
                    waited_ms: f64::from(polls) * LOAD_POLL_MS,
                    ..r
                })
            }
        }
    }
}

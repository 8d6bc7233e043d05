//! The warm-up (`POST …/warm`), and loads that outlive the request that began them.
//!
//! Workers cancel a request's own work when its client goes away, yet a load begun for one
//! request is wanted by every later one. So a request runs [`Shard::ensure`] once, to its first
//! wait: if the slice was resident (or the answer is an error) nothing needed I/O and that is
//! the outcome. If it must wait for storage, the rest of the work is handed to the host's
//! `waitUntil` (`keep_alive`), which runs it to the end whatever becomes of the request, and
//! the request awaits a shared handle on it ([`ensure_kept_alive`]).
//!
//! The warm-up uses the same first step and never waits: a resident slice answers `200 ready`;
//! a load begun (or found under way: `slice_loading` is not an error here) answers `202`, the
//! load going on under `keep_alive` and ending by running the query's kernels once
//! ([`Resident::prime`]) so that the first real request finds them compiled; any other error
//! is the answer a request would get.

use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::Poll;
use std::rc::Rc;

use cobordism_protocol::health::WarmReport;
use cobordism_protocol::{ErrorCode, Form, Query};
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;

use crate::{Residency, Resident, Settings, Shard, ShardError};

/// [`Shard::ensure`] as a future owning or outliving what it uses, so that it may outlive the
/// request.
pub type Ensure<'a> = LocalBoxFuture<'a, Result<Residency, ShardError>>;

/// What polling an [`Ensure`] once gave.
enum FirstPoll<'a> {
    /// It needed no I/O: its outcome.
    Done(Result<Residency, ShardError>),
    /// It waits for storage: the future, to be awaited or kept alive.
    Waiting(Ensure<'a>),
}

/// Polls `ensure` once.
async fn poll_once(mut ensure: Ensure<'_>) -> FirstPoll<'_> {
    match poll_fn(|cx| Poll::Ready(Pin::new(&mut ensure).poll(cx))).await {
        Poll::Ready(done) => FirstPoll::Done(done),
        Poll::Pending => FirstPoll::Waiting(ensure),
    }
}

/// `ensure`, handed to `keep_alive` when it must wait for storage, so that the request going
/// away does not cancel it; the request awaits it all the same.
pub async fn ensure_kept_alive<'a>(
    ensure: Ensure<'a>,
    keep_alive: impl FnOnce(LocalBoxFuture<'a, ()>),
) -> Result<Residency, ShardError> {
    match poll_once(ensure).await {
        FirstPoll::Done(done) => done,
        FirstPoll::Waiting(waiting) => {
            let shared = waiting.shared();
            keep_alive(shared.clone().map(drop).boxed_local());
            shared.await
        }
    }
}

impl Shard {
    /// The warm-up: begins loading (or checking) the slice and answers at once (see the module
    /// doc). The work left goes to `keep_alive`, and its error, if any, is that future's output
    /// (for the log: nobody waits for it).
    pub async fn warm<'a>(
        self: Rc<Self>,
        cfg: &Settings,
        query: &Query,
        ensure: Ensure<'a>,
        keep_alive: impl FnOnce(LocalBoxFuture<'a, Result<(), ShardError>>),
        now_ms: impl Fn() -> f64,
    ) -> Result<WarmReport, ShardError> {
        if query.form != Form::Logits {
            return Err(ShardError::new(
                ErrorCode::BadQuery,
                "the warm-up takes only precision=exact|int8 (the kernels it primes)",
            ));
        }
        let precision = query.precision;
        match poll_once(ensure).await {
            FirstPoll::Done(Err(e)) if e.code != ErrorCode::SliceLoading => return Err(e),
            FirstPoll::Done(_) => {}
            FirstPoll::Waiting(waiting) => {
                let shard = Rc::clone(&self);
                keep_alive(
                    waiting
                        .map(move |loaded| {
                            loaded?;
                            let prime = |r: &mut Resident| r.prime(precision);
                            shard.with_resident(prime).unwrap_or(Ok(()))
                        })
                        .boxed_local(),
                )
            }
        }
        Ok(self.warm_report(cfg, now_ms()))
    }
}

//! One `POST /cobordism-lm-head`, from its headers to its answer, without I/O of its own: the
//! host hands over the wait for the slice and the body's chunks. The order is what keeps a
//! wrong or oversized request from costing memory or a load:
//!
//! 1. the request counts as arriving ([`crate::Coalescer::arrive`]: passes wait for it);
//! 2. its framing headers are judged ([`crate::declared_length`], against the largest body any
//!    manifest allows, plus the adjustments' section the query declares);
//! 3. the slice is made resident (the host's wait, [`crate::wait_resident`]);
//! 4. the declared length is checked against this slice's exact cap (`413` before a byte is
//!    read), and a section too large for the memory this shard keeps for bodies is refused
//!    (`413`: no wait could make room for it);
//! 5. a body buffer is claimed within the memory budget (`503 busy` when all are taken; a body
//!    with adjustments claims the slots `MemoryNeed::body_slots` counts);
//! 6. the body is read into it, chunk by chunk, stopping past the cap; none or an empty one is
//!    `411 length_required`;
//! 7. the request joins a pass ([`crate::Coalescer::answer`]).

use core::future::Future;

use cobordism_protocol::wire::{AnswerHeaders, Cache};
use cobordism_protocol::{max_body_bytes, ErrorCode, Form, Query, MAX_HIDDEN};
use futures_util::{Stream, StreamExt};

use crate::error::{slice_loading, REPLACED};
use crate::{declared_length, too_large, Answer, Isolate, Residency, Settings, ShardError};

/// The largest body any manifest allows: refused from its `Content-Length` before anything else.
pub const MAX_BODY_BYTES: usize = max_body_bytes(MAX_HIDDEN as u64) as usize;

/// The request's framing headers, as sent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Framing<'a> {
    /// `Content-Length`.
    pub content_length: Option<&'a str>,
    /// `Transfer-Encoding`.
    pub transfer_encoding: Option<&'a str>,
}

/// A request served: its answer, how it found the slice, and its compute time on the host's
/// clock.
pub struct Served {
    /// The answer.
    pub answer: Answer,
    /// How the request found the slice.
    pub residency: Residency,
    /// Milliseconds from the body's end to the answer (0 where the clock stands still).
    pub compute_ms: f64,
}

impl Served {
    /// The answer's headers for `query` ([`AnswerHeaders::pairs`] gives their values).
    pub fn headers<'a>(&'a self, cfg: &Settings, query: &Query) -> AnswerHeaders<'a> {
        AnswerHeaders {
            shard_index: cfg.shard_index,
            shard_count: cfg.shard_count,
            vocab: self.answer.vocab,
            row_start: self.answer.row_start,
            row_count: self.answer.row_count,
            batch: self.answer.n,
            pass_vectors: self.answer.pass_vectors,
            precision: query.precision.name(),
            manifest_version: &self.answer.version,
            cache: match &self.residency {
                r if !r.hit => Cache::Miss,
                r if r.waited_ms > 0.0 => Cache::Wait,
                _ => Cache::Hit,
            },
            load_ms: self.residency.load_ms + self.residency.waited_ms,
            compute_ms: self.compute_ms,
            reply: query.form.name(),
            top_k: match query.form {
                Form::TopK { k, .. } => Some(k),
                _ => None,
            },
        }
    }
}

impl Isolate<'_> {
    /// Serves one request (the module's steps): `resident` waits until the slice is resident,
    /// `body` yields the body's chunks (`None`: the request has no body), `next_turn` yields to
    /// the event loop when coalescing is on, and `now` is the host's clock.
    #[allow(clippy::too_many_arguments)]
    pub async fn lm_head<W, WF, B, Y>(
        &self,
        cfg: &Settings,
        query: &Query,
        framing: Framing<'_>,
        resident: W,
        body: Option<B>,
        next_turn: Option<impl Fn() -> Y>,
        now: fn() -> f64,
    ) -> Result<Served, ShardError>
    where
        W: FnOnce() -> WF,
        WF: Future<Output = Result<Residency, ShardError>>,
        B: Stream<Item = Result<Vec<u8>, ShardError>>,
        Y: Future<Output = ()>,
    {
        let arrival = self.passes.arrive();
        let section = query.adjust.unwrap_or(0);
        let declared = declared_length(
            framing.content_length,
            framing.transfer_encoding,
            MAX_BODY_BYTES + section,
        )?;
        let residency = resident().await?;
        let (hidden, slots, weight) = self
            .shard
            .with_resident(|r| {
                let need = &r.need;
                let weight = need.body_slots(section);
                (
                    r.manifest.hidden,
                    need.bodies_in_flight(cfg.budget_bytes),
                    weight,
                )
            })
            .ok_or_else(|| slice_loading(REPLACED))?;
        let cap = max_body_bytes(hidden as u64) as usize + section;
        if declared.is_some_and(|n| n > cap as u64) && !cfg!(shard_perturb = "body_first") {
            return Err(too_large(cap));
        }
        if weight > slots {
            return Err(section_too_large(section, weight, slots));
        }
        let buffer = self
            .bodies
            .acquire(slots as usize, weight as usize, cap, now())?;
        if let Some(body) = body {
            let mut body = core::pin::pin!(body);
            while let Some(chunk) = body.next().await {
                buffer.push(&chunk?, cap, now())?;
            }
        }
        if buffer.with(<[u8]>::is_empty)? {
            return Err(ShardError::new(
                ErrorCode::LengthRequired,
                "send the hidden state as the body (little-endian f32)",
            ));
        }
        let started = now();
        let answer = self
            .passes
            .answer(self.shard, (arrival, buffer), query.clone(), next_turn, now)
            .await?;
        Ok(Served {
            answer,
            residency,
            compute_ms: now() - started,
        })
    }
}

/// `413` for adjustments whose section needs more body memory than the shard keeps.
fn section_too_large(section: usize, weight: u64, slots: u64) -> ShardError {
    ShardError::new(
        ErrorCode::PayloadTooLarge,
        format!(
            "the adjustments' {section} bytes need the memory of {weight} request bodies; this \
             shard holds {slots} at once: send fewer adjustments per request"
        ),
    )
}

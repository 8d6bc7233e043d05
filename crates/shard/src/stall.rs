//! Taking over a stalled holder. Three things are held on behalf of a request that may never
//! resume (Workers drop a request's future when its client goes away): a slice's load, a
//! manifest check, and a request body's buffer. Each records when it last made progress; one
//! that made none for its limit is *stalled*, and the next request that needs what it holds
//! takes it over. The holder, should it ever wake, finds its claim gone (a newer load
//! generation, a new lease) and stops.

/// Whether a holder whose last progress was at `last_progress_ms` is stalled at `now_ms`: no
/// progress for `limit_ms` or more.
pub(crate) fn stalled(last_progress_ms: f64, now_ms: f64, limit_ms: f64) -> bool {
    now_ms - last_progress_ms >= limit_ms
}

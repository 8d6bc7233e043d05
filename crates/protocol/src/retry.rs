//! Which failed requests a client sends again: the rule `cobordism logits`/`sample`/`logprobs`
//! and `@cobordism/client` share.
//!
//! The shard decides. Its errors are JSON (`{"error": code, …}`) and carry `Retry-After` exactly
//! when waiting can help: the slice is loading, every body buffer is taken, storage failed,
//! memory is short. Every other shard error fails the same way again — a 4xx (the request is
//! wrong) or a 503 without `Retry-After` (the deployment is: `auth_not_configured`,
//! `misconfigured`, `manifest_missing`, …) — so it is reported at once, with the shard's
//! `detail`. A 429 or 5xx that is not the shard's own (no JSON error code: the platform's
//! 502/503/504, a proxy's 429) and a failed connection or timeout are retried.
//!
//! [`retry_wait`] says how long to wait before a retry: the shard's `Retry-After`
//! ([`retry_after`], at most [`MAX_RETRY_AFTER`]), else a backoff of 200 ms doubling per retry;
//! [`DEFAULT_RETRIES`] how many retries a caller makes unless told otherwise.

use std::time::Duration;

/// Retries after the first attempt unless the caller says otherwise (`cobordism --retries`,
/// `@cobordism/client`'s `retries`). Five: a request for a slice that is loading waits about
/// 10 s in the shard before its `503 slice_loading` (`Retry-After: 1`), so five retries wait
/// out a cold load of up to a minute, and the backoff's 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s a
/// platform's restart; a shard that is down is reported within that time.
pub const DEFAULT_RETRIES: u32 = 5;

/// The longest `Retry-After` honoured: a longer one is waited for this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The backoff before the first retry without `Retry-After`; it doubles per retry.
const BACKOFF: Duration = Duration::from_millis(200);

/// Doublings after which the backoff stays put (200 ms · 2⁷ = 25.6 s).
const MAX_DOUBLINGS: u32 = 7;

/// The wait a `Retry-After` value asks for: seconds (a finite number ≥ 0), at most
/// [`MAX_RETRY_AFTER`]; `None` for anything else (then the backoff applies).
pub fn retry_after(value: &str) -> Option<Duration> {
    let secs = value.trim().parse::<f64>().ok()?;
    let secs = (secs.is_finite() && secs >= 0.0).then_some(secs)?;
    Some(Duration::from_secs_f64(
        secs.min(MAX_RETRY_AFTER.as_secs_f64()),
    ))
}

/// The wait before retry `retry` (1: the first retry): the shard's [`retry_after`] when it sent
/// one, else 200 ms doubling per retry up to 25.6 s.
pub fn retry_wait(retry: u32, retry_after: Option<Duration>) -> Duration {
    let doublings = retry.clamp(1, MAX_DOUBLINGS + 1) - 1;
    retry_after.unwrap_or(BACKOFF * 2u32.pow(doublings))
}

/// Whether a request that got `status` is worth sending again. `shard_error`: the body was the
/// shard's JSON error; `retry_after`: the answer had a `Retry-After` header.
pub fn worth_retrying(status: u16, shard_error: bool, retry_after: bool) -> bool {
    if shard_error {
        return retry_after;
    }
    status == 429 || (500..=599).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_200_ms_and_stops_at_25_6_s() {
        let ms = |retry| retry_wait(retry, None).as_millis();
        let waits: Vec<u128> = (1..=10).map(ms).collect();
        let want = [
            200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 25_600, 25_600,
        ];
        assert_eq!(waits, want);
        assert_eq!(ms(0), 200);
        assert_eq!(ms(u32::MAX), 25_600);
    }

    #[test]
    fn retry_after_is_honoured_up_to_30_s() {
        let after = |v| retry_after(v).map(|d| d.as_millis());
        assert_eq!(after("1"), Some(1000));
        assert_eq!(after(" 2.5 "), Some(2500));
        assert_eq!(after("0"), Some(0));
        assert_eq!(after("31"), Some(30_000));
        assert_eq!(after("1e300"), Some(30_000));
        for bad in [
            "",
            "-1",
            "NaN",
            "inf",
            "soon",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ] {
            assert_eq!(after(bad), None, "{bad:?}");
        }
        let wait = retry_wait(3, retry_after("1"));
        assert_eq!(
            wait,
            Duration::from_secs(1),
            "the shard's word over the backoff"
        );
    }

    #[test]
    fn the_shard_says_what_can_pass_on_retry() {
        // slice_loading, busy, storage_unavailable: 503 + Retry-After.
        assert!(worth_retrying(503, true, true));
        // auth_not_configured, misconfigured, manifest_missing: 503 without it.
        assert!(!worth_retrying(503, true, false));
        // internal (a bug) and every 4xx of the shard.
        for status in [500, 400, 401, 404, 408, 411, 413] {
            assert!(!worth_retrying(status, true, false), "{status}");
        }
        // Not the shard's answers: the platform's or a proxy's.
        for status in [429, 500, 502, 503, 504] {
            assert!(worth_retrying(status, false, false), "{status}");
        }
        for status in [400, 401, 404] {
            assert!(!worth_retrying(status, false, false), "{status}");
        }
    }
}

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
    use super::worth_retrying;

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

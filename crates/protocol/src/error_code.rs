//! Every error a shard answers with, in one table: its wire name (the JSON `error` of the
//! answer), its HTTP status and, where waiting can help, its `Retry-After`. A client retries
//! exactly the shard errors that carry `Retry-After` ([`crate::worth_retrying`]); every other
//! one fails the same way again — a 4xx (the request is wrong), a 500 (a bug) or a 503 without
//! `Retry-After` (the deployment is wrong, and only its operator can fix it).

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $status:literal, $retry:expr;)*) => {
        /// An error answer's code. docs/API.md, "Errors", says when each is sent.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, in the table's order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as the answer's JSON `error` says it.
            pub fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }

            /// The answer's HTTP status.
            pub fn status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)*
                }
            }

            /// Seconds for `Retry-After`, for the errors that waiting can mend.
            pub fn retry_after(self) -> Option<u32> {
                match self {
                    $(ErrorCode::$variant => $retry,)*
                }
            }
        }
    };
}

error_codes! {
    /// The body is not `n × 4·hidden` bytes with `1 ≤ n ≤ 8`.
    BadLength = "bad_length", 400, None;
    /// A hidden value, a logit or a section's log-sum-exp is not finite.
    NonFinite = "non_finite", 400, None;
    /// The body's framing is refused, or it cannot be read to its end.
    BadFraming = "bad_framing", 400, None;
    /// `top_k` is not an integer in 1…1024.
    BadTopK = "bad_top_k", 400, None;
    /// `temperature` is not a number from 0.01 to 1000.
    BadTemperature = "bad_temperature", 400, None;
    /// `seed` or `seeds` is wrong.
    BadSeed = "bad_seed", 400, None;
    /// `tokens` is not 1…1024 comma-separated ids.
    BadTokens = "bad_tokens", 400, None;
    /// The query's parameters do not make one request.
    BadQuery = "bad_query", 400, None;
    /// `precision` is not `exact` or `int8`.
    BadPrecision = "bad_precision", 400, None;
    /// `adjust` or the adjustments' section at the end of the body is wrong.
    BadAdjust = "bad_adjust", 400, None;
    /// The bearer token is missing or wrong.
    Unauthorized = "unauthorized", 401, None;
    /// No such route.
    NotFound = "not_found", 404, None;
    /// The route takes another method.
    MethodNotAllowed = "method_not_allowed", 405, None;
    /// The body stalled and its buffer went to another request.
    BodyStalled = "body_stalled", 408, None;
    /// No body, or an empty one.
    LengthRequired = "length_required", 411, None;
    /// The body is larger than the largest the slice takes.
    PayloadTooLarge = "payload_too_large", 413, None;
    /// A bug; the log says which.
    Internal = "internal", 500, None;
    /// Every body buffer the memory budget allows is taken.
    Busy = "busy", 503, Some(1);
    /// The slice is loading, or was replaced while the request waited.
    SliceLoading = "slice_loading", 503, Some(1);
    /// The object store failed while the slice loaded.
    StorageUnavailable = "storage_unavailable", 503, Some(2);
    /// Wasm memory could not grow as far as needed.
    OutOfMemory = "out_of_memory", 503, Some(5);
    /// The shard's Durable Object failed this request (it was reset or moved): the next
    /// request reaches it again.
    ObjectUnavailable = "object_unavailable", 503, Some(1);
    /// A front and its shard's object run builds whose forward differs (a rollout under way:
    /// Cloudflare updates Workers and objects apart); either side retried later meets its peer.
    BuildMismatch = "build_mismatch", 503, Some(2);
    /// No token and no `ALLOW_ANONYMOUS`: the shard serves nobody.
    AuthNotConfigured = "auth_not_configured", 503, None;
    /// The variables, the manifest or the bindings disagree.
    Misconfigured = "misconfigured", 503, None;
    /// No manifest under the prefix.
    ManifestMissing = "manifest_missing", 503, None;
    /// The manifest does not parse or is inconsistent.
    ManifestInvalid = "manifest_invalid", 503, None;
    /// The slice the manifest names is not in the bucket.
    SliceMissing = "slice_missing", 503, None;
    /// The slice's size or checksum does not match the manifest.
    SliceCorrupt = "slice_corrupt", 503, None;
    /// The slice would not fit the memory budget.
    OverBudget = "over_budget", 503, None;
}

impl ErrorCode {
    /// The code named `name` on the wire, if it is one.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.name() == name)
    }
}

impl core::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;
    use crate::worth_retrying;

    #[test]
    fn names_are_unique_and_read_back() {
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_name(code.name()), Some(code));
            assert!(code
                .name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(ErrorCode::from_name("slice-loading"), None);
    }

    #[test]
    fn only_503s_carry_retry_after_and_clients_retry_exactly_those() {
        for &code in ErrorCode::ALL {
            let retry = code.retry_after().is_some();
            assert!(!retry || code.status() == 503, "{code}");
            assert_eq!(worth_retrying(code.status(), true, retry), retry, "{code}");
        }
        let retried: Vec<&str> = ErrorCode::ALL
            .iter()
            .filter(|c| c.retry_after().is_some())
            .map(|c| c.name())
            .collect();
        assert_eq!(
            retried,
            [
                "busy",
                "slice_loading",
                "storage_unavailable",
                "out_of_memory",
                "object_unavailable",
                "build_mismatch"
            ]
        );
    }
}

//! The parts of a request the shard checks before any work: the `top_k` query value and the
//! `Authorization` header. Here rather than in the worker so they are tested and fuzzed natively.

use subtle::ConstantTimeEq;

use crate::MAX_TOP_K;

/// Parses the value of `?top_k=`: an integer from 1 to [`MAX_TOP_K`].
pub fn parse_top_k(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(k) if (1..=MAX_TOP_K).contains(&k) => Ok(k),
        _ => Err(format!(
            "top_k must be an integer from 1 to {MAX_TOP_K}, not {value:?}"
        )),
    }
}

/// Whether an `Authorization` header value is `Bearer <expected>`. The token comparison takes
/// the same time wherever the first difference is (only the length may leak).
pub fn bearer_matches(header: Option<&str>, expected: &str) -> bool {
    let token = header
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    token.is_some_and(|t| bool::from(t.as_bytes().ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_bounds() {
        assert_eq!(parse_top_k("1"), Ok(1));
        assert_eq!(parse_top_k("1024"), Ok(1024));
        for bad in ["0", "1025", "-1", "x", "", " 5", "99999999999999999999999"] {
            assert!(parse_top_k(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bearer_tokens() {
        assert!(bearer_matches(Some("Bearer s3cret"), "s3cret"));
        assert!(bearer_matches(Some("Bearer s3cret "), "s3cret"));
        for bad in [
            None,
            Some("s3cret"),
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("bearer s3cret"),
            Some(""),
        ] {
            assert!(!bearer_matches(bad, "s3cret"), "{bad:?}");
        }
    }
}

//! The parts of a request the shard checks before any work: the `top_k` query value and the
//! `Authorization` header. Here rather than in the worker so they are tested and fuzzed natively.

use subtle::ConstantTimeEq;

use crate::MAX_TOP_K;

/// How a shard computes: the exact canonical order (default) or kquant's 8-bit fast mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// f32 activations (`?precision=exact`, the default).
    #[default]
    Exact,
    /// Activations quantized to 8 bits per 256 columns (`?precision=int8`).
    Int8,
}

impl Precision {
    /// The query value.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Exact => "exact",
            Precision::Int8 => "int8",
        }
    }

    /// Parses the value of `?precision=`.
    pub fn parse(value: &str) -> Result<Precision, String> {
        match value {
            "exact" => Ok(Precision::Exact),
            "int8" => Ok(Precision::Int8),
            _ => Err(format!("precision must be exact or int8, not {value:?}")),
        }
    }
}

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
    fn precisions() {
        for p in [Precision::Exact, Precision::Int8] {
            assert_eq!(Precision::parse(p.name()), Ok(p));
        }
        assert!(Precision::parse("fp16").is_err());
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

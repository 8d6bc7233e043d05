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

/// Who may call a shard: its policy (`AUTH_TOKEN` secret, `ALLOW_ANONYMOUS` variable) applied
/// to one request's `Authorization` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The right token, or no token configured and anonymous access allowed explicitly.
    Granted,
    /// A token is configured and the request does not carry it.
    Unauthorized,
    /// No token is configured and anonymous access is not allowed: the shard serves nobody.
    NotConfigured,
}

/// The secret holding the token every caller needs.
pub const TOKEN_SECRET: &str = "AUTH_TOKEN";
/// The secret holding the token a rotation retires, accepted too until it finishes.
pub const PREVIOUS_TOKEN_SECRET: &str = "AUTH_TOKEN_PREVIOUS";

impl Access {
    /// Closed by default: without a (non-empty) token only `allow_anonymous` opens the shard; with
    /// one, a request must carry one of the `tokens` (`AUTH_TOKEN` and, while a rotation is under
    /// way, `AUTH_TOKEN_PREVIOUS`; empty ones are ignored) whatever `allow_anonymous` says.
    pub fn decide(tokens: &[&str], allow_anonymous: bool, header: Option<&str>) -> Access {
        // A must-fail build (crates/protocol/must-fail.txt) accepts `AUTH_TOKEN` alone.
        let considered = if cfg!(protocol_perturb = "previous_token_ignored") {
            &tokens[..tokens.len().min(1)]
        } else {
            tokens
        };
        let accepted: Vec<&str> = considered
            .iter()
            .copied()
            .filter(|t| !t.is_empty())
            .collect();
        match (accepted.is_empty(), allow_anonymous) {
            (false, _) if bearer_matches(header, &accepted) => Access::Granted,
            (false, _) => Access::Unauthorized,
            (true, true) => Access::Granted,
            (true, false) => Access::NotConfigured,
        }
    }
}

/// HTTP's optional white space (RFC 9110): spaces and tabs, nothing else.
fn trim_ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// Whether an `Authorization` header value is `Bearer <token>` with one of the `accepted` tokens.
/// The scheme matches in any case (RFC 9110) and may be followed by several spaces; only spaces
/// and tabs count as white space around the credential (a token followed by U+2003 or U+00A0
/// is another token). The comparison takes the same time wherever the first difference is and
/// whichever token matches: every accepted token is compared (only the lengths may leak).
///
/// The runtime joins repeated headers into one value with `", "` (and drops a leading empty
/// one), and a bearer token cannot contain a comma: so the value is split at commas, empty
/// elements (an empty header carries no credential) are dropped, and exactly one credential
/// must remain. Two credentials are refused whatever their order, even two right ones.
pub fn bearer_matches(header: Option<&str>, accepted: &[&str]) -> bool {
    let mut credentials = header
        .unwrap_or("")
        .split(',')
        .map(trim_ows)
        .filter(|c| !c.is_empty());
    let (Some(credential), None) = (credentials.next(), credentials.next()) else {
        return false;
    };
    let token = credential.split_once(' ').and_then(|(scheme, token)| {
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| trim_ows(token))
    });
    token.is_some_and(|t| {
        let matches = accepted
            .iter()
            .fold(subtle::Choice::from(0), |any, expected| {
                any | t.as_bytes().ct_eq(expected.as_bytes())
            });
        bool::from(matches)
    })
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
        let s3cret = &["s3cret"];
        assert!(bearer_matches(Some("Bearer s3cret"), s3cret));
        assert!(bearer_matches(Some("Bearer s3cret "), s3cret));
        assert!(bearer_matches(Some("\tBearer s3cret\t"), s3cret));
        assert!(bearer_matches(Some("bearer s3cret"), s3cret));
        assert!(bearer_matches(Some("BEARER  s3cret"), s3cret));
        // Repeated headers as the runtime joins them: empty ones carry nothing, in any order.
        assert!(bearer_matches(Some("Bearer s3cret, "), s3cret));
        assert!(bearer_matches(Some(", Bearer s3cret"), s3cret));
        for bad in [
            None,
            Some("s3cret"),
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Bearers3cret"),
            Some("Basic s3cret"),
            Some("Bearer"),
            Some("Bearer "),
            Some(""),
            Some("Bearer s3cret, Bearer s3cret"),
            Some("Bearer s3cret, Bearer other"),
            Some("Bearer other, Bearer s3cret"),
            Some("Bearer s3cret,x"),
            Some(","),
            // Only SP and HTAB are white space around a credential.
            Some("Bearer s3cret\u{2003}"),
            Some("Bearer s3cret\u{a0}"),
            Some("\u{a0}Bearer s3cret"),
            Some("Bearer \u{2003}s3cret"),
        ] {
            assert!(!bearer_matches(bad, s3cret), "{bad:?}");
        }
    }
}

//! How a request's body is framed, judged from its headers before a byte of it is read.
//!
//! * `Content-Length` together with `Transfer-Encoding` is refused (`400 bad_framing`): RFC 9112
//!   §6.3 lets Transfer-Encoding win but says such a message "ought to be handled as an error",
//!   since a sender and a proxy that disagree on which one counts is how requests are smuggled.
//! * A `Content-Length` that is not one decimal number (also several differing values, which
//!   the runtime joins as `"5, 6"`) is refused (`400 bad_framing`); one of more digits than a
//!   u64 holds, or over the cap, is `413 payload_too_large` — all before the body is read, so
//!   such a request never holds a body buffer.
//! * A body that cannot be read to its end (a malformed chunk, a connection closed early) is
//!   [`unreadable`] (`400 bad_framing`): resending the same bytes cannot help.

use cobordism_protocol::ErrorCode;

use crate::bodies::too_large;
use crate::error::ShardError;

fn bad_framing(detail: impl Into<String>) -> ShardError {
    ShardError::new(ErrorCode::BadFraming, detail)
}

/// The declared body length (`None`: none declared, e.g. chunked), or the error to answer
/// with; `cap` is the largest body accepted.
pub fn declared_length(
    content_length: Option<&str>,
    transfer_encoding: Option<&str>,
    cap: usize,
) -> Result<Option<u64>, ShardError> {
    let Some(value) = content_length else {
        return Ok(None);
    };
    if transfer_encoding.is_some() {
        return Err(bad_framing(
            "Content-Length and Transfer-Encoding together: send one of them",
        ));
    }
    let digits = value.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_framing(format!(
            "Content-Length must be one decimal number, not {value:?}"
        )));
    }
    match digits.parse::<u64>() {
        Ok(n) if n <= cap as u64 => Ok(Some(n)),
        _ => Err(too_large(cap)),
    }
}

/// `400 bad_framing` for a body whose stream failed while it was read.
pub fn unreadable(why: impl core::fmt::Display) -> ShardError {
    bad_framing(
        "the body could not be read to its end (a malformed chunk, or the connection closed \
         before it was complete)",
    )
    .with_internal(format_args!("reading the body: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Option<u64>, ShardError>) -> Result<Option<u64>, &'static str> {
        r.map_err(|e| e.code.name())
    }

    #[test]
    fn lengths_are_read_strictly_and_capped() {
        assert_eq!(code(declared_length(None, None, 100)), Ok(None));
        assert_eq!(code(declared_length(None, Some("chunked"), 100)), Ok(None));
        assert_eq!(code(declared_length(Some("100"), None, 100)), Ok(Some(100)));
        assert_eq!(code(declared_length(Some(" 0 "), None, 100)), Ok(Some(0)));
        for too_big in [
            "101",
            "18446744073709551615",
            "18446744073709551616",
            "9".repeat(40).as_str(),
        ] {
            assert_eq!(
                code(declared_length(Some(too_big), None, 100)),
                Err("payload_too_large"),
                "{too_big}"
            );
        }
        for bad in ["", "-1", "+5", "0x10", "1e3", "5, 6", "abc", "1 2"] {
            assert_eq!(
                code(declared_length(Some(bad), None, 100)),
                Err("bad_framing"),
                "{bad:?}"
            );
        }
        assert_eq!(
            code(declared_length(Some("5"), Some("chunked"), 100)),
            Err("bad_framing")
        );
    }
}

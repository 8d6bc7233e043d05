//! The request body: `n` hidden vectors of `hidden` little-endian f32 each (`1 ≤ n ≤ 8`).

use core::fmt;

/// Most hidden vectors in one request (the slice is read once for all of them).
pub const MAX_BATCH: usize = 8;

/// The largest request body for vectors of `hidden` floats: `MAX_BATCH` of them, 4 bytes each
/// (saturating, for a `hidden` not yet validated).
pub const fn max_body_bytes(hidden: u64) -> u64 {
    (MAX_BATCH as u64 * 4).saturating_mul(hidden)
}

/// Why a request body was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum HiddenError {
    /// Empty body.
    Empty,
    /// Not `n · 4 · hidden` bytes for an `n` in `1..=MAX_BATCH`.
    BadLength {
        /// Bytes received.
        len: usize,
        /// Bytes of one hidden vector (`4 · hidden`).
        vector_bytes: usize,
    },
    /// A value is NaN or infinite.
    NonFinite {
        /// Its index in the body (in floats).
        index: usize,
    },
}

impl fmt::Display for HiddenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HiddenError::Empty => write!(f, "the body is empty"),
            HiddenError::BadLength { len, vector_bytes } => write!(
                f,
                "the body has {len} bytes; expected n × {vector_bytes} (n hidden vectors of \
                 little-endian f32, 1 ≤ n ≤ {MAX_BATCH})"
            ),
            HiddenError::NonFinite { index } => {
                write!(f, "value {index} of the body is NaN or infinite")
            }
        }
    }
}

impl std::error::Error for HiddenError {}

/// Decodes a body of `n · hidden` little-endian f32; returns the floats and `n`.
pub fn decode_hidden(body: &[u8], hidden: usize) -> Result<(Vec<f32>, usize), HiddenError> {
    let mut floats = Vec::new();
    let n = decode_hidden_into(body, hidden, &mut floats)?;
    Ok((floats, n))
}

/// Decodes a body of `n · hidden` little-endian f32 onto the end of `out` (a shard's pass
/// gathers several requests' vectors this way); returns `n`. Nothing is appended on error.
pub fn decode_hidden_into(
    body: &[u8],
    hidden: usize,
    out: &mut Vec<f32>,
) -> Result<usize, HiddenError> {
    let n = check_hidden(body, hidden)?;
    out.extend(floats(body));
    Ok(n)
}

/// Checks a body of `n · hidden` little-endian f32 without copying it: its length, and that
/// every value is finite; returns `n`.
pub fn check_hidden(body: &[u8], hidden: usize) -> Result<usize, HiddenError> {
    if body.is_empty() {
        return Err(HiddenError::Empty);
    }
    let vector_bytes = 4 * hidden;
    let n = body.len() / vector_bytes.max(1);
    if vector_bytes == 0 || !body.len().is_multiple_of(vector_bytes) || n > MAX_BATCH {
        return Err(HiddenError::BadLength {
            len: body.len(),
            vector_bytes,
        });
    }
    if let Some(index) = floats(body).position(|v| !v.is_finite()) {
        return Err(HiddenError::NonFinite { index });
    }
    Ok(n)
}

/// The little-endian f32 values of `bytes` (a multiple of 4 long).
fn floats(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Little-endian bytes of `values` (logits out, hidden vectors in).
pub fn encode_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_batches_and_refuses_bad_bodies() {
        let x = [1.0f32, -2.5, 0.0, 3.0];
        assert_eq!(decode_hidden(&encode_f32(&x), 2).unwrap(), (x.to_vec(), 2));
        assert_eq!(decode_hidden(&encode_f32(&x), 4).unwrap().1, 1);
        assert_eq!(decode_hidden(&[], 4), Err(HiddenError::Empty));
        assert!(matches!(
            decode_hidden(&[0; 15], 4),
            Err(HiddenError::BadLength { len: 15, .. })
        ));
        assert!(matches!(
            decode_hidden(&[0; 4 * 9], 1),
            Err(HiddenError::BadLength { .. })
        ));
        assert!(matches!(
            decode_hidden(&[0; 4], 0),
            Err(HiddenError::BadLength { .. })
        ));
        let bad = encode_f32(&[1.0, f32::NAN]);
        assert_eq!(
            decode_hidden(&bad, 2),
            Err(HiddenError::NonFinite { index: 1 })
        );
        let mut out = vec![9.0];
        assert_eq!(check_hidden(&encode_f32(&x), 2), Ok(2));
        assert_eq!(
            decode_hidden_into(&bad, 2, &mut out),
            Err(HiddenError::NonFinite { index: 1 })
        );
        assert_eq!(decode_hidden_into(&encode_f32(&x), 4, &mut out), Ok(1));
        assert_eq!(
            out,
            [9.0, 1.0, -2.5, 0.0, 3.0],
            "appended after what was there"
        );
        assert!(HiddenError::NonFinite { index: 1 }
            .to_string()
            .contains("value 1"));
    }
}

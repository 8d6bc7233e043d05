//! The answer to `?top_k=K`: a shard's K largest logits with their global token ids, plus the
//! shard's max logit and log-sum-exp, so a client can normalise over the whole vocabulary.
//!
//! Wire format (little-endian), one section per hidden vector of the request:
//!
//! ```text
//! u32 k | f32 max_logit | f32 log_sum_exp | k × (u32 token_id, f32 logit)
//! ```
//!
//! Entries are sorted by logit, largest first; equal logits by token id, smallest first.
//! `log_sum_exp = max + ln Σ exp(z − max)`, summed in f64 in row order, rounded once to f32
//! (with the `libm` crate's `exp`/`log`, so every platform gives the same bits).

use core::fmt;

use crate::sampling::{by_logit, log_sum_exp};

/// Largest K a shard answers.
pub const MAX_TOP_K: usize = 1024;

/// One section of a top-k answer.
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    /// Largest logit of the shard.
    pub max_logit: f32,
    /// `ln Σ exp(z)` over the shard's logits.
    pub log_sum_exp: f32,
    /// `(global token id, logit)`, best first.
    pub entries: Vec<(u32, f32)>,
}

/// A malformed top-k answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKError(pub String);

impl fmt::Display for TopKError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed top-k answer: {}", self.0)
    }
}

impl std::error::Error for TopKError {}

impl TopK {
    /// The top `k` of `logits`, whose first row is token `row_start`.
    pub fn compute(logits: &[f32], row_start: u32, k: usize) -> TopK {
        TopK::compute_at(logits, row_start, k, 1.0)
    }

    /// [`TopK::compute`] with the log-sum-exp at `temperature`: `ln Σ exp(z / T)`.
    pub fn compute_at(logits: &[f32], row_start: u32, k: usize, temperature: f32) -> TopK {
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let better =
            |a: &u32, b: &u32| by_logit(&(*a, logits[*a as usize]), &(*b, logits[*b as usize]));
        let k = k.min(logits.len());
        if k > 0 && k < order.len() {
            order.select_nth_unstable_by(k - 1, better);
        }
        order.truncate(k);
        order.sort_by(better);
        TopK {
            max_logit: logits.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            log_sum_exp: log_sum_exp(logits, temperature) as f32,
            entries: order
                .into_iter()
                .map(|i| (row_start + i, logits[i as usize]))
                .collect(),
        }
    }

    /// Appends the wire form to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend((self.entries.len() as u32).to_le_bytes());
        out.extend(self.max_logit.to_le_bytes());
        out.extend(self.log_sum_exp.to_le_bytes());
        for (id, z) in &self.entries {
            out.extend(id.to_le_bytes());
            out.extend(z.to_le_bytes());
        }
    }

    /// Decodes all sections of an answer.
    pub fn decode_all(mut bytes: &[u8]) -> Result<Vec<TopK>, TopKError> {
        let mut sections = Vec::new();
        let word = |b: &[u8], i: usize| [b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]];
        while !bytes.is_empty() {
            if bytes.len() < 12 {
                return Err(TopKError(format!(
                    "{} bytes left, header needs 12",
                    bytes.len()
                )));
            }
            let k = u32::from_le_bytes(word(bytes, 0)) as usize;
            if k > MAX_TOP_K || bytes.len() < 12 + 8 * k {
                return Err(TopKError(format!(
                    "k = {k} with {} bytes left",
                    bytes.len()
                )));
            }
            let entries = (0..k)
                .map(|e| {
                    (
                        u32::from_le_bytes(word(bytes, 3 + 2 * e)),
                        f32::from_le_bytes(word(bytes, 4 + 2 * e)),
                    )
                })
                .collect();
            sections.push(TopK {
                max_logit: f32::from_le_bytes(word(bytes, 1)),
                log_sum_exp: f32::from_le_bytes(word(bytes, 2)),
                entries,
            });
            bytes = &bytes[12 + 8 * k..];
        }
        Ok(sections)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_largest_and_round_trips() {
        let logits = [0.5f32, 3.0, -1.0, 3.0, 2.0];
        let t = TopK::compute(&logits, 100, 3);
        assert_eq!(t.entries, vec![(101, 3.0), (103, 3.0), (104, 2.0)]);
        assert_eq!(t.max_logit, 3.0);
        let lse = logits.iter().map(|&z| f64::from(z).exp()).sum::<f64>().ln();
        assert!((f64::from(t.log_sum_exp) - lse).abs() < 1e-6);
        let mut wire = Vec::new();
        t.encode_into(&mut wire);
        t.encode_into(&mut wire);
        assert_eq!(TopK::decode_all(&wire).unwrap(), vec![t.clone(), t]);
        assert_eq!(TopK::compute(&logits, 0, 10).entries.len(), 5);
        assert!(TopK::decode_all(&wire[..13]).is_err());
        assert!(TopK::decode_all(&[0xFF; 12]).is_err());
    }
}

//! The adjustments' wire layout, version 1: a *section* after the hidden vectors of a request
//! whose query says `adjust=LEN` (the section's bytes, at most [`MAX_ADJUST_BYTES`]).
//!
//! ```text
//! section = u32 version (1) | u32 n (the request's vector count) | n records, in vector order
//! record  = v flags                    bit 0: an allowed set follows; the other bits 0
//!         | f32 presence | f32 frequency | f32 repetition
//!         | v b | b × (v token step, f32 bias)
//!         | v h | h × (v token step, v count)
//!         | [v a | a × (v gap, v length − 1)]          if flagged
//! ```
//!
//! `u32` and `f32` are 4 little-endian bytes; `v` is an unsigned LEB128 varint of at most 32
//! bits (7 bits a byte, low first, the high bit set on every byte but the last), in its shortest
//! form. Lists are sorted by token and *delta-coded*: a token's step is its distance from the
//! previous token minus one (the first token's step is the token), so ids strictly increase by
//! construction; an allowed range `[start, end)` is written as its gap from the previous range's
//! end (minus one past the first: ranges stay apart) and its length minus one (never empty).
//!
//! Most steps, gaps and counts are under 128, one byte: a history of 4,096 distinct tokens of a
//! 152k vocabulary is ~8 KiB (a real text's 4,096 tokens, with repeats counted once, less), a
//! record that adjusts nothing 15 bytes, an allowed set of all but a few hundred scattered tokens
//! a few hundred bytes. Decoding refuses anything else with a sentence: another version, a count
//! other than the request's `n`, a varint that is not the shortest or passes 32 bits, ids or
//! ranges past `u32`, a section cut short or followed by bytes; then [`Adjust::validate`].

use super::{
    refuse, Adjust, AdjustError, ADJUST_VERSION, MAX_ADJUST_BYTES, MAX_ALLOWED_RANGES, MAX_BIAS,
    MAX_HISTORY,
};

/// Writes the adjustments of `n` vectors (each validated) in the wire layout.
pub fn encode(adjusts: &[Adjust]) -> Vec<u8> {
    let mut records = Vec::new();
    for a in adjusts {
        a.encode_record(&mut records);
    }
    section(&records, adjusts.len())
}

/// The section of `n` vectors whose records, in vector order, are `records` (a caller merging
/// requests concatenates their records).
pub fn section(records: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + records.len());
    out.extend_from_slice(&ADJUST_VERSION.to_le_bytes());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(records);
    out
}

/// Appends to `body` (the encoded hidden vectors) the section of `adjusts`, one per vector,
/// unless none adjusts anything: the query's `adjust` value (`None`: nothing appended).
pub fn append_section(body: &mut Vec<u8>, adjusts: &[Adjust]) -> Option<usize> {
    if adjusts.iter().all(Adjust::is_none) {
        return None;
    }
    let section = encode(adjusts);
    body.extend_from_slice(&section);
    Some(section.len())
}

/// The vectors and the section of a request body whose query says `adjust=len` (`None`: the
/// body is the vectors, and the section empty).
pub fn split_body(body: &[u8], len: Option<usize>) -> Result<(&[u8], &[u8]), AdjustError> {
    let len = len.unwrap_or(0);
    match body.len().checked_sub(len) {
        Some(at) => Ok(body.split_at(at)),
        None => refuse(format!(
            "adjust={len}, but the body has only {} bytes",
            body.len()
        )),
    }
}

impl Adjust {
    /// Appends this vector's record (the module's layout) to `out`; the adjustment must be
    /// valid ([`Adjust::validate`]): sorted lists, non-empty ranges.
    pub fn encode_record(&self, out: &mut Vec<u8>) {
        varint(out, u32::from(self.allowed.is_some()));
        for v in [self.presence, self.frequency, self.repetition] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        varint(out, self.bias.len() as u32);
        let mut next = 0u32;
        for &(token, bias) in &self.bias {
            varint(out, token.wrapping_sub(next));
            out.extend_from_slice(&bias.to_le_bytes());
            next = token.wrapping_add(1);
        }
        varint(out, self.history.len() as u32);
        let mut next = 0u32;
        for &(token, count) in &self.history {
            varint(out, token.wrapping_sub(next));
            varint(out, count);
            next = token.wrapping_add(1);
        }
        if let Some(ranges) = &self.allowed {
            varint(out, ranges.len() as u32);
            let mut next = 0u32;
            for &(start, end) in ranges {
                varint(out, start.wrapping_sub(next));
                varint(out, end.wrapping_sub(start).wrapping_sub(1));
                next = end.wrapping_add(1);
            }
        }
    }
}

/// Appends `v` as an unsigned LEB128 varint.
fn varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads the wire layout: the adjustments of `n` vectors, each checked against `vocab`.
pub fn decode(bytes: &[u8], n: usize, vocab: u32) -> Result<Vec<Adjust>, AdjustError> {
    if bytes.len() > MAX_ADJUST_BYTES {
        return refuse(format!(
            "{} bytes of adjustments: at most {MAX_ADJUST_BYTES}",
            bytes.len()
        ));
    }
    let mut r = Reader { bytes, at: 0 };
    let version = r.word()?;
    if version != ADJUST_VERSION {
        return refuse(format!(
            "adjustments of layout version {version}: this shard reads version {ADJUST_VERSION}"
        ));
    }
    let count = r.word()? as usize;
    if count != n {
        return refuse(format!("adjustments for {count} vectors, {n} sent"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let adjust = r.record()?;
        adjust.validate(vocab)?;
        out.push(adjust);
    }
    if r.at != bytes.len() {
        return refuse(format!(
            "{} bytes after the adjustments of {n} vectors",
            bytes.len() - r.at
        ));
    }
    Ok(out)
}

/// Reads the layout off a byte slice, refusing to read past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn cut_short<T>() -> Result<T, AdjustError> {
    refuse("the adjustments end early")
}

impl Reader<'_> {
    /// One vector's record.
    fn record(&mut self) -> Result<Adjust, AdjustError> {
        let flags = self.varint()?;
        if flags > 1 {
            return refuse(format!(
                "adjustment flags {flags:#x}: only bit 0 is defined"
            ));
        }
        let presence = self.float()?;
        let frequency = self.float()?;
        let repetition = self.float()?;
        let bias = self.list("bias", (MAX_BIAS, 5), |r| Ok((r.varint()?, r.float()?)))?;
        let bias = tokens_of(bias)?;
        let history = self.list("history", (MAX_HISTORY, 2), |r| {
            Ok((r.varint()?, r.varint()?))
        })?;
        let history = tokens_of(history)?;
        let allowed = match flags {
            1 => Some(ranges_of(self.list(
                "allowed ranges",
                (MAX_ALLOWED_RANGES, 2),
                |r| Ok((r.varint()?, r.varint()?)),
            )?)?),
            _ => None,
        };
        Ok(Adjust {
            bias,
            presence,
            frequency,
            repetition,
            history,
            allowed,
        })
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], AdjustError> {
        let Some(b) = self.bytes.get(self.at..self.at + N) else {
            return cut_short();
        };
        self.at += N;
        let mut out = [0; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn word(&mut self) -> Result<u32, AdjustError> {
        self.take().map(u32::from_le_bytes)
    }

    fn float(&mut self) -> Result<f32, AdjustError> {
        self.take().map(f32::from_le_bytes)
    }

    /// A varint in its shortest form, at most 32 bits.
    fn varint(&mut self) -> Result<u32, AdjustError> {
        let mut v = 0u64;
        for i in 0..5 {
            let [b] = self.take()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if (b == 0 && i > 0) || v > u64::from(u32::MAX) {
                    return refuse(
                        "a varint of the adjustments is not in its shortest 32-bit form",
                    );
                }
                return Ok(v as u32);
            }
        }
        refuse("a varint of the adjustments runs past 32 bits")
    }

    /// A count (at most `most`), then that many entries of at least `least` bytes each.
    fn list<T>(
        &mut self,
        what: &str,
        (most, least): (usize, usize),
        mut entry: impl FnMut(&mut Self) -> Result<T, AdjustError>,
    ) -> Result<Vec<T>, AdjustError> {
        let count = self.varint()? as usize;
        if count > most {
            return refuse(format!("{count} {what} entries: at most {most} per vector"));
        }
        if (self.bytes.len() - self.at) / least < count {
            return cut_short();
        }
        (0..count).map(|_| entry(self)).collect()
    }
}

/// Delta-coded `(step, value)` entries as `(token, value)`.
fn tokens_of<T>(steps: Vec<(u32, T)>) -> Result<Vec<(u32, T)>, AdjustError> {
    let mut next = 0u32;
    let mut out = Vec::with_capacity(steps.len());
    for (step, value) in steps {
        let Some(token) = next.checked_add(step) else {
            return refuse("a token id of the adjustments passes 2^32 − 1");
        };
        out.push((token, value));
        next = token.saturating_add(1);
    }
    Ok(out)
}

/// Delta-coded `(gap, length − 1)` pairs as `[start, end)` ranges.
fn ranges_of(gaps: Vec<(u32, u32)>) -> Result<Vec<(u32, u32)>, AdjustError> {
    let mut next = 0u32;
    let mut out = Vec::with_capacity(gaps.len());
    for (gap, length) in gaps {
        let range = next
            .checked_add(gap)
            .and_then(|start| Some((start, start.checked_add(length)?.checked_add(1)?)));
        let Some((start, end)) = range else {
            return refuse("an allowed range of the adjustments passes 2^32");
        };
        out.push((start, end));
        next = end.saturating_add(1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(a: &Adjust) -> Vec<u8> {
        let mut out = Vec::new();
        a.encode_record(&mut out);
        out
    }

    #[test]
    fn records_cost_a_few_bytes_per_entry() {
        assert_eq!(record(&Adjust::none()).len(), 15);
        // 4,096 distinct tokens spread over a 152k vocabulary, each seen once: steps of ~36.
        let history: Vec<(u32, u32)> = (0..4096).map(|i| (i * 37, 1)).collect();
        let a = Adjust {
            history,
            presence: 0.5,
            ..Adjust::none()
        };
        // The count takes two bytes instead of one, each entry a step and a count of one byte.
        assert_eq!(record(&a).len(), 15 + 1 + 4096 * 2);
        // Every token of 152,064 but 300 scattered ones: 301 ranges.
        let banned: Vec<u32> = (0..300).map(|i| 17 + i * 500).collect();
        let mut ranges = Vec::new();
        let mut start = 0;
        for &b in &banned {
            ranges.push((start, b));
            start = b + 1;
        }
        ranges.push((start, 152_064));
        let a = Adjust {
            allowed: Some(ranges),
            ..Adjust::none()
        };
        assert!(record(&a).len() < 1000, "{}", record(&a).len());
        assert_eq!(
            decode(&encode(std::slice::from_ref(&a)), 1, 152_064).unwrap(),
            vec![a]
        );
    }

    #[test]
    fn varints_are_read_in_their_shortest_32_bit_form_only() {
        let read = |bytes: &[u8]| Reader { bytes, at: 0 }.varint();
        for v in [0, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(read(&out), Ok(v));
        }
        assert!(read(&[0x80, 0x00]).is_err(), "zero in two bytes");
        assert!(read(&[0xff, 0xff, 0xff, 0xff, 0x10]).is_err(), "2^32");
        assert!(
            read(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]).is_err(),
            "six bytes"
        );
        assert!(read(&[0x80]).is_err(), "cut short");
    }

    #[test]
    fn ids_and_ranges_past_u32_are_refused() {
        let steps = |values: &[(u32, u32)]| tokens_of(values.to_vec());
        assert_eq!(
            steps(&[(3, 1), (0, 1), (5, 1)]).unwrap(),
            [(3, 1), (4, 1), (10, 1)]
        );
        assert!(steps(&[(u32::MAX, 1), (1, 1)]).is_err());
        assert_eq!(ranges_of(vec![(2, 0), (1, 2)]).unwrap(), [(2, 3), (5, 8)]);
        assert!(ranges_of(vec![(u32::MAX, 0)]).is_err());
        assert!(ranges_of(vec![(0, u32::MAX)]).is_err());
    }
}

//! The vocabulary's text next to the slices: `slice` writes `tokens.bin` when the GGUF holds
//! `tokenizer.ggml.tokens`, and `logits`, `sample` and `logprobs` print each token's text beside
//! its id. The shards never need it.
//!
//! Format (little-endian), compact and checksummed:
//!
//! ```text
//! "CBTOKENS" | u32 count | 24-byte checksum ("xxh3-64:<16 hex>") of what follows |
//! count × u32 end offset | the tokens' UTF-8 bytes, back to back
//! ```
//!
//! Token `i` is `bytes[end[i−1]..end[i]]` (`end[−1] = 0`). A vocabulary may be shorter than the
//! lm-head (models pad their output rows): ids past its end have no text.

use std::fs;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use cobordism_protocol::Checksum;

/// The file name next to `manifest.json`.
pub const TOKENS_FILE: &str = "tokens.bin";
const MAGIC: &[u8; 8] = b"CBTOKENS";
const CHECKSUM_LEN: usize = 24;
const HEADER: usize = 8 + 4 + CHECKSUM_LEN;

/// A vocabulary: token id → text.
#[derive(Debug, PartialEq)]
pub struct Vocabulary {
    ends: Vec<u32>,
    text: String,
}

impl Vocabulary {
    /// The vocabulary of `tokens`, in id order.
    pub fn new(tokens: &[String]) -> Result<Vocabulary> {
        let mut text = String::new();
        let mut ends = Vec::with_capacity(tokens.len());
        for t in tokens {
            text.push_str(t);
            ends.push(u32::try_from(text.len()).context("the vocabulary's text exceeds 4 GiB")?);
        }
        Ok(Vocabulary { ends, text })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is no token.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The text of token `id`, if the vocabulary has it.
    pub fn text(&self, id: u32) -> Option<&str> {
        let i = usize::try_from(id).ok()?;
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.text.get(start..end)
    }

    /// Token `id`'s text quoted and escaped for a terminal (`"\n"`, `" the"`), or `-`.
    pub fn shown(&self, id: u32) -> String {
        self.text(id)
            .map_or_else(|| "-".into(), |t| format!("{t:?}"))
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4 * self.ends.len() + self.text.len());
        for end in &self.ends {
            body.extend(end.to_le_bytes());
        }
        body.extend(self.text.as_bytes());
        let mut out = Vec::with_capacity(HEADER + body.len());
        out.extend(MAGIC);
        out.extend((self.ends.len() as u32).to_le_bytes());
        out.extend(Checksum::of(&body).as_bytes());
        out.extend(body);
        out
    }

    /// Reads a file's bytes, checking its checksum and every offset.
    pub fn decode(bytes: &[u8]) -> Result<Vocabulary> {
        ensure!(
            bytes.len() >= HEADER && &bytes[..8] == MAGIC,
            "not a cobordism tokens file"
        );
        let count = u32::from_le_bytes(bytes[8..12].try_into()?) as usize;
        let body = &bytes[HEADER..];
        ensure!(
            Checksum::of(body).as_bytes() == &bytes[12..HEADER],
            "its checksum does not match: the file is damaged"
        );
        let table = count.checked_mul(4).filter(|n| *n <= body.len());
        let table = table.context("it is truncated")?;
        let (offsets, text) = body.split_at(table);
        let ends: Vec<u32> = offsets
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        ensure!(
            ends.windows(2).all(|w| w[0] <= w[1])
                && ends.last().is_none_or(|&e| e as usize == text.len()),
            "its offsets are not in order or do not end with the text"
        );
        let text = String::from_utf8(text.to_vec()).context("its text is not UTF-8")?;
        ensure!(
            ends.iter().all(|&e| text.is_char_boundary(e as usize)),
            "an offset splits a character"
        );
        Ok(Vocabulary { ends, text })
    }

    /// `dir/tokens.bin`, if there is one.
    pub fn load(dir: &Path) -> Result<Option<Vocabulary>> {
        let path = dir.join(TOKENS_FILE);
        match fs::read(&path) {
            Ok(bytes) => Vocabulary::decode(&bytes)
                .map(Some)
                .with_context(|| path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let tokens: Vec<String> = ["<s>", "", " the", "é", "\n", "日本"]
            .map(String::from)
            .into();
        let v = Vocabulary::new(&tokens).unwrap();
        let bytes = v.encode();
        let back = Vocabulary::decode(&bytes).unwrap();
        assert_eq!(back, v);
        for (i, t) in tokens.iter().enumerate() {
            assert_eq!(back.text(i as u32), Some(t.as_str()));
        }
        assert_eq!(back.text(6), None);
        assert_eq!(back.shown(4), r#""\n""#);
        assert_eq!(back.shown(99), "-");
        for cut in [0, 8, HEADER, bytes.len() - 1] {
            assert!(Vocabulary::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let e = Vocabulary::decode(&flipped).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        assert!(Vocabulary::decode(&Vocabulary::new(&[]).unwrap().encode())
            .unwrap()
            .is_empty());
    }
}

//! The flags of `sample` and `logprobs` that change the logits before sampling — logit bias,
//! the presence, frequency and repetition penalties over a history, an allowed-token set — read
//! into one `cobordism_protocol::adjust::Adjust` for the hidden vector. The shards (or, with
//! `--local`, the local path) apply it with the protocol's code, in the protocol's order.
//!
//! `--history` and `--allow` take either token ids on the command line or a file of them
//! (separated by commas or white space); `--allow` also takes ranges `A..B` (tokens `A` to
//! `B − 1`).

use std::fs;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use clap::Args as ClapArgs;
use cobordism_protocol::adjust::{Adjust, Given};

/// Sampling parameters that change the logits (each shard applies them to its own rows).
#[derive(ClapArgs, Debug, Default)]
pub struct AdjustFlags {
    /// Add B to token ID's logit before sampling, for each ID:B (B = -inf bans the token).
    #[arg(long, value_name = "ID:B,…", value_delimiter = ',', value_parser = bias_entry)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Subtract P from the logit of every token of --history (OpenAI's presence_penalty).
    #[arg(
        long,
        value_name = "P",
        requires = "history",
        allow_hyphen_values = true
    )]
    pub presence_penalty: Option<f32>,
    /// Subtract F per occurrence in --history (OpenAI's frequency_penalty).
    #[arg(
        long,
        value_name = "F",
        requires = "history",
        allow_hyphen_values = true
    )]
    pub frequency_penalty: Option<f32>,
    /// Divide the positive logits of --history's tokens by R and multiply the others by R
    /// (llama.cpp's and Hugging Face's repetition_penalty; 1 is off).
    #[arg(long, value_name = "R", requires = "history")]
    pub repetition_penalty: Option<f32>,
    /// The tokens so far, for the penalties: comma-separated ids or a file of them.
    #[arg(long, value_name = "FILE|IDS")]
    pub history: Option<String>,
    /// Only these tokens may be drawn: comma-separated ids and ranges A..B, or a file of them.
    #[arg(long, value_name = "FILE|IDS")]
    pub allow: Option<String>,
}

/// `ID:B`, B a number or `-inf`.
fn bias_entry(s: &str) -> Result<(u32, f32), String> {
    let (id, bias) = s
        .split_once(':')
        .ok_or_else(|| format!("expected ID:BIAS, not {s:?}"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("{id:?} is not a token id"))?;
    let bias = bias
        .trim()
        .parse()
        .map_err(|_| format!("{bias:?} is not a number (or -inf)"))?;
    Ok((id, bias))
}

impl AdjustFlags {
    /// The adjustment these flags ask for, checked against a vocabulary of `vocab` tokens.
    pub fn adjust(&self, vocab: usize) -> Result<Adjust> {
        let given = Given {
            bias: self.logit_bias.clone(),
            presence: self.presence_penalty.unwrap_or(0.0),
            frequency: self.frequency_penalty.unwrap_or(0.0),
            repetition: self.repetition_penalty.unwrap_or(1.0),
            history: match &self.history {
                None => Vec::new(),
                Some(value) => ids("--history", value, false)?,
            },
            allowed: match &self.allow {
                None => None,
                Some(value) => Some(ids("--allow", value, true)?),
            },
        };
        let vocab = u32::try_from(vocab).unwrap_or(u32::MAX);
        given.adjust(vocab).map_err(anyhow::Error::msg)
    }
}

/// The token ids of `value`: the ids themselves (digits, commas and, with `ranges`, `A..B`), or
/// else the file of that name.
fn ids(flag: &str, value: &str, ranges: bool) -> Result<Vec<u32>> {
    let inline = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || (ranges && b == b'.'));
    let (text, from) = if inline {
        (value.to_string(), format!("{flag} {value}"))
    } else {
        let path = Path::new(value);
        let text = fs::read_to_string(path)
            .with_context(|| format!("{flag} {value}: neither token ids nor a readable file"))?;
        (text, format!("{flag} {}", path.display()))
    };
    let mut out = Vec::new();
    for item in text.split(|c: char| c == ',' || c.is_whitespace()) {
        if item.is_empty() {
            continue;
        }
        match item.split_once("..") {
            Some((a, b)) if ranges => {
                let (a, b) = (token(&from, a)?, token(&from, b)?);
                ensure!(a < b, "{from}: the range {item} is empty");
                ensure!(
                    out.len() + (b - a) as usize <= 1 << 24,
                    "{from}: ranges over more than 2^24 tokens"
                );
                out.extend(a..b);
            }
            _ => out.push(token(&from, item)?),
        }
    }
    ensure!(!out.is_empty(), "{from}: no token ids");
    Ok(out)
}

fn token(from: &str, item: &str) -> Result<u32> {
    item.parse()
        .with_context(|| format!("{from}: {item:?} is not a token id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> AdjustFlags {
        AdjustFlags::default()
    }

    #[test]
    fn flags_read_into_one_adjustment() {
        let a = AdjustFlags {
            logit_bias: vec![(9, -1.0), (2, f32::NEG_INFINITY)],
            presence_penalty: Some(0.5),
            repetition_penalty: Some(1.2),
            history: Some("4,4,7".into()),
            allow: Some("0..3,9".into()),
            ..flags()
        }
        .adjust(10)
        .unwrap();
        assert_eq!(a.bias, vec![(2, f32::NEG_INFINITY), (9, -1.0)]);
        assert_eq!(a.history, vec![(4, 2), (7, 1)]);
        assert_eq!(a.allowed, Some(vec![(0, 3), (9, 10)]));
        assert_eq!((a.presence, a.frequency, a.repetition), (0.5, 0.0, 1.2));
        assert!(flags().adjust(10).unwrap().is_none());
    }

    #[test]
    fn ids_come_from_a_file_too() {
        let path = std::env::temp_dir().join(format!("cobordism-ids-{}", std::process::id()));
        fs::write(&path, "3 1\n4, 1\n").unwrap();
        let from_file = ids("--history", path.to_str().unwrap(), false).unwrap();
        fs::remove_file(&path).unwrap();
        assert_eq!(from_file, vec![3, 1, 4, 1]);
    }

    #[test]
    fn bad_flags_say_what_is_wrong() {
        for (f, why) in [
            (
                AdjustFlags {
                    logit_bias: vec![(3, 1.0), (3, 2.0)],
                    ..flags()
                },
                "twice",
            ),
            (
                AdjustFlags {
                    history: Some("1,10".into()),
                    ..flags()
                },
                "vocabulary",
            ),
            (
                AdjustFlags {
                    allow: Some("5..5".into()),
                    ..flags()
                },
                "empty",
            ),
            (
                AdjustFlags {
                    allow: Some("no-such-file".into()),
                    ..flags()
                },
                "neither token ids nor a readable file",
            ),
            (
                AdjustFlags {
                    logit_bias: vec![(0, f32::NEG_INFINITY), (1, f32::NEG_INFINITY)],
                    allow: Some("0..2".into()),
                    ..flags()
                },
                "none could be drawn",
            ),
            (
                AdjustFlags {
                    repetition_penalty: Some(0.0),
                    history: Some("1".into()),
                    ..flags()
                },
                "repetition",
            ),
        ] {
            let e = format!("{:#}", f.adjust(10).unwrap_err());
            assert!(e.contains(why), "{e}");
        }
        assert!(bias_entry("3").is_err());
        assert!(bias_entry("x:1").is_err());
        assert_eq!(bias_entry("3:-inf"), Ok((3, f32::NEG_INFINITY)));
    }
}

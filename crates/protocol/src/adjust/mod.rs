//! The sampling parameters that change logits before sampling — an allowed-token set, logit
//! bias, and the repetition, frequency and presence penalties — per hidden vector, applied by
//! each shard to its own rows (and by the local path to all of them, with this same code).
//!
//! **Order** (llama.cpp's sampler chain, `common/sampling.cpp`: the grammar's allowed set first,
//! then `logit_bias`, then `penalties`, then temperature, the filters and the draw). For token
//! `i` with logit `z` (after the manifest's soft cap, as the kernels give it), in f32, each step
//! a separate operation in this order:
//!
//! 1. **Allowed set**: a token outside it gets `−∞` and nothing else applies to it.
//! 2. **Logit bias**: `z + bias_i`. A bias of `−∞` bans the token; `+∞` and NaN are refused.
//! 3. **Repetition penalty** `r` (tokens of the history, `count_i ≥ 1`): `z · r` when `z ≤ 0`,
//!    else `z / r` (llama.cpp's and Hugging Face's rule; `r = 1` is off).
//! 4. **Frequency and presence penalties** `f`, `p`: `z − (count_i · f + [count_i > 0] · p)`,
//!    the product and the sum rounded as written (llama.cpp's expression).
//!
//! Temperature, top-k, top-p, min-p and the Gumbel noise then apply to the adjusted logits
//! exactly as to plain ones ([`crate::sampling`]), and the log-probabilities a `top_k` or
//! `tokens` answer reports are the adjusted ones (as OpenAI's `logprobs` with `logit_bias`).
//! Every step depends on the token's own values only, so a shard adjusting its rows gives the
//! bits one machine adjusting the whole vocabulary gives, for any cut.
//!
//! **On the wire** ([`wire`]): after the hidden vectors of a request whose query says
//! `adjust=LEN`, a section of one record per vector, lists sorted and delta-coded so that a
//! 4,096-token history or an allowed set of a whole 152k vocabulary costs a few KB at most.

use core::fmt;
use core::ops::Range;

mod wire;

pub use wire::{append_section, decode, encode, section, split_body};

/// The layout's version, the section's first word.
pub const ADJUST_VERSION: u32 = 1;
/// Most logit-bias entries per vector.
pub const MAX_BIAS: usize = 4096;
/// Most distinct history tokens per vector.
pub const MAX_HISTORY: usize = 65_536;
/// Most allowed ranges per vector.
pub const MAX_ALLOWED_RANGES: usize = 65_536;
/// Most bytes of the adjustments' section of one request (all its vectors).
pub const MAX_ADJUST_BYTES: usize = 1 << 20;

/// The adjustments of one hidden vector.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Adjust {
    /// `(token, bias)`, tokens strictly increasing.
    pub bias: Vec<(u32, f32)>,
    /// Subtracted once from every token of the history (OpenAI's `presence_penalty`).
    pub presence: f32,
    /// Subtracted per occurrence in the history (OpenAI's `frequency_penalty`).
    pub frequency: f32,
    /// Divides positive, multiplies other logits of history tokens (`1`: off).
    pub repetition: f32,
    /// `(token, count)`, tokens strictly increasing, counts ≥ 1.
    pub history: Vec<(u32, u32)>,
    /// The tokens that may be drawn, as `[start, end)` ranges, increasing and disjoint; `None`:
    /// every token.
    pub allowed: Option<Vec<(u32, u32)>>,
}

/// The adjustments of one vector as a caller gives them: token lists (a history with repeats,
/// an allowed set in any order) rather than the counted and ranged lists of [`Adjust`].
#[derive(Clone, Debug, PartialEq)]
pub struct Given {
    /// `(token, bias)` in any order, each token once.
    pub bias: Vec<(u32, f32)>,
    /// [`Adjust::presence`].
    pub presence: f32,
    /// [`Adjust::frequency`].
    pub frequency: f32,
    /// [`Adjust::repetition`].
    pub repetition: f32,
    /// The tokens so far, repeats counted.
    pub history: Vec<u32>,
    /// The tokens that may be drawn, in any order; `None`: every token.
    pub allowed: Option<Vec<u32>>,
}

impl Default for Given {
    fn default() -> Given {
        Given {
            bias: Vec::new(),
            presence: 0.0,
            frequency: 0.0,
            repetition: 1.0,
            history: Vec::new(),
            allowed: None,
        }
    }
}

impl Given {
    /// The [`Adjust`] it makes, checked against a vocabulary of `vocab` tokens.
    pub fn adjust(self, vocab: u32) -> Result<Adjust, AdjustError> {
        let mut bias = self.bias;
        bias.sort_by_key(|e| e.0);
        if let Some(pair) = bias.windows(2).find(|w| w[0].0 == w[1].0) {
            return refuse(format!("the logit bias gives token {} twice", pair[0].0));
        }
        let adjust = Adjust {
            bias,
            presence: self.presence,
            frequency: self.frequency,
            repetition: self.repetition,
            history: Adjust::count_history(&self.history),
            allowed: self.allowed.as_deref().map(Adjust::ranges_of),
        };
        adjust.validate(vocab)?;
        Ok(adjust)
    }
}

/// Why adjustments were refused.
#[derive(Clone, Debug, PartialEq)]
pub struct AdjustError(pub String);

impl fmt::Display for AdjustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AdjustError {}

fn refuse<T>(detail: impl Into<String>) -> Result<T, AdjustError> {
    Err(AdjustError(detail.into()))
}

impl Adjust {
    /// No adjustment at all.
    pub fn none() -> Adjust {
        Adjust {
            repetition: 1.0,
            ..Adjust::default()
        }
    }

    /// Whether it changes nothing.
    pub fn is_none(&self) -> bool {
        *self == Adjust::none()
    }

    /// Counts a history given as a list of tokens (repeats counted), sorted.
    pub fn count_history(tokens: &[u32]) -> Vec<(u32, u32)> {
        let mut sorted = tokens.to_vec();
        sorted.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::new();
        for t in sorted {
            match out.last_mut() {
                Some((last, n)) if *last == t => *n = n.saturating_add(1),
                _ => out.push((t, 1)),
            }
        }
        out
    }

    /// Turns a set of tokens (any order, repeats allowed) into sorted disjoint ranges.
    pub fn ranges_of(tokens: &[u32]) -> Vec<(u32, u32)> {
        let mut sorted = tokens.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut out: Vec<(u32, u32)> = Vec::new();
        for t in sorted {
            match out.last_mut() {
                Some((_, end)) if *end == t => *end += 1,
                _ => out.push((t, t + 1)),
            }
        }
        out
    }

    /// Checks it against a vocabulary of `vocab` tokens.
    pub fn validate(&self, vocab: u32) -> Result<(), AdjustError> {
        for (name, v) in [("presence", self.presence), ("frequency", self.frequency)] {
            if !v.is_finite() {
                return refuse(format!("the {name} penalty {v} is not a finite number"));
            }
        }
        if !(self.repetition.is_finite() && self.repetition > 0.0) {
            return refuse(format!(
                "the repetition penalty {} is not a number above 0",
                self.repetition
            ));
        }
        increasing("logit bias", self.bias.iter().map(|e| e.0), vocab)?;
        if let Some((t, b)) = self
            .bias
            .iter()
            .find(|(_, b)| b.is_nan() || *b == f32::INFINITY)
        {
            return refuse(format!(
                "the bias of token {t} is {b}: give a finite number, or -inf to ban it"
            ));
        }
        increasing("history", self.history.iter().map(|e| e.0), vocab)?;
        if let Some((t, _)) = self.history.iter().find(|(_, n)| *n == 0) {
            return refuse(format!("history token {t} has a count of 0"));
        }
        if let Some(ranges) = &self.allowed {
            if ranges.is_empty() {
                return refuse("the allowed set is empty: no token could be drawn");
            }
            let mut end_before = 0;
            for (i, &(start, end)) in ranges.iter().enumerate() {
                if start >= end || (i > 0 && start <= end_before) || end > vocab {
                    return refuse(format!(
                        "allowed range {start}..{end}: ranges must be non-empty, increasing, \
                         apart, and within the vocabulary of {vocab}"
                    ));
                }
                end_before = end;
            }
        }
        if self.drawable(vocab) == 0 {
            return refuse("every token is outside the allowed set or banned: none could be drawn");
        }
        Ok(())
    }

    /// How many of the `vocab` tokens are allowed and not banned (a bias of `−∞`).
    fn drawable(&self, vocab: u32) -> u64 {
        let allowed = |t: u32| match &self.allowed {
            None => true,
            Some(ranges) => {
                let i = ranges.partition_point(|r| r.1 <= t);
                ranges.get(i).is_some_and(|r| r.0 <= t)
            }
        };
        let size = match &self.allowed {
            None => u64::from(vocab),
            Some(ranges) => ranges.iter().map(|r| u64::from(r.1 - r.0)).sum(),
        };
        let banned = self
            .bias
            .iter()
            .filter(|(t, b)| *b == f32::NEG_INFINITY && allowed(*t))
            .count();
        size - banned as u64
    }

    /// Applies the adjustments, in the order of the module doc, to `logits`: the rows
    /// `row_start..row_start + logits.len()` of one vector.
    pub fn apply(&self, logits: &mut [f32], row_start: u32) {
        let rows = row_start..row_start + logits.len() as u32;
        // A must-fail build (crates/protocol/must-fail.txt) ignores the allowed set, another
        // penalizes before it adds the bias.
        if !cfg!(protocol_perturb = "mask_ignored") {
            self.mask(logits, &rows);
        }
        if cfg!(protocol_perturb = "adjust_order") {
            self.penalize(logits, &rows);
            self.add_bias(logits, &rows);
        } else {
            self.add_bias(logits, &rows);
            self.penalize(logits, &rows);
        }
    }

    /// Step 1: `−∞` for the rows outside the allowed set.
    fn mask(&self, logits: &mut [f32], rows: &Range<u32>) {
        let Some(ranges) = &self.allowed else {
            return;
        };
        let at = |token: u32| (token - rows.start) as usize;
        let mut next = rows.start;
        for &(start, end) in ranges {
            if end <= rows.start || start >= rows.end {
                continue;
            }
            for z in &mut logits[at(next)..at(start.max(rows.start))] {
                *z = f32::NEG_INFINITY;
            }
            next = end.min(rows.end);
        }
        for z in &mut logits[at(next)..] {
            *z = f32::NEG_INFINITY;
        }
    }

    /// Step 2: the logit bias of the rows still allowed.
    fn add_bias(&self, logits: &mut [f32], rows: &Range<u32>) {
        for &(token, bias) in within(&self.bias, rows) {
            let z = &mut logits[(token - rows.start) as usize];
            if *z != f32::NEG_INFINITY {
                *z += bias;
            }
        }
    }

    /// Steps 3 and 4: the repetition, then the frequency and presence penalties of the history's
    /// rows still allowed.
    fn penalize(&self, logits: &mut [f32], rows: &Range<u32>) {
        for &(token, count) in within(&self.history, rows) {
            let z = &mut logits[(token - rows.start) as usize];
            if *z == f32::NEG_INFINITY {
                continue;
            }
            if self.repetition != 1.0 {
                *z = if *z <= 0.0 {
                    *z * self.repetition
                } else {
                    *z / self.repetition
                };
            }
            let per_count = count as f32 * self.frequency;
            let penalty = per_count + self.presence;
            *z -= penalty;
        }
    }
}

/// The entries of a token-sorted list that fall in `rows`.
fn within<'a, T>(list: &'a [(u32, T)], rows: &Range<u32>) -> &'a [(u32, T)] {
    let from = list.partition_point(|e| e.0 < rows.start);
    let to = list.partition_point(|e| e.0 < rows.end);
    &list[from..to]
}

/// Refuses token lists that are not strictly increasing or reach past the vocabulary.
fn increasing(
    what: &str,
    tokens: impl Iterator<Item = u32>,
    vocab: u32,
) -> Result<(), AdjustError> {
    let mut last: Option<u32> = None;
    for t in tokens {
        if t >= vocab {
            return refuse(format!(
                "{what} token {t} is not below the vocabulary of {vocab}"
            ));
        }
        if last.is_some_and(|l| l >= t) {
            return refuse(format!(
                "{what} token {t} is out of order or repeated: give each token once, increasing"
            ));
        }
        last = Some(t);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Adjust {
        Adjust {
            bias: vec![(1, 2.5), (7, f32::NEG_INFINITY), (9, -1.0)],
            presence: 0.5,
            frequency: 0.25,
            repetition: 1.3,
            history: vec![(2, 3), (3, 1), (9, 2)],
            allowed: Some(vec![(0, 4), (6, 10)]),
        }
    }

    #[test]
    fn each_step_in_its_order() {
        let mut z = [1.0f32, -1.0, 2.0, -2.0, 5.0, 5.0, 3.0, 3.0, 0.0, 4.0];
        example().apply(&mut z, 0);
        let ninf = f32::NEG_INFINITY;
        // 0: untouched; 1: +2.5; 2: 2/1.3 − (3·0.25 + 0.5); 3: −2·1.3 − (0.25 + 0.5);
        // 4, 5: outside the allowed set; 6, 8: untouched; 7: banned; 9: (4 − 1)/1.3 − (0.5 + 0.5).
        let want = [
            1.0,
            -1.0 + 2.5,
            2.0 / 1.3 - (3.0 * 0.25 + 0.5),
            -2.0 * 1.3 - (0.25 + 0.5),
            ninf,
            ninf,
            3.0,
            ninf,
            0.0,
            (4.0 - 1.0) / 1.3 - (2.0 * 0.25 + 0.5),
        ];
        assert_eq!(z.map(f32::to_bits), want.map(f32::to_bits));
    }

    #[test]
    fn any_cut_gives_the_same_bits() {
        let full: Vec<f32> = (0..10).map(|i| (i as f32 - 4.5) * 0.7).collect();
        let mut whole = full.clone();
        example().apply(&mut whole, 0);
        for cut in 1..10 {
            let (mut a, mut b) = (full[..cut].to_vec(), full[cut..].to_vec());
            example().apply(&mut a, 0);
            example().apply(&mut b, cut as u32);
            a.extend(b);
            assert_eq!(
                a.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
                whole.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn the_wire_layout_reads_back_and_refuses_what_is_wrong() {
        let adjusts = [example(), Adjust::none()];
        let bytes = encode(&adjusts);
        assert_eq!(decode(&bytes, 2, 10).unwrap(), adjusts);
        assert!(decode(&bytes, 1, 10).is_err(), "another vector count");
        assert!(decode(&bytes, 2, 9).is_err(), "a token past the vocabulary");
        assert!(
            decode(&bytes[..bytes.len() - 1], 2, 10).is_err(),
            "cut short"
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, 2, 10).is_err(), "trailing bytes");
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert!(decode(&v2, 2, 10).unwrap_err().0.contains("version 2"));
        for bad in [
            Adjust {
                bias: vec![(3, 1.0), (3, 2.0)],
                ..Adjust::none()
            },
            Adjust {
                bias: vec![(3, f32::INFINITY)],
                ..Adjust::none()
            },
            Adjust {
                bias: vec![(3, f32::NAN)],
                ..Adjust::none()
            },
            Adjust {
                history: vec![(4, 0)],
                ..Adjust::none()
            },
            Adjust {
                history: vec![(5, 1), (4, 1)],
                ..Adjust::none()
            },
            Adjust {
                repetition: 0.0,
                ..Adjust::none()
            },
            Adjust {
                presence: f32::NAN,
                ..Adjust::none()
            },
            Adjust {
                allowed: Some(vec![]),
                ..Adjust::none()
            },
            Adjust {
                allowed: Some(vec![(2, 2)]),
                ..Adjust::none()
            },
            Adjust {
                allowed: Some(vec![(0, 3), (3, 5)]),
                ..Adjust::none()
            },
            Adjust {
                allowed: Some(vec![(0, 11)]),
                ..Adjust::none()
            },
        ] {
            assert!(
                decode(&encode(std::slice::from_ref(&bad)), 1, 10).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_vector_with_no_token_left_is_refused() {
        let banned = |tokens: &[u32]| tokens.iter().map(|&t| (t, f32::NEG_INFINITY)).collect();
        let all_banned = Adjust {
            bias: banned(&[0, 1, 2]),
            ..Adjust::none()
        };
        assert!(all_banned.validate(3).unwrap_err().0.contains("none could"));
        assert!(all_banned.validate(4).is_ok(), "token 3 is left");
        let allowed_banned = Adjust {
            bias: banned(&[1, 5, 6]),
            allowed: Some(vec![(1, 2), (5, 7)]),
            ..Adjust::none()
        };
        assert!(allowed_banned.validate(10).is_err());
        let one_left = Adjust {
            bias: banned(&[0, 5, 6]),
            ..allowed_banned
        };
        assert!(one_left.validate(10).is_ok(), "token 1 is left");
    }

    #[test]
    fn a_body_carries_its_section_after_the_vectors() {
        let mut body = vec![7u8; 12];
        assert_eq!(append_section(&mut body, &[Adjust::none()]), None);
        assert_eq!(body.len(), 12, "nothing to adjust: no section");
        let adjusts = [Adjust::none(), example()];
        let len = append_section(&mut body, &adjusts).unwrap();
        let (vectors, adjustments) = split_body(&body, Some(len)).unwrap();
        assert_eq!(vectors, &[7u8; 12]);
        assert_eq!(decode(adjustments, 2, 10).unwrap(), adjusts);
        assert_eq!(split_body(&body, None).unwrap().1, &[] as &[u8]);
        assert!(split_body(&body, Some(body.len() + 1)).is_err());
        let mut records = Vec::new();
        adjusts.iter().for_each(|a| a.encode_record(&mut records));
        assert_eq!(section(&records, 2), encode(&adjusts));
    }

    #[test]
    fn given_lists_make_the_sorted_counted_ranged_adjustment() {
        let given = Given {
            bias: vec![(9, -1.0), (2, f32::NEG_INFINITY)],
            presence: 0.5,
            history: vec![4, 7, 4],
            allowed: Some(vec![9, 0, 1, 2]),
            ..Given::default()
        };
        let a = given.clone().adjust(10).unwrap();
        assert_eq!(a.bias, vec![(2, f32::NEG_INFINITY), (9, -1.0)]);
        assert_eq!(a.history, vec![(4, 2), (7, 1)]);
        assert_eq!(a.allowed, Some(vec![(0, 3), (9, 10)]));
        assert!(Given::default().adjust(10).unwrap().is_none());
        let twice = Given {
            bias: vec![(3, 1.0), (3, 2.0)],
            ..given
        };
        assert!(twice.adjust(10).unwrap_err().0.contains("twice"));
    }

    #[test]
    fn histories_and_sets_from_token_lists() {
        assert_eq!(
            Adjust::count_history(&[5, 2, 5, 9, 5]),
            vec![(2, 1), (5, 3), (9, 1)]
        );
        assert_eq!(
            Adjust::ranges_of(&[4, 1, 2, 3, 9, 2]),
            vec![(1, 5), (9, 10)]
        );
        assert!(Adjust::none().is_none());
    }
}

//! Whether the shards' answers make up the whole vocabulary, checked before anything is merged.
//!
//! A merge over part of the vocabulary is a quietly wrong distribution: a token drawn from
//! 7 of 8 slices looks like any other token. So every answer says where it belongs — its shard
//! index, the shard count and vocabulary size of the manifest it was computed from, and its
//! rows (`X-Shard-Index`, `X-Shard-Count`, `X-Vocab`, `X-Row-Start`, `X-Row-Count`) — and a
//! client merges only answers that tile `0..vocab` exactly: as many answers as the manifest has
//! shards, shard `i` at position `i`, rows contiguous from 0 to `vocab`, every answer agreeing
//! on the shard count and the vocabulary. Otherwise [`check_tiling`] names the rows no answer
//! covers.

use core::fmt;
use core::ops::Range;

/// Where one shard's answer belongs, as its headers say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    /// `X-Shard-Index`.
    pub index: u32,
    /// `X-Shard-Count`: shards in the manifest.
    pub shard_count: u32,
    /// `X-Row-Start`: the slice's first global row.
    pub row_start: u32,
    /// `X-Row-Count`: the slice's rows.
    pub row_count: u32,
    /// `X-Vocab`: rows of the whole lm-head.
    pub vocab: u32,
}

impl Tile {
    fn rows(&self) -> Range<u64> {
        let start = u64::from(self.row_start);
        start..start + u64::from(self.row_count)
    }
}

/// Answers that do not make up the whole vocabulary: what is wrong and which rows are missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TilingError {
    /// What is wrong, with the missing rows named.
    pub detail: String,
    /// The rows of `0..vocab` no answer covers.
    pub missing: Vec<Range<u64>>,
}

impl fmt::Display for TilingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for TilingError {}

/// Checks that `tiles` (answer `i` from the endpoint given for shard `i`) tile `0..vocab`.
pub fn check_tiling(tiles: &[Tile]) -> Result<(), TilingError> {
    let Some(first) = tiles.first() else {
        return Err(TilingError {
            detail: "no shard answered".into(),
            missing: Vec::new(),
        });
    };
    let (count, vocab) = (first.shard_count, first.vocab);
    let missing = missing_rows(tiles, u64::from(vocab));
    let fail = |what: String| {
        let rows = if missing.is_empty() {
            String::new()
        } else {
            format!("; rows {} of {vocab} are missing", show(&missing))
        };
        Err(TilingError {
            detail: format!("{what}{rows}"),
            missing: missing.clone(),
        })
    };
    if let Some((i, t)) = tiles
        .iter()
        .enumerate()
        .find(|(_, t)| (t.shard_count, t.vocab) != (count, vocab))
    {
        return fail(format!(
            "endpoint {i} serves a model of {} shards and {} tokens, endpoint 0 one of {count} \
             shards and {vocab} tokens: the endpoints serve different models",
            t.shard_count, t.vocab
        ));
    }
    if tiles.len() != count as usize {
        return fail(format!(
            "{} endpoints answered for a vocabulary cut into {count} shards: give every shard's \
             endpoint, shard i at position i",
            tiles.len()
        ));
    }
    let mut next = 0u64;
    for (i, t) in tiles.iter().enumerate() {
        if t.index as usize != i {
            return fail(format!(
                "endpoint {i} is shard {}: give shard i's endpoint at position i",
                t.index
            ));
        }
        if t.rows().start != next {
            return fail(format!(
                "shard {i} serves rows from {}, expected {next}: the shards were cut from \
                 different manifests",
                t.row_start
            ));
        }
        next = t.rows().end;
    }
    if next != u64::from(vocab) {
        return fail(format!(
            "the shards' rows end at {next}, the vocabulary at {vocab}"
        ));
    }
    Ok(())
}

/// The rows of `0..vocab` that no tile covers, in order.
fn missing_rows(tiles: &[Tile], vocab: u64) -> Vec<Range<u64>> {
    let mut covered: Vec<Range<u64>> = tiles.iter().map(Tile::rows).collect();
    covered.sort_by_key(|r| r.start);
    let mut missing = Vec::new();
    let mut next = 0;
    for r in covered {
        if r.start > next {
            missing.push(next..r.start.min(vocab));
        }
        next = next.max(r.end);
    }
    if next < vocab {
        missing.push(next..vocab);
    }
    missing.retain(|r| !r.is_empty());
    missing
}

/// `a..b, c..d` (the first four ranges, then how many more).
fn show(ranges: &[Range<u64>]) -> String {
    let mut parts: Vec<String> = ranges.iter().take(4).map(|r| format!("{r:?}")).collect();
    if ranges.len() > 4 {
        parts.push(format!("and {} more ranges", ranges.len() - 4));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiles of `vocab` rows cut into `count` even shards.
    fn cut(vocab: u32, count: u32) -> Vec<Tile> {
        let per = vocab.div_ceil(count);
        (0..count)
            .map(|i| Tile {
                index: i,
                shard_count: count,
                row_start: i * per,
                row_count: per.min(vocab - i * per),
                vocab,
            })
            .collect()
    }

    #[test]
    fn a_whole_vocabulary_passes() {
        assert_eq!(check_tiling(&cut(152_064, 8)), Ok(()));
        assert_eq!(check_tiling(&cut(7, 1)), Ok(()));
    }

    #[test]
    fn seven_of_eight_shards_name_the_missing_rows() {
        let e = check_tiling(&cut(152_064, 8)[..7]).unwrap_err();
        assert_eq!(e.missing, vec![133_056..152_064]);
        assert!(e.detail.contains("7 endpoints"), "{}", e.detail);
        assert!(
            e.detail.contains("rows 133056..152064 of 152064"),
            "{}",
            e.detail
        );
    }

    #[test]
    fn eight_endpoints_of_a_twelve_shard_cut_name_the_missing_rows() {
        let e = check_tiling(&cut(152_064, 12)[..8]).unwrap_err();
        assert_eq!(e.missing, vec![101_376..152_064]);
    }

    #[test]
    fn a_shard_at_the_wrong_position_or_twice_is_refused() {
        let mut tiles = cut(1000, 4);
        tiles.swap(1, 2);
        let e = check_tiling(&tiles).unwrap_err();
        assert!(e.detail.contains("endpoint 1 is shard 2"), "{}", e.detail);
        assert!(e.missing.is_empty());
        let mut tiles = cut(1000, 4);
        tiles[2] = tiles[1];
        let e = check_tiling(&tiles).unwrap_err();
        assert_eq!(e.missing, vec![500..750]);
    }

    #[test]
    fn answers_of_different_models_are_refused() {
        let mut tiles = cut(1000, 4);
        tiles[3].vocab = 1001;
        assert!(check_tiling(&tiles).is_err());
        let mut tiles = cut(1000, 4);
        tiles[3].row_count += 1; // past the vocabulary
        assert!(check_tiling(&tiles).is_err());
        assert!(check_tiling(&[]).is_err());
    }
}

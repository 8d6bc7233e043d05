//! How a client asks the shards: where ([`ROUTE`], [`WARM_ROUTE`]) and, for a draw with top-k,
//! top-p or min-p, which top-K in turn ([`top_k_ladder`]). The shard Worker routes on these
//! paths; the CLI and `@cobordism/client` (through `client-js`) send to them and climb the same
//! ladder, so a filtered draw asks the same questions from either.

use crate::MAX_TOP_K;

/// The path of the shard Worker's lm-head: `POST` hidden vectors, get logits or sections.
pub const ROUTE: &str = "/cobordism-lm-head";

/// The path that starts a shard loading its slice (`POST`, answered at once).
pub const WARM_ROUTE: &str = "/cobordism-lm-head/warm";

/// The smallest K a filtered draw asks for first: the union of the shards' top-64 decides
/// most filters, at 512 bytes per shard and vector.
const FIRST_TOP_K: usize = 64;

/// The K values a filtered draw asks every shard for, in order, until the union of their top-K
/// decides the filters (`top_k`: the draw's top-k filter, if any): first `top_k` clamped to
/// 64…[`MAX_TOP_K`], then [`MAX_TOP_K`] (once, when the first already is). When none decides,
/// the draw asks for all the logits.
pub fn top_k_ladder(top_k: Option<usize>) -> Vec<usize> {
    let first = top_k.unwrap_or(0).clamp(FIRST_TOP_K, MAX_TOP_K);
    if first == MAX_TOP_K {
        vec![MAX_TOP_K]
    } else {
        vec![first, MAX_TOP_K]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_starts_at_the_filter_or_64_and_ends_at_the_largest_k() {
        assert_eq!(top_k_ladder(None), [64, 1024]);
        assert_eq!(top_k_ladder(Some(5)), [64, 1024]);
        assert_eq!(top_k_ladder(Some(100)), [100, 1024]);
        assert_eq!(top_k_ladder(Some(1023)), [1023, 1024]);
        assert_eq!(top_k_ladder(Some(1024)), [1024]);
        assert_eq!(top_k_ladder(Some(50_000)), [1024]);
    }

    #[test]
    fn warming_is_under_the_route() {
        assert_eq!(WARM_ROUTE, format!("{ROUTE}/warm"));
    }
}

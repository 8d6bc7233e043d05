//! What the shard decodes from a request: the body (for any hidden size), the query (reply form,
//! precision, adjustments' length),
//! the `Authorization` header; and the client's decoding of section answers and its check that
//! the answers tile the vocabulary.
#![no_main]

use cobordism_protocol::{
    bearer_matches, check_tiling, decode_hidden, parse_top_k, Query, Tile, TopK,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&h, body)) = data.split_first() else {
        return;
    };
    let hidden = usize::from(h) * 3;
    if let Ok((x, n)) = decode_hidden(body, hidden) {
        assert_eq!(x.len(), n * hidden);
        assert!(x.iter().all(|v| v.is_finite()));
    }
    let text = String::from_utf8_lossy(body);
    if let Ok(k) = parse_top_k(&text) {
        assert!((1..=1024).contains(&k));
    }
    let pairs = text.split('&').filter_map(|p| p.split_once('='));
    if let Ok(query) = Query::parse(pairs) {
        let text = query.to_query();
        let again = Query::parse(text.split('&').filter_map(|p| p.split_once('=')));
        assert_eq!(again.as_ref(), Ok(&query), "{text}");
    }
    assert!(!bearer_matches(
        Some(&text),
        &["a-token-never-generated-by-the-fuzzer\u{1}"]
    ));
    let tiles: Vec<Tile> = body
        .chunks_exact(20)
        .map(|c| {
            let word = |i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
            Tile {
                index: word(0),
                shard_count: word(4),
                row_start: word(8),
                row_count: word(12),
                vocab: word(16),
            }
        })
        .collect();
    match check_tiling(&tiles) {
        Ok(()) => {
            // Accepted: shard i at position i, contiguous rows ending at the vocabulary.
            let mut next = 0u64;
            for (i, t) in tiles.iter().enumerate() {
                assert_eq!(t.index as usize, i);
                assert_eq!(u64::from(t.row_start), next);
                next += u64::from(t.row_count);
            }
            assert_eq!(next, u64::from(tiles[0].vocab));
        }
        Err(e) => assert!(e
            .missing
            .iter()
            .all(|r| r.end <= u64::from(tiles.first().map_or(0, |t| t.vocab)))),
    }
    if let Ok(sections) = TopK::decode_all(body) {
        let mut again = Vec::new();
        for s in &sections {
            s.encode_into(&mut again);
        }
        assert_eq!(again, body);
    }
});

//! Property tests (proptest) of the wire formats:
//!
//! * any valid manifest (consistent shard split, checksums of random bytes) survives
//!   `to_json` → `parse`, and any single break of its split is refused;
//! * `Checksum` over any chunking of any bytes is the one-shot XXH3-64;
//! * `TopK::compute` picks exactly the k largest logits (equal logits by id), its bounds on
//!   `log_sum_exp` hold, and `encode_into` → `decode_all` gives back every bit; a wire form cut
//!   anywhere but between sections is refused;
//! * `decode_hidden(encode_f32(x))` gives back `x`, and on any body it answers what its
//!   documented checks say.
//!
//! Cases are drawn from a fixed seed, so CI runs the same cases every time; set
//! `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`) to explore others. No regression files are written.

use cobordism_protocol::{
    decode_hidden, encode_f32, Checksum, HiddenError, Manifest, ShardEntry, TopK, FORMAT,
    FORMAT_VERSION, MAX_BATCH,
};
use cobordism_test_support::proptest_config;
use kquant::{Layout, QuantType};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::Config;

/// `cases` cases from this suite's fixed seed (see [`proptest_config`]).
fn config(cases: u32) -> Config {
    proptest_config(cases, 0x7072_6f74_6f63_6f6c)
}

/// A relative object key: 1 to 3 segments, none of them empty or `..`.
fn key() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,15}(/[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,15}){0,2}"
}

/// A valid manifest: `vocab` rows cut at random points into 1 to 64 contiguous shards of
/// `row_count · row_bytes` bytes each, with checksums of random bytes.
fn manifest() -> impl Strategy<Value = Manifest> {
    let split = (1usize..=300_000).prop_flat_map(|vocab| (Just(vocab), vec(0..vocab, 0..64)));
    let ty = select(vec!["q4_k", "q6_k", "Q4_K", "Q6_K"]);
    let softcap = prop_oneof![
        Just(None),
        (proptest::num::f32::POSITIVE | proptest::num::f32::NORMAL | proptest::num::f32::SUBNORMAL)
            .prop_map(Some),
    ];
    (split, ty, 1usize..=64, softcap, any::<bool>())
        .prop_flat_map(|((vocab, mut cuts), dtype, blocks, softcap, own_version)| {
            cuts.retain(|&c| c > 0);
            cuts.sort_unstable();
            cuts.dedup();
            cuts.push(vocab);
            let shards = cuts.len();
            let per_shard = (key(), vec(any::<u8>(), 0..64));
            (
                Just((vocab, cuts, dtype, blocks, softcap, own_version)),
                vec(per_shard, shards),
                "\\PC{1,40}",
                any::<String>(),
                any::<String>(),
            )
        })
        .prop_map(
            |(
                (vocab, cuts, dtype, blocks, softcap, own_version),
                shards,
                version,
                model,
                tensor,
            )| {
                let hidden = blocks * 256;
                let row_bytes = QuantType::from_name(dtype)
                    .unwrap()
                    .row_bytes(hidden)
                    .unwrap();
                let mut row_start = 0;
                let shards: Vec<ShardEntry> = cuts
                    .iter()
                    .zip(shards)
                    .enumerate()
                    .map(|(index, (&end, (key, content)))| {
                        let row_count = end - row_start;
                        let s = ShardEntry {
                            index,
                            row_start,
                            row_count,
                            key,
                            bytes: row_count as u64 * row_bytes as u64,
                            checksum: Checksum::of(&content),
                        };
                        row_start = end;
                        s
                    })
                    .collect();
                let m = Manifest {
                    format: FORMAT.into(),
                    format_version: FORMAT_VERSION,
                    version,
                    model,
                    tensor,
                    dtype: QuantType::from_name(dtype).unwrap(),
                    hidden,
                    vocab,
                    shard_count: shards.len(),
                    softcap,
                    source_dtype: None,
                    layout: Layout::Ggml,
                    shards,
                };
                if own_version {
                    m
                } else {
                    m.with_content_version()
                }
            },
        )
}

proptest! {
    #![proptest_config(config(1024))]

    /// A valid manifest parses back from its JSON equal to itself (the soft cap bit for bit).
    #[test]
    fn manifests_round_trip_through_json(m in manifest()) {
        prop_assert_eq!(m.validate(), Ok(()));
        let back = Manifest::parse(m.to_json().as_bytes());
        prop_assert_eq!(back.as_ref(), Ok(&m));
        let back = back.unwrap();
        prop_assert_eq!(back.softcap.map(f32::to_bits), m.softcap.map(f32::to_bits));
        prop_assert_eq!(back.row_bytes().unwrap() as u64 * back.vocab as u64,
                        back.shards.iter().map(|s| s.bytes).sum::<u64>());
    }

    /// Any single break of the split (a row moved, a byte count off by one, a shard renumbered
    /// or miscounted, rows missing or extra) is refused.
    #[test]
    fn broken_splits_are_refused(
        m in manifest(),
        which in any::<prop::sample::Index>(),
        how in 0..7,
    ) {
        let mut m = m;
        let i = which.index(m.shards.len());
        let s = &mut m.shards[i];
        match how {
            0 => s.row_start += 1,
            1 => s.row_start = s.row_start.wrapping_sub(1),
            2 => s.row_count += 1,
            3 => s.bytes += 1,
            4 => s.bytes -= 1,
            5 => s.index += 1,
            _ => m.vocab += 1,
        }
        prop_assert!(Manifest::parse(m.to_json().as_bytes()).is_err());
    }

    /// The streaming checksum over any chunking (empty chunks included) is the one-shot
    /// XXH3-64 of the bytes, written `xxh3-64:` and 16 lower-case hex digits.
    #[test]
    fn chunked_checksums_equal_one_shot(
        data in vec(any::<u8>(), 0..6000),
        cuts in vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut c = Checksum::new();
        let mut from = 0;
        for to in cuts.into_iter().chain([data.len()]) {
            c.update(&data[from..to]);
            from = to;
        }
        let want = format!("xxh3-64:{:016x}", xxhash_rust::xxh3::xxh3_64(&data));
        prop_assert_eq!(c.finish(), want.clone());
        prop_assert_eq!(Checksum::of(&data), want);
    }
}

/// A logit: small integers (many ties, ±0 among them), any finite value, ±inf, or NaN of
/// either sign.
fn logit() -> impl Strategy<Value = f32> {
    use proptest::num::f32::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    prop_oneof![
        8 => (-3i8..=3).prop_map(f32::from),
        1 => Just(-0.0f32),
        8 => -30.0f32..30.0,
        2 => POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO,
        1 => select(vec![f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN]),
    ]
}

/// Logits (none, or only finite ones, or any), a first row id that leaves room for them, and
/// a k from 0 to a few more than the logits.
fn topk_case() -> impl Strategy<Value = (Vec<f32>, u32, usize)> {
    let finite = prop_oneof![8 => -30.0f32..30.0, 8 => (-3i8..=3).prop_map(f32::from)];
    prop_oneof![vec(logit(), 0..300), vec(finite, 1..300)].prop_flat_map(|logits| {
        let n = logits.len();
        (Just(logits), 0..=u32::MAX - n as u32, 0..=n + 3)
    })
}

/// Equal bits for the floats.
fn same_topk(a: &TopK, b: &TopK) -> bool {
    let entry_bits = |t: &TopK| -> Vec<(u32, u32)> {
        t.entries.iter().map(|&(id, z)| (id, z.to_bits())).collect()
    };
    a.max_logit.to_bits() == b.max_logit.to_bits()
        && a.log_sum_exp.to_bits() == b.log_sum_exp.to_bits()
        && entry_bits(a) == entry_bits(b)
}

proptest! {
    #![proptest_config(config(1024))]

    /// The entries are exactly the first `min(k, n)` of all logits sorted by value (IEEE total
    /// order, largest first; NaN with the sign bit clear above +inf) and then by id; the max is
    /// the largest non-NaN logit; for finite logits `max ≤ log_sum_exp ≤ max + ln n`.
    #[test]
    fn topk_entries_are_the_k_largest((logits, row_start, k) in topk_case()) {
        let t = TopK::compute(&logits, row_start, k);
        let mut all: Vec<(u32, f32)> =
            logits.iter().enumerate().map(|(i, &z)| (row_start + i as u32, z)).collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        let bits = |e: &[(u32, f32)]| e.iter().map(|&(i, z)| (i, z.to_bits())).collect::<Vec<_>>();
        prop_assert_eq!(bits(&t.entries), bits(&all));
        let max = logits.iter().copied().filter(|z| !z.is_nan()).reduce(f32::max);
        prop_assert_eq!(t.max_logit.to_bits(), max.unwrap_or(f32::NEG_INFINITY).to_bits());
        if !logits.is_empty() && logits.iter().all(|z| z.is_finite()) {
            let n = logits.len() as f64;
            let upper = (f64::from(t.max_logit) + libm::log(n)) as f32;
            prop_assert!(t.max_logit <= t.log_sum_exp && t.log_sum_exp <= upper,
                         "{} ≤ {} ≤ {upper}", t.max_logit, t.log_sum_exp);
        }
    }

    /// Sections encoded back to back decode to the same sections, bit for bit; a wire form cut
    /// anywhere but at the end of a section is refused.
    #[test]
    fn topk_wire_round_trips(cases in vec(topk_case(), 1..4), cut in any::<prop::sample::Index>()) {
        let sections: Vec<TopK> =
            cases.iter().map(|(z, start, k)| TopK::compute(z, *start, *k)).collect();
        let mut wire = Vec::new();
        let mut ends = vec![0];
        for s in &sections {
            s.encode_into(&mut wire);
            prop_assert_eq!(wire.len() - ends.last().unwrap(), 12 + 8 * s.entries.len());
            ends.push(wire.len());
        }
        let back = TopK::decode_all(&wire).unwrap();
        prop_assert_eq!(back.len(), sections.len());
        for (a, b) in back.iter().zip(&sections) {
            prop_assert!(same_topk(a, b), "{a:?} vs {b:?}");
        }
        let cut = cut.index(wire.len());
        let prefix = TopK::decode_all(&wire[..cut]);
        match ends.iter().position(|&e| e == cut) {
            Some(whole) => prop_assert_eq!(prefix.map(|p| p.len()), Ok(whole)),
            None => prop_assert!(prefix.is_err(), "a cut at byte {cut} decoded"),
        }
    }

    /// Finite hidden vectors survive `encode_f32` → `decode_hidden` bit for bit, with their
    /// count.
    #[test]
    fn hidden_vectors_round_trip(
        (hidden, x) in (1usize..=64, 1..=MAX_BATCH).prop_flat_map(|(hidden, n)| {
            use proptest::num::f32::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
            (Just(hidden), vec(POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO, n * hidden))
        }),
    ) {
        let body = encode_f32(&x);
        prop_assert_eq!(body.len(), 4 * x.len());
        let (back, n) = decode_hidden(&body, hidden).unwrap();
        prop_assert_eq!(n, x.len() / hidden);
        let bits = |v: &[f32]| v.iter().map(|z| z.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&back), bits(&x));
    }

    /// Any body: refused as empty, as a bad length (not 1 to 8 whole vectors, or hidden 0), or
    /// at its first NaN/inf, and otherwise decoded.
    #[test]
    fn hidden_bodies_are_checked(
        hidden in 0usize..=8,
        body in prop_oneof![
            vec(any::<u8>(), 0..300),
            vec(prop_oneof![
                8 => any::<f32>(),
                1 => select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY]),
            ], 0..80).prop_map(|v| encode_f32(&v)),
        ],
    ) {
        let floats: Vec<f32> = body
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let vector_bytes = 4 * hidden;
        let want = if body.is_empty() {
            Err(HiddenError::Empty)
        } else if hidden == 0
            || body.len() % vector_bytes != 0
            || body.len() / vector_bytes > MAX_BATCH
        {
            Err(HiddenError::BadLength { len: body.len(), vector_bytes })
        } else if let Some(index) = floats.iter().position(|z| !z.is_finite()) {
            Err(HiddenError::NonFinite { index })
        } else {
            Ok(body.len() / vector_bytes)
        };
        let got = decode_hidden(&body, hidden);
        prop_assert_eq!(got.as_ref().map(|(_, n)| *n), want.as_ref().map(|n| *n));
        if let Ok((values, _)) = got {
            let bits = |v: &[f32]| v.iter().map(|z| z.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&values), bits(&floats));
        }
    }
}

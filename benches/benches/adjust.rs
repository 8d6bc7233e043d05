//! Criterion: what adjustments (`cobordism_protocol::adjust`) add to one qwen2.5-7b shard's
//! answer — shard 0 of 8, 19,008 of 152,064 rows — for the exact sample (`?temperature=T&seed=S`):
//! the plain answer (the baseline, in the same run), then with a 4,096-token history under all
//! three penalties, with an allowed set of every token but 300 scattered ones, and with a
//! grammar's 20 allowed tokens; and decoding each section (the shard's check of a request). Each
//! iteration copies the logits first, plain or not (the shard adjusts its own copy in place).
//!
//! `cargo bench -p cobordism-benches --bench adjust`

use std::hint::black_box;

use cobordism_protocol::adjust::{decode, encode, Adjust, Given};
use cobordism_protocol::{Form, Noise};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

const VOCAB: u32 = 152_064;
/// Shard 0 of eight.
const ROWS: usize = 19_008;

/// A 64-bit LCG's top bits, from a fixed seed: `n` values below `below`.
fn draws(n: usize, below: u32, mut state: u64) -> Vec<u32> {
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 32) % u64::from(below)) as u32
        })
        .collect()
}

fn logits() -> Vec<f32> {
    draws(ROWS, 1 << 20, 7)
        .into_iter()
        .map(|d| d as f32 / (1 << 20) as f32 * 30.0 - 15.0)
        .collect()
}

/// The adjustments measured, by name.
fn cases() -> Vec<(&'static str, Adjust)> {
    let given = |g: Given| g.adjust(VOCAB).expect("a valid adjustment");
    let history = Given {
        history: draws(4096, VOCAB, 11),
        presence: 0.4,
        frequency: 0.3,
        repetition: 1.1,
        ..Given::default()
    };
    let banned = draws(300, VOCAB, 13);
    let all_but = Given {
        allowed: Some((0..VOCAB).filter(|t| !banned.contains(t)).collect()),
        ..Given::default()
    };
    let grammar = Given {
        allowed: Some(draws(20, VOCAB, 17)),
        ..Given::default()
    };
    vec![
        ("4,096-token history, three penalties", given(history)),
        ("allowed: all but 300 tokens", given(all_but)),
        ("allowed: 20 tokens", given(grammar)),
    ]
}

fn adjust(c: &mut Criterion) {
    let z = logits();
    let sample = Form::Sample {
        temperature: 0.8,
        noise: Noise::Seed(5),
    };
    let mut group = c.benchmark_group(format!("sample of {ROWS} rows"));
    group.sample_size(30);
    group.bench_function("plain", |b| {
        b.iter_batched_ref(
            || z.clone(),
            |z| sample.encode(black_box(z), ROWS, 0),
            BatchSize::SmallInput,
        )
    });
    for (name, a) in cases() {
        let section = encode(std::slice::from_ref(&a));
        let label = format!("{name} ({} B/vector)", section.len() - 8);
        group.bench_function(format!("adjusted: {label}"), |b| {
            b.iter_batched_ref(
                || z.clone(),
                |z| sample.encode_adjusted(black_box(z), ROWS, 0, std::slice::from_ref(&a)),
                BatchSize::SmallInput,
            )
        });
        group.bench_function(format!("decode: {label}"), |b| {
            b.iter(|| decode(black_box(&section), 1, VOCAB))
        });
    }
    group.finish();
}

criterion_group!(benches, adjust);
criterion_main!(benches);

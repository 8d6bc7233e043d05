//! Criterion: a shard's Gumbel-max winner (`cobordism_protocol::sampling::slice_winner`, the
//! `?temperature=T&seed=S` reply) on one qwen2.5-7b shard's 19,008 logits, next to the same
//! winner with every row's noise drawn (`score` for each row: the baseline, in the same run) and
//! the log-sum-exp alone (what any reply of this form computes, skip or not).
//!
//! The winner skips the noise of a row that cannot win: its `z/T` plus the largest noise is
//! below the best score so far. How many rows that is depends on how far the logits spread
//! against `T`: none at ±6.8 and T = 1, most at ±40 and T = 0.7.
//!
//! `cargo bench -p cobordism-benches --bench sampling`

use std::hint::black_box;

use cobordism_protocol::sampling::{log_sum_exp, score, slice_winner};
use criterion::{criterion_group, criterion_main, Criterion};

/// One qwen2.5-7b shard of eight: 152,064 / 8 rows.
const ROWS: usize = 19_008;

/// `(spread, temperature)`: logits uniform in ±spread.
const CASES: [(f32, f32); 4] = [(6.8, 1.0), (20.0, 1.0), (20.0, 0.5), (40.0, 0.7)];

/// `ROWS` logits uniform in ±`spread`, from a fixed seed (a 64-bit LCG's top bits).
fn logits(spread: f32) -> Vec<f32> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..ROWS)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            spread * (2.0 * unit - 1.0)
        })
        .collect()
}

/// The winner with every row's noise drawn.
fn every_row(logits: &[f32], temperature: f32, seed: u64) -> u32 {
    let mut best = (0, f64::NEG_INFINITY);
    for (id, &z) in (0u32..).zip(logits) {
        let s = score(z, temperature, seed, 0, id);
        if s > best.1 {
            best = (id, s);
        }
    }
    best.0
}

fn sampling(c: &mut Criterion) {
    for (spread, temperature) in CASES {
        let z = logits(spread);
        let winner = slice_winner(&z, 0, temperature, 7, 0);
        assert_eq!(
            winner.entries[0].0,
            every_row(&z, temperature, 7),
            "the same winner"
        );
        let mut group = c.benchmark_group(format!("{ROWS} logits ±{spread}, T = {temperature}"));
        group.sample_size(20);
        group.bench_function("every row's noise", |b| {
            b.iter(|| every_row(black_box(&z), temperature, 7))
        });
        group.bench_function("slice_winner", |b| {
            b.iter(|| slice_winner(black_box(&z), 0, temperature, 7, 0))
        });
        group.bench_function("log-sum-exp alone", |b| {
            b.iter(|| log_sum_exp(black_box(&z), temperature))
        });
        group.finish();
    }
}

criterion_group!(benches, sampling);
criterion_main!(benches);

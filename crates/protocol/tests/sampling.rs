//! Exact sampling across shards against one machine with all the logits.
//!
//! The references here are written out plainly over the full logits (sort the vocabulary, cut
//! the filters' prefix, take the best Gumbel score); they share with the library only the noise
//! (`sampling::score`, the definition of the sample) and nothing of its merges. The chi-square
//! tests check the noise itself: thousands of seeded draws against `softmax(z/T)` over the kept
//! tokens, and a deliberately wrong sampler that the same test must reject.

mod support;

use cobordism_protocol::sampling::{merge_top_k, merge_winners, Sampled, Sampling, Undecided};
use cobordism_protocol::{Form, Noise, TopK};
use support::{chi_square, critical, cuts, kept, logits, reference, sample_sections};

/// What each shard answers for vector `v` in `form`.
fn answers(all: &[f32], shards: usize, form: &Form) -> Vec<(TopK, usize)> {
    cuts(all.len(), shards)
        .into_iter()
        .map(|(a, b)| {
            let bytes = form.encode(&all[a..b], b - a, a as u32).unwrap();
            let mut sections = TopK::decode_all(&bytes).unwrap();
            assert_eq!(sections.len(), 1);
            (sections.remove(0), b - a)
        })
        .collect()
}

/// The sharded path: the shards' winners for plain sampling, their top-K otherwise.
fn sharded(all: &[f32], shards: usize, s: &Sampling, k: usize) -> Result<Sampled, Undecided> {
    if !s.filtered() {
        let form = Form::Sample {
            temperature: s.temperature,
            noise: Noise::Seed(s.seed),
        };
        let winners: Vec<TopK> = answers(all, shards, &form)
            .into_iter()
            .map(|a| a.0)
            .collect();
        return Ok(merge_winners(&winners, s, 0).unwrap());
    }
    from_top_k(all, shards, s, k)
}

/// `sample` over the shards' `?top_k=K&temperature=T` answers.
fn from_top_k(all: &[f32], shards: usize, s: &Sampling, k: usize) -> Result<Sampled, Undecided> {
    let form = Form::TopK {
        k,
        temperature: s.temperature,
    };
    sample_sections(&answers(all, shards, &form), s)
}

#[test]
fn plain_sampling_picks_the_one_machine_token_for_8_and_12_shards() {
    let all = logits(5000, 1);
    for t in [0.3, 1.0, 2.0] {
        for seed in 0..200 {
            let s = Sampling::plain(t, seed);
            let want = reference(&all, &s, 0);
            for shards in [1, 8, 12] {
                let got = sharded(&all, shards, &s, 0).unwrap();
                assert_eq!(got.token, want, "T {t}, seed {seed}, {shards} shards");
                assert_eq!(got.logit, all[want as usize]);
            }
        }
    }
}

#[test]
fn skipping_the_noise_of_rows_that_cannot_win_changes_no_winner() {
    // The shard draws no noise for a row whose score cannot reach the best so far even with the
    // largest noise: spreads from far below to far above that bound, ties, and the most negative
    // logit must give the token of scoring every row.
    for (scale, t) in [
        (0.01, 1.0),
        (1.0, 1.0),
        (8.0, 0.05),
        (500.0, 1.0),
        (1.0, 1000.0),
    ] {
        let mut all: Vec<f32> = logits(4096, 7).iter().map(|z| z * scale).collect();
        all[100] = f32::MIN;
        all[4000] = all[17]; // a tie of logits
        for seed in 0..100 {
            let s = Sampling::plain(t, seed);
            let got = sharded(&all, 1, &s, 0).unwrap();
            assert_eq!(
                got.token,
                reference(&all, &s, 0),
                "scale {scale}, T {t}, seed {seed}"
            );
        }
    }
}

#[test]
fn filtered_sampling_picks_the_one_machine_token_or_says_it_cannot() {
    let all = logits(3000, 2);
    let filters = [
        (Some(1), None, None),
        (Some(40), None, None),
        (None, Some(0.5), None),
        (None, Some(0.9), None),
        (None, None, Some(0.05)),
        (Some(50), Some(0.8), Some(0.01)),
    ];
    let mut undecided = 0;
    for (top_k, top_p, min_p) in filters {
        for t in [0.3, 1.0, 2.0] {
            for seed in 0..40 {
                let s = Sampling {
                    temperature: t,
                    seed,
                    top_k,
                    top_p,
                    min_p,
                };
                let want = reference(&all, &s, 0);
                for shards in [8, 12] {
                    for k in [64, 1024] {
                        match sharded(&all, shards, &s, k) {
                            Ok(got) => assert_eq!(got.token, want, "{s:?}, {shards} shards, K {k}"),
                            Err(_) => undecided += 1,
                        }
                    }
                    let full = sharded(&all, shards, &s, 1024).expect("K covers each slice");
                    assert_eq!(full.token, want);
                }
            }
        }
    }
    assert!(
        undecided > 0,
        "some setting needs more than K = 64 (the Undecided path is tested)"
    );
}

#[test]
fn an_undecidable_nucleus_is_refused_not_truncated() {
    // Nearly flat: p = 0.9 needs thousands of tokens, each shard sends 16.
    let flat: Vec<f32> = (0..4096).map(|i| -(i as f32) * 1e-4).collect();
    let s = Sampling {
        top_p: Some(0.9),
        ..Sampling::plain(1.0, 7)
    };
    let e = sharded(&flat, 8, &s, 16).unwrap_err();
    assert!(e.0.contains("top-p"), "{e}");
    let plain_from_top_k = from_top_k(&flat, 8, &Sampling::plain(1.0, 7), 16);
    assert!(
        plain_from_top_k.is_err(),
        "plain sampling needs every token"
    );
}

#[test]
fn merged_top_k_is_the_top_k_of_all_logits_bit_for_bit() {
    let all = logits(10_000, 3);
    let whole = TopK::compute(&all, 0, 100);
    for shards in [8, 12] {
        let got = answers(
            &all,
            shards,
            &Form::TopK {
                k: 100,
                temperature: 1.0,
            },
        );
        let sections: Vec<&TopK> = got.iter().map(|a| &a.0).collect();
        let merged = merge_top_k(&sections, 100);
        let bits = |e: &[(u32, f32)]| e.iter().map(|(i, z)| (*i, z.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(&merged), bits(&whole.entries), "{shards} shards");
    }
}

/// Draws `n` seeded samples of a 12-token vocabulary through 3 shards and returns the counts
/// and the expected probabilities of the kept tokens (zero elsewhere, those tokens left out).
fn draws(s: Sampling, n: u64, wrong: bool) -> (Vec<u32>, Vec<f64>) {
    let all: Vec<f32> = vec![
        2.0, 1.5, 1.5, 1.0, 0.7, 0.5, 0.2, 0.0, -0.3, -1.0, -1.5, -2.0,
    ];
    let t = f64::from(s.temperature);
    let mut counts = vec![0u32; all.len()];
    for seed in 0..n {
        let s = Sampling { seed, ..s };
        let token = if wrong {
            // A plausible bug: the temperature applied twice.
            let s2 = Sampling {
                temperature: s.temperature * s.temperature,
                ..s
            };
            sharded(&all, 3, &s2, 4).unwrap().token
        } else {
            sharded(&all, 3, &s, 4).unwrap().token
        };
        counts[token as usize] += 1;
    }
    // Expected: softmax(z/T) over the tokens the reference keeps.
    let kept: Vec<usize> = kept(&all, &s).into_iter().map(|i| i as usize).collect();
    let z: f64 = kept.iter().map(|&i| (f64::from(all[i]) / t).exp()).sum();
    let p = (0..all.len())
        .map(|i| {
            if kept.contains(&i) {
                (f64::from(all[i]) / t).exp() / z
            } else {
                0.0
            }
        })
        .collect();
    (counts, p)
}

fn chi_square_of(s: Sampling, wrong: bool) -> (f64, f64) {
    let (counts, p) = draws(s, 20_000, wrong);
    let (c, q): (Vec<u32>, Vec<f64>) = counts
        .iter()
        .zip(&p)
        .filter(|(_, &p)| p > 0.0)
        .map(|(c, p)| (*c, *p))
        .unzip();
    assert_eq!(
        counts.iter().sum::<u32>(),
        c.iter().sum::<u32>(),
        "a token outside the kept set was drawn"
    );
    (chi_square(&c, &q), critical(c.len() - 1))
}

#[test]
fn chi_square_accepts_the_sampled_distributions() {
    let plain = Sampling::plain(1.5, 0);
    for s in [
        plain,
        Sampling {
            top_k: Some(4),
            ..plain
        },
        Sampling {
            top_p: Some(0.6),
            ..plain
        },
        Sampling {
            min_p: Some(0.3),
            ..plain
        },
    ] {
        let (x, limit) = chi_square_of(s, false);
        eprintln!("{s:?}: chi-square {x:.1} (limit {limit:.1})");
        assert!(x < limit, "{s:?}: chi-square {x:.1} ≥ {limit:.1}");
    }
}

#[test]
fn chi_square_rejects_a_wrong_sampler() {
    let (x, limit) = chi_square_of(Sampling::plain(1.5, 0), true);
    eprintln!("wrong sampler: chi-square {x:.1} (limit {limit:.1})");
    assert!(
        x > limit,
        "the wrong sampler passed: chi-square {x:.1} < {limit:.1}"
    );
}

/// The exact `ln Σ exp(z/T)` of all the logits, in f64 (an oracle: no f32 rounding anywhere).
fn exact_lse(all: &[f32], t: f64) -> f64 {
    let max = all
        .iter()
        .map(|&z| f64::from(z) / t)
        .fold(f64::NEG_INFINITY, f64::max);
    max + all
        .iter()
        .map(|&z| (f64::from(z) / t - max).exp())
        .sum::<f64>()
        .ln()
}

#[test]
fn a_logprob_moves_across_shard_counts_only_within_the_documented_bound() {
    // Each shard sends its ln Σ exp(z/T) rounded to f32, so the merged log-partition — and every
    // logprob — can differ in its last bits between cuts: by at most 2⁻²⁴ · max_s |lse_s| from
    // the exact value (ln Σ exp is 1-Lipschitz in each shard's term), hence by at most
    // 2⁻²⁴ · (max |lse| of one cut + max |lse| of the other) between two cuts (docs/API.md).
    let tokens: Vec<u32> = vec![0, 17, 4242, 9999];
    let mut widest = 0f64;
    for seed in 0..20 {
        let all: Vec<f32> = logits(10_000, seed)
            .iter()
            .map(|z| z * 3.0 + 12.0)
            .collect();
        for t in [0.5f32, 1.0, 2.0] {
            let form = Form::Tokens {
                tokens: tokens.clone(),
                temperature: t,
            };
            let exact = exact_lse(&all, f64::from(t));
            for shards in [1, 8, 12] {
                let sections: Vec<TopK> = answers(&all, shards, &form)
                    .into_iter()
                    .map(|(s, _)| s)
                    .collect();
                let bound = 2f64.powi(-24)
                    * sections
                        .iter()
                        .map(|s| f64::from(s.log_sum_exp).abs())
                        .fold(0.0, f64::max);
                let lp = cobordism_protocol::sampling::logprobs(&sections, &tokens, t);
                for (id, got) in tokens.iter().zip(&lp) {
                    let want = f64::from(all[*id as usize]) / f64::from(t) - exact;
                    let err = (got.unwrap() - want).abs();
                    assert!(
                        err <= bound + 1e-12,
                        "seed {seed}, T {t}, {shards} shards: error {err:e} > bound {bound:e}"
                    );
                    widest = widest.max(err / bound);
                }
            }
        }
    }
    // The bound is not vacuous: the f32 rounding does show at this size.
    assert!(widest > 0.01, "largest error only {widest} of the bound");
}

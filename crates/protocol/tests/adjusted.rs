//! Sampling with adjusted logits (`cobordism_protocol::adjust`: the allowed set, logit bias,
//! repetition, frequency and presence penalties) across shards, against one machine.
//!
//! The oracle adjusts the whole vocabulary with a plain per-token loop written here from the
//! documented rule (a map per parameter, no sorted lists, no slicing), then samples with the
//! one-machine reference of `support`; each shard adjusts its own rows with the library's
//! `Form::encode_adjusted`, and the client merges their answers.

mod support;

use std::collections::HashMap;

use cobordism_protocol::adjust::Adjust;
use cobordism_protocol::sampling::{merge_winners, sample_all, Sampled, Sampling, Undecided};
use cobordism_protocol::{Form, Noise, TopK};
use support::{chi_square, critical, cuts, logits, reference, sample_sections};

/// The oracle: the rule of the module doc, token by token.
fn adjusted(all: &[f32], a: &Adjust) -> Vec<f32> {
    let bias: HashMap<u32, f32> = a.bias.iter().copied().collect();
    let count: HashMap<u32, u32> = a.history.iter().copied().collect();
    let allowed = |t: u32| {
        a.allowed
            .as_ref()
            .is_none_or(|r| r.iter().any(|&(s, e)| s <= t && t < e))
    };
    (0..all.len() as u32)
        .map(|t| {
            if !allowed(t) {
                return f32::NEG_INFINITY;
            }
            let mut z = all[t as usize];
            if let Some(b) = bias.get(&t) {
                z += b;
            }
            if z == f32::NEG_INFINITY {
                return z;
            }
            if let Some(&n) = count.get(&t) {
                if a.repetition != 1.0 {
                    z = if z <= 0.0 {
                        z * a.repetition
                    } else {
                        z / a.repetition
                    };
                }
                let per_count = n as f32 * a.frequency;
                z -= per_count + a.presence;
            }
            z
        })
        .collect()
}

/// Each parameter alone, then all of them, for a vocabulary of `vocab`.
fn adjustments(vocab: u32) -> Vec<Adjust> {
    let history = Adjust::count_history(&[3, 17, 17, 40, 99, 99, 99, vocab - 1, vocab / 2]);
    let bias = vec![
        (0, 3.0),
        (17, -2.0),
        (41, f32::NEG_INFINITY),
        (vocab / 3, 4.5),
    ];
    let allowed = Some(vec![
        (0, 60),
        (vocab / 3, vocab / 3 + 25),
        (vocab - 10, vocab),
    ]);
    let none = Adjust::none();
    vec![
        Adjust {
            bias: bias.clone(),
            ..none.clone()
        },
        Adjust {
            presence: 1.5,
            history: history.clone(),
            ..none.clone()
        },
        Adjust {
            frequency: 0.75,
            history: history.clone(),
            ..none.clone()
        },
        Adjust {
            repetition: 1.8,
            history: history.clone(),
            ..none.clone()
        },
        Adjust {
            allowed: allowed.clone(),
            ..none.clone()
        },
        Adjust {
            bias,
            presence: 0.4,
            frequency: 0.3,
            repetition: 1.3,
            history,
            allowed,
        },
    ]
}

/// Each shard's answer for one vector in `form`, its rows adjusted by `a` on the shard.
fn answers(all: &[f32], shards: usize, form: &Form, a: &Adjust) -> Vec<(TopK, usize)> {
    cuts(all.len(), shards)
        .into_iter()
        .map(|(lo, hi)| {
            let mut rows = all[lo..hi].to_vec();
            let bytes = form
                .encode_adjusted(&mut rows, hi - lo, lo as u32, std::slice::from_ref(a))
                .unwrap();
            let mut sections = TopK::decode_all(&bytes).unwrap();
            (sections.remove(0), hi - lo)
        })
        .collect()
}

/// The token the client draws from the shards' answers: their winners for plain sampling, their
/// top-`k` otherwise.
fn sharded(
    all: &[f32],
    shards: usize,
    s: &Sampling,
    a: &Adjust,
    k: usize,
) -> Result<Sampled, Undecided> {
    if !s.filtered() {
        let form = Form::Sample {
            temperature: s.temperature,
            noise: Noise::Seed(s.seed),
        };
        let winners: Vec<TopK> = answers(all, shards, &form, a)
            .into_iter()
            .map(|x| x.0)
            .collect();
        return merge_winners(&winners, s, 0).ok_or_else(|| Undecided("no winner".into()));
    }
    let form = Form::TopK {
        k,
        temperature: s.temperature,
    };
    sample_sections(&answers(all, shards, &form, a), s)
}

#[test]
fn the_library_adjusts_as_the_plain_rule_bit_for_bit() {
    let all = logits(3000, 11);
    for a in adjustments(3000) {
        let mut got = all.clone();
        a.apply(&mut got, 0);
        let bits = |v: &[f32]| v.iter().map(|z| z.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&adjusted(&all, &a)), "{a:?}");
    }
}

#[test]
fn adjusted_sampling_picks_the_one_machine_token_for_1_2_8_and_12_shards() {
    let all = logits(3000, 12);
    let plain = Sampling::plain(1.0, 0);
    let filters = [
        plain,
        Sampling {
            top_k: Some(20),
            ..plain
        },
        Sampling {
            top_p: Some(0.7),
            ..plain
        },
        Sampling {
            min_p: Some(0.05),
            temperature: 0.7,
            ..plain
        },
    ];
    for a in adjustments(3000) {
        let whole = adjusted(&all, &a);
        for s in filters {
            for seed in 0..20 {
                let s = Sampling { seed, ..s };
                let want = reference(&whole, &s, 0);
                for shards in [1, 2, 8, 12] {
                    let got = sharded(&all, shards, &s, &a, 1024).unwrap();
                    assert_eq!(got.token, want, "{a:?} {s:?} {shards} shards");
                    assert_eq!(got.logit.to_bits(), whole[want as usize].to_bits());
                }
            }
        }
    }
}

#[test]
fn an_allowed_set_of_three_tokens_is_never_left_in_10000_draws() {
    let all = logits(4096, 13);
    let a = Adjust {
        allowed: Some(Adjust::ranges_of(&[7, 2900, 4095])),
        ..Adjust::none()
    };
    let mut seen = [0u32; 3];
    for seed in 0..10_000 {
        let token = sharded(&all, 8, &Sampling::plain(1.0, seed), &a, 0)
            .unwrap()
            .token;
        let i = [7, 2900, 4095].iter().position(|&t| t == token);
        seen[i.unwrap_or_else(|| panic!("seed {seed} drew {token}, outside the allowed set"))] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

#[test]
fn a_bias_of_100_makes_its_token_the_draw_on_every_seed() {
    let all = logits(4096, 14);
    let a = Adjust {
        bias: vec![(1234, 100.0)],
        ..Adjust::none()
    };
    for seed in 0..200 {
        for shards in [1, 8] {
            let got = sharded(&all, shards, &Sampling::plain(1.0, seed), &a, 0).unwrap();
            assert_eq!(got.token, 1234, "seed {seed}");
        }
    }
}

#[test]
fn chi_square_accepts_the_adjusted_distribution_and_rejects_the_unadjusted_one() {
    let all: Vec<f32> = vec![
        2.0, 1.5, 1.5, 1.0, 0.7, 0.5, 0.2, 0.0, -0.3, -1.0, -1.5, -2.0,
    ];
    let a = Adjust {
        bias: vec![(4, 1.0), (9, 2.0)],
        presence: 0.5,
        frequency: 0.2,
        repetition: 1.5,
        history: vec![(0, 2), (3, 1), (11, 4)],
        allowed: Some(vec![(0, 5), (6, 12)]),
    };
    let whole = adjusted(&all, &a);
    let p: Vec<f64> = {
        let e: Vec<f64> = whole.iter().map(|&z| f64::from(z).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|x| x / sum).collect()
    };
    let draws = |adjust: &Adjust| {
        let mut counts = vec![0u32; all.len()];
        for seed in 0..20_000 {
            let s = Sampling::plain(1.0, seed);
            counts[sharded(&all, 3, &s, adjust, 0).unwrap().token as usize] += 1;
        }
        counts
    };
    let kept = |counts: &[u32]| -> (Vec<u32>, Vec<f64>) {
        counts
            .iter()
            .zip(&p)
            .filter(|(_, &q)| q > 0.0)
            .map(|(c, q)| (*c, *q))
            .unzip()
    };
    let counts = draws(&a);
    assert_eq!(counts[5], 0, "token 5 is outside the allowed set");
    let (c, q) = kept(&counts);
    let (x, limit) = (chi_square(&c, &q), critical(c.len() - 1));
    assert!(x < limit, "chi-square {x:.1} ≥ {limit:.1}");
    let (c, q) = kept(&draws(&Adjust::none()));
    let (x, limit) = (chi_square(&c, &q), critical(c.len() - 1));
    assert!(
        x > limit,
        "the unadjusted sampler passed: chi-square {x:.1} < {limit:.1}"
    );
}

#[test]
fn filters_over_a_small_allowed_set_decide_at_the_first_k() {
    // A grammar's handful of tokens under llama.cpp's default top-k 40: every left-out logit is
    // −∞, so the shards' first top-64 decides every filter (no round for all the logits), and
    // the draw and its log-probability are those of one machine with all the logits.
    let all = logits(3000, 14);
    let a = Adjust {
        allowed: Some(Adjust::ranges_of(&[5, 1400, 2999])),
        bias: vec![(1400, f32::NEG_INFINITY)],
        ..Adjust::none()
    };
    let whole = adjusted(&all, &a);
    let plain = Sampling::plain(0.8, 0);
    for s in [
        Sampling {
            top_k: Some(40),
            ..plain
        },
        Sampling {
            top_p: Some(0.95),
            ..plain
        },
        Sampling {
            min_p: Some(0.05),
            top_k: Some(40),
            ..plain
        },
    ] {
        for seed in 0..20 {
            let s = Sampling { seed, ..s };
            let want = sample_all(&whole, &s, 0).unwrap();
            for shards in [1, 2, 8, 12] {
                let got = sharded(&all, shards, &s, &a, 64).unwrap_or_else(|e| {
                    panic!("{s:?}, {shards} shards: undecided at K = 64: {}", e.0)
                });
                assert_eq!(got.token, want.token, "{s:?} {shards} shards");
                assert!([5, 2999].contains(&got.token));
                assert_eq!(
                    got.logprob.to_bits(),
                    want.logprob.to_bits(),
                    "{s:?} {shards}"
                );
            }
        }
    }
}

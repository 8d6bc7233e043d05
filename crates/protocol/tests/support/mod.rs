//! What the sampling tests share: deterministic logits, the shards' cuts, the one-machine
//! reference sample written out plainly over all the logits, and Pearson's chi-square.

use cobordism_protocol::sampling::{sample, score, Part, Sampled, Sampling, Undecided};
use cobordism_protocol::TopK;

/// Deterministic logits with ties and a few repeated values (splitmix64 → [-8, 8) in 1/64 steps).
pub fn logits(vocab: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..vocab)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 54) as f32 - 512.0) / 64.0
        })
        .collect()
}

/// Row ranges of `vocab` cut into `shards` nearly equal slices.
pub fn cuts(vocab: usize, shards: usize) -> Vec<(usize, usize)> {
    (0..shards)
        .map(|s| (vocab * s / shards, vocab * (s + 1) / shards))
        .collect()
}

/// The reference's kept tokens: sort all tokens (logit down, id up), cut top-k, top-p, min-p.
pub fn kept(all: &[f32], s: &Sampling) -> Vec<u32> {
    let t = f64::from(s.temperature);
    let mut order: Vec<u32> = (0..all.len() as u32).collect();
    order.sort_by(|&a, &b| all[b as usize].total_cmp(&all[a as usize]).then(a.cmp(&b)));
    let lse = |ids: &[u32]| {
        let m = ids
            .iter()
            .map(|&i| f64::from(all[i as usize]) / t)
            .fold(f64::MIN, f64::max);
        m + ids
            .iter()
            .map(|&i| (f64::from(all[i as usize]) / t - m).exp())
            .sum::<f64>()
            .ln()
    };
    let mut keep = order.len();
    if let Some(k) = s.top_k {
        keep = keep.min(k);
    }
    if let Some(p) = s.top_p {
        let norm = lse(&order[..keep]);
        let mut mass = 0.0;
        for (i, &id) in order[..keep].iter().enumerate() {
            mass += (f64::from(all[id as usize]) / t - norm).exp();
            if mass >= p {
                keep = i + 1;
                break;
            }
        }
    }
    if let Some(m) = s.min_p {
        let top = f64::from(all[order[0] as usize]);
        keep = order[..keep]
            .iter()
            .take_while(|&&id| (f64::from(all[id as usize]) - top) / t >= m.ln())
            .count();
    }
    order.truncate(keep);
    order
}

/// The reference sample: the best score among the kept tokens.
pub fn reference(all: &[f32], s: &Sampling, v: u32) -> u32 {
    let kept = kept(all, s);
    let mut best = kept[0];
    for &id in &kept {
        let (a, b) = (
            score(all[id as usize], s.temperature, s.seed, v, id),
            score(all[best as usize], s.temperature, s.seed, v, best),
        );
        if a > b || (a == b && id < best) {
            best = id;
        }
    }
    best
}

/// Pearson's chi-square of `counts` against probabilities `p`.
pub fn chi_square(counts: &[u32], p: &[f64]) -> f64 {
    let n: u32 = counts.iter().sum();
    counts
        .iter()
        .zip(p)
        .map(|(&c, &p)| {
            let e = f64::from(n) * p;
            (f64::from(c) - e).powi(2) / e
        })
        .sum()
}

/// The 0.1 % critical value of chi-square with `df` degrees of freedom (Wilson–Hilferty).
pub fn critical(df: usize) -> f64 {
    let d = df as f64;
    let z = 3.090_232; // the 99.9 % normal quantile
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

/// `sample` over the shards' sections of one vector (`(section, rows)` in shard order).
pub fn sample_sections(got: &[(TopK, usize)], s: &Sampling) -> Result<Sampled, Undecided> {
    let parts: Vec<Part> = got
        .iter()
        .map(|(section, rows)| Part {
            section,
            rows: *rows,
        })
        .collect();
    sample(&parts, s, 0)
}

//! The independent oracle: the canonical order of `arch/generic`'s module docs written out as
//! plain, straight-line scalar f32 code — one weight at a time, explicit statement order, no
//! vectors, no kquant code beyond the bytes of a block (its f16 fields, scales and quants are
//! decoded here again from the ggml layout). Every backend on this target, in every batch size,
//! must equal it bit for bit (any NaN equals any NaN), on random shapes and on edge cases:
//! subnormal and maximal f16 scales, extreme quants, zero, huge, infinite and NaN activations —
//! with the blocks in every layout kquant reads (repacked from the ggml bytes the oracle reads).
// Index loops on purpose: the code follows the contract's indices statement by statement.
#![allow(clippy::needless_range_loop)]

mod common;

use common::{first_difference, mat_mat, mat_mat_int8, random_blocks, random_x, Rng};
use kquant::{repack, Backend, Layout, QMatrix, QuantType};

/// An IEEE half (little-endian bytes) as f32, from its fields.
fn f16(bytes: [u8; 2]) -> f32 {
    let h = u16::from_le_bytes(bytes);
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exponent = i32::from((h >> 10) & 0x1F);
    let mantissa = f32::from(h & 0x3FF);
    match exponent {
        0 => sign * mantissa * 2f32.powi(-24), // subnormal: exact in f32
        31 if mantissa == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + mantissa / 1024.0) * 2f32.powi(e - 15),
    }
}

/// The fields of one Q6_K block (210 bytes: ql[128], qh[64], scales[16] as i8, d).
struct Q6 {
    d: f32,
    scales: [i8; 16],
    /// q − 32 of each of the 256 weights.
    q: [i32; 256],
}

fn q6(block: &[u8]) -> Q6 {
    let (ql, qh, sc) = (&block[..128], &block[128..192], &block[192..208]);
    let mut q = [0i32; 256];
    for (i, q) in q.iter_mut().enumerate() {
        // Weights in halves of 128; each half in four quarters of 32.
        let (half, r) = (i / 128, i % 128);
        let (quarter, l) = (r / 32, r % 32);
        let low_byte = ql[64 * half + l + 32 * (quarter % 2)];
        let low = if quarter < 2 {
            low_byte & 0xF
        } else {
            low_byte >> 4
        };
        let high = (qh[32 * half + l] >> (2 * quarter)) & 3;
        *q = i32::from(low | (high << 4)) - 32;
    }
    Q6 {
        d: f16([block[208], block[209]]),
        scales: core::array::from_fn(|j| sc[j] as i8),
        q,
    }
}

/// The fields of one Q4_K block (144 bytes: d, dmin, scales[12], qs[128]).
struct Q4 {
    d: f32,
    dmin: f32,
    /// The 6-bit scale and min of each 32-weight sub-block.
    sc: [u8; 8],
    m: [u8; 8],
    /// The 4-bit quant of each of the 256 weights.
    q: [u8; 256],
}

fn q4(block: &[u8]) -> Q4 {
    let s = &block[4..16];
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        if j < 4 {
            sc[j] = s[j] & 63;
            m[j] = s[j + 4] & 63;
        } else {
            sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
            m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
    }
    let qs = &block[16..];
    let q = core::array::from_fn(|i| {
        // 64 weights per 32 bytes: low nibbles first, then high nibbles.
        let (group, l) = (i / 64, i % 64);
        let byte = qs[32 * group + l % 32];
        if l < 32 {
            byte & 0xF
        } else {
            byte >> 4
        }
    });
    Q4 {
        d: f16([block[0], block[1]]),
        dmin: f16([block[2], block[3]]),
        sc,
        m,
        q,
    }
}

/// The exact mode's row result, in the canonical order.
fn exact_row(ty: QuantType, row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let mut mins = [0.0f32; 4];
    for (b, block) in row.chunks_exact(ty.block_bytes()).enumerate() {
        let xb = &x[256 * b..256 * b + 256];
        let (q, ds): ([f32; 256], [f32; 16]) = match ty {
            QuantType::Q6K => {
                let blk = q6(block);
                (
                    blk.q.map(|q| q as f32),
                    core::array::from_fn(|j| blk.d * f32::from(blk.scales[j])),
                )
            }
            QuantType::Q4K => {
                let blk = q4(block);
                for s in 0..8 {
                    let mut sum = 0.0f32;
                    for t in 0..32 {
                        sum += xb[32 * s + t];
                    }
                    let min = blk.dmin * f32::from(blk.m[s]);
                    mins[s % 4] += min * sum;
                }
                (
                    blk.q.map(f32::from),
                    core::array::from_fn(|j| blk.d * f32::from(blk.sc[j / 2])),
                )
            }
        };
        for j in 0..16 {
            for l in 0..4 {
                let w = 16 * j + 4 * l;
                let v0 = q[w] * xb[w];
                let v1 = q[w + 1] * xb[w + 1];
                let v2 = q[w + 2] * xb[w + 2];
                let v3 = q[w + 3] * xb[w + 3];
                let p = ((v0 + v1) + v2) + v3;
                let lane = 4 * (j % 4) + l;
                acc[lane] += ds[j] * p;
            }
        }
    }
    let t: [f32; 4] = core::array::from_fn(|l| (acc[l] + acc[4 + l]) + (acc[8 + l] + acc[12 + l]));
    let s = (t[0] + t[1]) + (t[2] + t[3]);
    match ty {
        QuantType::Q6K => s,
        QuantType::Q4K => s - ((mins[0] + mins[1]) + (mins[2] + mins[3])),
    }
}

/// ggml's `nearest_int`: round half to even.
fn round_even(v: f32) -> i32 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        (r - v.signum()) as i32
    } else {
        r as i32
    }
}

/// The 8-bit mode's row result: per super-block, x quantized to ±127 by its largest |x|, integer
/// dot products per sub-block, then one f32 multiply-add per block in the documented order.
fn int8_row(ty: QuantType, row: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (b, block) in row.chunks_exact(ty.block_bytes()).enumerate() {
        let xb = &x[256 * b..256 * b + 256];
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (xq, dx): ([i64; 256], f32) = if amax == 0.0 {
            ([0; 256], 0.0)
        } else {
            let iscale = 127.0 / amax;
            (
                core::array::from_fn(|i| i64::from(round_even(xb[i] * iscale).clamp(-127, 127))),
                amax / 127.0,
            )
        };
        let group_sum = |g: usize| xq[16 * g..16 * g + 16].iter().sum::<i64>();
        match ty {
            QuantType::Q6K => {
                let blk = q6(block);
                let mut s = 0i64;
                for j in 0..16 {
                    let mut dot = 0i64;
                    for i in 16 * j..16 * j + 16 {
                        dot += i64::from(blk.q[i] + 32) * xq[i];
                    }
                    s += i64::from(blk.scales[j]) * (dot - 32 * group_sum(j));
                }
                acc += (blk.d * dx) * s as f32;
            }
            QuantType::Q4K => {
                let blk = q4(block);
                let (mut s, mut m) = (0i64, 0i64);
                for sub in 0..8 {
                    let mut dot = 0i64;
                    for i in 32 * sub..32 * sub + 32 {
                        dot += i64::from(blk.q[i]) * xq[i];
                    }
                    s += i64::from(blk.sc[sub]) * dot;
                    m += i64::from(blk.m[sub]) * (group_sum(2 * sub) + group_sum(2 * sub + 1));
                }
                acc += (blk.d * dx) * s as f32 - (blk.dmin * dx) * m as f32;
            }
        }
    }
    acc
}

/// An oracle row function and the library call it checks.
type RowFn = fn(QuantType, &[u8], &[f32]) -> f32;
type RunFn = fn(Backend, &QMatrix, &[f32]) -> Vec<f32>;

/// The oracle's answer for `n` vectors `xs` over the matrix `w` (rows × cols), vector by vector.
fn oracle(row_fn: RowFn, ty: QuantType, w: &[u8], rows: usize, xs: &[f32]) -> Vec<f32> {
    let row_bytes = w.len() / rows;
    let cols = 256 * row_bytes / ty.block_bytes();
    xs.chunks_exact(cols)
        .flat_map(|x| w.chunks_exact(row_bytes).map(move |r| row_fn(ty, r, x)))
        .collect()
}

/// Every backend, in one batch of all the vectors, equals the oracle.
fn check(mode: &str, ty: QuantType, w: &[u8], rows: usize, xs: &[f32], case: &str) {
    let (row_fn, run): (RowFn, RunFn) = match mode {
        "exact" => (exact_row, mat_mat),
        _ => (int8_row, mat_mat_int8),
    };
    let want = oracle(row_fn, ty, w, rows, xs);
    let cols = 256 * (w.len() / rows) / ty.block_bytes();
    // The oracle reads ggml's blocks; every layout of the same blocks must give its bits.
    for layout in Layout::ALL.into_iter().filter(|l| l.supports(ty)) {
        let mut bytes = w.to_vec();
        repack(ty, Layout::Ggml, layout, &mut bytes).unwrap();
        let m = QMatrix::with_layout(ty, layout, &bytes, rows, cols).unwrap();
        for backend in Backend::available() {
            for n in [1, xs.len() / cols] {
                let got = run(backend, &m, &xs[..n * cols]);
                if let Some(i) = first_difference(&got, &want[..n * rows]) {
                    panic!(
                        "{mode} {ty:?} ({} layout) {case}, batch of {n}, {backend}: \
                         row {} of vector {} is {:e} ({:#010x}), the oracle says {:e} ({:#010x})",
                        layout.name(),
                        i % rows,
                        i / rows,
                        got[i],
                        got[i].to_bits(),
                        want[i],
                        want[i].to_bits()
                    );
                }
            }
        }
    }
}

#[test]
fn exact_mode_every_backend_equals_the_oracle_on_random_shapes() {
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0x0AC1E + ty.ggml_type() as u64);
        for case in 0..8 {
            let rows = 1 + rng.below(60);
            let cols = 256 * (1 + rng.below(12));
            let n = 1 + rng.below(8);
            let w = random_blocks(&mut rng, ty, rows * cols / 256);
            let xs = random_x(&mut rng, n * cols);
            check(
                "exact",
                ty,
                &w,
                rows,
                &xs,
                &format!("case {case} ({rows}×{cols})"),
            );
        }
    }
}

#[test]
fn int8_mode_every_backend_equals_the_oracle_on_random_shapes() {
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0x1E8 + ty.ggml_type() as u64);
        for case in 0..8 {
            let rows = 1 + rng.below(40);
            let cols = 256 * (1 + rng.below(12));
            let n = 1 + rng.below(8);
            let w = random_blocks(&mut rng, ty, rows * cols / 256);
            let mut xs = random_x(&mut rng, n * cols);
            if case == 0 {
                xs[..256].fill(0.0); // an all-zero block
                xs[300] = 1e30;
                xs[301] = -1e-40;
            }
            if case == 1 {
                // amax 127 makes the scale exactly 1: every k + 0.5 is a rounding tie.
                xs[0] = 127.0;
                for (i, x) in xs[1..64].iter_mut().enumerate() {
                    *x = (i as f32 - 31.0) + 0.5;
                }
            }
            check(
                "int8",
                ty,
                &w,
                rows,
                &xs,
                &format!("case {case} ({rows}×{cols})"),
            );
        }
    }
}

/// Blocks whose f16 fields are subnormal, maximal, zero or negative, with extreme quants.
fn edge_blocks(ty: QuantType, rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut w = random_blocks(rng, ty, n);
    let halves = [0x0001u16, 0x03FF, 0x7BFF, 0xFBFF, 0x0000, 0x8001, 0x3C00];
    for (i, block) in w.chunks_exact_mut(ty.block_bytes()).enumerate() {
        let h = halves[i % halves.len()].to_le_bytes();
        match ty {
            QuantType::Q6K => {
                block[208..210].copy_from_slice(&h);
                if i % 3 == 0 {
                    block[..192].fill(0xFF); // every q = 63 − 32 = 31
                    block[192..208].fill(0x80); // scale −128
                }
            }
            QuantType::Q4K => {
                block[..2].copy_from_slice(&h);
                block[2..4].copy_from_slice(&halves[(i + 3) % halves.len()].to_le_bytes());
                if i % 3 == 0 {
                    block[4..].fill(0xFF); // scales, mins 63; every q = 15
                }
            }
        }
    }
    w
}

#[test]
fn both_modes_equal_the_oracle_on_edge_cases() {
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0xED6E + ty.ggml_type() as u64);
        let (rows, cols) = (21, 1024);
        let w = edge_blocks(ty, &mut rng, rows * cols / 256);
        let mut xs = random_x(&mut rng, 4 * cols);
        xs[5] = f32::NAN; // vector 0: NaN propagates
        xs[cols + 700] = f32::INFINITY; // vector 1: inf (× a zero weight gives NaN)
        for v in &mut xs[2 * cols..3 * cols] {
            *v *= 1e37; // vector 2: near f32::MAX, products overflow
        }
        xs[3 * cols..3 * cols + 256].fill(1e-42); // vector 3: subnormal activations
        check("exact", ty, &w, rows, &xs, "edge blocks");
        check(
            "int8",
            ty,
            &w,
            rows,
            &xs[2 * cols..],
            "edge blocks, finite x",
        );
    }
}

#[test]
fn the_oracle_decodes_f16_like_the_ieee_standard() {
    assert_eq!(f16(0x3C00u16.to_le_bytes()), 1.0);
    assert_eq!(f16(0x7BFFu16.to_le_bytes()), 65504.0);
    assert_eq!(f16(0x0001u16.to_le_bytes()), 2f32.powi(-24));
    assert_eq!(f16(0xC000u16.to_le_bytes()), -2.0);
    assert!(f16(0x7E00u16.to_le_bytes()).is_nan());
    assert_eq!(f16(0xFC00u16.to_le_bytes()), f32::NEG_INFINITY);
}

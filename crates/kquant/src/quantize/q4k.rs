//! Q4_K: ggml's `quantize_row_q4_K_ref`.

use half::f16;

use super::{check_values, nearest_int, sqrt};
use crate::{BlockQ4K, Error, QK_K};

/// Values per sub-block.
const SUB: usize = 32;
/// Sub-blocks per super-block.
const SUBS: usize = QK_K / SUB;
/// Largest 4-bit level.
const NMAX: i32 = 15;
/// Largest 6-bit sub-block scale or min.
const SCALE_MAX: u8 = 63;

/// Quantizes `x` (a whole number of 256-value super-blocks) into Q4_K blocks.
///
/// Byte-identical to ggml's `quantize_row_q4_K_ref`. Fails with [`Error::LengthMismatch`]
/// (`what: "values"`) unless `x.len() == out.len() * 256`.
pub fn quantize_row_q4k(x: &[f32], out: &mut [BlockQ4K]) -> Result<(), Error> {
    check_values(x, out.len())?;
    let (rows, _) = x.as_chunks::<QK_K>();
    for (values, block) in rows.iter().zip(out) {
        *block = quantize_block(values);
    }
    Ok(())
}

/// One super-block.
fn quantize_block(x: &[f32; QK_K]) -> BlockQ4K {
    let mut levels = [0u8; QK_K];
    let mut scales = [0.0f32; SUBS];
    let mut mins = [0.0f32; SUBS];
    let (subs, _) = x.as_chunks::<SUB>();
    let (level_subs, _) = levels.as_chunks_mut::<SUB>();
    for (j, (xs, ls)) in subs.iter().zip(level_subs.iter_mut()).enumerate() {
        (scales[j], mins[j]) = fit_affine(xs, &sub_block_weights(xs), ls);
    }

    let max_scale = positive_max(&scales);
    let max_min = positive_max(&mins);
    let sc = to_six_bits(&scales, max_scale);
    let m = to_six_bits(&mins, max_min);
    let mut block = BlockQ4K {
        d: f16::from_f32(max_scale / 63.0).to_le_bytes(),
        dmin: f16::from_f32(max_min / 63.0).to_le_bytes(),
        scales: BlockQ4K::pack_scales(&sc, &m),
        qs: [0; 128],
    };
    requantize(x, &block, &mut levels);
    block.qs = pack_levels(&levels);
    block
}

/// ggml's weights for the fit: the sub-block's RMS plus each value's magnitude.
fn sub_block_weights(x: &[f32; SUB]) -> [f32; SUB] {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let av_x = sqrt(sum_x2 / SUB as f32);
    x.map(|v| av_x + v.abs())
}

/// The largest element if it is above zero, else zero (ggml's running `if (v > max)` maximum).
fn positive_max(values: &[f32; SUBS]) -> f32 {
    let mut max = 0.0f32;
    for &v in values {
        if v > max {
            max = v;
        }
    }
    max
}

/// Rounds each value to a multiple of `max / 63`, as a level in `0..=63`.
fn to_six_bits(values: &[f32; SUBS], max: f32) -> [u8; SUBS] {
    let inv = if max > 0.0 { 63.0 / max } else { 0.0 };
    // ggml stores the rounded value into a `uint8_t` (keeping the low byte) before clamping.
    values.map(|v| (nearest_int(inv * v) as u8).min(SCALE_MAX))
}

/// ggml's `make_qkx2_quants(32, 15, x, weights, L, &min, Laux, -1.f, 0.1f, 20, false)`.
///
/// Returns `(scale, min)` with `x ≈ scale·L − min`, and writes the levels `L` to `levels`.
fn fit_affine(x: &[f32; SUB], w: &[f32; SUB], levels: &mut [u8; SUB]) -> (f32, f32) {
    const RMIN: f32 = -1.0;
    const RDELTA: f32 = 0.1;
    const NSTEP: i32 = 20;

    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..SUB {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        *levels = [0; SUB];
        return (0.0, -min);
    }

    let iscale = NMAX as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    *levels = affine_levels(x, iscale, min);
    let mut best_error = weighted_error(x, w, levels, scale, min);

    for step in 0..=NSTEP {
        let iscale = (RMIN + RDELTA * step as f32 + NMAX as f32) / (max - min);
        let candidate = affine_levels(x, iscale, min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..SUB {
            let l = f32::from(candidate[i]);
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let error = weighted_error(x, w, &candidate, this_scale, this_min);
            if error < best_error {
                *levels = candidate;
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Levels `round(iscale·(x − min))` clamped to `0..=15`.
fn affine_levels(x: &[f32; SUB], iscale: f32, min: f32) -> [u8; SUB] {
    x.map(|v| nearest_int(iscale * (v - min)).clamp(0, NMAX) as u8)
}

/// `Σ w·(scale·L + min − x)²`, summed in index order.
fn weighted_error(x: &[f32; SUB], w: &[f32; SUB], levels: &[u8; SUB], scale: f32, min: f32) -> f32 {
    let mut error = 0.0f32;
    for i in 0..SUB {
        let diff = scale * f32::from(levels[i]) + min - x[i];
        error += w[i] * (diff * diff);
    }
    error
}

/// Re-quantizes every sub-block against its decoded scale and min; a sub-block whose decoded
/// scale is zero keeps the levels of its fit.
fn requantize(x: &[f32; QK_K], block: &BlockQ4K, levels: &mut [u8; QK_K]) {
    let d_all = block.d().to_f32();
    let dmin_all = block.dmin().to_f32();
    let (subs, _) = x.as_chunks::<SUB>();
    let (level_subs, _) = levels.as_chunks_mut::<SUB>();
    for (j, (xs, ls)) in subs.iter().zip(level_subs.iter_mut()).enumerate() {
        let (sc, m) = block.scale_min(j);
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(m);
        *ls = xs.map(|v| nearest_int((v + dm) / d).clamp(0, NMAX) as u8);
    }
}

/// Two levels per byte: weight `64g + l` in the low nibble of `qs[32g + l]`, weight
/// `64g + 32 + l` in its high nibble.
fn pack_levels(levels: &[u8; QK_K]) -> [u8; 128] {
    let mut qs = [0u8; 128];
    let (pairs, _) = levels.as_chunks::<64>();
    let (out, _) = qs.as_chunks_mut::<32>();
    for (q, pair) in out.iter_mut().zip(pairs) {
        for l in 0..32 {
            q[l] = pair[l] | (pair[l + 32] << 4);
        }
    }
    qs
}

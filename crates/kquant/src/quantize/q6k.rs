//! Q6_K: ggml's `quantize_row_q6_K_ref`.

use bytemuck::Zeroable;
use half::f16;

use super::{check_values, nearest_int, GROUP_MAX_EPS};
use crate::{BlockQ6K, Error, QK_K};

/// Values per sub-block.
const SUB: usize = 16;
/// Sub-blocks per super-block.
const SUBS: usize = QK_K / SUB;
/// Levels run over `-NMAX..NMAX`, stored with an offset of `NMAX`.
const NMAX: i32 = 32;

/// Quantizes `x` (a whole number of 256-value super-blocks) into Q6_K blocks.
///
/// Byte-identical to ggml's `quantize_row_q6_K_ref`. Fails with [`Error::LengthMismatch`]
/// (`what: "values"`) unless `x.len() == out.len() * 256`.
pub fn quantize_row_q6k(x: &[f32], out: &mut [BlockQ6K]) -> Result<(), Error> {
    check_values(x, out.len())?;
    let (rows, _) = x.as_chunks::<QK_K>();
    for (values, block) in rows.iter().zip(out) {
        *block = quantize_block(values);
    }
    Ok(())
}

/// One super-block.
fn quantize_block(x: &[f32; QK_K]) -> BlockQ6K {
    let (subs, _) = x.as_chunks::<SUB>();
    let subs: &[[f32; SUB]; SUBS] = subs.try_into().expect("16 sub-blocks");
    let (scales, mut levels) = fit_symmetric(subs);
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for &scale in &scales {
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        return BlockQ6K::zeroed();
    }

    let iscale = -128.0 / max_scale;
    // ggml stores the clamped value into an `int8_t`, keeping the low byte.
    let sc = scales.map(|s| nearest_int(iscale * s).min(127) as u8);
    let d = f16::from_f32(1.0 / iscale);
    requantize(x, d.to_f32(), &sc, &mut levels);
    let mut block = BlockQ6K {
        ql: [0; 128],
        qh: [0; 64],
        scales: sc,
        d: d.to_le_bytes(),
    };
    block.set_quants(&levels);
    block
}

/// ggml's `make_qx_quants(16, 32, x, L, 1, NULL)` (weights `x²`) for each of the sixteen
/// sub-blocks: their scales, and the levels stored as `q + 32`.
///
/// The sub-blocks are fitted side by side, one per lane of arrays indexed by sub-block, so that
/// the compiler vectorizes across them; each lane still sums its own 16 values in index order
/// and makes ggml's comparisons in ggml's order, so every lane's result is the one ggml's scalar
/// loop gives (`matches_ggml_reference_bytes`). `cobordism synth` of a 447 MB Q6_K lm-head went
/// from 17.0 to 8.7 s on two cores (the same bytes); the random weights are now a fifth of it.
/// The levels are derived once, from the inverse scale that won, where ggml rederives them at
/// every improvement: the same function of the same value.
fn fit_symmetric(x: &[[f32; SUB]; SUBS]) -> ([f32; SUBS], [u8; QK_K]) {
    // Column `i` of every sub-block side by side: `xt[i][j]` is value `i` of sub-block `j`.
    let xt: [[f32; SUBS]; SUB] = core::array::from_fn(|i| core::array::from_fn(|j| x[j][i]));
    let mut max = [0.0f32; SUBS];
    let mut amax = [0.0f32; SUBS];
    for column in &xt {
        for j in 0..SUBS {
            if column[j].abs() > amax[j] {
                amax[j] = column[j].abs();
                max[j] = column[j];
            }
        }
    }
    let inverse = |step: i32| -> [f32; SUBS] {
        let numerator = -(NMAX as f32 + 0.1 * step as f32);
        max.map(|m| numerator / m)
    };

    let mut chosen = inverse(0);
    let (mut sumlx, mut suml2) = fit_sums(&xt, &chosen);
    let mut scale: [f32; SUBS] = core::array::from_fn(|j| {
        if suml2[j] != 0.0 {
            sumlx[j] / suml2[j]
        } else {
            0.0
        }
    });
    let mut best: [f32; SUBS] = core::array::from_fn(|j| scale[j] * sumlx[j]);
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = inverse(step);
        (sumlx, suml2) = fit_sums(&xt, &iscale);
        for j in 0..SUBS {
            if suml2[j] > 0.0 && sumlx[j] * sumlx[j] > best[j] * suml2[j] {
                chosen[j] = iscale[j];
                scale[j] = sumlx[j] / suml2[j];
                best[j] = scale[j] * sumlx[j];
            }
        }
    }

    let mut levels = [0u8; QK_K];
    let (level_subs, _) = levels.as_chunks_mut::<SUB>();
    for (j, ls) in level_subs.iter_mut().enumerate() {
        if amax[j] < GROUP_MAX_EPS {
            scale[j] = 0.0; // levels stay 0, as ggml leaves them
        } else {
            *ls = symmetric_levels(&x[j], chosen[j]);
        }
    }
    (scale, levels)
}

/// The clamped level `round(iscale·x)` in `-32..=31`.
fn symmetric_level(v: f32, iscale: f32) -> i32 {
    nearest_int(iscale * v).clamp(-NMAX, NMAX - 1)
}

/// Levels for `iscale`, offset by 32 into `0..=63`.
fn symmetric_levels(x: &[f32; SUB], iscale: f32) -> [u8; SUB] {
    x.map(|v| (symmetric_level(v, iscale) + NMAX) as u8)
}

/// Per sub-block `j`, `(Σ w·x·l, Σ w·l²)` with `w = x²` and `l` its level for `iscale[j]`,
/// summed in index order.
fn fit_sums(xt: &[[f32; SUBS]; SUB], iscale: &[f32; SUBS]) -> ([f32; SUBS], [f32; SUBS]) {
    let mut sumlx = [0.0f32; SUBS];
    let mut suml2 = [0.0f32; SUBS];
    for column in xt {
        for j in 0..SUBS {
            let v = column[j];
            let l = symmetric_level(v, iscale[j]) as f32;
            let w = v * v;
            sumlx[j] += w * v * l;
            suml2[j] += w * l * l;
        }
    }
    (sumlx, suml2)
}

/// Re-quantizes every sub-block against its decoded scale `d·sc`; a sub-block whose decoded
/// scale is zero keeps the levels of its fit.
fn requantize(x: &[f32; QK_K], d: f32, sc: &[u8; SUBS], levels: &mut [u8; QK_K]) {
    let (subs, _) = x.as_chunks::<SUB>();
    let (level_subs, _) = levels.as_chunks_mut::<SUB>();
    for ((xs, ls), &s) in subs.iter().zip(level_subs.iter_mut()).zip(sc) {
        let dj = d * f32::from(s as i8);
        if dj == 0.0 {
            continue;
        }
        *ls = xs.map(|v| (nearest_int(v / dj).clamp(-NMAX, NMAX - 1) + NMAX) as u8);
    }
}

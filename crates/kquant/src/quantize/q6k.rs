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
    let mut levels = [0u8; QK_K];
    let mut scales = [0.0f32; SUBS];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    let (subs, _) = x.as_chunks::<SUB>();
    let (level_subs, _) = levels.as_chunks_mut::<SUB>();
    for (j, (xs, ls)) in subs.iter().zip(level_subs.iter_mut()).enumerate() {
        let scale = fit_symmetric(xs, ls);
        scales[j] = scale;
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

/// ggml's `make_qx_quants(16, 32, x, L, 1, NULL)`: weights `x²`, levels stored as `q + 32`.
fn fit_symmetric(x: &[f32; SUB], levels: &mut [u8; SUB]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        *levels = [0; SUB];
        return 0.0;
    }

    let iscale = -(NMAX as f32) / max;
    *levels = symmetric_levels(x, iscale);
    let (mut sumlx, mut suml2) = fit_sums(x, iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(NMAX as f32 + 0.1 * step as f32) / max;
        (sumlx, suml2) = fit_sums(x, iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            *levels = symmetric_levels(x, iscale);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The clamped level `round(iscale·x)` in `-32..=31`.
fn symmetric_level(v: f32, iscale: f32) -> i32 {
    nearest_int(iscale * v).clamp(-NMAX, NMAX - 1)
}

/// Levels for `iscale`, offset by 32 into `0..=63`.
fn symmetric_levels(x: &[f32; SUB], iscale: f32) -> [u8; SUB] {
    x.map(|v| (symmetric_level(v, iscale) + NMAX) as u8)
}

/// `(Σ w·x·l, Σ w·l²)` with `w = x²`, summed in index order.
fn fit_sums(x: &[f32; SUB], iscale: f32) -> (f32, f32) {
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for &v in x {
        let l = symmetric_level(v, iscale) as f32;
        let w = v * v;
        sumlx += w * v * l;
        suml2 += w * l * l;
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

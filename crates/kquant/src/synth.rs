//! Seeded synthetic data for tests, benchmarks and demos: the same bytes on every target.

use crate::{Block, BlockQ4K, BlockQ6K, Error, QuantType};

/// SplitMix64: a tiny seedable generator with identical output on every architecture.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Roughly normal with standard deviation ~0.58 (sum of four uniforms, halved).
    pub fn normal(&mut self) -> f32 {
        (self.unit() + self.unit() + self.unit() + self.unit()) * 0.5
    }

    /// Fills `out` with random bytes.
    pub fn fill_bytes(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// Fills `out` (a whole number of blocks of `ty`) with random quants and realistic f16 scales
/// (as a quantizer of lm-head weights would write them): fast, for large benchmark matrices.
pub fn random_blocks(rng: &mut SplitMix64, ty: QuantType, out: &mut [u8]) -> Result<(), Error> {
    rng.fill_bytes(out);
    let mut scale = || half::f16::from_f32(rng.unit().abs() * 4e-3 + 1e-5).to_le_bytes();
    match ty {
        QuantType::Q4K => BlockQ4K::slice_from_bytes_mut(out)?
            .iter_mut()
            .for_each(|b| {
                b.d = scale();
                b.dmin = scale();
            }),
        QuantType::Q6K => BlockQ6K::slice_from_bytes_mut(out)?
            .iter_mut()
            .for_each(|b| b.d = scale()),
    }
    Ok(())
}

/// Fills `out` (a whole number of blocks of `ty`) with weights at the quants' and scales'
/// extremes, the int8 mode's edge cases: every quant at its maximum (or, with `zero`, at 0:
/// Q6_K's `q − 32 = −32`), every Q6_K sub-block scale −128 or 127 (drawn), every Q4_K six-bit
/// scale and min at 63; the f16 super-block scales as [`random_blocks`] draws them.
pub fn extreme_blocks(
    rng: &mut SplitMix64,
    ty: QuantType,
    zero: bool,
    out: &mut [u8],
) -> Result<(), Error> {
    random_blocks(rng, ty, out)?;
    let fill = if zero { 0x00 } else { 0xFF };
    match ty {
        QuantType::Q6K => BlockQ6K::slice_from_bytes_mut(out)?
            .iter_mut()
            .for_each(|b| {
                b.ql.fill(fill);
                b.qh.fill(fill);
                for s in &mut b.scales {
                    *s = if rng.below(2) == 0 { 0x80 } else { 0x7F };
                }
            }),
        QuantType::Q4K => BlockQ4K::slice_from_bytes_mut(out)?
            .iter_mut()
            .for_each(|b| {
                b.scales.fill(0xFF);
                b.qs.fill(fill);
            }),
    }
    Ok(())
}

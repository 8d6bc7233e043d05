//! Helpers shared by the integration tests: a seeded generator of blocks and activations, and
//! bit comparison where any NaN equals any NaN.
#![allow(dead_code)] // each test binary uses its own subset

use kquant::{quantize, Block, BlockQ4K, BlockQ6K, QuantType};

/// SplitMix64: small, seedable, the same on every target.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Roughly normal (sum of four uniforms).
    pub fn normal(&mut self) -> f32 {
        (self.unit() + self.unit() + self.unit() + self.unit()) * 0.5
    }

    pub fn bytes(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next_u64() as u8;
        }
    }
}

/// `n` random blocks of `ty` with realistic f16 scales: quant bytes uniformly random.
pub fn random_blocks(rng: &mut Rng, ty: QuantType, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n * ty.block_bytes()];
    rng.bytes(&mut bytes);
    let scale = |rng: &mut Rng| half::f16::from_f32(rng.unit().abs() * 4e-3 + 1e-5).to_le_bytes();
    match ty {
        QuantType::Q4K => {
            for b in BlockQ4K::slice_from_bytes_mut(&mut bytes).unwrap() {
                b.d = scale(rng);
                b.dmin = scale(rng);
            }
        }
        QuantType::Q6K => {
            for b in BlockQ6K::slice_from_bytes_mut(&mut bytes).unwrap() {
                b.d = scale(rng);
            }
        }
    }
    bytes
}

/// A `rows × cols` matrix of realistic weights, quantized with kquant's quantizer.
pub fn quantized_matrix(rng: &mut Rng, ty: QuantType, rows: usize, cols: usize) -> Vec<u8> {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * 0.05).collect();
    let mut bytes = vec![0u8; rows * ty.row_bytes(cols).unwrap()];
    match ty {
        QuantType::Q4K => {
            quantize::quantize_row_q4k(&w, BlockQ4K::slice_from_bytes_mut(&mut bytes).unwrap())
        }
        QuantType::Q6K => {
            quantize::quantize_row_q6k(&w, BlockQ6K::slice_from_bytes_mut(&mut bytes).unwrap())
        }
    }
    .unwrap();
    bytes
}

pub fn random_x(rng: &mut Rng, cols: usize) -> Vec<f32> {
    (0..cols).map(|_| rng.normal()).collect()
}

/// Equal bits, or both NaN.
pub fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Index of the first element that differs (see [`same_bits`]).
pub fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).position(|(x, y)| !same_bits(*x, *y))
}

/// FNV-1a over the bits of `v`, every NaN hashed as the canonical quiet NaN.
pub fn hash_bits(v: &[f32]) -> u64 {
    v.iter().fold(0xCBF2_9CE4_8422_2325, |h, x| {
        let bits = if x.is_nan() { 0x7FC0_0000 } else { x.to_bits() };
        bits.to_le_bytes()
            .iter()
            .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3))
    })
}

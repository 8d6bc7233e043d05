//! kquant's "interleaved" layout of Q4_K and Q6_K blocks: the same bytes per block as ggml's,
//! with the quants placed so that the int8 mode's wasm kernel multiplies a 16-byte register of
//! quants by one register of scales, not by one splat per group.
//!
//! # The permutation
//!
//! The int8 kernels take a block's 256 quants as 16 vectors of 16 bytes and multiply each
//! vector by 16 activation quants, adding the products two by two into eight 16-bit lanes
//! (relaxed SIMD's dot product). In ggml's layout the 16 bytes of a vector are 16 consecutive
//! weights, one scale group, so each vector needs its group's scale in all eight lanes. Here,
//! byte `i` of vector `v` (`v`, `i` in 0..16) holds weight
//!
//! ```text
//! w(v, i) = 32·(i / 2) + 2·v + i mod 2
//! ```
//!
//! so the pair in lane `k = i / 2` lies in the 32 weights `32k..32k + 32`, whatever `v`: Q4_K's
//! sub-block `k`, Q6_K's group `2k` for `v < 8` and `2k + 1` for `v ≥ 8`. Lane `k` of every
//! vector (of a half, for Q6_K) belongs to the same scale, so the vectors' products add up in
//! 16-bit lanes (Q4_K: eight vectors, at most 8·2·15·127 = 30480; Q6_K: two, at most
//! 2·2·63·127 = 32004) and one `i32x4.dot_i16x8` against the eight scales does the rest.
//! The activations are permuted the same way once per call ([`permute_quants`]).
//!
//! # The blocks
//!
//! ```text
//! BlockQ6KInterleaved (210 bytes): ql[128], qh[64], scales[16], d — ggml's fields, offsets, d
//!   vector v = 8h + 2t + u (h in 0..2, t in 0..4, u in 0..2), byte i, quant q = U_v[i]:
//!     ql[64h + 16·(2·(t mod 2) + u) + i]: q & 15 in the low nibble (t < 2) or the high (t ≥ 2)
//!     qh[32h + 16u + i]: q >> 4 in bits 2t..2t + 2
//!   scales[k] = ggml's scales[2k], scales[8 + k] = ggml's scales[2k + 1] (k in 0..8)
//! BlockQ4KInterleaved (144 bytes): d, dmin, scales[12], qs[128] — ggml's fields, d and dmin
//!   vector v = 8h + t (h in 0..2, t in 0..8), byte i, quant q = U_v[i]:
//!     qs[16·(4h + t mod 4) + i]: q in the low nibble (t < 4) or the high (t ≥ 4)
//!   the six-bit scale sc[s] and min m[s] of sub-block s (0..8):
//!     scales[s] = sc[s] | (m[s] & 3) << 6
//!     scales[8 + s mod 4]: m[s] >> 2 in the low nibble (s < 4) or the high (s ≥ 4)
//! ```
//!
//! A Q6_K vector is then unpacked as in ggml's layout (a nibble of one `ql` register and a bit
//! pair of one `qh` register), a Q4_K vector by one mask (and a shift): the same work per
//! vector, while the splats go away. Q4_K's scales and mins come out of two loads as eight
//! 16-bit lanes each by a few vector operations, where ggml's packing needs scalar work.
//! Kernels that read ggml's layout (the exact mode, the backends without an interleaved kernel)
//! get each row converted back first.

use bytemuck::{Pod, Zeroable};

use crate::{BlockQ4K, BlockQ6K, QK_K};

/// The weight that byte `i` of vector `v` holds (module docs).
#[inline(always)]
pub(crate) const fn weight(v: usize, i: usize) -> usize {
    32 * (i / 2) + 2 * v + i % 2
}

/// Quants in weight order, `q[w]`, as the 16 vectors `U_v[i] = q[w(v, i)]`, back to back.
#[inline(always)]
pub(crate) fn permute_quants<T: Copy>(q: &[T; QK_K]) -> [T; QK_K] {
    core::array::from_fn(|n| q[weight(n / 16, n % 16)])
}

/// The inverse of [`permute_quants`].
fn unpermute_quants(u: &[u8; QK_K]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (n, &value) in u.iter().enumerate() {
        q[weight(n / 16, n % 16)] = value;
    }
    q
}

/// A Q6_K super-block in the interleaved layout (module docs): ggml's fields, the quants and
/// scales placed for the int8 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6KInterleaved {
    /// Low four bits of the quants.
    pub ql: [u8; 128],
    /// High two bits of the quants.
    pub qh: [u8; 64],
    /// The 16 groups' scales (i8 stored as u8), even groups first, then odd ones.
    pub scales: [u8; 16],
    /// Super-block scale, f16 little-endian, as in [`BlockQ6K`].
    pub d: [u8; 2],
}

const _: () = assert!(core::mem::size_of::<BlockQ6KInterleaved>() == 210);
const _: () = assert!(core::mem::align_of::<BlockQ6KInterleaved>() == 1);

/// A Q4_K super-block in the interleaved layout (module docs): ggml's fields, the quants
/// placed for the int8 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4KInterleaved {
    /// Super-block scale for the sub-block scales, f16 little-endian, as in [`BlockQ4K`].
    pub d: [u8; 2],
    /// Super-block scale for the sub-block mins, f16 little-endian, as in [`BlockQ4K`].
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and mins, packed as the module docs say.
    pub scales: [u8; 12],
    /// The quants, two per byte.
    pub qs: [u8; 128],
}

const _: () = assert!(core::mem::size_of::<BlockQ4KInterleaved>() == 144);
const _: () = assert!(core::mem::align_of::<BlockQ4KInterleaved>() == 1);

impl BlockQ6KInterleaved {
    /// The 256 unsigned quants `q` (0..64) in weight order.
    pub fn quants(&self) -> [u8; QK_K] {
        let mut u = [0u8; QK_K];
        for (n, q) in u.iter_mut().enumerate() {
            let (v, i) = (n / 16, n % 16);
            let (h, t, s) = (v / 8, (v % 8) / 2, v % 2);
            let low = self.ql[64 * h + 16 * (2 * (t % 2) + s) + i];
            let nibble = if t < 2 { low & 15 } else { low >> 4 };
            *q = nibble | ((self.qh[32 * h + 16 * s + i] >> (2 * t)) & 3) << 4;
        }
        unpermute_quants(&u)
    }

    /// The signed scale of 16-weight group `j` (0..16), as in ggml's layout.
    pub fn scale(&self, j: usize) -> i8 {
        self.scales[j / 2 + 8 * (j % 2)] as i8
    }
}

impl From<&BlockQ6K> for BlockQ6KInterleaved {
    fn from(b: &BlockQ6K) -> Self {
        let u = permute_quants(&b.quants());
        let mut out = BlockQ6KInterleaved {
            ql: [0; 128],
            qh: [0; 64],
            scales: core::array::from_fn(|k| b.scales[2 * (k % 8) + k / 8]),
            d: b.d,
        };
        for (n, &q) in u.iter().enumerate() {
            let (v, i) = (n / 16, n % 16);
            let (h, t, s) = (v / 8, (v % 8) / 2, v % 2);
            let nibble = if t < 2 { q & 15 } else { (q & 15) << 4 };
            out.ql[64 * h + 16 * (2 * (t % 2) + s) + i] |= nibble;
            out.qh[32 * h + 16 * s + i] |= (q >> 4 & 3) << (2 * t);
        }
        out
    }
}

impl From<&BlockQ6KInterleaved> for BlockQ6K {
    /// The kernels that read ggml's layout convert every row first, so this runs on whole
    /// words (`ggml_order`) rather than quant by quant as the other direction does.
    fn from(b: &BlockQ6KInterleaved) -> Self {
        // `ql`: bytes four apart trade nibbles (the nibble then selects weight bit 6, as in
        // ggml's layout), then the 16-bit pairs move to ggml's places.
        let ql = words(&b.ql, |w| swap_nibbles(w, 0x0000_0000_FFFF_FFFF, 32));
        // `qh`: the 2-bit fields of the bytes two and four apart are transposed (each byte then
        // holds the bit pairs of weight bits 6..5, as ggml's), then the pairs move.
        let qh = words(&b.qh, |w| {
            let w = delta_swap(w, 0x0000_0000_F0F0_F0F0, 28);
            delta_swap(w, 0x0000_CCCC_0000_CCCC, 14)
        });
        BlockQ6K {
            ql: ggml_order(&ql, &Q6K_QL_PAIRS),
            qh: ggml_order(&qh, &Q6K_QH_PAIRS),
            scales: core::array::from_fn(|j| b.scale(j) as u8),
            d: b.d,
        }
    }
}

/// `bytes` with `f` applied to each little-endian 64-bit word.
#[inline(always)]
fn words<const N: usize>(bytes: &[u8; N], f: impl Fn(u64) -> u64) -> [u8; N] {
    let mut out = [0u8; N];
    let (words, _) = bytes.as_chunks::<8>();
    for (out, &word) in out.as_chunks_mut::<8>().0.iter_mut().zip(words) {
        *out = f(u64::from_le_bytes(word)).to_le_bytes();
    }
    out
}

/// The nibbles of the bytes that `low` marks and of the bytes `shift` bits above them,
/// transposed: a marked byte gets both low nibbles (its own, then its partner's), the partner
/// both high ones.
#[inline(always)]
fn swap_nibbles(word: u64, low: u64, shift: u32) -> u64 {
    let nibbles = 0x0F0F_0F0F_0F0F_0F0F;
    let (l, h) = (word & nibbles, (word >> 4) & nibbles);
    let marked = (l & low) | (((l >> shift) & low) << 4);
    let partners = ((h << shift) & !low) | ((h & !low) << 4);
    marked | partners
}

/// The bits that `mask` marks swapped with the bits `shift` above them.
#[inline(always)]
fn delta_swap(word: u64, mask: u64, shift: u32) -> u64 {
    let t = ((word >> shift) ^ word) & mask;
    word ^ t ^ (t << shift)
}

/// ggml's bytes from the same bytes in other places: 16-bit pair `i` of the result is pair
/// `pairs[i]` of `bytes`.
#[inline(always)]
fn ggml_order<const N: usize>(bytes: &[u8; N], pairs: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let (from, _) = bytes.as_chunks::<2>();
    for (out, &pair) in out.as_chunks_mut::<2>().0.iter_mut().zip(pairs) {
        *out = from[usize::from(pair) % from.len()];
    }
    out
}

/// For each 16-bit pair of a Q4_K block's `qs` in ggml's layout, the pair of the interleaved
/// `qs` (after [`swap_nibbles`]) that holds its weights. With the weight index's bits
/// `b7..b0`, ggml's pair `(b7 b6 b4 b3 b2 b1)` (b5 is the nibble) comes from the interleaved
/// pair `(b4 b2 b1 b7 b6 b3)`.
const Q4K_PAIRS: [u8; 64] = pairs([7, 6, 4, 3, 2, 1], [4, 2, 1, 7, 6, 3]);

/// As [`Q4K_PAIRS`] for a Q6_K block's `ql`: ggml's pair `(b7 b5 b4 b3 b2 b1)` (b6 is the
/// nibble) from the interleaved pair `(b4 b2 b1 b7 b3 b5)`.
const Q6K_QL_PAIRS: [u8; 64] = pairs([7, 5, 4, 3, 2, 1], [4, 2, 1, 7, 3, 5]);

/// As [`Q4K_PAIRS`] for a Q6_K block's `qh`: ggml's pair `(b7 b4 b3 b2 b1)` (b6 b5 are the bit
/// pair) from the interleaved pair `(b4 b1 b7 b3 b2)`.
const Q6K_QH_PAIRS: [u8; 32] = pairs([7, 4, 3, 2, 1], [4, 1, 7, 3, 2]);

/// The table of source pair indices for each destination pair index `i`: both indices are
/// made of the same weight-index bits, named most significant first by `to` and `from`.
const fn pairs<const N: usize, const B: usize>(to: [u8; B], from: [u8; B]) -> [u8; N] {
    let mut table = [0u8; N];
    let mut i = 0;
    while i < N {
        let (mut index, mut k) = (0, 0);
        while k < B {
            // The bit `from[k]` names, where `to` has it in `i`.
            let mut at = 0;
            while to[at] != from[k] {
                at += 1;
            }
            index = 2 * index + (i >> (B - 1 - at)) % 2;
            k += 1;
        }
        table[i] = index as u8;
        i += 1;
    }
    table
}

impl BlockQ4KInterleaved {
    /// The eight 6-bit scales and the eight mins (module docs).
    pub fn scales_mins(&self) -> ([u8; 8], [u8; 8]) {
        let s = &self.scales;
        let sc = core::array::from_fn(|k| s[k] & 63);
        let m = core::array::from_fn(|k| s[k] >> 6 | ((s[8 + k % 4] >> (4 * (k / 4))) & 15) << 2);
        (sc, m)
    }

    /// Packs eight 6-bit scales and mins (their low six bits) as [`Self::scales_mins`] reads
    /// them.
    pub fn pack_scales(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
        let mut out = [0u8; 12];
        for k in 0..8 {
            out[k] = (sc[k] & 63) | (m[k] & 3) << 6;
            out[8 + k % 4] |= ((m[k] & 63) >> 2) << (4 * (k / 4));
        }
        out
    }

    /// The 256 quants `q` (0..16) in weight order.
    pub fn quants(&self) -> [u8; QK_K] {
        let u = core::array::from_fn(|n| {
            let (v, i) = (n / 16, n % 16);
            let (h, t) = (v / 8, v % 8);
            let byte = self.qs[16 * (4 * h + t % 4) + i];
            if t < 4 {
                byte & 15
            } else {
                byte >> 4
            }
        });
        unpermute_quants(&u)
    }
}

impl From<&BlockQ4K> for BlockQ4KInterleaved {
    fn from(b: &BlockQ4K) -> Self {
        let u = permute_quants(&b.quants());
        let mut qs = [0u8; 128];
        for (n, &q) in u.iter().enumerate() {
            let (v, i) = (n / 16, n % 16);
            let (h, t) = (v / 8, v % 8);
            qs[16 * (4 * h + t % 4) + i] |= if t < 4 { q & 15 } else { (q & 15) << 4 };
        }
        let (sc, m) = b.scales_mins();
        BlockQ4KInterleaved {
            d: b.d,
            dmin: b.dmin,
            scales: BlockQ4KInterleaved::pack_scales(&sc, &m),
            qs,
        }
    }
}

impl From<&BlockQ4KInterleaved> for BlockQ4K {
    /// On whole words, as the Q6_K conversion: bytes two apart trade nibbles (the nibble then
    /// selects weight bit 5, as in ggml's layout), then the 16-bit pairs move to ggml's places.
    fn from(b: &BlockQ4KInterleaved) -> Self {
        let qs = words(&b.qs, |w| swap_nibbles(w, 0x0000_FFFF_0000_FFFF, 16));
        let (sc, m) = b.scales_mins();
        BlockQ4K {
            d: b.d,
            dmin: b.dmin,
            scales: BlockQ4K::pack_scales(&sc, &m),
            qs: ggml_order(&qs, &Q4K_PAIRS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{random_blocks, SplitMix64};
    use crate::QuantType;

    #[test]
    fn the_permutation_is_one_to_one_and_keeps_lanes_in_their_32_weights() {
        let mut seen = [false; QK_K];
        for v in 0..16 {
            for i in 0..16 {
                let w = weight(v, i);
                assert!(!seen[w], "weight {w} twice");
                seen[w] = true;
                assert_eq!(w / 32, i / 2, "lane {} of vector {v}", i / 2);
                assert_eq!(w / 16 % 2, usize::from(v >= 8), "Q6_K group parity");
            }
        }
        let q: [u8; QK_K] = core::array::from_fn(|w| w as u8);
        assert_eq!(unpermute_quants(&permute_quants(&q)), q);
    }

    #[test]
    fn q6k_blocks_convert_both_ways_keeping_every_quant_and_scale() {
        let mut rng = SplitMix64::new(11);
        let mut bytes = [0u8; 8 * 210];
        random_blocks(&mut rng, QuantType::Q6K, &mut bytes).unwrap();
        for g in bytemuck::cast_slice::<u8, BlockQ6K>(&bytes) {
            let i = BlockQ6KInterleaved::from(g);
            assert_eq!(i.quants(), g.quants());
            assert!((0..16).all(|j| i.scale(j) == g.scale(j)));
            assert_eq!(BlockQ6K::from(&i), *g);
        }
    }

    #[test]
    fn every_q4k_scale_and_min_survives_the_packing() {
        for v in 0..64u8 {
            let sc: [u8; 8] = core::array::from_fn(|k| (v + 7 * k as u8) & 63);
            let m: [u8; 8] = core::array::from_fn(|k| (v + 13 * k as u8 + 5) & 63);
            let packed = BlockQ4KInterleaved::pack_scales(&sc, &m);
            let b = BlockQ4KInterleaved {
                d: [0; 2],
                dmin: [0; 2],
                scales: packed,
                qs: [0; 128],
            };
            assert_eq!(b.scales_mins(), (sc, m));
        }
    }

    #[test]
    fn q4k_blocks_convert_both_ways_keeping_every_quant() {
        let mut rng = SplitMix64::new(12);
        let mut bytes = [0u8; 8 * 144];
        random_blocks(&mut rng, QuantType::Q4K, &mut bytes).unwrap();
        for g in bytemuck::cast_slice::<u8, BlockQ4K>(&bytes) {
            let i = BlockQ4KInterleaved::from(g);
            assert_eq!(i.quants(), g.quants());
            assert_eq!(i.scales_mins(), g.scales_mins());
            assert_eq!(BlockQ4K::from(&i), *g);
        }
    }
}

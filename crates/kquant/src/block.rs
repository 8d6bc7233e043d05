//! ggml's Q4_K and Q6_K super-blocks, byte for byte.
//!
//! Both formats cut a row into super-blocks of 256 weights (`QK_K`). All multi-byte fields are
//! little-endian; the structs have alignment 1, so a view can start at any byte offset of a file
//! or a network buffer.
//!
//! ```text
//! BlockQ4K (144 bytes)                      weight w = d·sc[s]·q − dmin·m[s]
//! ┌────────┬────────┬──────────────┬──────────────────────────────────────────┐
//! │ d: f16 │dmin:f16│ scales[12]   │ qs[128]: 4-bit q, two per byte             │
//! └────────┴────────┴──────────────┴──────────────────────────────────────────┘
//!   scales packs 8 six-bit scales sc[s] and 8 six-bit mins m[s], s = 0..8 (32 weights each):
//!     s < 4:  sc = scales[s] & 63               m = scales[s+4] & 63
//!     s ≥ 4:  sc = scales[s+4] & 15 | (scales[s-4] >> 6) << 4
//!             m  = scales[s+4] >> 4 | (scales[s]   >> 6) << 4
//!   qs[32g + l] (g = 0..4, l = 0..32): low nibble → weight 64g + l      (sub-block 2g)
//!                                      high nibble → weight 64g + 32 + l (sub-block 2g+1)
//!
//! BlockQ6K (210 bytes)                      weight w = d·scales[w/16]·(q − 32)
//! ┌──────────────────────┬─────────────┬──────────────┬────────┐
//! │ ql[128]: low 4 bits   │ qh[64]: high │ scales[16]:  │ d: f16 │
//! │                       │ 2 bits       │ i8           │        │
//! └──────────────────────┴─────────────┴──────────────┴────────┘
//!   for half h = 0..2 (128 weights), l = 0..32, with L = ql[64h..], H = qh[32h..]:
//!     weight 128h +      l: L[l]      & 15 | (H[l] >> 0 & 3) << 4
//!     weight 128h + 32 + l: L[l + 32] & 15 | (H[l] >> 2 & 3) << 4
//!     weight 128h + 64 + l: L[l]      >> 4 | (H[l] >> 4 & 3) << 4
//!     weight 128h + 96 + l: L[l + 32] >> 4 | (H[l] >> 6 & 3) << 4
//! ```

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::Error;

/// Weights per super-block.
pub const QK_K: usize = 256;

/// One Q4_K super-block: 256 weights in 144 bytes (4.5 bits per weight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale for the sub-block scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-block scale for the sub-block mins, f16 little-endian.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit mins, packed (see the module docs).
    pub scales: [u8; 12],
    /// 4-bit quants, two per byte.
    pub qs: [u8; 128],
}

/// One Q6_K super-block: 256 weights in 210 bytes (6.5625 bits per weight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    /// Lower 4 bits of the quants.
    pub ql: [u8; 128],
    /// Upper 2 bits of the quants.
    pub qh: [u8; 64],
    /// Sub-block scales, one per 16 weights (i8 stored as u8).
    pub scales: [u8; 16],
    /// Super-block scale, f16 little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(core::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(core::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(core::mem::align_of::<BlockQ4K>() == 1);
const _: () = assert!(core::mem::align_of::<BlockQ6K>() == 1);

impl BlockQ4K {
    /// The super-block scale `d`.
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }

    /// The super-block min scale `dmin`.
    pub fn dmin(&self) -> f16 {
        f16::from_le_bytes(self.dmin)
    }

    /// The 6-bit scale and min of sub-block `s` (0..8), as ggml's `get_scale_min_k4`.
    pub fn scale_min(&self, s: usize) -> (u8, u8) {
        let q = &self.scales;
        if s < 4 {
            (q[s] & 63, q[s + 4] & 63)
        } else {
            (
                (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4),
                (q[s + 4] >> 4) | ((q[s] >> 6) << 4),
            )
        }
    }

    /// All eight 6-bit scales and all eight mins at once (as [`Self::scale_min`] for `s` in
    /// 0..8), unpacked four bytes at a time.
    #[inline(always)]
    pub fn scales_mins(&self) -> ([u8; 8], [u8; 8]) {
        let word = |i: usize| {
            u32::from_le_bytes([
                self.scales[i],
                self.scales[i + 1],
                self.scales[i + 2],
                self.scales[i + 3],
            ])
        };
        let (w0, w1, w2) = (word(0), word(4), word(8));
        let sc_lo = w0 & 0x3F3F_3F3F;
        let m_lo = w1 & 0x3F3F_3F3F;
        // (q >> 6) << 4 per byte is (q >> 2) & 0x30.
        let sc_hi = (w2 & 0x0F0F_0F0F) | ((w0 >> 2) & 0x3030_3030);
        let m_hi = ((w2 >> 4) & 0x0F0F_0F0F) | ((w1 >> 2) & 0x3030_3030);
        let join = |lo: u32, hi: u32| {
            let mut out = [0u8; 8];
            out[..4].copy_from_slice(&lo.to_le_bytes());
            out[4..].copy_from_slice(&hi.to_le_bytes());
            out
        };
        (join(sc_lo, sc_hi), join(m_lo, m_hi))
    }

    /// Packs eight 6-bit scales and mins into the 12-byte layout (inverse of [`Self::scale_min`]).
    pub fn pack_scales(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for s in 0..8 {
            let (ls, lm) = (sc[s] & 63, m[s] & 63);
            if s < 4 {
                q[s] |= ls;
                q[s + 4] |= lm;
            } else {
                q[s + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
                q[s - 4] |= (ls >> 4) << 6;
                q[s] |= (lm >> 4) << 6;
            }
        }
        q
    }

    /// The 256 quants `q` (0..16) in weight order, read from `qs` as the table in the module
    /// docs says.
    pub fn quants(&self) -> [u8; QK_K] {
        core::array::from_fn(|w| {
            let byte = self.qs[32 * (w / 64) + w % 32];
            if w % 64 < 32 {
                byte & 15
            } else {
                byte >> 4
            }
        })
    }

    /// Stores 256 quants (their low 4 bits) into `qs`: the inverse of [`Self::quants`].
    pub fn set_quants(&mut self, q: &[u8; QK_K]) {
        for (w, &value) in q.iter().enumerate() {
            let byte = &mut self.qs[32 * (w / 64) + w % 32];
            *byte = if w % 64 < 32 {
                (*byte & 0xF0) | (value & 15)
            } else {
                (*byte & 0x0F) | (value & 15) << 4
            };
        }
    }
}

impl BlockQ6K {
    /// The super-block scale `d`.
    pub fn d(&self) -> f16 {
        f16::from_le_bytes(self.d)
    }

    /// The signed scale of 16-weight sub-block `j` (0..16).
    pub fn scale(&self, j: usize) -> i8 {
        self.scales[j] as i8
    }

    /// The 256 unsigned 6-bit quants `q` (0..64) in weight order, read from `ql` / `qh` as the
    /// table in the module docs says.
    pub fn quants(&self) -> [u8; QK_K] {
        core::array::from_fn(|w| {
            let (h, r) = (w / 128, w % 128);
            let (quarter, l) = (r / 32, r % 32);
            let low = self.ql[64 * h + l + 32 * (quarter % 2)];
            let nibble = if quarter < 2 { low & 0xF } else { low >> 4 };
            nibble | ((self.qh[32 * h + l] >> (2 * quarter)) & 3) << 4
        })
    }

    /// Stores 256 quants (their low 6 bits) into `ql` / `qh`: the inverse of [`Self::quants`].
    pub fn set_quants(&mut self, q: &[u8; QK_K]) {
        let (halves, _) = q.as_chunks::<128>();
        let (ql_halves, _) = self.ql.as_chunks_mut::<64>();
        let (qh_halves, _) = self.qh.as_chunks_mut::<32>();
        for ((lv, low), high) in halves.iter().zip(ql_halves).zip(qh_halves) {
            for l in 0..32 {
                let q = [lv[l], lv[l + 32], lv[l + 64], lv[l + 96]].map(|v| v & 63);
                low[l] = (q[0] & 0xF) | ((q[2] & 0xF) << 4);
                low[l + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4);
                high[l] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
}

/// A Q6_K super-block in kquant's "packed6" layout: the same 210 bytes as [`BlockQ6K`], with the
/// quants stored for the kernels rather than for ggml (see `crate::Layout`).
///
/// ```text
/// ┌──────────────────────────────────────────────┬──────────────┬────────┐
/// │ q[192]: 16 groups of 16 weights, 12 bytes each │ scales[16]:  │ d: f16 │
/// │         (16 six-bit fields, little-endian)     │ i8           │        │
/// └──────────────────────────────────────────────┴──────────────┴────────┘
///   weight 16g + i: bits 6i..6i + 6 of the 96-bit little-endian number q[12g..12g + 12]
///                   hold q − 32 in six-bit two's complement (that is, q ^ 32)
/// ```
///
/// The scales and `d` are ggml's, so `weight = d·scales[w/16]·(q − 32)` as for [`BlockQ6K`].
/// In the canonical order, lane `l` of a 16-weight group owns weights `4l..4l + 4`, which are
/// here the 24 bits `24l..24l + 24`: one byte shuffle gives a vector its lanes, and a shift pair
/// each weight, already signed, where ggml's layout needs `ql` and `qh` recombined first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6KPacked {
    /// The quants, six bits each, 16 per 12 bytes.
    pub q: [u8; 192],
    /// Sub-block scales, one per 16 weights (i8 stored as u8), as in [`BlockQ6K`].
    pub scales: [u8; 16],
    /// Super-block scale, f16 little-endian, as in [`BlockQ6K`].
    pub d: [u8; 2],
}

const _: () = assert!(core::mem::size_of::<BlockQ6KPacked>() == 210);
// Both Q6_K layouts keep the scales and `d` at the same offsets (the kernels rely on it).
const _: () = assert!(core::mem::offset_of!(BlockQ6K, scales) == 192);
const _: () = assert!(core::mem::offset_of!(BlockQ6KPacked, scales) == 192);
const _: () = assert!(core::mem::offset_of!(BlockQ6K, d) == 208);
const _: () = assert!(core::mem::offset_of!(BlockQ6KPacked, d) == 208);
const _: () = assert!(core::mem::align_of::<BlockQ6KPacked>() == 1);

impl BlockQ6KPacked {
    /// The signed scale of 16-weight sub-block `j` (0..16).
    pub fn scale(&self, j: usize) -> i8 {
        self.scales[j] as i8
    }

    /// The 256 unsigned quants `q` (0..64) in weight order.
    pub fn quants(&self) -> [u8; QK_K] {
        let mut out = [0u8; QK_K];
        for (group, weights) in self.q.chunks_exact(12).zip(out.chunks_exact_mut(16)) {
            let mut bits = [0u8; 16];
            bits[..12].copy_from_slice(group);
            let bits = u128::from_le_bytes(bits);
            for (i, w) in weights.iter_mut().enumerate() {
                *w = ((bits >> (6 * i)) as u8 & 63) ^ 32;
            }
        }
        out
    }
}

impl From<&BlockQ6K> for BlockQ6KPacked {
    fn from(b: &BlockQ6K) -> Self {
        let mut q = [0u8; 192];
        for (group, weights) in q.chunks_exact_mut(12).zip(b.quants().chunks_exact(16)) {
            let bits = weights.iter().enumerate().fold(0u128, |bits, (i, &w)| {
                bits | u128::from((w & 63) ^ 32) << (6 * i)
            });
            group.copy_from_slice(&bits.to_le_bytes()[..12]);
        }
        BlockQ6KPacked {
            q,
            scales: b.scales,
            d: b.d,
        }
    }
}

impl From<&BlockQ6KPacked> for BlockQ6K {
    fn from(b: &BlockQ6KPacked) -> Self {
        let mut out = BlockQ6K {
            ql: [0; 128],
            qh: [0; 64],
            scales: b.scales,
            d: b.d,
        };
        out.set_quants(&b.quants());
        out
    }
}

/// A ggml block format: its size and a checked zero-copy view of bytes as blocks.
pub trait Block: Pod {
    /// Bytes per block.
    const BYTES: usize = core::mem::size_of::<Self>();

    /// Views `bytes` as blocks; fails unless `bytes.len()` is a whole number of blocks.
    fn slice_from_bytes(bytes: &[u8]) -> Result<&[Self], Error> {
        bytemuck::try_cast_slice(bytes).map_err(|_| Error::NotWholeBlocks {
            len: bytes.len(),
            block_bytes: Self::BYTES,
        })
    }

    /// Views `bytes` as mutable blocks; fails unless `bytes.len()` is a whole number of blocks.
    fn slice_from_bytes_mut(bytes: &mut [u8]) -> Result<&mut [Self], Error> {
        let len = bytes.len();
        bytemuck::try_cast_slice_mut(bytes).map_err(|_| Error::NotWholeBlocks {
            len,
            block_bytes: Self::BYTES,
        })
    }
}

impl Block for BlockQ4K {}
impl Block for BlockQ6K {}
impl Block for BlockQ6KPacked {}
impl Block for crate::BlockQ4KInterleaved {}
impl Block for crate::BlockQ6KInterleaved {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_reject_partial_blocks_and_accept_any_offset() {
        let bytes = [0u8; 2 * 210 + 1];
        assert_eq!(BlockQ6K::slice_from_bytes(&bytes[1..]).unwrap().len(), 2);
        assert_eq!(
            BlockQ6K::slice_from_bytes(&bytes[..100]),
            Err(Error::NotWholeBlocks {
                len: 100,
                block_bytes: 210
            })
        );
        assert!(BlockQ4K::slice_from_bytes(&bytes[..0]).unwrap().is_empty());
    }

    #[test]
    fn scale_packing_round_trips() {
        let sc = [0, 1, 63, 17, 32, 63, 5, 48];
        let m = [63, 0, 2, 33, 63, 16, 47, 1];
        let b = BlockQ4K {
            d: [0; 2],
            dmin: [0; 2],
            scales: BlockQ4K::pack_scales(&sc, &m),
            qs: [0; 128],
        };
        for s in 0..8 {
            assert_eq!(b.scale_min(s), (sc[s], m[s]));
        }
    }

    #[test]
    fn all_scales_at_once_equal_one_at_a_time() {
        let mut b = BlockQ4K::zeroed();
        for seed in 0..2000u32 {
            for (i, byte) in b.scales.iter_mut().enumerate() {
                *byte = (seed.wrapping_mul(2_654_435_761) >> (i % 24)) as u8
                    ^ (i as u8).wrapping_mul(37);
            }
            let (sc, m) = b.scales_mins();
            for s in 0..8 {
                assert_eq!(b.scale_min(s), (sc[s], m[s]), "scales {:?}", b.scales);
            }
        }
    }
}

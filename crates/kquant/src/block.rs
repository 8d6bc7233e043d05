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

//! How a matrix's blocks are laid out in memory: ggml's own layout, or one kquant defines for its
//! kernels, with the same bytes per block and the same results bit for bit.
//!
//! A layout changes where each quant's bits sit inside a block, never a value: [`repack`]
//! converts either way, block by block, and the kernels give every layout the canonical order's
//! bits (the `arch::generic` module docs). GGUF files and ggml's dequantization read
//! [`Layout::Ggml`]; convert back before handing blocks to them.

use crate::{Block, BlockQ6K, BlockQ6KPacked, Error, QuantType};

/// The byte layout of a matrix's blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Layout {
    /// ggml's blocks, byte for byte ([`crate::BlockQ4K`], [`BlockQ6K`]).
    #[default]
    Ggml,
    /// Q6_K only: [`BlockQ6KPacked`], each 16 weights' quants as six-bit fields in 12 bytes,
    /// which the wasm simd128 kernels unpack with a quarter fewer operations (in workerd the
    /// Q6_K mat-vec takes ~0.75 of the time exact and ~0.95 in the int8 mode;
    /// docs/BENCHMARKS.md).
    Packed6,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 2] = [Layout::Ggml, Layout::Packed6];

    /// Its name (`"ggml"`, `"packed6"`), as manifests and the CLI spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Ggml => "ggml",
            Layout::Packed6 => "packed6",
        }
    }

    /// Looks a layout up by [`Layout::name`].
    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether blocks of `ty` can be stored in this layout.
    pub const fn supports(self, ty: QuantType) -> bool {
        match self {
            Layout::Ggml => true,
            Layout::Packed6 => matches!(ty, QuantType::Q6K),
        }
    }

    /// [`Layout::supports`] as a result.
    pub fn check(self, ty: QuantType) -> Result<(), Error> {
        if self.supports(ty) {
            Ok(())
        } else {
            Err(Error::UnsupportedLayout {
                ty: ty.name(),
                layout: self.name(),
            })
        }
    }
}

/// Converts whole blocks of `ty` in place from layout `from` to layout `to` (the bytes per
/// block do not change). Fails, changing nothing, unless both layouts support `ty` and `bytes`
/// is a whole number of blocks.
pub fn repack(ty: QuantType, from: Layout, to: Layout, bytes: &mut [u8]) -> Result<(), Error> {
    from.check(ty)?;
    to.check(ty)?;
    match (from, to) {
        (Layout::Ggml, Layout::Packed6) => {
            for b in BlockQ6K::slice_from_bytes_mut(bytes)? {
                let packed = BlockQ6KPacked::from(&*b);
                *b = bytemuck::cast(packed);
            }
        }
        (Layout::Packed6, Layout::Ggml) => {
            for b in BlockQ6KPacked::slice_from_bytes_mut(bytes)? {
                let ggml = BlockQ6K::from(&*b);
                *b = bytemuck::cast(ggml);
            }
        }
        _ => {
            let block_bytes = ty.block_bytes();
            if !bytes.len().is_multiple_of(block_bytes) {
                return Err(Error::NotWholeBlocks {
                    len: bytes.len(),
                    block_bytes,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{random_blocks, SplitMix64};

    #[test]
    fn repacking_round_trips_and_keeps_every_quant() {
        let mut rng = SplitMix64::new(7);
        let mut bytes = [0u8; 4 * 210];
        random_blocks(&mut rng, QuantType::Q6K, &mut bytes).unwrap();
        let original = bytes;
        repack(QuantType::Q6K, Layout::Ggml, Layout::Packed6, &mut bytes).unwrap();
        assert_ne!(bytes, original);
        let ggml: &[BlockQ6K] = bytemuck::cast_slice(&original);
        let packed: &[BlockQ6KPacked] = bytemuck::cast_slice(&bytes);
        for (g, p) in ggml.iter().zip(packed) {
            assert_eq!(g.quants(), p.quants());
            assert_eq!((g.scales, g.d), (p.scales, p.d));
        }
        repack(QuantType::Q6K, Layout::Packed6, Layout::Ggml, &mut bytes).unwrap();
        assert_eq!(bytes, original);
    }

    #[test]
    fn every_field_value_survives_at_every_position() {
        for v in 0..64u8 {
            let q: [u8; 256] = core::array::from_fn(|w| (v as usize + w) as u8 & 63);
            let mut g = BlockQ6K {
                ql: [0; 128],
                qh: [0; 64],
                scales: [0; 16],
                d: [0; 2],
            };
            g.set_quants(&q);
            assert_eq!(g.quants(), q);
            assert_eq!(BlockQ6KPacked::from(&g).quants(), q);
        }
    }

    #[test]
    fn unsupported_layouts_and_partial_blocks_change_nothing() {
        let mut bytes = [1u8; 300];
        let before = bytes;
        assert_eq!(
            repack(
                QuantType::Q4K,
                Layout::Ggml,
                Layout::Packed6,
                &mut bytes[..288]
            ),
            Err(Error::UnsupportedLayout {
                ty: "q4_k",
                layout: "packed6"
            })
        );
        assert!(matches!(
            repack(
                QuantType::Q6K,
                Layout::Ggml,
                Layout::Packed6,
                &mut bytes[..211]
            ),
            Err(Error::NotWholeBlocks { .. })
        ));
        assert!(matches!(
            repack(
                QuantType::Q6K,
                Layout::Ggml,
                Layout::Ggml,
                &mut bytes[..211]
            ),
            Err(Error::NotWholeBlocks { .. })
        ));
        assert_eq!(bytes, before);
        assert_eq!(Layout::from_name("packed6"), Some(Layout::Packed6));
        assert_eq!(Layout::from_name("Packed6"), None);
    }
}

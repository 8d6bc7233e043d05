//! How a matrix's blocks are laid out in memory: ggml's own layout, or one kquant defines for its
//! kernels, with the same bytes per block and the same results bit for bit.
//!
//! A layout changes where each quant's bits sit inside a block, never a value: [`repack`]
//! converts either way, block by block, and the kernels give every layout the canonical order's
//! bits (the `arch::generic` module docs). GGUF files and ggml's dequantization read
//! [`Layout::Ggml`]; convert back before handing blocks to them.

use crate::{
    Block, BlockQ4K, BlockQ4KInterleaved, BlockQ6K, BlockQ6KInterleaved, BlockQ6KPacked, Error,
    QuantType,
};

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
    /// Q4_K and Q6_K: [`BlockQ4KInterleaved`], [`BlockQ6KInterleaved`], the quants of eight
    /// scale groups side by side in every 16 bytes, which the wasm int8 kernel on relaxed SIMD
    /// multiplies by one register of scales instead of a splat per group. Other kernels convert
    /// each row back to ggml's layout first (slower: docs/BENCHMARKS.md), so rows are limited to
    /// [`Layout::INTERLEAVED_MAX_COLS`] columns.
    Interleaved,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 3] = [Layout::Ggml, Layout::Packed6, Layout::Interleaved];

    /// The longest row the interleaved layout takes: the kernels that read ggml's layout get
    /// each row converted into a buffer of this many columns on the stack.
    pub const INTERLEAVED_MAX_COLS: usize = 64 * crate::QK_K;

    /// Its name (`"ggml"`, `"packed6"`, `"interleaved"`), as manifests and the CLI spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Ggml => "ggml",
            Layout::Packed6 => "packed6",
            Layout::Interleaved => "interleaved",
        }
    }

    /// Every layout's name, comma-separated, for messages that list them.
    pub const NAMES: &'static str = "ggml, packed6, interleaved";

    /// Looks a layout up by [`Layout::name`].
    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether blocks of `ty` can be stored in this layout.
    pub const fn supports(self, ty: QuantType) -> bool {
        match self {
            Layout::Ggml | Layout::Interleaved => true,
            Layout::Packed6 => matches!(ty, QuantType::Q6K),
        }
    }

    /// Whether rows of `cols` columns can be stored in this layout: any length but in
    /// [`Layout::Interleaved`], at most [`Layout::INTERLEAVED_MAX_COLS`].
    pub fn check_cols(self, cols: usize) -> Result<(), Error> {
        if self == Layout::Interleaved && cols > Layout::INTERLEAVED_MAX_COLS {
            return Err(Error::RowTooLong {
                layout: self.name(),
                cols,
                max: Layout::INTERLEAVED_MAX_COLS,
            });
        }
        Ok(())
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
    match ty {
        QuantType::Q6K => {
            for b in BlockQ6K::slice_from_bytes_mut(bytes)? {
                *b = q6k_from_ggml(to, &q6k_to_ggml(from, b));
            }
        }
        QuantType::Q4K => {
            for b in BlockQ4K::slice_from_bytes_mut(bytes)? {
                *b = q4k_from_ggml(to, &q4k_to_ggml(from, b));
            }
        }
    }
    Ok(())
}

/// A Q6_K block's bytes, stored in `layout`, as ggml's block.
fn q6k_to_ggml(layout: Layout, b: &BlockQ6K) -> BlockQ6K {
    match layout {
        Layout::Ggml => *b,
        Layout::Packed6 => BlockQ6K::from(bytemuck::cast_ref::<_, BlockQ6KPacked>(b)),
        Layout::Interleaved => BlockQ6K::from(bytemuck::cast_ref::<_, BlockQ6KInterleaved>(b)),
    }
}

/// ggml's Q6_K block as the bytes of `layout` (viewed as a [`BlockQ6K`]).
fn q6k_from_ggml(layout: Layout, b: &BlockQ6K) -> BlockQ6K {
    match layout {
        Layout::Ggml => *b,
        Layout::Packed6 => bytemuck::cast(BlockQ6KPacked::from(b)),
        Layout::Interleaved => bytemuck::cast(BlockQ6KInterleaved::from(b)),
    }
}

/// A Q4_K block's bytes, stored in `layout` (one that supports Q4_K), as ggml's block.
fn q4k_to_ggml(layout: Layout, b: &BlockQ4K) -> BlockQ4K {
    match layout {
        Layout::Interleaved => BlockQ4K::from(bytemuck::cast_ref::<_, BlockQ4KInterleaved>(b)),
        Layout::Ggml | Layout::Packed6 => *b,
    }
}

/// ggml's Q4_K block as the bytes of `layout` (one that supports Q4_K).
fn q4k_from_ggml(layout: Layout, b: &BlockQ4K) -> BlockQ4K {
    match layout {
        Layout::Interleaved => bytemuck::cast(BlockQ4KInterleaved::from(b)),
        Layout::Ggml | Layout::Packed6 => *b,
    }
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

    #[test]
    fn names_lists_every_layout_in_order() {
        let mut listed = Layout::NAMES.split(", ");
        for layout in Layout::ALL {
            assert_eq!(listed.next(), Some(layout.name()));
            assert_eq!(Layout::from_name(layout.name()), Some(layout));
        }
        assert_eq!(listed.next(), None);
    }

    #[test]
    fn every_pair_of_layouts_round_trips_through_each_other() {
        for ty in [QuantType::Q4K, QuantType::Q6K] {
            let mut rng = SplitMix64::new(9);
            let n = 3 * ty.block_bytes();
            let mut original = [0u8; 3 * 210];
            random_blocks(&mut rng, ty, &mut original[..n]).unwrap();
            let original = &original[..n];
            let supported = Layout::ALL.into_iter().filter(|l| l.supports(ty));
            for from in supported.clone() {
                for to in supported.clone() {
                    let mut buffer = [0u8; 3 * 210];
                    let bytes = &mut buffer[..n];
                    bytes.copy_from_slice(original);
                    repack(ty, Layout::Ggml, from, bytes).unwrap();
                    repack(ty, from, to, bytes).unwrap();
                    if to != Layout::Ggml {
                        assert_ne!(&*bytes, original, "{ty:?} {from:?} → {to:?}");
                    }
                    repack(ty, to, Layout::Ggml, bytes).unwrap();
                    assert_eq!(&*bytes, original, "{ty:?} {from:?} → {to:?}");
                }
            }
        }
    }
}

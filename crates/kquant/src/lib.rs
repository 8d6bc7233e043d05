//! kquant: ggml-compatible Q4_K / Q6_K blocks and bit-exact kernels.
//!
//! * [`BlockQ4K`] / [`BlockQ6K`]: ggml's super-blocks, byte for byte, viewed zero-copy from bytes.
//! * [`dequantize`]: bit-identical to ggml's reference dequantization.
//! * [`QMatrix::mat_vec`] (and [`mat_vec_q4k`] / [`mat_vec_q6k`]): `out = W·x` with f32
//!   activations, in one canonical evaluation order that every [`Backend`] reproduces bit for
//!   bit (scalar, SSE2, AVX2, AVX-512 with or without VNNI, NEON with or without the dot
//!   product, wasm simd128 with or without relaxed SIMD's dot product). The order is written out
//!   in the docs of the `arch::generic` module (`src/arch/generic/mod.rs`).
//! * [`Layout`] / [`repack`]: blocks may also be stored in one of kquant's own layouts, with the
//!   same bytes per block and the same results bit for bit: Q6_K in "packed6"
//!   ([`BlockQ6KPacked`]), which the wasm exact kernel reads faster, and Q4_K or Q6_K in
//!   "interleaved" ([`BlockQ4KInterleaved`], [`BlockQ6KInterleaved`]), which the wasm int8
//!   kernel reads faster; [`QMatrix::with_layout`] takes any of them.
//! * [`quantize`]: ggml's reference quantizers; [`synth`]: seeded test data.
//!
//! ```
//! use kquant::{quantize::quantize_row_q6k, Block, BlockQ6K, QMatrix, QuantType};
//!
//! let (rows, cols) = (4, 512);
//! let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 255) as f32 / 127.0 - 1.0).collect();
//! let mut blocks = vec![0u8; rows * QuantType::Q6K.row_bytes(cols)?];
//! quantize_row_q6k(&w, BlockQ6K::slice_from_bytes_mut(&mut blocks)?)?;
//!
//! let x = vec![0.5f32; cols];
//! let mut logits = vec![0.0f32; rows];
//! QMatrix::new(QuantType::Q6K, &blocks, rows, cols)?.mat_vec(&x, &mut logits)?;
//! # Ok::<(), kquant::Error>(())
//! ```
//!
//! The crate is `no_std`. The `alloc` feature adds the entry points that allocate their scratch;
//! `std` (default) adds run-time detection of AVX2, AVX-512, VNNI and NEON's dot product;
//! `relaxed-simd` adds the wasm backend on relaxed SIMD (a module that needs an engine with it).
#![no_std]
#![deny(missing_docs)]

/// The crate README's example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod arch;
mod block;
mod error;
mod interleaved;
mod layout;
mod matrix;
pub mod quantize;
pub mod synth;

pub use arch::Backend;
pub use block::{Block, BlockQ4K, BlockQ6K, BlockQ6KPacked, QK_K};
pub use error::Error;
pub use interleaved::{BlockQ4KInterleaved, BlockQ6KInterleaved};
pub use layout::{repack, Layout};
pub use matrix::{dequantize, dequantize_layout_with, dequantize_with, QMatrix, QuantType};
#[cfg(feature = "alloc")]
pub use matrix::{mat_vec_q4k, mat_vec_q6k};

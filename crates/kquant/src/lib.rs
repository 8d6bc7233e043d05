//! kquant: ggml-compatible Q4_K / Q6_K blocks and bit-exact kernels.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod block;
mod error;
pub mod quantize;

pub use block::{Block, BlockQ4K, BlockQ6K, QK_K};
pub use error::Error;

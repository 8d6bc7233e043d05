//! The one error type of the crate: every length or shape mismatch is reported, never panicked on.

use core::fmt;

/// What was wrong with the arguments of a kquant call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A byte buffer is not a whole number of blocks.
    NotWholeBlocks {
        /// Bytes given.
        len: usize,
        /// Bytes per block of the format.
        block_bytes: usize,
    },
    /// `cols` must be a positive multiple of 256 (the super-block size).
    ColsNotMultipleOf256 {
        /// The `cols` given.
        cols: usize,
    },
    /// `rows` or `cols` is zero.
    EmptyShape,
    /// `rows × cols` does not fit in `usize`.
    ShapeOverflow,
    /// A buffer has the wrong length for the shape.
    LengthMismatch {
        /// Which argument: `"weights"`, `"x"`, `"out"`, `"scratch"`, `"values"`.
        what: &'static str,
        /// Elements (bytes for `weights`) expected.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// The requested backend is not available on this CPU or build.
    BackendUnavailable,
    /// Blocks of this format cannot be stored in this layout (see `crate::Layout`).
    UnsupportedLayout {
        /// The format's name (`"q4_k"`, `"q6_k"`).
        ty: &'static str,
        /// The layout's name.
        layout: &'static str,
    },
    /// The layout takes rows of at most `max` columns (see `crate::Layout::Interleaved`).
    RowTooLong {
        /// The layout's name.
        layout: &'static str,
        /// The `cols` given.
        cols: usize,
        /// The most it takes.
        max: usize,
    },
    /// This thread flushes subnormals to zero (x86 MXCSR FTZ/DAZ, aarch64 FPCR.FZ), which the
    /// canonical order does not allow: results would differ from every other machine's.
    SubnormalsFlushed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::NotWholeBlocks { len, block_bytes } => write!(
                f,
                "{len} bytes is not a whole number of {block_bytes}-byte blocks"
            ),
            Error::ColsNotMultipleOf256 { cols } => {
                write!(f, "cols = {cols} is not a multiple of 256")
            }
            Error::EmptyShape => write!(f, "rows and cols must both be positive"),
            Error::ShapeOverflow => write!(f, "rows × cols overflows usize"),
            Error::LengthMismatch {
                what,
                expected,
                actual,
            } => write!(f, "{what} has length {actual}, expected {expected}"),
            Error::BackendUnavailable => {
                write!(f, "the requested backend is not available on this machine")
            }
            Error::UnsupportedLayout { ty, layout } => {
                write!(f, "{ty} blocks cannot be stored in the {layout} layout")
            }
            Error::RowTooLong { layout, cols, max } => write!(
                f,
                "rows of {cols} columns are too long for the {layout} layout (at most {max})"
            ),
            Error::SubnormalsFlushed => write!(
                f,
                "this thread flushes subnormals to zero (FTZ/DAZ); the canonical order keeps them"
            ),
        }
    }
}

impl core::error::Error for Error {}

//! The one error type: every refusal becomes a thrown JS `Error` whose message names the call,
//! what was given and what was expected.

use core::fmt;

use wasm_bindgen::JsValue;

/// A refused call: which exported function or method, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    /// The JS name of the call, e.g. `"matVecQ6K"` or `"ResidentSlice.append"`.
    call: &'static str,
    problem: Problem,
}

/// What was wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// An argument is not of the expected JS type.
    WrongType {
        /// The argument's name.
        what: &'static str,
        /// What it must be, e.g. `"a Uint8Array"`.
        expected: &'static str,
        /// What it is: its constructor's name or its `typeof`.
        got: String,
    },
    /// `rows` or `cols` is not a positive integer below 2³².
    NotPositiveInteger {
        /// `"rows"` or `"cols"`.
        what: &'static str,
        /// The number given.
        value: f64,
    },
    /// `cols` is not a multiple of 256 (the super-block size).
    ColsNotMultipleOf256 {
        /// The `cols` given.
        cols: usize,
    },
    /// A buffer would need more elements than wasm32 can address.
    TooLarge {
        /// Which buffer, and how its size was computed.
        what: &'static str,
    },
    /// A typed array has the wrong length.
    Length {
        /// The argument's name.
        what: &'static str,
        /// `"bytes"` or `"floats"`.
        unit: &'static str,
        /// Elements given.
        actual: usize,
        /// Elements expected.
        expected: usize,
        /// Where the expected length comes from, e.g. `"cols"`.
        because: &'static str,
    },
    /// A block buffer is not a whole number of blocks.
    NotWholeBlocks {
        /// Bytes given.
        actual: usize,
        /// Bytes per block.
        block_bytes: usize,
        /// The format's name.
        dtype: &'static str,
    },
    /// The `dtype` string is not a supported format.
    UnknownDtype(String),
    /// The `layout` string is not a layout kquant knows.
    UnknownLayout(String),
    /// Rows too long for the layout (kquant's own message, `Error::RowTooLong`).
    RowTooLong(kquant::Error),
    /// The format cannot be stored in the layout.
    UnsupportedLayout {
        /// The format's name.
        dtype: &'static str,
        /// The layout's name.
        layout: &'static str,
    },
    /// Wasm memory could not grow by `bytes` (the allocation was refused, nothing trapped).
    OutOfMemory {
        /// What the memory was for.
        what: &'static str,
        /// Bytes asked for.
        bytes: usize,
    },
    /// An appended chunk does not fit in what remains of the slice.
    Overflow {
        /// Bytes in the chunk.
        chunk: usize,
        /// Bytes still missing.
        remaining: usize,
        /// Bytes of the whole slice.
        expected: usize,
    },
    /// The slice is used before all its bytes arrived.
    Incomplete {
        /// Bytes appended so far.
        have: usize,
        /// Bytes of the whole slice.
        expected: usize,
    },
    /// The kernel refused arguments that were already checked here (a bug, reported as such).
    Kernel(kquant::Error),
}

impl Error {
    /// `problem` in the call named `call`.
    pub fn new(call: &'static str, problem: Problem) -> Self {
        Error { call, problem }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.call)?;
        match &self.problem {
            Problem::WrongType {
                what,
                expected,
                got,
            } => write!(f, "{what} must be {expected}, got {got}"),
            Problem::NotPositiveInteger { what, value } => write!(
                f,
                "{what} must be a positive integer below 2^32, got {value}"
            ),
            Problem::ColsNotMultipleOf256 { cols } => write!(
                f,
                "cols must be a multiple of 256 (one super-block), got {cols}"
            ),
            Problem::TooLarge { what } => {
                write!(f, "{what} would not fit in 32-bit wasm memory")
            }
            Problem::Length {
                what,
                unit,
                actual,
                expected,
                because,
            } => write!(
                f,
                "{what} has {actual} {unit}, expected {expected} ({because})"
            ),
            Problem::NotWholeBlocks {
                actual,
                block_bytes,
                dtype,
            } => write!(
                f,
                "blocks has {actual} bytes, expected a multiple of {block_bytes} \
                 (the size of one {dtype} block)"
            ),
            Problem::UnknownDtype(dtype) => {
                write!(f, "unknown dtype {dtype:?}, expected \"q4_k\" or \"q6_k\"")
            }
            Problem::RowTooLong(e) => write!(f, "{e}"),
            Problem::UnknownLayout(layout) => {
                write!(
                    f,
                    "unknown layout {layout:?}, expected \"ggml\", \"packed6\" or \"interleaved\""
                )
            }
            Problem::UnsupportedLayout { dtype, layout } => {
                write!(f, "{dtype} blocks cannot be stored in the {layout} layout")
            }
            Problem::OutOfMemory { what, bytes } => write!(
                f,
                "could not reserve {bytes} bytes of wasm memory for {what}"
            ),
            Problem::Overflow {
                chunk,
                remaining,
                expected,
            } => write!(
                f,
                "a chunk of {chunk} bytes overflows the slice: only {remaining} of its \
                 {expected} bytes remain"
            ),
            Problem::Incomplete { have, expected } => write!(
                f,
                "the slice is incomplete: {have} of {expected} bytes appended \
                 ({} missing)",
                expected.saturating_sub(*have)
            ),
            Problem::Kernel(e) => write!(f, "internal error, please report: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Thrown as a JS `Error` with the message above.
impl From<Error> for JsValue {
    fn from(e: Error) -> JsValue {
        js_sys::Error::new(&e.to_string()).into()
    }
}

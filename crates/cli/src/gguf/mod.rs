//! GGUF, the llama.cpp model file format: a strict reader ([`Gguf::open`]) and a small streaming
//! writer ([`GgufWriter`]).
//!
//! ```text
//! "GGUF" | u32 version (3) | u64 tensor_count | u64 kv_count
//! kv_count   × ( string key | u32 value_type | value )
//! tensor_count × ( string name | u32 n_dims | n_dims × u64 ne | u32 ggml_type | u64 offset )
//! zero padding up to a multiple of general.alignment (default 32)
//! tensor data; each tensor at data_start + offset, offsets multiples of the alignment
//! ```
//!
//! Strings are `u64 length | UTF-8 bytes`; an array is `u32 element type | u64 count | values`.
//! All integers are little-endian. `ne[0]` is the fastest-moving dimension (columns).

mod read;
mod write;

pub use read::{Gguf, TensorInfo, Value, TOKENS_KEY};
pub use write::{GgufWriter, MetaValue};

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The version [`GgufWriter`] writes.
pub const VERSION: u32 = 3;
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key of the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The type of a metadata value, with its GGUF id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// `u8`
    U8 = 0,
    /// `i8`
    I8 = 1,
    /// `u16`
    U16 = 2,
    /// `i16`
    I16 = 3,
    /// `u32`
    U32 = 4,
    /// `i32`
    I32 = 5,
    /// `f32`
    F32 = 6,
    /// `bool` (one byte)
    Bool = 7,
    /// `string`
    String = 8,
    /// `array`
    Array = 9,
    /// `u64`
    U64 = 10,
    /// `i64`
    I64 = 11,
    /// `f64`
    F64 = 12,
}

impl ValueType {
    const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with GGUF id `id`.
    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::ALL.into_iter().find(|t| *t as u32 == id)
    }

    /// Bytes of one value, for the fixed-size types.
    pub fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes a value of this type can take (an empty string or array for those).
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            fixed => fixed.fixed_size().unwrap_or(1),
        }
    }
}

/// ggml's name of tensor type `id` (for messages), `None` for ids ggml does not define.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        8 => "Q8_0",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        30 => "BF16",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

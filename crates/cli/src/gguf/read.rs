//! The strict GGUF reader: every count, length and offset is checked against the bytes that are
//! actually left in the file before anything is allocated or skipped, so a corrupt or hostile
//! header fails fast with a message instead of allocating or panicking.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};

use super::{ValueType, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};

/// Arrays nested deeper than this are refused.
const MAX_ARRAY_DEPTH: u32 = 8;
/// Longest key, tensor name or string value read (array elements are skipped, not read).
const MAX_STRING_BYTES: u64 = 16 << 20;
/// ggml tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// The fewest bytes of one tensor info: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;
/// The fewest bytes of one metadata entry: key length, value type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;

/// The metadata key of the vocabulary's token strings.
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// A metadata value. Arrays are skipped over (only their element type and length are kept),
/// except the vocabulary's strings.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Any unsigned integer type.
    Uint(u64),
    /// Any signed integer type.
    Int(i64),
    /// `f32` or `f64`.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A string (invalid UTF-8 replaced).
    Str(String),
    /// The string array `tokenizer.ggml.tokens` (the vocabulary's text; invalid UTF-8 replaced),
    /// the one array whose content is kept.
    Strings(Vec<String>),
    /// Any other array, content not kept.
    Array {
        /// Element type.
        elem: ValueType,
        /// Number of elements.
        len: u64,
    },
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a non-negative integer, if it is one.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Uint(v) => Some(v as f64),
            Value::Int(v) => Some(v as f64),
            _ => None,
        }
    }
}

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name, e.g. `output.weight`.
    pub name: String,
    /// `ne[0]` (columns) first.
    pub dims: Vec<u64>,
    /// ggml type id.
    pub ggml_type: u32,
    /// Offset of the data, relative to [`Gguf::data_start`].
    pub offset: u64,
}

/// A parsed GGUF header.
#[derive(Clone, Debug)]
pub struct Gguf {
    /// The file it was read from.
    pub path: PathBuf,
    /// Format version (2 or 3).
    pub version: u32,
    /// File size in bytes.
    pub file_len: u64,
    /// Data alignment.
    pub alignment: u64,
    /// Absolute offset of the tensor data section.
    pub data_start: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
}

impl Gguf {
    /// Reads and checks the header of the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Gguf> {
        let read = || -> Result<Gguf> {
            let file = File::open(path).context("cannot open")?;
            let file_len = file.metadata().context("cannot stat")?.len();
            parse(BufReader::with_capacity(1 << 16, file), file_len, path)
        };
        read().with_context(|| path.display().to_string())
    }

    /// Reads and checks a GGUF header from `bytes` (the whole file, or its first bytes with
    /// `file_len` the full size); `path` is only recorded. Used by the fuzzer.
    pub fn from_bytes(bytes: &[u8], file_len: u64, path: &Path) -> Result<Gguf> {
        parse(bytes, file_len, path)
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata
            .iter()
            .find_map(|(k, v)| (k == key).then_some(v))
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

fn parse(r: impl Read, file_len: u64, path: &Path) -> Result<Gguf> {
    let mut c = Cursor {
        r,
        pos: 0,
        len: file_len,
    };

    let magic = c.read_bytes::<4>("the magic").map_err(|_| not_gguf(&[]))?;
    if magic != MAGIC {
        return Err(not_gguf(&magic));
    }
    let version = c.u32("the version")?;
    match version {
        2 | 3 => {}
        1 => bail!(
            "GGUF version 1 is not supported (only 2 and 3); convert the file with a current \
             llama.cpp"
        ),
        v if matches!(v.swap_bytes(), 2 | 3) => {
            bail!("big-endian GGUF files are not supported")
        }
        v => bail!("unsupported GGUF version {v} (only 2 and 3 are read)"),
    }
    let tensor_count = c.u64("the tensor count")?;
    let kv_count = c.u64("the metadata count")?;
    let least = kv_count
        .checked_mul(MIN_KV_BYTES)
        .zip(tensor_count.checked_mul(MIN_TENSOR_INFO_BYTES))
        .and_then(|(a, b)| a.checked_add(b));
    ensure!(
        least.is_some_and(|n| n <= c.remaining()),
        "the header claims {kv_count} metadata entries and {tensor_count} tensors, but only {} \
         bytes follow (each entry needs at least {MIN_KV_BYTES}, each tensor at least \
         {MIN_TENSOR_INFO_BYTES}): the file is truncated or corrupt",
        c.remaining()
    );

    let mut metadata = Vec::new();
    let mut keys = HashSet::new();
    for i in 0..kv_count {
        let key = c.utf8_string(&format!("metadata key #{i}"))?;
        ensure!(!key.is_empty(), "metadata key #{i} is empty");
        ensure!(
            keys.insert(key.clone()),
            "metadata key {key:?} appears twice"
        );
        let value = c
            .value_type()
            .and_then(|ty| match ty {
                ValueType::Array if key == TOKENS_KEY => c.strings(),
                ty => c.value(ty),
            })
            .with_context(|| format!("metadata key {key:?}"))?;
        metadata.push((key, value));
    }

    let mut tensors = Vec::new();
    let mut names = HashSet::new();
    for i in 0..tensor_count {
        let name = c.utf8_string(&format!("the name of tensor #{i}"))?;
        ensure!(names.insert(name.clone()), "tensor {name:?} appears twice");
        let t = c
            .tensor_info(name)
            .with_context(|| format!("tensor #{i}"))?;
        tensors.push(t);
    }

    let alignment = alignment(&metadata)?;
    let data_start = c
        .pos
        .checked_next_multiple_of(alignment)
        .context("the data offset overflows")?;
    if !tensors.is_empty() {
        ensure!(
            data_start <= file_len,
            "truncated: tensor data should start at byte {data_start}, but the file has only \
             {file_len} bytes"
        );
    }
    for t in &tensors {
        ensure!(
            t.offset % alignment == 0,
            "tensor {:?}: data offset {} is not a multiple of the alignment {alignment}",
            t.name,
            t.offset
        );
    }
    Ok(Gguf {
        path: path.to_path_buf(),
        version,
        file_len,
        alignment,
        data_start,
        metadata,
        tensors,
    })
}

fn not_gguf(magic: &[u8]) -> anyhow::Error {
    if magic.is_empty() {
        anyhow::anyhow!("not a GGUF file: shorter than the 4-byte magic \"GGUF\"")
    } else {
        anyhow::anyhow!(
            "not a GGUF file: it starts with {:02X?} ({:?}), expected the magic \"GGUF\"",
            magic,
            String::from_utf8_lossy(magic)
        )
    }
}

fn alignment(metadata: &[(String, Value)]) -> Result<u64> {
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match v.as_u64() {
        Some(a) if a.is_power_of_two() && a <= u64::from(u32::MAX) => Ok(a),
        _ => bail!("{ALIGNMENT_KEY} is {v:?}; expected a power of two that fits in u32"),
    }
}

/// A reader that knows how many bytes are left.
struct Cursor<R> {
    r: R,
    pos: u64,
    len: u64,
}

impl<R: Read> Cursor<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn need(&self, n: u64, what: &str) -> Result<()> {
        ensure!(
            n <= self.remaining(),
            "truncated: {what} needs {n} bytes at offset {}, but the file ends at byte {}",
            self.pos,
            self.len
        );
        Ok(())
    }

    fn read_bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        self.need(N as u64, what)?;
        let mut b = [0; N];
        self.r
            .read_exact(&mut b)
            .with_context(|| format!("reading {what} at offset {}", self.pos))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.read_bytes(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.read_bytes(what).map(u64::from_le_bytes)
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<()> {
        self.need(n, what)?;
        let skipped = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())
            .with_context(|| format!("skipping {what} at offset {}", self.pos))?;
        ensure!(
            skipped == n,
            "truncated while skipping {what} at offset {}",
            self.pos
        );
        self.pos += n;
        Ok(())
    }

    fn raw_string(&mut self, what: &str) -> Result<Vec<u8>> {
        let n = self.u64(what)?;
        self.need(n, what)?;
        ensure!(
            n <= MAX_STRING_BYTES,
            "{what} at offset {} claims {n} bytes, more than the {MAX_STRING_BYTES} a string \
             may have",
            self.pos
        );
        let mut s = vec![0; usize::try_from(n).context("string too long")?];
        self.r
            .read_exact(&mut s)
            .with_context(|| format!("reading {what} at offset {}", self.pos))?;
        self.pos += n;
        Ok(s)
    }

    fn utf8_string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        String::from_utf8(self.raw_string(what)?)
            .map_err(|_| anyhow::anyhow!("{what} at offset {at} is not valid UTF-8"))
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let id = self.u32("a value type")?;
        ValueType::from_id(id)
            .with_context(|| format!("unknown value type {id} (GGUF has 0 to 12)"))
    }

    fn value(&mut self, ty: ValueType) -> Result<Value> {
        let what = "the value";
        Ok(match ty {
            ValueType::U8 => Value::Uint(self.read_bytes::<1>(what)?[0].into()),
            ValueType::I8 => Value::Int(i8::from_le_bytes(self.read_bytes(what)?).into()),
            ValueType::U16 => Value::Uint(u16::from_le_bytes(self.read_bytes(what)?).into()),
            ValueType::I16 => Value::Int(i16::from_le_bytes(self.read_bytes(what)?).into()),
            ValueType::U32 => Value::Uint(self.u32(what)?.into()),
            ValueType::I32 => Value::Int(i32::from_le_bytes(self.read_bytes(what)?).into()),
            ValueType::U64 => Value::Uint(self.u64(what)?),
            ValueType::I64 => Value::Int(i64::from_le_bytes(self.read_bytes(what)?)),
            ValueType::F32 => Value::Float(f32::from_le_bytes(self.read_bytes(what)?).into()),
            ValueType::F64 => Value::Float(f64::from_le_bytes(self.read_bytes(what)?)),
            ValueType::Bool => match self.read_bytes::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => bail!("bool value is {b}, expected 0 or 1"),
            },
            ValueType::String => {
                Value::Str(String::from_utf8_lossy(&self.raw_string(what)?).into())
            }
            ValueType::Array => {
                let (elem, len) = self.skip_array(1)?;
                Value::Array { elem, len }
            }
        })
    }

    /// An array's element type and length, checked against the bytes left; `depth` counts the
    /// enclosing arrays.
    fn array_header(&mut self, depth: u32) -> Result<(ValueType, u64)> {
        ensure!(
            depth <= MAX_ARRAY_DEPTH,
            "arrays nested deeper than {MAX_ARRAY_DEPTH}"
        );
        let elem = self.value_type()?;
        let len = self.u64("the array length")?;
        ensure!(
            len.checked_mul(elem.min_size())
                .is_some_and(|n| n <= self.remaining()),
            "an array claims {len} elements of type {elem:?}, but only {} bytes are left",
            self.remaining()
        );
        Ok((elem, len))
    }

    /// The vocabulary's strings (its header comes next); an array of anything else is skipped.
    fn strings(&mut self) -> Result<Value> {
        let (elem, len) = self.array_header(1)?;
        if elem != ValueType::String {
            self.skip_array_body(elem, len, 1)?;
            return Ok(Value::Array { elem, len });
        }
        // `len` is bounded by the bytes left (8 per string at least): the allocation is too.
        let mut strings = Vec::with_capacity(usize::try_from(len)?);
        for _ in 0..len {
            let raw = self.raw_string("a token string")?;
            strings.push(String::from_utf8_lossy(&raw).into_owned());
        }
        Ok(Value::Strings(strings))
    }

    /// Skips an array's content (its header comes next); `depth` counts the enclosing arrays.
    fn skip_array(&mut self, depth: u32) -> Result<(ValueType, u64)> {
        let (elem, len) = self.array_header(depth)?;
        self.skip_array_body(elem, len, depth)?;
        Ok((elem, len))
    }

    /// Skips the `len` elements of type `elem` of an array at `depth`.
    fn skip_array_body(&mut self, elem: ValueType, len: u64, depth: u32) -> Result<()> {
        match elem.fixed_size() {
            Some(size) => self.skip(len * size, "the array")?,
            None => {
                for _ in 0..len {
                    if elem == ValueType::String {
                        let n = self.u64("a string in an array")?;
                        self.skip(n, "a string in an array")?;
                    } else {
                        self.skip_array(depth + 1)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn tensor_info(&mut self, name: String) -> Result<TensorInfo> {
        let n_dims = self.u32("n_dims")?;
        ensure!(
            (1..=MAX_DIMS).contains(&n_dims),
            "tensor {name:?} has {n_dims} dimensions, expected 1 to {MAX_DIMS}"
        );
        let dims = (0..n_dims)
            .map(|_| self.u64("a dimension"))
            .collect::<Result<Vec<_>>>()?;
        let ggml_type = self.u32("the tensor type")?;
        let offset = self.u64("the data offset")?;
        Ok(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
        })
    }
}

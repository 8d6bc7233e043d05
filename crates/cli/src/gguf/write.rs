//! A small GGUF v3 writer: metadata and tensor infos up front, then the caller streams each
//! tensor's data in order ([`GgufWriter::write_header`]), or hands it all over at once
//! ([`GgufWriter::write_all`]).

use std::io::{self, Read, Write};

use super::{ValueType, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, VERSION};

/// A metadata value to write.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// `u32`
    U32(u32),
    /// `f32`
    F32(f32),
    /// `string`
    Str(String),
    /// An array; the element type is the first element's (`u32` when empty). Elements of another
    /// type make [`GgufWriter::write_header`] fail.
    Array(Vec<MetaValue>),
}

impl MetaValue {
    fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Str(_) => ValueType::String,
            MetaValue::Array(_) => ValueType::Array,
        }
    }

    fn write(&self, w: &mut impl Write) -> io::Result<()> {
        match self {
            MetaValue::U32(v) => w.write_all(&v.to_le_bytes()),
            MetaValue::F32(v) => w.write_all(&v.to_le_bytes()),
            MetaValue::Str(s) => write_string(w, s),
            MetaValue::Array(items) => {
                let elem = items.first().map_or(ValueType::U32, MetaValue::value_type);
                w.write_all(&(elem as u32).to_le_bytes())?;
                w.write_all(&(items.len() as u64).to_le_bytes())?;
                for item in items {
                    if item.value_type() != elem {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "a GGUF array must hold elements of one type",
                        ));
                    }
                    item.write(w)?;
                }
                Ok(())
            }
        }
    }
}

/// One tensor to write: its info and the size of its data.
#[derive(Clone, Debug)]
struct TensorSpec {
    name: String,
    dims: Vec<u64>,
    ggml_type: u32,
    bytes: u64,
}

/// Collects metadata and tensor infos, then writes a GGUF v3 file.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorSpec>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter {
            metadata: Vec::new(),
            tensors: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }
}

impl GgufWriter {
    /// An empty file with the default alignment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry. `general.alignment` (a power of two) also sets the alignment used.
    pub fn kv(&mut self, key: &str, value: MetaValue) -> &mut Self {
        if let (ALIGNMENT_KEY, MetaValue::U32(a)) = (key, &value) {
            if a.is_power_of_two() {
                self.alignment = u64::from(*a);
            }
        }
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor of `bytes` bytes with dimensions `dims` (`ne[0]`, the columns, first).
    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32, bytes: u64) -> &mut Self {
        self.tensors.push(TensorSpec {
            name: name.to_string(),
            dims: dims.to_vec(),
            ggml_type,
            bytes,
        });
        self
    }

    /// Zero bytes to write after tensor `index`'s data so the next one starts aligned.
    pub fn padding_after(&self, index: usize) -> u64 {
        self.tensors
            .get(index)
            .map_or(0, |t| t.bytes.next_multiple_of(self.alignment) - t.bytes)
    }

    /// Writes everything up to and including the padding before the first tensor's data. Then
    /// write each tensor's bytes in order, each followed by [`GgufWriter::padding_after`] zeros.
    pub fn write_header(&self, w: &mut impl Write) -> io::Result<()> {
        let mut counted = Counting { inner: w, bytes: 0 };
        let w = &mut counted;
        w.write_all(&MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        w.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in &self.metadata {
            write_string(w, key)?;
            w.write_all(&(value.value_type() as u32).to_le_bytes())?;
            value.write(w)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_string(w, &t.name)?;
            w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                w.write_all(&d.to_le_bytes())?;
            }
            w.write_all(&t.ggml_type.to_le_bytes())?;
            w.write_all(&offset.to_le_bytes())?;
            offset += t.bytes.next_multiple_of(self.alignment);
        }
        let pad = counted.bytes.next_multiple_of(self.alignment) - counted.bytes;
        write_zeros(counted.inner, pad)
    }

    /// Writes the whole file with the tensors' data given in memory, one slice per tensor.
    pub fn write_all(&self, w: &mut impl Write, data: &[&[u8]]) -> io::Result<()> {
        if data.len() != self.tensors.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "one data slice per tensor is needed",
            ));
        }
        self.write_header(w)?;
        for (i, bytes) in data.iter().enumerate() {
            w.write_all(bytes)?;
            write_zeros(w, self.padding_after(i))?;
        }
        Ok(())
    }
}

fn write_string(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_zeros(w: &mut impl Write, n: u64) -> io::Result<()> {
    io::copy(&mut io::repeat(0).take(n), w).map(|_| ())
}

/// Counts the bytes written through it (to place the padding).
struct Counting<'a, W: Write> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

//! Lm-head weights stored in a type the shards do not run (F32, F16, BF16, Q8_0, Q5_K) and their
//! dequantization to f32, each exactly as ggml's `dequantize_row_*` (checked against the PyPI
//! `gguf` package's dequantizers in `tests/cli/requantize.rs`). Q4_K and Q6_K go through kquant.
//! `slice --requantize` turns the rows into Q4_K/Q6_K with kquant's port of ggml's reference
//! quantizers.

use anyhow::{bail, ensure, Result};
use bytemuck::Zeroable;
use half::{bf16, f16};
use kquant::quantize::{quantize_row_q4k, quantize_row_q6k};
use kquant::{BlockQ4K, BlockQ6K, QuantType, QK_K};

/// A stored lm-head type that can be requantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceType {
    /// ggml type 0.
    F32,
    /// ggml type 1.
    F16,
    /// ggml type 30.
    Bf16,
    /// ggml type 8: blocks of 32 weights, an f16 scale and 32 i8.
    Q8_0,
    /// ggml type 13: super-blocks of 256 weights in 176 bytes.
    Q5K,
    /// A type the shards run as it is.
    Native(QuantType),
}

impl SourceType {
    /// Every requantizable type.
    pub const ALL: [SourceType; 7] = [
        SourceType::F32,
        SourceType::F16,
        SourceType::Bf16,
        SourceType::Q8_0,
        SourceType::Q5K,
        SourceType::Native(QuantType::Q4K),
        SourceType::Native(QuantType::Q6K),
    ];

    /// The type of ggml type id `id`, if it can be requantized.
    pub fn from_ggml_type(id: u32) -> Option<SourceType> {
        Self::ALL.into_iter().find(|t| t.ggml_type() == id)
    }

    /// The ggml type id.
    pub fn ggml_type(self) -> u32 {
        match self {
            SourceType::F32 => 0,
            SourceType::F16 => 1,
            SourceType::Bf16 => 30,
            SourceType::Q8_0 => 8,
            SourceType::Q5K => 13,
            SourceType::Native(q) => q.ggml_type(),
        }
    }

    /// The name as in manifests and ggml (`f16`, `q8_0`, `q5_k`, …).
    pub fn name(self) -> &'static str {
        match self {
            SourceType::F32 => "f32",
            SourceType::F16 => "f16",
            SourceType::Bf16 => "bf16",
            SourceType::Q8_0 => "q8_0",
            SourceType::Q5K => "q5_k",
            SourceType::Native(q) => q.name(),
        }
    }

    /// (weights, bytes) of one block.
    fn block(self) -> (usize, usize) {
        match self {
            SourceType::F32 => (1, 4),
            SourceType::F16 | SourceType::Bf16 => (1, 2),
            SourceType::Q8_0 => (32, 34),
            SourceType::Q5K => (256, 176),
            SourceType::Native(q) => (256, q.block_bytes()),
        }
    }

    /// Bytes of a row of `cols` weights (`cols` a multiple of the block size).
    pub fn row_bytes(self, cols: usize) -> Result<usize> {
        let (n, bytes) = self.block();
        ensure!(
            cols.is_multiple_of(n),
            "{cols} columns are not whole {} blocks of {n}",
            self.name()
        );
        Ok(cols / n * bytes)
    }

    /// Dequantizes `bytes` (whole blocks) into `out` (one f32 per weight).
    pub fn dequantize(self, bytes: &[u8], out: &mut [f32]) -> Result<()> {
        let (n, size) = self.block();
        ensure!(
            bytes.len().is_multiple_of(size) && bytes.len() / size * n == out.len(),
            "{} bytes of {} do not make {} weights",
            bytes.len(),
            self.name(),
            out.len()
        );
        let f16_at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
        match self {
            SourceType::F32 => {
                for (y, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            SourceType::F16 => {
                for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *y = f16_at(b, 0);
                }
            }
            SourceType::Bf16 => {
                for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *y = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            SourceType::Q8_0 => {
                for (y, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(34)) {
                    let d = f16_at(b, 0);
                    for (y, &q) in y.iter_mut().zip(&b[2..]) {
                        *y = f32::from(q as i8) * d;
                    }
                }
            }
            SourceType::Q5K => {
                for (y, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(176)) {
                    dequantize_q5k(b, y);
                }
            }
            SourceType::Native(q) => kquant::dequantize(q, bytes, out)?,
        }
        Ok(())
    }
}

/// Scale and min `j` (0..8) of the 12 packed bytes of a Q4_K/Q5_K super-block (ggml's
/// `get_scale_min_k4`).
fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One Q5_K super-block (d, dmin, scales[12], qh[32], qs[128]) as ggml's `dequantize_row_q5_K`.
fn dequantize_q5k(b: &[u8], y: &mut [f32]) {
    let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
    let min = f16::from_le_bytes([b[2], b[3]]).to_f32();
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    let (mut u1, mut u2) = (1u8, 2u8);
    for (chunk, (ql, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min(2 * chunk, scales);
        let (sc2, m2) = scale_min(2 * chunk + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        for l in 0..32 {
            let high = if qh[l] & u1 != 0 { 16 } else { 0 };
            y[l] = d1 * f32::from((ql[l] & 0xF) + high) - m1;
        }
        for l in 0..32 {
            let high = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[32 + l] = d2 * f32::from((ql[l] >> 4) + high) - m2;
        }
        u1 <<= 2;
        u2 <<= 2;
    }
}

/// Converts rows from the stored type to a slice type and measures the error this adds.
pub struct Requantizer {
    source: SourceType,
    ty: QuantType,
    xs: Vec<f32>,
    back: Vec<f32>,
    q4: Vec<BlockQ4K>,
    q6: Vec<BlockQ6K>,
    /// The error added so far.
    pub error: ErrorStats,
}

impl Requantizer {
    /// For rows of `cols` weights (a multiple of 256).
    pub fn new(source: SourceType, ty: QuantType, cols: usize) -> Requantizer {
        let blocks = cols / QK_K;
        Requantizer {
            source,
            ty,
            xs: vec![0.0; cols],
            back: vec![0.0; cols],
            q4: vec![BlockQ4K::zeroed(); blocks],
            q6: vec![BlockQ6K::zeroed(); blocks],
            error: ErrorStats::default(),
        }
    }

    /// Appends stored row `row` (its bytes), converted, to `out`.
    pub fn row(&mut self, row: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.source.dequantize(row, &mut self.xs)?;
        if let Some(i) = self.xs.iter().position(|v| !v.is_finite()) {
            bail!("weight {i} of a row is {} in the stored type", self.xs[i]);
        }
        let bytes: &[u8] = match self.ty {
            QuantType::Q4K => {
                quantize_row_q4k(&self.xs, &mut self.q4)?;
                bytemuck::cast_slice(&self.q4)
            }
            QuantType::Q6K => {
                quantize_row_q6k(&self.xs, &mut self.q6)?;
                bytemuck::cast_slice(&self.q6)
            }
        };
        kquant::dequantize(self.ty, bytes, &mut self.back)?;
        for (&w, &v) in self.xs.iter().zip(&self.back) {
            self.error.add(f64::from(w), f64::from(v));
        }
        out.extend_from_slice(bytes);
        Ok(())
    }
}

/// The difference between the stored weights and the requantized ones.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ErrorStats {
    /// Largest |Δw|.
    pub max_abs_err: f64,
    /// Largest |w|.
    pub max_abs: f64,
    sq_err: f64,
    sq: f64,
    n: u64,
}

impl ErrorStats {
    fn add(&mut self, w: f64, requantized: f64) {
        let e = (requantized - w).abs();
        self.max_abs_err = self.max_abs_err.max(e);
        self.max_abs = self.max_abs.max(w.abs());
        self.sq_err += e * e;
        self.sq += w * w;
        self.n += 1;
    }

    /// Both taken together.
    pub fn merge(self, o: ErrorStats) -> ErrorStats {
        ErrorStats {
            max_abs_err: self.max_abs_err.max(o.max_abs_err),
            max_abs: self.max_abs.max(o.max_abs),
            sq_err: self.sq_err + o.sq_err,
            sq: self.sq + o.sq,
            n: self.n + o.n,
        }
    }

    /// RMS of Δw over RMS of w.
    pub fn relative_rms(&self) -> f64 {
        if self.sq == 0.0 {
            0.0
        } else {
            (self.sq_err / self.sq).sqrt()
        }
    }
}

impl std::fmt::Display for ErrorStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rel = if self.max_abs == 0.0 {
            0.0
        } else {
            self.max_abs_err / self.max_abs
        };
        write!(
            f,
            "max |Δw| {:.3e} ({:.3} % of max |w|), RMS Δw {:.3} % of RMS w",
            self.max_abs_err,
            100.0 * rel,
            100.0 * self.relative_rms()
        )
    }
}

//! The public entry points: a validated quantized matrix, its mat-vec and dequantization.

use crate::arch::generic::{self, Job, Weights};
use crate::{
    Backend, Block, BlockQ4K, BlockQ4KInterleaved, BlockQ6K, BlockQ6KInterleaved, BlockQ6KPacked,
    Error, Layout, QK_K,
};

/// A supported ggml quantization format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// ggml `Q4_K` (type id 12).
    Q4K,
    /// ggml `Q6_K` (type id 14).
    Q6K,
}

impl QuantType {
    /// Both formats.
    pub const ALL: [QuantType; 2] = [QuantType::Q4K, QuantType::Q6K];

    /// Bytes per 256-weight block.
    pub const fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4K => BlockQ4K::BYTES,
            QuantType::Q6K => BlockQ6K::BYTES,
        }
    }

    /// ggml's name for the format (`"q4_k"`, `"q6_k"`).
    pub const fn name(self) -> &'static str {
        match self {
            QuantType::Q4K => "q4_k",
            QuantType::Q6K => "q6_k",
        }
    }

    /// Looks a format up by [`QuantType::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<QuantType> {
        QuantType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// ggml's numeric type id, as stored in GGUF files.
    pub const fn ggml_type(self) -> u32 {
        match self {
            QuantType::Q4K => 12,
            QuantType::Q6K => 14,
        }
    }

    /// The format with ggml type id `id`, if supported.
    pub fn from_ggml_type(id: u32) -> Option<QuantType> {
        QuantType::ALL.into_iter().find(|t| t.ggml_type() == id)
    }

    /// Floats of scratch a mat-vec over `cols` columns needs (the prepared activations).
    pub const fn scratch_len(self, cols: usize) -> usize {
        generic::prepared_len(matches!(self, QuantType::Q4K), cols)
    }

    /// Floats of scratch per vector that serve every mode and layout over `cols` columns: the
    /// larger of [`QuantType::scratch_len`] and [`QMatrix::int8_scratch_len`] at its largest
    /// (the interleaved layout's, which adds the permuted quants).
    pub const fn largest_scratch_len(self, cols: usize) -> usize {
        let exact = self.scratch_len(cols);
        let int8 = generic::int8::prepared_len(cols, true);
        if exact > int8 {
            exact
        } else {
            int8
        }
    }

    /// Bytes of one row of `cols` weights; `cols` must be a positive multiple of 256.
    pub fn row_bytes(self, cols: usize) -> Result<usize, Error> {
        if cols == 0 {
            return Err(Error::EmptyShape);
        }
        if !cols.is_multiple_of(QK_K) {
            return Err(Error::ColsNotMultipleOf256 { cols });
        }
        Ok(cols / QK_K * self.block_bytes())
    }
}

/// A row-major `rows × cols` matrix of quantized weights, checked once at construction.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    ty: QuantType,
    layout: Layout,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
}

impl<'a> QMatrix<'a> {
    /// Checks that `bytes` holds exactly `rows × cols` weights of type `ty`, in ggml's layout.
    pub fn new(ty: QuantType, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self, Error> {
        QMatrix::with_layout(ty, Layout::Ggml, bytes, rows, cols)
    }

    /// [`QMatrix::new`] for blocks stored in `layout` (which must support `ty`). Every layout
    /// gives the same results, bit for bit.
    pub fn with_layout(
        ty: QuantType,
        layout: Layout,
        bytes: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, Error> {
        layout.check(ty)?;
        let row_bytes = ty.row_bytes(cols)?;
        layout.check_cols(cols)?;
        if rows == 0 {
            return Err(Error::EmptyShape);
        }
        let expected = rows.checked_mul(row_bytes).ok_or(Error::ShapeOverflow)?;
        check_len("weights", expected, bytes.len())?;
        Ok(QMatrix {
            ty,
            layout,
            bytes,
            rows,
            cols,
        })
    }

    /// The format.
    pub fn ty(&self) -> QuantType {
        self.ty
    }

    /// The blocks' layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Number of rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (inputs), a multiple of 256.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The raw blocks.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Floats of scratch that [`QMatrix::mat_vec_with`] needs (the prepared activations).
    pub fn scratch_len(&self) -> usize {
        self.ty.scratch_len(self.cols)
    }

    /// `out[r] = Σ_c W[r,c]·x[c]` on `backend`, in the canonical order described in the crate
    /// docs. `scratch` must hold [`QMatrix::scratch_len`] floats.
    pub fn mat_vec_with(
        &self,
        backend: Backend,
        x: &[f32],
        out: &mut [f32],
        scratch: &mut [f32],
    ) -> Result<(), Error> {
        check_len("x", self.cols, x.len())?;
        self.mat_mat_with(backend, x, out, scratch)
    }

    /// `n` products at once: `xs` holds `n` vectors of `cols` floats back to back, `out` gets
    /// `n` results of `rows` floats back to back. The weights are read once per pass of up to
    /// four vectors, and each result has exactly the bits [`QMatrix::mat_vec_with`] gives it.
    /// `scratch` must hold `n ·` [`QMatrix::scratch_len`] floats.
    pub fn mat_mat_with(
        &self,
        backend: Backend,
        xs: &[f32],
        out: &mut [f32],
        scratch: &mut [f32],
    ) -> Result<(), Error> {
        self.run(backend, false, xs, out, scratch)
    }

    /// Floats of scratch that one vector of [`QMatrix::mat_mat_int8_with`] needs.
    pub fn int8_scratch_len(&self) -> usize {
        generic::int8::prepared_len(self.cols, self.layout == Layout::Interleaved)
    }

    /// The opt-in fast mode: like [`QMatrix::mat_mat_with`], but each 256 columns of `x` are
    /// quantized to 8 bits (as ggml's `Q8_K`) and the dot products are exact integer sums with a
    /// fixed float epilogue, so results are still bit-identical across backends. It costs about
    /// 7e-3 of max |y| in accuracy (measured in `tests/int8.rs`); a NaN or infinity anywhere in
    /// `x` makes every result NaN.
    /// The order is written out in the `arch::generic::int8` module docs. `scratch` must hold
    /// `n ·` [`QMatrix::int8_scratch_len`] floats.
    pub fn mat_mat_int8_with(
        &self,
        backend: Backend,
        xs: &[f32],
        out: &mut [f32],
        scratch: &mut [f32],
    ) -> Result<(), Error> {
        self.run(backend, true, xs, out, scratch)
    }

    fn run(
        &self,
        backend: Backend,
        int8: bool,
        xs: &[f32],
        out: &mut [f32],
        scratch: &mut [f32],
    ) -> Result<(), Error> {
        if !backend.is_available() {
            return Err(Error::BackendUnavailable);
        }
        if crate::arch::flushes_subnormals() {
            return Err(Error::SubnormalsFlushed);
        }
        let n = xs.len() / self.cols;
        if n == 0 || !xs.len().is_multiple_of(self.cols) {
            return Err(Error::LengthMismatch {
                what: "x",
                expected: self.cols * n.max(1),
                actual: xs.len(),
            });
        }
        check_len("out", self.rows * n, out.len())?;
        let per_vector = if int8 {
            self.int8_scratch_len()
        } else {
            self.scratch_len()
        };
        check_len("scratch", per_vector * n, scratch.len())?;
        let q4k = self.ty == QuantType::Q4K;
        for (x, prepared) in xs
            .chunks_exact(self.cols)
            .zip(scratch.chunks_exact_mut(per_vector))
        {
            if int8 {
                generic::int8::prepare(x, prepared, self.layout == Layout::Interleaved);
            } else {
                generic::prepare(x, q4k, prepared);
            }
        }
        backend.run(Job::MatMul {
            weights: weights(self.ty, self.layout, self.bytes)?,
            int8,
            prepared: scratch,
            out,
            rows: self.rows,
        });
        Ok(())
    }

    /// [`QMatrix::mat_vec_with`] on [`Backend::best`], allocating its scratch.
    #[cfg(feature = "alloc")]
    pub fn mat_vec(&self, x: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("x", self.cols, x.len())?;
        self.mat_mat(x, out)
    }

    /// [`QMatrix::mat_mat_with`] on [`Backend::best`], allocating its scratch.
    #[cfg(feature = "alloc")]
    pub fn mat_mat(&self, xs: &[f32], out: &mut [f32]) -> Result<(), Error> {
        let n = xs.len() / self.cols;
        let mut scratch = alloc::vec![0.0; self.scratch_len() * n.max(1)];
        self.mat_mat_with(Backend::best(), xs, out, &mut scratch)
    }

    /// One vector in the fast mode ([`QMatrix::mat_mat_int8_with`]) on [`Backend::best`].
    #[cfg(feature = "alloc")]
    pub fn mat_vec_int8(&self, x: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("x", self.cols, x.len())?;
        let mut scratch = alloc::vec![0.0; self.int8_scratch_len()];
        self.mat_mat_int8_with(Backend::best(), x, out, &mut scratch)
    }
}

/// `out = W·x` for a `rows × cols` Q4_K matrix given as bytes, on the best backend.
#[cfg(feature = "alloc")]
pub fn mat_vec_q4k(
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), Error> {
    QMatrix::new(QuantType::Q4K, weights, rows, cols)?.mat_vec(x, out)
}

/// `out = W·x` for a `rows × cols` Q6_K matrix given as bytes, on the best backend.
#[cfg(feature = "alloc")]
pub fn mat_vec_q6k(
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), Error> {
    QMatrix::new(QuantType::Q6K, weights, rows, cols)?.mat_vec(x, out)
}

/// Dequantizes whole blocks of `ty` into `out` (256 floats per block) on `backend`,
/// bit-identical to ggml's `dequantize_row_q4_K` / `dequantize_row_q6_K`.
pub fn dequantize_with(
    backend: Backend,
    ty: QuantType,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), Error> {
    dequantize_layout_with(backend, ty, Layout::Ggml, bytes, out)
}

/// [`dequantize_with`] for blocks stored in `layout`: the same floats as their ggml form gives.
pub fn dequantize_layout_with(
    backend: Backend,
    ty: QuantType,
    layout: Layout,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), Error> {
    if !backend.is_available() {
        return Err(Error::BackendUnavailable);
    }
    let weights = weights(ty, layout, bytes)?;
    check_len("out", bytes.len() / ty.block_bytes() * QK_K, out.len())?;
    backend.run(Job::Dequantize { weights, out });
    Ok(())
}

/// [`dequantize_with`] on [`Backend::best`].
pub fn dequantize(ty: QuantType, bytes: &[u8], out: &mut [f32]) -> Result<(), Error> {
    dequantize_with(Backend::best(), ty, bytes, out)
}

/// `bytes` viewed as blocks of `ty` in `layout`.
fn weights(ty: QuantType, layout: Layout, bytes: &[u8]) -> Result<Weights<'_>, Error> {
    layout.check(ty)?;
    Ok(match (ty, layout) {
        (QuantType::Q4K, Layout::Interleaved) => {
            Weights::Q4KInterleaved(BlockQ4KInterleaved::slice_from_bytes(bytes)?)
        }
        (QuantType::Q4K, _) => Weights::Q4K(BlockQ4K::slice_from_bytes(bytes)?),
        (QuantType::Q6K, Layout::Ggml) => Weights::Q6K(BlockQ6K::slice_from_bytes(bytes)?),
        (QuantType::Q6K, Layout::Packed6) => {
            Weights::Q6KPacked(BlockQ6KPacked::slice_from_bytes(bytes)?)
        }
        (QuantType::Q6K, Layout::Interleaved) => {
            Weights::Q6KInterleaved(BlockQ6KInterleaved::slice_from_bytes(bytes)?)
        }
    })
}

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), Error> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}

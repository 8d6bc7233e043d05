//! Checking what JS passes for a matrix — the format, `rows`, `cols` — and the lengths they imply,
//! before any byte is copied.

use kquant::{Backend, Layout, QMatrix, QuantType, QK_K};

use crate::error::{Error, Problem};

/// A checked `rows × cols` matrix of one format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The format.
    pub ty: QuantType,
    /// The blocks' layout (ggml's unless [`Shape::with_layout`] said otherwise).
    pub layout: Layout,
    /// Rows (outputs of a mat-vec).
    pub rows: usize,
    /// Columns (inputs), a positive multiple of 256.
    pub cols: usize,
    /// Bytes of one row.
    pub row_bytes: usize,
    /// Bytes of the whole matrix: `rows × row_bytes`.
    pub bytes: usize,
}

impl Shape {
    /// Checks `rows` and `cols` as JS numbers, for the call named `call`.
    pub fn new(call: &'static str, ty: QuantType, rows: f64, cols: f64) -> Result<Shape, Error> {
        let rows = positive_integer(call, "rows", rows)?;
        let cols = positive_integer(call, "cols", cols)?;
        let row_bytes = ty
            .row_bytes(cols)
            .map_err(|_| Error::new(call, Problem::ColsNotMultipleOf256 { cols }))?;
        let bytes = rows.checked_mul(row_bytes).ok_or(Error::new(
            call,
            Problem::TooLarge {
                what: "the matrix (rows × bytes per row)",
            },
        ))?;
        Ok(Shape {
            ty,
            layout: Layout::Ggml,
            rows,
            cols,
            row_bytes,
            bytes,
        })
    }

    /// This shape with its blocks in `layout` (the same bytes per block), if `layout` supports
    /// the format and rows this long.
    pub fn with_layout(self, call: &'static str, layout: Layout) -> Result<Shape, Error> {
        layout.check(self.ty).map_err(|_| {
            let (dtype, layout) = (self.ty.name(), layout.name());
            Error::new(call, Problem::UnsupportedLayout { dtype, layout })
        })?;
        layout
            .check_cols(self.cols)
            .map_err(|e| Error::new(call, Problem::RowTooLong(e)))?;
        Ok(Shape { layout, ..self })
    }

    /// `out = W·x` on the best backend, for the `out.len()` rows whose blocks are `weights`
    /// (all rows, or a window of them: every row is computed on its own); with `int8`, in
    /// kquant's fast mode. `scratch` holds [`kquant::QuantType::largest_scratch_len`] floats.
    pub fn mat_vec(
        &self,
        call: &'static str,
        weights: &[u8],
        x: &[f32],
        out: &mut [f32],
        scratch: &mut [f32],
        int8: bool,
    ) -> Result<(), Error> {
        QMatrix::with_layout(self.ty, self.layout, weights, out.len(), self.cols)
            .and_then(|m| {
                if int8 {
                    let scratch = &mut scratch[..m.int8_scratch_len()];
                    m.mat_mat_int8_with(Backend::best(), x, out, scratch)
                } else {
                    let scratch = &mut scratch[..m.scratch_len()];
                    m.mat_vec_with(Backend::best(), x, out, scratch)
                }
            })
            .map_err(|e| Error::new(call, Problem::Kernel(e)))
    }

    /// Checks the lengths of the weights, `x` and `out` of a mat-vec with this shape.
    pub fn check_mat_vec(
        &self,
        call: &'static str,
        weights: usize,
        x: usize,
        out: usize,
    ) -> Result<(), Error> {
        check_len(
            call,
            "weights",
            "bytes",
            weights,
            self.bytes,
            "rows × bytes per row",
        )?;
        check_len(call, "x", "floats", x, self.cols, "cols")?;
        check_len(call, "out", "floats", out, self.rows, "rows")
    }
}

/// The format named `name` (`"q4_k"` or `"q6_k"`, any case).
pub fn parse_dtype(call: &'static str, name: &str) -> Result<QuantType, Error> {
    QuantType::from_name(name).ok_or_else(|| Error::new(call, Problem::UnknownDtype(name.into())))
}

/// The [`Layout`] named `name` (`"ggml"`, `"packed6"`, `"interleaved"`).
pub fn parse_layout(call: &'static str, name: &str) -> Result<Layout, Error> {
    Layout::from_name(name).ok_or_else(|| Error::new(call, Problem::UnknownLayout(name.into())))
}

/// Checks a dequantization: `bytes` must be whole blocks of `ty` and `out` 256 floats per block.
pub fn check_dequantize(
    call: &'static str,
    ty: QuantType,
    bytes: usize,
    out: usize,
) -> Result<(), Error> {
    let block_bytes = ty.block_bytes();
    if !bytes.is_multiple_of(block_bytes) {
        return Err(Error::new(
            call,
            Problem::NotWholeBlocks {
                actual: bytes,
                block_bytes,
                dtype: ty.name(),
            },
        ));
    }
    let floats = (bytes / block_bytes).checked_mul(QK_K).ok_or(Error::new(
        call,
        Problem::TooLarge {
            what: "out (256 floats per block)",
        },
    ))?;
    check_len(call, "out", "floats", out, floats, "256 per block")
}

/// Checks that `actual` elements of `what` were given where `expected` are needed.
pub fn check_len(
    call: &'static str,
    what: &'static str,
    unit: &'static str,
    actual: usize,
    expected: usize,
    because: &'static str,
) -> Result<(), Error> {
    if actual == expected {
        return Ok(());
    }
    Err(Error::new(
        call,
        Problem::Length {
            what,
            unit,
            actual,
            expected,
            because,
        },
    ))
}

/// A JS number that must be an integer in `1..2³²`.
fn positive_integer(call: &'static str, what: &'static str, value: f64) -> Result<usize, Error> {
    if value.fract() == 0.0 && (1.0..4_294_967_296.0).contains(&value) {
        Ok(value as usize)
    } else {
        Err(Error::new(
            call,
            Problem::NotPositiveInteger { what, value },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked_with_clear_messages() {
        let s = Shape::new("f", QuantType::Q6K, 3.0, 512.0).unwrap();
        assert_eq!((s.rows, s.cols, s.bytes), (3, 512, 3 * 2 * 210));
        for (rows, cols, message) in [
            (
                0.0,
                256.0,
                "f: rows must be a positive integer below 2^32, got 0",
            ),
            (
                1.5,
                256.0,
                "f: rows must be a positive integer below 2^32, got 1.5",
            ),
            (
                f64::NAN,
                256.0,
                "f: rows must be a positive integer below 2^32, got NaN",
            ),
            (
                1.0,
                -256.0,
                "f: cols must be a positive integer below 2^32, got -256",
            ),
            (
                1.0,
                100.0,
                "f: cols must be a multiple of 256 (one super-block), got 100",
            ),
        ] {
            let e = Shape::new("f", QuantType::Q6K, rows, cols).unwrap_err();
            assert_eq!(e.to_string(), message);
        }
        let e = s.check_mat_vec("f", 1260, 512, 2).unwrap_err();
        assert_eq!(e.to_string(), "f: out has 2 floats, expected 3 (rows)");
    }

    #[test]
    fn dequantize_lengths_and_dtypes() {
        assert!(check_dequantize("g", QuantType::Q4K, 288, 512).is_ok());
        let e = check_dequantize("g", QuantType::Q4K, 100, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "g: blocks has 100 bytes, expected a multiple of 144 (the size of one q4_k block)"
        );
        let e = check_dequantize("g", QuantType::Q4K, 144, 255).unwrap_err();
        assert_eq!(
            e.to_string(),
            "g: out has 255 floats, expected 256 (256 per block)"
        );
        assert_eq!(parse_dtype("h", "Q6_K"), Ok(QuantType::Q6K));
        assert_eq!(
            parse_dtype("h", "q8_0").unwrap_err().to_string(),
            "h: unknown dtype \"q8_0\", expected \"q4_k\" or \"q6_k\""
        );
    }
}

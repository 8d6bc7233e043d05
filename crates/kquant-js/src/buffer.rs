//! Moving typed arrays into wasm memory. Callers check lengths first; every allocation here is
//! fallible, so an array too large for wasm memory throws instead of trapping.

use js_sys::{Float32Array, Uint8Array};

use crate::error::{Error, Problem};

/// A JS typed array whose elements can be copied into a Rust slice.
pub trait TypedArray {
    /// The element type (`u8` for `Uint8Array`, `f32` for `Float32Array`).
    type Elem: Copy + Default;

    /// Its `length`.
    fn elements(&self) -> usize;

    /// Copies elements `start .. start + dst.len()` into `dst`; the range must be in bounds.
    fn read(&self, start: usize, dst: &mut [Self::Elem]);
}

macro_rules! typed_array {
    ($array:ty, $elem:ty) => {
        impl TypedArray for $array {
            type Elem = $elem;

            fn elements(&self) -> usize {
                self.length() as usize
            }

            fn read(&self, start: usize, dst: &mut [$elem]) {
                // JS lengths and offsets are below 2³², so the casts are exact.
                self.subarray(start as u32, (start + dst.len()) as u32)
                    .copy_to(dst);
            }
        }
    };
}

typed_array!(Uint8Array, u8);
typed_array!(Float32Array, f32);

/// `n` zeroed elements for `what`, or an [`Problem::OutOfMemory`] error.
pub fn zeroed<T: Copy + Default>(
    call: &'static str,
    what: &'static str,
    n: usize,
) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    reserve(call, what, &mut v, n)?;
    v.resize(n, T::default());
    Ok(v)
}

/// Reserves room for exactly `n` more elements in `v`, or returns an
/// [`Problem::OutOfMemory`] error.
pub fn reserve<T>(
    call: &'static str,
    what: &'static str,
    v: &mut Vec<T>,
    n: usize,
) -> Result<(), Error> {
    v.try_reserve_exact(n).map_err(|_| {
        Error::new(
            call,
            Problem::OutOfMemory {
                what,
                bytes: n.saturating_mul(size_of::<T>()),
            },
        )
    })
}

/// A copy of the whole of `array` in wasm memory.
pub fn copy_in<A: TypedArray>(
    call: &'static str,
    what: &'static str,
    array: &A,
) -> Result<Vec<A::Elem>, Error> {
    let mut v = zeroed(call, what, array.elements())?;
    array.read(0, &mut v);
    Ok(v)
}

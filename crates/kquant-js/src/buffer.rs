//! Typed arrays from JS: checking their type, and moving them into wasm memory. Callers check
//! lengths first; every allocation here is fallible, so an array too large for wasm memory throws
//! instead of trapping.

use js_sys::{Float32Array, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use crate::error::{Error, Problem};

/// A JS typed array whose elements can be copied into a Rust slice.
pub trait TypedArray: JsCast {
    /// What error messages call it: `"a Uint8Array"`, `"a Float32Array"`.
    const NAME: &'static str;

    /// The element type (`u8` for `Uint8Array`, `f32` for `Float32Array`).
    type Elem: Copy + Default;

    /// Its `length`.
    fn elements(&self) -> usize;

    /// Copies elements `start .. start + dst.len()` into `dst`; the range must be in bounds.
    fn read(&self, start: usize, dst: &mut [Self::Elem]);
}

macro_rules! typed_array {
    ($array:ty, $elem:ty, $name:literal) => {
        impl TypedArray for $array {
            const NAME: &'static str = $name;
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

typed_array!(Uint8Array, u8, "a Uint8Array");
typed_array!(Float32Array, f32, "a Float32Array");

/// `value` as the typed array `A` (an `instanceof` check), or an error saying what it is instead.
///
/// Checking here, rather than letting wasm-bindgen assume the type, keeps a wrong argument from
/// throwing a `TypeError` half-way through a call (which would leave a slice borrowed for good).
pub fn typed<'a, A: TypedArray>(
    call: &'static str,
    what: &'static str,
    value: &'a JsValue,
) -> Result<&'a A, Error> {
    value.dyn_ref::<A>().ok_or_else(|| {
        Error::new(
            call,
            Problem::WrongType {
                what,
                expected: A::NAME,
                got: describe(value),
            },
        )
    })
}

/// What a JS value is, for an error message: its constructor's name (`Array`, `Float64Array`),
/// or its `typeof` (`string`, `undefined`), or `null`.
pub fn describe(value: &JsValue) -> String {
    if value.is_null() {
        return "null".into();
    }
    if !value.is_object() {
        return value.js_typeof().as_string().unwrap_or_default();
    }
    Reflect::get(value, &"constructor".into())
        .and_then(|c| Reflect::get(&c, &"name".into()))
        .ok()
        .and_then(|name| name.as_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "an object".into())
}

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

//! A wasm module (no wasm-bindgen, plain exports) that times kquant's simd128 kernels and the
//! operations they are built from, so that workerd and Node run the very same code from the same
//! JavaScript harness (`benches/engine/harness.mjs`).
//!
//! Exports, all plain numbers:
//!
//! * `idiom_count()`, `idiom_name(i)` / `name_len(i)` (UTF-8 in linear memory), `idiom_ops(i)`,
//!   `idiom(i, passes)`: one of the [`idioms`], `passes` times over its L1-resident buffer.
//! * `kernel_setup(case, batch)`: synthesizes one of the benchmark cases' weights (the shapes
//!   of `docs/BENCHMARKS.md`) and `batch` activation vectors; answers the weight bytes, 0 when
//!   the case does not exist.
//! * `kernel_run(int8)`: one `mat_mat` (exact or int8) of the batch against the weights; the
//!   first result, so nothing is optimized away.
//! * `floor_run()`: a sequential read of the same weight bytes (the memory floor);
//!   `floor_simd_run()`: every byte loaded into simd128 registers.
//! * `weights_ptr()`, `xs_ptr()`, `out_ptr()`, `kernel_rows()`, `kernel_cols()`: where the case's
//!   weights, vectors and last results live in linear memory, and its shape (for a peer module
//!   that reads the same bytes, and checks its results against these).
//! * `layout_setup(layout)`, `layout_run(layout, int8)`: the case set up last (and its batch)
//!   repacked into one of kquant's own layouts (`layout` indexes [`Layout::ALL`]: 1 packed6, 2
//!   interleaved), checked against ggml's layout on every row.
//! * `candle_setup()`, `candle_run()`: candle-core's mat-vec on the case (feature `candle`).
//! * `int8_check(first, count)`: the best backend's int8 products against the scalar backend's
//!   on seeded random and adversarial cases ([`int8_check`]); the number of differing results.
//! * `bit_exact_lines()`, then `text_ptr()`: the bit-exact table's lines for every backend of
//!   this build (`scripts/bit-exact.sh`; UTF-8 in linear memory, the length returned).
//!
//! Errors come back as NaN or 0, never as a panic: a trap would end the benchmark's isolate.
//! On other targets the crate is empty.
#![cfg(target_arch = "wasm32")]

use core::arch::wasm32::v128;
use std::cell::RefCell;

use cobordism_benches::{sequential_read, CASES};
use kquant::{repack, Backend, Layout, QMatrix};

#[cfg(feature = "candle")]
mod candle_peer;
pub mod idioms;
mod int8_check;
/// The kquant tests' seeded cases, for the bit-exact table's lines ([`bit_exact_lines`]).
#[path = "../../../crates/kquant/tests/common/mod.rs"]
mod kquant_cases;

/// The weights, activations and buffers of the case being timed.
struct Kernel {
    case: usize,
    weights: Vec<u8>,
    xs: Vec<f32>,
    out: Vec<f32>,
    scratch: Vec<f32>,
}

/// The case's weights repacked into another layout, and their buffers.
struct Repacked {
    case: usize,
    weights: Vec<u8>,
    x: Vec<f32>,
    out: Vec<f32>,
    scratch: Vec<f32>,
}

thread_local! {
    static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
    static REPACKED: RefCell<[Option<Repacked>; Layout::ALL.len()]> =
        const { RefCell::new([const { None }; Layout::ALL.len()]) };
    static KERNEL: RefCell<Option<Kernel>> = const { RefCell::new(None) };
    static BUFFER: (Vec<v128>, Vec<u8>) = {
        let bytes: Vec<u8> = (0..16 * idioms::VECTORS + 64).map(|i| (i * 151 + 7) as u8).collect();
        let vectors = bytes[..16 * idioms::VECTORS]
            .chunks_exact(16)
            .map(bytemuck::pod_read_unaligned)
            .collect();
        (vectors, bytes)
    };
}

#[no_mangle]
pub extern "C" fn idiom_count() -> u32 {
    idioms::IDIOMS.len() as u32
}

#[no_mangle]
pub extern "C" fn idiom_name(i: u32) -> *const u8 {
    idioms::IDIOMS
        .get(i as usize)
        .map_or(core::ptr::null(), |d| d.name.as_ptr())
}

#[no_mangle]
pub extern "C" fn name_len(i: u32) -> u32 {
    idioms::IDIOMS
        .get(i as usize)
        .map_or(0, |d| d.name.len() as u32)
}

#[no_mangle]
pub extern "C" fn idiom_ops(i: u32) -> u32 {
    idioms::IDIOMS.get(i as usize).map_or(0, |d| d.ops)
}

#[no_mangle]
pub extern "C" fn idiom(i: u32, passes: u32) -> u32 {
    let Some(d) = idioms::IDIOMS.get(i as usize) else {
        return 0;
    };
    BUFFER.with(|(vectors, bytes)| {
        let mut check = 0u32;
        for _ in 0..passes {
            let r: [u32; 4] = bytemuck::cast((d.pass)(core::hint::black_box(vectors), bytes));
            check = check.wrapping_add(r[0] ^ r[3]);
        }
        check
    })
}

#[no_mangle]
pub extern "C" fn kernel_setup(case: u32, batch: u32) -> u32 {
    let Some(c) = CASES.get(case as usize) else {
        return 0;
    };
    let batch = batch.clamp(1, 8) as usize;
    let (weights, x) = c.data(1);
    let xs: Vec<f32> = (0..batch).flat_map(|_| x.iter().copied()).collect();
    let m = QMatrix::new(c.ty, &weights, c.rows, c.cols).expect("valid case");
    let scratch = vec![0.0; batch * m.scratch_len().max(m.int8_scratch_len())];
    let bytes = weights.len() as u32;
    KERNEL.with(|k| {
        *k.borrow_mut() = Some(Kernel {
            case: case as usize,
            weights,
            xs,
            out: vec![0.0; batch * c.rows],
            scratch,
        })
    });
    bytes
}

#[no_mangle]
pub extern "C" fn kernel_run(int8: u32) -> f32 {
    KERNEL.with(|k| {
        let mut k = k.borrow_mut();
        let Some(k) = k.as_mut() else {
            return f32::NAN;
        };
        let buffers = (&mut k.out[..], &mut k.scratch[..]);
        let done = mat_mat(k.case, Layout::Ggml, &k.weights, &k.xs, buffers, int8 != 0);
        done.map_or(f32::NAN, |()| k.out[0])
    })
}

/// The product (exact, or int8) of case `case`'s weights, stored in `layout`, with the vectors
/// `xs`, into `out`, with a scratch kept between calls.
fn mat_mat(
    case: usize,
    layout: Layout,
    weights: &[u8],
    xs: &[f32],
    (out, scratch): (&mut [f32], &mut [f32]),
    int8: bool,
) -> Result<(), kquant::Error> {
    let c = CASES[case];
    let m = QMatrix::with_layout(c.ty, layout, weights, c.rows, c.cols)?;
    let n = xs.len() / c.cols;
    if int8 {
        let scratch = &mut scratch[..n * m.int8_scratch_len()];
        m.mat_mat_int8_with(Backend::best(), xs, out, scratch)
    } else {
        let scratch = &mut scratch[..n * m.scratch_len()];
        m.mat_mat_with(Backend::best(), xs, out, scratch)
    }
}

#[no_mangle]
pub extern "C" fn floor_run() -> u32 {
    KERNEL.with(|k| {
        k.borrow()
            .as_ref()
            .map_or(0, |k| sequential_read(&k.weights) as u32)
    })
}

/// The fastest simd128 pass that reads every weight byte: each 16 bytes one `v128.load`, or-ed
/// into four accumulators (the memory floor of a kernel that must load all of its bytes, where
/// `floor_run` touches each 64-byte line once).
#[no_mangle]
pub extern "C" fn floor_simd_run() -> u32 {
    use core::arch::wasm32::{u32x4_extract_lane, v128_or};
    KERNEL.with(|k| {
        k.borrow().as_ref().map_or(0, |k| {
            let zero = bytemuck::Zeroable::zeroed();
            let mut acc: [v128; 4] = [zero; 4];
            for line in k.weights.chunks_exact(64) {
                for (a, bytes) in acc.iter_mut().zip(line.chunks_exact(16)) {
                    *a = v128_or(*a, bytemuck::pod_read_unaligned::<v128>(bytes));
                }
            }
            let all = v128_or(v128_or(acc[0], acc[1]), v128_or(acc[2], acc[3]));
            u32x4_extract_lane::<0>(all)
        })
    })
}

/// Where the weights of the case set up last live in linear memory (0 before any setup): the
/// harness may overwrite them with the bytes of a real slice of the same shape.
#[no_mangle]
pub extern "C" fn weights_ptr() -> *mut u8 {
    KERNEL.with(|k| {
        k.borrow_mut()
            .as_mut()
            .map_or(core::ptr::null_mut(), |k| k.weights.as_mut_ptr())
    })
}

/// Where the vectors of the case set up last live in linear memory (f32, `batch × cols`).
#[no_mangle]
pub extern "C" fn xs_ptr() -> *const f32 {
    KERNEL.with(|k| {
        k.borrow()
            .as_ref()
            .map_or(core::ptr::null(), |k| k.xs.as_ptr())
    })
}

/// Where the results of the last [`kernel_run`] live in linear memory (f32, `batch × rows`).
#[no_mangle]
pub extern "C" fn out_ptr() -> *const f32 {
    KERNEL.with(|k| {
        k.borrow()
            .as_ref()
            .map_or(core::ptr::null(), |k| k.out.as_ptr())
    })
}

/// The rows of the case set up last (0 before any setup).
#[no_mangle]
pub extern "C" fn kernel_rows() -> u32 {
    KERNEL.with(|k| k.borrow().as_ref().map_or(0, |k| CASES[k.case].rows as u32))
}

/// The columns of the case set up last (0 before any setup).
#[no_mangle]
pub extern "C" fn kernel_cols() -> u32 {
    KERNEL.with(|k| k.borrow().as_ref().map_or(0, |k| CASES[k.case].cols as u32))
}

/// Repacks the case set up last (with its batch of vectors) into layout `Layout::ALL[layout]`
/// and checks that both modes give the ggml layout's bits on every row of every vector: 1 if
/// so, 0 otherwise (or when the layout does not take the case's type).
#[no_mangle]
pub extern "C" fn layout_setup(layout: u32) -> u32 {
    let Some(&to) = Layout::ALL.get(layout as usize) else {
        return 0;
    };
    KERNEL.with(|k| {
        let k = k.borrow();
        let Some(k) = k.as_ref() else { return 0 };
        let c = CASES[k.case];
        let mut weights = k.weights.clone();
        if repack(c.ty, Layout::Ggml, to, &mut weights).is_err() {
            return 0;
        }
        let n = k.xs.len() / c.cols;
        let mut r = Repacked {
            case: k.case,
            weights,
            x: k.xs.clone(),
            out: vec![0.0; k.out.len()],
            scratch: vec![0.0; n * c.ty.largest_scratch_len(c.cols)],
        };
        let mut same = true;
        for int8 in [false, true] {
            let buffers = (&mut r.out[..], &mut r.scratch[..]);
            let ggml = mat_mat(k.case, Layout::Ggml, &k.weights, &r.x, buffers, int8);
            let ggml = ggml.map(|()| r.out.clone());
            let buffers = (&mut r.out[..], &mut r.scratch[..]);
            let repacked = mat_mat(k.case, to, &r.weights, &r.x, buffers, int8);
            same &= match (ggml, repacked) {
                (Ok(a), Ok(())) => a
                    .iter()
                    .zip(&r.out)
                    .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
                _ => false,
            };
        }
        REPACKED.with(|q| q.borrow_mut()[layout as usize] = Some(r));
        u32::from(same)
    })
}

/// One product (exact, or int8 when `int8` is nonzero) of the batch on the copy in layout
/// `Layout::ALL[layout]`; its first result (NaN before [`layout_setup`] of that layout).
#[no_mangle]
pub extern "C" fn layout_run(layout: u32, int8: u32) -> f32 {
    REPACKED.with(|q| {
        let mut q = q.borrow_mut();
        let Some(Some(r)) = q.get_mut(layout as usize) else {
            return f32::NAN;
        };
        let to = Layout::ALL[layout as usize];
        let buffers = (&mut r.out[..], &mut r.scratch[..]);
        let done = mat_mat(r.case, to, &r.weights, &r.x, buffers, int8 != 0);
        done.map_or(f32::NAN, |()| r.out[0])
    })
}

/// With feature `candle`: hands the case set up last to candle-core ([`candle_peer`]); 1 on
/// success, 0 without a case. Without the feature: 0.
#[no_mangle]
pub extern "C" fn candle_setup() -> u32 {
    #[cfg(feature = "candle")]
    return KERNEL.with(|k| {
        let k = k.borrow();
        let Some(k) = k.as_ref() else { return 0 };
        let c = CASES[k.case];
        candle_peer::setup(c.ty, &k.weights, c.rows, c.cols, &k.xs)
    });
    #[cfg(not(feature = "candle"))]
    0
}

/// With feature `candle`: one candle mat-vec, its first result; NaN otherwise.
#[no_mangle]
pub extern "C" fn candle_run() -> f32 {
    #[cfg(feature = "candle")]
    return candle_peer::run();
    #[cfg(not(feature = "candle"))]
    f32::NAN
}

/// The best backend's int8 kernels against the scalar backend's, cases `first..first + count`
/// ([`int8_check`]): how many results differ (`u32::MAX` if a call failed).
#[no_mangle]
pub extern "C" fn int8_check(first: u32, count: u32) -> u32 {
    int8_check::run(u64::from(first), u64::from(count))
}

/// Computes the bit-exact table's lines (`kquant_cases::bit_exact_lines`, labelled
/// `wasm32-workerd`), keeps them for [`text_ptr`], and answers their length in bytes.
#[no_mangle]
pub extern "C" fn bit_exact_lines() -> u32 {
    let text = kquant_cases::bit_exact_lines("wasm32-workerd").join("\n");
    let len = text.len() as u32;
    TEXT.with(|t| *t.borrow_mut() = text);
    len
}

/// Where the text [`bit_exact_lines`] made lives in linear memory.
#[no_mangle]
pub extern "C" fn text_ptr() -> *const u8 {
    TEXT.with(|t| t.borrow().as_ptr())
}

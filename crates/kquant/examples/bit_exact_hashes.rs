//! Prints one line per backend this machine runs, format and mode: `arch backend format mode
//! hash`, the hash (FNV-1a over the result bits, any NaN as one NaN) of the same seeded cases —
//! random blocks, eight random vectors and four edge vectors (zeros, huge, subnormal, an
//! infinity) in one batch. `scripts/bit-exact.sh` runs it natively, under qemu-aarch64 and under
//! Node (wasm32-wasip1) and checks that every line agrees.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{hash_bits, mat_mat, mat_mat_int8, random_blocks, random_x, Rng};
use kquant::{Backend, QMatrix, QuantType};

fn main() {
    let arch = std::env::consts::ARCH;
    for ty in QuantType::ALL {
        let mut rng = Rng::new(0xB17E + ty.ggml_type() as u64);
        let (rows, cols) = (96, 2048);
        let w = random_blocks(&mut rng, ty, rows * cols / 256);
        let m = QMatrix::new(ty, &w, rows, cols).expect("a valid shape");
        let mut xs = random_x(&mut rng, 8 * cols);
        let edge: Vec<f32> = (0..4 * cols)
            .map(|i| match i / cols {
                0 => 0.0,
                1 => 3.0e37 * if i % 2 == 0 { 1.0 } else { -1.0 },
                2 => 1.0e-42,
                _ if i % cols == 77 => f32::INFINITY,
                _ => 0.25,
            })
            .collect();
        xs.extend(edge);
        for backend in Backend::available() {
            for (mode, out) in [
                ("exact", mat_mat(backend, &m, &xs)),
                ("int8", mat_mat_int8(backend, &m, &xs)),
            ] {
                println!("{arch} {backend} {ty:?} {mode} {:016x}", hash_bits(&out));
            }
        }
    }
}

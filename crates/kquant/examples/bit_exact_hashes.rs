//! Prints one line per backend this machine runs, format and mode: `arch backend format mode
//! hash`, the hash (FNV-1a over the result bits, any NaN as one NaN) of the same seeded cases —
//! random blocks, eight random vectors and four edge vectors (zeros, huge, subnormal, an
//! infinity) in one batch. `scripts/bit-exact.sh` runs it natively, under qemu-aarch64 and under
//! Node (wasm32-wasip1) and checks that every line agrees.

#[path = "../tests/common/mod.rs"]
mod common;

use common::bit_exact_lines;

fn main() {
    for line in bit_exact_lines(std::env::consts::ARCH) {
        println!("{line}");
    }
}

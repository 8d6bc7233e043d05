//! One `mat_vec` on one backend, for instruction counting under callgrind:
//!
//! ```sh
//! valgrind --tool=callgrind --toggle-collect='*mat_vec_with*' \
//!     target/release/kernel-once q6_k avx2 [ROWS] [COLS] [int8]
//! ```

use std::hint::black_box;

use cobordism_benches::Case;
use kquant::{Backend, QMatrix, QuantType};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: kernel-once q4_k|q6_k BACKEND [ROWS] [COLS] [int8]";
    let ty = args
        .first()
        .and_then(|t| QuantType::from_name(t))
        .expect(usage);
    let backend = args
        .get(1)
        .and_then(|b| Backend::from_name(b))
        .expect(usage);
    let number = |i: usize, default| args.get(i).map_or(default, |v| v.parse().expect(usage));
    let case = Case {
        ty,
        rows: number(2, 1024),
        cols: number(3, 5376),
    };
    let (w, x) = case.data(1);
    let m = QMatrix::new(ty, &w, case.rows, case.cols).unwrap();
    let mut out = vec![0.0; case.rows];
    if args.get(4).is_some_and(|a| a == "int8") {
        let mut scratch = vec![0.0; m.int8_scratch_len()];
        m.mat_mat_int8_with(backend, black_box(&x), &mut out, &mut scratch)
    } else {
        let mut scratch = vec![0.0; m.scratch_len()];
        m.mat_vec_with(backend, black_box(&x), &mut out, &mut scratch)
    }
    .unwrap();
    println!(
        "{}: {} rows, out[0] = {}",
        backend,
        case.rows,
        black_box(out[0])
    );
}

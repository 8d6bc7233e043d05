//! Criterion: `mat_vec` per backend on real lm-head slice shapes, next to a sequential read of
//! the same bytes (the memory-bandwidth floor), in one run.
//!
//! `cargo bench -p cobordism-benches --bench mat_vec`

use std::hint::black_box;

use cobordism_benches::{sequential_read, CASES};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kquant::{Backend, QMatrix};

fn mat_vec(c: &mut Criterion) {
    for case in CASES {
        let (w, x) = case.data(1);
        let m = QMatrix::new(case.ty, &w, case.rows, case.cols).unwrap();
        let mut out = vec![0.0; case.rows];
        let mut scratch = vec![0.0; m.scratch_len()];
        let mut group = c.benchmark_group(case.label());
        group.sample_size(10);
        group.throughput(Throughput::Bytes(case.weight_bytes() as u64));
        group.bench_function("memory floor", |b| {
            b.iter(|| sequential_read(black_box(&w)))
        });
        for backend in Backend::available() {
            group.bench_function(backend.name(), |b| {
                b.iter(|| {
                    m.mat_vec_with(backend, black_box(&x), &mut out, &mut scratch)
                        .unwrap()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, mat_vec);
criterion_main!(benches);

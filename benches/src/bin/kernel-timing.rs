//! Median wall time of `mat_vec` per backend on the benchmark shapes next to a sequential read
//! of the same bytes (the memory floor), Q6_K also with its blocks in the packed6 layout, and of
//! batches, as Markdown tables; with `--json FILE`
//! also as JSON lines for the chart. Runs natively and on wasm32-wasip1 under Node (the wasm
//! harness):
//!
//! ```sh
//! cargo run --release -p cobordism-benches --bin kernel-timing \
//!     [-- RUNS] [--json FILE] [--case TYPE:ROWSxCOLS]… [--calls N]
//! cargo run --release -p cobordism-benches --bin kernel-timing --target wasm32-wasip1 [-- RUNS]
//! ```

use std::hint::black_box;

use cobordism_benches::{median_ms, sequential_read, TimingArgs};
use kquant::{repack, Backend, Layout, QMatrix};

fn main() {
    let TimingArgs {
        runs,
        json: json_path,
        cases,
        calls,
    } = TimingArgs::from_env();
    let mut json = String::new();
    let arch = std::env::consts::ARCH;
    println!("{arch}, median of {runs} runs after one warm-up");
    println!();
    println!("| case | kernel | ms | GB/s | × memory floor | vs scalar |");
    println!("|---|---|---:|---:|---:|---:|");
    let mut batches = Vec::new();
    for case in cases {
        let (w, x) = case.data(1);
        let m = QMatrix::new(case.ty, &w, case.rows, case.cols).unwrap();
        let mut out = vec![0.0; case.rows];
        let mut scratch = vec![0.0; m.scratch_len()];
        let gb = case.weight_bytes() as f64 / 1e9;
        let floor = median_ms(runs, calls, || {
            black_box(sequential_read(black_box(&w)));
        });
        // One row of the table and, if `charted`, one JSON line for the chart.
        let mut report = |kernel: &str, ms: f64, scalar_ms: Option<f64>, charted: bool| {
            let vs_scalar = scalar_ms.map_or(String::new(), |s| format!("{:.1}×", s / ms));
            println!(
                "| {} | {kernel} | {ms:.1} | {:.2} | {:.2} | {vs_scalar} |",
                case.label(),
                gb / (ms / 1e3),
                ms / floor
            );
            if charted {
                json += &format!(
                    "{{\"case\":\"{}\",\"kernel\":\"{arch} {kernel}\",\
                     \"ms\":{ms:.3},\"gbps\":{:.3}}}\n",
                    case.label(),
                    gb / (ms / 1e3)
                );
            }
        };
        report("memory floor", floor, None, true);
        let mut scalar_ms = None;
        for backend in Backend::available() {
            let ms = median_ms(runs, calls, || {
                m.mat_vec_with(backend, black_box(&x), &mut out, &mut scratch)
                    .unwrap()
            });
            let base = *scalar_ms.get_or_insert(ms);
            report(backend.name(), ms, Some(base), true);
        }
        let best = Backend::best();
        let mut int8_scratch = vec![0.0; m.int8_scratch_len()];
        // The int8 mode on every SIMD backend (AVX-512 with and without VNNI side by side).
        for backend in Backend::available().filter(|&b| b != Backend::Scalar) {
            let ms = median_ms(runs, calls, || {
                m.mat_mat_int8_with(backend, black_box(&x), &mut out, &mut int8_scratch)
                    .unwrap()
            });
            report(&format!("{backend} int8"), ms, scalar_ms, backend == best);
        }
        // Q6_K's packed6 layout: the same blocks repacked, the same bits (not charted).
        if Layout::Packed6.supports(case.ty) {
            let mut packed = w.clone();
            repack(case.ty, Layout::Ggml, Layout::Packed6, &mut packed).unwrap();
            let p = QMatrix::with_layout(case.ty, Layout::Packed6, &packed, case.rows, case.cols)
                .unwrap();
            for backend in Backend::available() {
                let ms = median_ms(runs, calls, || {
                    p.mat_vec_with(backend, black_box(&x), &mut out, &mut scratch)
                        .unwrap()
                });
                report(&format!("{backend}, packed6 layout"), ms, scalar_ms, false);
            }
            let ms = median_ms(runs, calls, || {
                p.mat_mat_int8_with(best, black_box(&x), &mut out, &mut int8_scratch)
                    .unwrap()
            });
            report(
                &format!("{best} int8, packed6 layout"),
                ms,
                scalar_ms,
                false,
            );
        }
        let single = median_ms(runs, calls, || {
            m.mat_vec_with(best, black_box(&x), &mut out, &mut scratch)
                .unwrap()
        });
        for n in [4, 8] {
            let xs = x.repeat(n);
            let mut outs = vec![0.0; n * case.rows];
            let mut scratch = vec![0.0; n * m.scratch_len()];
            let ms = median_ms(runs, calls, || {
                m.mat_mat_with(best, black_box(&xs), &mut outs, &mut scratch)
                    .unwrap()
            });
            batches.push(format!(
                "| {} | {best} | {n} | {ms:.1} | {:.1} | {:.2}× |",
                case.label(),
                ms / n as f64,
                single / (ms / n as f64)
            ));
        }
    }
    println!();
    println!(
        "| case | kernel | batch | ms per call | ms per vector | speedup per vector vs single |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for line in batches {
        println!("{line}");
    }
    if let Some(path) = json_path {
        std::fs::write(&path, json).expect("writing the JSON file");
    }
}

//! Median wall time of `mat_vec` per backend on the benchmark shapes next to a sequential read
//! of the same bytes (the memory floor), and of batches, as Markdown tables; with `--json FILE`
//! also as JSON lines for the chart. Runs natively and on wasm32-wasip1 under Node (the wasm
//! harness):
//!
//! ```sh
//! cargo run --release -p cobordism-benches --bin kernel-timing [-- RUNS] [--json FILE]
//! cargo run --release -p cobordism-benches --bin kernel-timing --target wasm32-wasip1 [-- RUNS]
//! ```

use std::hint::black_box;
use std::time::Instant;

use cobordism_benches::CASES;
use kquant::{Backend, QMatrix};

fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Reads every byte once (one u64 per 64-byte line plus the line's last byte).
fn sequential_read(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(64)
        .map(|c| u64::from_le_bytes(c[..8].try_into().unwrap()) ^ u64::from(c[63]))
        .fold(0, |a, b| a.wrapping_add(b))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().expect("RUNS must be a number"))
        .unwrap_or(7);
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .map(|i| args.get(i + 1).expect("--json FILE").clone());
    let mut json = String::new();
    let arch = std::env::consts::ARCH;
    println!("{arch}, median of {runs} runs after one warm-up");
    println!();
    println!("| case | kernel | ms | GB/s | vs scalar |");
    println!("|---|---|---:|---:|---:|");
    let mut batches = Vec::new();
    for case in CASES {
        let (w, x) = case.data(1);
        let m = QMatrix::new(case.ty, &w, case.rows, case.cols).unwrap();
        let mut out = vec![0.0; case.rows];
        let mut scratch = vec![0.0; m.scratch_len()];
        let gb = case.weight_bytes() as f64 / 1e9;
        let floor = median_ms(runs, || {
            black_box(sequential_read(black_box(&w)));
        });
        println!(
            "| {} | memory floor (sequential read) | {floor:.1} | {:.2} | |",
            case.label(),
            gb / (floor / 1e3)
        );
        json += &format!(
            "{{\"case\":\"{}\",\"kernel\":\"{arch} memory floor\",\"ms\":{floor:.3},\"gbps\":{:.3}}}\n",
            case.label(),
            gb / (floor / 1e3)
        );
        let mut scalar_ms = None;
        for backend in Backend::available() {
            let ms = median_ms(runs, || {
                m.mat_vec_with(backend, black_box(&x), &mut out, &mut scratch)
                    .unwrap()
            });
            let base = *scalar_ms.get_or_insert(ms);
            json += &format!(
                "{{\"case\":\"{}\",\"kernel\":\"{arch} {backend}\",\"ms\":{ms:.3},\"gbps\":{:.3}}}\n",
                case.label(),
                gb / (ms / 1e3)
            );
            println!(
                "| {} | {backend} | {ms:.1} | {:.2} | {:.1}× |",
                case.label(),
                gb / (ms / 1e3),
                base / ms
            );
        }
        let best = Backend::best();
        let mut int8_scratch = vec![0.0; m.int8_scratch_len()];
        let ms = median_ms(runs, || {
            m.mat_mat_int8_with(best, black_box(&x), &mut out, &mut int8_scratch)
                .unwrap()
        });
        println!(
            "| {} | {best} int8 (fast mode) | {ms:.1} | {:.2} | {:.1}× |",
            case.label(),
            gb / (ms / 1e3),
            scalar_ms.unwrap_or(ms) / ms
        );
        json += &format!(
            "{{\"case\":\"{}\",\"kernel\":\"{arch} {best} int8\",\"ms\":{ms:.3},\"gbps\":{:.3}}}\n",
            case.label(),
            gb / (ms / 1e3)
        );
        let single = median_ms(runs, || {
            m.mat_vec_with(best, black_box(&x), &mut out, &mut scratch)
                .unwrap()
        });
        for n in [4, 8] {
            let xs = x.repeat(n);
            let mut outs = vec![0.0; n * case.rows];
            let mut scratch = vec![0.0; n * m.scratch_len()];
            let ms = median_ms(runs, || {
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

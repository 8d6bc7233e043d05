//! Median wall time of peer k-quant mat-vecs (candle-core) on the benchmark shapes, next to
//! kquant's fastest backend (exact and int8 modes) timed in the same run on the same bytes,
//! plus the int8 mode's and the peer's error against kquant's exact result. Markdown on
//! stdout; with `--json FILE` the peer rows also as JSON lines in `kernel-timing`'s schema
//! (kquant's rows come from `kernel-timing --json`).
//!
//! ```sh
//! cargo run --release -p cobordism-peers --bin peer-timing [-- RUNS] [--json FILE]
//! cargo run --release -p cobordism-peers --bin peer-timing --target wasm32-wasip1 [-- RUNS]
//! ```
//!
//! candle runs single-threaded (`CANDLE_NUM_THREADS=1`) unless the environment says otherwise.

use std::hint::black_box;

use cobordism_benches::{median_ms, TimingArgs, CASES};
use cobordism_peers::candle::{candle_path, pin_threads, CandleMatrix};
use cobordism_peers::timing::Row;
use kquant::{Backend, QMatrix};

/// `max abs(a − b) / max abs(b)`.
fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
    diff / scale
}

fn main() {
    let threads = pin_threads();
    let TimingArgs {
        runs,
        json: json_path,
    } = TimingArgs::from_env();
    let arch = std::env::consts::ARCH;
    let best = Backend::best();
    let exact_name = format!("kquant {arch} {best}");
    let int8_name = format!("kquant {arch} {best} int8");
    let candle_name = format!("candle {arch} {}", candle_path());
    println!(
        "{arch}, median of {runs} runs after one warm-up; candle-core 0.11.1, {threads} thread(s)"
    );
    println!();
    println!("| case | kernel | ms | GB/s | speed vs candle |");
    println!("|---|---|---:|---:|---:|");
    let mut json = String::new();
    let mut errors = Vec::new();
    for case in CASES {
        let label = case.label();
        let (w, x) = case.data(1);
        let kq = QMatrix::new(case.ty, &w, case.rows, case.cols).expect("valid case");
        let peer = CandleMatrix::new(case.ty, &w, case.rows, case.cols);
        let mut exact = vec![0.0; case.rows];
        let mut out = vec![0.0; case.rows];
        let mut scratch = vec![0.0; kq.scratch_len()];
        let mut int8_scratch = vec![0.0; kq.int8_scratch_len()];

        kq.mat_vec(&x, &mut exact).expect("kquant mat_vec");
        kq.mat_mat_int8_with(best, &x, &mut out, &mut int8_scratch)
            .expect("kquant int8");
        let int8_err = max_rel_err(&out, &exact);
        peer.mat_vec(&x, &mut out);
        errors.push((label.clone(), int8_err, max_rel_err(&out, &exact)));

        let exact_ms = median_ms(runs, || {
            kq.mat_vec_with(best, black_box(&x), &mut out, &mut scratch)
                .expect("kquant mat_vec")
        });
        let int8_ms = median_ms(runs, || {
            kq.mat_mat_int8_with(best, black_box(&x), &mut out, &mut int8_scratch)
                .expect("kquant int8")
        });
        let peer_ms = median_ms(runs, || peer.mat_vec(black_box(&x), &mut out));
        for (kernel, ms) in [
            (&exact_name, exact_ms),
            (&int8_name, int8_ms),
            (&candle_name, peer_ms),
        ] {
            let row = Row {
                case: &label,
                kernel,
                ms,
                bytes: case.weight_bytes(),
            };
            println!("{} {:.2}× |", row.markdown(), peer_ms / ms);
            if kernel == &candle_name {
                json += &row.json();
            }
        }
    }
    println!();
    println!("| case | max abs(y − y_exact) / max abs(y_exact): {int8_name} | {candle_name} |");
    println!("|---|---:|---:|");
    for (label, int8_err, peer_err) in errors {
        println!("| {label} | {int8_err:.2e} | {peer_err:.2e} |");
    }
    if let Some(path) = json_path {
        std::fs::write(&path, json).expect("writing the JSON file");
    }
}

//! Median wall time of peer k-quant mat-vecs (llama.cpp's ggml, candle-core) on the benchmark
//! shapes, next to kquant's fastest backend (exact and int8 modes) timed in the same run on the
//! same bytes, the kernels alternated call by call, plus the int8 mode's and the peers' error
//! against kquant's exact result. Markdown on stdout; with `--json FILE` the peer rows also as
//! JSON lines in `kernel-timing`'s schema (kquant's rows come from `kernel-timing --json`).
//!
//! ```sh
//! GGML_SRC=$(scripts/fetch-ggml.sh) cargo run --release -p cobordism-peers --bin peer-timing \
//!     [-- RUNS] [--json FILE] [--case TYPE:ROWSxCOLS]… [--calls N]
//! cargo run --release -p cobordism-peers --bin peer-timing --target wasm32-wasip1 [-- RUNS]
//! ```
//!
//! ggml is in only where the build had `GGML_SRC` (x86_64; `build.rs`); candle runs
//! single-threaded (`CANDLE_NUM_THREADS=1`) unless the environment says otherwise.

use std::hint::black_box;

use cobordism_benches::{sequential_read, TimingArgs};
use cobordism_peers::candle::{candle_path, pin_threads, CandleMatrix};
use cobordism_peers::timing::Row;
use kquant::{Backend, QMatrix};

/// `max abs(a − b) / max abs(b)`.
fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
    diff / scale
}

/// A kernel's name and one call of it.
type Kernel<'a> = (&'a String, Box<dyn FnMut() + 'a>);

/// The medians of `kernels` in milliseconds per call, each timed `runs` times (`calls` calls a
/// time) after one warm-up, alternated (so that the machine's drift falls on all of them alike),
/// each round starting one kernel later than the last (so that no kernel always runs right after
/// the same one).
fn alternated_medians(runs: usize, calls: usize, kernels: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    for k in kernels.iter_mut() {
        k();
    }
    let n = kernels.len();
    let mut times = vec![Vec::with_capacity(runs); n];
    for round in 0..runs {
        for i in (0..n).map(|k| (round + k) % n) {
            let start = std::time::Instant::now();
            for _ in 0..calls {
                kernels[i]();
            }
            times[i].push(start.elapsed().as_secs_f64() * 1e3 / calls as f64);
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect()
}

fn main() {
    let threads = pin_threads();
    let TimingArgs {
        runs,
        json: json_path,
        cases,
        calls,
    } = TimingArgs::from_env();
    let arch = std::env::consts::ARCH;
    let best = Backend::best();
    let exact_name = format!("kquant {arch} {best}");
    let int8_name = format!("kquant {arch} {best} int8");
    // The int8 mode on every vector backend (not the baseline scalar and SSE2 ones): the
    // one-vector comparison with ggml holds per backend, not only for the best.
    let int8_backends: Vec<(Backend, String)> = Backend::available()
        .filter(|b| !matches!(b, Backend::Scalar | Backend::Sse2))
        .map(|b| (b, format!("kquant {arch} {b} int8")))
        .collect();
    let candle_name = format!("candle {arch} {}", candle_path());
    let ggml_name = format!("ggml {arch} (llama-cpp-python 0.3.36, -march=native)");
    let with_ggml = cfg!(ggml);
    let floor_name = "memory floor (sequential read)".to_string();
    println!(
        "{arch}, median of {runs} runs after one warm-up, kernels alternated call by call; \
         candle-core 0.11.1, {threads} thread(s); ggml one thread{}",
        if with_ggml {
            ""
        } else {
            " — not built here (GGML_SRC unset: GGML_SRC=$(scripts/fetch-ggml.sh) on x86_64)"
        }
    );
    println!();
    println!("| case | kernel | ms | GB/s | speed vs ggml | speed vs candle |");
    println!("|---|---|---:|---:|---:|---:|");
    let mut json = String::new();
    let mut errors = Vec::new();
    for case in cases {
        let label = case.label();
        let (w, x) = case.data(1);
        let kq = QMatrix::new(case.ty, &w, case.rows, case.cols).expect("valid case");
        let peer = CandleMatrix::new(case.ty, &w, case.rows, case.cols);
        #[cfg(ggml)]
        let mut ggml = cobordism_peers::ggml::GgmlMatrix::new(case.ty, &w, case.rows, case.cols);
        let mut exact = vec![0.0; case.rows];
        let mut out = vec![0.0; case.rows];
        let mut scratch = vec![0.0; kq.scratch_len()];
        let mut int8_scratch = vec![0.0; kq.int8_scratch_len()];

        kq.mat_vec(&x, &mut exact).expect("kquant mat_vec");
        kq.mat_mat_int8_with(best, &x, &mut out, &mut int8_scratch)
            .expect("kquant int8");
        let int8_err = max_rel_err(&out, &exact);
        peer.mat_vec(&x, &mut out);
        let candle_err = max_rel_err(&out, &exact);
        #[cfg(ggml)]
        ggml.mat_vec(&x, &mut out);
        let ggml_err = with_ggml.then(|| max_rel_err(&out, &exact));
        errors.push((label.clone(), int8_err, ggml_err, candle_err));

        let x = &x;
        let mut kernels: Vec<Kernel> = Vec::new();
        // The memory floor (each 64-byte line of the weights read once), alternated with the
        // kernels like them.
        let w = &w;
        kernels.push((
            &floor_name,
            Box::new(move || {
                black_box(sequential_read(black_box(w)));
            }),
        ));
        #[cfg(ggml)]
        {
            let mut y = vec![0.0; case.rows];
            kernels.push((
                &ggml_name,
                Box::new(move || ggml.mat_vec(black_box(x), &mut y)),
            ));
        }
        let (kq, peer) = (&kq, &peer);
        let mut y = vec![0.0; case.rows];
        kernels.push((
            &exact_name,
            Box::new(move || {
                kq.mat_vec_with(best, black_box(x), &mut y, &mut scratch)
                    .expect("kquant mat_vec")
            }),
        ));
        for (backend, name) in &int8_backends {
            let (backend, mut y) = (*backend, vec![0.0; case.rows]);
            let mut int8_scratch = int8_scratch.clone();
            kernels.push((
                name,
                Box::new(move || {
                    kq.mat_mat_int8_with(backend, black_box(x), &mut y, &mut int8_scratch)
                        .expect("kquant int8")
                }),
            ));
        }
        let mut y = vec![0.0; case.rows];
        kernels.push((
            &candle_name,
            Box::new(move || peer.mat_vec(black_box(x), &mut y)),
        ));
        let mut kernel_calls: Vec<&mut dyn FnMut()> = kernels
            .iter_mut()
            .map(|(_, k)| &mut **k as &mut dyn FnMut())
            .collect();
        let medians = alternated_medians(runs, calls, &mut kernel_calls);
        let of = |name: &String| {
            kernels
                .iter()
                .zip(&medians)
                .find(|((n, _), _)| *n == name)
                .map(|(_, ms)| *ms)
        };
        let (ggml_ms, candle_ms) = (of(&ggml_name), of(&candle_name));
        for ((kernel, _), &ms) in kernels.iter().zip(&medians) {
            let row = Row {
                case: &label,
                kernel,
                ms,
                bytes: case.weight_bytes(),
            };
            let vs = |peer: Option<f64>| peer.map_or("–".into(), |p| format!("{:.2}×", p / ms));
            println!("{} {} | {} |", row.markdown(), vs(ggml_ms), vs(candle_ms));
            if *kernel == &candle_name || *kernel == &ggml_name {
                json += &row.json();
            }
        }
    }
    println!();
    println!(
        "| case | max abs(y − y_exact) / max abs(y_exact): {int8_name} | {ggml_name} | \
         {candle_name} |"
    );
    println!("|---|---:|---:|---:|");
    for (label, int8_err, ggml_err, candle_err) in errors {
        let ggml_err = ggml_err.map_or("–".into(), |e| format!("{e:.2e}"));
        println!("| {label} | {int8_err:.2e} | {ggml_err} | {candle_err:.2e} |");
    }
    if let Some(path) = json_path {
        std::fs::write(&path, json).expect("writing the JSON file");
    }
}
